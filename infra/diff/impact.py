"""What a reviewer must not miss, said in words at the top of the diff: stateful resources `pulumi up` deletes
or replaces (their data goes with them) and managed node groups whose nodes it rolls (their jobs stop).

Rolls. EKS replaces every node of a managed node group, one batch at a time (at most ``updateConfig``'s
maxUnavailable, default 1), draining the old nodes' pods, when the group moves to a new launch template
version, AMI release or Kubernetes version (Amazon EKS User Guide, "Understand each phase of node updates",
managed-node-update-behavior.html: setup, scale up, upgrade (drain), scale down). The node group's
``launchTemplate.version`` is the template's ``latest_version`` (components/node_group.py), and the launch
template gets a new version when any of its launch data changes: terraform-provider-aws
internal/service/ec2/ec2_launch_template.go at 025e4f81cab8, resourceLaunchTemplateUpdate's ``updateKeys``
(CreateLaunchTemplateVersion); its tags, default_version and update_default_version do not. A change of
labels, taints or scaling (UpdateNodegroupConfig) rolls nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.diff.compare import Change, Diff, Key, touches
from infra.diff.values import change as value_change

NODE_GROUPS = ("aws:eks/nodeGroup:NodeGroup", "eks:index:ManagedNodeGroup")
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
GROUP_LABEL = "gputraining/node-group"
# A node group's own inputs whose change is an UpdateNodegroupVersion (a roll).
ROLLING_INPUTS = ("version", "releaseVersion", "launchTemplate.version", "amiId")
# The launch template's inputs whose change makes a new template version (updateKeys, in Pulumi's camelCase).
TEMPLATE_VERSION_INPUTS = (
    "blockDeviceMappings",
    "capacityReservationSpecification",
    "cpuOptions",
    "creditSpecification",
    "description",
    "disableApiStop",
    "disableApiTermination",
    "ebsOptimized",
    "elasticGpuSpecifications",
    "elasticInferenceAccelerator",
    "enclaveOptions",
    "hibernationOptions",
    "iamInstanceProfile",
    "imageId",
    "instanceInitiatedShutdownBehavior",
    "instanceMarketOptions",
    "instanceRequirements",
    "instanceType",
    "kernelId",
    "keyName",
    "licenseSpecifications",
    "metadataOptions",
    "monitoring",
    "networkInterfaces",
    "placement",
    "privateDnsNameOptions",
    "ramDiskId",
    "securityGroupNames",
    "tagSpecifications",
    "userData",
    "vpcSecurityGroupIds",
)


@dataclass(frozen=True)
class Roll:
    """A managed node group whose nodes `pulumi up` replaces in place."""

    key: Key
    group: str  # the stack's name of the group (its node-group label), else the EKS name
    nodes: str  # how many nodes, from the head plan's scalingConfig
    causes: tuple[str, ...]  # what makes the new version
    templates: tuple[Key, ...] = ()  # the launch templates whose new version rolls it


def _inputs_of(change: Change) -> list[str]:
    return [p[len("inputs.") :] for p in change.paths if p.startswith("inputs.")]


def _shown(diff: Diff, key: Key, path: str) -> str:
    old, new, _ = value_change(diff.base.resources[key].get("inputs"), diff.head.resources[key].get("inputs"), path)
    return f"`{path}` {old} → {new}"


def group_name(record: dict) -> str:
    inputs = record.get("inputs") or {}
    labels = inputs.get("labels")
    labels = labels if isinstance(labels, dict) else {}
    return str(labels.get(GROUP_LABEL) or inputs.get("nodeGroupName") or record["name"])


def node_count(record: dict) -> str:
    """How many nodes the group has, as the plan knows it: its desired size, or its range when the
    autoscaler owns the desired size (``ignoreChanges``)."""
    scaling = (record.get("inputs") or {}).get("scalingConfig") or {}
    ignore = (record.get("options") or {}).get("ignoreChanges") or ()
    lo, hi, want = scaling.get("minSize"), scaling.get("maxSize"), scaling.get("desiredSize")
    at_once = ((record.get("inputs") or {}).get("updateConfig") or {}).get("maxUnavailable") or 1
    if "scalingConfig.desiredSize" in ignore:
        count = f"{lo} to {hi} nodes (the autoscaler sets how many; desiredSize {want} at creation)"
    else:
        count = f"{want} node{'s' if want != 1 else ''} (desiredSize; maxSize {hi})"
    return f"{count}, {at_once} at a time"


def _template_causes(diff: Diff, updated: dict[Key, Change]) -> dict[str, tuple[Key, str]]:
    """Launch templates updated with a new version: their id -> (the template, what changes in it)."""
    out: dict[str, tuple[Key, str]] = {}
    for key, change in updated.items():
        if key[0] != LAUNCH_TEMPLATE:
            continue
        paths = [p for p in _inputs_of(change) if any(touches(p, f) for f in TEMPLATE_VERSION_INPUTS)]
        rid = diff.base.resources[key].get("id")
        if paths and isinstance(rid, str) and rid:
            shown = ", ".join(_shown(diff, key, p) for p in paths[:3]) + (" and more" if len(paths) > 3 else "")
            out[rid] = (key, f"launch template `{key[1]}` gets a new version ({shown})")
    return out


def rolls(diff: Diff) -> list[Roll]:
    """Every node group `pulumi up` updates (not replaces) in a way that replaces its nodes."""
    updated = {c.key: c for c in diff.updated}
    templates = _template_causes(diff, updated)
    replaced = {c.key for c in diff.replaced}
    out = []
    for key, record in sorted(diff.head.resources.items()):
        if key[0] not in NODE_GROUPS or key in replaced or key not in diff.base.resources:
            continue
        causes: list[str] = []
        if key in updated:
            own = [p for p in _inputs_of(updated[key]) if any(touches(p, f) for f in ROLLING_INPUTS)]
            causes += [_shown(diff, key, p) for p in own]
        text = repr(diff.base.resources[key].get("inputs"))
        mine = [template for rid, template in templates.items() if rid in text]
        causes += [cause for _, cause in mine]
        if causes:
            out.append(Roll(key, group_name(record), node_count(record), tuple(causes), tuple(t for t, _ in mine)))
    return out


# ---------------------------------------------------------------------------------------------
# Stateful deletions and replacements
# ---------------------------------------------------------------------------------------------

LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
PV = "kubernetes:core/v1:PersistentVolume"
STATEFULSET = "kubernetes:apps/v1:StatefulSet"
# Deleting these deletes data, or what reads it.
DELETED: dict[str, str] = {
    LUSTRE: "FSx for Lustre file system and every file on it",
    "aws:efs/fileSystem:FileSystem": "EFS file system and every file on it",
    "aws:ebs/volume:Volume": "EBS volume and its data",
    "aws:s3/bucket:Bucket": "S3 bucket (with forceDestroy, its objects too)",
    "aws:s3/bucketV2:BucketV2": "S3 bucket (with forceDestroy, its objects too)",
    "aws:kms/key:Key": "KMS key, scheduled for deletion: what it encrypted (backups, volumes) cannot be read after",
    "aws:cloudwatch/logGroup:LogGroup": "CloudWatch log group and its logs",
    PV: "PersistentVolume",
    "kubernetes:core/v1:PersistentVolumeClaim": "PersistentVolumeClaim: its volume is released",
    STATEFULSET: "StatefulSet and its pods",
}


FILE_SYSTEMS = (LUSTRE, "aws:efs/fileSystem:FileSystem")


def _pv_detail(diff: Diff, record: dict) -> str:
    """The PV's reclaim policy, and whether the file system behind it (its CSI volumeHandle: the FSx or
    EFS file system id, ``fs-...[::fsap-...]`` for EFS) is deleted by the same change."""
    spec = (record.get("inputs") or {}).get("spec") or {}
    policy = spec.get("persistentVolumeReclaimPolicy") or "Retain"
    handle = str((spec.get("csi") or {}).get("volumeHandle") or "")
    gone = [
        k[1]
        for k in diff.resources_removed
        if k[0] in FILE_SYSTEMS and handle and str(diff.base.resources[k].get("id")) == handle.split("::")[0]
    ]
    if gone:
        return f"reclaim policy {policy}, but its file system `{gone[0]}` is deleted too (above)"
    if policy == "Delete":
        return "reclaim policy Delete: the storage behind it is deleted"
    return f"reclaim policy {policy}: the storage behind it stays"


def _users(diff: Diff, key: Key) -> list[str]:
    """Base resources that depend on ``key`` (dependsOn): the jobs that rendezvous on etcd, say."""
    want = {"type": key[0], "name": key[1]}
    return sorted(k[1] for k, r in diff.base.resources.items() if want in (r.get("dependsOn") or []))


def _claims(record: dict) -> str:
    spec = (record.get("inputs") or {}).get("spec") or {}
    templates = spec.get("volumeClaimTemplates") or []
    if not templates:
        return "its members' data is on emptyDir and goes with the pods"
    when = (spec.get("persistentVolumeClaimRetentionPolicy") or {}).get("whenDeleted") or "Retain"
    return f"{len(templates)} volume claim template(s): whenDeleted {when}"


def details(diff: Diff, key: Key, record: dict) -> list[str]:
    """What else the reviewer should know of one deleted stateful resource."""
    out = []
    options = record.get("options") or {}
    if key[0] == LUSTRE:
        skip = (record.get("inputs") or {}).get("skipFinalBackup")
        final = "a final backup is taken first" if skip is False else "no final backup (skipFinalBackup is not false)"
        out.append(final)
    if key[0] == PV:
        out.append(_pv_detail(diff, record))
    if key[0] == STATEFULSET:
        out.append(_claims(record))
        users = _users(diff, key)
        if users:
            out.append(f"used by {len(users)} resource(s) of the base: " + ", ".join(f"`{u}`" for u in users[:4]))
    if options.get("protect"):
        out.append("**protected: `pulumi up` refuses to delete it** until `protect` is lifted")
    if options.get("retainOnDelete"):
        out.append("retainOnDelete: Pulumi forgets it and AWS keeps it (and bills it)")
    return out


def deletions(diff: Diff) -> list[tuple[Key, str]]:
    """(key, what its deletion means) of each stateful resource the head plan no longer has."""
    out = []
    for key in diff.resources_removed:
        if key[0] in DELETED:
            record = diff.base.resources[key]
            out.append((key, "; ".join([DELETED[key[0]], *details(diff, key, record)])))
    return out


def _name(key: Key) -> str:
    return f"`{key[1]}` (`{key[0]}`)"


def lines(diff: Diff) -> list[str]:
    """The words that lead the diff: deletions and replacements of stateful resources, and rolls."""
    items = [f"- **DELETES** {_name(k)}: {what}." for k, what in deletions(diff)]
    items += [f"- **REPLACES** {_name(c.key)}: {c.stateful}." for c in diff.replaced if c.stateful]
    for r in rolls(diff):
        items.append(
            f"- **ROLLS** every node of node group `{r.group}` (`{r.key[1]}`): {r.nodes}. EKS starts new nodes and "
            f"drains the old ones: the jobs on them are stopped. Because {'; '.join(r.causes)}."
        )
    if not items:
        return []
    return ["**`pulumi up` deletes or disrupts stateful resources:**", "", *items, ""]


def disruptive(diff: Diff) -> bool:
    """Whether the change deletes or replaces a stateful resource, or rolls a node group's nodes."""
    return bool(deletions(diff) or any(c.stateful for c in diff.replaced) or rolls(diff))
