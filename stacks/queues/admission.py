"""What the enabled GPU jobs ask their queues for (their pod sets, built exactly as the stack builds
the jobs), and admission on paper: which jobs Kueue admits at once on empty queues, and the most
a queue can ever hold (``reach``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from facts.kube import NODE_GROUP_LABEL
from facts.operators import REPLICA_SPECS, TRAINJOB
from facts.topology import GROUP_ANNOTATION, LEVEL_ANNOTATIONS, UNCONSTRAINED_ANNOTATION
from jobs.base import PRIORITIES, GpuJob, JobBase
from jobs.pod import QUEUE_LABEL
from jobs.registry import build_manifests
from jobs.targets import JobBuildError, JobsContext, JobTarget
from jobs.trainjob_merge import stack_replica_sets
from stacks.queues.cluster_queues import ClusterQueue
from stacks.queues.resources import RESOURCES, parse_quantity

TOPOLOGY_ANNOTATIONS = (*LEVEL_ANNOTATIONS.values(), UNCONSTRAINED_ANNOTATION, GROUP_ANNOTATION)

# REPLICA_SPECS (facts/operators.py): the replica maps Kueue reads pod sets from, per kind (one pod
# set per replica type).

# ---------------------------------------------------------------------------------------------
# What jobs ask for
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSet:
    """A pod set of a job as Kueue sizes it: ``count`` pods of ``per_pod``, on ``flavor``."""

    name: str
    count: int
    per_pod: Mapping[str, int]
    flavor: str | None
    # Kueue's topology annotations of the pod set (facts/topology.py), as the job object carries them.
    topology: Mapping[str, str] = field(default_factory=dict)

    @property
    def placement(self) -> str | None:
        """What the pod set asks Kueue for, for the plan: ``required <level>``, ``preferred <level>``,
        ``unconstrained``, with the group it lands with; None without a topology annotation."""
        for mode, key in LEVEL_ANNOTATIONS.items():
            if key in self.topology:
                group = self.topology.get(GROUP_ANNOTATION)
                return f"{mode} {self.topology[key]}" + (f" (group {group})" if group else "")
        return "unconstrained" if UNCONSTRAINED_ANNOTATION in self.topology else None


@dataclass(frozen=True)
class Demand:
    """What one enabled GPU job asks its queue for, at once."""

    job: str
    kind: str
    key: str  # the job's config key, for problems
    queue: str  # its ClusterQueue
    priority: str
    pod_sets: tuple[PodSet, ...]
    elastic_max: int | None = None  # an elastic PyTorchJob: the maxNodes Kueue reserves

    @property
    def flavor(self) -> str | None:
        return next((p.flavor for p in self.pod_sets if p.flavor), None)

    @property
    def placement(self) -> str | None:
        """What the workers ask Kueue for (``PodSet.placement``); None without a topology."""
        return next((p.placement for p in self.pod_sets if p.name in ("worker", "node")), None)

    @property
    def total(self) -> dict[str, int]:
        out = dict.fromkeys(RESOURCES, 0)
        for p in self.pod_sets:
            for r in RESOURCES:
                out[r] += p.count * p.per_pod.get(r, 0)
        return out


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, int]:
    """A pod's requests as Kueue counts them: the sum over its containers (a limit stands in for a
    missing request), or the largest init container if that is more."""

    def container(c: Mapping[str, Any]) -> dict[str, int]:
        res = c.get("resources") or {}
        given = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {r: parse_quantity(r, given[r]) for r in RESOURCES if r in given}

    total = dict.fromkeys(RESOURCES, 0)
    for c in pod_spec.get("containers") or []:
        for r, v in container(c).items():
            total[r] += v
    for c in pod_spec.get("initContainers") or []:
        for r, v in container(c).items():
            total[r] = max(total[r], v)
    return total


def pod_sets(manifest: Mapping[str, Any], targets: Mapping[str, JobTarget] | None = None) -> list[PodSet]:
    """The pod sets Kueue makes of a queued job object (one per replica type, ``replicas`` pods; a TrainJob's:
    its runtime's jobs as Trainer makes them, jobs/trainjob_merge.py)."""
    if manifest.get("kind") == TRAINJOB.kind:
        return replica_pod_sets(stack_replica_sets(dict(manifest), targets or {}))
    return replica_pod_sets((manifest.get("spec") or {}).get(REPLICA_SPECS.get(manifest.get("kind", ""), ""), {}))


def replica_pod_sets(replicas: Mapping[str, Any]) -> list[PodSet]:
    """The pod sets of a job's replica specs (role -> replicas, template)."""
    out = []
    for role, rs in replicas.items():
        spec = (rs.get("template") or {}).get("spec") or {}
        annotations = ((rs.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        out.append(
            PodSet(
                role.lower(),
                int(rs.get("replicas", 1)),
                pod_requests(spec),
                (spec.get("nodeSelector") or {}).get(NODE_GROUP_LABEL),
                {k: v for k, v in annotations.items() if k in TOPOLOGY_ANNOTATIONS},
            )
        )
    return out


def demands(jobs: Iterable[tuple[str, JobBase]], ctx: JobsContext, queue_of_team: Mapping[str, str]) -> list[Demand]:
    """What each enabled, queued GPU job of ``jobs`` (config key, spec) asks for: built exactly as
    the stack builds it. A job the context cannot build (its problems are reported by the job
    checks) is left out."""
    out = []
    for key, spec in jobs:
        if not (isinstance(spec, GpuJob) and spec.enabled and getattr(spec, "runtime", "eks") == "eks"):
            continue
        try:
            manifests = build_manifests(spec, ctx)
        except JobBuildError:
            continue
        for m in manifests:
            queued = m.get("kind") in REPLICA_SPECS or m.get("kind") == TRAINJOB.kind
            if queued and QUEUE_LABEL in (m["metadata"].get("labels") or {}):
                elastic = (
                    (m["spec"].get("elasticPolicy") or {}).get("maxReplicas") if m["kind"] == "PyTorchJob" else None
                )
                out.append(
                    Demand(
                        spec.name,
                        spec.kind,
                        key,
                        queue_of_team[spec.team or ""],
                        spec.priority,
                        tuple(pod_sets(m, ctx.targets)),
                        elastic,
                    )
                )
    return out


# ---------------------------------------------------------------------------------------------
# Admission on paper
# ---------------------------------------------------------------------------------------------


Usage = dict[tuple[str, str, str], int]  # (cluster queue, flavor, resource) -> in use


def _shortfall(
    cq: ClusterQueue, queues: Sequence[ClusterQueue], demand: Mapping[str, int], flavor: str, usage: Usage
) -> tuple[str, int, int] | None:
    """The first resource ``demand`` does not fit with ``usage`` already admitted: (resource, what
    the queue would then hold, the most it can hold now); None when it fits."""
    for r in RESOURCES:
        d = demand.get(r, 0)
        if not d:
            continue
        lim = cq.limits[flavor][r]
        used = usage.get((cq.name, flavor, r), 0)
        cap = lim.nominal + lim.borrowing if lim.borrowing is not None else None
        pool = sum(q.limits[flavor][r].lendable for q in queues)
        pool_used = sum(
            max(0, usage.get((q.name, flavor, r), 0) - q.limits[flavor][r].guaranteed)
            for q in queues
            if q.name != cq.name
        )
        room_pool = lim.guaranteed + pool - pool_used
        room = room_pool if cap is None else min(cap, room_pool)
        if used + d > room:
            return r, used + d, room
    return None


def reach(cq: ClusterQueue, queues: Sequence[ClusterQueue], flavor: str, resource: str) -> int:
    """The most of ``resource`` on ``flavor`` that ``cq`` can ever hold: its nominal quota plus what
    it may borrow (its borrowing limit, and what the others lend)."""
    lim = cq.limits[flavor][resource]
    others = sum(q.limits[flavor][resource].lendable for q in queues if q.name != cq.name)
    borrow = others if lim.borrowing is None else min(lim.borrowing, others)
    return lim.nominal + borrow


@dataclass(frozen=True)
class Admission:
    demand: Demand
    at_once: bool  # admitted with the jobs before it, in priority then config order
    short: tuple[str, int, int] | None = None  # why it waits: (resource, needed, available)


def admit_in_order(demands: Sequence[Demand], queues: Sequence[ClusterQueue]) -> list[Admission]:
    """Which jobs Kueue admits at once on empty queues, taking them by priority (highest first)
    and then in config order, as its BestEffortFIFO queues do; the others wait for quota."""
    by_name = {q.name: q for q in queues}
    usage: Usage = {}
    out = []
    for d in sorted(demands, key=lambda d: -PRIORITIES[d.priority]):
        flavor = d.flavor
        cq = by_name[d.queue]
        if flavor is None or flavor not in cq.limits:
            out.append(Admission(d, False))
            continue
        short = _shortfall(cq, queues, d.total, flavor, usage)
        if short is None:
            for r, v in d.total.items():
                usage[(cq.name, flavor, r)] = usage.get((cq.name, flavor, r), 0) + v
        out.append(Admission(d, short is None, short))
    order = {d.job: i for i, d in enumerate(demands)}
    return sorted(out, key=lambda a: order[a.demand.job])
