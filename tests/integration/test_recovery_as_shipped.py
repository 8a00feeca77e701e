"""Integration test (issue 37): the dev stack's elastic job recovers from a hung rank, a replaced pod (worker 0)
and a checkpoint cut off mid-save, on the stack's etcd as shipped and with c10d, on an idle machine and with
every core busy (the failures of issue 37 were races that showed only under load).

What runs, with no cluster (as tests/integration/test_hang_and_resume.py, recovery_helpers.py):

- the offline plan of the dev stack with its elastic job as shipped (AWS's image, the stack's etcd, maxRestarts,
  progress and checkpoints keys) but for what a test must change: ``args`` run ``resume_worker.py`` (a gloo
  all-reduce per step, a checkpoint every 2 steps), the progress windows are seconds, the grace period 30 s;
  for c10d, ``rendezvous: c10d`` too;
- per pod the rendered ``pytorch`` container (command, args, env, ConfigMaps at their items' paths, the
  checkpoint folder shared by all pods) under the image's interpreter: torch without python-etcd or dnspython
  (recovery_helpers.image_python), so the etcd rendezvous works only through the shipped ConfigMap;
- etcd as the StatefulSet's pods run it (etcd backend); with c10d, the store on "worker 0" (started first, so
  that it hosts the store as in EKS, where only worker 0's hostname matches the endpoint).

Each scenario passes when every torchrun that the test did not kill exits 0 (no container restart spent: a
torchrun that gives up exits non-zero and the pod's restartPolicy OnFailure counts it against backoffLimit; the
one exception, c10d losing worker 0 and its store, is RESTARTS below), the
workers of the restarted group start past the last complete checkpoint, all ranks from the same one (the first
rank's choice), and the job finishes every step.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "torch",
    reason="torch is not installed: run `bash scripts/test_integration.sh`, "
    "which installs requirements-integration.txt",
)

from tests.integration.elastic_helpers import (
    Node,
    PlanError,
    elastic_job_configs,
    operator_pod_env,
    plan_with_config,
    rendezvous_target,
    require_elastic_jobs,
    start_etcd,
    wait_all,
)
from tests.integration.recovery_helpers import Cluster, busy_cores, image_python, records, story, wait_for

WORKER = Path(__file__).with_name("resume_worker.py")
STEPS = 14
SAVE_EVERY = 2  # checkpoints at steps 1, 3, 5, ...
INTERVAL = 6  # progress.intervalSeconds
STARTUP = 60  # progress.startupSeconds: rendezvous and gloo's start come first (slow under load)
RUN_TIMEOUT = 150  # one scenario, from the pods' start to the last exit
BUSY_SECONDS = RUN_TIMEOUT + 60  # each burner ends by itself after this, if the test has not stopped it


def configure(backend: str) -> Callable[[list[dict[str, Any]]], None]:
    def change(jobs: list[dict[str, Any]]) -> None:
        targets = elastic_job_configs(jobs)
        if not targets:
            pytest.fail("Pulumi.dev.yaml has no enabled pytorch-elastic job")
        job = targets[0]
        assert "rendezvous" not in job, "the dev example sets `rendezvous`: it should use the stack's etcd"
        job["args"] = [str(WORKER), "--steps", str(STEPS), "--save-every", str(SAVE_EVERY)]
        job["progress"] = {**job["progress"], "logPattern": r"^step \d+", "startupSeconds": STARTUP}
        job["progress"]["intervalSeconds"] = INTERVAL
        job["checkpoints"] = {**job["checkpoints"], "gracePeriodSeconds": 30}
        if backend == "c10d":
            job["rendezvous"] = "c10d"

    return change


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return image_python(tmp_path_factory.mktemp("image"))


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for backend in ("etcd", "c10d"):
        try:
            out[backend] = plan_with_config(tmp_path_factory.mktemp(f"plan-{backend}"), configure(backend))
        except PlanError as err:
            pytest.fail(f"the offline plan of the dev stack ({backend}) failed: {err}")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["etcd", "c10d"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path, plans: Any, python: Path) -> Iterator[Cluster]:
    backend = request.param
    objects = plans[backend]
    job = require_elastic_jobs(objects, "the dev plan")[0]
    pod_env = operator_pod_env(job)
    assert pod_env["PET_RDZV_BACKEND"] == backend, pod_env
    etcd = None
    if backend == "etcd":
        assert "PYTHONPATH" in pod_env, "the shipped python-etcd is not on the pods' PYTHONPATH"
        sts, port = rendezvous_target(pod_env, objects)
        etcd = start_etcd(sts, objects, port, tmp_path / "etcd")
    c = Cluster(tmp_path / "pods", job, objects, etcd, python)
    c.env = pod_env
    if backend == "c10d":
        assert pod_env.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") == "1", pod_env
        c.overrides = {
            "PET_RDZV_ENDPOINT": f"127.0.0.1:{_free_port()}",  # <name>-worker-0 is this machine
            "PET_NPROC_PER_NODE": "1",
            "PET_LOCAL_ADDR": "127.0.0.1",
            "GLOO_SOCKET_IFNAME": "lo",
        }
    try:
        yield c
    finally:
        c.close()
        if etcd is not None:
            etcd.stop()


@pytest.fixture(params=["idle", pytest.param("busy", marks=pytest.mark.busy_cores)])
def load(request: pytest.FixtureRequest) -> Iterator[str]:
    with busy_cores(BUSY_SECONDS) if request.param == "busy" else nullcontext():
        yield request.param


def start_pods(cluster: Cluster, run: str, extra: dict[str, str] | None = None) -> list[Node]:
    """The job's pods; with c10d worker 0 first, until its store listens (it hosts the store, as in EKS)."""
    replicas = int(cluster.job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])
    first = cluster.start(f"{run}-worker-0", extra)
    if cluster.etcd is None:
        host, _, port = cluster.overrides["PET_RDZV_ENDPOINT"].rpartition(":")
        assert wait_for(lambda: _listening(host, int(port)), 60, [first]), story([first])
    return [first, *(cluster.start(f"{run}-worker-{i}", extra) for i in range(1, replicas))]


