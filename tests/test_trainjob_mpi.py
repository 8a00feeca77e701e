"""MPI jobs on Kubeflow Trainer v2 (``operator: trainer`` on ``mpi`` and ``nccl-test``): the group's MPI runtime,
the TrainJob, the refusals, and the proof that a moved job's launcher and workers are its MPIJob's.

- every GPU group has a ``gputraining-<group>-mpi`` runtime whose ``node`` pods carry the group's whole node (every
  EFA device, huge pages, all GPUs, IPC_LOCK) and whose launcher owns no GPU;
- for every mpi/nccl-test job of dev, prod and examples/ that can move (the operator turned on in a copy), the
  MPIJob's launcher and worker pod templates and the TrainJob's (Trainer v2.2.1's merge, jobs/trainjob_merge*.py)
  match but for differences each with its reason; the launcher runs today's mpirun line, and Trainer's hostfile
  gives mpirun the hosts and slots the stack derives (slotsPerWorker, -np);
- a dev plan with its nccl-test moved: the runtime, the TrainJob and its JobSet are taken by the vendored CRDs, CEL
  included; Kueue sees the launcher and the workers as pod sets;
- each refusal fires once: the workers' image, their command, retries.
"""

from __future__ import annotations

import copy
import re
import shlex
from typing import Any

import pytest

from facts.kube import EFA_RESOURCE, GPU_RESOURCE, HUGEPAGES_2MI_RESOURCE
from infra import plan_jobs
from infra.api_checks.kube_crds import CrdIndex
from jobs import trainjob_merge as merge
from jobs import trainjob_merge_mpi as mpi_model
from jobs import trainjob_mpi, trainjob_runtimes
from jobs.mpi import TRAINER_WORKER_IMAGE
from jobs.registry import build_manifests
from jobs.targets import job_targets
from stacks.config import ConfigError, load
from stacks.config.stackfile import read_stack_config
from stacks.queues.admission import pod_sets
from tests.helpers import ROOT, make_ctx, minimal_values, run_stack

NS = "gpu-training"
MPI_KINDS = ("mpi", "nccl-test")
STACKS = ["dev", "prod", *sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir())]


def _values(stack: str) -> dict[str, Any]:
    if stack in ("dev", "prod"):
        _, values = read_stack_config(stack, ROOT)
    else:
        _, values = read_stack_config(stack, ROOT, ROOT / "examples" / stack / f"Pulumi.{stack}.yaml")
    values = copy.deepcopy(values)
    values.setdefault(f"{NS}:services", {})["trainer"] = True
    return values


def _candidates(stack: str) -> list[dict[str, Any]]:
    return [
        e
        for e in _values(stack).get(f"{NS}:jobs") or []
        if e.get("kind") in MPI_KINDS and e.get("runtime", "eks") == "eks"
    ]


