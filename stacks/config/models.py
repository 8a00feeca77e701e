"""The stack config's models: every key a user sets per environment in ``Pulumi.<env>.yaml``.

Each field carries a one-line description; the README's configuration reference is checked
against these models (tests/test_docs.py), so a key is documented exactly where it is declared.
Checks that need more than one field, or the catalog, live in ``stacks/config/checks.py``.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from facts import catalog, versions
from jobs.base import JobBase

NAMESPACE = "gpu-training"


class ConfigModel(BaseModel):
    """Base of every config section: camelCase keys, unknown keys refused, values frozen."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=False,
    )


def _desired_defaults_to_min(data: Any) -> Any:
    """An unset desiredSize follows minSize (so `minSize: 2` alone means two nodes)."""
    if isinstance(data, dict) and "desiredSize" not in data and "desired_size" not in data:
        for key in ("minSize", "min_size"):
            if key in data:
                return {**data, "desiredSize": data[key]}
    return data


class NetworkConfig(ConfigModel):
    """The VPC: one private subnet per AZ, public subnets for NAT and load balancers."""

    vpc_cidr: str = Field("10.0.0.0/16", description="private IPv4 range, /16../28, big enough for the subnets")
    availability_zone_count: int = Field(2, ge=2, le=6, description="AZs with a private node subnet (EKS needs 2); the GPU AZ is one of them")
    private_subnet_prefix: int = Field(
        19, ge=16, le=24, description="prefix length of each private subnet (8,190 addresses at /19, room for GPU nodes' many ENIs)"
    )
    nat_gateways: Literal["single", "perAz"] = Field("single", description="`single` (cheap, dev) or `perAz` (no cross-AZ egress dependency, prod)")


class ClusterConfig(ConfigModel):
    """The EKS control plane."""

    name: Optional[str] = Field(None, description="EKS cluster name (default `<project>-<stack>`)")
    kubernetes_version: str = Field(versions.KUBERNETES_DEFAULT, description="`1.35` or `1.36` (EKS standard support; see `facts/versions.py`)")
    endpoint_public_access: bool = Field(True, description="public API endpoint")
    endpoint_public_access_cidrs: list[str] = Field(default_factory=lambda: ["0.0.0.0/0"], description="who may reach the public endpoint")
    endpoint_private_access: bool = Field(True, description="private API endpoint inside the VPC")
    admin_principals: list[str] = Field(
        default_factory=list,
        description="IAM role/user ARNs given cluster-admin through access entries. Leave out the identity that runs "
        "`pulumi up`: EKS makes it admin already, and a second entry for it fails",
    )
    log_retention_days: int = Field(30, description="control-plane log retention (a CloudWatch retention value)")
    deletion_protection: bool = Field(False, description="EKS deletion protection")


class SystemNodeGroupConfig(ConfigModel):
    """The small on-demand group for system pods (CoreDNS, operators, etcd, CSI controllers)."""

    instance_type: str = Field("c5.2xlarge", description="one of the catalog's system types")
    min_size: int = Field(2, ge=0, description="fewest nodes")
    desired_size: int = Field(2, ge=0, description="nodes to start with (default: minSize)")
    max_size: int = Field(4, ge=1, description="most nodes")
    disk_size_gib: int = Field(100, ge=20, le=16384, alias="diskSizeGiB", description="encrypted gp3 root volume, GiB")

    _desired = model_validator(mode="before")(_desired_defaults_to_min)


class Taint(ConfigModel):
    """An extra node taint on a GPU group (the GPU taint is always there)."""

    key: str = Field(description="taint key")
    value: str = Field("", description="taint value (may be empty)")
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"] = Field("NoSchedule", description="taint effect")


