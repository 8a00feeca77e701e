"""The whole-stack invariants (infra/invariants.py): they hold on the repository's stacks, and each
rule fails on a plan broken the way it guards against (so a rule that can never fire is caught)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra import invariants
from stacks.config import load
from stacks.config.stackfile import read_stack_config
from tests.helpers import ROOT, broken_plan, dev_values, minimal_values, run_stack

TEAMS = [{"name": "vision", "quotas": [{"nodeGroup": "p4d", "nodes": 1}]}]


@pytest.fixture(scope="module")
def team_stack():
    values = minimal_values(
        queues={"teams": TEAMS},
        autoscaling={"provisioningRequests": True},
        jobs=[{"name": "vision-nccl", "kind": "nccl-test", "nodeGroup": "p4d", "nodes": 1, "team": "vision"}],
    )
    return run_stack(values), load(values, "gpu-training", "test")


def test_the_repository_stacks_keep_every_invariant(dev_plan, prod_plan):
    assert invariants.check(dev_plan, load(dev_values(), "gpu-training", "dev")) == []
    assert invariants.check(prod_plan, load(read_stack_config("prod", ROOT)[1], "gpu-training", "prod")) == []


def test_the_team_stack_keeps_every_invariant(team_stack):
    plan, cfg = team_stack
    assert invariants.check(plan, cfg) == []


def _object(records: list[Any], kind: str, name: str | None = None) -> Any:
    return next(
        r for r in records if r.inputs.get("kind") == kind and (name is None or r.inputs["metadata"]["name"] == name)
    )


def _raise_quota(records: list[Any]) -> None:
    cq = _object(records, "ClusterQueue", "gpu")
    cq.inputs["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = "999"


def _job_asks_too_much(records: list[Any]) -> None:
    job = _object(records, "MPIJob")
    job.inputs["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 40


def _drop_gpu_toleration(records: list[Any]) -> None:
    job = _object(records, "MPIJob")
    spec = job.inputs["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["tolerations"] = []
    for flavor in [r for r in records if r.inputs.get("kind") == "ResourceFlavor"]:
        flavor.inputs["spec"]["tolerations"] = []


def _kueue_before_the_api(records: list[Any]) -> None:
    kueue = next(r for r in records if r.type == invariants.RELEASE and r.inputs["name"] == "kueue")
    kueue.depends_on = [d for d in kueue.depends_on if d["type"] != invariants.CRD]


def _no_policy_binding(records: list[Any]) -> None:
    records[:] = [r for r in records if r.inputs.get("kind") != "ValidatingAdmissionPolicyBinding"]


def _job_before_its_queue(records: list[Any]) -> None:
    job = _object(records, "MPIJob")
    job.depends_on = [d for d in job.depends_on if "localqueue" not in d["name"]]


def _no_provisioning_check(records: list[Any]) -> None:
    for r in records:
        if r.inputs.get("kind") == "ClusterQueue":
            r.inputs["spec"].pop("admissionChecksStrategy", None)


def _level_outside_the_topology(records: list[Any]) -> None:
    job = _object(records, "MPIJob")
    notes = job.inputs["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]
    notes["kueue.x-k8s.io/podset-preferred-topology"] = "topology.k8s.aws/network-node-layer-4"


def _job_tolerates_everything(records: list[Any]) -> None:
    job = _object(records, "MPIJob")
    job.inputs["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"].append({"operator": "Exists"})


def _dcgm_server_misses_the_burn_in_taint(records: list[Any]) -> None:
    agent = next(r for r in records if r.inputs.get("addonName") == "eks-node-monitoring-agent")
    values = json.loads(agent.inputs["configurationValues"])
    values["dcgmAgent"]["tolerations"] = values["dcgmAgent"]["tolerations"][:1]  # the GPU taint's only
    agent.inputs["configurationValues"] = json.dumps(values)


BREAKS = {
    "quota_within_supply": _raise_quota,
    "jobs_admissible": _job_asks_too_much,
    "pods_fit_their_nodes": _drop_gpu_toleration,
    "admission_checks_have_their_api": _kueue_before_the_api,
    "topology_flavors_provisioned": _no_provisioning_check,
    "placements_within_topology": _level_outside_the_topology,
    "team_namespaces_under_policy": _no_policy_binding,
    "created_after_what_they_need": _job_before_its_queue,
    "training_pods_avoid_burn_in": _job_tolerates_everything,
    "gpu_daemonsets_tolerate_burn_in": _dcgm_server_misses_the_burn_in_taint,
}


@pytest.mark.parametrize("rule", sorted(BREAKS))
def test_each_rule_fails_on_a_plan_broken_its_way(rule, team_stack):
    plan, cfg = team_stack
    violations = invariants.check(broken_plan(plan, BREAKS[rule]), cfg)
    assert {v.rule for v in violations} == {rule}, violations


def test_every_rule_has_a_breaking_case():
    assert {r.__name__ for r in invariants.RULES} == set(BREAKS)