def _movable(stack: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(legacy entry, trainer entry) of each mpi/nccl-test job on EKS of ``stack`` that the config takes on Trainer
    (enabled, to be built)."""
    out = []
    for entry in _candidates(stack):
        legacy = {k: v for k, v in entry.items() if k not in ("operator", "enabled")}
        moved = {**legacy, "operator": "trainer"}
        try:
            load({**_values(stack), f"{NS}:jobs": [moved]}, NS, stack)
        except ConfigError:
            continue  # its workers need another image or command: refused (below)
        out.append((legacy, moved))
    return out


MOVABLE = [(s, i) for s in STACKS for i in range(len(_movable(s)))]


def _both(stack: str, index: int) -> tuple[dict[str, Any], dict[str, Any], Any]:
    legacy_entry, moved_entry = _movable(stack)[index]
    values = _values(stack)
    cfg_legacy = load({**values, f"{NS}:jobs": [legacy_entry]}, NS, stack)
    cfg_moved = load({**values, f"{NS}:jobs": [moved_entry]}, NS, stack)
    ctx = make_ctx(targets=job_targets(cfg_legacy.gpu_node_groups, "us-west-2a"))
    (legacy,) = [m for m in build_manifests(cfg_legacy.jobs[0], ctx) if m["kind"] == "MPIJob"]
    (moved,) = [m for m in build_manifests(cfg_moved.jobs[0], ctx) if m["kind"] == "TrainJob"]
    return legacy, moved, ctx


def test_there_are_mpi_jobs_to_move_and_each_candidate_is_moved_or_refused():
    assert MOVABLE and "dev" in {s for s, _ in MOVABLE}
    refused = [(s, e["name"]) for s in STACKS for e in _candidates(s) if e not in [m[0] for m in _movable(s)]]
    for stack, name in refused:
        entry = next(e for e in _candidates(stack) if e["name"] == name)
        assert _problems({**entry, "operator": "trainer"}, _values(stack)), (stack, name)


@pytest.mark.parametrize(("stack", "index"), MOVABLE)
def test_a_moved_mpi_jobs_launcher_and_workers_are_its_mpijobs_but_for_reasoned_differences(stack, index):
    legacy, moved, ctx = _both(stack, index)
    sets = merge.stack_replica_sets(moved, ctx.targets)
    roles = legacy["spec"]["mpiReplicaSpecs"]
    assert sets[trainjob_mpi.LAUNCHER]["replicas"] == roles["Launcher"]["replicas"] == 1
    assert sets[merge.trainjob.NODE]["replicas"] == roles["Worker"]["replicas"]
    for role, name in (("Launcher", trainjob_mpi.LAUNCHER), ("Worker", merge.trainjob.NODE)):
        differences = merge.compare_mpi(roles[role]["template"], sets[name]["template"])
        assert [d for d in differences if d.reason is None] == [], role
        whats = {d.what for d in differences}
        assert not whats & {f"container.{f}" for f in ("image", "command", "args", "resources", "securityContext")}
        assert not whats & {"spec.volumes", "container.volumeMounts", "spec.tolerations", "spec.nodeSelector"}
        assert not whats & {"metadata.labels", "metadata.annotations"}  # queue, run label, topology
        env = {w.removeprefix("container.env.") for w in whats if w.startswith("container.env.")}
        assert env <= set(mpi_model.OMPI_ENV), role


@pytest.mark.parametrize(("stack", "index"), MOVABLE)
def test_the_launcher_runs_todays_mpirun_over_trainers_hostfile(stack, index):
    legacy, moved, ctx = _both(stack, index)
    sets = merge.stack_replica_sets(moved, ctx.targets)
    (launcher,) = sets[trainjob_mpi.LAUNCHER]["template"]["spec"]["containers"]
    (today,) = legacy["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    assert launcher["command"] == today["command"]
    line = today["command"][today["command"].index("--") + 1 :] if "--" in today["command"] else today["command"]
    np = int(line[line.index("-np") + 1])
    policy = next(
        r
        for r in trainjob_runtimes.runtimes(ctx.targets)
        if r["metadata"]["name"] == moved["spec"]["runtimeRef"]["name"]
    )
    hosts = mpi_model.hostfile(moved, policy["spec"]["mlPolicy"]).splitlines()
    slots = {int(h.split("slots=")[1]) for h in hosts}
    assert len(hosts) == legacy["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert slots == {legacy["spec"]["slotsPerWorker"]}
    assert np == len(hosts) * legacy["spec"]["slotsPerWorker"]
    env = {e["name"]: e.get("value") for e in launcher["env"]}
    assert env[mpi_model.OMPI_HOSTFILE] == "/etc/mpi/hostfile"  # mpirun reads it: no --hostfile on either line
    assert "--hostfile" not in line and "-H" not in line
    assert all(
        re.fullmatch(rf"{moved['metadata']['name']}-node-0-\d+\.{moved['metadata']['name']} slots=\d+", h)
        for h in hosts
    )
    assert shlex.join(line).startswith(shlex.join([line[0], "--allow-run-as-root", "-np", str(np)]))


def test_the_comparison_sees_a_worker_without_its_efa_devices():
    """The comparison could fail: a runtime whose workers ask for no EFA device differs without a reason."""
    legacy, moved, ctx = _both(*MOVABLE[0])
    sets = merge.stack_replica_sets(moved, ctx.targets)
    template = copy.deepcopy(sets[merge.trainjob.NODE]["template"])
    for side in ("limits", "requests"):
        template["spec"]["containers"][0]["resources"][side].pop(EFA_RESOURCE)
    differences = merge.compare_mpi(legacy["spec"]["mpiReplicaSpecs"]["Worker"]["template"], template)
    assert [d.what for d in differences if d.reason is None] == ["container.resources"]


# ----------------------------------------------------------------------------------------------
# dev with its nccl-test moved: runtimes, TrainJob, JobSet against the CRDs; Kueue's pod sets
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moved_dev() -> Any:
    values = _values("dev")
    jobs = values[f"{NS}:jobs"]
    for j in jobs:
        if j.get("kind") == "nccl-test":
            j.update(operator="trainer", enabled=True)
    return run_stack(values, "dev")


def test_every_mpi_runtime_gives_its_workers_the_whole_node(moved_dev):
    runtimes = [o for o in moved_dev.kubernetes_objects() if o["kind"] == "ClusterTrainingRuntime"]
    mpi = [r for r in runtimes if r["metadata"]["name"].endswith("-mpi")]
    assert len(mpi) == len(runtimes) // 2 >= 1
    on_efa = 0
    for r in mpi:
        rjs = {
            rj["name"]: rj["template"]["spec"]["template"]["spec"]
            for rj in r["spec"]["template"]["spec"]["replicatedJobs"]
        }
        (node,), (launcher,) = rjs["node"]["containers"], rjs["launcher"]["containers"]
        assert GPU_RESOURCE in node["resources"]["limits"] and GPU_RESOURCE not in launcher["resources"].get(
            "limits", {}
        )
        assert rjs["node"]["nodeSelector"] == rjs["launcher"]["nodeSelector"]
        if EFA_RESOURCE in node["resources"]["limits"]:
            on_efa += 1
            assert HUGEPAGES_2MI_RESOURCE in node["resources"]["requests"]
            assert node["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert r["spec"]["mlPolicy"]["mpi"]["numProcPerNode"] == node["resources"]["limits"][GPU_RESOURCE]
        # today's WaitForWorkersReady: the launcher starts once the workers are Ready
        (launcher_job,) = [rj for rj in r["spec"]["template"]["spec"]["replicatedJobs"] if rj["name"] == "launcher"]
        assert launcher_job["dependsOn"] == [{"name": "node", "status": "Ready"}]
    assert on_efa >= 1


def test_the_moved_nccl_test_and_its_jobset_are_taken_by_the_crds(moved_dev):
    objects = moved_dev.kubernetes_objects()
    crds = CrdIndex(objects)
    runtimes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterTrainingRuntime"}
    jobs = [o for o in objects if o["kind"] == "TrainJob" and o["spec"]["runtimeRef"]["name"].endswith("-mpi")]
    assert jobs
    ours = [*runtimes.values(), *jobs, *(merge.jobset(runtimes[j["spec"]["runtimeRef"]["name"]], j) for j in jobs)]
    for o in ours:
        assert crds.refusals(o) == [], o["metadata"]["name"]
    broken = copy.deepcopy(jobs[0])
    broken["metadata"]["name"] = "NCCL"  # the TrainJob CRD's CEL rule on the name fires
    assert crds.refusals(broken)


def test_kueue_sees_the_launcher_and_the_workers(moved_dev):
    cfg = load(_values("dev"), NS, "dev")
    targets = job_targets(cfg.gpu_node_groups, "us-west-2a")
    (job,) = [
        o
        for o in moved_dev.kubernetes_objects()
        if o["kind"] == "TrainJob" and o["metadata"]["labels"].get("gputraining/job-kind") == "nccl-test"
    ]
    sets = {p.name: p for p in pod_sets(job, targets)}
    assert set(sets) == {"node", "launcher"}
    assert sets["launcher"].count == 1 and sets["node"].count == job["spec"]["trainer"]["numNodes"]


# ----------------------------------------------------------------------------------------------
# The refusals
# ----------------------------------------------------------------------------------------------


def _problems(job: dict[str, Any], values: dict[str, Any] | None = None) -> dict[str, str]:
    values = values or minimal_values(services={"trainer": True}, jobs=[job])
    values = {**values, f"{NS}:jobs": [job]}
    try:
        load(values, NS, "test")
    except ConfigError as e:
        return {re.sub(r"^.*?jobs\[[^]]+\]\.", "", p.key): p.message for p in e.problems}
    return {}


NCCL = {"kind": "nccl-test", "name": "nccl", "nodeGroup": "p4d", "nodes": 2, "operator": "trainer"}


def test_a_default_nccl_test_moves():
    assert _problems(NCCL) == {}


@pytest.mark.parametrize(
    ("over", "key", "words"),
    [
        ({"image": "repo/nccl-tests:1"}, "image", "ContainerPatch has neither"),
        ({"workerCommand": ["/usr/sbin/sshd", "-D"]}, "workerCommand", "/usr/sbin/sshd -De"),
        ({"backoffLimit": 5}, "backoffLimit", "runtime's backoffLimit"),
        ({"operator": "kubeflow"}, "operator", "'mpi' (the default), 'trainer'"),
    ],
)
def test_what_an_mpi_trainjob_cannot_carry_is_refused_naming_the_key(over, key, words):
    problems = _problems({**NCCL, **over})
    assert key in problems, problems
    assert words in problems[key]


def test_an_mpi_job_with_its_own_image_stays_on_the_mpi_operator():
    job = {"kind": "mpi", "name": "hvd", "image": "repo/hvd:1", "nodeGroup": "p4d", "command": ["python", "t.py"]}
    assert _problems(job) == {}
    assert "image" in _problems({**job, "operator": "trainer"})


def test_the_plans_legacy_api_line_stops_listing_a_moved_nccl_test(moved_dev):
    """dev's job table names nccl-p4d on MPIJob v2beta1 until it moves; moved, its row says TrainJob and the
    legacy-API line leaves it out."""
    values = _values("dev")
    for j in values[f"{NS}:jobs"]:
        if j.get("kind") == "nccl-test":
            j["enabled"] = True
    before = plan_jobs.lines(load(values, NS, "dev"), run_stack(values, "dev").records)
    (legacy,) = [line for line in before if "on a legacy API" in line]
    assert "nccl-p4d (MPIJob kubeflow.org/v2beta1)" in legacy
    moved_values = _values("dev")
    for j in moved_values[f"{NS}:jobs"]:
        if j.get("kind") == "nccl-test":
            j.update(operator="trainer", enabled=True)
    after = plan_jobs.lines(load(moved_values, NS, "dev"), moved_dev.records)
    assert not any("nccl-p4d" in line for line in after if "on a legacy API" in line)
    (row,) = [line for line in after if line.strip().startswith("nccl-p4d ")]
    assert "TrainJob" in row


def test_a_guarded_mpi_job_keeps_its_guard_and_checkpoints_on_trainer():
    """An mpi job in the runtime's image with hang detection and checkpoints: its workers get the guard's
    ConfigMap and the checkpoint folder through the runtime patch, the launcher's mpirun runs each rank under the
    guard, and the pods match the MPIJob's but for reasoned differences."""
    job = {
        "kind": "mpi",
        "name": "hvd",
        "image": TRAINER_WORKER_IMAGE,
        "nodeGroup": "p4d",
        "nodes": 2,
        "command": ["python", "/efs/train.py"],
        "volumes": [{"name": "efs", "mountPath": "/efs"}],
        "progress": {"logPattern": "step", "intervalSeconds": 600},
        "checkpoints": {"volume": "fsx"},
    }
    assert _problems({**job, "operator": "trainer"}) == {}
    values = minimal_values(services={"trainer": True}, jobs=[job])
    ctx = make_ctx(targets=job_targets(load(values, NS, "test").gpu_node_groups, "us-west-2a"))
    (legacy,) = [m for m in build_manifests(load(values, NS, "test").jobs[0], ctx) if m["kind"] == "MPIJob"]
    moved_values = {**values, f"{NS}:jobs": [{**job, "operator": "trainer"}]}
    (moved,) = [m for m in build_manifests(load(moved_values, NS, "test").jobs[0], ctx) if m["kind"] == "TrainJob"]
    sets = merge.stack_replica_sets(moved, ctx.targets)
    roles = legacy["spec"]["mpiReplicaSpecs"]
    for role, name in (("Launcher", trainjob_mpi.LAUNCHER), ("Worker", merge.trainjob.NODE)):
        differences = merge.compare_mpi(roles[role]["template"], sets[name]["template"])
        assert [d for d in differences if d.reason is None] == [], role
    (worker,) = sets[merge.trainjob.NODE]["template"]["spec"]["containers"]
    mounts = {m["name"]: m for m in worker["volumeMounts"]}
    assert "fsx" in mounts and mounts["fsx"]["subPath"].endswith("hvd/run-1")
    assert any("guard" in m for m in mounts)
    (launcher,) = sets[trainjob_mpi.LAUNCHER]["template"]["spec"]["containers"]
    assert any("progress_guard" in part for part in launcher["command"]), launcher["command"]
