"""Training operators, each installed from a vendored manifest decoded into typed objects, so
every object shows in the plan and `pulumi up` needs neither git nor the network.

``install`` registers one operator of facts/operators.py as its component (type
``gputraining:components:<Operator.component>``), after checking the manifest's sha256 against its
pin in facts/versions.py:

- the MPI operator: Kubeflow MPI operator (kubeflow.org/v2beta1 MPIJob) from its release's install
  manifest;
- the training operator (``TrainingOperator``, for the identities its objects had before): Kubeflow
  training operator v1 (PyTorchJob, PaddleJob) from the manifest rendered from our overlay of its
  release's standalone overlay (manifests/training-operator/kustomization.yaml), which runs only the
  schemes we use and drops its own v1 MPIJob CRD: both operators define ``mpijobs.kubeflow.org``,
  and installing both unchanged makes them fight over it.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import pulumi
import pulumi_kubernetes as k8s
import yaml

from facts.operators import Operator
from jobs import trainjob_runtimes
from jobs.targets import JobTarget


class ManifestChecksumError(Exception):
    pass


# libyaml's loader when PyYAML has it: the MPI operator's manifest is 675 KB of CRD schema.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Parsed manifests by the sha256 of their bytes, pickled: the file is read and checked on every
# call, parsed once per process (tests plan many stacks), and every caller gets objects of its own.
_parsed: dict[str, bytes] = {}


class SnapshotStore(Protocol):
    """Where parsed manifests are kept beyond the process, by the sha256 of the manifest."""

    def get(self, digest: str) -> bytes | None: ...

    def put(self, digest: str, snapshot: bytes) -> None: ...


# Set by the offline plan command while it plans (infra/plan_cache.py: the files of .cache/manifests/),
# so that a plan does not parse the same manifest again; None (`pulumi up`): parsed in each process.
snapshot_store: SnapshotStore | None = None


def load_manifest(path: Path, sha256: str) -> list[dict[str, Any]]:
    """The documents of a vendored manifest, after checking it is the pinned file."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ManifestChecksumError(
            f"{path} has sha256 {digest}, expected {sha256}: it is not the pinned file (manifests/vendor/SOURCES.md)"
        )
    snapshot = _parsed.get(digest)
    if snapshot is None and snapshot_store is not None:
        snapshot = snapshot_store.get(digest)
        if snapshot is not None:
            try:
                docs = pickle.loads(snapshot)
            except Exception:  # noqa: BLE001 - not a snapshot: parse the manifest
                docs = None
            if isinstance(docs, list) and all(isinstance(d, dict) for d in docs):
                _parsed[digest] = snapshot
                return docs
            snapshot = None
    if snapshot is None:
        snapshot = _parsed[digest] = pickle.dumps(_parse(data), protocol=pickle.HIGHEST_PROTOCOL)
        if snapshot_store is not None:
            snapshot_store.put(digest, snapshot)
    return pickle.loads(snapshot)


def _parse(data: bytes) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(data, Loader=_Loader) if doc]


@dataclass
class OperatorArgs:
    # what to install (facts/operators.py): its pinned manifest (any other file is refused), its release as the output
    operator: Operator
    project_root: Path = Path(".")  # where the manifest path is relative to (the program's working directory)
    # the GPU node groups as jobs see them (Trainer makes its runtimes of them: jobs/trainjob.py)
    targets: Mapping[str, JobTarget] = field(default_factory=dict)


