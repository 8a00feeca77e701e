"""Validation of Kueue objects against Kueue's own CRDs (vendored in manifests/vendor, see
SOURCES.md), as the API server and Kueue's webhooks would check them at `pulumi up`:

- the CRD's structural schema of the object's version, converted to JSON Schema (strict: a field the
  schema does not declare is an error, where the API server would silently prune it), with the
  schema's defaults applied first, as the API server does;
- the CRD's CEL rules (x-kubernetes-validations) that apply to a create, restated in Python, since
  jsonschema does not evaluate CEL (each names the rule it restates);
- the ClusterQueue webhook's rules (pkg/webhooks/clusterqueue_webhook.go at v0.19.2): resources
  named in coveredResources order, no negative quantity, limits only with a cohort, a lending limit
  at most the nominal quota.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from facts import versions
from facts.paths import PROJECT_ROOT

CRD_DIR = PROJECT_ROOT / versions.KUEUE_CRDS
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


@cache
def crds() -> dict[str, dict[str, Any]]:
    """kind -> the vendored CRD of it."""
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        doc = yaml.load(path.read_text(), Loader=_LOADER)
        out[doc["spec"]["names"]["kind"]] = doc
    return out


def _to_jsonschema(node: Any) -> Any:
    """A structural OpenAPI v3 schema node as JSON Schema (draft 4), undeclared fields refused."""
    if isinstance(node, list):
        return [_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {k: _to_jsonschema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = _to_jsonschema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [_to_jsonschema(v) for v in value]
        elif key.startswith("x-kubernetes-") or key in ("description", "default", "example"):
            continue
        elif key == "pattern" and value.startswith("^(?i)"):
            out[key] = "(?i)^" + value[len("^(?i)") :]  # Go takes inline flags anywhere, Python at the start only
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _defaulted(schema: dict[str, Any], obj: Any) -> Any:
    """``obj`` with the schema's defaults filled in (structural defaulting)."""
    if isinstance(obj, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in obj and "default" in sub:
                obj[name] = copy.deepcopy(sub["default"])
            if name in obj:
                _defaulted(sub, obj[name])
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in obj:
            _defaulted(schema["items"], item)
    return obj


def _version_schema(kind: str, api_version: str) -> dict[str, Any]:
    crd = crds()[kind]
    group, version = api_version.split("/")
    assert group == crd["spec"]["group"], f"{kind}: group {group} is not {crd['spec']['group']}"
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            assert v["served"], f"{kind} {version} is not served"
            return v["schema"]["openAPIV3Schema"]
    raise AssertionError(f"{kind}: no version {version}")


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """The object against its CRD's schema (strict), after the schema's defaults."""
    raw = _version_schema(obj["kind"], obj["apiVersion"])
    instance = _defaulted(raw, copy.deepcopy(obj))
    validator = jsonschema.Draft4Validator(_to_jsonschema(raw), format_checker=jsonschema.FormatChecker())
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(instance)]


def _cluster_queue_cel_errors(spec: dict[str, Any]) -> Iterator[str]:
    """ClusterQueue's create-time CEL rules."""
    # spec: !has(self.cohortName) && has(self.resourceGroups) ? ... all(r, !has(r.borrowingLimit))
    if "cohortName" not in spec:
        for rg in spec.get("resourceGroups", []):
            for f in rg["flavors"]:
                if any("borrowingLimit" in r for r in f["resources"]):
                    yield "spec: borrowingLimit must be nil when cohort is empty"
    # spec.resourceGroups[]: self.flavors.all(x, size(x.resources) == size(self.coveredResources))
    for rg in spec.get("resourceGroups", []):
        if any(len(f["resources"]) != len(rg["coveredResources"]) for f in rg["flavors"]):
            yield "spec.resourceGroups: flavors must have the same number of resources as the coveredResources"
    # spec.preemption: !(reclaimWithinCohort == 'Never' && borrowWithinCohort.policy != 'Never')
    pre = spec.get("preemption") or {}
    if (
        pre.get("reclaimWithinCohort", "Never") == "Never"
        and (pre.get("borrowWithinCohort") or {}).get("policy", "Never") != "Never"
    ):
        yield "spec.preemption: reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
    # spec.flavorFungibility: !has(self.preference) || (both TryNextFlavor)
    ff = spec.get("flavorFungibility") or {}
    if "preference" in ff and not (ff.get("whenCanBorrow") == ff.get("whenCanPreempt") == "TryNextFlavor"):
        yield "spec.flavorFungibility: preference needs whenCanBorrow and whenCanPreempt TryNextFlavor"


