"""The fleet (stacks/fleet.py, components/multikueue.py) across its stacks: the example fleet's manager
objects against Kueue's CRDs, the cross-stack invariants, the worker's RBAC against the calls of
Kueue's MultiKueue controller, and the dispatcher model against Kueue's own test table."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from components import multikueue as mk
from facts.multikueue import INCREMENTAL_STEP, WORKER_CALLS
from infra.plan import load_config
from stacks import fleet
from stacks.queues.resources import GPU, RESOURCES
from tests.helpers import ROOT
from tests.kueue_crds import schema_errors

MANAGER_FILE = ROOT / "examples" / "fleet" / "Pulumi.fleet.yaml"


@pytest.fixture(scope="module")
def workers() -> list[fleet.WorkerSupply]:
    return fleet.offline_workers(load_config("fleet", None, MANAGER_FILE), MANAGER_FILE)


def p5_job(nodes: int, name: str = "pretrain", queue: str = "gpu", **kw: Any) -> fleet.FleetJob:
    per_node = {GPU: 8, "vpc.amazonaws.com/efa": 32, "cpu": 96000, "memory": 1024 * 1024}
    return fleet.FleetJob(name, queue, "p5.48xlarge", nodes, per_node, **kw)


# ---------------------------------------------------------------------------------------------
# The example fleet and its manager's objects
# ---------------------------------------------------------------------------------------------


def test_example_workers_are_in_two_azs_one_a_capacity_block(workers: list[fleet.WorkerSupply]) -> None:
    assert [w.cluster for w in workers] == ["fleet-west", "fleet-block"]
    assert len({w.availability_zone for w in workers}) == 2
    assert [any(f.window for f in w.flavors) for w in workers] == [False, True]


def test_manager_quota_is_the_workers_summed(workers: list[fleet.WorkerSupply]) -> None:
    (gpu_queue,) = fleet.manager_args(workers).cluster_queues
    expected = {r: sum(f.nodes * f.per_node[r] for w in workers for f in w.flavors) for r in RESOURCES}
    assert fleet.summed_quotas(workers)["gpu"]["p5-48xlarge"] == expected
    assert gpu_queue.quotas["p5-48xlarge"][GPU] == str((4 + 2) * 8)


def test_manager_objects_validate_against_kueues_crds(workers: list[fleet.WorkerSupply]) -> None:
    objects = mk.manager_objects(fleet.manager_args(workers))
    assert {o["kind"] for o in objects} >= {"MultiKueueCluster", "MultiKueueConfig", "AdmissionCheck", "ClusterQueue"}
    assert [e for o in objects for e in schema_errors(o)] == []
    (check,) = [o for o in objects if o["kind"] == "AdmissionCheck"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
    (cq,) = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert cq["spec"]["admissionChecksStrategy"] == {"admissionChecks": [{"name": mk.ADMISSION_CHECK}]}


def test_the_crds_cel_rules_fire(workers: list[fleet.WorkerSupply]) -> None:
    """The vendored CRDs' rules are evaluated: a repeated worker and a cluster with two sources are refused."""
    objects = mk.manager_objects(fleet.manager_args(workers))
    (config,) = [o for o in objects if o["kind"] == "MultiKueueConfig"]
    config["spec"]["clusters"] = ["fleet-west", "fleet-west"]
    assert any("must be unique" in e or "size(self.filter" in e for e in schema_errors(config))
    cluster = next(o for o in objects if o["kind"] == "MultiKueueCluster")
    cluster["spec"]["clusterSource"]["clusterProfileRef"] = {"name": "x"}
    assert schema_errors(cluster) != []


# ---------------------------------------------------------------------------------------------
# Cross-stack invariants
# ---------------------------------------------------------------------------------------------


def same_queues_everywhere(workers: Sequence[fleet.WorkerSupply]) -> list[str]:
    """The manager's LocalQueues and priority classes are every worker's (MultiKueue creates the job in
    the same namespace and queue on the worker)."""
    args = fleet.manager_args(workers)
    return [
        f"{w.cluster}: queues {sorted(w.local_queues)} / priorities {dict(w.priorities)} differ from the manager's"
        for w in workers
        if set(w.local_queues) != set(args.local_queues) or dict(w.priorities) != dict(args.priorities)
    ]


