"""A fleet of stacks behind one queue (Kueue MultiKueue, v0.19.2): what each worker can supply, the
manager's queues summed from it, and a model of Kueue's dispatcher saying, for a job, which workers
could take it and which are offered it first.

What a worker supplies comes from its validated config (``supply_of``): in the offline plan from its
stack file, at `pulumi up` from the worker stack's ``fleetWorker`` output (the same dictionary,
``WorkerSupply.output``) read through a stack reference. The manager's quota of a fleet flavor (one
per GPU instance type) is the sum over the workers of each resource their ClusterQueue of that name
holds on that type's flavors, as Kueue advises (site/content/en/docs/concepts/multikueue.md at v0.19.2:
"Ideally, the quota in the manager cluster should equal the total quota available in all worker
clusters"); each worker's own Kueue admits the job again against its own quota.

Kueue's dispatchers (pkg/controller/admissionchecks/multikueue/workload.go and
pkg/controller/workloaddispatcher/incrementaldispatcher.go at v0.19.2):
- AllAtOnce (default): every worker of the MultiKueueConfig gets a copy at once; the first whose Kueue
  reserves quota keeps the job, the other copies are deleted.
- Incremental: INCREMENTAL_STEP workers more per round of INCREMENTAL_ROUND_MINUTES, in the config's
  order (the MultiKueueIncrementalDispatcherRespectConfigOrder gate, on by default in 0.19), the
  workers not yet nominated; ``next_nominated`` is that function, checked against Kueue's test table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from components.multikueue import ManagerArgs, ManagerQueue
from facts.multikueue import INCREMENTAL_STEP
from facts.paths import PROJECT_ROOT
from jobs.base import PRIORITIES
from jobs.targets import fleet_flavor
from stacks import config as stack_config
from stacks.config.fleet import cluster_name
from stacks.queues.plan import plan_for
from stacks.queues.resources import GPU, RESOURCES, quantity


@dataclass(frozen=True)
class WorkerFlavor:
    """One GPU node group of a worker, as the fleet sees it."""

    group: str
    instance_type: str
    nodes: int
    per_node: Mapping[str, int]
    topology: str | None
    window: tuple[str, str] | None  # a capacity block's (start, end), ISO UTC


@dataclass(frozen=True)
class WorkerSupply:
    """What one worker stack offers the fleet."""

    stack: str
    cluster: str
    region: str
    availability_zone: str
    flavors: tuple[WorkerFlavor, ...]
    queues: Mapping[str, Mapping[str, Mapping[str, int]]]  # cluster queue -> group -> resource -> nominal
    local_queues: tuple[tuple[str, str, str], ...]  # (namespace, name, cluster queue)
    priorities: Mapping[str, int]

    def output(self) -> dict[str, Any]:
        """The worker stack's ``fleetWorker`` output (JSON-able)."""
        return {
            "stack": self.stack,
            "cluster": self.cluster,
            "region": self.region,
            "availabilityZone": self.availability_zone,
            "flavors": [
                {
                    "group": f.group,
                    "instanceType": f.instance_type,
                    "nodes": f.nodes,
                    "perNode": dict(f.per_node),
                    "topology": f.topology,
                    "window": list(f.window) if f.window else None,
                }
                for f in self.flavors
            ],
            "queues": {q: {g: dict(r) for g, r in gs.items()} for q, gs in self.queues.items()},
            "localQueues": [list(lq) for lq in self.local_queues],
            "priorities": dict(self.priorities),
        }


def _output_key(field: str) -> str:
    """A WorkerSupply field's key in its output: camelCase (``availability_zone`` -> ``availabilityZone``)."""
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


# The keys of ``WorkerSupply.output()``, one per field (a manager refuses a worker's output missing one).
SUPPLY_KEYS = tuple(_output_key(f.name) for f in fields(WorkerSupply))


