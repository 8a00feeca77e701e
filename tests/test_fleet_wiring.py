"""The fleet as `pulumi up` registers it (stacks/fleet_wiring.py): the three example stacks planned with
the offline engine, whose mocks answer the manager's stack references with what each worker stack
exports (infra/offline/fleet.py). Each rule is broken once below and shown to fire."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import multikueue as mk
from facts.multikueue import WORKER_CALLS
from infra import offline, plan_fleet
from infra.plan import load_config, plan
from jobs.base import PRIORITIES
from stacks import config as stack_config
from stacks import fleet as fleet_model
from stacks.fleet_wiring import FLEET_OUTPUT, FleetWiringError, check_jobs, checked_output, register_fleet_queues
from stacks.queues.resources import RESOURCES, parse_quantity
from tests.helpers import ROOT, minimal_values
from tests.kueue_crds import errors, kueue_objects

EXAMPLES = ROOT / "examples"
STACKS = ("fleet", "fleet-west", "fleet-block")


def planned(stack: str, folder: Path = EXAMPLES) -> offline.PlanResult:
    return plan(stack, stack_file=folder / stack / f"Pulumi.{stack}.yaml")[1]


@pytest.fixture(scope="module")
def plans() -> dict[str, offline.PlanResult]:
    return {s: planned(s) for s in STACKS}


def objects(result: offline.PlanResult, kind: str) -> list[dict[str, Any]]:
    return [o for o in result.kubernetes_objects() if o["kind"] == kind]


def kueue_config(result: offline.PlanResult) -> dict[str, Any]:
    (release,) = [
        r for r in result.records if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs["name"] == "kueue"
    ]
    return yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])


# ---------------------------------------------------------------------------------------------
# The manager
# ---------------------------------------------------------------------------------------------


def dangling_clusters(result: offline.PlanResult) -> list[str]:
    """MultiKueueClusters whose kubeconfig Secret is not in Kueue's namespace of the plan."""
    secrets = {(s["metadata"].get("namespace"), s["metadata"]["name"]) for s in objects(result, "Secret")}
    return [
        c["metadata"]["name"]
        for c in objects(result, "MultiKueueCluster")
        if ("kueue-system", c["spec"]["clusterSource"]["kubeConfig"]["location"]) not in secrets
    ]


def test_a_cluster_per_worker_each_with_its_kubeconfig_secret(plans: dict[str, offline.PlanResult]) -> None:
    manager = plans["fleet"]
    assert [c["metadata"]["name"] for c in objects(manager, "MultiKueueCluster")] == ["fleet-west", "fleet-block"]
    assert dangling_clusters(manager) == []
    (config,) = objects(manager, "MultiKueueConfig")
    assert config["spec"]["clusters"] == ["fleet-west", "fleet-block"]
    # The kubeconfig is a secret input of its Secret (masked in the plan).
    kubeconfigs = [s for s in objects(manager, "Secret") if s["metadata"]["name"].startswith("multikueue-")]
    assert [s["stringData"] for s in kubeconfigs] == ["[secret]", "[secret]"]
    # Broken: a cluster pointing at a Secret the plan does not have.
    broken = [o for o in manager.kubernetes_objects() if not (o["kind"] == "Secret" and "fleet-west" in str(o))]
    assert dangling_clusters(_only(manager, broken)) == ["fleet-west"]


def _only(result: offline.PlanResult, kept: list[dict[str, Any]]) -> offline.PlanResult:
    ids = {id(o) for o in kept}
    return offline.PlanResult([r for r in result.records if id(r.inputs) in ids], result.outputs)


def planned_supply(results: list[offline.PlanResult], queue: str) -> dict[str, int]:
    """What the workers' own ClusterQueues ``queue`` hold, over every flavor, summed (their plans)."""
    total = dict.fromkeys(RESOURCES, 0)
    for result in results:
        for cq in objects(result, "ClusterQueue"):
            if cq["metadata"]["name"] != queue:
                continue
            for f in cq["spec"]["resourceGroups"][0]["flavors"]:
                for r in f["resources"]:
                    total[r["name"]] += parse_quantity(r["name"], r["nominalQuota"])
    return total


def manager_quota(result: offline.PlanResult, queue: str) -> dict[str, int]:
    (cq,) = [c for c in objects(result, "ClusterQueue") if c["metadata"]["name"] == queue]
    (flavor,) = cq["spec"]["resourceGroups"][0]["flavors"]
    return {r["name"]: parse_quantity(r["name"], r["nominalQuota"]) for r in flavor["resources"]}


