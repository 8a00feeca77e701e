"""The examples (examples/<scenario>/Pulumi.<scenario>.yaml), as terraform-aws-eks and pulumi-eks
keep theirs: each is planned once, in place, by the very command its README gives, and must plan
cleanly, keep every whole-stack invariant, leave no placeholder but the ones marked to replace, and
show what its scenario is about. Every folder under examples/ is picked up; a new one needs its
scenario check in SCENARIOS and a link in the README."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from components import node_scaling
from infra import invariants, offline
from infra import plan as plan_mod
from infra.__main__ import main
from jobs.registry import JOB_KINDS
from stacks import config as stack_config
from stacks.config.placeholders import placeholders
from tests.helpers import ROOT

EXAMPLES_DIR = ROOT / "examples"
EXAMPLES = sorted(p.name for p in EXAMPLES_DIR.iterdir() if p.is_dir())
SCHEDULE = "aws:autoscaling/schedule:Schedule"
SAGEMAKER_JOB = "pulumi-python:dynamic/gputraining:SageMakerTrainingJob"


def stack_file(name: str) -> Path:
    return EXAMPLES_DIR / name / f"Pulumi.{name}.yaml"


def readme_command(name: str) -> list[str]:
    """The plan command the example's README gives (`.venv/bin/python -m infra plan ...`)."""
    text = (EXAMPLES_DIR / name / "README.md").read_text()
    (line,) = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(".venv/bin/python -m infra plan ")]
    return shlex.split(line)


