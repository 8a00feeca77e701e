"""Jobs declared in a fleet's manager (stacks/config/fleet_jobs.py, stacks/fleet_jobs.py, jobs.targets.fleet_target):
how they are built (for the GPU type, nothing of the manager's AZ or groups, the worker's Kueue adds its flavor's
labels), the config's rules (each broken once), the dispatch model over every job of the example fleet, the
refusal of a job no worker can take, and the plan's lines."""

from __future__ import annotations

import copy
import dataclasses
import io
import shutil
from pathlib import Path
from typing import Any

import pytest

from facts import catalog
from facts.kube import ACCELERATOR_LABEL, INSTANCE_TYPE_LABEL, NODE_GROUP_LABEL, ZONE_LABEL
from facts.multikueue import CONTROLLER_NAME, JOB_RESOURCES
from facts.operators import REPLICA_SPECS
from infra import plan as plan_module
from infra.plan import load_config
from jobs.pod import PRIORITY_CLASS_LABEL, QUEUE_LABEL
from jobs.registry import build_manifests
from jobs.targets import fleet_flavor
from stacks import config as stack_config
from stacks import fleet, fleet_jobs
from stacks.config.stackfile import load_yaml
from stacks.queues import plan_for
from tests.helpers import ROOT, TRAIN_IMAGE, yaml_objects

EXAMPLES = ROOT / "examples"
MANAGER_FILE = EXAMPLES / "fleet" / "Pulumi.fleet.yaml"
NS = stack_config.NAMESPACE
MPI_OPERATOR = ROOT / "manifests" / "vendor" / "mpi-operator-v0.8.2.yaml"  # vendored: manifests/vendor/SOURCES.md


@pytest.fixture(scope="module")
def manager() -> stack_config.StackConfig:
    return load_config("fleet", None, MANAGER_FILE)


@pytest.fixture(scope="module")
def workers(manager: stack_config.StackConfig) -> list[fleet.WorkerSupply]:
    found = fleet_jobs.present_workers(manager, MANAGER_FILE)
    assert found is not None
    return found


def manager_values(jobs: list[dict[str, Any]], **over: Any) -> dict[str, Any]:
    """The example manager's config with ``jobs`` (and other keys ``over``)."""
    values = load_yaml(MANAGER_FILE.read_text())["config"]
    values[f"{NS}:jobs"] = copy.deepcopy(jobs)
    values.update({f"{NS}:{k}": v for k, v in over.items()})
    return values


def fleet_job(name: str = "j", nodes: int = 2, **over: Any) -> dict[str, Any]:
    return {"name": name, "kind": "nccl-test", "nodeGroup": "p5-48xlarge", "nodes": nodes, **over}


def problems_of(values: dict[str, Any]) -> list[str]:
    with pytest.raises(stack_config.ConfigError) as e:
        stack_config.load(values, "gpu-training", "fleet")
    return [f"{p.key}: {p.message}" for p in e.value.problems]


# ---------------------------------------------------------------------------------------------
# The job object: built for the type, the same on every worker
# ---------------------------------------------------------------------------------------------


def queued_objects(cfg: stack_config.StackConfig) -> list[dict[str, Any]]:
    ctx = fleet_jobs.fleet_context(cfg)
    return [m for spec in fleet_jobs.fleet_specs(cfg) for m in build_manifests(spec, ctx) if m["kind"] in REPLICA_SPECS]


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [rs["template"]["spec"] for rs in obj["spec"][REPLICA_SPECS[obj["kind"]]].values()]


