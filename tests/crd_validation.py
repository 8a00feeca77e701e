"""Custom resources checked as the API server and their operator would take them, against the CRDs
the stack installs (the vendored operator manifests, manifests/vendor): no file from outside the
repository.

``schema_errors``: the openAPIV3Schema of the CRD version the object names, the way the API server
applies it to a custom resource: the schema's ``default``s filled in first (structural defaulting),
then the object validated, ``format: int32/int64`` as ranges, ``x-kubernetes-int-or-string``,
``nullable`` and ``x-kubernetes-list-type: set/map`` as the API server reads them. The API server
*prunes* fields its schema does not declare, without a word: a typo (``slotPerWorker``) is lost, so
strict mode reports them. CEL rules (``x-kubernetes-validations``) are not evaluated: none of the
stack's three CRDs has one where the jobs write.

``operator_errors``: what the operator refuses after its own defaulting, from its source:
- MPIJob v2beta1: mpi-operator v0.8.2 (release-0.8 at b10758da), pkg/apis/kubeflow/v2beta1/default.go
  and pkg/apis/kubeflow/validation/validation.go (the controller validates every MPIJob it syncs);
- PyTorchJob and PaddleJob v1: training-operator v1.9.4, pkg/apis/kubeflow.org/v1/*_defaults.go and
  the admission webhooks pkg/webhooks/{pytorch,paddlepaddle}/*_webhook.go, with
  pkg/common/util/webhooks.go's run-policy check.
Paths are written as Kubernetes field paths (``spec.mpiReplicaSpecs[Worker].replicas``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from facts.aws_names import INT32_MAX, INT64_MAX
from facts.operators import OPERATORS
from facts.paths import PROJECT_ROOT

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_RANGES = {"int32": (-INT32_MAX - 1, INT32_MAX), "int64": (-INT64_MAX - 1, INT64_MAX)}

# The CRDs the stack installs: the MPI operator's release manifest and the rendered training operator.
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
# The schema, as JSON Schema
# ---------------------------------------------------------------------------------------------

_DROPPED = {
    "description",
    "example",
    "externalDocs",
    "x-kubernetes-validations",
    "x-kubernetes-map-type",
    "x-kubernetes-list-map-keys",
}


def json_schema(node: Any, strict: bool) -> Any:
    """A structural schema node as JSON Schema (Draft 4, which OpenAPI 3.0's keywords follow)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or key.startswith("x-kubernetes-") and key != "x-kubernetes-list-type":
            continue
        if key == "properties":
            out[key] = {name: json_schema(sub, strict) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = json_schema(value, strict) if isinstance(value, dict) else value
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [json_schema(sub, strict) for sub in value]
        elif key == "format" and value in _RANGES:
            low, high = _RANGES[value]
            out["minimum"], out["maximum"] = max(low, out.get("minimum", low)), min(high, out.get("maximum", high))
        elif key == "x-kubernetes-list-type":
            out[key] = {"type": value, "keys": node.get("x-kubernetes-list-map-keys", [])}
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    keeps_unknown = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-embedded-resource")
    if (
        strict
        and out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not keeps_unknown
    ):
        out["additionalProperties"] = False
    return out


def _list_type(
    validator: Any, spec: dict[str, Any], instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if not isinstance(instance, list):
        return
    seen: list[Any] = []
    for item in instance:
        key = (
            item
            if spec["type"] == "set"
            else tuple(item.get(k) for k in spec["keys"])
            if isinstance(item, dict)
            else None
        )
        if spec["type"] in ("set", "map") and key is not None and key in seen:
            yield jsonschema.ValidationError(f"duplicate entry {key!r} in a list of type {spec['type']}")
        seen.append(key)


_Validator = jsonschema.validators.extend(jsonschema.Draft4Validator, {"x-kubernetes-list-type": _list_type})


def apply_defaults(schema: dict[str, Any], value: Any) -> None:
    """Fill in every missing property whose schema has a ``default``, depth first, in place."""
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                apply_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in (schema.get("properties") or {}):
                    apply_defaults(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item)


def _path(parts: Any) -> str:
    text = ""
    for p in parts:
        text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
    return text or "(the object)"


def schema_errors(cr: dict[str, Any], crd: dict[str, Any], strict: bool = True) -> list[str]:
    """What the API server refuses of ``cr`` (with ``strict``: also what it would prune)."""
    version = _version(crd, cr["apiVersion"])
    errors = []
    if cr.get("kind") != crd["spec"]["names"]["kind"]:
        errors.append(f"kind: {cr.get('kind')!r} is not the CRD's {crd['spec']['names']['kind']!r}")
    if not version.get("served", False):
        errors.append(f"apiVersion: {cr['apiVersion']} is not served")
    name = (cr.get("metadata") or {}).get("name", "")
    if not name or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    raw = version["schema"]["openAPIV3Schema"]
    obj = copy.deepcopy(cr)
    apply_defaults(raw, obj)
    schema = json_schema(raw, strict)
    # metadata is the API server's: the CRD schema says `type: object` at most.
    schema.get("properties", {}).pop("metadata", None)
    body = {k: v for k, v in obj.items() if k != "metadata"}
    for err in sorted(_Validator(schema).iter_errors(body), key=lambda e: [str(p) for p in e.absolute_path]):
        errors.append(f"{_path(err.absolute_path)}: {err.message}")
    return errors


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
