"""Day two of a fleet, as tests of the plan (docs/fleet.md, "Day two"): a worker added, removed, its capacity
changed, and a worker down. The workers are the example fleet's, changed in their configs as a user would
change them; what the manager's quota and every job of the fleet then get comes from the dispatch model
(stacks/fleet_jobs.py) over the workers' supply (stacks/fleet.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from facts.multikueue import WORKER_LOST_TIMEOUT_MINUTES
from infra.plan import load_config
from stacks import config as stack_config
from stacks import fleet, fleet_jobs
from stacks.config.stackfile import load_yaml
from stacks.queues.resources import GPU
from tests.helpers import ROOT

EXAMPLES = ROOT / "examples"
MANAGER_FILE = EXAMPLES / "fleet" / "Pulumi.fleet.yaml"
NS = stack_config.NAMESPACE
FLAVOR = "p5-48xlarge"


def worker(example: str, name: str | None = None, **group: Any) -> fleet.WorkerSupply:
    """The supply of example worker ``example`` (its p5 group changed by ``group``), as stack ``name``."""
    values = load_yaml((EXAMPLES / example / f"Pulumi.{example}.yaml").read_text())["config"]
    values = copy.deepcopy(values)
    values[f"{NS}:gpuNodeGroups"][0].update(group)
    stack = name or example
    cfg = stack_config.load(values, "gpu-training", stack)
    return fleet.supply_of(f"acme/gpu-training/{stack}", cfg, cfg.gpu_availability_zone)


def manager(*jobs: dict[str, Any], workers: tuple[str, ...] = ("fleet-west", "fleet-block")) -> Any:
    values = load_yaml(MANAGER_FILE.read_text())["config"]
    values[f"{NS}:fleet"]["workers"] = [{"stack": f"acme/gpu-training/{w}"} for w in workers]
    if jobs:
        values[f"{NS}:jobs"] = list(jobs)
    return stack_config.load(values, "gpu-training", "fleet")


def gpus(workers: list[fleet.WorkerSupply]) -> int:
    return fleet.summed_quotas(workers)["gpu"][FLAVOR][GPU]


def by_name(cfg: Any, workers: list[fleet.WorkerSupply], down: frozenset[str] = frozenset()) -> dict[str, Any]:
    return {p.name: p for p in fleet_jobs.plans(cfg, workers, down)}


HUGE = {"name": "huge", "kind": "nccl-test", "nodeGroup": FLAVOR, "nodes": 6}


@pytest.fixture(scope="module")
def example() -> list[fleet.WorkerSupply]:
    return [worker("fleet-west"), worker("fleet-block")]


def test_the_examples_workers_are_the_fleets(example: list[fleet.WorkerSupply]) -> None:
    found = fleet_jobs.present_workers(load_config("fleet", None, MANAGER_FILE), MANAGER_FILE)
    assert found == example


def test_adding_a_worker_grows_the_quota_and_admits_a_job_refused_before(example: list[fleet.WorkerSupply]) -> None:
    """fleet-east (eight p5 nodes) joins: the manager's quota grows by its supply, and a six-node job that no
    worker could take before is now the new worker's."""
    east = worker("fleet-west", "fleet-east", maxSize=8)
    cfg = manager(HUGE, workers=("fleet-west", "fleet-block", "fleet-east"))
    before = fleet_jobs.problems(cfg, example)
    assert [p.key for p in before] == [f"{NS}:jobs[huge]"]
    after = [*example, east]
    assert gpus(after) - gpus(example) == 8 * 8
    assert fleet_jobs.problems(cfg, after) == []
    assert by_name(cfg, after)["huge"].takers == ["fleet-east"]


