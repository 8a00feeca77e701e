"""The queues of a stack as one ``QueuePlan`` (everything the queues component registers: flavors,
queues, teams, Kueue's integrations and settings, and what the jobs ask for), built from its
validated config; and the queue table of the offline plan.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from facts import operators as ops
from facts.problems import entry_keys
from jobs.base import JobBase
from jobs.targets import JobsContext, job_targets
from stacks.queues.admission import Admission, Demand, admit_in_order, demands
from stacks.queues.cluster_queues import (
    COHORT,
    PROVISIONING_CHECK,
    SHARED_QUEUE,
    ClusterQueue,
    LocalQueue,
    Team,
    cluster_queues,
    job_queues,
    local_queues,
    team_namespace,
)
from stacks.queues.resources import (
    CPU,
    EFA,
    GPU,
    HUGEPAGES,
    MEMORY,
    Flavor,
    NodeServices,
    burn_in_services,
    flavor_of,
    human,
)

# Kueue's integrations are the kinds of the operators installed (facts/operators.py), and batch/job
# with teams: Kueue's batch-user role lets a team create batch Jobs, which must queue too (the
# stack's own data-stage Jobs name no queue and are left alone).
BATCH_JOB = "batch/job"

# waitForPodsReady: an admitted job must have every pod running within `queues.podsReadyTimeout`, or
# it gives its nodes back and queues again (backoff 1 minute, doubling to 1 hour). A job admitted
# before its nodes exist (an autoscaled group above its minSize, with or without ProvisioningRequests;
# a capacity block's group before its window) spends that time on, one after the other (estimates,
# in minutes, on the large side; ``pods_ready_budget``):
NODE_START_MINUTES = 8  # autoscaler decision, EC2 launch and join, device plugins, huge pages (p4d/p5)
BURN_IN_MINUTES = 2  # the burn-in check (about a minute once the device plugins run) and its small image
# The loopback test: the nccl-tests image (CUDA, EFA, NCCL: several GB) pulled onto the fresh node, and
# a few seconds of all_reduce_perf.
LOOPBACK_MINUTES = 6
TRAINING_IMAGE_PULL_MINUTES = 10  # a 10-20 GB training image onto a fresh root volume
# The default, 30 minutes, covers the longest of these (26 with the burn-in's loopback test) with room
# to spare; a shorter `queues.podsReadyTimeout` than a burn-in group's budget is refused (queue_checks).
REQUEUE_BACKOFF_BASE_SECONDS = 60
REQUEUE_BACKOFF_MAX_SECONDS = 3600


def pods_ready_budget(burn_in: bool, loopback: bool) -> list[tuple[str, int]]:
    """What a job admitted before its nodes exist waits for, in order: (what, minutes)."""
    parts = [("node start", NODE_START_MINUTES)]
    if burn_in:
        parts.append(("burn-in check", BURN_IN_MINUTES))
    if loopback:
        parts.append(("burn-in loopback test (nccl-tests image pull and run)", LOOPBACK_MINUTES))
    parts.append(("training image pull", TRAINING_IMAGE_PULL_MINUTES))
    return parts


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueuePlan:
    """Everything the queues component registers, and what the plan shows about it."""

    flavors: tuple[Flavor, ...]
    cluster_queues: tuple[ClusterQueue, ...]
    local_queues: tuple[LocalQueue, ...]
    teams: tuple[Team, ...]
    managed_namespaces: tuple[str, ...]
    integrations: tuple[str, ...]
    pods_ready_timeout: str
    requeue_limit: int | None
    # The flavors the ProvisioningRequest admission check runs on (in every ClusterQueue): every
    # autoscaled flavor with `autoscaling.provisioningRequests: true`; left unset, the autoscaled
    # flavors with a Topology (``provisioning_flavors``); none with false.
    provisioning_flavors: tuple[str, ...]
    demands: tuple[Demand, ...]

    @property
    def provisioning(self) -> bool:
        return bool(self.provisioning_flavors)

    @property
    def topologies(self) -> dict[str, tuple[str, ...]]:
        """The Kueue Topologies the flavors name: name -> levels, one per distinct level list."""
        return {f.topology: f.levels for f in self.flavors if f.topology is not None}

    @property
    def fair_sharing(self) -> bool:
        return bool(self.teams)

    def admissions(self) -> list[Admission]:
        return admit_in_order(self.demands, self.cluster_queues)


def plan_context(
    training_namespace: str, groups: Sequence[Any], volumes: Iterable[str], etcd: bool, teams: Sequence[Any]
) -> JobsContext:
    """A JobsContext like the stack's, for sizing jobs before anything exists (the claim names and
    the etcd endpoint do not change what a job asks for)."""
    return JobsContext(
        namespace=training_namespace,
        targets=job_targets(groups, "plan"),
        claims={v: f"{v}-claim" for v in volumes},
        etcd_endpoint="etcd:2379" if etcd else None,
        system_node_selector={},
        cluster_name="plan",
        queues=job_queues(teams),
    )


def build_plan(
    *,
    groups: Sequence[Any],
    queues: Any,
    autoscaling: Any,
    training_namespace: str,
    services: NodeServices,
    operators: Iterable[str],
    volumes: Iterable[str],
    etcd: bool,
    jobs: Iterable[tuple[str, JobBase]],
) -> QueuePlan:
    """The queues of a stack from its (validated) sections; ``jobs`` are (config key, spec)."""
    # A capacity-block group waiting for its block has no nodes and no flavor.
    groups = [g for g in groups if not getattr(g, "awaiting_capacity_block", False)]
    flavors = tuple(flavor_of(g, autoscaling.enabled, services) for g in groups)
    teams = list(queues.teams)
    cqs = tuple(cluster_queues(flavors, teams, training_namespace))
    installed = set(operators)
    ctx = plan_context(training_namespace, groups, volumes, etcd, teams)
    queue_of_team = {"": SHARED_QUEUE, **{t.name: t.name for t in teams}}
    return QueuePlan(
        flavors=flavors,
        cluster_queues=cqs,
        local_queues=tuple(local_queues(teams, training_namespace)),
        teams=tuple(Team(t.name, team_namespace(t), t.role_arn) for t in teams),
        managed_namespaces=tuple(dict.fromkeys([training_namespace, *(team_namespace(t) for t in teams)])),
        integrations=tuple(
            ([BATCH_JOB] if teams else [])
            + [k.integration for op in ops.OPERATORS if op.name in installed for k in op.kinds]
        ),
        pods_ready_timeout=queues.pods_ready_timeout,
        requeue_limit=queues.requeue_limit,
        provisioning_flavors=provisioning_flavors(flavors, autoscaling.provisioning_requests),
        demands=tuple(demands(jobs, ctx, queue_of_team)),
    )


def provisioning_flavors(flavors: Sequence[Flavor], requested: bool | None) -> tuple[str, ...]:
    """The flavors the ProvisioningRequest check runs on, for ``autoscaling.provisioningRequests``
    ``requested`` (true, false or unset). Kueue places by Topology only on nodes that are there and
    Ready (v0.19.2 concepts/topology_aware_scheduling, "Capacity calculation"), and no pod asks the
    autoscaler for a node before its job is admitted: an autoscaled group with a Topology admits
    nothing beyond the nodes it has unless admission asks the autoscaler first ("ClusterAutoscaler
    support"). Unset, the check runs on exactly those flavors."""
    if requested is True:
        return tuple(f.name for f in flavors if f.autoscaled)
    if requested is None:
        return tuple(f.name for f in flavors if f.autoscaled and f.topology is not None)
    return ()


def node_services(cfg: Any) -> NodeServices:
    """What of a validated ``StackConfig`` runs on every GPU node beside the training pods."""
    return NodeServices(
        fsx=cfg.storage.fsx.enabled,
        efa_device_plugin=cfg.services.efa_device_plugin,
        monitoring=cfg.monitoring.enabled,
        **burn_in_services(cfg.gpu_node_groups, cfg.burn_in),
    )


# The queue plans made inside ``plans_kept``, by the identity of their config (kept with it, so that its id
# names no other config meanwhile).
_kept: contextvars.ContextVar[dict[int, tuple[Any, QueuePlan | None]] | None] = contextvars.ContextVar(
    "queue_plans_kept", default=None
)


@contextmanager
def plans_kept() -> Iterator[None]:
    """Inside, ``plan_for`` makes each config's plan once: a program run and the plan's summary, cost
    and checks ask for it a dozen times (the alerts, the cost, the autoscaler, the queues), and each
    time sizes every job by building its manifests. A validated ``StackConfig`` is frozen, so one
    object has one plan; a config built anew is planned anew."""
    token = _kept.set({})
    try:
        yield
    finally:
        _kept.reset(token)


def plan_for(cfg: Any) -> QueuePlan | None:
    """The queues of a validated ``StackConfig``; None when it runs none (from memory inside ``plans_kept``)."""
    kept = _kept.get()
    if kept is None:
        return _plan_for(cfg)
    found = kept.get(id(cfg))
    if found is None or found[0] is not cfg:
        found = kept[id(cfg)] = (cfg, _plan_for(cfg))
    return found[1]


def _plan_for(cfg: Any) -> QueuePlan | None:
    if not cfg.queues.enabled or not cfg.gpu_node_groups:
        return None
    st, sv = cfg.storage, cfg.services
    return build_plan(
        groups=cfg.gpu_node_groups,
        queues=cfg.queues,
        autoscaling=cfg.autoscaling,
        training_namespace=sv.training_namespace,
        services=node_services(cfg),
        operators=[op.name for op in ops.installed(sv)],
        volumes=[name for name, on in (("efs", st.efs.enabled), ("fsx", st.fsx.enabled)) if on],
        etcd=cfg.etcd.enabled,
        jobs=list(zip(entry_keys("jobs", [j.name for j in cfg.jobs]), cfg.jobs, strict=True)),
    )


# ---------------------------------------------------------------------------------------------
# The plan's table
# ---------------------------------------------------------------------------------------------


_TABLE = (GPU, EFA, HUGEPAGES, CPU, MEMORY)
# How the plan's text names each counted resource (the queue table, the fleet block).
RESOURCE_SHORT = {GPU: "GPUs", EFA: "EFA", HUGEPAGES: "hugepages", CPU: "CPU", MEMORY: "memory"}


def describe(plan: QueuePlan, kueue_version: str) -> str:
    """The queue table of the offline plan: per ClusterQueue and flavor the quota, then what each
    enabled job asks for and whether it is admitted at once or waits."""
    lines = [
        f"Queues (Kueue {kueue_version}, cohort {COHORT}; a job is admitted whole or waits; pods must run within "
        f"{plan.pods_ready_timeout}):"
    ]
    extras = []
    if plan.provisioning:
        extras.append(f"ProvisioningRequest check {PROVISIONING_CHECK!r} on " + ", ".join(plan.provisioning_flavors))
    if plan.fair_sharing:
        extras.append("fair sharing between the teams")
    if extras:
        lines.append("  " + "; ".join(extras))
    head = f"    {'':<22}" + "".join(f"{RESOURCE_SHORT[r]:>12}" for r in _TABLE)
    admissions = {a.demand.job: a for a in plan.admissions()}
    for cq in plan.cluster_queues:
        lqs = ", ".join(f"{q.namespace}/{q.name}" for q in plan.local_queues if q.cluster_queue == cq.name)
        who = f"team {cq.team}" if cq.team else "shared"
        weight = f", fair-share weight {cq.fair_share_weight:g}" if cq.team else ""
        lines.append(f"  ClusterQueue {cq.name} ({who}{weight}; LocalQueues {lqs})")
        for f in plan.flavors:
            lim = cq.limits[f.name]
            own, borrow, lend = cq.nodes[f.name]
            size = f"{own} of the group's {f.sizing}"
            if len(plan.cluster_queues) > 1:
                size += f"; borrows {'any' if borrow is None else borrow}, lends {'all' if lend is None else lend}"
            lines.append(f"    flavor {f.name} ({f.instance_type}, {size})")
            if f.topology is not None:
                lines.append(f"      topology {f.topology}: " + " > ".join(f.levels))
            lines.append(head)
            lines.append(f"    {'nominal quota':<22}" + "".join(f"{human(r, lim[r].nominal):>12}" for r in _TABLE))
            for d in plan.demands:
                if d.queue != cq.name or d.flavor != f.name:
                    continue
                total = d.total
                lines.append(f"    {d.job:<22}" + "".join(f"{human(r, total[r]):>12}" for r in _TABLE))
                a = admissions[d.job]
                what = f"{d.kind}, priority {d.priority}"
                if d.elastic_max is not None:
                    what += f", elastic: Kueue reserves maxNodes ({d.elastic_max})"
                if d.kind in ("mpi", "nccl-test"):
                    what += ", launcher counted"
                if d.placement is not None:
                    what += f", placement {d.placement}"
                lines.append(f"      ({what}) {_verdict(a)}")
                lines += [f"      {why}" for why in _intended(a, f, [x for x in admissions.values() if x.at_once])]
    return "\n".join(lines) + "\n"


def _verdict(a: Admission) -> str:
    if a.at_once:
        return "admitted at once"
    if a.short is not None:
        r, need, room = a.short
        return f"waits: {human(r, need)} {r} with the jobs before it, the queue holds {human(r, room)}"
    return "waits"


def _intended(a: Admission, f: Flavor, admitted: Sequence[Admission]) -> list[str]:
    """Why a job that waits on an empty cluster is meant to (a job that can never fit is a config
    error, so one that waits fits once the jobs before it are done), and when an admitted job's
    nodes are still to come from the autoscaler."""
    d = a.demand
    if not a.at_once:
        ahead = [x.demand.job for x in admitted if x.demand.flavor == d.flavor]  # its queue's or the cohort's
        after = f"after {', '.join(ahead)} finish{'es' if len(ahead) == 1 else ''}" if ahead else "once quota is free"
        return [f"intended: Kueue holds it and admits it {after} (alone it fits the queue)"]
    per_node = f.per_node.get(GPU, 0)
    nodes = -(-d.total[GPU] // per_node) if per_node else 0
    if f.autoscaled and nodes > f.first_nodes:
        return [
            f"intended: its pods wait for nodes; the Cluster Autoscaler grows group {f.name} from {f.first_nodes} "
            f"to the {nodes} node{'s' if nodes != 1 else ''} they need"
        ]
    return []