# The kinds an operator's install manifest may hold, as typed resources. Anything else is refused,
# so a bumped manifest with a new kind is noticed instead of silently dropped.
KIND_CLASSES = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): k8s.apiextensions.v1.CustomResourceDefinition,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
    ): k8s.admissionregistration.v1.ValidatingWebhookConfiguration,
    (
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
    ): k8s.admissionregistration.v1.MutatingWebhookConfiguration,
}
# Registered first, and waited for by everything else: the namespaces and the CRDs.
ROOT_KINDS = ("Namespace", "CustomResourceDefinition")
# Then what workloads need besides (RBAC and the Secrets they mount: the training operator keeps its
# webhook certificate in one), after the namespaces they live in.
FOUNDATION_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Secret", "ConfigMap")
# Registered after the foundation, and waited for by the workloads. A webhook configuration must
# exist before the operator that serves it starts: the training operator writes its CA into the
# configuration and reports ready only once it has, so its Deployment being ready (which `pulumi up`
# waits for) means the webhook answers. Registered after the Deployment instead, the webhook would
# exist, with failurePolicy Fail and no CA yet, while the jobs waiting for the operator are created.
FRONT_KINDS = ("Service", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
_TOP_LEVEL = {
    "metadata": "metadata",
    "spec": "spec",
    "rules": "rules",
    "aggregationRule": "aggregation_rule",
    "roleRef": "role_ref",
    "subjects": "subjects",
    "data": "data",
    "type": "type",
    "webhooks": "webhooks",
}


def _stage(kind: str) -> tuple[int, int]:
    """(stage, place within it): roots, foundation, front, then workloads (each in manifest order)."""
    for stage, kinds in enumerate((ROOT_KINDS, FOUNDATION_KINDS, FRONT_KINDS)):
        if kind in kinds:
            return (stage, kinds.index(kind))
    return (3, 0)


def register_objects(
    name: str,
    objects: list[dict[str, Any]],
    parent: pulumi.Resource,
    aliases: Callable[[dict[str, Any]], Sequence[pulumi.Alias]] | None = None,
) -> list[pulumi.CustomResource]:
    """Register manifest objects as typed resources, named ``<name>-<kind>-<object name>``, each as
    its document says (but an empty Secret ``data``): the namespaces and CRDs first, then the rest of
    the foundation, the front kinds, then the workloads. Each object waits for every object of the stages
    before its own.
    ``aliases``, when given, names the earlier identities of each object's resource."""
    ordered = sorted(objects, key=lambda o: _stage(o["kind"]))
    earlier: list[pulumi.Resource] = []  # every object of the stages before the current one
    current: list[pulumi.Resource] = []
    stage = 0
    created = []
    for obj in ordered:
        cls = KIND_CLASSES.get((obj["apiVersion"], obj["kind"]))
        if cls is None:
            raise ValueError(
                f"{name}: the manifest holds a {obj['apiVersion']} {obj['kind']}, which this component does not know "
                "how to install"
            )
        unknown = set(obj) - {"apiVersion", "kind"} - set(_TOP_LEVEL)
        if unknown:
            raise ValueError(
                f"{name}: {obj['kind']} {obj['metadata']['name']} has fields {sorted(unknown)} this component does not "
                "pass on"
            )
        kwargs = {_TOP_LEVEL[k]: v for k, v in obj.items() if k in _TOP_LEVEL}
        if obj["kind"] == "Secret" and not any((kwargs.get("data") or {}).values()):
            # The SDK makes a Secret's data a secret output, which the plan can only show as
            # "[secret]"; an empty map holds nothing to hide, and the API server stores the same
            # Secret without it (the training operator fills it with its webhook certificate; Trainer's and
            # JobSet's charts list the certificate's keys with empty values, which their cert controllers fill:
            # left out too, so that no update of the Secret ever writes them back empty).
            kwargs.pop("data", None)
        obj_stage = _stage(obj["kind"])[0]
        if obj_stage != stage:
            earlier.extend(current)
            current, stage = [], obj_stage
        res = cls(
            f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}",
            **kwargs,
            opts=pulumi.ResourceOptions(
                parent=parent, depends_on=list(earlier), aliases=list(aliases(obj)) if aliases else None
            ),
        )
        current.append(res)
        created.append(res)
    return created