def test_a_fleet_jobs_pods_select_the_type_never_a_group_or_az(manager: stack_config.StackConfig) -> None:
    p5 = catalog.BUILTIN["p5.48xlarge"]
    objects = queued_objects(manager)
    assert [o["metadata"]["name"] for o in objects] == ["nccl-fleet", "nccl-block"]
    for obj in objects:
        for spec in pod_specs(obj):
            assert spec["nodeSelector"] == {INSTANCE_TYPE_LABEL: "p5.48xlarge", ACCELERATOR_LABEL: p5.accelerator}
            assert ZONE_LABEL not in spec["nodeSelector"] and NODE_GROUP_LABEL not in spec["nodeSelector"]
        worker = next(s for s in pod_specs(obj) if "limits" in s["containers"][0]["resources"])
        limits = worker["containers"][0]["resources"]["limits"]
        assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == (p5.gpus, p5.efa_interfaces)
        assert "hugepages-2Mi" in limits
        assert obj["metadata"]["labels"][QUEUE_LABEL] == "gpu"
        assert obj["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "normal"
        assert obj["spec"]["runPolicy"]["managedBy"] == CONTROLLER_NAME


def test_the_workers_kueue_lands_the_pods_on_its_group(manager: stack_config.StackConfig) -> None:
    """What the worker's Kueue does on admission (pkg/podset/podset.go at v0.19.2: the flavor's nodeLabels and
    tolerations merged into the pod template, refused on a key set to another value): the pods then select the
    worker's group, its accelerator and type, and tolerate its taints."""
    for path in (
        EXAMPLES / "fleet-west" / "Pulumi.fleet-west.yaml",
        EXAMPLES / "fleet-block" / "Pulumi.fleet-block.yaml",
    ):
        worker = load_config(path.stem.removeprefix("Pulumi."), None, path)
        queue_plan = plan_for(worker)
        assert queue_plan is not None
        (flavor,) = queue_plan.flavors
        for obj in queued_objects(manager):
            for spec in pod_specs(obj):
                selector = spec["nodeSelector"]
                clash = {k for k, v in flavor.node_labels.items() if k in selector and selector[k] != v}
                assert clash == set()
                merged = {**selector, **flavor.node_labels}
                assert merged[NODE_GROUP_LABEL] == flavor.name and merged[INSTANCE_TYPE_LABEL] == flavor.instance_type


def test_the_objects_pass_the_api_checks(manager: stack_config.StackConfig) -> None:
    crds = [d for d in yaml_objects(MPI_OPERATOR.read_text()) if d["kind"] == "CustomResourceDefinition"]
    objects = queued_objects(manager)
    report = plan_module.api_checks(crds + objects)
    assert report.checked == len(crds + objects) and report.refusals == []
    objects[0]["spec"]["runPolicy"]["managedBy"] = 3  # the CRD's field is a string
    assert plan_module.api_checks(crds + objects).refusals != []


@pytest.mark.parametrize("kind", ["mpi", "nccl-test", "pytorch-elastic", "paddle"])
def test_every_gpu_kind_is_one_multikueue_dispatches_with_the_workers_credential(kind: str) -> None:
    job: dict[str, Any] = {"name": "j", "kind": kind, "nodeGroup": "p5-48xlarge", "nodes": 2}
    if kind != "nccl-test":
        job |= {"image": TRAIN_IMAGE, "command": ["torchrun" if kind == "pytorch-elastic" else "python", "x.py"]}
    if kind == "pytorch-elastic":
        job |= {"rendezvous": "c10d"}
    cfg = stack_config.load(manager_values([job]), "gpu-training", "fleet")
    granted = {(group, resource) for group, resource, _ in JOB_RESOURCES}
    for obj in queued_objects(cfg):
        group = obj["apiVersion"].split("/")[0]
        assert (group, obj["kind"].lower() + "s") in granted


# ---------------------------------------------------------------------------------------------
# The config's rules, each broken once
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "over", "expected"),
    [
        (fleet_job(placement="required"), {}, "jobs[j].placement: 'required' is not allowed on a job of the fleet"),
        (fleet_job(placementLayer=2), {}, "jobs[j].placementLayer: 2 is not allowed on a job of the fleet"),
        (fleet_job(operator="trainer"), {}, "jobs[j].operator: 'trainer' is not allowed on a job of the fleet"),
        (fleet_job(), {"queues": {"enabled": False}}, "jobs[j].nodeGroup: a job of the fleet waits in the manager's"),
        (fleet_job(nodeGroup="p5.48xlarge"), {}, "jobs[j].nodeGroup: 'p5.48xlarge' is not a GPU node group"),
    ],
)
def test_refused(job: dict[str, Any], over: dict[str, Any], expected: str) -> None:
    found = problems_of(manager_values([job], **over))
    assert any(expected in p for p in found), found


def test_sagemaker_is_no_job_of_the_fleet() -> None:
    job = {
        **fleet_job(kind="mpi", image=TRAIN_IMAGE, command=["python", "/opt/ml/code/x.py"]),
        "runtime": "sagemaker",
        "sagemaker": {"outputPath": "s3://bucket/out/"},
    }
    assert any(
        "jobs[j].runtime: 'sagemaker' is not allowed on a job of the fleet" in p
        for p in problems_of(manager_values([job]))
    )


