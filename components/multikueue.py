"""The Kubernetes objects of a fleet (Kueue MultiKueue, v0.19.2), as plain manifests:

- on the manager: one MultiKueueCluster per worker (its kubeconfig in a Secret of Kueue's namespace, the
  only ``locationType`` a cluster needs: apis/kueue/v1beta2/multikueue_types.go), the MultiKueueConfig
  listing them, the AdmissionCheck with controllerName kueue.x-k8s.io/multikueue, the fleet's
  ResourceFlavors (one per GPU instance type, no node labels: the manager runs no GPU pods) and the
  ClusterQueues with that check, whose quotas are the workers' summed per flavor, and their LocalQueues;
- on a worker: the ServiceAccount MultiKueue acts as, a ClusterRole with exactly the calls of
  facts/multikueue.py (WORKER_CALLS), its binding, and the token Secrets the manager's kubeconfig carries.

The credential: a service-account token Secret (type kubernetes.io/service-account-token; the token
controller fills it in and it lives until the Secret is deleted:
https://kubernetes.io/docs/concepts/configuration/secret/#serviceaccount-token-secrets). Two generations
are kept, the current and the one before, so bumping the generation (rotation) adds the new token while
the manager still uses the old one; the next `pulumi up` of the worker deletes the one before. The
worker stack exports the kubeconfig as a secret output; only the manager stack reads it (a stack
reference of a stack you may read) and writes it into a Secret of the kueue-system namespace, which only
Kueue's controller and cluster admins read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from facts.kube import KUEUE_NAMESPACE, PART_OF
from facts.multikueue import CONTROLLER_NAME, WORKER_CALLS

KUEUE_API = "kueue.x-k8s.io/v1beta2"
ADMISSION_CHECK = "multikueue"
CONFIG_NAME = "fleet"
WORKER_ACCOUNT = "multikueue"
WORKER_ROLE = "gpu-training-multikueue"
TOKEN_TYPE = "kubernetes.io/service-account-token"
_LABELS = {"app.kubernetes.io/part-of": PART_OF}


def _meta(name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(_LABELS), **extra}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def kubeconfig_secret(cluster: str) -> str:
    """The Secret (in Kueue's namespace, on the manager) holding worker ``cluster``'s kubeconfig."""
    return f"multikueue-{cluster}"


def token_secret(generation: int) -> str:
    return f"{WORKER_ACCOUNT}-token-{generation}"


# ---------------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------------


def worker_rules() -> list[dict[str, Any]]:
    """The ClusterRole's rules: one per (apiGroup, resource), the verbs of WORKER_CALLS, sorted."""
    verbs: dict[tuple[str, str], set[str]] = {}
    for c in WORKER_CALLS:
        verbs.setdefault((c.api_group, c.resource), set()).add(c.verb)
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": sorted(v)}
        for (group, resource), v in sorted(verbs.items())
    ]


def worker_objects(generation: int) -> list[dict[str, Any]]:
    """What a worker gives the manager: the account, its role and binding, and the tokens of this
    generation and the one before (rotation without a moment with no valid token)."""
    ns = KUEUE_NAMESPACE
    tokens = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": TOKEN_TYPE,
            "metadata": _meta(token_secret(g), ns, annotations={"kubernetes.io/service-account.name": WORKER_ACCOUNT}),
        }
        for g in sorted({max(1, generation - 1), generation})
    ]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(WORKER_ACCOUNT, ns)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(WORKER_ROLE),
            "rules": worker_rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(WORKER_ROLE),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WORKER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": WORKER_ACCOUNT, "namespace": ns}],
        },
        *tokens,
    ]


# ---------------------------------------------------------------------------------------------
# Manager
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManagerQueue:
    """A ClusterQueue of the manager: its namespaces and, per fleet flavor, the summed quota of each
    resource (in the quantities Kueue takes)."""

    name: str
    namespaces: tuple[str, ...]
    quotas: Mapping[str, Mapping[str, str]]  # flavor -> resource -> quantity


@dataclass(frozen=True)
class ManagerArgs:
    clusters: tuple[str, ...]  # the workers' MultiKueueCluster names, in the config's order
    flavors: tuple[str, ...]  # the fleet's ResourceFlavors: one per GPU instance type of the workers
    covered_resources: tuple[str, ...]  # what the ClusterQueues count, in order
    cluster_queues: tuple[ManagerQueue, ...]  # the workers' ClusterQueues, quotas summed
    local_queues: tuple[tuple[str, str, str], ...]  # (namespace, name, cluster queue)
    priorities: Mapping[str, int]  # the WorkloadPriorityClasses every stack has: name -> value


def _kueue(
    kind: str, name: str, spec: dict[str, Any] | None, namespace: str | None = None, **top: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": KUEUE_API, "kind": kind, "metadata": _meta(name, namespace), **top}
    if spec is not None:
        out["spec"] = spec
    return out


def _in(names: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(names)}]}


def manager_objects(args: ManagerArgs) -> list[dict[str, Any]]:
    """The manager's Kueue objects, in the order they can be created."""
    out = [
        _kueue("WorkloadPriorityClass", name, None, value=value, description=f"gpu-training priority {name!r}")
        for name, value in sorted(args.priorities.items(), key=lambda kv: kv[1])
    ]
    out += [
        _kueue(
            "MultiKueueCluster",
            c,
            {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": kubeconfig_secret(c)}}},
        )
        for c in args.clusters
    ]
    out.append(_kueue("MultiKueueConfig", CONFIG_NAME, {"clusters": list(args.clusters)}))
    out.append(
        _kueue(
            "AdmissionCheck",
            ADMISSION_CHECK,
            {
                "controllerName": CONTROLLER_NAME,
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": CONFIG_NAME},
            },
        )
    )
    out += [_kueue("ResourceFlavor", f, {}) for f in args.flavors]
    for cq in args.cluster_queues:
        flavors = [
            {"name": f, "resources": [{"name": r, "nominalQuota": q[r]} for r in args.covered_resources]}
            for f, q in cq.quotas.items()
        ]
        spec = {
            "namespaceSelector": _in(cq.namespaces),
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": list(args.covered_resources), "flavors": flavors}],
            "admissionChecksStrategy": {"admissionChecks": [{"name": ADMISSION_CHECK}]},
        }
        out.append(_kueue("ClusterQueue", cq.name, spec))
    out += [_kueue("LocalQueue", name, {"clusterQueue": cq}, namespace=ns) for ns, name, cq in args.local_queues]
    return out