def supply_of(stack: str, cfg: Any, availability_zone: str) -> WorkerSupply:
    """What worker stack ``stack`` (its validated StackConfig ``cfg``, GPU AZ resolved) supplies."""

    plan = plan_for(cfg)
    flavors = tuple(plan.flavors) if plan else ()
    windows = {g.name: g.capacity_block_window for g in cfg.gpu_node_groups}
    return WorkerSupply(
        stack=stack,
        cluster=cluster_name(stack),
        region=cfg.region,
        availability_zone=availability_zone,
        flavors=tuple(
            WorkerFlavor(
                f.name,
                f.instance_type,
                f.nodes,
                dict(f.per_node),
                f.topology,
                tuple(t.isoformat() for t in w) if (w := windows.get(f.name)) else None,
            )
            for f in flavors
        ),
        queues={
            cq.name: {g: {r: lim.nominal for r, lim in rs.items()} for g, rs in cq.limits.items()}
            for cq in (plan.cluster_queues if plan else ())
        },
        local_queues=tuple((q.namespace, q.name, q.cluster_queue) for q in (plan.local_queues if plan else ())),
        priorities=dict(PRIORITIES),
    )


def summed_quotas(workers: Sequence[WorkerSupply]) -> dict[str, dict[str, dict[str, int]]]:
    """cluster queue -> fleet flavor -> resource -> the workers' nominal quotas summed."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for w in workers:
        types = {f.group: f.instance_type for f in w.flavors}
        for q, groups in w.queues.items():
            for group, resources in groups.items():
                per = out.setdefault(q, {}).setdefault(fleet_flavor(types[group]), dict.fromkeys(RESOURCES, 0))
                for r, amount in resources.items():
                    per[r] += amount
    return out


def quantities(quotas: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, str]]:
    return {f: {r: quantity(r, n) for r, n in rs.items()} for f, rs in quotas.items()}


# ---------------------------------------------------------------------------------------------
# The dispatcher model
# ---------------------------------------------------------------------------------------------


def next_nominated(clusters: Sequence[str], nominated: Sequence[str], step: int = INCREMENTAL_STEP) -> list[str]:
    """Kueue's getNextNominatedWorkers (incrementaldispatcher.go, config order): the next ``step``
    workers not nominated yet; [] when none is left (Kueue returns ErrNoMoreWorkers)."""
    left = [c for c in clusters if c not in set(nominated)]
    return left[:step]


def offer_rounds(clusters: Sequence[str], dispatcher: str) -> list[list[str]]:
    """The workers a job is offered to, round by round (AllAtOnce: one round of all)."""
    if dispatcher == "AllAtOnce":
        return [list(clusters)]
    rounds: list[list[str]] = []
    nominated: list[str] = []
    while step := next_nominated(clusters, nominated):
        rounds.append(step)
        nominated += step
    return rounds


@dataclass(frozen=True)
class FleetJob:
    """A job of the fleet as the dispatcher model sees it: a GPU type, a gang of nodes, what one
    node's pod asks for, and whether it needs a network topology."""

    name: str
    queue: str
    instance_type: str
    nodes: int
    per_node: Mapping[str, int]
    needs_topology: bool = False


@dataclass(frozen=True)
class Verdict:
    cluster: str
    fits: bool
    reason: str


def verdict(job: FleetJob, w: WorkerSupply) -> Verdict:
    """Whether worker ``w`` could ever admit ``job`` (one rule per failing reason)."""
    same_type = [f for f in w.flavors if f.instance_type == job.instance_type]
    if not same_type:
        return Verdict(w.cluster, False, f"no {job.instance_type} node group")
    fits_node = [f for f in same_type if all(job.per_node.get(r, 0) <= f.per_node.get(r, 0) for r in RESOURCES)]
    if not fits_node:
        return Verdict(w.cluster, False, f"one pod asks more than a {job.instance_type} node has")
    if job.needs_topology and not any(f.topology for f in fits_node):
        return Verdict(w.cluster, False, "no network topology on its group")
    quota = w.queues.get(job.queue)
    if quota is None:
        return Verdict(w.cluster, False, f"no ClusterQueue {job.queue!r}")
    for f in fits_node:
        q = quota.get(f.group, {})
        if all(job.nodes * job.per_node.get(r, 0) <= q.get(r, 0) for r in RESOURCES):
            when = f" (capacity block {f.window[0]} to {f.window[1]})" if f.window else ""
            return Verdict(w.cluster, True, f"{f.group}: {f.nodes} nodes, {q.get(GPU, 0)} GPUs{when}")
    return Verdict(w.cluster, False, f"queue {job.queue!r} holds fewer than {job.nodes} {job.instance_type} nodes")


