"""Jobs on Kubeflow Trainer v2 (``operator: trainer``): the group runtimes, the TrainJobs, the refusals, and the
proof that a moved job's pods are its legacy pods.

- dev and prod each plan a TrainJob on an EFA group whose pods, as Trainer v2.2.1 makes them of the plan's own
  runtime (jobs/trainjob_merge.py), carry every EFA device of the type, its huge pages and all its GPUs;
- every Trainer and JobSet object (the runtimes, the TrainJobs, and the JobSets the model makes of them) is taken
  by its vendored CRD, CEL rules included; a name the TrainJob CRD's CEL rule refuses is refused;
- for every job of dev, prod and examples/ that can move, the legacy pod template and the TrainJob's match in
  image, command, env, resources, volumes, tolerations and node selection; each difference has its reason;
- each refusal fires once: an elastic range, an etcd rendezvous, paddle, ``resourcesPerNode`` on an EFA group
  (and what it would do: the model drops the EFA devices), ``efa: false``, retries and clean-up the TrainJob has
  no place for, a checkpoint grace period, Trainer switched off.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from facts import catalog
from facts.kube import EFA_RESOURCE, GPU_RESOURCE, HUGEPAGES_2MI_RESOURCE, NODE_GROUP_LABEL
from infra import invariants
from infra.api_checks.kube_crds import CrdIndex
from jobs import trainjob
from jobs import trainjob_merge as merge
from jobs.registry import build_manifests
from jobs.targets import JobsContext, job_targets
from stacks.config import ConfigError, load
from stacks.config.stackfile import read_stack_config
from tests.helpers import ROOT, broken_plan, job_problems, job_spec, make_ctx, minimal_values, run_stack

NS = "gpu-training"
TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
RUNTIME = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"


def _values(stack: str) -> dict[str, Any]:
    if stack in ("dev", "prod"):
        _, values = read_stack_config(stack, ROOT)
    else:
        _, values = read_stack_config(stack, ROOT, ROOT / "examples" / stack / f"Pulumi.{stack}.yaml")
    return copy.deepcopy(values)


STACKS = ["dev", "prod", *sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir())]


@pytest.fixture(scope="module")
def plans() -> dict[str, Any]:
    return {s: run_stack(_values(s), s) for s in ("dev", "prod")}


def _objects(plan: Any, kind: str) -> list[dict[str, Any]]:
    return [o for o in plan.kubernetes_objects() if o["kind"] == kind]


# ----------------------------------------------------------------------------------------------
# dev and prod: a TrainJob on an EFA group, every EFA device on its pods
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_stack_runs_a_trainjob_on_an_efa_group_whose_pods_carry_every_efa_device(stack, plans):
    plan = plans[stack]
    runtimes = {o["metadata"]["name"]: o for o in _objects(plan, "ClusterTrainingRuntime")}
    cfg = load(_values(stack), NS, stack)
    groups = {g.name: g for g in cfg.gpu_node_groups}
    on_efa = 0
    for job in _objects(plan, "TrainJob"):
        (node,) = merge.replica_sets(job, runtimes).values()
        (container,) = node["template"]["spec"]["containers"]
        group = node["template"]["spec"]["nodeSelector"][NODE_GROUP_LABEL]
        it = catalog.get(groups[group].instance_type)
        if not it.efa_supported:
            continue
        on_efa += 1
        for side in ("limits", "requests"):
            assert container["resources"][side][EFA_RESOURCE] == it.efa_interfaces, (job["metadata"]["name"], side)
            assert container["resources"][side][GPU_RESOURCE] == it.gpus
            assert HUGEPAGES_2MI_RESOURCE in container["resources"][side]
        assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert node["replicas"] == job["spec"]["trainer"]["numNodes"] >= 2
        assert "resourcesPerNode" not in job["spec"]["trainer"]
    assert on_efa >= 1


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_one_runtime_per_gpu_group_and_framework(stack, plans):
    cfg = load(_values(stack), NS, stack)
    names = sorted(o["metadata"]["name"] for o in _objects(plans[stack], "ClusterTrainingRuntime"))
    assert names == sorted(trainjob.runtime_name(g.name, f) for g in cfg.gpu_node_groups for f in trainjob.FRAMEWORKS)


# ----------------------------------------------------------------------------------------------
# Every Trainer and JobSet object against its CRD (CEL included)
# ----------------------------------------------------------------------------------------------


def _jobsets(plan: Any) -> list[dict[str, Any]]:
    runtimes = {o["metadata"]["name"]: o for o in _objects(plan, "ClusterTrainingRuntime")}
    return [merge.jobset(runtimes[j["spec"]["runtimeRef"]["name"]], j) for j in _objects(plan, "TrainJob")]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_trainer_and_jobset_object_is_taken_by_its_crd(stack, plans):
    plan = plans[stack]
    objects = plan.kubernetes_objects()
    crds = CrdIndex(objects)
    ours = [o for o in objects if o["apiVersion"].startswith("trainer.kubeflow.org/")] + _jobsets(plan)
    assert {o["kind"] for o in ours} == {"ClusterTrainingRuntime", "TrainJob", "JobSet"}
    for o in ours:
        assert crds.crd_of(o["apiVersion"].split("/")[0], o["kind"]) is not None, o["kind"]
        assert crds.refusals(o) == [], o["metadata"]["name"]


def test_the_crd_check_runs_the_trainjob_cel_rules(plans):
    """The check above could fail: the TrainJob CRD's CEL rule on metadata.name refuses an upper-case name."""
    objects = plans["dev"].kubernetes_objects()
    job = copy.deepcopy(next(o for o in objects if o["kind"] == "TrainJob"))
    job["metadata"]["name"] = "Resnet50"
    refusals = CrdIndex(objects).refusals(job)
    assert any("x-kubernetes-validations" in r.source and "metadata.name" in r.source for r in refusals), refusals


