"""The whole-stack rules where Kueue's queues meet the node groups, one function each (see the package's
docstring): quotas within the nodes' supply, jobs admissible, pods fitting their nodes with the flavors'
tolerations, ProvisioningRequest checks with their API, topology flavors provisioned and placements
within the Topology."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components.queues import PROVISIONING_CONTROLLER
from facts import topology
from facts.kube import NODE_GROUP_LABEL
from facts.multikueue import CONTROLLER_NAME as MULTIKUEUE_CONTROLLER
from infra.invariants.view import (
    AUTOSCALER_RELEASE,
    CRD,
    KUEUE_RELEASE,
    Node,
    PodTemplate,
    StackView,
    Violation,
    required_affinity_matches,
    tolerates,
)
from jobs.pod import QUEUE_LABEL
from stacks import queues
from stacks.queues.admission import pod_requests, replica_pod_sets


def _quota(cq: Mapping[str, Any]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """ClusterQueue -> flavor -> resource -> its quota entry."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for rg in cq["spec"].get("resourceGroups") or []:
        for f in rg.get("flavors") or []:
            out[f["name"]] = {r["name"]: r for r in f.get("resources") or []}
    return out


def _quotas_by_flavor(v: StackView) -> dict[str, list[dict[str, Mapping[str, Any]]]]:
    """Flavor -> resource -> quota entry, one per ClusterQueue that has the flavor (in the plan's order)."""
    out: dict[str, list[dict[str, Mapping[str, Any]]]] = {}
    for _, o in v.of_kind("ClusterQueue"):
        for flavor, resources in _quota(o).items():
            out.setdefault(flavor, []).append(resources)
    return out