def _listening(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def check_recovery(
    nodes: list[Node], codes: dict[str, int | None], since: float, last_complete: int, also: list[Node] | None = None
) -> None:
    """Every torchrun left running exited 0; the group restarted after ``since`` from the checkpoint of step
    ``last_complete`` (all ranks alike) and finished every step. ``also``: containers that ended before (shown)."""
    everything = story([*nodes, *(also or [])])
    assert codes == {n.label: 0 for n in nodes}, (
        f"exit codes {codes} (a non-zero one spends a container restart):\n" + everything
    )
    starts = [r for n in nodes for r in records(n, "start") if r["time"] > since]
    assert starts, "the worker group did not start again:\n" + everything
    first = min(r["time"] for r in starts)
    group = [r for r in starts if r["time"] - first < 30 and r["world_size"] == starts[0]["world_size"]]
    wanted = f"step-{last_complete:06d}"
    assert {Path(r["resume_from"] or "-").name for r in group} == {wanted}, f"not all from {wanted}:\n" + everything
    assert {r["start_step"] for r in group} == {last_complete + 1}, everything
    done = [r for n in nodes for r in records(n, "done")]
    assert done and all(r["step"] == STEPS for r in done), everything


def saved_steps(cluster: Cluster) -> list[int]:
    folder = cluster.checkpoint_dir()
    return sorted(int(p.parent.name.split("-")[1]) for p in folder.glob("step-*/COMPLETE"))


def test_a_hung_rank(cluster: Cluster, load: str) -> None:
    """The first rank stops at step 6: its guard stops it after intervalSeconds, torchrun restarts the group
    (inside the container), which resumes from step 5's checkpoint."""
    nodes = start_pods(cluster, "hang", {"RESUME_IT_HANG_AT": "6"})
    codes = wait_all(nodes, RUN_TIMEOUT)
    hangs = [r for n in nodes for r in records(n, "hanging")]
    assert hangs, "the first rank never hung:\n" + story(nodes)
    check_recovery(nodes, codes, hangs[0]["time"], 5)


def test_a_checkpoint_cut_off_mid_save(cluster: Cluster, load: str) -> None:
    """The first rank's save of step 6 is cut off (half a file, no COMPLETE) and the worker stops: the restarted
    group passes step 6 over and resumes from step 5's checkpoint."""
    nodes = start_pods(cluster, "torn", {"RESUME_IT_HANG_AT": "6", "RESUME_IT_TEAR": "1"})
    codes = wait_all(nodes, RUN_TIMEOUT)
    torn = [r for n in nodes for r in records(n, "torn")]
    assert torn, "no save was cut off:\n" + story(nodes)
    assert any("passed over (no COMPLETE file): step-000006" in n.output for n in nodes), story(nodes)
    check_recovery(nodes, codes, torn[0]["time"], 5)


# Container restarts a replaced pod costs the others: none, but with c10d for worker 0, whose torchrun hosts the
# rendezvous store (torch 2.13 c10d_rendezvous_backend._create_tcp_store: the agent whose host the endpoint names).
# When it goes, the other agents' store connection fails (RendezvousConnectionError) and their torchrun exits:
# one container restart each, after which they meet the new worker 0's store. The stack's etcd has no such pod.
RESTARTS = {("c10d", 0): 1}


@pytest.mark.parametrize("victim", [0, 1], ids=["worker-0", "worker-1"])
def test_a_replaced_pod(cluster: Cluster, load: str, victim: int) -> None:
    """A pod dies (SIGKILL of torchrun and its workers) after the checkpoint of step 5 and a new pod of the same
    name starts: the job goes on from the last checkpoint. The others' containers restart only where RESTARTS
    says (each restart is done here as the kubelet would: the same pod's command again)."""
    backend = "etcd" if cluster.etcd is not None else "c10d"
    allowed = RESTARTS.get((backend, victim), 0)
    nodes = start_pods(cluster, "replace")
    assert wait_for(lambda: 5 in saved_steps(cluster), RUN_TIMEOUT, nodes), story(nodes)
    nodes[victim].kill()
    killed_at = time.time()
    time.sleep(1.0)  # a save the other pod's rank had under way when its peer died ends
    last = max(saved_steps(cluster))
    running = [n for i, n in enumerate(nodes) if i != victim] + [cluster.start(f"{nodes[victim].label}-new")]
    restarted: list[Node] = []
    deadline = time.monotonic() + RUN_TIMEOUT
    while any(n.returncode is None for n in running) and time.monotonic() < deadline:
        for i, n in enumerate(running):
            if n.returncode not in (None, 0) and len(restarted) < allowed * (len(nodes) - 1):
                restarted.append(n)
                running[i] = cluster.start(f"{n.label}-restart{len(restarted)}")
        time.sleep(0.2)
    codes = wait_all(running, 1)
    everything = [*running, *restarted]
    assert len(restarted) <= allowed * (len(nodes) - 1), story(everything)
    check_recovery(running, codes, killed_at, last, also=restarted)