# ----------------------------------------------------------------------------------------------
# The pods both ways
# ----------------------------------------------------------------------------------------------


def _ctx(cfg: Any) -> JobsContext:
    return make_ctx(targets=job_targets(cfg.gpu_node_groups, "us-west-2a"))


def _movable(stack: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(legacy entry, trainer entry) of each job of ``stack`` that can move: a pytorch-elastic job on EKS with a fixed
    size (moved with `rendezvous: c10d`, which Trainer's torch runtime needs) that the config takes on Trainer."""
    values = _values(stack)
    values.setdefault(f"{NS}:services", {})["trainer"] = True
    out = []
    for entry in values.get(f"{NS}:jobs") or []:
        if entry.get("kind") != "pytorch-elastic" or entry.get("runtime", "eks") != "eks":
            continue
        legacy = {k: v for k, v in entry.items() if k != "operator"}
        legacy["rendezvous"] = "c10d"
        moved = {**legacy, "operator": "trainer"}
        trial = copy.deepcopy(values)
        trial[f"{NS}:jobs"] = [moved]
        try:
            load(trial, NS, stack)
        except ConfigError:
            continue  # an elastic range, or what a TrainJob cannot carry: refused (below)
        out.append((legacy, moved))
    return out


MOVABLE = [(s, i) for s in STACKS for i in range(len(_movable(s)))]


@pytest.mark.parametrize(("stack", "index"), MOVABLE)
def test_a_moved_jobs_pods_are_its_legacy_pods_but_for_reasoned_differences(stack, index):
    legacy_entry, moved_entry = _movable(stack)[index]
    values = _values(stack)
    values.setdefault(f"{NS}:services", {})["trainer"] = True
    values[f"{NS}:jobs"] = [legacy_entry, {**moved_entry, "name": moved_entry["name"]}]
    cfg_legacy = load({**values, f"{NS}:jobs": [legacy_entry]}, NS, stack)
    cfg_moved = load({**values, f"{NS}:jobs": [moved_entry]}, NS, stack)
    ctx = _ctx(cfg_legacy)
    (legacy,) = [m for m in build_manifests(cfg_legacy.jobs[0], ctx) if m["kind"] == "PyTorchJob"]
    (moved,) = [m for m in build_manifests(cfg_moved.jobs[0], ctx) if m["kind"] == "TrainJob"]
    count, template = merge.node_template(moved, ctx.targets)
    worker = legacy["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert count == worker["replicas"]
    differences = merge.compare(worker["template"], template)
    assert [d for d in differences if d.reason is None] == []
    compared = {d.what.split(".")[1] for d in differences if d.what.startswith("container.")}
    assert not compared & {"image", "command", "args", "resources", "volumeMounts", "securityContext"}
    assert not {d.what for d in differences} & {"spec.volumes", "spec.tolerations", "spec.nodeSelector"}
    assert {d.what for d in differences if d.what.startswith("container.env.")} <= {
        f"container.env.{n}" for n in (*merge.TORCH_ENV, "PET_MAX_RESTARTS")
    }


def test_there_are_moved_jobs_to_compare():
    assert MOVABLE and {s for s, _ in MOVABLE} >= {"dev", "prod"}


def test_the_comparison_sees_a_dropped_efa_device():
    """The comparison could fail: resourcesPerNode in the TrainJob replaces the runtime's resources (the model
    follows Builder.Trainer), and the difference has no reason."""
    ctx = make_ctx()
    spec = _spec(nodes=2, operator="trainer", rendezvous="c10d")
    (job,) = [m for m in build_manifests(spec, ctx) if m["kind"] == "TrainJob"]
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {GPU_RESOURCE: 8}}
    _, template = merge.node_template(job, ctx.targets)
    (container,) = template["spec"]["containers"]
    assert EFA_RESOURCE not in container["resources"]["limits"]
    legacy = _spec(nodes=2, rendezvous="c10d")
    (pt,) = [m for m in build_manifests(legacy, ctx) if m["kind"] == "PyTorchJob"]
    differences = merge.compare(pt["spec"]["pytorchReplicaSpecs"]["Worker"]["template"], template)
    assert [d.what for d in differences if d.reason is None] == ["container.resources"]


def _spec(**over: Any) -> Any:
    return job_spec("pytorch-elastic", **over)


# ----------------------------------------------------------------------------------------------
# The refusals
# ----------------------------------------------------------------------------------------------


def _job(**over: Any) -> dict[str, Any]:
    job = {
        "kind": "pytorch-elastic",
        "name": "train",
        "image": "repo/train:1",
        "nodeGroup": "p4d",
        "nodes": 2,
        "command": ["torchrun", "/code/train.py"],
        "operator": "trainer",
        "rendezvous": "c10d",
    }
    job.update(over)
    return {k: v for k, v in job.items() if v is not None}


def _problems(job: dict[str, Any], trainer: bool = True) -> dict[str, str]:
    values = minimal_values(services={"trainer": trainer}, jobs=[job], etcd={"enabled": True})
    try:
        load(values, NS, "test")
    except ConfigError as e:
        # a job is named by its name in a problem's key (gpu-training:jobs[train].nodes)
        return {re.sub(r"^.*?jobs\[[^]]+\]\.", "", p.key): p.message for p in e.problems}
    return {}


def test_a_fixed_size_job_moves():
    assert _problems(_job()) == {}


@pytest.mark.parametrize(
    ("over", "key", "words"),
    [
        ({"minNodes": 1, "maxNodes": 2, "nodes": None}, "minNodes", "kubeflow/trainer#3235"),
        ({"rendezvous": "etcd"}, "rendezvous", "PET_MASTER_ADDR"),
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}, "resourcesPerNode", "NVIDIA/aicr#2275"),
        ({"efa": False}, "efa", "EFA devices"),
        ({"ttlSecondsAfterFinished": 60}, "ttlSecondsAfterFinished", "no clean-up of its own"),
        ({"backoffLimit": 5}, "backoffLimit", "runtime's backoffLimit"),
        ({"checkpoints": {"volume": "fsx", "gracePeriodSeconds": 300}}, "checkpoints.gracePeriodSeconds", "110"),
        ({"operator": "kubeflow"}, "operator", "'training' (the default), 'trainer'"),
    ],
)
def test_what_a_trainjob_cannot_carry_is_refused_naming_the_key(over, key, words):
    problems = _problems(_job(**over))
    assert key in problems, problems
    assert words in problems[key]


