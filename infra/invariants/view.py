"""The whole-stack invariants' view of a plan: its records and Kubernetes objects indexed, the
dependency closure, each node group's node as the scheduler sees it, and scheduling on paper
(Kubernetes' toleration and selector matching).

Every index is built once per view, in one pass over the records, so that each rule costs about the size
of the plan (issue 37: a rule that looked each job's needs up in the whole plan grew with its square)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from components import autoscaler
from components import queues as queues_component
from components.node_group import EKS_TAINT_EFFECT
from facts.kube import (
    AUTOSCALE_TAG,
    INSTANCE_TYPE_LABEL,
    NODE_GROUP_LABEL,
    STARTUP_TAINT_PREFIX,
    SYSTEM_GROUP,
    ZONE_LABEL,
)
from facts.operators import TRAINJOB
from jobs.pod import QUEUE_LABEL
from jobs.trainjob import RUNTIME_KIND
from jobs.trainjob_merge import replica_sets
from stacks import queues
from stacks.queues.admission import REPLICA_SPECS

RELEASE = "kubernetes:helm.sh/v3:Release"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
NAMESPACE = "kubernetes:core/v1:Namespace"
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
SYSTEM_NODE_GROUP = "eks:index:ManagedNodeGroup"
NODE_GROUP_COMPONENT = "gputraining:components:NodeGroup"
ASG_TAG = "aws:autoscaling/tag:Tag"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
ADDON = "aws:eks/addon:Addon"
KUEUE_RELEASE = queues_component.RELEASE
AUTOSCALER_RELEASE = autoscaler.RELEASE
# API groups whose CRDs a Helm release of the stack ships (its chart's crds/), by release name.
RELEASE_API_GROUPS = {KUEUE_RELEASE: (queues_component.KUEUE_API.split("/")[0],)}
# Kinds built into Kubernetes (the stack's custom kinds are everything else).
BUILT_IN_GROUPS = (
    "",
    "apps",
    "batch",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "policy",
    "apiextensions.k8s.io",
)
# Labels every EKS node has besides its node group's own (EKS and the kubelet set them).
CAPACITY_TYPE_LABEL = "eks.amazonaws.com/capacityType"
POD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")
# EKS taint effects (NO_SCHEDULE) -> Kubernetes ones (NoSchedule), from the node groups' own table.
EFFECTS = {eks: k8s for k8s, eks in EKS_TAINT_EFFECT.items()}


@dataclass(frozen=True)
class Violation:
    """One broken rule: which rule, and what breaks it."""

    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.what}"


Ref = tuple[str, str]  # (type, name) of a registered resource


@dataclass(frozen=True)
class Node:
    """A node of a group as the scheduler sees it."""

    group: str
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]  # what a node ready for work carries
    allocatable: Mapping[str, int] | None  # what it leaves for pods (GPU groups), in stacks.queues units
    # The taints it joins with and loses once ready (the Cluster Autoscaler's startup taints: burn-in).
    startup_taints: Sequence[Mapping[str, str]] = ()


@dataclass(frozen=True)
class PodTemplate:
    """A pod the stack emits, where it comes from, and whether Kueue queues it."""

    owner: str  # kind/namespace/name of the object, and its replica type
    spec: Mapping[str, Any]
    queued: bool
    kind: str = ""  # the kind of the object it comes from (Pod, DaemonSet, MPIJob, ...)


@dataclass
class StackView:
    """The plan's records and objects, indexed for the rules."""

    records: list[Any]
    cfg: Any
    gpu_az: str = ""
    by_ref: dict[Ref, list[Any]] = field(default_factory=dict)
    _closure: dict[int, frozenset[Ref]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for r in self.records:
            self.by_ref.setdefault((r.type, r.name), []).append(r)

    # -- what the plan holds --

    @cached_property
    def objects(self) -> list[tuple[Any, dict[str, Any]]]:
        """Every Kubernetes object with its record."""
        out = []
        for r in self.records:
            if (
                r.type.startswith("kubernetes:")
                and not r.type.startswith("kubernetes:helm.sh/")
                and "kind" in r.inputs
                and "apiVersion" in r.inputs
            ):
                out.append((r, r.inputs))
        return out

    @cached_property
    def _by_kind(self) -> dict[str, list[tuple[Any, dict[str, Any]]]]:
        out: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
        for r, o in self.objects:
            out.setdefault(o["kind"], []).append((r, o))
        return out

    def of_kind(self, kind: str) -> list[tuple[Any, dict[str, Any]]]:
        return list(self._by_kind.get(kind, []))

    @cached_property
    def _releases(self) -> dict[str, Any]:
        """Helm release name -> its first record."""
        out: dict[str, Any] = {}
        for r in self.records:
            if r.type == RELEASE:
                out.setdefault(r.inputs.get("name"), r)
        return out

    def release(self, name: str) -> Any | None:
        return self._releases.get(name)

    @cached_property
    def crds(self) -> dict[tuple[str, str], Any]:
        """(API group, kind) -> the first CustomResourceDefinition record that defines it."""
        out: dict[tuple[str, str], Any] = {}
        for r in self.records:
            if r.type == CRD:
                out.setdefault((r.inputs["spec"]["group"], r.inputs["spec"]["names"]["kind"]), r)
        return out

    @cached_property
    def namespaces(self) -> dict[str, Any]:
        """Namespace name -> the record that creates it: its Namespace object, else a Helm release that
        creates it (``createNamespace``), the first of each."""
        out: dict[str, Any] = {}
        for r, o in self._by_kind.get("Namespace", []):
            out.setdefault(o["metadata"]["name"], r)
        for r in self.records:
            if r.type == RELEASE and r.inputs.get("createNamespace") and r.inputs.get("namespace") is not None:
                out.setdefault(r.inputs["namespace"], r)
        return out

    @cached_property
    def queue_plan(self) -> Any | None:
        return queues.plan_for(self.cfg)

    # -- dependencies --

    def needs(self, record: Any) -> frozenset[Ref]:
        """Everything ``record`` waits for, directly or through what it waits for."""
        key = id(record)
        if key not in self._closure:
            self._closure[key] = frozenset()  # a cycle ends here
            found: set[Ref] = set()
            for d in record.depends_on:
                ref = (d["type"], d["name"])
                found.add(ref)
                for dep in self.by_ref.get(ref, []):
                    found |= self.needs(dep)
            self._closure[key] = frozenset(found)
        return self._closure[key]

    def waits_for(self, record: Any, target: Any) -> bool:
        return (target.type, target.name) in self.needs(record)

    # -- nodes --

    @cached_property
    def _owned(self) -> dict[str, list[Any]]:
        """GPU group -> its autoscaling tags and schedules (in the plan's order)."""
        out: dict[str, list[Any]] = {}
        for r in self.records:
            if r.type in (ASG_TAG, SCHEDULE):
                group = self._group_of(r)
                if group is not None:
                    out.setdefault(group, []).append(r)
        return out

    @cached_property
    def scaled_groups(self) -> set[str]:
        """The GPU groups the Cluster Autoscaler scales (their ASG carries the autoscale tag)."""
        return {
            group
            for group, owned in self._owned.items()
            if any(r.type == ASG_TAG and (r.inputs.get("tag") or {}).get("key") == AUTOSCALE_TAG for r in owned)
        }

    @cached_property
    def _eks_node_groups(self) -> dict[str, Any]:
        """GPU group -> its first EKS node group record."""
        out: dict[str, Any] = {}
        for r in self.records:
            if r.type == EKS_NODE_GROUP:
                group = (r.inputs.get("labels") or {}).get(NODE_GROUP_LABEL)
                if group is not None:
                    out.setdefault(group, r)
        return out

    def _group_of(self, record: Any) -> str | None:
        """The GPU group a node-group-side AWS record belongs to (its NodeGroup component gpu-<group>)."""
        parent = record.parent
        while parent is not None:
            if parent["type"] == NODE_GROUP_COMPONENT:
                name = parent["name"]
                return name[len("gpu-") :] if name.startswith("gpu-") else name
            ups = self.by_ref.get((parent["type"], parent["name"]), [])
            parent = ups[0].parent if ups else None
        return None

    @cached_property
    def nodes(self) -> dict[str, Node]:
        """group -> one of its nodes: the GPU groups from their EKS node groups, the system group."""
        out: dict[str, Node] = {}
        flavors = {f.name: f for f in self.queue_plan.flavors} if self.queue_plan else {}
        per_node = {
            g.name: queues.node_allocatable(g, queues.node_services(self.cfg)) for g in self.cfg.gpu_node_groups
        }
        for r in self.records:
            if r.type not in (EKS_NODE_GROUP, SYSTEM_NODE_GROUP):
                continue
            labels = dict(r.inputs.get("labels") or {})
            group = labels.get(NODE_GROUP_LABEL)
            if group is None:
                continue
            types = r.inputs.get("instanceTypes") or []
            labels.setdefault(INSTANCE_TYPE_LABEL, types[0] if types else "")
            labels.setdefault(CAPACITY_TYPE_LABEL, r.inputs.get("capacityType") or "ON_DEMAND")
            if group != SYSTEM_GROUP:
                labels.setdefault(ZONE_LABEL, self.gpu_az)
            taints = [
                {"key": t["key"], "value": t.get("value") or "", "effect": EFFECTS[t["effect"]]}
                for t in r.inputs.get("taints") or []
            ]
            allocatable = flavors[group].per_node if group in flavors else per_node.get(group)
            startup = [t for t in taints if t["key"].startswith(STARTUP_TAINT_PREFIX)]
            working = [t for t in taints if t not in startup]
            out[group] = Node(group, labels, working, allocatable, startup)
        return out

    def supply(self, group: str) -> int:
        """The nodes group ``group`` can have, from the AWS side of the plan."""
        ng = self._eks_node_groups.get(group)
        if ng is None:
            return 0
        scaling = ng.inputs.get("scalingConfig") or {}
        if group in self.scaled_groups:
            return int(scaling.get("maxSize", 0))
        scheduled = [int(r.inputs.get("desiredCapacity", 0)) for r in self._owned.get(group, []) if r.type == SCHEDULE]
        return max([int(scaling.get("desiredSize", 0)), *scheduled])

    def nodes_for(self, pod: Mapping[str, Any]) -> list[Node]:
        """The nodes ``pod`` may land on as far as its node selector's group label goes (every node when it
        names none): a node of another group does not carry the label's value. ``lands_on`` decides."""
        group = (pod.get("nodeSelector") or {}).get(NODE_GROUP_LABEL)
        if group is None:
            return list(self.nodes.values())
        node = self.nodes.get(group)
        return [node] if node is not None and node.labels.get(NODE_GROUP_LABEL) == group else []

    # -- pods --

    def pods(self) -> Iterator[PodTemplate]:
        yield from self._pods

    @cached_property
    def _runtimes(self) -> dict[str, dict[str, Any]]:
        return {o["metadata"]["name"]: o for _, o in self.of_kind(RUNTIME_KIND)}

    def replica_sets(self, o: Mapping[str, Any]) -> dict[str, Any]:
        """A queued job object's replica specs (role -> replicas, template); a TrainJob's as Trainer makes them
        of its runtime in the plan (jobs/trainjob_merge.py); {} for any other object."""
        if o["kind"] == TRAINJOB.kind:
            return replica_sets(dict(o), self._runtimes)
        return dict((o.get("spec") or {}).get(REPLICA_SPECS.get(o["kind"], "")) or {})

    def is_queued_job(self, o: Mapping[str, Any]) -> bool:
        """A job object Kueue queues (of a kind it integrates, with a queue label)."""
        kind_ok = o["kind"] in REPLICA_SPECS or o["kind"] == TRAINJOB.kind
        return kind_ok and QUEUE_LABEL in ((o.get("metadata") or {}).get("labels") or {})

    @cached_property
    def daemonset_pods(self) -> list[PodTemplate]:
        return [p for p in self._pods if p.kind == "DaemonSet"]

    @cached_property
    def _pods(self) -> list[PodTemplate]:
        return list(self._pod_templates())

    def _pod_templates(self) -> Iterator[PodTemplate]:
        for _, o in self.objects:
            kind, meta, spec = o["kind"], o.get("metadata") or {}, o.get("spec") or {}
            where = f"{kind}/{meta.get('namespace', '')}/{meta.get('name', '')}"
            queued = QUEUE_LABEL in (meta.get("labels") or {})
            if kind == "Pod":
                yield PodTemplate(where, spec, queued, kind)
            elif kind in POD_KINDS:
                yield PodTemplate(where, (spec.get("template") or {}).get("spec") or {}, queued, kind)
            elif kind in REPLICA_SPECS or kind == TRAINJOB.kind:
                for role, rs in self.replica_sets(o).items():
                    yield PodTemplate(f"{where} {role}", (rs.get("template") or {}).get("spec") or {}, queued, kind)


def view(plan: Any, cfg: Any) -> StackView:
    """The rules' view of a plan (``infra.offline.PlanResult``) of the validated config ``cfg``."""
    return StackView(list(plan.records), cfg, str((plan.outputs or {}).get("gpuAvailabilityZone", "")))


# ---------------------------------------------------------------------------------------------
# Scheduling on paper (Kubernetes' matching rules)
# ---------------------------------------------------------------------------------------------


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, str]) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint``."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        op = t.get("operator", "Equal")
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] == taint["key"] and (op == "Exists" or t.get("value", "") == taint.get("value", "")):
            return True
    return False


def _expression(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, vals = expr["key"], expr["operator"], expr.get("values") or []
    present = key in labels
    return {
        "In": present and labels.get(key) in vals,
        "NotIn": not present or labels.get(key) not in vals,
        "Exists": present,
        "DoesNotExist": not present,
    }[op]


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector (``matchLabels`` and ``matchExpressions``) against labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression(e, labels) for e in selector.get("matchExpressions") or [])


def lands_on(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a pod's node selector and required node affinity both match a node's labels."""
    selector = pod.get("nodeSelector") or {}
    return all(labels.get(k) == v for k, v in selector.items()) and required_affinity_matches(pod, labels)


def required_affinity_matches(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(all(_expression(e, labels) for e in term.get("matchExpressions") or []) for term in terms)
