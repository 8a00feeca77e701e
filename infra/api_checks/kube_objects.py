"""Every Kubernetes object of the plan against the API server's value rules (kube_rules.py): which
rule each field takes is Kubernetes 1.36's ``pkg/apis/core/validation/validation.go`` (CORE), its
RBAC validation for the RBAC kinds, and apimachinery's ObjectMeta validation for every object.

One walk over each object: cost linear in its size. A refusal names the object, the field, the
value, the rule and its source (``Refusal``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import infra.api_checks.kube_rules as rules

CORE = "kubernetes v1.36 pkg/apis/core/validation/validation.go"
RBAC = "kubernetes v1.36 pkg/apis/rbac/validation/validation.go"
GENERIC = f"{rules.APIMACHINERY} pkg/api/validation/generic.go"
# ValidateConfigMap and ValidateSecret: the values together at most core.MaxSecretSize (1 MiB).
MAX_DATA_SIZE = 1 << 20

Rule = Callable[[str], list[str]]

# The name rule of each kind (its ValidateXName); every other kind, custom resources too
# (apiextensions-apiserver validates a custom resource's name with NameIsDNSSubdomain), a DNS subdomain.
NAME_RULES: dict[str, tuple[Rule, str]] = {
    "Namespace": (rules.is_dns1123_label, f"ValidateNamespaceName = NameIsDNSLabel, {GENERIC}"),
    "Service": (rules.is_dns1035_label, f"ValidateServiceName = NameIsDNS1035Label, {CORE}"),
    **{
        kind: (rules.is_path_segment_name, f"ValidateRBACName = IsValidPathSegmentName, {RBAC}")
        for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
    },
}
DEFAULT_NAME_RULE: tuple[Rule, str] = (rules.is_dns1123_subdomain, f"NameIsDNSSubdomain, {GENERIC}")


@dataclass(frozen=True)
class Refusal:
    """What the API server refuses: in which object, which field, the value, the rule, its source."""

    obj: str
    field: str
    value: str
    rule: str
    source: str

    def __str__(self) -> str:
        return f"{self.obj}: {self.field} = {self.value}: {self.rule} ({self.source})"


def object_id(obj: Mapping[str, Any]) -> str:
    """``Kind/namespace/name`` (``Kind/name`` without a namespace)."""
    meta = obj.get("metadata") or {}
    parts = [str(obj.get("kind")), meta.get("namespace"), str(meta.get("name"))]
    return "/".join(p for p in parts if p)


def shown(value: Any) -> str:
    """A value as a refusal shows it: quoted, a long one cut."""
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


class _Checker:
    """The refusals of one object, collected as it is walked."""

    def __init__(self, obj: Mapping[str, Any]):
        self.id = object_id(obj)
        self.out: list[Refusal] = []

    def rule(self, field: str, value: str, fn: Rule, source: str) -> None:
        for msg in fn(value):
            self.out.append(Refusal(self.id, field, shown(value), msg, source))

    def labels(self, field: str, labels: Any, source: str) -> None:
        """ValidateLabels (apimachinery pkg/apis/meta/v1/validation): keys qualified, values label values."""
        for key, value in (labels or {}).items():
            self.rule(f"{field}[{key}]", str(key), rules.is_qualified_name, f"IsQualifiedName, {source}")
            self.rule(f"{field}[{key}]", str(value), rules.is_label_value, f"IsValidLabelValue, {source}")

    def metadata(self, field: str, meta: Any) -> None:
        meta = meta or {}
        self.labels(f"{field}.labels", meta.get("labels"), rules.CONTENT)
        annotations = meta.get("annotations") or {}
        for key in annotations:
            self.rule(f"{field}.annotations[{key}]", str(key), rules.is_annotation_key, rules.OBJECT_META)
        for msg in rules.annotations_size(annotations):
            self.out.append(
                Refusal(
                    self.id,
                    f"{field}.annotations",
                    f"{len(annotations)} annotations",
                    msg,
                    f"TotalAnnotationSizeLimitB, {rules.OBJECT_META}",
                )
            )
        if meta.get("namespace"):
            self.rule(
                f"{field}.namespace",
                str(meta["namespace"]),
                rules.is_dns1123_label,
                f"ValidateNamespaceName = NameIsDNSLabel, {GENERIC}",
            )


def _name(c: _Checker, obj: Mapping[str, Any]) -> None:
    name = (obj.get("metadata") or {}).get("name")
    if not name:
        c.out.append(Refusal(c.id, "metadata.name", "''", "name or generateName is required", rules.OBJECT_META))
        return
    fn, source = NAME_RULES.get(str(obj.get("kind")), DEFAULT_NAME_RULE)
    c.rule("metadata.name", str(name), fn, source)


def _container(c: _Checker, field: str, container: Mapping[str, Any]) -> None:
    c.rule(
        f"{field}.name",
        str(container.get("name", "")),
        rules.is_dns1123_label,
        f"validateContainerCommon: IsDNS1123Label, {CORE}",
    )
    for i, port in enumerate(container.get("ports") or []):
        if port.get("name"):
            c.rule(
                f"{field}.ports[{i}].name",
                str(port["name"]),
                rules.is_valid_port_name,
                f"validateContainerPorts: IsValidPortName, {rules.UTIL}",
            )
    for i, env in enumerate(container.get("env") or []):
        c.rule(
            f"{field}.env[{i}].name",
            str(env.get("name", "")),
            rules.is_relaxed_env_var_name,
            f"ValidateEnv: IsRelaxedEnvVarName, {rules.UTIL}",
        )
    for part in ("requests", "limits"):
        for resource in (container.get("resources") or {}).get(part) or {}:
            c.rule(
                f"{field}.resources.{part}[{resource}]",
                str(resource),
                rules.is_qualified_name,
                f"validateResourceName: IsQualifiedName, {CORE}",
            )


def _tolerations(c: _Checker, field: str, tolerations: Any) -> None:
    for i, t in enumerate(tolerations or []):
        if t.get("key"):
            c.rule(
                f"{field}[{i}].key",
                str(t["key"]),
                rules.is_qualified_name,
                f"ValidateTolerations: ValidateLabelName, {CORE}",
            )


def _pod_spec(c: _Checker, field: str, spec: Mapping[str, Any]) -> None:
    """ValidatePodSpec's name rules: containers, ports, env, resources, volumes, tolerations, nodeSelector."""
    for part in ("initContainers", "containers", "ephemeralContainers"):
        for i, container in enumerate(spec.get(part) or []):
            _container(c, f"{field}.{part}[{i}]", container)
    for i, volume in enumerate(spec.get("volumes") or []):
        c.rule(
            f"{field}.volumes[{i}].name",
            str(volume.get("name", "")),
            rules.is_dns1123_label,
            f"ValidateVolumes: IsDNS1123Label, {CORE}",
        )
    _tolerations(c, f"{field}.tolerations", spec.get("tolerations"))
    c.labels(f"{field}.nodeSelector", spec.get("nodeSelector"), f"ValidatePodSpec, {CORE}")


