"""Integration test: the fabric check and slow-node detection in real CPU torchrun runs, with the progress guard and
its modules exactly as the rendered job ships them (the ``<job>-guard`` ConfigMap written out) and the worker
command line as rendered (``torchrun <guard> <options> --same-python -- <script> <args>``).

Each "node" is one torchrun agent on this machine (c10d rendezvous on loopback, one process per node), with the pod
env the stack gives it (NODE_NAME, POD_NAME, POD_NAMESPACE) and a fake Kubernetes API (tests/fake_kube_api.py) in
place of the API server. Local overrides, each because this is one CPU machine: PET_* as the training operator would
set them but on loopback with a fixed node count; per-node folders for what is per pod (the step files, NCCL's
debug file); the EFA counters from a fake sysfs tree; short windows.

Runs: one rank slowed on purpose is found within the windows, its node's exact patch and pod deletion recorded;
an even run raises nothing; the fabric check with `warn` on a socket fall-back reports and lets the job finish;
with `enforce` it stops the job; on a group without EFA the check is off and the job runs as before.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="torch is not installed: run `bash scripts/test_integration.sh`")

import jobs as J  # noqa: E402
from facts import job_signals  # noqa: E402
from jobs import resilience  # noqa: E402
from tests.fake_kube_api import FakeKubeApi, serve  # noqa: E402
from tests.helpers import ROOT, make_ctx  # noqa: E402

WORKER = Path(__file__).with_name("step_worker.py")
LOGS = ROOT / "tests" / "data" / "nccl_logs"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
RUN_TIMEOUT = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rendered(group: str, args: list[str], **over: Any) -> tuple[list[str], dict[str, str]]:
    """The job's worker command line as rendered (command + args) and its guard ConfigMap's files."""
    raw = {
        "name": "bert",
        "kind": "pytorch-elastic",
        "nodeGroup": group,
        "image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    }
    raw |= {"command": ["torchrun", str(WORKER)], "args": args, "rendezvous": "c10d", **over}
    manifests = J.build_manifests(J.JOB_KINDS["pytorch-elastic"].model_validate(raw), make_ctx())
    job = next(m for m in manifests if m["kind"] == "PyTorchJob")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    guard = [m for m in manifests if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "bert-guard"]
    files = guard[0]["data"] if guard else {}  # no guard: no progress, checkpoints or check
    return container["command"] + container.get("args", []), files


def run_nodes(tmp: Path, line: list[str], files: dict[str, str], api: dict[str, str], nodes: int, extra=None):
    """Start one agent per node with the rendered line; wait; (exit codes, each node's output)."""
    shipped = tmp / "opt-gputraining"
    shipped.mkdir()
    for name, text in files.items():
        (shipped / name).write_text(text)
    assert line[0] == "torchrun" and (line[1] == resilience.GUARD_PATH) == bool(files)
    guard = [str(shipped / resilience.GUARD_FILE)] if files else [line[1]]
    argv = [sys.executable, "-m", "torch.distributed.run", *guard, *line[2:]]
    rdzv, collector = free_port(), free_port()
    procs = []
    for i in range(nodes):
        node_dir = tmp / f"node-{i}"
        node_dir.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_", "NCCL_"))}
        env |= {
            "PET_NNODES": f"{nodes}:{nodes}",
            "PET_NPROC_PER_NODE": "1",
            "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"127.0.0.1:{rdzv}",
            "PET_RDZV_ID": f"bert-{rdzv}",
            "PET_MAX_RESTARTS": "0",
            "PET_LOCAL_ADDR": "127.0.0.1",
            "GLOO_SOCKET_IFNAME": "lo",
            "NODE_NAME": f"node-{i}",
            "POD_NAME": f"bert-worker-{i}",
            "POD_NAMESPACE": "training",
            "TMPDIR": str(node_dir),
            "GPUTRAINING_STEP_DIR": str(node_dir / "steps"),
            "GPUTRAINING_SLOW_NODE_PORT": str(collector),
            "NCCL_DEBUG_FILE": str(node_dir / "nccl.%h.%p.log"),
            **api,
            **(extra or {}),
        }
        out = (node_dir / "out.log").open("w")
        procs.append((subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT), node_dir / "out.log"))
    codes = []
    deadline = time.monotonic() + RUN_TIMEOUT
    for proc, _ in procs:
        try:
            codes.append(proc.wait(max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append(None)
    return codes, [path.read_text() for _, path in procs]


def signals(outputs: list[str]) -> list[dict[str, Any]]:
    return [
        json.loads(x) for out in outputs for x in out.splitlines() if x.startswith("{") and job_signals.SIGNAL_KEY in x
    ]


SLOW_NODE = {"factor": 1.5, "windows": 3, "windowSeconds": 1}


def test_one_rank_slowed_on_purpose_is_found_tainted_and_left(tmp_path):
    args = ["--steps", "45", "--work", "0.05", "--slow-node", "node-2", "--slow-factor", "5"]
    line, files = rendered("p3", args, nodes=3, minNodes=2, maxNodes=3, slowNode=SLOW_NODE)
    fake = FakeKubeApi(
        {f"node-{i}": {"metadata": {"name": f"node-{i}"}, "spec": {"taints": [GPU_TAINT]}} for i in range(3)},
        pods={f"bert-worker-{i}": f"node-{i}" for i in range(3)},
    )
    with serve(fake, tmp_path / "sa") as api:
        codes, outputs = run_nodes(tmp_path, line, files, api, 3)
    assert codes == [0, 0, 0], "\n".join(outputs)
    found = [s for s in signals(outputs) if s[job_signals.SIGNAL_KEY] == "slow_node"]
    assert [(s["node"], s["pod"]) for s in found] == [("node-2", "bert-worker-2")] and found[0]["value"] > 1.5
    # Found within the windows: rank 0's guard printed at most windows + 2 of its own step_time lines before it.
    rank0 = next(out for out in outputs if '"slow_node"' in out)
    before = rank0.split('"slow_node"')[0]
    assert before.count('"step_time"') <= SLOW_NODE["windows"] + 2  # a node's log: its own ranks' lines
    taint = {"key": "gputraining/slow-node", "value": "bert", "effect": "NoSchedule"}
    assert fake.of("PATCH") == [
        (
            "/api/v1/nodes/node-2",
            [
                {"op": "test", "path": "/spec/taints", "value": [GPU_TAINT]},
                {"op": "add", "path": "/spec/taints/-", "value": taint},
            ],
        )
    ]
    assert [p for p, _ in fake.of("DELETE")] == ["/api/v1/namespaces/training/pods/bert-worker-2"]
    assert [e["reason"] for _, e in fake.of("POST", "/events")] == ["SlowNode"]


def test_an_even_run_raises_nothing(tmp_path):
    line, files = rendered("p3", ["--steps", "60", "--work", "0.1"], nodes=3, slowNode=SLOW_NODE)
    fake = FakeKubeApi()
    with serve(fake, tmp_path / "sa") as api:
        codes, outputs = run_nodes(tmp_path, line, files, api, 3)
    assert codes == [0, 0, 0], "\n".join(outputs)
    found = signals(outputs)
    assert {s["node"] for s in found if s[job_signals.SIGNAL_KEY] == "step_time"} == {"node-0", "node-1", "node-2"}
    assert [s for s in found if s[job_signals.SIGNAL_KEY] == "slow_node"] == [] and fake.requests == []


def fabric_run(tmp_path, mode: str, group: str = "p4d") -> tuple[list, list[str], FakeKubeApi]:
    args = ["--steps", "40", "--work", "0.1", "--nccl-log", str(LOGS / "socket_fallback_mpi.log")]
    line, files = rendered(group, args, nodes=2, **({"fabric": mode} if mode else {}))
    sysfs = tmp_path / "sys"
    for i in range(4):
        counters = sysfs / f"rdmap{i}s0" / "ports" / "1" / "hw_counters"
        counters.mkdir(parents=True)
        (counters / "tx_bytes").write_text("0\n")
    extra = {"GPUTRAINING_INFINIBAND": str(sysfs), "GPUTRAINING_FABRIC_COUNTER_SECONDS": "1"}
    fake = FakeKubeApi()
    with serve(fake, tmp_path / "sa") as api:
        codes, outputs = run_nodes(tmp_path, line, files, api, 2, extra)
    return codes, outputs, fake


def test_fabric_warn_on_a_socket_fallback_reports_and_the_job_finishes(tmp_path):
    codes, outputs, fake = fabric_run(tmp_path, "warn")
    assert codes == [0, 0], "\n".join(outputs)
    fallbacks = [s for s in signals(outputs) if s[job_signals.SIGNAL_KEY] == "fabric_fallback"]
    assert sorted(s["node"] for s in fallbacks) == ["node-0", "node-1"]
    assert sorted(e["involvedObject"]["name"] for _, e in fake.of("POST", "/events")) == [
        "bert-worker-0",
        "bert-worker-1",
    ]
    assert all("step 39" in out for out in outputs)


def test_fabric_enforce_stops_the_job(tmp_path):
    codes, outputs, fake = fabric_run(tmp_path, "")  # the default on an EFA group with 2 nodes: enforce
    assert all(code not in (0, None) for code in codes), codes
    assert any("fabric check failed on node node-" in out and "(exit 78)" in out for out in outputs)
    assert not any("step 39" in out for out in outputs)
    assert {e["reason"] for _, e in fake.of("POST", "/events")} == {"FabricFallback"}


def test_without_efa_the_check_is_off_and_the_job_runs_as_before(tmp_path):
    codes, outputs, fake = fabric_run(tmp_path, "", group="p3")
    assert codes == [0, 0] and fake.requests == [] and signals(outputs) == []
    assert all("step 39" in out and "progress-guard" not in out for out in outputs)