def test_a_stack_that_is_no_manager_has_no_fleet_flavors() -> None:
    values = {"aws:region": "us-west-2", f"{NS}:jobs": [fleet_job()]}
    (found,) = problems_of(values)
    assert "jobs[j].nodeGroup: 'p5-48xlarge' is not a GPU node group of this stack" in found


def test_the_fleet_flavor_is_the_managers_flavor_name(workers: list[fleet.WorkerSupply]) -> None:
    assert set(fleet.summed_quotas(workers)["gpu"]) == {fleet_flavor("p5.48xlarge")}


# ---------------------------------------------------------------------------------------------
# The dispatch model over every job of the example fleet
# ---------------------------------------------------------------------------------------------


def test_the_examples_jobs_have_different_verdicts(
    manager: stack_config.StackConfig, workers: list[fleet.WorkerSupply]
) -> None:
    by_name = {p.name: p for p in fleet_jobs.plans(manager, workers)}
    assert by_name["nccl-fleet"].takers == ["fleet-west", "fleet-block"]
    assert by_name["nccl-block"].takers == ["fleet-block"]
    (west,) = [v for v in by_name["nccl-block"].verdicts if not v.fits]
    assert west.cluster == "fleet-west" and "fewer than 4 p5.48xlarge nodes" in west.reason
    assert all(p.rounds == (("fleet-west", "fleet-block"),) for p in by_name.values())  # AllAtOnce
    assert fleet_jobs.problems(manager, workers) == []


def test_a_job_no_worker_can_take_is_refused_with_each_workers_reason(
    manager: stack_config.StackConfig, workers: list[fleet.WorkerSupply]
) -> None:
    cfg = stack_config.load(manager_values([fleet_job("huge", nodes=5)]), "gpu-training", "fleet")
    (problem,) = fleet_jobs.problems(cfg, workers)
    assert problem.key == f"{NS}:jobs[huge]"
    assert "fleet-west: queue 'gpu' holds fewer than 5" in problem.message
    assert "fleet-block: queue 'gpu' holds fewer than 5" in problem.message


def test_a_job_of_another_type_is_refused_naming_the_missing_group(workers: list[fleet.WorkerSupply]) -> None:
    cfg = stack_config.load(manager_values([fleet_job("h200", nodeGroup="p5en-48xlarge")]), "gpu-training", "fleet")
    (problem,) = fleet_jobs.problems(cfg, workers)
    assert problem.message.count("no p5en.48xlarge node group") == 2


def test_a_worker_without_the_jobs_local_queue_cannot_take_it(
    manager: stack_config.StackConfig, workers: list[fleet.WorkerSupply]
) -> None:
    bare = dataclasses.replace(workers[1], local_queues=())
    by_name = {p.name: p for p in fleet_jobs.plans(manager, [workers[0], bare])}
    assert by_name["nccl-block"].refusal is not None
    assert "fleet-block: no LocalQueue training/gpu" in by_name["nccl-block"].refusal


def worker_copy(w: fleet.WorkerSupply, name: str) -> fleet.WorkerSupply:
    return dataclasses.replace(w, stack=f"acme/gpu-training/{name}", cluster=name)


def test_incremental_offers_three_workers_a_round_in_config_order(
    manager: stack_config.StackConfig, workers: list[fleet.WorkerSupply]
) -> None:
    west, block = workers
    five = [worker_copy(west, f"west-{i}") for i in range(4)] + [block]
    cfg = manager.model_copy(update={"fleet": manager.fleet.model_copy(update={"dispatcher": "Incremental"})})
    by_name = {p.name: p for p in fleet_jobs.plans(cfg, five)}
    block_plan = by_name["nccl-block"]
    assert block_plan.rounds == (("west-0", "west-1", "west-2"), ("west-3", "fleet-block"))
    text = " ".join(fleet_jobs.line(block_plan, "Incremental").split())
    assert "Incremental offers it to west-0, west-1, west-2 first (+5 min: west-3, fleet-block)" in text
    assert "none of them can take it, round 2 can" in text


# ---------------------------------------------------------------------------------------------
# Where the supply comes from, and the plan's text
# ---------------------------------------------------------------------------------------------


def test_a_workers_output_reads_back_as_its_supply(workers: list[fleet.WorkerSupply]) -> None:
    for w in workers:
        assert fleet.supply_from_output(w.output()) == w