def _toleration_cel_errors(t: dict[str, Any]) -> Iterator[str]:
    """The CEL rules of one of a ResourceFlavor's spec.tolerations."""
    op = t.get("operator")
    if "key" not in t and op != "Exists":
        yield "spec.tolerations: operator must be Exists when 'key' is empty"
    if "tolerationSeconds" in t and t.get("effect") != "NoExecute":
        yield "spec.tolerations: effect must be 'NoExecute' when 'tolerationSeconds' is set"
    if op is not None and op not in ("Equal", "Exists"):
        yield f"spec.tolerations: unsupported operator {op!r}"
    if op == "Exists" and "value" in t:
        yield "spec.tolerations: a value must be empty when 'operator' is 'Exists'"
    if "effect" in t and t["effect"] not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        yield f"spec.tolerations: unsupported effect {t['effect']!r}"


def _resource_flavor_cel_errors(spec: dict[str, Any]) -> Iterator[str]:
    """ResourceFlavor's create-time CEL rules."""
    if "topologyName" in spec and not spec.get("nodeLabels"):
        yield "spec: at least one nodeLabel is required when topology is set"
    for t in spec.get("nodeTaints", []):
        if t["effect"] not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            yield f"spec.nodeTaints: unsupported effect {t['effect']!r}"
    for t in spec.get("tolerations", []):
        yield from _toleration_cel_errors(t)


def _cel_errors(obj: dict[str, Any]) -> Iterator[str]:
    """The CRDs' create-time CEL rules of the kinds the stack emits."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "ClusterQueue":
        yield from _cluster_queue_cel_errors(spec)
    if obj["kind"] == "ResourceFlavor":
        yield from _resource_flavor_cel_errors(spec)


def _quantity_value(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G|T)?", text)
    assert m is not None, text
    scale = {
        None: 1,
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
    }[m.group(2)]
    return float(m.group(1)) * scale


def _webhook_errors(obj: dict[str, Any]) -> Iterator[str]:
    """Kueue's ClusterQueue webhook (validateResourceGroups, validateFlavorQuotas, validateLimit,
    validateLendingLimit) for a new ClusterQueue."""
    if obj["kind"] != "ClusterQueue":
        return
    spec = obj.get("spec") or {}
    seen: set[str] = set()
    for i, rg in enumerate(spec.get("resourceGroups", [])):
        for name in rg["coveredResources"]:
            if name in seen:
                yield f"spec.resourceGroups[{i}].coveredResources: duplicate {name}"
            seen.add(name)
        for f in rg["flavors"]:
            for j, r in enumerate(f["resources"]):
                where = f"spec.resourceGroups[{i}].flavors[{f['name']}].resources[{j}]"
                if j < len(rg["coveredResources"]) and r["name"] != rg["coveredResources"][j]:
                    yield (
                        f"{where}.name: {r['name']} must match the name in coveredResources "
                        f"({rg['coveredResources'][j]})"
                    )
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if key in r:
                        text = str(r[key])
                        if not _QUANTITY.match(text) or text.startswith("-"):
                            yield f"{where}.{key}: {text!r} is not a non-negative quantity"
                if ("borrowingLimit" in r or "lendingLimit" in r) and not spec.get("cohortName"):
                    yield f"{where}: borrowingLimit and lendingLimit must be nil when cohort is empty"
                if "lendingLimit" in r and _quantity_value(str(r["lendingLimit"])) > _quantity_value(
                    str(r["nominalQuota"])
                ):
                    yield f"{where}.lendingLimit: must be less than or equal to the nominalQuota"


def errors(obj: dict[str, Any]) -> list[str]:
    """Everything the API server and Kueue's webhooks would refuse about ``obj`` on create."""
    return schema_errors(obj) + list(_cel_errors(obj)) + list(_webhook_errors(obj))


def kueue_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if str(o.get("apiVersion", "")).startswith("kueue.x-k8s.io/")]


def crd_file(kind: str) -> Path:
    return next(
        p for p in CRD_DIR.glob("*.yaml") if yaml.load(p.read_text(), Loader=_LOADER)["spec"]["names"]["kind"] == kind
    )
