"""The fabric check's side of a job spec (docs/performance.md): ``fabric: enforce | warn | off`` and what the pods
need to report (their identity through the downward API, a service account allowed to record Events).

The check itself runs in the pods (jobs/scripts/fabric_check.py, under the progress guard of each node's first
local rank). Default: ``enforce`` for a job on EFA (the group has EFA and the job does not set ``efa: false``)
with more than one node, where NCCL crosses the network; ``off`` otherwise (one node: NCCL stays on NVLink and
shared memory, EFA carries nothing).
"""

from __future__ import annotations

from typing import Any, Literal

from jobs.base import Manifest

FabricMode = Literal["enforce", "warn", "off"]
FABRIC_MODES: tuple[str, ...] = ("enforce", "warn", "off")
# The pod's own identity, for the Events and signal lines of its checks (Kubernetes downward API).
IDENTITY_ENV = (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"), ("NODE_NAME", "spec.nodeName"))
RBAC_API = "rbac.authorization.k8s.io/v1"


def default_mode(efa_interfaces: int, workers: int) -> str:
    return "enforce" if efa_interfaces and workers > 1 else "off"


def identity_env() -> list[dict[str, Any]]:
    return [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": f}}} for n, f in IDENTITY_ENV]


def account_name(job: str) -> str:
    return f"{job}-guard"


def cluster_name(job: str, namespace: str) -> str:
    """The name of the guard's cluster-wide role and binding (cluster-scoped: the namespace in it)."""
    return f"gputraining-{namespace}-{job}-guard"


def rbac(job: str, namespace: str, labels: dict[str, str], nodes: bool = False) -> list[Manifest]:
    """The guard's service account and what it may do: record Events in the job's namespace; with ``nodes`` (the
    slow-node check) also delete the job's pods there and read and taint nodes (a ClusterRole: nodes are not
    namespaced; Kubernetes RBAC cannot narrow it to the job's nodes, see docs/performance.md)."""
    name = account_name(job)
    meta = {"name": name, "namespace": namespace, "labels": dict(labels)}
    rules: list[dict[str, Any]] = [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    if nodes:
        rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]})
    subjects = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    out: list[Manifest] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": RBAC_API, "kind": "Role", "metadata": dict(meta), "rules": rules},
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subjects,
        },
    ]
    if nodes:
        wide = {"name": cluster_name(job, namespace), "labels": dict(labels)}
        out += [
            {
                "apiVersion": RBAC_API,
                "kind": "ClusterRole",
                "metadata": dict(wide),
                "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}],
            },
            {
                "apiVersion": RBAC_API,
                "kind": "ClusterRoleBinding",
                "metadata": dict(wide),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": wide["name"]},
                "subjects": subjects,
            },
        ]
    return out