def fleet_flavors(v: StackView) -> set[str]:
    """The flavors of a fleet manager's ClusterQueues (those with the MultiKueue check): their supply is
    the workers' nodes, summed by stacks/fleet.py, not this plan's (tests/test_fleet_wiring.py checks it)."""
    multikueue = {
        o["metadata"]["name"]
        for _, o in v.of_kind("AdmissionCheck")
        if o["spec"].get("controllerName") == MULTIKUEUE_CONTROLLER
    }
    out: set[str] = set()
    for _, cq in v.of_kind("ClusterQueue"):
        checks = (cq["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        if any(c.get("name") in multikueue for c in checks):
            out |= set(_quota(cq))
    return out


def quota_within_supply(v: StackView) -> list[Violation]:
    """No flavor is promised more than its group can hold (a fleet's flavors: its workers' groups)."""
    out = []
    by_flavor = _quotas_by_flavor(v)
    fleet = fleet_flavors(v)
    for _, flavor in v.of_kind("ResourceFlavor"):
        group = flavor["metadata"]["name"]
        if group in fleet:
            continue
        node = v.nodes.get(group)
        if node is None or node.allocatable is None:
            out.append(Violation("quota_within_supply", f"flavor {group!r} names no GPU node group of the plan"))
            continue
        nodes = v.supply(group)
        for r in queues.RESOURCES:
            promised = sum(queues.parse_quantity(r, q[r]["nominalQuota"]) for q in by_flavor.get(group, []) if r in q)
            if promised > nodes * node.allocatable[r]:
                out.append(
                    Violation(
                        "quota_within_supply",
                        f"flavor {group!r}: the ClusterQueues' nominal {r} adds up to {queues.human(r, promised)}, "
                        f"and {nodes} node(s) of the group hold {queues.human(r, nodes * node.allocatable[r])}",
                    )
                )
    return out


def _lends(resource: str, entry: Mapping[str, Any]) -> int:
    """What a ClusterQueue's quota entry lends its cohort: its lending limit, else its nominal quota."""
    return queues.parse_quantity(resource, entry.get("lendingLimit", entry["nominalQuota"]))


class _Reach:
    """The most a ClusterQueue can hold of a resource on a flavor: its nominal quota plus what the rest of
    its cohort lends, up to its borrowing limit. Each ClusterQueue's quota table is read once, and what a
    cohort lends of each (flavor, resource) summed once, not again for every job that asks."""

    def __init__(self, cqs: Mapping[str, Mapping[str, Any]]):
        self.cqs = cqs
        self.tables = {name: _quota(cq) for name, cq in cqs.items()}
        self._lent: dict[tuple[str, str, str], int] = {}

    def _cohort_lends(self, cohort: str, flavor: str, resource: str) -> int:
        key = (cohort, flavor, resource)
        if key not in self._lent:
            self._lent[key] = sum(
                _lends(resource, entry)
                for name, cq in self.cqs.items()
                if cq["spec"].get("cohortName") == cohort
                for entry in [self.tables[name].get(flavor, {}).get(resource)]
                if entry is not None
            )
        return self._lent[key]

    def __call__(self, name: str, flavor: str, resource: str) -> int:
        own = self.tables[name].get(flavor, {}).get(resource)
        if own is None:
            return 0
        nominal = queues.parse_quantity(resource, own["nominalQuota"])
        cohort = self.cqs[name]["spec"].get("cohortName")
        # The rest of the cohort: all of it but its own share.
        lent = 0 if cohort is None else self._cohort_lends(cohort, flavor, resource) - _lends(resource, own)
        limit = own.get("borrowingLimit")
        return nominal + (lent if limit is None else min(lent, queues.parse_quantity(resource, limit)))


def jobs_admissible(v: StackView) -> list[Violation]:
    """Every queued job fits whole in what its ClusterQueue can ever hold."""
    out = []
    cqs = {o["metadata"]["name"]: o for _, o in v.of_kind("ClusterQueue")}
    reach = _Reach(cqs)
    local = {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o["spec"]["clusterQueue"]
        for _, o in v.of_kind("LocalQueue")
    }
    for _, o in v.objects:
        meta = o.get("metadata") or {}
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if queue is None or not v.is_queued_job(o):
            continue
        job = f"{o['kind']} {meta.get('namespace')}/{meta['name']}"
        cq = local.get((meta.get("namespace"), queue))
        if cq is None or cq not in cqs:
            out.append(
                Violation(
                    "jobs_admissible", f"{job}: queue {queue!r} is no LocalQueue of its namespace with a ClusterQueue"
                )
            )
            continue
        total: dict[tuple[str, str], int] = {}
        for ps in replica_pod_sets(v.replica_sets(o)):
            flavor = ps.flavor or next(iter(reach.tables[cq]), "")
            for r, amount in ps.per_pod.items():
                total[(flavor, r)] = total.get((flavor, r), 0) + ps.count * amount
        for (flavor, r), wanted in sorted(total.items()):
            most = reach(cq, flavor, r)
            if wanted > most:
                out.append(
                    Violation(
                        "jobs_admissible",
                        f"{job} asks for {queues.human(r, wanted)} {r} on flavor {flavor!r}; ClusterQueue {cq!r} can "
                        f"hold {queues.human(r, most)}",
                    )
                )
    return out


def _fit_problem(pod: PodTemplate, node: Node, flavor: Mapping[str, Any] | None) -> str | None:
    spec = pod.spec
    tolerations = list(spec.get("tolerations") or []) + list((flavor or {}).get("tolerations") or [])
    labels = node.labels
    selector = {**(spec.get("nodeSelector") or {})}
    missing = {k: val for k, val in selector.items() if labels.get(k) != val}
    if missing:
        return f"its nodeSelector {missing} is not on the nodes of group {node.group!r}"
    if not required_affinity_matches(spec, labels):
        return f"its required node affinity matches no node of group {node.group!r}"
    untolerated = [
        t for t in node.taints if t["effect"] in ("NoSchedule", "NoExecute") and not tolerates(tolerations, t)
    ]
    if untolerated:
        return f"it does not tolerate the taint(s) {untolerated} of group {node.group!r}"
    if node.allocatable is not None:
        asks = pod_requests(spec)
        over = [r for r in queues.RESOURCES if asks.get(r, 0) > node.allocatable[r]]
        if over:
            r = over[0]
            return (
                f"it asks for {queues.human(r, asks[r])} {r}, one {node.group} node leaves "
                f"{queues.human(r, node.allocatable[r])} for pods"
            )
    return None


def pods_fit_their_nodes(v: StackView) -> list[Violation]:
    """Every pod that selects a node group fits one of its nodes."""
    out = []
    flavors = {o["metadata"]["name"]: o["spec"] for _, o in v.of_kind("ResourceFlavor")}
    for pod in v.pods():
        group = (pod.spec.get("nodeSelector") or {}).get(NODE_GROUP_LABEL)
        if group is None:
            continue
        node = v.nodes.get(group)
        if node is None:
            out.append(
                Violation(
                    "pods_fit_their_nodes", f"{pod.owner}: selects node group {group!r}, which the plan does not build"
                )
            )
            continue
        problem = _fit_problem(pod, node, flavors.get(group) if pod.queued else None)
        if problem:
            out.append(Violation("pods_fit_their_nodes", f"{pod.owner}: {problem}"))
    return out


def admission_checks_have_their_api(v: StackView) -> list[Violation]:
    """A ProvisioningRequest check has its API, Kueue starts after it, the autoscaler serves it for
    every flavor the check runs on."""
    out: list[Violation] = []
    checks = {o["metadata"]["name"]: o for _, o in v.of_kind("AdmissionCheck")}
    if not checks:
        return out
    crds = [r for r in v.records if r.type == CRD and r.inputs["metadata"]["name"] == queues.PROVISIONING_REQUEST_API]
    kueue, autoscaler = v.release(KUEUE_RELEASE), v.release(AUTOSCALER_RELEASE)
    for name, check in checks.items():
        if check["spec"].get("controllerName") == MULTIKUEUE_CONTROLLER and kueue is not None:
            continue  # Kueue's own MultiKueue controller (a beta feature, on by default since v0.9)
        if check["spec"].get("controllerName") != PROVISIONING_CONTROLLER:
            out.append(
                Violation(
                    "admission_checks_have_their_api",
                    f"AdmissionCheck {name!r}: no controller of the stack runs {check['spec'].get('controllerName')!r}",
                )
            )
            continue
        if not crds:
            out.append(
                Violation(
                    "admission_checks_have_their_api",
                    f"AdmissionCheck {name!r}: the plan installs no {queues.PROVISIONING_REQUEST_API} CRD",
                )
            )
        elif kueue is None or not v.waits_for(kueue, crds[0]):
            out.append(
                Violation(
                    "admission_checks_have_their_api",
                    f"AdmissionCheck {name!r}: Kueue is not created after the ProvisioningRequest CRD (it looks once, "
                    "at start)",
                )
            )
        serving = (
            autoscaler is not None
            and (autoscaler.inputs.get("values") or {}).get("extraArgs", {}).get("enable-provisioning-requests")
            == "true"
        )
        if not serving:
            out.append(
                Violation(
                    "admission_checks_have_their_api",
                    f"AdmissionCheck {name!r}: the Cluster Autoscaler does not serve ProvisioningRequests",
                )
            )
    scaled = {g for g in v.nodes if g in v.scaled_groups}
    for _, cq in v.of_kind("ClusterQueue"):
        for ac in (cq["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks") or []:
            for flavor in ac.get("onFlavors") or []:
                if flavor not in scaled:
                    out.append(
                        Violation(
                            "admission_checks_have_their_api",
                            f"ClusterQueue {cq['metadata']['name']!r}: check {ac['name']!r} on flavor {flavor!r}, "
                            "whose group the autoscaler does not scale",
                        )
                    )
    return out


def topology_flavors_provisioned(v: StackView) -> list[Violation]:
    """Every flavor with a Topology names one the plan creates, and where its group is autoscaled
    every ClusterQueue runs the ProvisioningRequest check on it: Kueue places by Topology only on
    Ready nodes, and nothing else asks the autoscaler for them before admission."""
    out = []
    topologies = {o["metadata"]["name"] for _, o in v.of_kind("Topology")}
    checks = {o["metadata"]["name"] for _, o in v.of_kind("AdmissionCheck")}
    scaled = v.scaled_groups
    having: dict[str, list[dict[str, Any]]] = {}  # flavor -> the ClusterQueues with a quota of it
    for _, queue in v.of_kind("ClusterQueue"):
        for name in _quota(queue):
            having.setdefault(name, []).append(queue)
    for _, flavor in v.of_kind("ResourceFlavor"):
        name, topology = flavor["metadata"]["name"], flavor["spec"].get("topologyName")
        if topology is None:
            continue
        if topology not in topologies:
            out.append(
                Violation(
                    "topology_flavors_provisioned",
                    f"flavor {name!r} names Topology {topology!r}, which the plan does not create",
                )
            )
        if name not in scaled:
            continue
        for cq in having.get(name, []):
            on = {
                f
                for ac in (cq["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks") or []
                if ac.get("name") in checks
                for f in ac.get("onFlavors") or []
            }
            if name not in on:
                out.append(
                    Violation(
                        "topology_flavors_provisioned",
                        f"ClusterQueue {cq['metadata']['name']!r}: flavor {name!r} has Topology {topology!r} and an "
                        "autoscaled group, but no ProvisioningRequest check: its jobs would wait for nodes that "
                        "nothing asks for",
                    )
                )
    return out


def _pod_set_problems(role: str, rs: Mapping[str, Any], levels: tuple[str, ...] | None) -> list[str]:
    """What is wrong with one pod set's topology annotations on a flavor with ``levels`` (None: no Topology)."""
    notes = ((rs.get("template") or {}).get("metadata") or {}).get("annotations") or {}
    level = next((notes[k] for k in topology.LEVEL_ANNOTATIONS.values() if k in notes), None)
    asks = level is not None or topology.UNCONSTRAINED_ANNOTATION in notes
    if levels is None:
        return [f"{role} asks for a topology placement on a flavor without a Topology"] if asks else []
    if not asks:
        return [
            f"{role} has no topology annotation on a Topology flavor (admitted only if every flavor of its queue has "
            "one)"
        ]
    if level is not None and level not in levels:
        return [f"{role} asks for level {level!r}, which its flavor's Topology ({', '.join(levels)}) does not have"]
    return []


def _group_problems(groups: Mapping[str, list[tuple[int, str | None]]]) -> list[str]:
    """Kueue's rule for pod-set groups: exactly two pod sets, one of a single pod, one request."""
    out = []
    for name, members in groups.items():
        if len(members) != 2 or all(count != 1 for count, _ in members) or len({lvl for _, lvl in members}) != 1:
            out.append(f"pod-set group {name!r} is not two pod sets, one of one pod, asking for one level")
    return out


def placements_within_topology(v: StackView) -> list[Violation]:
    """Every pod set on a flavor with a Topology asks for a placement, at a level that Topology has;
    none asks for one on a flavor without; pod-set groups are as Kueue takes them."""
    out = []
    levels = {
        o["metadata"]["name"]: tuple(lv["nodeLabel"] for lv in o["spec"]["levels"]) for _, o in v.of_kind("Topology")
    }
    flavors = {
        o["metadata"]["name"]: levels.get(o["spec"].get("topologyName", ""), ())
        if o["spec"].get("topologyName")
        else None
        for _, o in v.of_kind("ResourceFlavor")
    }
    for _, o in v.objects:
        if not v.is_queued_job(o):
            continue
        where = f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
        groups: dict[str, list[tuple[int, str | None]]] = {}
        for role, rs in v.replica_sets(o).items():
            spec = (rs.get("template") or {}).get("spec") or {}
            group = (spec.get("nodeSelector") or {}).get(NODE_GROUP_LABEL)
            if group not in flavors:
                continue
            notes = ((rs.get("template") or {}).get("metadata") or {}).get("annotations") or {}
            for problem in _pod_set_problems(role, rs, flavors[group]):
                out.append(Violation("placements_within_topology", f"{where}: {problem}"))
            if topology.GROUP_ANNOTATION in notes:
                level = next((f"{k}={notes[k]}" for k in topology.LEVEL_ANNOTATIONS.values() if k in notes), None)
                groups.setdefault(notes[topology.GROUP_ANNOTATION], []).append((int(rs.get("replicas", 1)), level))
        out += [Violation("placements_within_topology", f"{where}: {p}") for p in _group_problems(groups)]
    return out