def test_queues_and_priorities_are_the_same_everywhere(workers: list[fleet.WorkerSupply]) -> None:
    assert same_queues_everywhere(workers) == []
    odd = dataclasses.replace(workers[1], local_queues=(("training", "gpu", "gpu"), ("team-a", "default", "a")))
    assert same_queues_everywhere([workers[0], odd]) != []


def test_every_worker_names_the_fleets_manager() -> None:
    manager = load_config("fleet", None, MANAGER_FILE)
    for w in manager.fleet.workers:
        path = fleet.worker_stack_file(w.stack, MANAGER_FILE)
        worker = load_config(path.stem.removeprefix("Pulumi."), None, path)
        assert worker.fleet.manager is not None
        assert worker.fleet.manager.split("/")[0] == w.stack.split("/")[0]  # one organization
        assert worker.fleet.manager.rsplit("/", 1)[-1] == "fleet"


# ---------------------------------------------------------------------------------------------
# The worker's credential: its RBAC evaluated against MultiKueue's calls
# ---------------------------------------------------------------------------------------------


def allowed(rules: Sequence[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    """A small RBAC evaluator (https://kubernetes.io/docs/reference/access-authn-authz/rbac/): a rule
    allows a request when its apiGroups, resources and verbs each hold the request's, or '*'."""
    return any(
        (group in r["apiGroups"] or "*" in r["apiGroups"])
        and (resource in r["resources"] or "*" in r["resources"])
        and (verb in r["verbs"] or "*" in r["verbs"])
        for r in rules
    )


def granted(rules: Sequence[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, res, v) for r in rules for g in r["apiGroups"] for res in r["resources"] for v in r["verbs"]}


def test_worker_role_allows_exactly_multikueues_calls() -> None:
    rules = mk.worker_rules()
    calls = {(c.api_group, c.resource, c.verb) for c in WORKER_CALLS}
    assert all(allowed(rules, *c) for c in calls)
    assert granted(rules) == calls  # nothing more, and no wildcard
    for extra in [("", "pods", "create"), ("", "secrets", "get"), ("kueue.x-k8s.io", "clusterqueues", "list")]:
        assert not allowed(rules, *extra)


def test_the_evaluator_sees_a_broader_role() -> None:
    broader = [*mk.worker_rules(), {"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["get"]}]
    assert allowed(broader, "", "secrets", "get")
    assert granted(broader) != {(c.api_group, c.resource, c.verb) for c in WORKER_CALLS}


def test_worker_credential_keeps_two_token_generations() -> None:
    tokens = [o for o in mk.worker_objects(3) if o["kind"] == "Secret"]
    assert [t["metadata"]["name"] for t in tokens] == ["multikueue-token-2", "multikueue-token-3"]
    assert {t["type"] for t in tokens} == {mk.TOKEN_TYPE}
    assert {t["metadata"]["annotations"]["kubernetes.io/service-account.name"] for t in tokens} == {mk.WORKER_ACCOUNT}
    (binding,) = [o for o in mk.worker_objects(1) if o["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": mk.WORKER_ACCOUNT, "namespace": "kueue-system"}]


# ---------------------------------------------------------------------------------------------
# The dispatcher model against Kueue's cases
# ---------------------------------------------------------------------------------------------

# kubernetes-sigs/kueue v0.19.2, pkg/controller/workloaddispatcher/incrementaldispatcher_test.go,
# TestIncrementalDispatcherNominateWorkers: (case, remote clusters, already nominated, expected nominated
# after the round). The timing cases ("round in progress, keep current") are about the 5-minute round,
# not the choice of workers, and are not modelled.
KUEUE_INCREMENTAL_CASES = [
    ("one remote", ["A"], [], ["A"]),
    ("two remotes", ["B", "A"], [], ["B", "A"]),
    ("three remotes", ["C", "B", "A"], [], ["C", "B", "A"]),
    ("fifteen remotes", list("ONMLKJIHGFEDCBA"), [], ["O", "N", "M"]),
    ("all already nominated (3)", ["C", "B", "A"], ["C", "B", "A"], ["C", "B", "A"]),
    ("all already nominated (1)", ["A"], ["A"], ["A"]),
    ("round expired, next set nominated", list("FEDCBA"), ["F", "E", "D"], list("FEDCBA")),
    ("round expired, nominate all", list("HGFEDCBA"), list("HGFEDC"), list("HGFEDCBA")),
]


@pytest.mark.parametrize(("case", "clusters", "nominated", "expected"), KUEUE_INCREMENTAL_CASES)
def test_incremental_dispatcher_passes_kueues_cases(
    case: str, clusters: list[str], nominated: list[str], expected: list[str]
) -> None:
    assert nominated + fleet.next_nominated(clusters, nominated) == expected, case


def test_offer_rounds() -> None:
    assert fleet.offer_rounds(list("ABCDEFG"), "Incremental") == [["A", "B", "C"], ["D", "E", "F"], ["G"]]
    assert fleet.offer_rounds(list("ABCDEFG"), "AllAtOnce") == [list("ABCDEFG")]
    assert INCREMENTAL_STEP == 3


def test_which_workers_could_take_a_job(workers: list[fleet.WorkerSupply]) -> None:
    verdicts, first = fleet.dispatch(p5_job(2), workers, "AllAtOnce")
    assert [v.fits for v in verdicts] == [True, True] and first == ["fleet-west", "fleet-block"]
    assert "capacity block 2030-03-04" in verdicts[1].reason
    verdicts, _ = fleet.dispatch(p5_job(4), workers, "Incremental")
    assert [v.fits for v in verdicts] == [False, True]
    assert "fewer than 4" in verdicts[0].reason


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        (p5_job(5), "queue 'gpu' holds fewer than 5 p5.48xlarge nodes"),
        (dataclasses.replace(p5_job(1), instance_type="p4d.24xlarge"), "no p4d.24xlarge node group"),
        (dataclasses.replace(p5_job(1), per_node={GPU: 9}), "one pod asks more than a p5.48xlarge node has"),
        (p5_job(1, queue="team-a"), "no ClusterQueue 'team-a'"),
    ],
)
def test_a_job_no_worker_can_take_is_refused(workers: list[fleet.WorkerSupply], job: Any, reason: str) -> None:
    verdicts, _ = fleet.dispatch(job, workers, "AllAtOnce")
    text = fleet.refusal(job, verdicts)
    assert text is not None and f"fleet-west: {reason}" in text and "fleet-block:" in text
    assert fleet.refusal(p5_job(1), fleet.dispatch(p5_job(1), workers, "AllAtOnce")[0]) is None


# ---------------------------------------------------------------------------------------------
# Day two
# ---------------------------------------------------------------------------------------------


def test_removing_a_worker_takes_its_quota_and_may_strand_a_job(workers: list[fleet.WorkerSupply]) -> None:
    before = fleet.summed_quotas(workers)["gpu"]["p5-48xlarge"][GPU]
    after = fleet.summed_quotas(workers[:1])["gpu"]["p5-48xlarge"][GPU]
    assert (before, after) == (48, 16)
    assert fleet.refusal(p5_job(4), fleet.dispatch(p5_job(4), workers[:1], "AllAtOnce")[0]) is not None


def test_a_workers_capacity_change_changes_the_managers_quota(workers: list[fleet.WorkerSupply]) -> None:
    west = workers[0]
    bigger = dataclasses.replace(
        west,
        queues={"gpu": {"p5": {r: n * 2 for r, n in west.queues["gpu"]["p5"].items()}}},
    )
    assert fleet.summed_quotas([bigger, workers[1]])["gpu"]["p5-48xlarge"][GPU] == 16 * 2 + 32


def test_worker_output_is_json(workers: list[fleet.WorkerSupply]) -> None:
    import json

    out = json.loads(json.dumps(workers[1].output()))
    assert out["cluster"] == "fleet-block" and out["flavors"][0]["window"][0].startswith("2030-03-04")


def test_the_output_has_exactly_the_keys_a_manager_requires(workers: list[fleet.WorkerSupply]) -> None:
    assert tuple(workers[1].output()) == fleet.SUPPLY_KEYS
    assert "availabilityZone" in fleet.SUPPLY_KEYS and "localQueues" in fleet.SUPPLY_KEYS


def test_worker_files_found_beside_or_in_sibling_folder(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.w1.yaml").write_text("config: {}\n")
    assert fleet.worker_stack_file("o/p/w1", tmp_path / "Pulumi.m.yaml") == tmp_path / "Pulumi.w1.yaml"
    assert fleet.worker_stack_file("o/p/w2", tmp_path / "m" / "Pulumi.m.yaml") == tmp_path / "w2" / "Pulumi.w2.yaml"
