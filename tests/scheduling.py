"""Scheduling on paper, shared by the tests: Kubernetes toleration matching, whether a pod can run on
a node (selector, required node affinity, taints), and the EKS node groups of a plan with their
taints in Kubernetes form."""

from __future__ import annotations

from typing import Any

from components.node_group import EKS_TAINT_EFFECT

MNG = "eks:index:ManagedNodeGroup"  # pulumi-eks' node group (the system group)
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"  # EKS's node group (GPU groups)
# EKS taint effects (NO_SCHEDULE) -> Kubernetes ones (NoSchedule).
KUBERNETES_EFFECT = {eks: k8s for k8s, eks in EKS_TAINT_EFFECT.items()}
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint`` (Kubernetes' matching rules)."""
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


def _expression(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, vals = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return labels.get(key) in vals
    if op == "NotIn":
        return labels.get(key) not in vals
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise AssertionError(f"operator {op} not handled")


def schedulable(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether a DaemonSet pod can run on a node: nodeSelector, required node affinity, and every
    NoSchedule/NoExecute taint tolerated."""
    if any(node["labels"].get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(all(_expression(e, node["labels"]) for e in term.get("matchExpressions") or []) for term in terms):
        return False
    return all(tolerates(pod.get("tolerations") or [], t) for t in node["taints"] if t["effect"] in ("NoSchedule", "NoExecute"))


def node_groups(plan) -> list[Any]:
    """Every EKS node group record: pulumi-eks' ManagedNodeGroup (system) and aws.eks.NodeGroup (GPU)."""
    return [r for r in plan.records if r.type in (MNG, NODE_GROUP)]


def kubernetes_taints(record) -> list[dict[str, str]]:
    """A node group record's taints as its nodes carry them."""
    return [{"key": t["key"], "value": t.get("value") or "", "effect": KUBERNETES_EFFECT[t["effect"]]} for t in record.inputs.get("taints") or []]
