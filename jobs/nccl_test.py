"""``nccl-test``: nccl-tests' all_reduce_perf across the group's nodes as an MPIJob, with
``NCCL_DEBUG=INFO`` so the log shows which network NCCL chose (EFA, or the fall-back to sockets)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from facts.problems import Problem
from facts.versions import NCCL_TESTS_IMAGE
from jobs.base import GroupFacts
from jobs.mpi import MpiBase

# The default image's NCCL is built for these GPUs only (see facts/versions.py).
NCCL_TESTS_IMAGE_GPU_MODELS = ("A100", "H100", "H200")
NCCL_ALL_REDUCE_PERF = "/opt/nccl-tests/build/all_reduce_perf"
# 8 B to 2 GiB, doubling, one GPU per rank: enough to reach peak bus bandwidth on 2 nodes.
NCCL_TEST_ARGS = ("-b", "8", "-e", "2G", "-f", "2", "-g", "1")


class NcclTestSpec(MpiBase):
    """nccl-tests all_reduce_perf across the group's nodes, NCCL_DEBUG=INFO."""

    RESERVED_ENV = {
        **MpiBase.RESERVED_ENV,
        "NCCL_DEBUG": "is always INFO for nccl-test (the log must show which provider NCCL chose)",
    }

    kind: Literal["nccl-test"] = Field(description="`nccl-test`")
    nodes: int = Field(2, ge=1, description="worker nodes; two by default: the point is the traffic between them")
    image: str = Field(NCCL_TESTS_IMAGE, description="an nccl-tests image (default: AWS's build, for A100/H100/H200)")
    command: list[str] = Field(default_factory=lambda: [NCCL_ALL_REDUCE_PERF], min_length=1, description="the nccl-tests binary")
    args: list[str] = Field(default_factory=lambda: list(NCCL_TEST_ARGS), description="its arguments (default: 8 B to 2 GiB)")

    def derived_env(self) -> dict[str, str]:
        # NCCL_DEBUG=INFO: the log then says "NET/OFI Selected Provider is efa" or shows the fall-back
        # to sockets ("NET/Socket"), which would otherwise go unnoticed.
        return {"NCCL_DEBUG": "INFO"}

    def check_group(self, key: str, problems: list[Problem], group: GroupFacts) -> None:
        it = group.instance
        if self.image == NCCL_TESTS_IMAGE and it.gpu_model not in NCCL_TESTS_IMAGE_GPU_MODELS:
            problems.append(
                Problem(
                    f"{key}.image",
                    f"the default nccl-tests image is built for {', '.join(NCCL_TESTS_IMAGE_GPU_MODELS)} GPUs and cannot run on "
                    f"node group {group.name!r} ({it.name}, {it.gpu_model}); set image to an nccl-tests build for {it.gpu_model}",
                )
            )