def test_resources_per_node_names_the_efa_devices_it_would_drop():
    message = _problems(_job(resourcesPerNode={"limits": {"nvidia.com/gpu": 8}}))["resourcesPerNode"]
    assert "4 EFA devices" in message and "drop resourcesPerNode" in message


def test_paddle_stays_on_the_training_operator():
    job = {
        "kind": "paddle",
        "name": "ocr",
        "image": "repo/paddle:1",
        "nodeGroup": "p4d",
        "command": ["python", "-m", "paddle.distributed.launch", "train.py"],
        "operator": "trainer",
    }
    problems = _problems(job)
    assert "operator" in problems and "no Paddle runtime" in problems["operator"], problems


def test_a_trainjob_needs_trainer_switched_on():
    problems = _problems(_job(), trainer=False)
    assert "Kubeflow Trainer v2 with JobSet ('trainer'), which is not enabled" in problems["kind"]


def test_the_legacy_default_is_unchanged():
    """A job without `operator` builds the PyTorchJob it always did (same name, same digest)."""
    ctx = make_ctx()
    before = build_manifests(_spec(nodes=2), ctx)
    assert [m["kind"] for m in before if m["kind"] in ("PyTorchJob", "TrainJob")] == ["PyTorchJob"]
    assert _spec(nodes=2).spec_digest() == _spec(nodes=2, operator=None).spec_digest()


