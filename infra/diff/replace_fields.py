"""Which input changes make `pulumi up` replace a resource instead of updating it in place, per
resource type the stack uses, with where each rule comes from.

The bridged AWS provider marks an input "replace on change" where the Terraform provider it wraps
(hashicorp/terraform-provider-aws) declares the attribute ``ForceNew``; the fields below are those
attributes in Pulumi's camelCase. pulumi-kubernetes replaces an object when a field of its
``forceNew`` table changes (provider/pkg/provider/diff.go): ``metadata.name`` and
``metadata.namespace`` for every kind, and fields Kubernetes keeps immutable for some kinds.
pulumi-eks's components pass their inputs on to the aws resources named in each entry.

A path names an input and everything under it: ``scalingConfig`` covers ``scalingConfig.maxSize``;
``[*]`` stands for any list index. Only what was read from the sources is here: a type that is not
in ``RULES`` gets no verdict (the diff says so), rather than a guess.

The provider packages in the virtualenv hold no schema. pulumi-aws's schema.json (pulumi-aws pinned
at 7.51.1 in requirements.txt) could not be fetched here (the repository is over the size limit),
so the AWS rules were read in the Terraform provider's resource files at the commits named; where
a newer provider version relaxed a rule, the diff says "replace" where `pulumi preview` may say
"update": it errs towards warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (old inputs, new inputs) -> the inputs whose change replaces the resource, for a rule on values.
Conditional = Callable[[dict[str, Any], dict[str, Any]], tuple[str, ...]]


@dataclass(frozen=True)
class Rule:
    """The replace-on-change inputs of one resource type and where they were read."""

    fields: tuple[str, ...]  # input paths; a change at or under one replaces the resource
    source: str  # repository, file and commit (or tag) the fields were read in
    note: str = ""  # a replacement the table cannot express (it depends on old and new values)
    note_fields: tuple[str, ...] = ()  # the inputs whose change makes the note worth showing
    in_place: tuple[str, ...] = ()  # inputs under a field that change in place all the same
    replaces_when: Conditional | None = None  # replacements that depend on the old and new values


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _version(value: Any) -> tuple[int, ...] | None:
    parts = str(value).split(".") if value is not None else []
    return tuple(int(p) for p in parts) if parts and all(p.isdigit() for p in parts) else None


def lustre_replaces(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, ...]:
    """FSx for Lustre's replacements on values. storageCapacity: a smaller one, or any change on SCRATCH_1
    (terraform-provider-aws internal/service/fsx/lustre_file_system.go at 06ee53d9fed4,
    resourceLustreFileSystemSchemaCustomizeDiff: ``d.ForceNew("storage_capacity")``).
    fileSystemTypeVersion: a lower version only; a higher one is an in-place upgrade (pulumi-aws 7.51.1,
    sdk/python/pulumi_aws/fsx/lustre_file_system.py, ``file_system_type_version``: "Changing this value to
    a higher version triggers an in-place upgrade. Changing to a lower version forces resource
    replacement")."""
    out: list[str] = []
    was, now = _number(old.get("storageCapacity")), _number(new.get("storageCapacity"))
    if was is not None and now is not None and (now < was or (now != was and new.get("deploymentType") == "SCRATCH_1")):
        out.append("storageCapacity")
    v_was, v_now = _version(old.get("fileSystemTypeVersion")), _version(new.get("fileSystemTypeVersion"))
    if v_was is not None and v_now is not None and v_now < v_was:
        out.append("fileSystemTypeVersion")
    return tuple(out)


_TF = "hashicorp/terraform-provider-aws"
_K8S = (
    "pulumi/pulumi-kubernetes provider/pkg/provider/diff.go (forceNew; unchanged since 2026-02-18, "
    "read at 94977969, after v4.32.0; pinned 4.34.2)"
)
_EKS = (
    "pulumi/pulumi-eks nodejs/eks/cluster/cluster.ts and provider/cmd/pulumi-resource-eks/schema.json at 7bf0c1b1 "
    "(after v4.3.0; pinned 4.4.0)"
)

_EKS_CLUSTER = Rule(
    (
        "name",
        "roleArn",
        "bootstrapSelfManagedAddons",
        "accessConfig.bootstrapClusterCreatorAdminPermissions",
        "kubernetesNetworkConfig.ipFamily",
        "kubernetesNetworkConfig.serviceIpv4Cidr",
        "outpostConfig",
        "remoteNetworkConfig",
    ),
    f"{_TF} internal/service/eks/cluster.go at 00555dc5b38f",
    "removing encryptionConfig also replaces it (CustomizeDiff ForceNewIfChange)",
    ("encryptionConfig",),
)
_NODE_GROUP_FIELDS = (
    "amiType",
    "capacityType",
    "diskSize",
    "instanceTypes",
    "launchTemplate.id",
    "launchTemplate.name",
    "nodeGroupName",
    "nodeGroupNamePrefix",
    "remoteAccess",
    "subnetIds",
)
_NODE_GROUP_SOURCE = f"{_TF} internal/service/eks/node_group.go at 012e0a32f068"

# Kubernetes: every kind is replaced when its name or namespace changes.
K8S_METADATA = ("metadata.name", "metadata.namespace")
_LABEL_SELECTOR = ("spec.selector",)
_CONTAINER = tuple(
    f"spec.{c}[*].{f}"
    for c in ("containers", "initContainers")
    for f in (
        "args",
        "command",
        "env",
        "image",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "ports",
        "readinessProbe",
        "resources",
        "securityContext",
        "stdin",
        "stdinOnce",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    )
)
# kind -> fields beyond the metadata ones (group/version as pulumi-kubernetes keys them).
K8S_KINDS: dict[str, tuple[str, ...]] = {
    "apps/v1:DaemonSet": _LABEL_SELECTOR,
    "apps/v1:Deployment": _LABEL_SELECTOR,
    "apps/v1:StatefulSet": (
        "spec.podManagementPolicy",
        "spec.revisionHistoryLimit",
        "spec.serviceName",
        "spec.volumeClaimTemplates",
        *_LABEL_SELECTOR,
    ),
    "batch/v1:Job": ("spec.completions", "spec.parallelism", "spec.template", *_LABEL_SELECTOR),
    "core/v1:PersistentVolume": tuple(
        f"spec.{s}"
        for s in (
            "awsElasticBlockStore",
            "azureDisk",
            "azureFile",
            "cephfs",
            "cinder",
            "csi",
            "fc",
            "flexVolume",
            "flocker",
            "gcePersistentDisk",
            "glusterfs",
            "hostPath",
            "iscsi",
            "local",
            "nfs",
            "photonPersistentDisk",
            "portworxVolume",
            "quobyte",
            "rbd",
            "scaleIO",
            "storageos",
            "vsphereVolume",
        )
    ),
    "core/v1:PersistentVolumeClaim": ("spec.accessModes", "spec.storageClassName", "spec.volumeName", "spec.selector"),
    "core/v1:Pod": (
        *(
            f"spec.{f}"
            for f in (
                "affinity",
                "automountServiceAccountToken",
                "dnsConfig",
                "dnsPolicy",
                "enableServiceLinks",
                "hostAliases",
                "hostIPC",
                "hostNetwork",
                "hostPID",
                "hostname",
                "imagePullSecrets",
                "nodeName",
                "nodeSelector",
                "overhead",
                "preemptionPolicy",
                "priority",
                "priorityClassName",
                "readinessGates",
                "restartPolicy",
                "runtimeClassName",
                "schedulerName",
                "securityContext",
                "serviceAccount",
                "serviceAccountName",
                "shareProcessNamespace",
                "subdomain",
                "terminationGracePeriodSeconds",
                "volumes",
            )
        ),
        *_CONTAINER,
    ),
    "core/v1:ResourceQuota": ("spec.scopes",),
    # A Secret is replaced on any data change unless the provider sets enableSecretMutable (ours does not).
    "core/v1:Secret": ("type", "stringData", "data"),
    # Likewise a ConfigMap unless the provider sets enableConfigMapMutable (ours does not).
    "core/v1:ConfigMap": ("binaryData", "data"),
    "core/v1:Service": ("spec.clusterIP",),
    "policy/v1beta1:PodDisruptionBudget": ("spec",),
    "rbac.authorization.k8s.io/v1:ClusterRoleBinding": ("roleRef",),
    "rbac.authorization.k8s.io/v1:RoleBinding": ("roleRef",),
    "storage.k8s.io/v1:StorageClass": ("parameters", "provisioner"),
}

RULES: dict[str, Rule] = {
    "aws:eks/cluster:Cluster": _EKS_CLUSTER,
    # The component's inputs that reach its aws:eks/cluster:Cluster's replace-on-change fields
    # (name, serviceRole -> roleArn, bootstrapSelfManagedAddons, ipFamily and
    # kubernetesServiceIpAddressRange -> kubernetesNetworkConfig); ipFamily is replaceOnChanges in
    # the component's own schema too.
    "eks:index:Cluster": Rule(
        ("name", "serviceRole", "bootstrapSelfManagedAddons", "ipFamily", "kubernetesServiceIpAddressRange"),
        f"{_EKS}; {_TF} internal/service/eks/cluster.go at 00555dc5b38f",
        "removing encryptionConfigKeyArn also replaces the cluster "
        "(CustomizeDiff ForceNewIfChange on encryptionConfig)",
        ("encryptionConfigKeyArn",),
    ),
    "aws:eks/nodeGroup:NodeGroup": Rule(("clusterName", "nodeRoleArn", *_NODE_GROUP_FIELDS), _NODE_GROUP_SOURCE),
    # pulumi-eks hands these inputs to its aws:eks/nodeGroup:NodeGroup (cluster -> clusterName,
    # nodeRole -> nodeRoleArn).
    "eks:index:ManagedNodeGroup": Rule(
        ("cluster", "clusterName", "nodeRole", "nodeRoleArn", *_NODE_GROUP_FIELDS), f"{_EKS}; {_NODE_GROUP_SOURCE}"
    ),
    "aws:eks/addon:Addon": Rule(("addonName", "clusterName"), f"{_TF} internal/service/eks/addon.go at 00a35305dc1b"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": Rule(
        (
            "backupId",
            "copyTagsToBackups",
            "deploymentType",
            "driveCacheType",
            "exportPath",
            "importPath",
            "importedFileChunkSize",
            "kmsKeyId",
            "perUnitStorageThroughput",
            "securityGroupIds",
            "storageType",
            "subnetIds",
        ),
        f"{_TF} internal/service/fsx/lustre_file_system.go at 06ee53d9fed4; fileSystemTypeVersion: pulumi-aws "
        "7.51.1 (a lower version replaces it, a higher one upgrades it in place)",
        replaces_when=lustre_replaces,
    ),
    "aws:efs/fileSystem:FileSystem": Rule(
        ("availabilityZoneName", "creationToken", "encrypted", "kmsKeyId", "performanceMode"),
        f"{_TF} internal/service/efs/file_system.go at 0389f4671dd9",
    ),
    "aws:efs/mountTarget:MountTarget": Rule(
        ("fileSystemId", "ipAddress", "subnetId"), f"{_TF} internal/service/efs/mount_target.go at 0593466d96e3"
    ),
    "aws:kms/key:Key": Rule(
        ("customKeyStoreId", "customerMasterKeySpec", "keyUsage", "multiRegion", "xksKeyId"),
        f"{_TF} internal/service/kms/key.go at 00a35305dc1b",
    ),
    "aws:ec2/subnet:Subnet": Rule(
        (
            "availabilityZone",
            "availabilityZoneId",
            "cidrBlock",
            "ipv4IpamPoolId",
            "ipv4NetmaskLength",
            "ipv6IpamPoolId",
            "ipv6Native",
            "ipv6NetmaskLength",
            "outpostArn",
            "vpcId",
        ),
        f"{_TF} internal/service/ec2/vpc_subnet.go at 00cda125a19d",
    ),
    "aws:ec2/securityGroup:SecurityGroup": Rule(
        ("description", "name", "namePrefix", "vpcId"),
        f"{_TF} internal/service/ec2/vpc_security_group.go at 01606926a0c0",
    ),
    "aws:ec2/placementGroup:PlacementGroup": Rule(
        ("name", "partitionCount", "spreadLevel", "strategy"),
        f"{_TF} internal/service/ec2/ec2_placement_group.go at 05e34de73422",
    ),
    # Any other change makes a new template version in place (the node groups on it roll: infra/diff/impact.py).
    "aws:ec2/launchTemplate:LaunchTemplate": Rule(
        ("name", "namePrefix"), f"{_TF} internal/service/ec2/ec2_launch_template.go at 025e4f81cab8"
    ),
    "aws:iam/role:Role": Rule(("name", "namePrefix", "path"), f"{_TF} internal/service/iam/role.go at 0040ea6911af"),
    # This project's own dynamic provider: a training job cannot change, so anything of its request
    # but the tags (or its region) makes a new job; the tags change in place.
    "pulumi-python:dynamic/gputraining:SageMakerTrainingJob": Rule(
        ("request", "region"),
        "providers/sagemaker_training_job.py TrainingJobProvider.diff (this repository)",
        in_place=("request.Tags",),
    ),
    # Helm releases: pulumi-kubernetes provider/pkg/provider/helm_release.go (forceNewFields).
    "kubernetes:helm.sh/v3:Release": Rule(
        ("name", "namespace"), "pulumi/pulumi-kubernetes provider/pkg/provider/helm_release.go at 94977969"
    ),
}

# Replacing these loses data or takes long (or both): listed first, with what the replacement means.
STATEFUL: dict[str, str] = {
    "eks:index:Cluster": "a new EKS control plane: every node group, add-on and Kubernetes object is created again",
    "aws:eks/cluster:Cluster": (
        "a new EKS control plane: every node group, add-on and Kubernetes object is created again"
    ),
    "aws:fsx/lustreFileSystem:LustreFileSystem": "a new, empty FSx for Lustre file system",
    "aws:efs/fileSystem:FileSystem": "a new, empty EFS file system",
    "aws:eks/nodeGroup:NodeGroup": "new nodes: the pods and jobs on the old ones are stopped",
    "eks:index:ManagedNodeGroup": "new nodes: the pods and jobs on the old ones are stopped",
    "aws:kms/key:Key": "a new KMS key (the old one is scheduled for deletion; what it encrypted is re-created)",
    "kubernetes:apps/v1:StatefulSet": "its pods are deleted and created again",
    "kubernetes:core/v1:PersistentVolumeClaim": "a new claim: the volume behind it may be released",
}


def rule_for(typ: str) -> Rule | None:
    """The replace-on-change rule of a resource type, or None when the table has none."""
    if typ in RULES:
        return RULES[typ]
    if typ.startswith("kubernetes:") and typ.count(":") == 2:
        _, group_version, kind = typ.split(":")
        if group_version in ("helm.sh/v3", "helm.sh/v4") or group_version.startswith("kustomize"):
            return None
        extra = K8S_KINDS.get(f"{group_version}:{kind}", ())
        return Rule((*K8S_METADATA, *extra), _K8S)
    return None
