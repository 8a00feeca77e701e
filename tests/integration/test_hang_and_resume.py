"""Integration test: hang detection and auto-resume of the dev stack's elastic job, with real torchrun, the
stack's etcd and the progress guard exactly as the rendered PyTorchJob runs it.

What runs, with no cluster:

- the offline plan of the dev stack (``plan_with_config``) with its elastic job on the stack's etcd as shipped, its
  ``args`` pointing at ``resume_worker.py`` (a gloo all-reduce per step that follows the checkpoint
  contract), short progress windows and ``maxRestarts: 1``; ``progress`` and ``checkpoints`` are the dev
  example's own keys;
- the etcd StatefulSet as its pods run it (tests/integration/etcd_local.py);
- per "node" (pod) the ``pytorch`` container's command and args as rendered, with the env the training
  operator gives it (``operator_pod_env``), its volume mounts made folders here: the ConfigMap
  ``<job>-guard`` written out (the guard is the rendered file), the checkpoint claim's subPath a folder
  both nodes share (the shared file system), the ConfigMap ``<job>-python-etcd`` at its items' paths. torchrun
  is the image's interpreter's (recovery_helpers.image_python: torch without python-etcd, which it gets only
  from that ConfigMap through the pod's PYTHONPATH), and the local overrides of test_elastic_rendezvous.py
  apply (etcd and gloo on loopback, one process per node).

Scenarios: (a) a rank that stops printing progress is stopped by the guard and torchrun restarts the
worker group within the window; (b) a job stopped by SIGTERM (a preemption) saves, and the next start
resumes at the saved step; (c) a checkpoint without its COMPLETE marker (a save cut off) is passed over;
(d) a rank that always hangs is restarted maxRestarts times, then torchrun gives up.
"""

from __future__ import annotations

import os
import posixpath
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "torch",
    reason="torch is not installed: run `bash scripts/test_integration.sh`, "
    "which installs requirements-integration.txt",
)

from tests.integration.elastic_helpers import (
    PlanError,
    elastic_job_configs,
    operator_pod_env,
    plan_with_config,
    rendezvous_target,
    require_elastic_jobs,
    start_etcd,
    wait_all,
)
from tests.integration.recovery_helpers import Cluster, image_python, records, story

WORKER = Path(__file__).with_name("resume_worker.py")
STEPS = 12
INTERVAL = 5  # progress.intervalSeconds of the test's job
STARTUP = 40  # progress.startupSeconds: the rendezvous and gloo's start come first
MAX_RESTARTS = 1
RUN_TIMEOUT = 90
HANG_MESSAGE = "progress-guard: worker hung"


def configure_job(jobs: list[dict[str, Any]]) -> None:
    """The dev stack's elastic job as the test runs it: its script, short windows, a bound of one restart."""
    targets = elastic_job_configs(jobs)
    if not targets:
        pytest.fail("Pulumi.dev.yaml has no enabled pytorch-elastic job")
    job = targets[0]
    for key in ("progress", "checkpoints"):
        assert key in job, (
            f"the dev stack's elastic example has no `{key}` (issue 27: it shows hang detection and checkpoints)"
        )
    job["args"] = [str(WORKER), "--steps", str(STEPS)]
    job["progress"] = {
        **job["progress"],
        "logPattern": r"^step \d+",
        "startupSeconds": STARTUP,
        "intervalSeconds": INTERVAL,
    }
    job["checkpoints"] = {**job["checkpoints"], "gracePeriodSeconds": 30}
    job["maxRestarts"] = MAX_RESTARTS


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    try:
        return plan_with_config(tmp_path_factory.mktemp("plan-resume"), configure_job)
    except PlanError as err:
        pytest.fail(f"the offline plan of the dev stack with the test's job failed: {err}")


@pytest.fixture(scope="module")
def python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's interpreter: torch without python-etcd (recovery_helpers.image_python)."""
    return image_python(tmp_path_factory.mktemp("image"))


@pytest.fixture()
def cluster(tmp_path: Path, objects: list[dict[str, Any]], python: Path) -> Iterator[Cluster]:
    job = require_elastic_jobs(objects, "the dev plan")[0]
    sts, port = rendezvous_target(operator_pod_env(job), objects)
    etcd = start_etcd(sts, objects, port, tmp_path / "etcd")
    c = Cluster(tmp_path / "pods", job, objects, etcd, python)
    c.env = operator_pod_env(job)
    try:
        yield c
    finally:
        c.close()
        etcd.stop()


def test_the_rendered_worker_runs_under_the_guard(objects: list[dict[str, Any]]) -> None:
    """The container starts the guard as torchrun's script, and the guard the job's script."""
    job = require_elastic_jobs(objects, "the dev plan")[0]
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[0] == "torchrun" and posixpath.basename(command[1]) == "progress_guard.py", command
    assert container["args"][0] == str(WORKER), container["args"]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30