class VendoredOperator(pulumi.ComponentResource):
    """An operator installed from a vendored manifest: checked against its pinned sha256, every
    object registered as a typed child resource (``register_objects``). Its type is the operator's
    component type."""

    # The operator (``Operator.component``) a subclass is for: one whose objects had other identities.
    COMPONENT: ClassVar[str] = ""

    def __init__(self, name: str, args: OperatorArgs, opts: pulumi.ResourceOptions | None = None):
        op = args.operator
        super().__init__(f"gputraining:components:{op.component}", name, None, opts)
        objects = load_manifest(args.project_root / op.manifest.file, op.manifest.sha256)
        self.objects = register_objects(name, objects, self, self._object_aliases(name))
        # Its workloads (the last stage): each waits for every other object (CRDs, RBAC, webhooks), and
        # `pulumi up` waits for them to be ready, so what needs the operator running waits for these.
        last = max(_stage(o["kind"])[0] for o in objects)
        staged = sorted(objects, key=lambda o: _stage(o["kind"]))  # register_objects' order (a stable sort)
        self.ready: list[pulumi.Resource] = [
            res for obj, res in zip(staged, self.objects, strict=True) if _stage(obj["kind"])[0] == last
        ]
        self.register_outputs({"version": op.version})

    def _object_aliases(self, name: str) -> Callable[[dict[str, Any]], Sequence[pulumi.Alias]] | None:
        """The earlier identities of the objects' resources, if they had any."""
        return None


def kustomize_directory_child_name(directory: str, obj: dict[str, Any]) -> str:
    """The name pulumi-kubernetes' ``kustomize.v2.Directory`` gives the resource of an object it
    installs: ``<directory>:<namespace>/<name>``, or ``<directory>:<name>`` for a cluster-scoped one."""
    meta = obj["metadata"]
    return f"{directory}:{meta['namespace']}/{meta['name']}" if meta.get("namespace") else f"{directory}:{meta['name']}"


class TrainingOperator(VendoredOperator):
    COMPONENT = "TrainingOperator"

    def _object_aliases(self, name: str) -> Callable[[dict[str, Any]], Sequence[pulumi.Alias]] | None:
        # Stacks made before the manifest was vendored hold these objects as the children of a
        # kustomize.v2.Directory "<name>-kustomize" under this component. The aliases make each
        # resource here the same resource as that child, so `pulumi up` on such a stack keeps the
        # objects and updates them in place. Without them `pulumi up` would create these resources
        # anew, which the provider refuses for objects that exist (AlreadyExists); with its
        # upsertExistingObjects on, it would take them over and then delete them with the
        # Directory's resources: CRDs (and every job of their kinds), namespace, operator.
        directory = f"{name}-kustomize"
        directory_urn = pulumi.create_urn(directory, "kubernetes:kustomize/v2:Directory", parent=self)
        return lambda obj: [pulumi.Alias(name=kustomize_directory_child_name(directory, obj), parent=directory_urn)]


class Trainer(VendoredOperator):
    """Kubeflow Trainer with JobSet, and the stack's ClusterTrainingRuntimes: one per GPU group and framework
    (jobs/trainjob_runtimes.py), created once Trainer serves them (its webhook validates them); a TrainJob waits for
    them too (``ready``)."""

    COMPONENT = "Trainer"

    def __init__(self, name: str, args: OperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, args, opts)
        after = list(self.ready)
        for runtime in trainjob_runtimes.runtimes(args.targets):
            self.ready.append(
                k8s.apiextensions.CustomResource(
                    f"{name}-runtime-{runtime['metadata']['name']}",
                    api_version=runtime["apiVersion"],
                    kind=runtime["kind"],
                    metadata=runtime["metadata"],
                    spec=runtime["spec"],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=after),
                )
            )


def install(
    operator: Operator,
    project_root: Path,
    opts: pulumi.ResourceOptions | None = None,
    targets: Mapping[str, JobTarget] | None = None,
) -> VendoredOperator:
    """The component of ``operator``, named ``operator.resource``: its own class where it has one."""
    cls = next((c for c in VendoredOperator.__subclasses__() if operator.component == c.COMPONENT), VendoredOperator)
    return cls(operator.resource, OperatorArgs(operator, project_root, dict(targets or {})), opts)