class PlacementGroupConfig(ConfigModel):
    """Where a GPU group's instances are placed."""

    mode: Literal["create", "existing", "none"] = Field(
        "create",
        description="`create`: a new cluster placement group in the GPU AZ; `existing`: the named one; `none`: no "
        "placement group (for capacity reservations and blocks that bring their own placement)",
    )
    name: Optional[str] = Field(None, description="the placement group's name, with mode `existing`")


CapacityType = Literal["on-demand", "spot", "capacity-block"]


class GpuNodeGroupConfig(ConfigModel):
    """One GPU node group, pinned to the GPU AZ."""

    name: str = Field(description="lower-case, unique; also the node label `gputraining/node-group`")
    instance_type: str = Field(description="a GPU type of the catalog (`facts/catalog.py`)")
    min_size: int = Field(0, ge=0, description="fewest nodes; groups can sit at zero")
    desired_size: int = Field(0, ge=0, description="nodes to start with (default: minSize)")
    max_size: int = Field(2, ge=1, description="most nodes")
    disk_size_gib: int = Field(500, ge=20, le=16384, alias="diskSizeGiB", description="encrypted gp3 root volume, GiB")
    capacity_type: CapacityType = Field("on-demand", description="`on-demand`, `spot` or `capacity-block`")
    capacity_reservation_id: Optional[str] = Field(None, description="`cr-...`; required for `capacity-block`")
    efa: Optional[bool] = Field(None, description="EFA on (default where the type has it) or `false`; `true` on a type without EFA is an error")
    placement_group: Optional[PlacementGroupConfig] = Field(
        None, description="`{mode: create | existing | none, name}`; default `create` for EFA groups without a reservation, else `none`"
    )
    labels: dict[str, str] = Field(default_factory=dict, description="extra node labels")
    taints: list[Taint] = Field(default_factory=list, description="extra node taints `{key, value, effect}` (the GPU taint is always there)")
    autoscale: Optional[bool] = Field(
        None,
        description=(
            "the Cluster Autoscaler sizes the group between minSize and maxSize (with `autoscaling.enabled`); desiredSize then only sets the first size. "
            "Default true; `capacity-block` groups are never autoscaled (outside the block's window every launch fails): size them with desiredSize"
        ),
    )

    _desired = model_validator(mode="before")(_desired_defaults_to_min)

    @property
    def instance(self) -> catalog.InstanceType:
        it = catalog.get(self.instance_type)
        assert it is not None, "validated config always names a catalog type"
        return it

    @property
    def autoscaled(self) -> bool:
        """Whether the group is one the Cluster Autoscaler may size (``autoscaling.enabled`` aside)."""
        return self.capacity_type != "capacity-block" if self.autoscale is None else self.autoscale

    @property
    def efa_enabled(self) -> bool:
        return self.instance.efa_supported if self.efa is None else self.efa

    @property
    def efa_interfaces(self) -> int:
        return self.instance.efa_interfaces if self.efa_enabled else 0

    @property
    def placement(self) -> PlacementGroupConfig:
        """The effective placement: explicit config, else a new cluster group for EFA groups
        without a capacity reservation, else none."""
        if self.placement_group is not None:
            return self.placement_group
        if self.efa_enabled and not self.capacity_reservation_id:
            return PlacementGroupConfig(mode="create")
        return PlacementGroupConfig(mode="none")


class EfsConfig(ConfigModel):
    """EFS: shared RWX storage for code, checkpoints and logs."""

    enabled: bool = Field(True, description="EFS + CSI driver + PV/PVC `efs-claim`")
    throughput_mode: Literal["elastic", "bursting"] = Field("elastic", description="EFS throughput mode")
    performance_mode: Literal["generalPurpose", "maxIO"] = Field("generalPurpose", description="EFS performance mode")


class S3LinkConfig(ConfigModel):
    """An S3 bucket/prefix linked to FSx for import (and optionally export)."""

    bucket: str = Field(description="bucket name (no s3://)")
    prefix: str = Field("", description="key prefix inside the bucket")
    file_system_path: str = Field("/s3", description="where the linked data appears inside the file system")
    export: bool = Field(False, description="also export changes back to S3")