def dispatch(job: FleetJob, workers: Sequence[WorkerSupply], dispatcher: str) -> tuple[list[Verdict], list[str]]:
    """Every worker's verdict, and the workers the job is offered to first (the first round)."""
    verdicts = [verdict(job, w) for w in workers]
    rounds = offer_rounds([w.cluster for w in workers], dispatcher)
    return verdicts, rounds[0] if rounds else []


def refusal(job: FleetJob, verdicts: Sequence[Verdict]) -> str | None:
    """The plan's refusal of a job no worker can ever take, or None."""
    if any(v.fits for v in verdicts):
        return None
    reasons = "; ".join(f"{v.cluster}: {v.reason}" for v in verdicts)
    return f"job {job.name!r}: no worker of the fleet can ever admit it ({reasons})"


# ---------------------------------------------------------------------------------------------
# The fleet of a manager stack, offline
# ---------------------------------------------------------------------------------------------


def worker_stack_file(reference: str, manager_file: Path) -> Path:
    """Where the offline plan reads worker ``reference``'s config: ``Pulumi.<stack>.yaml`` beside the
    manager's stack file (a project's stacks), else in the sibling folder ``<stack>/`` (examples/)."""
    stack = reference.rsplit("/", 1)[-1]
    here = manager_file.parent / f"Pulumi.{stack}.yaml"
    return here if here.exists() else manager_file.parent.parent / stack / f"Pulumi.{stack}.yaml"


def offline_workers(cfg: Any, manager_file: Path) -> list[WorkerSupply]:
    """The workers of manager ``cfg`` as the offline plan sees them, from their stack files."""
    # Imported here: what `pulumi up` runs (stacks/fleet_wiring.py imports this module) reads no stack
    # files, and the reader needs ruamel.yaml, which only the tooling installs (tests/test_layers.py).
    from stacks.config.stackfile import read_stack_config

    out = []
    for w in cfg.fleet.workers:
        path = worker_stack_file(w.stack, manager_file)
        stack = w.stack.rsplit("/", 1)[-1]
        project, values = read_stack_config(stack, PROJECT_ROOT, path)
        worker = stack_config.load(values, project, stack)
        out.append(supply_of(w.stack, worker, worker.gpu_availability_zone))
    return out


def manager_args(workers: Sequence[WorkerSupply]) -> ManagerArgs:
    """The manager's objects for ``workers``: the same queues and priorities, quotas summed."""
    summed = summed_quotas(workers)
    return ManagerArgs(
        clusters=tuple(w.cluster for w in workers),
        flavors=tuple(sorted({f for q in summed.values() for f in q})),
        covered_resources=RESOURCES,
        cluster_queues=tuple(
            ManagerQueue(
                q, tuple(sorted({ns for w in workers for ns, _, c in w.local_queues if c == q})), quantities(fs)
            )
            for q, fs in sorted(summed.items())
        ),
        local_queues=tuple(sorted({lq for w in workers for lq in w.local_queues})),
        priorities=dict(PRIORITIES),
    )


def _namespaces(workers: Sequence[WorkerSupply], queue: str) -> tuple[str, ...]:
    """The namespaces whose LocalQueues feed ClusterQueue ``queue`` on any worker."""
    return tuple(sorted({ns for w in workers for ns, _, cq in w.local_queues if cq == queue}))


def supply_from_output(value: Mapping[str, Any]) -> WorkerSupply:
    """``WorkerSupply.output`` read back (the manager's view of a worker)."""
    return WorkerSupply(
        stack=value["stack"],
        cluster=value["cluster"],
        region=value["region"],
        availability_zone=value["availabilityZone"],
        flavors=tuple(
            WorkerFlavor(
                f["group"],
                f["instanceType"],
                int(f["nodes"]),
                {r: int(n) for r, n in f["perNode"].items()},
                f.get("topology"),
                (f["window"][0], f["window"][1]) if f.get("window") else None,
            )
            for f in value["flavors"]
        ),
        queues={
            q: {g: {r: int(n) for r, n in rs.items()} for g, rs in gs.items()} for q, gs in value["queues"].items()
        },
        local_queues=tuple((lq[0], lq[1], lq[2]) for lq in value["localQueues"]),
        priorities={p: int(v) for p, v in value["priorities"].items()},
    )