def test_manager_quota_is_the_sum_of_the_workers_planned_queues(plans: dict[str, offline.PlanResult]) -> None:
    workers = [plans["fleet-west"], plans["fleet-block"]]
    assert manager_quota(plans["fleet"], "gpu") == planned_supply(workers, "gpu")
    assert manager_quota(plans["fleet"], "gpu")["nvidia.com/gpu"] == (4 + 2) * 8
    # Broken: one worker less is not the manager's quota.
    assert manager_quota(plans["fleet"], "gpu") != planned_supply(workers[:1], "gpu")
    (cq,) = objects(plans["fleet"], "ClusterQueue")
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": mk.ADMISSION_CHECK}]}


def test_every_kueue_object_is_valid_against_the_vendored_crds(plans: dict[str, offline.PlanResult]) -> None:
    every = [o for p in plans.values() for o in kueue_objects(p.kubernetes_objects())]
    assert {o["kind"] for o in every} >= {"MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck", "ClusterQueue"}
    assert [e for o in every for e in errors(o)] == []
    # Broken: the CRD's CEL rule (clusters listed once) fires on the planned config.
    (config,) = objects(plans["fleet"], "MultiKueueConfig")
    twice = {**config, "spec": {"clusters": ["fleet-west", "fleet-west"]}}
    assert errors(twice) != []


def test_a_manager_without_gpus_runs_kueue_with_multikueue(plans: dict[str, offline.PlanResult]) -> None:
    config = kueue_config(plans["fleet"])
    assert config["multiKueue"] == {
        "gcInterval": "1m",
        "origin": "gpu-training-fleet",
        "workerLostTimeout": "15m",
        "dispatcherName": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
    }
    frameworks = config["integrations"]["frameworks"]
    assert {"batch/job", "kubeflow.org/mpijob", "kubeflow.org/pytorchjob"} <= set(frameworks)
    # Broken: a worker (not a manager) has no multiKueue section.
    assert "multiKueue" not in kueue_config(plans["fleet-west"])


def test_the_manager_runs_the_operators_its_jobs_need(plans: dict[str, offline.PlanResult]) -> None:
    """Kueue sets managedBy on the manager's MPIJobs and Kubeflow jobs: their operators run there too and
    leave them alone (MPI operator v0.6.0 and later, Trainer v1.9)."""
    crds = {o["metadata"]["name"] for o in objects(plans["fleet"], "CustomResourceDefinition")}
    assert {"mpijobs.kubeflow.org", "pytorchjobs.kubeflow.org"} <= crds


# ---------------------------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------------------------


