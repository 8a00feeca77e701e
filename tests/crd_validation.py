"""Custom resources checked as the API server and their operator would take them, against the CRDs
the stack installs (the vendored operator manifests, manifests/vendor): no file from outside the
repository.

``schema_errors``: the openAPIV3Schema of the CRD version the object names, the way the API server
applies it to a custom resource, by the plan's own check (infra/api_checks/kube_crds.py): the
schema's ``default``s filled in first (structural defaulting), then the object validated, its CEL
rules evaluated. The API server *prunes* fields its schema does not declare, without a word: a typo
(``slotPerWorker``) is lost, so the check reports them.

``operator_errors``: what the operator refuses after its own defaulting, from its source:
- MPIJob v2beta1: mpi-operator v0.8.2 (release-0.8 at b10758da), pkg/apis/kubeflow/v2beta1/default.go
  and pkg/apis/kubeflow/validation/validation.go (the controller validates every MPIJob it syncs);
- PyTorchJob and PaddleJob v1: training-operator v1.9.4, pkg/apis/kubeflow.org/v1/*_defaults.go and
  the admission webhooks pkg/webhooks/{pytorch,paddlepaddle}/*_webhook.go, with
  pkg/common/util/webhooks.go's run-policy check.
Paths are written as Kubernetes field paths (``spec.mpiReplicaSpecs[Worker].replicas``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from facts.operators import OPERATORS
from facts.paths import PROJECT_ROOT
from infra.api_checks import kube_crds, kube_rules

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

# The CRDs the stack installs: each operator's kinds in its manifest (the MPI operator's release
# manifest, the rendered training operator).
CRD_FILES = {(k.api_version, k.kind): PROJECT_ROOT / op.manifest.file for op in OPERATORS for k in op.kinds}


def crd_in(manifest: Path, kind: str) -> dict[str, Any]:
    """The CustomResourceDefinition of ``kind`` in a (multi-document) manifest file."""
    with open(manifest) as fh:
        for doc in yaml.load_all(fh, Loader=_LOADER):
            if (
                isinstance(doc, dict)
                and doc.get("kind") == "CustomResourceDefinition"
                and doc["spec"]["names"]["kind"] == kind
            ):
                return doc
    raise LookupError(f"{manifest}: no CustomResourceDefinition of kind {kind}")


def _version(crd: dict[str, Any], api_version: str) -> dict[str, Any]:
    group, _, version = api_version.partition("/")
    if group != crd["spec"]["group"]:
        raise LookupError(f"apiVersion {api_version}: the CRD is of group {crd['spec']['group']}")
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v
    raise LookupError(f"apiVersion {api_version}: the CRD serves {[v['name'] for v in crd['spec']['versions']]}")


# ---------------------------------------------------------------------------------------------
# The schema: the plan's own check (infra/api_checks/kube_crds.py)
# ---------------------------------------------------------------------------------------------


def schema_errors(cr: dict[str, Any], crd: dict[str, Any]) -> list[str]:
    """What the API server refuses of ``cr`` by its CRD (strict: also what it would prune), as the
    plan checks it (``kube_crds.compiled``), and a name that is not a DNS-1123 subdomain."""
    version = _version(crd, cr["apiVersion"])
    errors = []
    if cr.get("kind") != crd["spec"]["names"]["kind"]:
        errors.append(f"kind: {cr.get('kind')!r} is not the CRD's {crd['spec']['names']['kind']!r}")
    name = (cr.get("metadata") or {}).get("name", "")
    if not name or kube_rules.is_dns1123_subdomain(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    return errors + [f"{r.field}: {r.rule}" for r in kube_crds.compiled(crd, version).refusals(cr)]


# ---------------------------------------------------------------------------------------------
# The operators' own checks
# ---------------------------------------------------------------------------------------------


def _containers(replica: dict[str, Any]) -> list[dict[str, Any]]:
    return (((replica or {}).get("template") or {}).get("spec") or {}).get("containers") or []


def _mpijob_unknown_keys(specs: dict[str, Any], at: str) -> list[str]:
    return [
        f"{at}[{key}]: not read: the controller reads only the keys Launcher and Worker (case-sensitive)"
        for key in specs
        if key not in ("Launcher", "Worker")
    ]


def _mpijob_replica_errors(rs: dict[str, Any], role: str, restart: str, replicas: int, at: str) -> list[str]:
    errors = []
    n = rs.get("replicas", replicas)
    if rs.get("restartPolicy", restart) not in ("Never", "OnFailure"):
        errors.append(
            f"{at}[{role}].restartPolicy: Unsupported value: {rs['restartPolicy']!r}: supported values: Never, "
            "OnFailure"
        )
    if not _containers(rs):
        errors.append(f"{at}[{role}].template.spec.containers: Required value: must define at least one container")
    if not isinstance(n, int):
        return errors  # a schema error already
    if role == "Launcher" and n != 1:
        errors.append(f"{at}[Launcher].replicas: Invalid value: {n}: must be 1")
    if role == "Worker" and n <= 0:
        errors.append(f"{at}[Worker].replicas: Invalid value: {n}: must be greater than or equal to 1")
    return errors


def _mpijob_roles_errors(specs: dict[str, Any], at: str) -> list[str]:
    errors = []
    # default.go: Launcher restartPolicy OnFailure and replicas 1; Worker Never and 0.
    for role, restart, replicas in (("Launcher", "OnFailure", 1), ("Worker", "Never", 0)):
        rs = specs.get(role)
        if rs is None:
            if role == "Launcher":
                errors.append(f"{at}[Launcher]: Required value: must have Launcher replica spec")
            continue
        errors += _mpijob_replica_errors(rs, role, restart, replicas, at)
    return errors


def _mpijob_spec_errors(spec: dict[str, Any]) -> list[str]:
    errors = []
    for name in ("slotsPerWorker",):
        if isinstance(spec.get(name), int) and spec[name] < 0:
            errors.append(f"spec.{name}: Invalid value: {spec[name]}: must be greater than or equal to 0")
    if spec.get("mpiImplementation", "OpenMPI") not in ("OpenMPI", "Intel", "MPICH"):
        errors.append(f"spec.mpiImplementation: Unsupported value: {spec['mpiImplementation']!r}")
    return errors


def _mpijob_run_policy_errors(policy: dict[str, Any]) -> list[str]:
    errors = []
    if policy.get("cleanPodPolicy", "None") not in ("None", "Running", "All"):
        errors.append(
            f"spec.runPolicy.cleanPodPolicy: Unsupported value: {policy['cleanPodPolicy']!r}: supported values: All, "
            "None, Running"
        )
    for name in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        if isinstance(policy.get(name), int) and policy[name] < 0:
            errors.append(f"spec.runPolicy.{name}: Invalid value: {policy[name]}: must be greater than or equal to 0")
    if "managedBy" in policy and policy["managedBy"] not in ("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue"):
        errors.append(f"spec.runPolicy.managedBy: Unsupported value: {policy['managedBy']!r}")
    return errors


def _mpijob_host_errors(cr: dict[str, Any], specs: dict[str, Any]) -> list[str]:
    workers = (specs.get("Worker") or {}).get("replicas") or 1
    workers = workers if isinstance(workers, int) and workers > 0 else 1
    host = f"{cr['metadata']['name']}-worker-{workers - 1}"
    if len(host) > 63 or not _DNS1035_LABEL.match(host):
        return [f"metadata.name: will not able to create pod and service with invalid DNS label {host!r}"]
    return []


def _mpijob_errors(cr: dict[str, Any]) -> list[str]:
    spec = cr.get("spec") or {}
    specs = spec.get("mpiReplicaSpecs")
    at = "spec.mpiReplicaSpecs"
    if specs is None:
        return [f"{at}: Required value: must have replica specs"]
    return (
        _mpijob_unknown_keys(specs, at)
        + _mpijob_roles_errors(specs, at)
        + _mpijob_spec_errors(spec)
        + _mpijob_run_policy_errors(spec.get("runPolicy") or {})
        + _mpijob_host_errors(cr, specs)
    )


def _training_operator_managed_by(policy: dict[str, Any]) -> list[str]:
    if "managedBy" in policy and policy["managedBy"] not in (
        "kubeflow.org/training-operator",
        "kueue.x-k8s.io/multikueue",
    ):
        return [f"spec.runPolicy.managedBy: Unsupported value: {policy['managedBy']!r}"]
    return []


def _training_operator_containers(containers: list[dict[str, Any]], role: str, container: str, at: str) -> list[str]:
    errors = []
    if not containers:
        errors.append(f"{at}[{role}].template.spec.containers: Required value: must be specified")
    for i, c in enumerate(containers):
        if not c.get("image"):
            errors.append(f"{at}[{role}].template.spec.containers[{i}].image: Required value: must be required")
    if not any(c.get("name") == container for c in containers):
        errors.append(
            f"{at}[{role}].template.spec.containers: Required value: must have at least one container with name "
            f"{container!r}"
        )
    return errors


def _training_operator_replicas(rs: dict[str, Any], role: str, replicas_key: str, at: str) -> list[str]:
    n = rs.get("replicas", 1)
    if not isinstance(n, int) or replicas_key != "pytorchReplicaSpecs":
        return []  # a schema error already, or no rule on the count
    if role == "Master" and n != 1:
        return [f"{at}[Master].replicas: Forbidden: must be 1"]
    if role == "Worker" and n < 1:
        return [f"{at}[Worker].replicas: Forbidden: must be at least 1"]
    return []


def _training_operator_elastic(spec: dict[str, Any], roles: set[str], at: str) -> list[str]:
    errors = []
    if "Worker" not in roles:
        errors.append(f"{at}[Worker]: Required value: must be configured if elastic policy is used")
    if spec["elasticPolicy"].get("nProcPerNode") is not None and spec.get("nprocPerNode") is not None:
        errors.append("spec.elasticPolicy.nProcPerNode: Forbidden: must not be used with spec.nprocPerNode")
    return errors


def _training_operator_errors(cr: dict[str, Any], replicas_key: str, container: str) -> list[str]:
    spec = cr.get("spec") or {}
    name = cr["metadata"]["name"]
    errors = []
    if len(name) > 63 or not _DNS1035_LABEL.match(name):
        errors.append(f"metadata.name: Invalid value: {name!r}: should match a DNS-1035 label")
    errors += _training_operator_managed_by(spec.get("runPolicy") or {})
    at = f"spec.{replicas_key}"
    specs = spec.get(replicas_key)
    if specs is None:
        return [*errors, f"{at}: Required value: must be required"]
    # The defaulter camel-cases the keys (master -> Master) and sets replicas 1 where unset.
    canonical = {k: {"master": "Master", "worker": "Worker"}.get(k.lower(), k) for k in specs}
    for key, role in canonical.items():
        rs = specs[key] or {}
        if role not in ("Master", "Worker"):
            errors.append(f"{at}[{key}]: Unsupported value: {key!r}: supported values: Master, Worker")
        errors += _training_operator_containers(_containers(rs), role, container, at)
        errors += _training_operator_replicas(rs, role, replicas_key, at)
    if replicas_key == "pytorchReplicaSpecs" and spec.get("elasticPolicy") is not None:
        errors += _training_operator_elastic(spec, set(canonical.values()), at)
    return errors


def operator_errors(cr: dict[str, Any]) -> list[str]:
    """What the operator of ``cr``'s kind refuses (see the module docstring)."""
    kind = (cr["apiVersion"], cr["kind"])
    if kind == ("kubeflow.org/v2beta1", "MPIJob"):
        return _mpijob_errors(cr)
    if kind == ("kubeflow.org/v1", "PyTorchJob"):
        return _training_operator_errors(cr, "pytorchReplicaSpecs", "pytorch")
    if kind == ("kubeflow.org/v1", "PaddleJob"):
        return _training_operator_errors(cr, "paddleReplicaSpecs", "paddle")
    raise LookupError(f"no operator rules for {kind}")


def errors(cr: dict[str, Any], crd: dict[str, Any]) -> list[str]:
    """Everything the API server (strictly) and the operator refuse of ``cr``."""
    return schema_errors(cr, crd) + [f"[operator] {e}" for e in operator_errors(cr)]
