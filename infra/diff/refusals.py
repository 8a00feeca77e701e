"""Day two: changes that a running stack's `pulumi up` sends as updates and the API refuses (it would
accept the same values on a new stack). Each ``Refusal`` names the resource, the change (old -> new),
the rule and where the rule was read. The checks compare the deployed stack (the base plan, or the
offline engine's simulated deployed stack) with the new program's plan, after Pulumi's
``ignoreChanges`` (the value kept from the state is what `pulumi up` sends), and skip what the diff
already replaces (a replacement creates anew instead of updating).

Kubernetes: the fields Kubernetes keeps immutable on update but pulumi-kubernetes 4.34.2 patches (they are
not in its ``forceNew`` table, provider/pkg/provider/diff.go read at 94977969; see
``replace_fields.K8S_KINDS``); those it replaces are left to the diff. StatefulSet, Deployment and
DaemonSet have none left over: every StatefulSet spec field but replicas, ordinals, template,
updateStrategy, revisionHistoryLimit, persistentVolumeClaimRetentionPolicy and minReadySeconds is
forbidden on update (ValidateStatefulSetUpdate), and each of those (selector, serviceName,
volumeClaimTemplates, podManagementPolicy) is in ``forceNew``, as are the selectors of Deployments and
DaemonSets. The Kubernetes rules are those of the validation functions named (kubernetes,
pkg/apis/<group>/validation/validation.go): ValidateJobSpecUpdate, ValidateStorageClassUpdate and the
StatefulSet message were read in the search corpus's newest copies of kubernetes' tree; the claim rules
are the API's own messages ("spec is immutable after creation except resources.requests and
volumeAttributesClassName for bound claims", "field can not be less than status.capacity"); the
volume's volumeMode and the Service's clusterIPs rules are named, not re-read here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.diff.compare import REPLACE, Diff, Key, changed_paths, effective_inputs, touches
from infra.diff.plans import Plan, index
from stacks.config.storage_checks import FSX_SSD_STEP

PVC = "kubernetes:core/v1:PersistentVolumeClaim"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
CLUSTERS = ("eks:index:Cluster", "aws:eks/cluster:Cluster")
NODE_GROUPS = ("aws:eks/nodeGroup:NodeGroup", "eks:index:ManagedNodeGroup")

_K8S = "kubernetes/kubernetes"
RESIZE_ADMISSION = (
    "kubernetes/kubernetes plugin/pkg/admission/storage/persistentvolume/resize/admission.go at 11798964 "
    "(PersistentVolumeClaimResize, on by default in the API server)"
)
CLAIM_VALIDATION = f"{_K8S} pkg/apis/core/validation/validation.go ValidatePersistentVolumeClaimUpdate"
FSX_UPDATE = (
    "Amazon FSx API reference, UpdateFileSystem StorageCapacity (Lustre: SCRATCH_2, PERSISTENT_1 and PERSISTENT_2 "
    "SSD in multiples of 2400 GiB, HDD in multiples of 6000 GiB at 12 MB/s/TiB and 1800 GiB at 40, greater than "
    "the current capacity)"
)
EKS_CLUSTER_UPDATE = (
    "Amazon EKS User Guide, update-cluster.html, and eksctl's cluster-upgrade page (control plane upgrades one minor "
    "version at a time; no downgrade)"
)
EKS_NODE_GROUP_UPDATE = (
    "Amazon EKS API reference, UpdateNodegroupVersion (version: the cluster's Kubernetes version at most; a node "
    "group cannot be rolled back to an earlier version)"
)
PULUMI_PROTECT = "Pulumi docs, resource option `protect` (a protected resource is neither deleted nor replaced)"

# kind -> (field, the rule, its validation function): immutable on update, patched by pulumi-kubernetes.
K8S_IMMUTABLE: dict[str, tuple[tuple[str, str, str], ...]] = {
    "core/v1:PersistentVolume": (
        ("spec.volumeMode", "a volume's volumeMode is immutable", "ValidatePersistentVolumeUpdate"),
    ),
    "core/v1:PersistentVolumeClaim": tuple(
        (
            f"spec.{f}",
            "a claim's spec is immutable but resources.requests and volumeAttributesClassName",
            "ValidatePersistentVolumeClaimUpdate",
        )
        for f in ("volumeMode", "dataSource", "dataSourceRef", "resources.limits")
    ),
    "core/v1:Service": (("spec.clusterIPs", "clusterIPs may not change once set", "ValidateServiceUpdate"),),
    "batch/v1:Job": tuple(
        (f"spec.{f}", f"a Job's {f} is immutable", "pkg/apis/batch ValidateJobSpecUpdate")
        for f in ("completionMode", "podFailurePolicy", "backoffLimitPerIndex", "successPolicy", "managedBy")
    ),
    "storage.k8s.io/v1:StorageClass": tuple(
        (f, f"a StorageClass's {f} is immutable", "pkg/apis/storage ValidateStorageClassUpdate")
        for f in ("reclaimPolicy", "volumeBindingMode")
    ),
}


@dataclass(frozen=True)
class Refusal:
    """One change the API refuses: `pulumi up` fails there."""

    key: Key
    change: str  # what changes, old -> new
    rule: str  # the rule it breaks
    source: str  # where the rule was read

    def line(self) -> str:
        return f"{self.key[1]} ({self.key[0]}): {self.change}: {self.rule} [{self.source}]"


@dataclass(frozen=True)
class Context:
    """What a check may read besides the resource: every resource of the new plan."""

    head: dict[Key, dict]

    def named(self, typ: str, name: str) -> dict | None:
        for (t, _), r in self.head.items():
            if t == typ and ((r.get("inputs") or {}).get("metadata") or {}).get("name") == name:
                return r
        return None


Check = Callable[[Key, dict, dict, Context], list[Refusal]]

_QUANTITY = re.compile(r"^([0-9.]+)([KMGTPE]i?|[kmgtpe])?$")
_POWERS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_POWERS.update({"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18})


def quantity(text: Any) -> float | None:
    """A Kubernetes quantity (``1200Gi``, ``5Ti``, ``500M``) in bytes; None when it is not one."""
    m = _QUANTITY.match(str(text)) if text is not None else None
    if m is None:
        return None
    try:
        return float(m.group(1)) * _POWERS.get(m.group(2) or "", 1)
    except ValueError:
        return None


def _get(inputs: dict, path: str) -> Any:
    value: Any = inputs
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _minor(version: Any) -> tuple[int, int] | None:
    m = re.fullmatch(r"(\d+)\.(\d+)", str(version)) if version is not None else None
    return (int(m.group(1)), int(m.group(2))) if m else None


# ---------------------------------------------------------------------------------------------
# Kubernetes
# ---------------------------------------------------------------------------------------------


def claim_request(key: Key, old: dict, new: dict, ctx: Context) -> list[Refusal]:
    """A claim's storage request: never smaller; larger only on a claim whose StorageClass allows expansion
    (a static claim, storageClassName "", never)."""
    if key[0] != PVC:
        return []
    path = "spec.resources.requests.storage"
    was, now = _get(old.get("inputs") or {}, path), _get(effective_inputs(old, new), path)
    a, b = quantity(was), quantity(now)
    if a is None or b is None or a == b:
        return []
    change = f"{path} {was} -> {now}"
    if b < a:
        return [Refusal(key, change, "a claim's request may not be less than its bound capacity", CLAIM_VALIDATION)]
    cls = _get(effective_inputs(old, new), "spec.storageClassName")
    sc = ctx.named(STORAGE_CLASS, cls) if cls else None
    if sc is not None and (sc.get("inputs") or {}).get("allowVolumeExpansion") is True:
        return []
    why = "a static claim" if not cls else f"StorageClass {cls!r} without allowVolumeExpansion"
    return [
        Refusal(
            key,
            change,
            f"only dynamically provisioned claims whose StorageClass allows expansion can grow ({why})",
            RESIZE_ADMISSION,
        )
    ]


def immutable_fields(key: Key, old: dict, new: dict, ctx: Context) -> list[Refusal]:
    """Fields Kubernetes refuses to change on update and pulumi-kubernetes patches (``K8S_IMMUTABLE``)."""
    if not key[0].startswith("kubernetes:") or key[0].count(":") != 2:
        return []
    fields = K8S_IMMUTABLE.get(key[0].split(":", 1)[1], ())
    if not fields:
        return []
    paths = changed_paths(old.get("inputs") or {}, effective_inputs(old, new))
    out = []
    for field, rule, function in fields:
        hit = [p for p in paths if touches(p, field)]
        if hit:
            out.append(Refusal(key, f"{', '.join(hit)} changed", rule, f"{_K8S} {function}"))
    return out


# ---------------------------------------------------------------------------------------------
# AWS
# ---------------------------------------------------------------------------------------------


def _fsx_step(inputs: dict) -> int | None:
    """The storage capacity step of UpdateFileSystem for a Lustre file system (None: cannot grow)."""
    if inputs.get("deploymentType") == "SCRATCH_1":
        return None
    if inputs.get("storageType", "SSD") == "HDD":
        return {12: 6000, 40: 1800}.get(inputs.get("perUnitStorageThroughput") or 0)
    return FSX_SSD_STEP


def fsx_growth(key: Key, old: dict, new: dict, ctx: Context) -> list[Refusal]:
    """FSx for Lustre grows only in its deployment type's step (a smaller size or a SCRATCH_1 change is a
    replacement: the diff says so)."""
    if key[0] != LUSTRE:
        return []
    inputs = effective_inputs(old, new)
    was, now = (old.get("inputs") or {}).get("storageCapacity"), inputs.get("storageCapacity")
    if not isinstance(was, int) or not isinstance(now, int) or now <= was:
        return []
    step = _fsx_step(inputs)
    if step is not None and now % step == 0:
        return []
    allowed = f"multiples of {step} GiB" if step else "no growth"
    return [
        Refusal(key, f"storageCapacity {was} -> {now} GiB", f"{inputs.get('deploymentType')}: {allowed}", FSX_UPDATE)
    ]


def cluster_version(key: Key, old: dict, new: dict, ctx: Context) -> list[Refusal]:
    """An EKS control plane moves one minor version up at a time."""
    if key[0] not in CLUSTERS:
        return []
    was, now = (old.get("inputs") or {}).get("version"), effective_inputs(old, new).get("version")
    a, b = _minor(was), _minor(now)
    if a is None or b is None or a == b:
        return []
    if b < a:
        rule = "EKS does not downgrade a cluster"
    elif b[0] != a[0] or b[1] > a[1] + 1:
        rule = f"EKS updates one minor version at a time: {a[0]}.{a[1] + 1} first"
    else:
        return []
    return [Refusal(key, f"version {was} -> {now}", rule, EKS_CLUSTER_UPDATE)]


def node_group_version(key: Key, old: dict, new: dict, ctx: Context) -> list[Refusal]:
    """A node group's version never goes back, and never past its cluster's (after this `up`)."""
    if key[0] not in NODE_GROUPS:
        return []
    was, now = (old.get("inputs") or {}).get("version"), effective_inputs(old, new).get("version")
    before, mine = _minor(was), _minor(now)
    if was == now or mine is None:
        return []
    if before is not None and mine < before:
        return [Refusal(key, f"version {was} -> {now}", "a node group is not rolled back", EKS_NODE_GROUP_UPDATE)]
    clusters = [_minor((r.get("inputs") or {}).get("version")) for (t, _), r in ctx.head.items() if t in CLUSTERS]
    known = [c for c in clusters if c is not None]
    if not known or mine <= min(known):
        return []
    cluster = ".".join(map(str, min(known)))
    return [Refusal(key, f"version {was} -> {now}", f"newer than its cluster's {cluster}", EKS_NODE_GROUP_UPDATE)]


CHECKS: tuple[Check, ...] = (claim_request, immutable_fields, fsx_growth, cluster_version, node_group_version)


def protected_replacement(diff: Diff) -> list[Refusal]:
    """A replacement of a resource the deployed stack protects and the new program still protects."""
    out = []
    for c in diff.replaced:
        old, new = diff.base.resources[c.key], diff.head.resources[c.key]
        if (old.get("options") or {}).get("protect") and (new.get("options") or {}).get("protect"):
            forced = ", ".join(c.forced_by[:3]) or "a replaced resource's new id"
            out.append(Refusal(c.key, f"replaced ({forced})", "the resource is protected", PULUMI_PROTECT))
    return out


def of_diff(diff: Diff) -> list[Refusal]:
    """Every refusal of `pulumi up` going from ``diff.base`` (deployed) to ``diff.head``."""
    ctx = Context(diff.head.resources)
    replaced = {c.key for c in diff.replaced if c.action == REPLACE}
    out: list[Refusal] = []
    for k in sorted(set(diff.base.resources) & set(diff.head.resources)):
        if k not in replaced:
            for check in CHECKS:
                out += check(k, diff.base.resources[k], diff.head.resources[k], ctx)
    return out + protected_replacement(diff)


def of_records(deployed: list[dict], head: list[dict]) -> list[Refusal]:
    """The refusals from a deployed stack's records to a plan's (both as resources.json lists them)."""
    return of_diff(Diff(Plan(index(deployed), {}, {}, present=True), Plan(index(head), {}, {}, present=True)))