def granted(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_the_workers_role_is_multikueues_calls(plans: dict[str, offline.PlanResult]) -> None:
    calls = {(c.api_group, c.resource, c.verb) for c in WORKER_CALLS}
    for worker in ("fleet-west", "fleet-block"):
        (role,) = [r for r in objects(plans[worker], "ClusterRole") if r["metadata"]["name"] == mk.WORKER_ROLE]
        assert granted(role["rules"]) == calls
        (binding,) = [
            b for b in objects(plans[worker], "ClusterRoleBinding") if b["metadata"]["name"] == mk.WORKER_ROLE
        ]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "multikueue", "namespace": "kueue-system"}]
    # Broken: a role with one verb more is not the calls.
    wider = [*role["rules"], {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    assert granted(wider) != calls
    assert [r for r in objects(plans["fleet"], "ClusterRole") if r["metadata"]["name"] == mk.WORKER_ROLE] == []


def kubeconfig_problems(text: str) -> list[str]:
    """What Kueue v0.19.2 refuses in a MultiKueueCluster's kubeconfig (multikueuecluster.go validateKubeconfig,
    validateRestConfig): token files, exec plugins, auth providers, basic auth, CA file paths, skipped TLS."""
    config = yaml.safe_load(text)
    out = []
    for user in config.get("users") or []:
        u = user["user"]
        out += [f"user {user['name']}: {k}" for k in ("tokenFile", "exec", "auth-provider", "username") if k in u]
    for cluster in config.get("clusters") or []:
        c = cluster["cluster"]
        out += [
            f"cluster {cluster['name']}: {k}" for k in ("certificate-authority", "insecure-skip-tls-verify") if c.get(k)
        ]
        if not str(c.get("server", "")).startswith("https://"):
            out.append(f"cluster {cluster['name']}: server")
    return out


def test_the_workers_kubeconfig_is_a_secret_kueue_accepts(plans: dict[str, offline.PlanResult]) -> None:
    assert plans["fleet-west"].outputs[FLEET_OUTPUT] == "[secret]"
    answer = offline.offline_fleet(_cfg("fleet"), EXAMPLES / "fleet" / "Pulumi.fleet.yaml")
    for worker in answer.outputs.values():
        kubeconfig = worker[FLEET_OUTPUT]["kubeconfig"]
        assert kubeconfig_problems(kubeconfig) == []
        assert json.loads(kubeconfig)["users"][0]["user"]["token"]
    # Broken: the EKS kubeconfig the stack itself exports (an exec plugin, `aws eks get-token`) is refused.
    eks = json.loads(_mock_kubeconfig())
    assert kubeconfig_problems(json.dumps(eks)) == [f"user {eks['users'][0]['name']}: exec"]


def _mock_kubeconfig() -> str:
    return json.dumps(offline.mocks._fake_kubeconfig("c", "us-west-2"))


def _cfg(stack: str) -> Any:
    return load_config(stack, None, EXAMPLES / stack / f"Pulumi.{stack}.yaml")


def test_rotation_keeps_the_token_before(tmp_path: Path) -> None:
    folder = _copy_fleet(tmp_path)
    path = folder / "fleet-west" / "Pulumi.fleet-west.yaml"
    _edit(path, "gpu-training:fleet", {"manager": "acme/gpu-training/fleet", "tokenGeneration": 2})
    west = planned("fleet-west", folder)
    names = sorted(s["metadata"]["name"] for s in objects(west, "Secret") if s.get("type") == mk.TOKEN_TYPE)
    assert names == ["multikueue-token-1", "multikueue-token-2"]
    answer = offline.offline_fleet(_cfg_at(folder, "fleet"), folder / "fleet" / "Pulumi.fleet.yaml")
    assert answer.outputs["acme/gpu-training/fleet-west"][FLEET_OUTPUT]["tokenSecret"] == "multikueue-token-2"


def _cfg_at(folder: Path, stack: str) -> Any:
    return load_config(stack, None, folder / stack / f"Pulumi.{stack}.yaml")


# ---------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------


def _copy_fleet(tmp_path: Path) -> Path:
    for stack in STACKS:
        shutil.copytree(EXAMPLES / stack, tmp_path / stack)
    return tmp_path


def test_a_worker_not_deployed_stops_the_manager(tmp_path: Path) -> None:
    folder = _copy_fleet(tmp_path)
    (folder / "fleet-block" / "Pulumi.fleet-block.yaml").unlink()  # no stack: no outputs
    with pytest.raises(Exception, match=r"stack 'acme/gpu-training/fleet-block' has no 'fleetWorker' output") as err:
        planned("fleet", folder)
    assert "set `manager: acme/gpu-training/fleet`" in str(err.value)


def test_a_worker_of_another_manager_is_refused() -> None:
    output: Mapping[str, Any] = {k: None for k in ("stack", "cluster", "region", "availabilityZone", "flavors")}
    output = {**output, "queues": {}, "localQueues": [], "priorities": dict(PRIORITIES), "kubeconfig": "k"}
    output["manager"] = "acme/p/other"
    with pytest.raises(FleetWiringError, match="serves the manager 'acme/p/other', not 'acme/p/fleet'"):
        checked_output("acme/p/west", "acme/p/fleet", output)
    assert checked_output("acme/p/west", "acme/p/other", output)["manager"] == "acme/p/other"
    with pytest.raises(FleetWiringError, match="has no 'fleetWorker' output"):
        checked_output("acme/p/west", "acme/p/fleet", None)


def test_a_worker_with_other_priority_classes_is_refused() -> None:
    """A job keeps its priority class label on the worker's copy: a worker deployed by another release
    (other WorkloadPriorityClasses) would refuse or misorder the fleet's jobs."""
    output: dict[str, Any] = {k: None for k in ("stack", "cluster", "region", "availabilityZone", "flavors")}
    output.update(queues={}, localQueues=[], kubeconfig="k", manager="acme/p/fleet")
    assert checked_output("acme/p/west", "acme/p/fleet", {**output, "priorities": dict(PRIORITIES)})
    with pytest.raises(FleetWiringError, match=r"stack 'acme/p/west' has the priority classes \{'low': 1\}"):
        checked_output("acme/p/west", "acme/p/fleet", {**output, "priorities": {"low": 1}})


# ---------------------------------------------------------------------------------------------
# The plan's text
# ---------------------------------------------------------------------------------------------


def test_the_plan_text_has_a_fleet_block(plans: dict[str, offline.PlanResult]) -> None:
    manager = plan_fleet.lines(_cfg("fleet"), plans["fleet"].outputs)
    assert manager[1].startswith("Fleet manager (MultiKueue, dispatcher AllAtOnce): 2 worker(s)")
    assert "  fleet-west (us-west-2b): p5 2 x p5.48xlarge" in manager
    assert any(line.startswith("  fleet-block (us-west-2a): p5 4 x p5.48xlarge, capacity block") for line in manager)
    assert "  ClusterQueue gpu, p5-48xlarge (summed): 48 GPUs" in "\n".join(manager)
    worker = plan_fleet.lines(_cfg("fleet-west"), plans["fleet-west"].outputs)
    assert worker[1].startswith("Fleet worker of acme/gpu-training/fleet: MultiKueue acts as kueue-system/multikueue")
    assert "  may workloads/status: update" in worker
    assert all(len(line) <= 120 for line in manager + worker)
    # Broken: a stack outside a fleet (dev) has no fleet block.
    assert plan_fleet.lines(load_config("dev"), {}) == []


def _edit(path: Path, section: str, value: Any) -> None:
    values = yaml.safe_load(path.read_text())
    values["config"][section] = value
    path.write_text(yaml.safe_dump(values))


def test_a_workers_queue_in_a_namespace_the_manager_lacks_is_refused(tmp_path: Path) -> None:
    folder = _copy_fleet(tmp_path)
    _edit(folder / "fleet-west" / "Pulumi.fleet-west.yaml", "gpu-training:services", {"trainingNamespace": "west"})
    with pytest.raises(Exception, match="LocalQueue 'gpu' is in namespace 'west', which the manager has not"):
        planned("fleet", folder)


class _Recorder:
    def __init__(self) -> None:
        self.added: list[Any] = []

    def add_queues(self, args: Any) -> dict[Any, Any]:
        self.added.append(args)
        return {("LocalQueue", "training", "gpu"): "the LocalQueue"}


def test_the_managers_own_queues_and_the_fleets_are_named_apart() -> None:
    workers = fleet_model.offline_workers(_cfg("fleet"), EXAMPLES / "fleet" / "Pulumi.fleet.yaml")
    manager = _Recorder()
    made = register_fleet_queues(manager, ["team-a"], workers)  # type: ignore[arg-type]
    assert made == {("LocalQueue", "training", "gpu"): "the LocalQueue"}  # what the manager registered, for the jobs
    assert [q.name for q in manager.added[0].cluster_queues] == ["gpu"]
    assert manager.added[0].cluster_queues[0].quotas["p5-48xlarge"]["nvidia.com/gpu"] == "48"
    # Broken: a manager whose own GPU queue is also called gpu.
    with pytest.raises(FleetWiringError, match=r"ClusterQueue\(s\) gpu have the names of this stack's own queues"):
        register_fleet_queues(_Recorder(), ["gpu"], workers)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fleet", "expected"),
    [
        ({"tokenGeneration": 2}, "tokenGeneration 2 is set but the stack names no manager"),
        ({"manager": "a/p/m", "tokenGeneration": 0}, "gpu-training:fleet.tokenGeneration: 0 is not allowed"),
    ],
)
def test_token_generation_only_on_a_worker(fleet: dict[str, Any], expected: str) -> None:
    values = minimal_values(fleet=fleet)
    with pytest.raises(stack_config.ConfigError, match=expected):
        stack_config.load(values, "gpu-training", "w")
    fine = minimal_values(fleet={"manager": "a/p/m", "tokenGeneration": 2})
    assert stack_config.load(fine, "gpu-training", "w").fleet.token_generation == 2


def test_the_managers_jobs_wait_for_the_fleets_localqueue(plans: dict[str, offline.PlanResult]) -> None:
    """The fleet's LocalQueues are registered once the workers' outputs are read; a job of the fleet still
    waits for the one it names (a queued job created before its LocalQueue would be refused by Kueue's
    webhook as naming no queue)."""
    records = plans["fleet"].records
    queues = {r.name for r in records if r.type.endswith(":LocalQueue")}
    assert "fleet-manager-localqueue-training-gpu" in queues
    jobs = [r for r in records if r.type.endswith(":MPIJob")]
    assert {r.name for r in jobs} == {"jobs-nccl-fleet-mpijob", "jobs-nccl-block-mpijob"}
    for job in jobs:
        assert {
            "type": "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue",
            "name": "fleet-manager-localqueue-training-gpu",
        } in [{"type": d["type"], "name": d["name"]} for d in job.depends_on], job.name


def test_pulumi_up_refuses_a_fleet_job_no_worker_read_can_take() -> None:
    """At `pulumi up` the workers come through stack references: the same job check runs over their outputs."""
    cfg = _cfg("fleet")
    workers = fleet_model.offline_workers(cfg, EXAMPLES / "fleet" / "Pulumi.fleet.yaml")
    check_jobs(cfg, [w.output() for w in workers])  # both workers: every job has one
    west = [w.output() for w in workers if w.stack.endswith("/fleet-west")]
    with pytest.raises(FleetWiringError, match=r"nccl-block.*fleet-west: queue 'gpu' holds fewer than 4"):
        check_jobs(cfg, west)
