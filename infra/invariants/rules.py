"""The whole-stack rules, one function each (see the package's docstring): here the team namespaces', the
order of creation's and burn-in's, and ``RULES``, all of them (the queues' are in ``queue_rules``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from components.burn_in import NAME as BURN_IN_NAME
from components.device_plugins import EFA_RELEASE, NVIDIA_RELEASE
from facts.kube import EFA_PRESENT_LABEL, TEAM_LABEL
from infra.invariants.queue_rules import (
    admission_checks_have_their_api,
    jobs_admissible,
    placements_within_topology,
    pods_fit_their_nodes,
    quota_within_supply,
    topology_flavors_provisioned,
)
from infra.invariants.view import (
    ADDON,
    BUILT_IN_GROUPS,
    KUEUE_RELEASE,
    RELEASE_API_GROUPS,
    Node,
    PodTemplate,
    StackView,
    Violation,
    lands_on,
    selects,
    tolerates,
    view,
)
from jobs.pod import QUEUE_LABEL

NODE_MONITORING_AGENT = "eks-node-monitoring-agent"
EFA_PRESENT = next(iter(EFA_PRESENT_LABEL.items()))

# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------


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
    crd = v.crds.get((group, o["kind"]))
    if crd is not None:
        return crd
    for release, groups in RELEASE_API_GROUPS.items():
        if group in groups:
            return v.release(release)
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
            source = v.namespaces.get(meta["namespace"])
            if source is not None:
                needs.append((f"namespace {meta['namespace']!r}", source))
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if queue is not None and v.is_queued_job(o):
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
        for node in v.nodes_for(pod.spec):
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


def _needed_daemons(
    v: StackView, node: Node, agent: dict[str, Any] | None, daemonsets: list[PodTemplate]
) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """The node's DaemonSets whose tolerations the plan sets: the device plugins, the node monitoring
    agent's DCGM server (``agent``: the add-on's values), and every DaemonSet object of the plan that lands on
    the node (``daemonsets``: those that may, ``_daemonsets_by_group``). (The VPC CNI, kube-proxy, Pod Identity
    agent, CSI node plugins and CloudWatch agents run with their add-ons' defaults, which tolerate every taint:
    components/storage.py and components/monitoring.py say where.)"""
    out: list[tuple[str, list[Mapping[str, Any]]]] = []
    for release in (NVIDIA_RELEASE, *((EFA_RELEASE,) if EFA_PRESENT in node.labels.items() else ())):
        r = v.release(release)
        if r is not None:
            out.append((f"Helm release {release}", list((r.inputs.get("values") or {}).get("tolerations") or [])))
    if agent is not None:
        out.append(
            (f"{NODE_MONITORING_AGENT} dcgm-server", list((agent.get("dcgmAgent") or {}).get("tolerations") or []))
        )
    for pod in daemonsets:
        if lands_on(pod.spec, node.labels):
            out.append((pod.owner, list(pod.spec.get("tolerations") or [])))
    return out


def _daemonsets_by_group(v: StackView) -> dict[str, list[PodTemplate]]:
    """Node group -> the DaemonSet pods that may land on it (``StackView.nodes_for``), in the plan's order."""
    out: dict[str, list[PodTemplate]] = {}
    for pod in v.daemonset_pods:
        for node in v.nodes_for(pod.spec):
            out.setdefault(node.group, []).append(pod)
    return out


def gpu_daemonsets_tolerate_burn_in(v: StackView) -> list[Violation]:
    """On a GPU node that joins with a startup taint, the burn-in check runs and so does every
    DaemonSet the node needs (device plugins, the DCGM host engine the node monitoring agent reads),
    each tolerating that taint; else the node never passes, or the agent reports it broken."""
    out = []
    agent = _addon_values(v, NODE_MONITORING_AGENT)
    daemonsets = _daemonsets_by_group(v)
    for node in v.nodes.values():
        if not node.startup_taints:
            continue
        daemons = _needed_daemons(v, node, agent, daemonsets.get(node.group, []))
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
