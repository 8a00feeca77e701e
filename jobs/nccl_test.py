"""``nccl-test``: nccl-tests' all_reduce_perf across the group's nodes as an MPIJob, with
``NCCL_DEBUG=INFO`` so the log shows which network NCCL chose, behind a health gate
(``jobs/scripts/nccl_gate.sh``): the job fails when NCCL did not select EFA on an EFA group (the
silent fall-back to sockets) or when the peak bus bandwidth is below ``minBusBandwidthGBps``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from facts.problems import Problem
from facts.versions import NCCL_TESTS_IMAGE
from jobs.base import Int32
from jobs.mpi import MpiBase, mpirun_command
from jobs.pod import job_efa_interfaces
from jobs.targets import GroupFacts, JobTarget

# The default image's NCCL is built for these GPUs only (see facts/versions.py): sm_80 to sm_100,
# and B300 (compute capability 10.3) runs the sm_100 code (CUDA runs a cubin on any GPU of its
# major version with an equal or higher minor).
NCCL_TESTS_IMAGE_GPU_MODELS = ("A100", "H100", "H200", "B200", "B300")
NCCL_ALL_REDUCE_PERF = "/opt/nccl-tests/build/all_reduce_perf"
# 8 B to 2 GiB, doubling, one GPU per rank: enough to reach peak bus bandwidth on 2 nodes.
NCCL_TEST_ARGS = ("-b", "8", "-e", "2G", "-f", "2", "-g", "1")
# The gate the launcher runs around mpirun (bash and POSIX awk, both in the nccl-tests images).
GATE_SCRIPT = (Path(__file__).parent / "scripts" / "nccl_gate.sh").read_text()
# Default minimum peak bus bandwidth between nodes: this share of the group's EFA bandwidth, per
# type: the peak bandwidth (EC2 DescribeInstanceTypes, NetworkCards[].PeakBandwidthInGbps, in the
# catalog) of the network cards that carry its EFA interfaces (facts.instance_types.efa_layout; on
# p6-b300 cards 1-16, not the ENA-only card 0). The share is from a measurement: AWS measured
# 42.0 GB/s on 2 x p4d.24xlarge with 4 EFA (84% of 400 Gbit/s = 50 GB/s), 5.9 GB/s with 1 EFA (47%
# of one 100 Gbit/s interface) and 2.4 GB/s over sockets. 35% fails a p4d on 1 EFA or on sockets,
# and passes a p3dn pair (one interface, no GPUDirect RDMA) near the one-interface figure.
DEFAULT_MIN_BUSBW_SHARE = 0.35


def default_min_bus_bandwidth(nodes: int, efa_interfaces: int, efa_gbps: float) -> float:
    """35% of the EFA bandwidth of a node (Gbit/s, ``JobTarget.efa_gbps``) in GB/s for a test between
    2+ nodes over EFA; 0 (no bandwidth gate) on one node, where NCCL does not use the network, or
    without EFA."""
    if nodes < 2 or not efa_interfaces:
        return 0.0
    return round(efa_gbps / 8 * DEFAULT_MIN_BUSBW_SHARE, 2)


class NcclTestSpec(MpiBase):
    """nccl-tests all_reduce_perf across the group's nodes, NCCL_DEBUG=INFO."""

    RESERVED_ENV = {
        **MpiBase.RESERVED_ENV,
        "NCCL_DEBUG": "is always INFO for nccl-test (the log must show which provider NCCL chose)",
    }

    kind: Literal["nccl-test"] = Field(description="`nccl-test`")
    nodes: Int32 = Field(2, ge=1, description="worker nodes; two by default: the point is the traffic between them")
    image: str = Field(
        NCCL_TESTS_IMAGE, description="an nccl-tests image (default: AWS's build, for A100/H100/H200/B200/B300)"
    )
    command: list[str] = Field(
        default_factory=lambda: [NCCL_ALL_REDUCE_PERF], min_length=1, description="the nccl-tests binary"
    )
    args: list[str] = Field(
        default_factory=lambda: list(NCCL_TEST_ARGS), description="its arguments (default: 8 B to 2 GiB)"
    )
    min_bus_bandwidth_gbps: float | None = Field(
        None,
        ge=0,
        alias="minBusBandwidthGBps",
        description=(
            "fail the job when the peak bus bandwidth (GB/s) is lower; default: 35% of the group's EFA bandwidth with "
            "2+ nodes on EFA, else 0"
        ),
    )

    def gate(self, target: JobTarget) -> tuple[bool, float]:
        """(EFA required, minimum peak bus bandwidth in GB/s) on ``target``."""
        efa = job_efa_interfaces(self, target)
        minimum = self.min_bus_bandwidth_gbps
        if minimum is None:
            minimum = default_min_bus_bandwidth(self.nodes, efa, target.efa_gbps)
        return bool(efa) and self.nodes >= 2, minimum

    def launcher_command(self, target: JobTarget, forward: Sequence[str]) -> list[str]:
        require_efa, minimum = self.gate(target)
        mpirun = mpirun_command(self, target, forward)
        return [
            "/bin/bash",
            "-c",
            GATE_SCRIPT,
            "nccl-gate",
            "run",
            "1" if require_efa else "0",
            f"{minimum:g}",
            "--",
            *mpirun,
        ]

    def derived_env(self) -> dict[str, str]:
        # NCCL_DEBUG=INFO: the log then says "NET/OFI Selected Provider is efa" or shows the fall-back
        # to sockets ("NET/Socket"), which would otherwise go unnoticed.
        return {"NCCL_DEBUG": "INFO"}

    def check_group(self, key: str, problems: list[Problem], group: GroupFacts) -> None:
        super().check_group(key, problems, group)
        it = group.instance
        if self.image == NCCL_TESTS_IMAGE and it.gpu_model not in NCCL_TESTS_IMAGE_GPU_MODELS:
            problems.append(
                Problem(
                    f"{key}.image",
                    f"the default nccl-tests image is built for {', '.join(NCCL_TESTS_IMAGE_GPU_MODELS)} GPUs and "
                    f"cannot run on node group {group.name!r} ({it.name}, {it.gpu_model}); set image to an nccl-tests "
                    f"build for {it.gpu_model}",
                )
            )