def _pod_templates(value: Any, field: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every pod template in ``value`` (a ``template`` with a ``spec.containers``), at any depth: the
    workloads' and the job operators' replica specs alike (their pods are created from them)."""
    if isinstance(value, dict):
        for key, sub in value.items():
            at = f"{field}.{key}" if field else str(key)
            spec = sub.get("spec") if key == "template" and isinstance(sub, dict) else None
            if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
                yield at, sub
            elif isinstance(sub, (dict, list)):
                yield from _pod_templates(sub, at)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, (dict, list)):
                yield from _pod_templates(item, f"{field}[{i}]")


def _service(c: _Checker, spec: Mapping[str, Any]) -> None:
    ports = spec.get("ports") or []
    for i, port in enumerate(ports):
        if len(ports) > 1 and not port.get("name"):  # validateServicePort's requireName
            c.out.append(
                Refusal(
                    c.id,
                    f"spec.ports[{i}].name",
                    "''",
                    "required when a Service has more than one port",
                    f"validateServicePort, {CORE}",
                )
            )
        elif port.get("name"):
            c.rule(
                f"spec.ports[{i}].name",
                str(port["name"]),
                rules.is_dns1123_label,
                f"validateServicePort: IsDNS1123Label, {CORE}",
            )
        if isinstance(port.get("targetPort"), str):
            c.rule(
                f"spec.ports[{i}].targetPort",
                port["targetPort"],
                rules.is_valid_port_name,
                f"validateServicePort: IsValidPortName, {rules.UTIL}",
            )
    c.labels("spec.selector", spec.get("selector"), f"ValidateService, {CORE}")


def _data_size(c: _Checker, field: str, size: int, kind: str) -> None:
    if size > MAX_DATA_SIZE:
        c.out.append(
            Refusal(
                c.id,
                field,
                f"{size} bytes",
                f"must have at most {MAX_DATA_SIZE} bytes",
                f"Validate{kind}: core.MaxSecretSize, {CORE}",
            )
        )


def _config_map(c: _Checker, obj: Mapping[str, Any]) -> None:
    size = 0
    for part in ("data", "binaryData"):
        for key, value in (obj.get(part) or {}).items():
            c.rule(
                f"{part}[{key}]", str(key), rules.is_config_map_key, f"ValidateConfigMap: IsConfigMapKey, {rules.UTIL}"
            )
            size += len(_decoded(value) if part == "binaryData" else str(value).encode())
    _data_size(c, "data", size, "ConfigMap")


def _secret(c: _Checker, obj: Mapping[str, Any]) -> None:
    # A part given as a secret Output is recorded masked ("[secret]"): its keys are not known here.
    parts = {p: v if isinstance(v, Mapping) else {} for p in ("data", "stringData") if (v := obj.get(p))}
    data = {k: _decoded(v) for k, v in parts.get("data", {}).items()}
    data.update({k: str(v).encode() for k, v in parts.get("stringData", {}).items()})  # stringData wins
    for key in data:
        c.rule(f"data[{key}]", str(key), rules.is_config_map_key, f"ValidateSecret: IsConfigMapKey, {rules.UTIL}")
    _data_size(c, "data", sum(len(v) for v in data.values()), "Secret")


def _decoded(value: Any) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        return str(value).encode()


def _flavor(c: _Checker, spec: Mapping[str, Any]) -> None:
    """A Kueue ResourceFlavor's node labels and tolerations become the admitted pods' nodeSelector
    and tolerations (Kueue adds them at admission), which Kubernetes validates as a pod's."""
    c.labels("spec.nodeLabels", spec.get("nodeLabels"), f"pods' nodeSelector, ValidatePodSpec, {CORE}")
    _tolerations(c, "spec.tolerations", spec.get("tolerations"))
    _tolerations(c, "spec.nodeTaints", spec.get("nodeTaints"))


def refusals(obj: Mapping[str, Any]) -> list[Refusal]:
    """What the API server refuses of ``obj`` by the rules above (its schema apart)."""
    c = _Checker(obj)
    kind = obj.get("kind")
    raw = obj.get("spec")
    spec: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    _name(c, obj)
    c.metadata("metadata", obj.get("metadata"))
    if kind == "Pod":
        _pod_spec(c, "spec", spec)
    templates = _pod_templates(spec, "spec") if kind != "CustomResourceDefinition" else iter(())
    for field, template in templates:
        c.metadata(f"{field}.metadata", template.get("metadata"))
        _pod_spec(c, f"{field}.spec", template["spec"])
    selector = spec.get("selector")
    if kind != "Service" and isinstance(selector, Mapping):
        c.labels("spec.selector.matchLabels", selector.get("matchLabels"), f"ValidateLabelSelector, {rules.CONTENT}")
    if kind == "Service":
        _service(c, spec)
    elif kind == "ConfigMap":
        _config_map(c, obj)
    elif kind == "Secret":
        _secret(c, obj)
    elif kind == "ResourceFlavor":
        _flavor(c, spec)
    return c.out