def test_removing_a_worker_refuses_the_job_only_it_could_take(example: list[fleet.WorkerSupply]) -> None:
    """fleet-block leaves: the quota shrinks by its four nodes, and nccl-block (four nodes) is refused with
    fleet-west's reason."""
    cfg = manager(workers=("fleet-west",))
    west = example[:1]
    assert gpus(example) - gpus(west) == 4 * 8
    (problem,) = fleet_jobs.problems(cfg, west)
    assert problem.key == f"{NS}:jobs[nccl-block]"
    assert "fleet-west: queue 'gpu' holds fewer than 4 p5.48xlarge nodes" in problem.message
    assert by_name(cfg, west)["nccl-fleet"].takers == ["fleet-west"]


@pytest.mark.parametrize(
    ("west_max", "block_max", "takers"),
    [(4, 4, ["fleet-west", "fleet-block"]), (2, 2, []), (2, 4, ["fleet-block"])],
)
def test_a_workers_capacity_changing(west_max: int, block_max: int, takers: list[str]) -> None:
    """maxSize up on fleet-west: it can take nccl-block too; the block bought smaller: nobody can."""
    changed = [worker("fleet-west", maxSize=west_max), worker("fleet-block", maxSize=block_max)]
    assert gpus(changed) == (west_max + block_max) * 8
    cfg = manager()
    assert by_name(cfg, changed)["nccl-block"].takers == takers
    assert bool(fleet_jobs.problems(cfg, changed)) == (takers == [])


def test_a_worker_down_gets_no_copy_and_is_no_refusal(example: list[fleet.WorkerSupply]) -> None:
    """fleet-west's MultiKueueCluster inactive: nccl-fleet goes to fleet-block; nccl-block, which only the
    block can take, still goes there. Down is no plan-time state: nothing is refused."""
    cfg = manager()
    plans = by_name(cfg, example, frozenset({"fleet-west"}))
    assert plans["nccl-fleet"].goes_to == ["fleet-block"]
    assert plans["nccl-block"].goes_to == ["fleet-block"]
    assert all(p.refusal is None for p in plans.values())
    assert by_name(cfg, example)["nccl-fleet"].goes_to == ["fleet-west", "fleet-block"]  # both up: both get a copy


def test_the_only_worker_that_can_take_a_job_down_it_waits(example: list[fleet.WorkerSupply]) -> None:
    """fleet-block down: nccl-block has nowhere to go and waits on the manager (not refused); a job running
    there keeps its admission for workerLostTimeout, then is requeued and offered again to the active
    workers: nccl-fleet then goes to fleet-west."""
    cfg = manager()
    plans = by_name(cfg, example, frozenset({"fleet-block"}))
    assert plans["nccl-block"].goes_to == [] and plans["nccl-block"].refusal is None
    assert plans["nccl-fleet"].goes_to == ["fleet-west"]


def test_incremental_still_nominates_a_worker_down(example: list[fleet.WorkerSupply]) -> None:
    """Incremental nominates from every cluster of the MultiKueueConfig: a worker down takes its place in
    the round and gets no copy; the job goes to the others of that round."""
    west, block = example
    five = [worker("fleet-west", f"west-{i}", maxSize=4) for i in range(4)] + [block]
    cfg = manager(workers=("west-0", "west-1", "west-2", "west-3", "fleet-block"))
    cfg = cfg.model_copy(update={"fleet": cfg.fleet.model_copy(update={"dispatcher": "Incremental"})})
    plan = by_name(cfg, five, frozenset({"west-0"}))["nccl-block"]
    assert plan.rounds[0] == ("west-0", "west-1", "west-2")
    assert plan.goes_to == ["west-1", "west-2"]
    everyone_down = by_name(cfg, five, frozenset({"west-0", "west-1", "west-2"}))["nccl-block"]
    assert everyone_down.goes_to == ["west-3", "fleet-block"]  # the second round


def test_the_docs_say_kueues_worker_lost_timeout() -> None:
    text = (ROOT / "docs" / "fleet.md").read_text()
    assert f"`multiKueue.workerLostTimeout` ({WORKER_LOST_TIMEOUT_MINUTES} minutes by default)" in text
    assert "Admitting remote lost" in text