FsxDeploymentType = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]


class FsxConfig(ConfigModel):
    """FSx for Lustre: fast training data in the GPU AZ."""

    enabled: bool = Field(True, description="FSx for Lustre + CSI driver + PV/PVC `fsx-claim`")
    deployment_type: FsxDeploymentType = Field("SCRATCH_2", description="`SCRATCH_1`, `SCRATCH_2`, `PERSISTENT_1`, `PERSISTENT_2`")
    storage_capacity_gib: int = Field(1200, alias="storageCapacityGiB", description="1200, 2400, then steps of 2400 (3600 for SCRATCH_1)")
    per_unit_storage_throughput: Optional[int] = Field(None, description="MB/s/TiB: PERSISTENT_1 50/100/200; PERSISTENT_2 125/250/500/1000")
    s3: Optional[S3LinkConfig] = Field(None, description="`{bucket, prefix, fileSystemPath: /s3, export: false}`: import (and export) an S3 prefix")
    backup_retention_days: int = Field(0, ge=0, le=90, description="days of daily automatic backups, 0-90 (PERSISTENT types only; 0: none)")
    backup_start_time: str = Field("03:00", description="UTC time `HH:MM` of the daily automatic backup")
    final_backup: bool = Field(False, description="take a backup when the file system is deleted (PERSISTENT types only)")


class StorageConfig(ConfigModel):
    """The shared stores."""

    efs: EfsConfig = Field(EfsConfig(), description="EFS settings")
    fsx: FsxConfig = Field(FsxConfig(), description="FSx for Lustre settings")
    deletion_protection: bool = Field(True, description="protect file systems and their KMS keys from `pulumi destroy`")


class EtcdConfig(ConfigModel):
    """etcd for PyTorch's etcd rendezvous (v2 API)."""

    enabled: bool = Field(True, description="etcd for elastic rendezvous")
    replicas: int = Field(1, description="members: 1, 3 or 5")
    cpu: str = Field("250m", description="CPU request per member (a Kubernetes quantity: `250m`, `1`, `0.5`)")
    memory: str = Field("512Mi", description="memory request (and limit) per member")

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _quantity_as_text(cls, value: Any) -> Any:
        """YAML reads `cpu: 1` as a number; a Kubernetes quantity is its text."""
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return format(value, "g") if isinstance(value, float) else str(value)
        return value


class ServicesConfig(ConfigModel):
    """Cluster services that can be switched off per environment."""

    training_namespace: str = Field("training", description="namespace of the PVCs, etcd and jobs")
    nvidia_device_plugin: bool = Field(True, description="install the NVIDIA device plugin")
    efa_device_plugin: bool = Field(True, description="install the EFA device plugin")
    mpi_operator: bool = Field(True, description="install the MPI operator")
    training_operator: bool = Field(True, description="install the training operator")


class AutoscalingConfig(ConfigModel):
    """The Cluster Autoscaler: GPU groups grow from zero when a job waits, and shrink when idle."""

    enabled: bool = Field(True, description="run the Cluster Autoscaler for the GPU groups with `autoscale: true`")
    scale_down_unneeded_time: str = Field("10m", description="how long an idle GPU node stays before it is removed (a duration like `10m`, `1h`)")
    scale_down_delay_after_add: str = Field("10m", description="no scale-down for this long after a scale-up (a duration like `10m`)")
    expander: Literal["least-waste", "most-pods", "random"] = Field(
        "least-waste", description="which group grows when several could: `least-waste`, `most-pods` or `random`"
    )

    @field_validator("expander", mode="before")
    @classmethod
    def _no_priority_expander(cls, value: Any) -> Any:
        """`priority` needs a priorities ConfigMap of ASG-name patterns, which the stack does not
        make: without one the autoscaler skips the expander and picks at random. The stack's jobs
        each select one group, so only pods that fit several groups ever reach an expander."""
        if value == "priority":
            raise PydanticCustomError(
                "expander_priority",
                "the priority expander is not offered: it needs per-group priorities the stack does not take, and "
                "without them the autoscaler picks at random. Every job of the stack selects its node group, so the "
                "expander only decides for other pods that fit several groups. Allowed: least-waste, most-pods, random",
            )
        return value


