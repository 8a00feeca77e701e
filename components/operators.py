"""Training operators.

- ``MpiOperator``: Kubeflow MPI operator (kubeflow.org/v2beta1 MPIJob) from its release's install
  manifest, decoded into typed objects so every object shows in the plan.
- ``TrainingOperator``: Kubeflow training operator v1 (PyTorchJob, PaddleJob) from a kustomize
  overlay that runs only the schemes we use and drops its own v1 MPIJob CRD: both operators define
  ``mpijobs.kubeflow.org``, and installing both unchanged makes them fight over it.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml


class ManifestChecksumError(Exception):
    pass


# libyaml's loader when PyYAML has it: the MPI operator's manifest is 675 KB of CRD schema.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Parsed manifests by the sha256 of their bytes, pickled: the file is read and checked on every
# call, parsed once per process (tests plan many stacks), and every caller gets objects of its own.
_parsed: dict[str, bytes] = {}


def load_manifest(path: Path, sha256: str) -> list[dict[str, Any]]:
    """The documents of a vendored manifest, after checking it is the pinned file."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ManifestChecksumError(f"{path} has sha256 {digest}, expected {sha256}: it is not the pinned upstream file")
    snapshot = _parsed.get(digest)
    if snapshot is None:
        snapshot = _parsed[digest] = pickle.dumps(_parse(data), protocol=pickle.HIGHEST_PROTOCOL)
    return pickle.loads(snapshot)


def _parse(data: bytes) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(data, Loader=_Loader) if doc]


@dataclass
class MpiOperatorArgs:
    manifest: Path  # the vendored install manifest of the release
    manifest_sha256: str  # sha256 of that file as pinned in facts/versions.py; any other file is refused
    version: str  # the release, e.g. "v0.8.0", registered as the component's output


# The kinds an operator's install manifest may hold, as typed resources. Anything else is refused,
# so a bumped manifest with a new kind is noticed instead of silently dropped.
KIND_CLASSES = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Service"): k8s.core.v1.Service,
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): k8s.apiextensions.v1.CustomResourceDefinition,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
}
# Registered first, and waited for by everything else (workloads need their namespace, CRDs and RBAC).
FOUNDATION_KINDS = ("Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
_TOP_LEVEL = {"metadata": "metadata", "spec": "spec", "rules": "rules", "aggregationRule": "aggregation_rule", "roleRef": "role_ref", "subjects": "subjects"}


def register_objects(name: str, objects: list[dict[str, Any]], parent: pulumi.Resource) -> list[pulumi.CustomResource]:
    """Register manifest objects as typed resources: foundation kinds first, workloads after them."""
    ordered = sorted(objects, key=lambda o: (o["kind"] not in FOUNDATION_KINDS, FOUNDATION_KINDS.index(o["kind"]) if o["kind"] in FOUNDATION_KINDS else 0))
    foundation: list[pulumi.Resource] = []
    created = []
    for obj in ordered:
        cls = KIND_CLASSES.get((obj["apiVersion"], obj["kind"]))
        if cls is None:
            raise ValueError(f"{name}: the manifest holds a {obj['apiVersion']} {obj['kind']}, which this component does not know how to install")
        unknown = set(obj) - {"apiVersion", "kind"} - set(_TOP_LEVEL)
        if unknown:
            raise ValueError(f"{name}: {obj['kind']} {obj['metadata']['name']} has fields {sorted(unknown)} this component does not pass on")
        kwargs = {_TOP_LEVEL[k]: v for k, v in obj.items() if k in _TOP_LEVEL}
        is_foundation = obj["kind"] in FOUNDATION_KINDS
        res = cls(
            f"{name}-{obj['kind'].lower()}-{obj['metadata']['name']}",
            **kwargs,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[] if is_foundation else list(foundation)),
        )
        if obj["kind"] in ("Namespace", "CustomResourceDefinition"):
            foundation.append(res)
        elif is_foundation:
            foundation.append(res)
        created.append(res)
    return created


class MpiOperator(pulumi.ComponentResource):
    def __init__(self, name: str, args: MpiOperatorArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gputraining:components:MpiOperator", name, None, opts)
        objects = load_manifest(args.manifest, args.manifest_sha256)
        self.objects = register_objects(name, objects, self)
        self.register_outputs({"version": args.version})


@dataclass
class TrainingOperatorArgs:
    kustomization_dir: str  # relative to the project folder (Pulumi's working directory)


class TrainingOperator(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrainingOperatorArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gputraining:components:TrainingOperator", name, None, opts)
        # Built by the Kubernetes provider with kustomize at `pulumi up` (it fetches the pinned
        # upstream overlay). The offline plan shows this one resource and its directory.
        self.directory = k8s.kustomize.v2.Directory(
            f"{name}-kustomize",
            directory=str(args.kustomization_dir),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"directory": str(args.kustomization_dir)})