def test_job_problems_helper_sees_the_refusal():
    """The kinds' own check, without the stack: an elastic range on Trainer."""
    problems = job_problems(_job(minNodes=1, maxNodes=2, nodes=None))
    assert any(p.key.endswith("minNodes") for p in problems)


# ----------------------------------------------------------------------------------------------
# A running stack moves a job: what the next `up` does
# ----------------------------------------------------------------------------------------------

FIXED = {
    "name": "resnet50-fixed",
    "kind": "pytorch-elastic",
    "nodeGroup": "p4d",
    "nodes": 2,
    "rendezvous": "c10d",
    "image": "repo/train:1",
    "command": ["torchrun"],
    "args": ["/efs/code/main.py"],
    "volumes": [{"name": "efs", "mountPath": "/efs"}],
    "checkpoints": {"volume": "fsx"},
}


def _dev_as_main(trainer: bool) -> dict[str, Any]:
    """dev as main has it (no Trainer, no TrainJob) plus a fixed-size job, moved to Trainer with ``trainer``."""
    values = _values("dev")
    jobs = [j for j in values[f"{NS}:jobs"] if j.get("operator") != "trainer"]
    values[f"{NS}:jobs"] = [*jobs, {**FIXED, "operator": "trainer"} if trainer else dict(FIXED)]
    values[f"{NS}:services"]["trainer"] = trainer
    return values


@pytest.fixture(scope="module")
def moved() -> tuple[Any, Any]:
    return run_stack(_dev_as_main(False), "dev"), run_stack(_dev_as_main(True), "dev")


def test_moving_a_job_deletes_its_legacy_object_and_creates_its_trainjob_only(moved):
    before, after = ({r.urn: r for r in p.records} for p in moved)
    deleted = [before[u] for u in set(before) - set(after)]
    assert [(r.type, r.inputs["metadata"]["name"]) for r in deleted] == [
        ("kubernetes:kubeflow.org/v1:PyTorchJob", FIXED["name"])
    ]
    created = [after[u] for u in set(after) - set(before)]
    assert [r.inputs["metadata"]["name"] for r in created if r.type == TRAINJOB] == [FIXED["name"]]
    changed = [before[u].name for u in set(before) & set(after) if before[u].inputs != after[u].inputs]
    assert changed == ["queues-kueue"]  # its integration list (tests/test_trainer_install.py); queues unchanged


def test_the_moved_job_resumes_from_the_same_checkpoints(moved):
    before, after = moved
    (old,) = [
        o for o in before.kubernetes_objects() if o["kind"] == "PyTorchJob" and o["metadata"]["name"] == FIXED["name"]
    ]
    (new,) = [o for o in after.kubernetes_objects() if o["kind"] == "TrainJob"]
    (old_container,) = old["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    patch = new["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    (new_container,) = patch["template"]["spec"]["template"]["spec"]["containers"]
    saved = [m for m in old_container["volumeMounts"] if m["name"] == "fsx"]
    assert saved and saved == [m for m in new_container["volumeMounts"] if m["name"] == "fsx"]
    assert saved[0]["subPath"].endswith(f"{FIXED['name']}/run-1")
    env = {e["name"]: e.get("value") for e in new["spec"]["trainer"]["env"]}
    assert env["CHECKPOINT_DIR"] == saved[0]["mountPath"]


def test_the_invariants_see_a_trainjobs_pods_through_its_runtime(plans):
    """The invariants read a TrainJob's pods from its runtime in the plan: a runtime asking for one GPU more than
    the group's nodes have breaks "every pod fits its group's nodes" (and no TrainJob pod is skipped)."""
    plan = plans["dev"]
    cfg = load(_values("dev"), NS, "dev")
    assert invariants.check(plan, cfg) == []

    def more_gpus(records: list[Any]) -> None:
        for r in records:
            if r.type == RUNTIME:
                for rj in r.inputs["spec"]["template"]["spec"]["replicatedJobs"]:
                    (c,) = rj["template"]["spec"]["template"]["spec"]["containers"]
                    for side in ("limits", "requests"):
                        if GPU_RESOURCE in c["resources"].get(side, {}):
                            c["resources"][side][GPU_RESOURCE] += 1

    violations = invariants.check(broken_plan(plan, more_gpus), cfg)
    assert any("TrainJob" in str(v) for v in violations), violations
