"""The queues' numbers, derived from the stack config and never typed: one Kueue ResourceFlavor per
GPU node group, the quota of each ClusterQueue per flavor (the group's nodes times what one node
offers), what each enabled job asks for, and which jobs fit at once. The config checks (a job that
can never be admitted, a team beyond the groups) and the offline plan's queue table both use it.

Units: ``cpu`` in millicores, ``memory`` and ``hugepages-2Mi`` in MiB, GPUs and EFA interfaces as
counts. A node's CPU and memory are what the node leaves for pods (``facts/allocatable.py``: the
instance's, less kubelet's reservations, the eviction threshold, the huge pages and the requests of
the DaemonSets that run on every GPU node).

Kueue admits a job when every pod set of it fits its ClusterQueue's quota at once, on the flavor
its pods select (the job's node group). In a cohort (teams) a queue may borrow idle quota of the
others, up to its borrowing limit and what they lend (their lending limit, else all their nominal
quota); ``reach`` is the most a queue can ever hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from facts import allocatable, durations
from facts.kube import ACCELERATOR_LABEL, EFA_HUGEPAGES_2MI_PAGES, NODE_GROUP_LABEL
from facts.problems import Problem
from jobs.base import GPU_TOLERATION, PRIORITIES, GpuJob, JobBase, JobBuildError, JobsContext, toleration
from jobs.pod import QUEUE_LABEL
from jobs.registry import build_manifests

CPU, MEMORY, GPU, EFA, HUGEPAGES = "cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa", "hugepages-2Mi"
# What the ClusterQueues cover, in this order (Kueue checks only these: quotaCheckStrategy
# IgnoreUndeclared, so a team's pod that also asks for ephemeral-storage is not blocked).
RESOURCES = (CPU, MEMORY, GPU, EFA, HUGEPAGES)
UNIT = {CPU: "m", MEMORY: "Mi", HUGEPAGES: "Mi", GPU: "", EFA: ""}

# Names of the queue objects (cluster-wide, except LocalQueues).
SHARED_QUEUE = "gpu"  # the ClusterQueue of jobs without a team, and its LocalQueue in the training namespace
# A team namespace's LocalQueue: Kueue puts every job of a queued kind that names no queue there
# (LocalQueue defaulting), so a team's jobs cannot bypass its queue. The training namespace has no
# queue of this name: its data-stage Jobs name no queue and are not queued.
TEAM_LOCAL_QUEUE = "default"
COHORT = "gpu-training"  # every ClusterQueue of the stack borrows and lends in this cohort
PROVISIONING_CHECK = "gpu-provisioning"  # the ProvisioningRequest admission check (and its config)
# The autoscaler's provisioning class for a gang: all its nodes or none, as far as the cloud provider
# can (AWS's cannot: it has no atomic resize, so the autoscaler makes one resize for the whole gang).
PROVISIONING_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
KUEUE_NAMESPACE = "kueue-system"
# Names a team cannot take (its ClusterQueue and its LocalQueue in the training namespace are named
# after it): the shared queue's, and `default`, which in the training namespace would take in the
# data-stage Jobs that name no queue.
RESERVED_TEAM_NAMES = (SHARED_QUEUE, TEAM_LOCAL_QUEUE)
# Kueue's ResourceFlavor holds at most 8 tolerations: the GPU taint's and the group's own taints.
MAX_FLAVOR_TOLERATIONS = 8

# The integration (Kueue framework) of each operator whose jobs the stack queues. batch/job only
# with teams: Kueue's batch-user role lets a team create batch Jobs, which must queue too (the
# stack's own data-stage Jobs name no queue and are left alone).
INTEGRATIONS = {"mpi": ("kubeflow.org/mpijob",), "training": ("kubeflow.org/pytorchjob", "kubeflow.org/paddlejob")}
BATCH_JOB = "batch/job"
# The replica maps Kueue reads a pod set from, per kind (one pod set per replica type).
_REPLICA_SPECS = {"MPIJob": "mpiReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "PaddleJob": "paddleReplicaSpecs"}

# waitForPodsReady: an admitted job must have every pod running within `queues.podsReadyTimeout`, or
# it gives its nodes back and queues again (backoff 1 minute, doubling to 1 hour). The default, 20
# minutes, covers a GPU node
# started from zero (autoscaler decision, EC2 launch and join, device plugins, huge pages: about 8
# minutes on p4d/p5) plus the pull of a 10-20 GB training image onto a fresh root volume (about 10
# minutes), with room to spare.
REQUEUE_BACKOFF_BASE_SECONDS = 60
REQUEUE_BACKOFF_MAX_SECONDS = 3600


# ---------------------------------------------------------------------------------------------
# Quantities
# ---------------------------------------------------------------------------------------------

_BINARY = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024**2, "Pi": 1024**3}
_DECIMAL = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_quantity(resource: str, value: Any) -> int:
    """A Kubernetes quantity in this module's unit for ``resource`` (rounded up: a request counts whole)."""
    text = str(value)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", text)
    if m is None:
        raise ValueError(f"{resource}: {value!r} is not a quantity")
    number, suffix = float(m.group(1)), m.group(2)
    if resource == CPU:
        millis = number if suffix == "m" else number * 1000 if suffix == "" else None
        if millis is None:
            raise ValueError(f"cpu: {value!r} is not a CPU quantity")
        return int(-(-millis // 1))
    if UNIT[resource] == "Mi":
        if suffix in _BINARY:
            mib = number * _BINARY[suffix]
        elif suffix in _DECIMAL or suffix == "":
            mib = number * _DECIMAL.get(suffix, 1) / 2**20
        else:
            raise ValueError(f"{resource}: {value!r} is not a memory quantity")
        return int(-(-mib // 1))
    if suffix:
        raise ValueError(f"{resource}: {value!r} is not a count")
    return int(number)


def quantity(resource: str, amount: int) -> str:
    """``amount`` as the Kubernetes quantity Kueue reads (whole cores where it is whole)."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    return f"{amount}{UNIT[resource]}"


def human(resource: str, amount: int) -> str:
    """``amount`` for the plan's table: CPU in cores, memory in GiB."""
    if resource == CPU:
        return f"{amount / 1000:g}"
    if resource == MEMORY:
        return f"{amount / 1024:.1f}Gi"
    return quantity(resource, amount)


# ---------------------------------------------------------------------------------------------
# Nodes and flavors
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeServices:
    """The services whose DaemonSets request CPU and memory on every GPU node."""

    fsx: bool = True
    efa_device_plugin: bool = True
    monitoring: bool = True


def daemon_requests(efa: bool, services: NodeServices) -> list[allocatable.DaemonRequests]:
    """The DaemonSets with a pod on a GPU node (with EFA or without) of a stack with ``services``."""
    out = list(allocatable.ALWAYS)
    if services.fsx:
        out.append(allocatable.FSX_CSI_NODE)
    if efa and services.efa_device_plugin:
        out.append(allocatable.EFA_DEVICE_PLUGIN)
    if services.monitoring:
        out += allocatable.CLOUDWATCH
    return out


def node_allocatable(g: Any, services: NodeServices) -> dict[str, int]:
    """What one node of GPU group ``g`` leaves for training pods, per covered resource."""
    it = g.instance
    hugepages = EFA_HUGEPAGES_2MI_PAGES * 2 if g.efa_interfaces else 0
    daemons = daemon_requests(bool(g.efa_interfaces), services)
    memory_capacity = int(it.memory_mib * (1 - allocatable.KERNEL_MEMORY_SHARE))
    return {
        CPU: it.vcpus * 1000 - allocatable.kube_reserved_cpu_m(it.vcpus) - sum(d.cpu_m for d in daemons),
        MEMORY: memory_capacity - allocatable.kube_reserved_memory_mib(it.vcpus) - hugepages - sum(d.memory_mib for d in daemons),
        GPU: it.gpus,
        EFA: g.efa_interfaces,
        HUGEPAGES: hugepages,
    }


@dataclass(frozen=True)
class Flavor:
    """A Kueue ResourceFlavor: one GPU node group, its node labels and tolerations, and what all
    its nodes offer."""

    name: str
    instance_type: str
    nodes: int  # the group's maxSize, or its fixed size when it is not autoscaled
    autoscaled: bool
    per_node: Mapping[str, int]
    node_labels: Mapping[str, str]
    tolerations: Sequence[Mapping[str, str]]

    @property
    def capacity(self) -> dict[str, int]:
        return {r: self.nodes * self.per_node[r] for r in RESOURCES}

    @property
    def sizing(self) -> str:
        return f"maxSize {self.nodes}" if self.autoscaled else f"fixed size {self.nodes} (not autoscaled)"


def group_nodes(g: Any, autoscaling_enabled: bool) -> tuple[int, bool]:
    """How many nodes group ``g`` can have (maxSize when the autoscaler sizes it, else its fixed
    size: desiredSize), and whether it is autoscaled."""
    scaled = autoscaling_enabled and g.autoscaled
    return (g.max_size if scaled else g.desired_size), scaled


def flavor_of(g: Any, autoscaling_enabled: bool, services: NodeServices) -> Flavor:
    nodes, scaled = group_nodes(g, autoscaling_enabled)
    labels = {NODE_GROUP_LABEL: g.name, **g.labels}
    if g.instance.accelerator:
        labels[ACCELERATOR_LABEL] = g.instance.accelerator
    return Flavor(
        name=g.name,
        instance_type=g.instance_type,
        nodes=nodes,
        autoscaled=scaled,
        per_node=node_allocatable(g, services),
        node_labels=labels,
        tolerations=[dict(GPU_TOLERATION)] + [toleration(t.model_dump(by_alias=True)) for t in g.taints],
    )


# ---------------------------------------------------------------------------------------------
# Cluster queues
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """One resource of one flavor in a ClusterQueue: nominal quota, borrowing and lending limits
    (None: no limit)."""

    nominal: int
    borrowing: Optional[int] = None
    lending: Optional[int] = None

    @property
    def lendable(self) -> int:
        return self.nominal if self.lending is None else self.lending

    @property
    def guaranteed(self) -> int:
        """The part of the nominal quota only this queue can use."""
        return self.nominal - self.lendable


@dataclass(frozen=True)
class ClusterQueue:
    """A Kueue ClusterQueue: its flavors' limits, the namespaces whose LocalQueues may use it, and
    (teams) its fair-share weight."""

    name: str
    team: Optional[str]
    namespaces: tuple[str, ...]
    limits: Mapping[str, Mapping[str, Limits]]  # flavor -> resource -> limits
    fair_share_weight: Optional[float] = None
    nodes: Mapping[str, tuple[int, Optional[int], Optional[int]]] = field(default_factory=dict)  # flavor -> (nodes, borrowing, lending limit) in nodes


@dataclass(frozen=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str


@dataclass(frozen=True)
class Team:
    """A team's access: its namespace and the IAM role given its Kubernetes group there."""

    name: str
    namespace: str
    role_arn: Optional[str]

    @property
    def kubernetes_group(self) -> str:
        return f"gputraining:team:{self.name}"


def team_namespace(team: Any) -> str:
    return team.namespace or team.name


def _nodes_limits(per_node: Mapping[str, int], nodes: int, borrow: Optional[int], lend: Optional[int]) -> dict[str, Limits]:
    return {r: Limits(nodes * per_node[r], None if borrow is None else borrow * per_node[r], None if lend is None else lend * per_node[r]) for r in RESOURCES}


def cluster_queues(flavors: Sequence[Flavor], teams: Sequence[Any], training_namespace: str) -> list[ClusterQueue]:
    """The shared queue (what the teams' nominal quotas leave of every flavor) and one queue per
    team, all in one cohort. Team quotas beyond a group are a config problem (checked first);
    here the shared queue's quota is never below zero."""
    shared: dict[str, dict[str, Limits]] = {}
    shared_nodes: dict[str, tuple[int, Optional[int], Optional[int]]] = {}
    out: list[ClusterQueue] = []
    for t in teams:
        by_group = {q.node_group: q for q in t.quotas}
        limits: dict[str, dict[str, Limits]] = {}
        configured: dict[str, tuple[int, Optional[int], Optional[int]]] = {}
        for f in flavors:
            q = by_group.get(f.name)
            nodes, borrow, lend = (q.nodes, q.borrowing_limit, q.lending_limit) if q is not None else (0, None, None)
            limits[f.name] = _nodes_limits(f.per_node, nodes, borrow, lend)
            configured[f.name] = (nodes, borrow, lend)
        out.append(ClusterQueue(t.name, t.name, (team_namespace(t), training_namespace), limits, t.fair_share_weight, configured))
    for f in flavors:
        left = max(0, f.nodes - sum(cq.nodes[f.name][0] for cq in out))
        shared[f.name] = _nodes_limits(f.per_node, left, None, None)
        shared_nodes[f.name] = (left, None, None)
    return [ClusterQueue(SHARED_QUEUE, None, (training_namespace,), shared, 1 if teams else None, shared_nodes)] + out


def local_queues(teams: Sequence[Any], training_namespace: str) -> list[LocalQueue]:
    """``gpu`` in the training namespace (the shared queue), and per team one named after it in
    the training namespace (the stack's own jobs of the team) and ``default`` in the team's
    namespace (the jobs its people submit)."""
    out = [LocalQueue(training_namespace, SHARED_QUEUE, SHARED_QUEUE)]
    for t in teams:
        out.append(LocalQueue(training_namespace, t.name, t.name))
        out.append(LocalQueue(team_namespace(t), TEAM_LOCAL_QUEUE, t.name))
    return out


def job_queues(teams: Sequence[Any]) -> dict[str, str]:
    """The LocalQueue (in the training namespace) of the stack's jobs, per team ("" = none)."""
    return {"": SHARED_QUEUE, **{t.name: t.name for t in teams}}


# ---------------------------------------------------------------------------------------------
# What jobs ask for
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSet:
    """A pod set of a job as Kueue sizes it: ``count`` pods of ``per_pod``, on ``flavor``."""

    name: str
    count: int
    per_pod: Mapping[str, int]
    flavor: Optional[str]


@dataclass(frozen=True)
class Demand:
    """What one enabled GPU job asks its queue for, at once."""

    job: str
    kind: str
    key: str  # the job's config key, for problems
    queue: str  # its ClusterQueue
    priority: str
    pod_sets: tuple[PodSet, ...]
    elastic_max: Optional[int] = None  # an elastic PyTorchJob: the maxNodes Kueue reserves

    @property
    def flavor(self) -> Optional[str]:
        return next((p.flavor for p in self.pod_sets if p.flavor), None)

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


def pod_sets(manifest: Mapping[str, Any]) -> list[PodSet]:
    """The pod sets Kueue makes of a queued job object (one per replica type, ``replicas`` pods)."""
    replicas = (manifest.get("spec") or {}).get(_REPLICA_SPECS.get(manifest.get("kind", ""), ""), {})
    out = []
    for role, rs in replicas.items():
        spec = (rs.get("template") or {}).get("spec") or {}
        out.append(PodSet(role.lower(), int(rs.get("replicas", 1)), pod_requests(spec), (spec.get("nodeSelector") or {}).get(NODE_GROUP_LABEL)))
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
            if m.get("kind") in _REPLICA_SPECS and QUEUE_LABEL in (m["metadata"].get("labels") or {}):
                elastic = (m["spec"].get("elasticPolicy") or {}).get("maxReplicas") if m["kind"] == "PyTorchJob" else None
                out.append(Demand(spec.name, spec.kind, key, queue_of_team[spec.team or ""], spec.priority, tuple(pod_sets(m)), elastic))
    return out


# ---------------------------------------------------------------------------------------------
# Admission on paper
# ---------------------------------------------------------------------------------------------


Usage = dict[tuple[str, str, str], int]  # (cluster queue, flavor, resource) -> in use


def _shortfall(cq: ClusterQueue, queues: Sequence[ClusterQueue], demand: Mapping[str, int], flavor: str, usage: Usage) -> Optional[tuple[str, int, int]]:
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
        pool_used = sum(max(0, usage.get((q.name, flavor, r), 0) - q.limits[flavor][r].guaranteed) for q in queues if q.name != cq.name)
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
    short: Optional[tuple[str, int, int]] = None  # why it waits: (resource, needed, available)


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
    requeue_limit: Optional[int]
    provisioning: bool  # the ProvisioningRequest admission check, on the autoscaled flavors
    demands: tuple[Demand, ...]

    @property
    def fair_sharing(self) -> bool:
        return bool(self.teams)

    def admissions(self) -> list[Admission]:
        return admit_in_order(self.demands, self.cluster_queues)


def plan_context(training_namespace: str, groups: Sequence[Any], volumes: Iterable[str], etcd: bool, teams: Sequence[Any]) -> JobsContext:
    """A JobsContext like the stack's, for sizing jobs before anything exists (the claim names and
    the etcd endpoint do not change what a job asks for)."""
    from stacks.config.jobs import job_targets  # the config layer imports this module

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
    ops = set(operators)
    ctx = plan_context(training_namespace, groups, volumes, etcd, teams)
    queue_of_team = {"": SHARED_QUEUE, **{t.name: t.name for t in teams}}
    return QueuePlan(
        flavors=flavors,
        cluster_queues=cqs,
        local_queues=tuple(local_queues(teams, training_namespace)),
        teams=tuple(Team(t.name, team_namespace(t), t.role_arn) for t in teams),
        managed_namespaces=tuple(dict.fromkeys([training_namespace, *(team_namespace(t) for t in teams)])),
        integrations=tuple(([BATCH_JOB] if teams else []) + [i for op in ("mpi", "training") if op in ops for i in INTEGRATIONS[op]]),
        pods_ready_timeout=queues.pods_ready_timeout,
        requeue_limit=queues.requeue_limit,
        provisioning=bool(autoscaling.provisioning_requests and any(f.autoscaled for f in flavors)),
        demands=tuple(demands(jobs, ctx, queue_of_team)),
    )


def plan_for(cfg: Any) -> Optional[QueuePlan]:
    """The queues of a validated ``StackConfig``; None when it runs none."""
    if not cfg.queues.enabled or not cfg.gpu_node_groups:
        return None
    st, sv = cfg.storage, cfg.services
    return build_plan(
        groups=cfg.gpu_node_groups,
        queues=cfg.queues,
        autoscaling=cfg.autoscaling,
        training_namespace=sv.training_namespace,
        services=NodeServices(fsx=st.fsx.enabled, efa_device_plugin=sv.efa_device_plugin, monitoring=cfg.monitoring.enabled),
        operators=[name for name, on in (("mpi", sv.mpi_operator), ("training", sv.training_operator)) if on],
        volumes=[name for name, on in (("efs", st.efs.enabled), ("fsx", st.fsx.enabled)) if on],
        etcd=cfg.etcd.enabled,
        jobs=[(f"jobs[{i}]", j) for i, j in enumerate(cfg.jobs)],
    )


# ---------------------------------------------------------------------------------------------
# Config checks
# ---------------------------------------------------------------------------------------------


def check_jobs(plan: QueuePlan, problems: list[Problem], key_prefix: str) -> None:
    """A job that can never be admitted is a problem: naming the job, the resource and both
    numbers (what it asks for, the most its queue can ever hold); so is a pod no node can hold."""
    by_name = {q.name: q for q in plan.cluster_queues}
    flavors = {f.name: f for f in plan.flavors}
    for d in plan.demands:
        flavor = d.flavor
        if flavor is None or flavor not in flavors:
            continue
        cq = by_name[d.queue]
        f = flavors[flavor]
        field = "maxNodes" if d.elastic_max is not None else "nodes"
        for p in d.pod_sets:
            for r in RESOURCES:
                if p.per_pod.get(r, 0) > f.per_node[r]:
                    problems.append(
                        Problem(
                            f"{key_prefix}{d.key}",
                            f"job {d.job!r}: a {p.name} pod asks for {human(r, p.per_pod[r])} {r}, more than one {f.instance_type} node of "
                            f"group {flavor!r} offers ({human(r, f.per_node[r])})",
                        )
                    )
        total = d.total
        for r in RESOURCES:
            most = reach(cq, plan.cluster_queues, flavor, r)
            if total[r] > most:
                lim = cq.limits[flavor][r]
                borrow = most - lim.nominal
                whose = f"the queue of team {cq.team!r}" if cq.team else f"the shared queue {cq.name!r}"
                elastic = f" (an elastic job reserves maxNodes {d.elastic_max})" if d.elastic_max is not None else ""
                problems.append(
                    Problem(
                        f"{key_prefix}{d.key}.{field}",
                        f"job {d.job!r} can never be admitted: it asks for {human(r, total[r])} {r} of node group {flavor!r} at once{elastic}, "
                        f"and {whose} can never hold more than {human(r, most)} (nominal {human(r, lim.nominal)} + borrowing {human(r, borrow)}, "
                        f"from the group's {f.sizing})",
                    )
                )
                break


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_config(
    queues: Any, groups: Sequence[Any], autoscaling: Any, training_namespace: Optional[str], admin_principals: Sequence[str], problems: list[Problem], ns: str
) -> None:
    """The queue section on its own and against the GPU groups: names, namespaces, the teams'
    quotas within the groups, and what needs queues or the autoscaler. ``ns`` is the config namespace."""
    k = f"{ns}:queues"
    from stacks.config.checks import RESERVED_NAMESPACES, role_arn_problem  # the config layer imports this module

    why = durations.go_duration_problem(queues.pods_ready_timeout)
    if why or durations.parse_go_duration(queues.pods_ready_timeout) <= 0:
        problems.append(
            Problem(f"{k}.podsReadyTimeout", f"{queues.pods_ready_timeout!r} is not a positive Go duration (Kueue reads it so), like 20m, 1200s or 1h30m")
        )
    if queues.teams and not queues.enabled:
        problems.append(Problem(f"{k}.teams", "teams need queues: set queues.enabled to true (or remove the teams)"))
    if autoscaling is not None and autoscaling.provisioning_requests:
        if not queues.enabled:
            problems.append(Problem(f"{ns}:autoscaling.provisioningRequests", "true needs queues.enabled: Kueue's admission check makes the requests"))
        if not autoscaling.enabled:
            problems.append(Problem(f"{ns}:autoscaling.provisioningRequests", "true needs autoscaling.enabled: the Cluster Autoscaler serves the requests"))
    if queues.enabled:
        for i, g in enumerate(groups):
            if g is not None and len(g.taints) + 1 > MAX_FLAVOR_TOLERATIONS:
                problems.append(
                    Problem(
                        f"{ns}:gpuNodeGroups[{i}].taints",
                        f"{len(g.taints)} taints are too many with queues: its Kueue ResourceFlavor carries the GPU taint's toleration and one per "
                        f"taint, at most {MAX_FLAVOR_TOLERATIONS}; use at most {MAX_FLAVOR_TOLERATIONS - 1}",
                    )
                )
    by_group = {g.name: g for g in groups if g is not None}
    names: dict[str, int] = {}
    spaces: dict[str, int] = {}
    taken: dict[str, int] = {}
    for i, t in enumerate(queues.teams):
        tk = f"{k}.teams[{i}]"
        if not _DNS_LABEL.match(t.name) or len(t.name) > 63:
            problems.append(Problem(f"{tk}.name", f"{t.name!r} is not allowed: a DNS label (lower-case letters, digits and '-', at most 63)"))
        elif t.name in RESERVED_TEAM_NAMES:
            problems.append(Problem(f"{tk}.name", f"{t.name!r} is not allowed: {', '.join(RESERVED_TEAM_NAMES)} name the shared queues"))
        if t.name in names:
            problems.append(Problem(f"{tk}.name", f"{t.name!r} is used by teams[{names[t.name]}] too; team names must be unique"))
        names.setdefault(t.name, i)
        space = team_namespace(t)
        where = f"{tk}.namespace" if t.namespace else f"{tk}.name"
        if not _DNS_LABEL.match(space) or len(space) > 63 or space.startswith("kube-"):
            problems.append(Problem(where, f"{space!r} is not allowed as the team's namespace: a namespace name (lower-case letters, digits, '-'), not kube-*"))
        elif space in RESERVED_NAMESPACES or space == KUEUE_NAMESPACE:
            problems.append(Problem(where, f"{space!r} is not allowed as the team's namespace: it belongs to Kubernetes or to a service of the stack"))
        elif space == training_namespace:
            problems.append(
                Problem(where, f"{space!r} is the training namespace (the stack's own jobs, etcd, the volumes): give the team a namespace of its own")
            )
        if space in spaces:
            problems.append(Problem(where, f"{space!r} is the namespace of teams[{spaces[space]}] too; every team has its own"))
        spaces.setdefault(space, i)
        if t.role_arn is not None:
            why = role_arn_problem(t.role_arn)
            if why:
                problems.append(Problem(f"{tk}.roleArn", why))
            elif t.role_arn in admin_principals:
                problems.append(
                    Problem(
                        f"{tk}.roleArn", f"{t.role_arn!r} is in cluster.adminPrincipals too; EKS takes one access entry per principal (and it is admin already)"
                    )
                )
        seen: set[str] = set()
        for j, q in enumerate(t.quotas):
            qk = f"{tk}.quotas[{j}]"
            g = by_group.get(q.node_group)
            if g is None:
                known = ", ".join(repr(n) for n in sorted(by_group)) or "none"
                problems.append(Problem(f"{qk}.nodeGroup", f"{q.node_group!r} is not a GPU node group of this stack; known groups: {known}"))
                continue
            if q.node_group in seen:
                problems.append(Problem(f"{qk}.nodeGroup", f"{q.node_group!r} is listed twice for team {t.name!r}"))
            seen.add(q.node_group)
            if q.lending_limit is not None and q.lending_limit > q.nodes:
                problems.append(
                    Problem(f"{qk}.lendingLimit", f"{q.lending_limit} is more than the team's own nodes ({q.nodes}); a team lends only what it has")
                )
            taken[q.node_group] = taken.get(q.node_group, 0) + q.nodes
    if autoscaling is None:
        return
    for name, wanted in taken.items():
        g = by_group[name]
        nodes, scaled = group_nodes(g, autoscaling.enabled)
        if wanted > nodes:
            size = f"maxSize {nodes}" if scaled else f"a fixed size of {nodes} (not autoscaled)"
            problems.append(
                Problem(
                    f"{k}.teams",
                    f"the teams' nodes of node group {name!r} add up to {wanted}, and the group has {size}; lower the teams' nodes or raise the group",
                )
            )


def check_job_teams(jobs: Iterable[tuple[str, JobBase]], queues: Any, problems: list[Problem]) -> None:
    """A job's team must be one of the stack's, and needs queues."""
    teams = {t.name for t in queues.teams}
    for key, spec in jobs:
        team = getattr(spec, "team", None)
        if team is None or not spec.enabled:
            continue
        if not queues.enabled:
            problems.append(Problem(f"{key}.team", f"{team!r} needs queues: set queues.enabled to true (or remove the job's team)"))
        elif team not in teams:
            known = ", ".join(repr(n) for n in sorted(teams)) or "none (add them under queues.teams)"
            problems.append(Problem(f"{key}.team", f"{team!r} is not a team of this stack; teams: {known}"))


# ---------------------------------------------------------------------------------------------
# The plan's table
# ---------------------------------------------------------------------------------------------


_TABLE = (GPU, EFA, HUGEPAGES, CPU, MEMORY)
_SHORT = {GPU: "GPUs", EFA: "EFA", HUGEPAGES: "hugepages", CPU: "CPU", MEMORY: "memory"}


def describe(plan: QueuePlan, kueue_version: str) -> str:
    """The queue table of the offline plan: per ClusterQueue and flavor the quota, then what each
    enabled job asks for and whether it is admitted at once or waits."""
    lines = [f"Queues (Kueue {kueue_version}, cohort {COHORT}; a job is admitted whole or waits; pods must run within {plan.pods_ready_timeout}):"]
    extras = []
    if plan.provisioning:
        extras.append(f"ProvisioningRequest check {PROVISIONING_CHECK!r} on " + ", ".join(f.name for f in plan.flavors if f.autoscaled))
    if plan.fair_sharing:
        extras.append("fair sharing between the teams")
    if extras:
        lines.append("  " + "; ".join(extras))
    head = f"    {'':<22}" + "".join(f"{_SHORT[r]:>12}" for r in _TABLE)
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
                if a.at_once:
                    verdict = "admitted at once"
                elif a.short is not None:
                    r, need, room = a.short
                    verdict = f"waits: {human(r, need)} {r} with the jobs before it, the queue holds {human(r, room)}"
                else:
                    verdict = "waits"
                lines.append(f"      ({what}) {verdict}")
    return "\n".join(lines) + "\n"
