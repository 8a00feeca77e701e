"""Shared storage for training data and checkpoints.

- ``EfsStore``: encrypted EFS, a mount target per private subnet, NFS (2049) from the nodes only, the
  ``aws-efs-csi-driver`` add-on with its own role (Pod Identity), a StorageClass and a static
  ReadWriteMany PV (Retain) + PVC in the training namespace.
- ``FsxStore``: FSx for Lustre in the GPU AZ subnet (never another AZ), TCP 988 and 1018-1023 from
  the nodes and from itself (rules created before the file system), optional S3 link, the
  ``aws-fsx-csi-driver`` add-on with its own role, and a static PV (volumeHandle, dnsname, mountname,
  real capacity, Retain) + PVC (its request is the size it was created with: ``ignoreChanges``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.iam import pod_identity_role

LUSTRE_PORTS = ((988, 988), (1018, 1023))
NFS_PORT = 2049
CLAIM_REQUEST = "spec.resources.requests"  # the FSx claim's input that keeps its first value (ignoreChanges)


@dataclass(frozen=True)
class CsiDriver:
    """A CSI driver's EKS add-on, the service account its controller runs as, the AWS managed
    policy it documents, and the add-on configuration that lets its node DaemonSet run on tainted
    GPU nodes (without it GPU pods cannot mount the volume)."""

    addon_name: str
    service_account: str
    managed_policy: str  # path under arn:aws:iam::aws:policy/
    node_config: dict


# No configuration values are sent: both node DaemonSets tolerate every taint by default (EFS chart
# node.tolerations [{operator: Exists}]; FSx chart 1.17.0 / driver v1.9.0 node.tolerateAllTaints:
# true), so they run on tainted GPU nodes as they are, and values that restate defaults only add a
# schema to break on a future build.
EFS_CSI = CsiDriver("aws-efs-csi-driver", "efs-csi-controller-sa", "service-role/AmazonEFSCSIDriverPolicy", {})
FSX_CSI = CsiDriver("aws-fsx-csi-driver", "fsx-csi-controller-sa", "AmazonFSxFullAccess", {})


def _k8s_name(cluster_name: str) -> str:
    """The cluster name as a Kubernetes object name: EKS allows upper case and '_', DNS names do not."""
    return cluster_name.lower().replace("_", "-")


def _storage_key(
    name: str, parent: pulumi.Resource, description: str, protect: bool, tags: dict[str, str], retain: bool = False
) -> aws.kms.Key:
    """A customer managed key for a store, protected together with the data it encrypts. ``retain``:
    `pulumi destroy` leaves the key (backups encrypted with it outlive the store and need it)."""
    return aws.kms.Key(
        f"{name}-key",
        description=description,
        enable_key_rotation=True,
        deletion_window_in_days=30,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, protect=protect, retain_on_delete=retain or None),
    )


def _csi_addon(
    name: str,
    parent: pulumi.Resource,
    cluster_name: str,
    driver: CsiDriver,
    addon_version: str,
    tags: dict[str, str],
    depends_on: list[pulumi.Resource],
) -> aws.eks.Addon:
    role = pod_identity_role(
        f"{name}-csi",
        description=f"{driver.addon_name} controller of {cluster_name} (Pod Identity)",
        managed_policies=(driver.managed_policy,),
        tags=tags,
        parent=parent,
    )
    return aws.eks.Addon(
        f"{name}-csi",
        cluster_name=cluster_name,
        addon_name=driver.addon_name,
        addon_version=addon_version,
        pod_identity_associations=[
            aws.eks.AddonPodIdentityAssociationArgs(role_arn=role.arn, service_account=driver.service_account)
        ],
        configuration_values=json.dumps(driver.node_config) if driver.node_config else None,
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="OVERWRITE",
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
    )


# ---------------------------------------------------------------------------------------------
# EFS
# ---------------------------------------------------------------------------------------------


@dataclass
class EfsStoreArgs:
    cluster_name: str  # EKS cluster that gets the CSI add-on; also names the security group, file system and PV
    vpc_id: pulumi.Input[str]  # VPC of the NFS security group
    subnet_ids: Sequence[pulumi.Input[str]]  # the private subnets: one mount target each
    node_security_group_id: pulumi.Input[str]  # the nodes' security group (the cluster security group), allowed NFS in
    namespace: pulumi.Input[str]  # namespace of the PVC (the training namespace)
    addon_version: str  # version of the aws-efs-csi-driver managed add-on
    throughput_mode: str = "elastic"  # EFS throughput mode: "elastic" or "bursting"
    performance_mode: str = "generalPurpose"  # EFS performance mode: "generalPurpose" or "maxIO"
    protect: bool = False  # protect the file system and its KMS key from `pulumi destroy`
    cluster_ready: list[pulumi.Resource] = field(default_factory=list)  # what the add-on needs first
    tags: dict[str, str] = field(default_factory=dict)  # tags on every AWS resource of the component


class EfsStore(pulumi.ComponentResource):
    CLAIM = "efs-claim"
    STORAGE_CLASS = "efs-sc"

    def __init__(self, name: str, args: EfsStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:EfsStore", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)

        sg = aws.ec2.SecurityGroup(
            f"{name}-nfs",
            vpc_id=args.vpc_id,
            description=f"EFS for {args.cluster_name}: NFS from the cluster nodes only",
            tags={**tags, "Name": f"{args.cluster_name}-efs"},
            opts=child,
        )
        nfs_in = aws.vpc.SecurityGroupIngressRule(
            f"{name}-nfs-from-nodes",
            security_group_id=sg.id,
            referenced_security_group_id=args.node_security_group_id,
            ip_protocol="tcp",
            from_port=NFS_PORT,
            to_port=NFS_PORT,
            description="NFS from the cluster nodes",
            opts=child,
        )
        key = _storage_key(name, self, f"EFS of {args.cluster_name}", args.protect, tags)
        self.file_system = aws.efs.FileSystem(
            f"{name}-fs",
            encrypted=True,
            kms_key_id=key.arn,
            throughput_mode=args.throughput_mode,
            performance_mode=args.performance_mode,
            tags={**tags, "Name": f"{args.cluster_name}-shared"},
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        mount_targets = [
            aws.efs.MountTarget(
                f"{name}-mt-{i}",
                file_system_id=self.file_system.id,
                subnet_id=subnet_id,
                security_groups=[sg.id],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[nfs_in]),
            )
            for i, subnet_id in enumerate(args.subnet_ids)
        ]
        addon = _csi_addon(name, self, args.cluster_name, EFS_CSI, args.addon_version, tags, args.cluster_ready)

        k8s_opts = pulumi.ResourceOptions(parent=self, depends_on=[addon, *mount_targets])
        k8s.storage.v1.StorageClass(
            f"{name}-sc",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=self.STORAGE_CLASS),
            provisioner="efs.csi.aws.com",
            reclaim_policy="Retain",
            parameters={"provisioningMode": "efs-ap", "fileSystemId": self.file_system.id, "directoryPerms": "700"},
            opts=k8s_opts,
        )
        pv = k8s.core.v1.PersistentVolume(
            f"{name}-pv",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"{_k8s_name(args.cluster_name)}-efs", labels={"gputraining/store": "efs"}
            ),
            spec=k8s.core.v1.PersistentVolumeSpecArgs(
                capacity={"storage": "5Ti"},  # EFS is elastic; Kubernetes requires a number
                volume_mode="Filesystem",
                access_modes=["ReadWriteMany"],
                persistent_volume_reclaim_policy="Retain",
                storage_class_name=self.STORAGE_CLASS,
                csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                    driver="efs.csi.aws.com", volume_handle=self.file_system.id
                ),
            ),
            opts=k8s_opts,
        )
        self.claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-pvc",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=self.CLAIM, namespace=args.namespace),
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteMany"],
                storage_class_name=self.STORAGE_CLASS,
                volume_name=pv.metadata.name,
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": "5Ti"}),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[pv]),
        )
        self.file_system_id = self.file_system.id
        self.security_group_id = sg.id
        self.mount_targets: list[pulumi.Resource] = list(mount_targets)  # clients outside the cluster wait for these
        self.register_outputs({"fileSystemId": self.file_system.id, "claim": self.CLAIM})


# ---------------------------------------------------------------------------------------------
# FSx for Lustre
# ---------------------------------------------------------------------------------------------


@dataclass
class FsxStoreArgs:
    cluster_name: str  # EKS cluster that gets the CSI add-on; also names the security group, file system and PV
    vpc_id: pulumi.Input[str]  # VPC of the Lustre security group
    subnet_id: pulumi.Input[str]  # the GPU AZ's private subnet
    availability_zone: str  # the GPU AZ (for the record; the subnet decides)
    node_security_group_id: pulumi.Input[
        str
    ]  # the nodes' security group: Lustre ports open both ways with the file system's
    namespace: pulumi.Input[str]  # namespace of the PVC (the training namespace)
    addon_version: str  # version of the aws-fsx-csi-driver managed add-on
    deployment_type: str  # SCRATCH_1, SCRATCH_2, PERSISTENT_1 or PERSISTENT_2; persistent ones get a KMS key of ours
    storage_capacity_gib: int  # file system size in GiB, also the PV's and PVC's capacity
    lustre_version: str  # FSx for Lustre version (facts/versions.py)
    per_unit_storage_throughput: int | None = None  # MB/s per TiB, used by PERSISTENT_* only
    s3_bucket: str | None = None  # bucket linked through a data repository association; None: no S3 link
    s3_prefix: str = ""  # key prefix inside s3_bucket
    s3_file_system_path: str = "/s3"  # where the linked S3 data appears inside the file system
    s3_export: bool = False  # also export changes back to S3 (import is always on)
    protect: bool = False  # protect the file system and its KMS key from `pulumi destroy`
    backup_retention_days: int = 0  # days of daily automatic backups (PERSISTENT only; 0: none)
    backup_start_time: str = "03:00"  # UTC HH:MM of the daily backup
    # take a backup when the file system is deleted (PERSISTENT only); `pulumi destroy` then leaves the KMS key it is
    # encrypted with
    final_backup: bool = False
    cluster_ready: list[pulumi.Resource] = field(default_factory=list)  # what the add-on needs first
    tags: dict[str, str] = field(default_factory=dict)  # tags on every AWS resource of the component


class FsxStore(pulumi.ComponentResource):
    CLAIM = "fsx-claim"

    def __init__(self, name: str, args: FsxStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:FsxStore", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        persistent = args.deployment_type.startswith("PERSISTENT")

        sg = aws.ec2.SecurityGroup(
            f"{name}-lustre",
            vpc_id=args.vpc_id,
            description=f"FSx for Lustre for {args.cluster_name}: Lustre (988, 1018-1023) from the nodes and itself",
            tags={**tags, "Name": f"{args.cluster_name}-fsx"},
            opts=child,
        )
        # The file system needs only its own group's rules (the file servers talk to each other and
        # out); the rules between it and the nodes reference the cluster's security group and come
        # with the cluster, in parallel with the file system (PERSISTENT_2 takes ~15 minutes), and
        # the PV waits for them.
        rules: list[pulumi.Resource] = []
        node_rules: list[pulumi.Resource] = []
        for lo, hi in LUSTRE_PORTS:
            for source, ref in (("nodes", args.node_security_group_id), ("self", sg.id)):
                (node_rules if source == "nodes" else rules).append(
                    aws.vpc.SecurityGroupIngressRule(
                        f"{name}-lustre-{lo}-{hi}-from-{source}",
                        security_group_id=sg.id,
                        referenced_security_group_id=ref,
                        ip_protocol="tcp",
                        from_port=lo,
                        to_port=hi,
                        description=f"Lustre {lo}-{hi} from {source}",
                        opts=child,
                    )
                )
            # The file servers talk back to the clients on the same ports.
            node_rules.append(
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{lo}-{hi}-to-nodes",
                    security_group_id=args.node_security_group_id,
                    referenced_security_group_id=sg.id,
                    ip_protocol="tcp",
                    from_port=lo,
                    to_port=hi,
                    description=f"Lustre {lo}-{hi} from FSx to the nodes",
                    opts=child,
                )
            )
        rules.append(
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-lustre-out",
                security_group_id=sg.id,
                cidr_ipv4="0.0.0.0/0",
                ip_protocol="-1",
                description="Lustre servers to clients and S3",
                opts=child,
            )
        )

        # Persistent file systems are encrypted with a key of ours; scratch ones with FSx's own. The final
        # backup is encrypted with the same key and outlives the stack: a key deleted with the stack
        # (scheduled, 30 days) would leave it unrestorable, so `pulumi destroy` then leaves the key.
        retain_key = persistent and args.final_backup
        key = (
            _storage_key(name, self, f"FSx for Lustre of {args.cluster_name}", args.protect, tags, retain=retain_key)
            if persistent
            else None
        )
        self.kms_key_arn: pulumi.Output[str] | None = key.arn if key else None
        self.kms_key_retained = retain_key
        s3_path = f"s3://{args.s3_bucket}/{args.s3_prefix}".rstrip("/") if args.s3_bucket else None
        self.file_system = aws.fsx.LustreFileSystem(
            f"{name}-fs",
            subnet_ids=args.subnet_id,
            security_group_ids=[sg.id],
            deployment_type=args.deployment_type,
            storage_capacity=args.storage_capacity_gib,
            storage_type="SSD",
            per_unit_storage_throughput=args.per_unit_storage_throughput if persistent else None,
            file_system_type_version=args.lustre_version,
            data_compression_type="LZ4",
            kms_key_id=key.arn if key else None,
            # Daily automatic backups (PERSISTENT only) and a final backup when the file system is
            # deleted; AWS allows neither on SCRATCH file systems.
            automatic_backup_retention_days=args.backup_retention_days if persistent else None,
            daily_automatic_backup_start_time=args.backup_start_time
            if persistent and args.backup_retention_days
            else None,
            skip_final_backup=(not args.final_backup) if persistent else None,
            tags={**tags, "Name": f"{args.cluster_name}-lustre"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=rules, protect=args.protect),
        )
        # Lustre 2.12+ links S3 through data repository associations (the file system's own
        # import/export paths are the Lustre 2.10 way); SCRATCH_1 has none (config refuses it).
        if args.s3_bucket:
            events = ["NEW", "CHANGED", "DELETED"]
            aws.fsx.DataRepositoryAssociation(
                f"{name}-s3",
                file_system_id=self.file_system.id,
                data_repository_path=s3_path,
                file_system_path=args.s3_file_system_path,
                batch_import_meta_data_on_create=True,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=events),
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=events)
                    if args.s3_export
                    else None,
                ),
                tags=tags,
                opts=child,
            )

        addon = _csi_addon(name, self, args.cluster_name, FSX_CSI, args.addon_version, tags, args.cluster_ready)
        pv = k8s.core.v1.PersistentVolume(
            f"{name}-pv",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=f"{_k8s_name(args.cluster_name)}-fsx", labels={"gputraining/store": "fsx"}
            ),
            spec=k8s.core.v1.PersistentVolumeSpecArgs(
                capacity={"storage": f"{args.storage_capacity_gib}Gi"},
                volume_mode="Filesystem",
                access_modes=["ReadWriteMany"],
                mount_options=["flock"],
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="",
                csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                    driver="fsx.csi.aws.com",
                    volume_handle=self.file_system.id,
                    volume_attributes={"dnsname": self.file_system.dns_name, "mountname": self.file_system.mount_name},
                ),
            ),
            # A pod can mount it only once the nodes may reach the file servers.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[addon, *node_rules]),
        )
        # The claim keeps the request it was created with; only the PV follows the file system. A static
        # claim (storageClassName "") may not grow: the API server's PersistentVolumeClaimResize admission
        # refuses any larger request of a claim that was not dynamically provisioned (kubernetes
        # plugin/pkg/admission/storage/persistentvolume/resize/admission.go), and pulumi-kubernetes patches
        # the request rather than replacing the claim. Nor may it shrink below the capacity it is bound to
        # (ValidatePersistentVolumeClaimUpdate), so a constant smaller than today's claims (deployed with the
        # file system's size) would be refused as well. Hence ``ignoreChanges``: a new claim asks for the
        # size of its day (the PV has the file system's size, which never shrinks in place, so it binds),
        # and a grown file system leaves every claim as it is. A bound claim's request is not a limit: pods mount
        # the whole file system. infra/diff/refusals.py says REFUSED for a claim whose request changes.
        self.claim = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-pvc",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=self.CLAIM, namespace=args.namespace),
            spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                volume_name=pv.metadata.name,
                resources=k8s.core.v1.VolumeResourceRequirementsArgs(
                    requests={"storage": f"{args.storage_capacity_gib}Gi"}
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[pv], ignore_changes=[CLAIM_REQUEST]),
        )
        self.file_system_id = self.file_system.id
        self.dns_name = self.file_system.dns_name
        self.mount_name = self.file_system.mount_name
        self.security_group_id = sg.id
        self.register_outputs(
            {
                "fileSystemId": self.file_system.id,
                "dnsName": self.file_system.dns_name,
                "claim": self.CLAIM,
                "kmsKeyArn": self.kms_key_arn,
            }
        )