def test_a_a_hung_rank_is_stopped_and_the_worker_group_restarts(cluster: Cluster) -> None:
    """(a) The first rank stops at step 3 in the first attempt: the guard stops it after intervalSeconds, the
    worker group restarts (both nodes, ranks assigned afresh) and finishes."""
    nodes = cluster.start_job("a", {"RESUME_IT_HANG_AT": "3"})
    codes = wait_all(nodes, RUN_TIMEOUT)
    everything = [r for n in nodes for r in records(n)]
    hangs = [r for r in everything if r["phase"] == "hanging"]
    assert hangs, "the first rank never hung:\n" + story(nodes)
    hung_output = [n for n in nodes if HANG_MESSAGE in n.output]
    assert len(hung_output) == 1, "the guard of the first rank did not report the hang:\n" + story(nodes)
    # The new round assigns ranks afresh (the hung node may come back as rank 1), so a restart is a node's
    # new worker after the hang, not a rank; torchrun counts it (TORCHELASTIC_RESTART_COUNT) on the node
    # whose worker failed only: the other node's restart is a membership change.
    hung_at = hangs[0]["time"]
    restarted = {n.label: [r for r in records(n, "start") if r["time"] > hung_at] for n in nodes}
    assert all(restarted.values()), "the worker group did not restart after the hang:\n" + story(nodes)
    counted = [r for r in restarted[hung_output[0].label] if r["restart_count"] >= 1]
    assert counted, "torchrun did not count the hung node's restart:\n" + story(nodes)
    last_step = max(r["time"] for r in everything if r["phase"] == "step" and r["time"] <= hung_at)
    took = min(r["time"] for starts in restarted.values() for r in starts) - last_step
    # The guard stops the rank INTERVAL s after its last sign; the restart is a new rendezvous round and
    # a new gloo world: seconds more (26 s seen on a loaded CI machine).
    assert INTERVAL <= took <= INTERVAL + 45, f"restart {took:.1f}s after the last progress:\n" + story(nodes)
    assert codes == {n.label: 0 for n in nodes}, f"exit codes {codes}:\n" + story(nodes)
    done = [r for r in everything if r["phase"] == "done"]
    assert done and all(r["step"] == STEPS for r in done), story(nodes)


def test_b_sigterm_saves_and_the_next_start_resumes(cluster: Cluster) -> None:
    """(b) Both pods get SIGTERM mid-run (a preemption, a drain): the first rank saves its step within the grace
    period; pods started again resume at the step after it, not at 0."""
    nodes = cluster.start_job("b1")
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline and not any(r["step"] >= 4 for n in nodes for r in records(n, "step")):
        assert all(n.returncode is None for n in nodes), "a node ended early:\n" + story(nodes)
        time.sleep(0.2)
    for n in nodes:  # the kubelet signals the container's first process: torchrun
        assert n.process is not None
        os.kill(n.process.pid, signal.SIGTERM)
    wait_all(nodes, 30)  # terminationGracePeriodSeconds
    saved = [r for n in nodes for r in records(n, "saved")]
    assert len(saved) == 1, "the first rank did not save on SIGTERM:\n" + story(nodes)
    assert (Path(saved[0]["folder"]) / "COMPLETE").is_file()
    again = cluster.start_job("b2")
    wait_all(again, RUN_TIMEOUT)
    starts = [r for n in again for r in records(n, "start") if r["rank"] == 0]
    assert starts, "the restarted job did not start:\n" + story(again)
    assert starts[0]["resume_from"] == saved[0]["folder"], story(again)
    assert starts[0]["start_step"] == saved[0]["step"] + 1, story(again)
    steps = [r["step"] for n in again for r in records(n, "step")]
    assert steps and min(steps) == saved[0]["step"] + 1, f"steps after the restart: {steps}"
    assert all(n.returncode == 0 for n in again), story(again)


def test_c_a_checkpoint_cut_off_mid_write_is_not_offered(cluster: Cluster) -> None:
    """(c) step-000002 is complete, step-000006 was cut off before its COMPLETE marker: the job resumes at 3."""
    import torch

    folder = cluster.checkpoint_dir()
    for step, whole in ((2, True), (6, False)):
        d = folder / f"step-{step:06d}"
        d.mkdir(parents=True)
        torch.save({"step": step, "value": float(step)}, d / "state.pt")
        if whole:
            (d / "COMPLETE").write_text(f"{step}\n")
        else:
            (d / "state.pt").write_bytes((d / "state.pt").read_bytes()[:40])  # a partial write
    nodes = cluster.start_job("c")
    codes = wait_all(nodes, RUN_TIMEOUT)
    starts = [r for n in nodes for r in records(n, "start")]
    assert starts and all(r["resume_from"] == str(folder / "step-000002") for r in starts), story(nodes)
    assert all(r["start_step"] == 3 for r in starts), story(nodes)
    assert any("passed over (no COMPLETE file): step-000006" in n.output for n in nodes), story(nodes)
    assert codes == {n.label: 0 for n in nodes}, story(nodes)


def test_d_the_restart_bound_is_honoured(cluster: Cluster) -> None:
    """(d) The first rank hangs at step 1 in every attempt: each guard stops it, each torchrun restarts its
    workers at most maxRestarts times (TORCHELASTIC_RESTART_COUNT never passes it), then gives up and exits
    non-zero: the container fails, for the pod's backoffLimit to count. No worker finishes."""
    nodes = cluster.start_job("d", {"RESUME_IT_HANG_AT": "1", "RESUME_IT_HANG_RESTARTS": "99"})
    codes = wait_all(nodes, RUN_TIMEOUT + 60)
    stops = {n.label: n.output.count(HANG_MESSAGE) for n in nodes}
    assert sum(stops.values()) >= MAX_RESTARTS + 1, f"guard stops per node {stops}:\n" + story(nodes)
    for n in nodes:
        assert stops[n.label] <= MAX_RESTARTS + 1, f"{n.label}: stopped {stops[n.label]}x:\n" + story(nodes)
        restarts = {r["restart_count"] for r in records(n, "start")}
        assert max(restarts, default=0) <= MAX_RESTARTS, f"{n.label}: restart counts {restarts}:\n" + story(nodes)
    assert all(code not in (0, None) for code in codes.values()), f"exit codes {codes}:\n" + story(nodes)
    assert not any(records(n, "done") for n in nodes), story(nodes)
