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

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.queues import KueueObject
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


# ---------------------------------------------------------------------------------------------
# Registered at `pulumi up`
# ---------------------------------------------------------------------------------------------

KUBECONFIG_KEY = "kubeconfig"  # the Secret's key Kueue reads (apis/kueue/v1beta2/multikueue_types.go)
QUEUE_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue")  # the manager's objects summed from the workers


def manager_kubeconfig(cluster: str, server: str, certificate_authority: str, token: str) -> str:
    """The kubeconfig the manager's MultiKueue uses for worker ``cluster``, as JSON (a kubeconfig clientcmd
    reads as YAML). Kueue v0.19.2 refuses an exec plugin, an auth provider, basic auth, a token file, a
    CA file path and skipping TLS verification (multikueuecluster.go validateKubeconfig and
    validateRestConfig): the server, the CA as data and the token, nothing else."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": cluster, "cluster": {"server": server, "certificate-authority-data": certificate_authority}}
            ],
            "users": [{"name": WORKER_ACCOUNT, "user": {"token": token}}],
            "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": WORKER_ACCOUNT}}],
            "current-context": cluster,
        },
        sort_keys=True,
    )


def _typed(name: str, obj: Mapping[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """A worker object as the Kubernetes SDK's own resource of its kind."""
    meta = obj["metadata"]
    kind = obj["kind"]
    if kind == "ServiceAccount":
        return k8s.core.v1.ServiceAccount(name, metadata=meta, opts=opts)
    if kind == "ClusterRole":
        return k8s.rbac.v1.ClusterRole(name, metadata=meta, rules=obj["rules"], opts=opts)
    if kind == "ClusterRoleBinding":
        return k8s.rbac.v1.ClusterRoleBinding(
            name, metadata=meta, role_ref=obj["roleRef"], subjects=obj["subjects"], opts=opts
        )
    return k8s.core.v1.Secret(name, metadata=meta, type=obj["type"], opts=opts)


@dataclass
class FleetWorkerArgs:
    """Inputs of ``FleetWorker``."""

    cluster: str  # this worker's MultiKueueCluster name on the manager (the kubeconfig's cluster and context)
    generation: int  # the token generation the manager's kubeconfig carries; the one before is kept too
    server: pulumi.Input[str]  # the worker's Kubernetes API endpoint (the EKS cluster's)
    certificate_authority: pulumi.Input[str]  # the cluster's CA certificate, base64 (certificate-authority-data)
    depends_on: list[pulumi.Resource] = field(default_factory=list)  # Kueue (its namespace) before the account


class FleetWorker(pulumi.ComponentResource):
    """What a worker gives its fleet's manager (``worker_objects``), and ``kubeconfig``: the manager's
    kubeconfig for it, a secret Output carrying this generation's token.

    The token is read from the token Secret's ``data``: pulumi-kubernetes waits on create until the token
    controller has filled in a ``kubernetes.io/service-account-token`` Secret (pulumi/pulumi-kubernetes
    pull request #2048, "Add awaiter for service-account-token secret")."""

    def __init__(self, name: str, args: FleetWorkerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:FleetWorker", name, None, opts)
        made: dict[str, pulumi.Resource] = {}
        for obj in worker_objects(args.generation):
            after = [made[WORKER_ACCOUNT]] if obj["kind"] in ("Secret", "ClusterRoleBinding") else []
            child = pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *after])
            made[obj["metadata"]["name"]] = _typed(
                f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}", obj, child
            )
        token = made[token_secret(args.generation)]
        assert isinstance(token, k8s.core.v1.Secret)
        self.token_secret = token_secret(args.generation)
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(args.server, args.certificate_authority, token.data).apply(
                lambda a: manager_kubeconfig(args.cluster, a[0], a[1], base64.b64decode(a[2]["token"]).decode())
            )
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, "tokenSecret": self.token_secret})


@dataclass
class FleetManagerArgs:
    """Inputs of ``FleetManager``."""

    clusters: Sequence[str]  # the workers' MultiKueueCluster names, in the config's order
    kubeconfigs: Mapping[str, pulumi.Output[str]]  # cluster -> the kubeconfig its worker stack exports (a secret)
    namespace: str  # Kueue's namespace, where its MultiKueue reads the kubeconfig Secrets
    namespaces: Mapping[str, pulumi.Resource]  # the manager's namespaces LocalQueues may be in, by name
    depends_on: list[pulumi.Resource] = field(default_factory=list)  # Kueue's release (its CRDs and webhooks)


class FleetManager(pulumi.ComponentResource):
    """The manager's MultiKueue objects: a kubeconfig Secret and a MultiKueueCluster per worker, the
    MultiKueueConfig and the AdmissionCheck; ``add_queues`` adds the fleet's ResourceFlavors, ClusterQueues
    (with the check) and LocalQueues once the workers' supply is known (their stack outputs)."""

    def __init__(self, name: str, args: FleetManagerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:FleetManager", name, None, opts)
        self._name, self._args = name, args
        after_kueue = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        secrets = {
            c: k8s.core.v1.Secret(
                f"{name}-secret-{c}",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=kubeconfig_secret(c), namespace=args.namespace, labels=dict(_LABELS)
                ),
                type="Opaque",
                string_data={KUBECONFIG_KEY: args.kubeconfigs[c]},  # secret: the worker exports it so
                opts=after_kueue,
            )
            for c in args.clusters
        }
        static = ManagerArgs(tuple(args.clusters), (), (), (), (), {})
        self.objects: list[pulumi.Resource] = []
        for obj in manager_objects(static):
            meta = obj["metadata"]
            needs = [secrets[meta["name"]]] if obj["kind"] == "MultiKueueCluster" else []
            self.objects.append(
                KueueObject(
                    f"{name}-{obj['kind'].lower()}-{meta['name']}",
                    obj,
                    pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *needs, *self.objects]),
                )
            )
        self.register_outputs(
            {"clusters": list(args.clusters), "kubeconfigSecrets": [s.metadata.name for s in secrets.values()]}
        )

    def add_queues(self, queues: ManagerArgs) -> dict[tuple[str, str, str], pulumi.Resource]:
        """Register the fleet's flavors, ClusterQueues and LocalQueues (call once, with the workers' supply);
        returns them by (kind, namespace or "", name), as jobs name them."""
        made: dict[tuple[str, str, str], pulumi.Resource] = {}
        for obj in manager_objects(queues):
            if obj["kind"] not in QUEUE_KINDS:
                continue
            meta = obj["metadata"]
            ns = meta.get("namespace")
            if ns is not None and ns not in self._args.namespaces:
                raise ValueError(f"LocalQueue {meta['name']!r} is in namespace {ns!r}, which the manager has not")
            needs = [self._args.namespaces[ns]] if ns is not None else []
            opts = pulumi.ResourceOptions(
                parent=self, depends_on=[*self._args.depends_on, *self.objects, *needs, *made.values()]
            )
            made[(obj["kind"], ns or "", meta["name"])] = KueueObject(
                f"{self._name}-{obj['kind'].lower()}-{(ns + '-') if ns else ''}{meta['name']}", obj, opts
            )
        return made
