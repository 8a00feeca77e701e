"""The plan's cost stays linear in the stack's size (issue 37), checked by structure, not by time (the speed
figures are scripts/benchmark_scaling.py's): the generated stacks the benchmark plans are valid at every
size; a job waits for what it names (its namespace, operator, claims, etcd, queue), never for whole
components, so its dependencies do not grow with the stack; the invariants, indexed once, still find each
violation planted in a large generated stack, job by job; and the benchmark script runs."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from infra import invariants
from scripts import benchmark_scaling
from stacks.config import load
from tests.helpers import ROOT, broken_plan, run_stack

MPIJOB = "kubernetes:kubeflow.org/v2beta1:MPIJob"
PYTORCHJOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
SIZE = (16, 96, 4)  # groups, jobs, teams: big enough that a rule looking jobs up in the whole plan shows


@pytest.fixture(scope="module")
def generated():
    values = benchmark_scaling.stack_values(*SIZE)
    return run_stack(values), load(values, "gpu-training", "test")


@pytest.mark.parametrize("size", benchmark_scaling.POINTS, ids=str)
def test_every_benchmark_stack_is_a_valid_config(size):
    cfg = load(benchmark_scaling.stack_values(*size), "gpu-training", "test")
    assert (len(cfg.gpu_node_groups), len(cfg.jobs), len(cfg.queues.teams)) == size


def test_the_generator_refuses_more_groups_than_a_resource_group_holds():
    with pytest.raises(ValueError, match="groups must be 1 to 64"):
        benchmark_scaling.stack_values(benchmark_scaling.MAX_GROUPS + 1, 1, 0)


def _deps(record: Any) -> set[str]:
    return {d["name"] for d in record.depends_on}


def test_a_job_waits_for_what_it_names_only(generated):
    plan, cfg = generated
    jobs = [r for r in plan.records if r.type in (MPIJOB, PYTORCHJOB)]
    assert len(jobs) == SIZE[1]
    for job in jobs:
        kinds = {d["type"].split(":")[-1] for d in job.depends_on}
        # Namespace, operator, Kueue, LocalQueue, priority class; a claim, etcd, a ConfigMap where named.
        assert len(job.depends_on) <= 10, (job.name, _deps(job))
        assert {"Namespace", "Deployment", "Release", "LocalQueue", "WorkloadPriorityClass"} <= kinds, job.name
        mounted = {
            v["persistentVolumeClaim"]["claimName"]
            for rs in job.inputs["spec"][next(k for k in job.inputs["spec"] if k.endswith("ReplicaSpecs"))].values()
            for v in rs["template"]["spec"].get("volumes") or []
            if "persistentVolumeClaim" in v
        }
        claims = {plan.named(PVC, d["name"]).inputs["metadata"]["name"] for d in job.depends_on if d["type"] == PVC}
        assert claims == mounted, job.name
        etcd = {"rdzvHost" in str(job.inputs["spec"]), any(d["type"] == STATEFUL_SET for d in job.depends_on)}
        assert len(etcd) == 1, job.name  # waits for etcd exactly when it rendezvous on it


def test_the_dependencies_grow_with_the_jobs_not_with_jobs_times_resources(generated):
    plan, _ = generated
    edges = sum(len(r.depends_on) for r in plan.records)
    assert edges < 6 * len(plan.records), (edges, len(plan.records))


def test_a_narrowed_job_still_keeps_created_after_what_they_need(generated):
    """Each job reaches its CRD and Kueue through what it waits for (the operator, its LocalQueue)."""
    plan, cfg = generated
    assert [v for v in invariants.check(plan, cfg) if v.rule == "created_after_what_they_need"] == []


def _every_third_mpijob(change):
    def apply(records: list[Any]) -> None:
        for job in [r for r in records if r.type == MPIJOB][::3]:
            change(job)

    return apply


def _asks_too_much(job: Any) -> None:
    job.inputs["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 40


def _tolerates_everything(job: Any) -> None:
    job.inputs["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"].append({"operator": "Exists"})


def _not_after_its_queue(job: Any) -> None:
    job.depends_on = [d for d in job.depends_on if d["type"].split(":")[-1] not in ("LocalQueue", "Release")]


PLANTED = {
    "jobs_admissible": _asks_too_much,
    "training_pods_avoid_burn_in": _tolerates_everything,
    "created_after_what_they_need": _not_after_its_queue,
}


@pytest.mark.parametrize("rule", sorted(PLANTED))
def test_each_planted_job_is_found_in_a_large_stack(rule, generated):
    plan, cfg = generated
    planted = [r.inputs["metadata"]["name"] for r in plan.records if r.type == MPIJOB][::3]
    violations = invariants.check(broken_plan(plan, _every_third_mpijob(PLANTED[rule])), cfg)
    assert {v.rule for v in violations} == {rule}
    named = {name for name in planted for v in violations if f"/{name} " in v.what or f"/{name}:" in v.what}
    assert len(planted) > 10 and named == set(planted), sorted(set(planted) - named)[:3]


@pytest.mark.real_run
def test_the_benchmark_runs_and_prints_an_exponent_per_phase():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmark_scaling.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    for phase in ["program", "output", "invariants (all)", *(f"invariants: {r.__name__}" for r in invariants.RULES)]:
        line = next((x for x in out.splitlines() if x.startswith(phase + " ")), None)
        assert line is not None, phase
        float(line.split()[-1])  # the exponent
    assert "dependsOn" in out and "resources.json" in out