@dataclass(frozen=True)
class Example:
    name: str
    cfg: stack_config.StackConfig
    plan: offline.PlanResult
    code: int
    stdout: str
    stderr: str

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.plan.kubernetes_objects() if o["kind"] == kind]

    def object(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        (found,) = [
            o
            for o in self.objects(kind)
            if o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
        ]
        return found


@pytest.fixture(scope="module", params=EXAMPLES)
def example(request: pytest.FixtureRequest) -> Example:
    """The example planned once, by its README's command run in the project root (the plan
    function is wrapped to keep what it planned)."""
    name = request.param
    argv = readme_command(name)
    assert argv[:4] == [".venv/bin/python", "-m", "infra", "plan"], argv
    planned: list[tuple[stack_config.StackConfig, offline.PlanResult]] = []
    real_plan = plan_mod.plan

    def keeping(
        stack: str, root: Path | None = None, stack_file: Path | None = None
    ) -> tuple[stack_config.StackConfig, offline.PlanResult]:
        planned.append(real_plan(stack, root, stack_file))
        return planned[-1]

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.chdir(ROOT)
        mp.setattr(plan_mod, "plan", keeping)
        code = main(argv[3:])
    assert len(planned) == 1, err.getvalue()
    cfg, result = planned[0]
    return Example(name, cfg, result, code, out.getvalue(), err.getvalue())


# ---------------------------------------------------------------------------------------------
# Every example
# ---------------------------------------------------------------------------------------------


def test_the_scenarios_of_the_issue_are_there():
    assert {"minimal", "teams", "capacity-block", "sagemaker-hybrid", "all-job-kinds"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_example_is_its_stack_file_and_a_readme_planning_it_in_place(name: str):
    assert sorted(p.name for p in (EXAMPLES_DIR / name).iterdir()) == sorted([f"Pulumi.{name}.yaml", "README.md"])
    argv = readme_command(name)
    assert argv[3:] == ["plan", "--stack", name, "--config-file", f"examples/{name}/Pulumi.{name}.yaml"]
    readme = (EXAMPLES_DIR / name / "README.md").read_text()
    assert f"cp examples/{name}/Pulumi.{name}.yaml Pulumi.<env>.yaml" in readme
    assert f"--config-file examples/{name}/Pulumi.{name}.yaml" in stack_file(name).read_text()  # the file says it too


def test_every_example_is_linked_from_the_readme():
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    assert sorted(re.findall(r"\]\(examples/([^/)]+)/\)", section)) == EXAMPLES


def test_each_example_plans_cleanly(example: Example):
    assert (example.code, example.stderr) == (plan_mod.EXIT_OK, ""), example.stderr
    kinds = {r.type for r in example.plan.records}
    assert {"eks:index:Cluster", "eks:index:ManagedNodeGroup", "aws:ec2/vpc:Vpc"} <= kinds
    assert example.plan.outputs["clusterName"] == f"gpu-training-{example.name}"
    assert example.stdout.startswith(
        f"Stack gpu-training/{example.name} in us-west-2: cluster gpu-training-{example.name}"
    )


def test_each_example_keeps_every_invariant(example: Example):
    assert invariants.check(example.plan, example.cfg) == []
    assert f"Whole-stack invariants: {len(invariants.RULES)} of {len(invariants.RULES)} hold" in example.stdout
    assert "objects checked — all accepted\n" in example.stdout  # the Kubernetes API rules (infra/api_checks)


def test_each_placeholder_left_is_marked_to_replace(example: Example):
    """What preflight would refuse (placeholders.py) is only there on a line marked REPLACE."""
    lines = stack_file(example.name).read_text().splitlines()
    found = placeholders(example.cfg)
    for problem in found:
        value = re.match(r"'([^']+)'", problem.message)
        assert value is not None, problem
        holding = [ln for ln in lines if value.group(1) in ln]
        assert holding and all("# REPLACE" in ln for ln in holding), (problem.key, holding)
    assert [ln for ln in example.stdout.splitlines() if ln.startswith("warning: ")] == [f"warning: {p}" for p in found]


def test_every_enabled_job_is_planned(example: Example):
    enabled = [j for j in example.cfg.jobs if j.enabled]
    assert enabled, "an example shows at least one job"
    labelled = {o["metadata"].get("labels", {}).get("gputraining/job") for o in example.plan.kubernetes_objects()}
    on_sagemaker = set(_sagemaker_requests(example))
    for job in enabled:
        assert job.name in (on_sagemaker if getattr(job, "runtime", "eks") == "sagemaker" else labelled), job.name


# ---------------------------------------------------------------------------------------------
# What each scenario is about
# ---------------------------------------------------------------------------------------------


def _minimal(ex: Example) -> None:
    (group,) = ex.cfg.gpu_node_groups
    assert group.autoscaled and group.min_size == 0 and group.placement.mode == "create"
    tags = [r.inputs for r in ex.plan.of_type("aws:autoscaling/tag:Tag") if r.name.startswith(f"gpu-{group.name}-")]
    # The autoscaler's node template on the group's ASG: what a node would offer, so it scales up from zero.
    template = {
        t["tag"]["key"].removeprefix("k8s.io/cluster-autoscaler/node-template/"): t["tag"]["value"] for t in tags
    }
    assert template["resources/nvidia.com/gpu"] == "8" and template["resources/vpc.amazonaws.com/efa"] == "4"
    assert template["gputraining/autoscale"] == "true"
    assert [o["metadata"]["name"] for o in ex.objects("ClusterQueue")] == ["gpu"]
    assert ex.object("MPIJob", "nccl-p4d", "training")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert re.search(r"^  nccl-p4d .* gpu: admitted at once ", ex.stdout, re.M)  # its line of the GPU jobs table


def _teams(ex: Example) -> None:
    teams = ex.cfg.queues.teams
    assert len(teams) >= 2
    binding = ex.object("ValidatingAdmissionPolicyBinding", "gputraining-team-pods")
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [{"key": "gputraining/team", "operator": "Exists"}]
    }
    entries = {
        r.inputs["principalArn"]: r.inputs
        for r in ex.plan.of_type("aws:eks/accessEntry:AccessEntry")
        if "gputraining/team" in r.inputs["tags"]
    }
    for team in teams:
        namespace = team.namespace or team.name
        assert ex.object("Namespace", namespace)["metadata"]["labels"]["gputraining/team"] == team.name
        assert ex.object("LocalQueue", "default", namespace)["spec"] == {"clusterQueue": team.name}
        assert ex.object("LocalQueue", team.name, "training")["spec"] == {"clusterQueue": team.name}
        spec = ex.object("ClusterQueue", team.name)["spec"]
        assert spec["cohortName"] == "gpu-training"
        flavors = {f["name"]: {q["name"]: q for q in f["resources"]} for f in spec["resourceGroups"][0]["flavors"]}
        for quota in team.quotas:
            group = next(g for g in ex.cfg.gpu_node_groups if g.name == quota.node_group)
            gpu = flavors[quota.node_group]["nvidia.com/gpu"]
            assert gpu["nominalQuota"] == str(quota.nodes * group.instance.gpus)
            if quota.borrowing_limit is not None:
                assert gpu["borrowingLimit"] == str(quota.borrowing_limit * group.instance.gpus)
            if quota.lending_limit is not None:
                assert gpu["lendingLimit"] == str(quota.lending_limit * group.instance.gpus)
        assert team.role_arn and entries[team.role_arn]["kubernetesGroups"] == [f"gputraining:team:{team.name}"]
    for job in ex.cfg.jobs:
        if getattr(job, "team", None):
            labels = next(o for o in ex.objects(JOB_OBJECT[job.kind]) if o["metadata"]["name"] == job.name)["metadata"][
                "labels"
            ]
            assert labels["kueue.x-k8s.io/queue-name"] == job.team
    assert ex.object("ValidatingAdmissionPolicy", "gputraining-team-pods")


def _capacity_block(ex: Example) -> None:
    (group,) = [g for g in ex.cfg.gpu_node_groups if g.capacity_type == "capacity-block"]
    window = group.capacity_block_window
    assert window is not None and group.instance_type == "p5.48xlarge" and not group.autoscaled
    # The example's window lies ahead (in 2030), so both scheduled actions are registered.
    block = node_scaling.capacity_block_plan(*window, group.max_size)
    assert block.phase == "before", "the capacity-block example's window has come: move it later"
    schedules = {r.name: (r.inputs["startTime"], r.inputs["desiredCapacity"]) for r in ex.plan.of_type(SCHEDULE)}
    assert schedules == {
        f"gpu-{group.name}-{a.suffix}": (a.at.strftime("%Y-%m-%dT%H:%M:%SZ"), a.size) for a in block.actions
    }
    assert schedules[f"gpu-{group.name}-block-start"] == (window[0].strftime("%Y-%m-%dT%H:%M:%SZ"), group.max_size)
    assert schedules[f"gpu-{group.name}-block-end"][1] == 0
    lt = ex.plan.named("aws:ec2/launchTemplate:LaunchTemplate", f"gpu-{group.name}-lt").inputs
    assert lt["instanceMarketOptions"]["marketType"] == "capacity-block"
    assert (
        lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"]
        == group.capacity_reservation_id
    )
    assert not [r for r in ex.plan.of_type("aws:autoscaling/tag:Tag") if r.name.startswith(f"gpu-{group.name}-")]
    assert not [r for r in ex.plan.records if r.type == "aws:ec2/placementGroup:PlacementGroup"]
    # The queue counts the block's nodes from the start; jobs on the group wait in it.
    flavor = next(
        f for f in ex.object("ClusterQueue", "gpu")["spec"]["resourceGroups"][0]["flavors"] if f["name"] == group.name
    )
    assert {q["name"]: q["nominalQuota"] for q in flavor["resources"]}["nvidia.com/gpu"] == str(
        group.max_size * group.instance.gpus
    )
    on_block = [j for j in ex.cfg.jobs if getattr(j, "node_group", None) == group.name]
    assert len(on_block) >= 2
    assert f"scheduled to {group.max_size} nodes at its start" in ex.stdout


def _sagemaker_hybrid(ex: Example) -> None:
    by_name = {j.name: j for j in ex.cfg.jobs}
    pairs = [
        (by_name[name], by_name[name.removesuffix("-sagemaker") + "-eks"])
        for name in by_name
        if name.endswith("-sagemaker")
    ]
    assert {sm.kind for sm, _ in pairs} == {"mpi", "pytorch-elastic"}
    requests = _sagemaker_requests(ex)
    assert set(requests) == {sm.name for sm, _ in pairs}
    for sm, eks in pairs:
        # One spec: the twins differ in their name and runtime only.
        assert sm.model_dump(exclude={"name", "runtime"}) == eks.model_dump(exclude={"name", "runtime"})
        assert (sm.runtime, eks.runtime) == ("sagemaker", "eks")
        request = requests[sm.name]
        assert request["AlgorithmSpecification"]["TrainingImage"] == eks.image
        assert request["ResourceConfig"]["InstanceType"] == f"ml.{ex.cfg.gpu_node_groups[0].instance_type}"
        flags = {flag.removeprefix("--"): value for flag, value in zip(eks.args, eks.args[1:]) if flag.startswith("--")}
        assert flags and {k: request["HyperParameters"][k] for k in flags} == {k: f'"{v}"' for k, v in flags.items()}
        assert {c["ChannelName"] for c in request["InputDataConfig"]} == {v.name for v in eks.volumes}
        manifest = next(o for o in ex.objects(JOB_OBJECT[eks.kind]) if o["metadata"]["name"] == eks.name)
        containers = [c for spec in _replica_specs(manifest) for c in spec["template"]["spec"]["containers"]]
        assert {c["image"] for c in containers} == {eks.image}
        assert not [
            o for o in ex.plan.kubernetes_objects() if o["metadata"].get("labels", {}).get("gputraining/job") == sm.name
        ]
    assert re.search(r"^  not counted [^\n]*(\n    [^\n]*)*SageMaker training jobs", ex.stdout, re.M)


def _all_job_kinds(ex: Example) -> None:
    kinds = [j.kind for j in ex.cfg.jobs if j.enabled]
    assert set(kinds) == set(JOB_KINDS), "every kind of jobs/registry.py has a job in the all-job-kinds example"
    assert {getattr(j, "mode", None) for j in ex.cfg.jobs if j.kind == "paddle"} == {"collective", "ps"}
    for job in ex.cfg.jobs:
        assert any(o["metadata"]["name"] == job.name for o in ex.objects(JOB_OBJECT[job.kind])), job.name
    paddles = {o["metadata"]["name"]: set(o["spec"]["paddleReplicaSpecs"]) for o in ex.objects("PaddleJob")}
    assert sorted(paddles.values(), key=len) == [{"Worker"}, {"Master", "Worker"}]
    stage = next(j for j in ex.cfg.jobs if j.kind == "data-stage")
    assert ex.object("ServiceAccount", stage.name, "training")
    assert [
        r
        for r in ex.plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if r.inputs["serviceAccount"] == stage.name
    ]
    board = next(j for j in ex.cfg.jobs if j.kind == "tensorboard")
    assert ex.object("Service", board.name, "training")["spec"]["type"] == "ClusterIP"


# The object each kind is seen by in the plan.
JOB_OBJECT = {
    "mpi": "MPIJob",
    "nccl-test": "MPIJob",
    "pytorch-elastic": "PyTorchJob",
    "paddle": "PaddleJob",
    "data-stage": "Job",
    "tensorboard": "Deployment",
}


def _sagemaker_requests(ex: Example) -> dict[str, dict[str, Any]]:
    """The CreateTrainingJob request of each SageMaker job, by the job's name (its tag)."""
    requests = [r.inputs["request"] for r in ex.plan.of_type(SAGEMAKER_JOB)]
    return {next(t["Value"] for t in req["Tags"] if t["Key"] == "gputraining/job"): req for req in requests}


def _replica_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    spec = manifest["spec"]
    replicas = spec.get("mpiReplicaSpecs") or spec.get("pytorchReplicaSpecs") or spec.get("paddleReplicaSpecs")
    return list(replicas.values())


def _fleet_manager(ex: Example) -> None:
    """The fleet's control stack: no GPU group of its own, two workers (tests/test_fleet.py plans the fleet)."""
    assert ex.cfg.gpu_node_groups == [] and ex.cfg.fleet.role == "manager" and len(ex.cfg.fleet.workers) == 2


def _fleet_worker(ex: Example) -> None:
    """A worker of the fleet: one p5 group, naming the fleet's manager."""
    assert ex.cfg.fleet.manager is not None and ex.cfg.fleet.manager.endswith("/fleet")
    assert [g.instance_type for g in ex.cfg.gpu_node_groups] == ["p5.48xlarge"]


SCENARIOS: dict[str, Callable[[Example], None]] = {
    "minimal": _minimal,
    "teams": _teams,
    "capacity-block": _capacity_block,
    "sagemaker-hybrid": _sagemaker_hybrid,
    "all-job-kinds": _all_job_kinds,
    "fleet": _fleet_manager,
    "fleet-west": _fleet_worker,
    "fleet-block": _fleet_worker,
}


def test_every_example_has_its_scenario_check():
    assert sorted(SCENARIOS) == EXAMPLES


def test_each_example_shows_its_scenario(example: Example):
    SCENARIOS[example.name](example)
