"""Validation of Kueue objects against Kueue's own CRDs (vendored in manifests/vendor, see
SOURCES.md), as the API server and Kueue's webhooks would check them at `pulumi up`:

- the CRD's structural schema of the object's version (strict: a field the schema does not declare is
  an error, where the API server would silently prune it), with the schema's defaults applied first,
  and the CRD's CEL rules (x-kubernetes-validations) that apply to a create, evaluated: the plan's
  own check, infra/api_checks/kube_crds.py;
- the ClusterQueue webhook's rules (pkg/webhooks/clusterqueue_webhook.go at v0.19.2): resources
  named in coveredResources order, no negative quantity, limits only with a cohort, a lending limit
  at most the nominal quota.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from facts import versions
from facts.paths import PROJECT_ROOT
from infra.api_checks import kube_crds

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


def _version(kind: str, api_version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    crd = crds()[kind]
    group, version = api_version.split("/")
    assert group == crd["spec"]["group"], f"{kind}: group {group} is not {crd['spec']['group']}"
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            assert v["served"], f"{kind} {version} is not served"
            return crd, v
    raise AssertionError(f"{kind}: no version {version}")


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """The object against its CRD as the plan checks it (infra/api_checks/kube_crds.py): the schema
    (strict), after its defaults, and the create-time CEL rules, evaluated."""
    crd, version = _version(obj["kind"], obj["apiVersion"])
    return [f"{r.field}: {r.rule}" for r in kube_crds.compiled(crd, version).refusals(obj)]


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
    return schema_errors(obj) + list(_webhook_errors(obj))


def kueue_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if str(o.get("apiVersion", "")).startswith("kueue.x-k8s.io/")]


def crd_file(kind: str) -> Path:
    return next(
        p for p in CRD_DIR.glob("*.yaml") if yaml.load(p.read_text(), Loader=_LOADER)["spec"]["names"]["kind"] == kind
    )