class MonitoringConfig(ConfigModel):
    """CloudWatch Container Insights with GPU and EFA metrics, and a dashboard."""

    enabled: bool = Field(True, description="CloudWatch observability add-on (Container Insights, GPU/EFA metrics)")
    log_retention_days: int = Field(30, description="Container Insights log retention (a CloudWatch retention value)")
    dashboard: bool = Field(True, description="a GPU/EFA dashboard per cluster")


class StackConfig(ConfigModel):
    """The whole validated config of one stack."""

    project: str = Field(description="Pulumi project name")
    stack: str = Field(description="Pulumi stack name")
    region: str = Field(description="AWS region (`aws:region`)")
    gpu_availability_zone: str = Field(
        "auto",
        description="the one AZ of every GPU node group, FSx and the placement groups. `auto` picks the first AZ "
        "(by name) that offers every configured GPU type; pin it once chosen",
    )
    network: NetworkConfig = Field(NetworkConfig(), description="the VPC")
    cluster: ClusterConfig = Field(ClusterConfig(), description="the EKS control plane")
    system_node_group: SystemNodeGroupConfig = Field(SystemNodeGroupConfig(), description="the system node group")
    gpu_node_groups: list[GpuNodeGroupConfig] = Field(default_factory=list, description="GPU node groups")
    storage: StorageConfig = Field(StorageConfig(), description="EFS and FSx for Lustre")
    etcd: EtcdConfig = Field(EtcdConfig(), description="etcd for elastic rendezvous")
    services: ServicesConfig = Field(ServicesConfig(), description="cluster services")
    monitoring: MonitoringConfig = Field(MonitoringConfig(), description="CloudWatch monitoring")
    autoscaling: AutoscalingConfig = Field(AutoscalingConfig(), description="the Cluster Autoscaler")
    jobs: list[JobBase] = Field(default_factory=list, description="training jobs emitted by the same stack: see docs/jobs.md")
    tags: dict[str, str] = Field(default_factory=dict, description="extra tags on every AWS resource")

    @property
    def cluster_name(self) -> str:
        return self.cluster.name or f"{self.project}-{self.stack}"

    @property
    def gpu_instance_types(self) -> list[str]:
        return sorted({g.instance_type for g in self.gpu_node_groups})

    def gpu_group(self, name: str) -> Optional[GpuNodeGroupConfig]:
        return next((g for g in self.gpu_node_groups if g.name == name), None)


# Top-level keys in the project namespace and the model each one parses into ("jobs": the job
# section, parsed by stacks/config/jobs.py).
SECTIONS: dict[str, tuple[str, Any]] = {
    "gpuAvailabilityZone": ("gpu_availability_zone", str),
    "network": ("network", NetworkConfig),
    "cluster": ("cluster", ClusterConfig),
    "systemNodeGroup": ("system_node_group", SystemNodeGroupConfig),
    "gpuNodeGroups": ("gpu_node_groups", list),
    "storage": ("storage", StorageConfig),
    "etcd": ("etcd", EtcdConfig),
    "services": ("services", ServicesConfig),
    "monitoring": ("monitoring", MonitoringConfig),
    "autoscaling": ("autoscaling", AutoscalingConfig),
    "jobs": ("jobs", "jobs"),
    "tags": ("tags", dict),
}

# Keys of other namespaces that the stack reads or tolerates (provider settings).
FOREIGN_NAMESPACES_ALLOWED = ("aws", "kubernetes", "pulumi")
