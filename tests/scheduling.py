"""Scheduling on paper, shared by the tests: Kubernetes toleration matching, whether a pod can run on
a node (selector, required node affinity, taints), and the EKS node groups of a plan with their
taints in Kubernetes form."""

from __future__ import annotations

from typing import Any

from infra.invariants.view import EFFECTS, required_affinity_matches, tolerates

MNG = "eks:index:ManagedNodeGroup"  # pulumi-eks' node group (the system group)
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"  # EKS's node group (GPU groups)


def schedulable(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether a DaemonSet pod can run on a node: nodeSelector, required node affinity, and every
    NoSchedule/NoExecute taint tolerated (Kubernetes' matching rules, as infra/invariants applies them)."""
    if any(node["labels"].get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    if not required_affinity_matches(pod, node["labels"]):
        return False
    return all(
        tolerates(pod.get("tolerations") or [], t) for t in node["taints"] if t["effect"] in ("NoSchedule", "NoExecute")
    )


def node_groups(plan) -> list[Any]:
    """Every EKS node group record: pulumi-eks' ManagedNodeGroup (system) and aws.eks.NodeGroup (GPU)."""
    return [r for r in plan.records if r.type in (MNG, NODE_GROUP)]


def kubernetes_taints(record) -> list[dict[str, str]]:
    """A node group record's taints as its nodes carry them."""
    return [
        {"key": t["key"], "value": t.get("value") or "", "effect": EFFECTS[t["effect"]]}
        for t in record.inputs.get("taints") or []
    ]
