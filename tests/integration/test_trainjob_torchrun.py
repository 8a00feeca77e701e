"""Integration test: the dev stack's TrainJob (``operator: trainer``) started as Trainer v2.2.1 starts it: a real
CPU torchrun per node with the env Trainer's torch plugin gives each node (pkg/runtime/framework/plugins/torch/
torch.go at v2.2.1, EnforceMLPolicy: PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK from the Job's completion
index, PET_MASTER_ADDR ``<name>-node-0-0.<name>``, PET_MASTER_PORT 29500), as jobs/trainjob_merge.py makes the
node pod of the plan's own runtime and TrainJob. torchrun's default (static) rendezvous then meets on node 0.

The only changes, each because this is one CPU machine and not EKS: node 0's address is loopback, the port a
free one, one process per node instead of the group's GPUs, and gloo on loopback.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from pathlib import Path

import pytest

pytest.importorskip(
    "torch",
    reason="torch is not installed: run `bash scripts/test_integration.sh`, "
    "which installs requirements-integration.txt",
)

from jobs import trainjob_merge as merge  # noqa: E402
from tests.helpers import dev_values, run_stack  # noqa: E402
from tests.integration.elastic_helpers import LOCAL_NPROC, RUN_TIMEOUT, WORKER, Node, job_problems, report, wait_all  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node_env(container: dict, index: int) -> dict[str, str]:
    """The container's env as the kubelet gives node ``index`` (its fieldRefs resolved); secrets left out."""
    out = {}
    for e in container.get("env") or []:
        if "value" in e:
            out[e["name"]] = e["value"]
        elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == merge.COMPLETION_INDEX:
            out[e["name"]] = str(index)
    return out


def test_the_dev_trainjob_runs_torchrun_with_trainers_env(tmp_path: Path) -> None:
    plan = run_stack(dev_values(), "dev")
    objects = plan.kubernetes_objects()
    runtimes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterTrainingRuntime"}
    job = next(o for o in objects if o["kind"] == "TrainJob")
    name = job["metadata"]["name"]
    (node,) = merge.replica_sets(job, runtimes).values()
    (container,) = node["template"]["spec"]["containers"]
    count = node["replicas"]
    first = _node_env(container, 0)
    assert first["PET_NNODES"] == str(count) and count >= 2
    assert first["PET_MASTER_ADDR"] == f"{name}-node-0-0.{name}" and first["PET_MASTER_PORT"] == "29500"
    assert first["PET_NPROC_PER_NODE"] == "8"  # the p4d group's GPUs

    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PET_", "TORCHELASTIC_")) and k not in ("MASTER_ADDR", "MASTER_PORT")
    }
    local = {
        "PET_MASTER_ADDR": "127.0.0.1",  # node 0 is this machine
        "PET_MASTER_PORT": str(_free_port()),
        "PET_NPROC_PER_NODE": str(LOCAL_NPROC),
        "GLOO_SOCKET_IFNAME": "lo",
    }
    marker = f"trainer-{uuid.uuid4().hex[:8]}"
    nodes: list[Node] = []
    try:
        for i in range(count):
            node_dir = tmp_path / f"{name}-node-0-{i}"
            node_dir.mkdir()
            argv = [sys.executable, "-m", "torch.distributed.run", str(WORKER), "--job", name, "--run-marker", marker]
            env = {**inherited, **_node_env(container, i), **local, "TMPDIR": str(node_dir)}
            nodes.append(Node(f"{name}-node-0-{i}", name, argv, env, node_dir / "torchrun.log").start())
        codes = wait_all(nodes, RUN_TIMEOUT)
    finally:
        for n in nodes:
            if n.returncode is None:
                n.kill()
    problems = job_problems(name, nodes, codes, count * LOCAL_NPROC)
    assert not problems, report(f"{name} did not run as Trainer starts it", problems, nodes, [f"local {local}"])