def test_the_check_at_pulumi_up_refuses_as_the_plan_does(workers: list[fleet.WorkerSupply]) -> None:
    cfg = stack_config.load(manager_values([fleet_job("huge", nodes=5)]), "gpu-training", "fleet")
    with pytest.raises(stack_config.ConfigError, match=r"jobs\[huge\]"):
        fleet_jobs.refusals_from_outputs(cfg, [w.output() for w in workers])
    fleet_jobs.refusals_from_outputs(cfg.model_copy(update={"jobs": []}), [w.output() for w in workers])


def test_without_the_workers_stack_files_the_check_waits(tmp_path: Path, manager: stack_config.StackConfig) -> None:
    alone = tmp_path / "fleet" / "Pulumi.fleet.yaml"
    alone.parent.mkdir()
    shutil.copy(MANAGER_FILE, alone)
    assert fleet_jobs.check(manager, alone) is None
    assert "checked at `pulumi up`" in "\n".join(fleet_jobs.lines(manager, None))


def test_the_plan_refuses_a_job_no_worker_can_take(tmp_path: Path) -> None:
    """`python -m infra plan` on a manager whose job asks for five nodes: exit 2, the job's key and each worker's
    reason, no traceback."""
    for name in ("fleet-west", "fleet-block"):
        (tmp_path / name).mkdir()
        shutil.copy(EXAMPLES / name / f"Pulumi.{name}.yaml", tmp_path / name)
    (tmp_path / "fleet").mkdir()
    text = MANAGER_FILE.read_text().replace("      nodes: 4\n", "      nodes: 5\n")
    assert text != MANAGER_FILE.read_text()
    (tmp_path / "fleet" / "Pulumi.fleet.yaml").write_text(text)
    out, err = io.StringIO(), io.StringIO()
    code = plan_module.run_cli("fleet", None, out, err, stack_file=str(tmp_path / "fleet" / "Pulumi.fleet.yaml"))
    assert code == plan_module.EXIT_BAD_CONFIG
    assert "gpu-training:jobs[nccl-block]: no worker of the fleet can ever admit it" in err.getvalue()
    assert "fleet-west: queue 'gpu' holds fewer than 5" in err.getvalue() and "Traceback" not in err.getvalue()


def test_the_plan_text_has_a_line_per_job_of_the_fleet(
    manager: stack_config.StackConfig, workers: list[fleet.WorkerSupply]
) -> None:
    text = "\n".join(fleet_jobs.lines(manager, workers))
    assert text.startswith("\nJobs of the fleet (2 workers, dispatcher AllAtOnce):")
    block = text[text.index("  nccl-block") :]
    assert "could run on fleet-block" in block and "not fleet-west: queue 'gpu' holds fewer than 4" in block
    assert "only fleet-block can keep it" in block
    assert all(len(line) <= 120 for line in text.splitlines())


def test_stacks_without_a_fleet_have_no_fleet_lines() -> None:
    assert fleet_jobs.lines(load_config("dev"), None) == []


def test_the_docs_show_the_plans_lines(manager: stack_config.StackConfig, workers: list[fleet.WorkerSupply]) -> None:
    """docs/fleet.md quotes the example's lines as the plan prints them, and a refusal as the check words it."""
    docs = (ROOT / "docs" / "fleet.md").read_text()
    assert "\n".join(fleet_jobs.lines(manager, workers)[1:]) in docs
    cfg = stack_config.load(manager_values([fleet_job("huge", nodes=6)]), "gpu-training", "fleet")
    (problem,) = fleet_jobs.problems(cfg, workers)
    assert " ".join(str(problem).split()) in " ".join(docs.split())


def test_a_managers_own_queues_do_not_judge_its_jobs_of_the_fleet(workers: list[fleet.WorkerSupply]) -> None:
    """A manager with a GPU group of its own (p4d): a four-node p5 job of the fleet is the workers' to admit, not
    its own queue's; a p4d job on its own group is still judged by its own queue."""
    own = [{"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 1}]
    values = manager_values([fleet_job("on-fleet", nodes=4)], gpuNodeGroups=own, gpuAvailabilityZone="us-west-2b")
    cfg = stack_config.load(values, "gpu-training", "fleet")
    assert [s.name for s in fleet_jobs.fleet_specs(cfg)] == ["on-fleet"]
    assert fleet_jobs.problems(cfg, workers) == []
    local = manager_values([fleet_job("local", nodes=2, nodeGroup="p4d")], gpuNodeGroups=own)
    assert any("jobs[local].nodes: 2 is more than node group 'p4d' can hold" in p for p in problems_of(local))
