"""The whole-stack rules, one function each (see the package's docstring)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from components.burn_in import NAME as BURN_IN_NAME
from components.device_plugins import EFA_RELEASE, NVIDIA_RELEASE
from components.queues import PROVISIONING_CONTROLLER
from facts import topology
from facts.kube import AUTOSCALE_TAG, EFA_PRESENT_LABEL, NODE_GROUP_LABEL, TEAM_LABEL
from infra.invariants.view import (
    ADDON,
    ASG_TAG,
    AUTOSCALER_RELEASE,
    BUILT_IN_GROUPS,
    CRD,
    KUEUE_RELEASE,
    RELEASE,
    RELEASE_API_GROUPS,
    Node,
    PodTemplate,
    StackView,
    Violation,
    lands_on,
    required_affinity_matches,
    selects,
    tolerates,
    view,
)
from jobs.pod import QUEUE_LABEL
from stacks import queues
from stacks.queues.admission import REPLICA_SPECS, pod_requests, pod_sets

NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
EFA_PRESENT = next(iter(EFA_PRESENT_LABEL.items()))

# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------


def _quota(cq: Mapping[str, Any]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """ClusterQueue -> flavor -> resource -> its quota entry."""
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for rg in cq["spec"].get("resourceGroups") or []:
        for f in rg.get("flavors") or []:
            out[f["name"]] = {r["name"]: r for r in f.get("resources") or []}
    return out


def quota_within_supply(v: StackView) -> list[Violation]:
    """No flavor is promised more than its group can hold."""
    out = []
    cqs = [_quota(o) for _, o in v.of_kind("ClusterQueue")]
    for _, flavor in v.of_kind("ResourceFlavor"):
        group = flavor["metadata"]["name"]
        node = v.nodes.get(group)
        if node is None or node.allocatable is None:
            out.append(Violation("quota_within_supply", f"flavor {group!r} names no GPU node group of the plan"))
            continue
        nodes = v.supply(group)
        for r in queues.RESOURCES:
            promised = sum(
                queues.parse_quantity(r, q[group][r]["nominalQuota"]) for q in cqs if group in q and r in q[group]
            )
            if promised > nodes * node.allocatable[r]:
                out.append(
                    Violation(
                        "quota_within_supply",
                        f"flavor {group!r}: the ClusterQueues' nominal {r} adds up to {queues.human(r, promised)}, "
                        f"and {nodes} node(s) of the group hold {queues.human(r, nodes * node.allocatable[r])}",
                    )
                )
    return out


def _reach(name: str, flavor: str, resource: str, cqs: Mapping[str, Mapping[str, Any]]) -> int:
    """The most ClusterQueue ``name`` can hold of ``resource`` on ``flavor``: its nominal quota plus
    what the rest of its cohort lends, up to its borrowing limit."""
    own = _quota(cqs[name]).get(flavor, {}).get(resource)
    if own is None:
        return 0
    nominal = queues.parse_quantity(resource, own["nominalQuota"])
    cohort = cqs[name]["spec"].get("cohortName")
    lent = 0
    for other, cq in cqs.items():
        entry = _quota(cq).get(flavor, {}).get(resource)
        if other == name or entry is None or cq["spec"].get("cohortName") != cohort or cohort is None:
            continue
        lent += queues.parse_quantity(resource, entry.get("lendingLimit", entry["nominalQuota"]))
    limit = own.get("borrowingLimit")
    return nominal + (lent if limit is None else min(lent, queues.parse_quantity(resource, limit)))


def jobs_admissible(v: StackView) -> list[Violation]:
    """Every queued job fits whole in what its ClusterQueue can ever hold."""
    out = []
    cqs = {o["metadata"]["name"]: o for _, o in v.of_kind("ClusterQueue")}
    local = {
        (o["metadata"].get("namespace"), o["metadata"]["name"]): o["spec"]["clusterQueue"]
        for _, o in v.of_kind("LocalQueue")
    }
    for _, o in v.objects:
        meta = o.get("metadata") or {}
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if queue is None or o["kind"] not in REPLICA_SPECS:
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
        for ps in pod_sets(o):
            flavor = ps.flavor or next(iter(_quota(cqs[cq])), "")
            for r, amount in ps.per_pod.items():
                total[(flavor, r)] = total.get((flavor, r), 0) + ps.count * amount
        for (flavor, r), wanted in sorted(total.items()):
            most = _reach(cq, flavor, r, cqs)
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
    scaled = {
        g
        for g in v.nodes
        if any(
            r.type == ASG_TAG and (r.inputs.get("tag") or {}).get("key") == AUTOSCALE_TAG and v._group_of(r) == g
            for r in v.records
        )
    }
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


def _scaled_groups(v: StackView) -> set[str]:
    """The GPU groups the Cluster Autoscaler scales (their ASG carries the autoscale tag)."""
    return {
        v._group_of(r) or ""
        for r in v.records
        if r.type == ASG_TAG and (r.inputs.get("tag") or {}).get("key") == AUTOSCALE_TAG
    }


def topology_flavors_provisioned(v: StackView) -> list[Violation]:
    """Every flavor with a Topology names one the plan creates, and where its group is autoscaled
    every ClusterQueue runs the ProvisioningRequest check on it: Kueue places by Topology only on
    Ready nodes, and nothing else asks the autoscaler for them before admission."""
    out = []
    topologies = {o["metadata"]["name"] for _, o in v.of_kind("Topology")}
    checks = {o["metadata"]["name"] for _, o in v.of_kind("AdmissionCheck")}
    scaled = _scaled_groups(v)
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
        for _, cq in v.of_kind("ClusterQueue"):
            if name not in _quota(cq):
                continue
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
        if o["kind"] not in REPLICA_SPECS or QUEUE_LABEL not in (o["metadata"].get("labels") or {}):
            continue
        where = f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
        groups: dict[str, list[tuple[int, str | None]]] = {}
        for role, rs in (o["spec"].get(REPLICA_SPECS[o["kind"]]) or {}).items():
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


def team_namespaces_under_policy(v: StackView) -> list[Violation]:
    """Every team namespace is bound to a ValidatingAdmissionPolicy that denies."""
    policies = {o["metadata"]["name"] for _, o in v.of_kind("ValidatingAdmissionPolicy")}
    bindings = [
        o["spec"] for _, o in v.of_kind("ValidatingAdmissionPolicyBinding") if o["spec"].get("policyName") in policies
    ]
    out = []
    for _, ns in v.of_kind("Namespace"):
        labels = {**(ns["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": ns["metadata"]["name"]}
        if TEAM_LABEL not in labels:
            continue
        bound = [
            b
            for b in bindings
            if "Deny" in (b.get("validationActions") or [])
            and selects((b.get("matchResources") or {}).get("namespaceSelector") or {}, labels)
        ]
        if not bound:
            out.append(
                Violation(
                    "team_namespaces_under_policy",
                    f"team namespace {ns['metadata']['name']!r} is under no denying ValidatingAdmissionPolicy",
                )
            )
    return out


def _api_group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def _kind_source(v: StackView, o: Mapping[str, Any]) -> Any | None:
    """The record that defines the kind of custom object ``o``: its CRD, or the Helm release that ships it."""
    group = _api_group(o["apiVersion"])
    for r in v.records:
        if r.type == CRD and r.inputs["spec"]["group"] == group and r.inputs["spec"]["names"]["kind"] == o["kind"]:
            return r
    for release, groups in RELEASE_API_GROUPS.items():
        if group in groups:
            return v.release(release)
    return None


def _namespace_source(v: StackView, namespace: str) -> Any | None:
    for r, o in v.of_kind("Namespace"):
        if o["metadata"]["name"] == namespace:
            return r
    for r in v.records:
        if r.type == RELEASE and r.inputs.get("namespace") == namespace and r.inputs.get("createNamespace"):
            return r
    return None


def created_after_what_they_need(v: StackView) -> list[Violation]:
    """Custom objects after their kind's CRD, objects after their namespace, queued jobs after their
    LocalQueue and Kueue (whose webhook suspends them: a job created before it would start unqueued)."""
    out = []
    local = {(o["metadata"].get("namespace"), o["metadata"]["name"]): r for r, o in v.of_kind("LocalQueue")}
    kueue = v.release(KUEUE_RELEASE)
    for r, o in v.objects:
        meta = o.get("metadata") or {}
        what = f"{o['kind']} {meta.get('namespace', '') + '/' if meta.get('namespace') else ''}{meta.get('name')}"
        needs: list[tuple[str, Any | None]] = []
        if _api_group(o["apiVersion"]) not in BUILT_IN_GROUPS:
            needs.append(("the definition of its kind", _kind_source(v, o)))
        if meta.get("namespace"):
            source = _namespace_source(v, meta["namespace"])
            if source is not None:
                needs.append((f"namespace {meta['namespace']!r}", source))
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if queue is not None and o["kind"] in REPLICA_SPECS:
            needs.append((f"LocalQueue {queue!r}", local.get((meta.get("namespace"), queue))))
            needs.append(("Kueue", kueue))
        for name, source in needs:
            if source is None:
                out.append(Violation("created_after_what_they_need", f"{what}: the plan has no {name}"))
            elif source is not r and not v.waits_for(r, source):
                out.append(Violation("created_after_what_they_need", f"{what} is not created after {name}"))
    return out


def _flavor_tolerations(v: StackView) -> dict[str, list[Mapping[str, Any]]]:
    return {o["metadata"]["name"]: list(o["spec"].get("tolerations") or []) for _, o in v.of_kind("ResourceFlavor")}


def training_pods_avoid_burn_in(v: StackView) -> list[Violation]:
    """No training pod, and no Kueue flavor, tolerates a GPU group's startup (burn-in) taint: work lands
    on a node only once the burn-in check has taken the taint off."""
    out = []
    flavors = _flavor_tolerations(v)
    for name, tolerations in flavors.items():
        node = v.nodes.get(name)
        for t in node.startup_taints if node else ():
            if tolerates(tolerations, t):
                out.append(
                    Violation(
                        "training_pods_avoid_burn_in", f"ResourceFlavor {name!r} tolerates the startup taint {t['key']}"
                    )
                )
    for pod in v.pods():
        if pod.kind == "DaemonSet":
            continue
        tolerations = list(pod.spec.get("tolerations") or [])
        for node in v.nodes.values():
            extra = flavors.get(node.group, []) if pod.queued else []
            for t in node.startup_taints:
                if lands_on(pod.spec, node.labels) and tolerates(tolerations + extra, t):
                    out.append(
                        Violation(
                            "training_pods_avoid_burn_in",
                            f"{pod.owner}: tolerates the startup taint {t['key']} of group {node.group!r}",
                        )
                    )
    return out


def _addon_values(v: StackView, name: str) -> dict[str, Any] | None:
    r = next((r for r in v.records if r.type == ADDON and r.inputs.get("addonName") == name), None)
    if r is None:
        return None
    text = r.inputs.get("configurationValues")
    return json.loads(text) if isinstance(text, str) and text else {}


def _needed_daemons(v: StackView, node: Node) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """The node's DaemonSets whose tolerations the plan sets: the device plugins, the node monitoring
    agent's DCGM server, and every DaemonSet object of the plan that lands on the node. (The VPC CNI,
    kube-proxy, Pod Identity agent, CSI node plugins and CloudWatch agents run with their add-ons'
    defaults, which tolerate every taint: components/storage.py and components/monitoring.py say where.)"""
    out: list[tuple[str, list[Mapping[str, Any]]]] = []
    for release in (NVIDIA_RELEASE, *((EFA_RELEASE,) if EFA_PRESENT in node.labels.items() else ())):
        r = v.release(release)
        if r is not None:
            out.append((f"Helm release {release}", list((r.inputs.get("values") or {}).get("tolerations") or [])))
    agent = _addon_values(v, NODE_MONITORING_AGENT)
    if agent is not None:
        out.append(
            (f"{NODE_MONITORING_AGENT} dcgm-server", list((agent.get("dcgmAgent") or {}).get("tolerations") or []))
        )
    for pod in v.pods():
        if pod.kind == "DaemonSet" and lands_on(pod.spec, node.labels):
            out.append((pod.owner, list(pod.spec.get("tolerations") or [])))
    return out


def gpu_daemonsets_tolerate_burn_in(v: StackView) -> list[Violation]:
    """On a GPU node that joins with a startup taint, the burn-in check runs and so does every
    DaemonSet the node needs (device plugins, the DCGM host engine the node monitoring agent reads),
    each tolerating that taint; else the node never passes, or the agent reports it broken."""
    out = []
    for node in v.nodes.values():
        if not node.startup_taints:
            continue
        daemons = _needed_daemons(v, node)
        if not any(owner.endswith(f"/{BURN_IN_NAME}") for owner, _ in daemons):
            out.append(
                Violation(
                    "gpu_daemonsets_tolerate_burn_in", f"group {node.group!r}: no burn-in DaemonSet runs on its nodes"
                )
            )
        for owner, tolerations in daemons:
            for t in node.startup_taints:
                if not tolerates(tolerations, t):
                    out.append(
                        Violation(
                            "gpu_daemonsets_tolerate_burn_in",
                            f"{owner}: does not tolerate the startup taint {t['key']} of group {node.group!r}",
                        )
                    )
    return out


RULES: tuple[Callable[[StackView], list[Violation]], ...] = (
    quota_within_supply,
    jobs_admissible,
    pods_fit_their_nodes,
    admission_checks_have_their_api,
    topology_flavors_provisioned,
    placements_within_topology,
    team_namespaces_under_policy,
    created_after_what_they_need,
    training_pods_avoid_burn_in,
    gpu_daemonsets_tolerate_burn_in,
)


def check(plan: Any, cfg: Any) -> list[Violation]:
    """Every rule on a plan (``infra.offline.PlanResult``) of the validated config ``cfg``."""
    v = view(plan, cfg)
    return [violation for rule in RULES for violation in rule(v)]
