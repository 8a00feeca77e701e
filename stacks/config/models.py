"""The stack config's models: every key a user sets per environment in ``Pulumi.<env>.yaml``.

Each field carries a one-line description; the configuration reference (docs/config.md) is checked
against these models (tests/test_docs.py), so a key is documented exactly where it is declared.
Checks that need more than one field, or the catalog, live in ``stacks/config/cross_checks.py``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from facts import catalog, instance_types, versions
from jobs.base import JobBase, numbers_and_flags_apart

NAMESPACE = "gpu-training"


class ConfigModel(BaseModel):
    """Base of every config section: camelCase keys (each key has one spelling, its alias: the Python
    name, `disk_size_gib`, is no key of the stack file), unknown keys refused, values frozen. A
    boolean is not a number and a number is not a flag (``jobs.base.numbers_and_flags_apart``:
    `false` is not 0), and numbers are finite (`.inf` and `.nan` are no sizes or thresholds)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        extra="forbid",
        frozen=True,
        strict=False,
        allow_inf_nan=False,
    )

    # (pydantic's mypy plugin cannot see the generated aliases, the only names the model takes,
    # and says so on the class's first decorated member)
    @field_validator("*", mode="before")  # type: ignore[pydantic-alias]
    @classmethod
    def _numbers_and_flags_apart(cls, value: Any, info: ValidationInfo) -> Any:
        return numbers_and_flags_apart(cls, value, info)


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
    availability_zone_count: int = Field(
        2, ge=2, le=6, description="AZs with a private node subnet (EKS needs 2); the GPU AZ is one of them"
    )
    private_subnet_prefix: int = Field(
        19,
        ge=16,
        le=24,
        description="prefix length of each private subnet (8,187 addresses at /19); the GPU AZ's must hold every GPU group at maxSize with the "
        "addresses the VPC CNI gives each node (100 for a p4d) and its share of the system nodes",
    )
    nat_gateways: Literal["single", "perAz"] = Field(
        "single", description="`single` (cheap, dev) or `perAz` (no cross-AZ egress dependency, prod)"
    )


class ClusterConfig(ConfigModel):
    """The EKS control plane."""

    name: str | None = Field(None, description="EKS cluster name (default `<project>-<stack>`)")
    kubernetes_version: str = Field(
        versions.KUBERNETES_DEFAULT, description="`1.35` or `1.36` (EKS standard support; see `facts/versions.py`)"
    )
    endpoint_public_access: bool = Field(True, description="public API endpoint")
    endpoint_public_access_cidrs: list[str] = Field(
        default_factory=lambda: ["0.0.0.0/0"],
        description="who may reach the public endpoint: public IPv4 blocks, at most 40",
    )
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
    name: str | None = Field(None, description="the placement group's name, with mode `existing`")


# A timestamp written unquoted in a stack file (`start: 2027-01-10T11:30:00Z`, as preflight prints it)
# is a YAML timestamp: the Pulumi CLI hands it to the program inside a config map as Go's
# time.String() text, `2027-01-10 11:30:00 +0000 UTC` (stacks/config/yaml_reading.GoTime). Read it as
# the time it is; quoted ISO 8601 text passes through unchanged.
_GO_TIME_TEXT = re.compile(r"(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}(?:\.\d+)?) ([+-])(\d{2})(\d{2}) \S+")


def _from_go_time_text(value: Any) -> Any:
    m = _GO_TIME_TEXT.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        return value
    date, clock, sign, hours, minutes = m.groups()
    return f"{date}T{clock}{sign}{hours}:{minutes}"


Timestamp = Annotated[datetime, BeforeValidator(_from_go_time_text)]


CapacityType = Literal["on-demand", "spot", "capacity-block"]


class CapacityOfferingConfig(ConfigModel):
    """A Capacity Block offering for a capacity-block group: `maxSize` instances of its `instanceType`.
    Preflight looks offerings up and shows their upfront price; only `purchase: true` buys one."""

    duration_hours: int = Field(
        ge=1,
        description="the block's length in hours, as EC2 sells them: 24-336 in steps of 24 (1-14 days), then 504-4368 in steps of 168 (to 26 weeks)",
    )
    earliest_start: Timestamp = Field(
        description="the earliest start, ISO 8601 with a time zone (`2026-10-01T00:00:00Z`)"
    )
    latest_end: Timestamp | None = Field(None, description="the latest end, ISO 8601 with a time zone (default: any)")
    offering_id: str | None = Field(
        None, description="the offering to buy, `cb-...` as preflight lists it; required with `purchase`"
    )
    purchase: bool = Field(
        False,
        description="buy the offering at `pulumi up`: an irreversible purchase, its upfront fee paid at once and never refunded. "
        "false: preflight only shows the offerings",
    )


class CapacityConfig(ConfigModel):
    """The capacity block of a capacity-block group: its window, which the group follows, and
    optionally an offering to find (and buy) one."""

    start: Timestamp | None = Field(
        None,
        description="when the block starts, ISO 8601 with a time zone (as preflight shows it; quoted or not): the group scales to maxSize then",
    )
    end: Timestamp | None = Field(
        None,
        description="when the block ends: the group scales to zero an hour before (EC2 terminates its instances from 30 minutes before)",
    )
    offering: CapacityOfferingConfig | None = Field(
        None,
        description="`{durationHours, earliestStart, latestEnd, offeringId, purchase}`: a block to find, and with `purchase: true` buy",
    )


class GpuNodeGroupConfig(ConfigModel):
    """One GPU node group, pinned to the GPU AZ."""

    name: str = Field(description="lower-case, unique; also the node label `gputraining/node-group`")
    instance_type: str = Field(description="a GPU type of the catalog (`facts/catalog.py`)")
    min_size: int = Field(0, ge=0, description="fewest nodes; groups can sit at zero")
    desired_size: int = Field(0, ge=0, description="nodes to start with (default: minSize)")
    max_size: int = Field(2, ge=1, description="most nodes")
    disk_size_gib: int = Field(500, ge=20, le=16384, alias="diskSizeGiB", description="encrypted gp3 root volume, GiB")
    capacity_type: CapacityType = Field("on-demand", description="`on-demand`, `spot` or `capacity-block`")
    capacity_reservation_id: str | None = Field(
        None,
        description="`cr-...`; required for `capacity-block` unless `capacity.offering` buys one (`purchase: true`)",
    )
    capacity: CapacityConfig | None = Field(
        None,
        description="`capacity-block` groups: `{start, end, offering}`, the block's window (scheduled scaling) and an offering to find or buy",
    )
    efa: bool | None = Field(
        None, description="EFA on (default where the type has it) or `false`; `true` on a type without EFA is an error"
    )
    placement_group: PlacementGroupConfig | None = Field(
        None,
        description="`{mode: create | existing | none, name}`; default `create` for EFA groups without a reservation or capacity block, else `none`",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="extra node labels")
    taints: list[Taint] = Field(
        default_factory=list,
        description="extra node taints `{key, value, effect}`, one per key and effect, at most 49 (the GPU taint is always there)",
    )
    burn_in: bool | None = Field(
        None,
        description='new nodes join tainted and are checked before they take work (`burnIn` of the stack when not set); see "Day two"',
    )
    autoscale: bool | None = Field(
        None,
        description=(
            "the Cluster Autoscaler sizes the group between minSize and maxSize (with `autoscaling.enabled`); desiredSize then only sets the first size. "
            "Default true; `capacity-block` groups are never autoscaled (outside the block's window every launch fails): they follow "
            "`capacity.start`/`capacity.end`, or are sized with desiredSize"
        ),
    )

    _desired = model_validator(mode="before")(_desired_defaults_to_min)

    @property
    def instance(self) -> instance_types.InstanceType:
        it = catalog.get(self.instance_type)
        assert it is not None, "validated config always names a catalog type"
        return it

    @property
    def autoscaled(self) -> bool:
        """Whether the group is one the Cluster Autoscaler may size (``autoscaling.enabled`` aside)."""
        return self.capacity_type != "capacity-block" if self.autoscale is None else self.autoscale

    @property
    def capacity_block_window(self) -> tuple[datetime, datetime] | None:
        """(start, end) of the group's capacity block, when the config gives both."""
        c = self.capacity
        return (c.start, c.end) if c is not None and c.start is not None and c.end is not None else None

    @property
    def capacity_block_purchase(self) -> str | None:
        """The offering (`cb-...`) `pulumi up` buys for this group, or None."""
        o = self.capacity.offering if self.capacity is not None else None
        return o.offering_id if o is not None and o.purchase else None

    @property
    def awaiting_capacity_block(self) -> bool:
        """A capacity-block group with no block yet (only an offering to look at): it is not built
        until it has a reservation id or buys its offering."""
        return (
            self.capacity_type == "capacity-block"
            and not self.capacity_reservation_id
            and not self.capacity_block_purchase
        )

    @property
    def efa_enabled(self) -> bool:
        return self.instance.efa_supported if self.efa is None else self.efa

    @property
    def efa_interfaces(self) -> int:
        return self.instance.efa_interfaces if self.efa_enabled else 0

    @property
    def placement(self) -> PlacementGroupConfig:
        """The effective placement: explicit config, else a new cluster group for EFA groups
        without a capacity reservation or block, else none."""
        if self.placement_group is not None:
            return self.placement_group
        if self.efa_enabled and not self.capacity_reservation_id and self.capacity_type != "capacity-block":
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
    deployment_type: FsxDeploymentType = Field(
        "SCRATCH_2", description="`SCRATCH_1`, `SCRATCH_2`, `PERSISTENT_1`, `PERSISTENT_2`"
    )
    storage_capacity_gib: int = Field(
        1200, alias="storageCapacityGiB", description="1200, 2400, then steps of 2400 (3600 for SCRATCH_1)"
    )
    per_unit_storage_throughput: int | None = Field(
        None, description="MB/s/TiB: PERSISTENT_1 50/100/200; PERSISTENT_2 125/250/500/1000"
    )
    s3: S3LinkConfig | None = Field(
        None, description="`{bucket, prefix, fileSystemPath: /s3, export: false}`: import (and export) an S3 prefix"
    )
    backup_retention_days: int = Field(
        0, ge=0, le=90, description="days of daily automatic backups, 0-90 (PERSISTENT types only; 0: none)"
    )
    backup_start_time: str = Field("03:00", description="UTC time `HH:MM` of the daily automatic backup")
    final_backup: bool = Field(
        False, description="take a backup when the file system is deleted (PERSISTENT types only)"
    )


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
    scale_down_unneeded_time: str = Field(
        "10m", description="how long an idle GPU node stays before it is removed (a Go duration: `10m`, `1h30m`, `90s`)"
    )
    scale_down_delay_after_add: str = Field(
        "10m", description="no scale-down for this long after a scale-up (a Go duration like `10m`)"
    )
    expander: Literal["least-waste", "most-pods", "random"] = Field(
        "least-waste", description="which group grows when several could: `least-waste`, `most-pods` or `random`"
    )
    provisioning_requests: bool | None = Field(
        None,
        description="a queued job is admitted only once the autoscaler has brought up the nodes of its whole gang (Kueue's ProvisioningRequest "
        "admission check, `best-effort-atomic-scale-up`; `true` needs `queues.enabled`), on every autoscaled group. On AWS the scale-up is "
        "one resize of the group, not atomic. Default: on the autoscaled groups with a network topology, where Kueue places jobs only on "
        "nodes that exist (docs/jobs.md, Topology-aware placement); `false` is refused while there are such groups",
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


class TeamQuotaConfig(ConfigModel):
    """A team's share of one GPU node group, in whole nodes (the quotas follow from the nodes)."""

    node_group: str = Field(description="a GPU node group of the stack")
    nodes: int = Field(
        ge=0, description="nominal quota: nodes of the group that are the team's (lent to others while idle)"
    )
    borrowing_limit: int | None = Field(
        None,
        ge=0,
        description="most nodes the team may borrow beyond its own from idle quota of others (default: no limit)",
    )
    lending_limit: int | None = Field(
        None,
        ge=0,
        description="most of its own nodes the team lends while idle, at most `nodes` (default: all of them)",
    )


class TeamConfig(ConfigModel):
    """A team: its own namespace and queue, a share of the GPU groups, and the IAM role its people use."""

    name: str = Field(description="lower-case name (a DNS label); also its ClusterQueue, and jobs name it in `team`")
    namespace: str | None = Field(
        None, description="the team's namespace, where it submits its own jobs (default: the team's name)"
    )
    role_arn: str | None = Field(
        None,
        description="IAM role whose sessions may submit jobs (MPIJobs, PyTorchJobs, PaddleJobs, Jobs) to the team's queue, in its namespace only (an EKS access entry)",
    )
    quotas: list[TeamQuotaConfig] = Field(
        default_factory=list,
        description="the team's nodes per GPU node group; groups not listed: none of its own, borrowing only",
    )
    fair_share_weight: float = Field(
        1,
        ge=0,
        description="the team's weight when idle quota is shared out (Kueue fair sharing): 2 gets twice the share of 1",
    )


class QueuesConfig(ConfigModel):
    """Kueue: GPU jobs wait whole in a queue until all their nodes are free, with priorities and teams."""

    enabled: bool = Field(
        True,
        description="run Kueue: a GPU job is admitted only when its whole gang fits (no half-started jobs holding nodes)",
    )
    pods_ready_timeout: str = Field(
        "20m",
        description="how long an admitted job may take until all its pods run (GPU node boot and image pull); then it gives its nodes back and queues again",
    )
    requeue_limit: int | None = Field(
        None,
        ge=0,
        description="times a job that timed out queues again before it is deactivated (default: no limit; the waits double from 1 minute to 1 hour)",
    )
    teams: list[TeamConfig] = Field(
        default_factory=list,
        description="teams with their own namespace, queue and share of the GPU groups, in one cohort",
    )


class BurnInConfig(ConfigModel):
    """Burn-in of new GPU nodes: a startup taint until a check has verified the node."""

    enabled: bool = Field(
        True,
        description="every GPU group's new nodes join with a startup taint that keeps jobs off them until a check has verified "
        "their GPUs (count, model, ECC, Xid) and EFA interfaces; a failed node stays tainted and is replaced (a group's "
        "`burnIn` overrides)",
    )
    loopback_test: bool = Field(
        False,
        description="the check also runs a short NCCL all-reduce over the node's own GPUs (nccl-tests' all_reduce_perf, a few seconds; V100 groups skip it: the image is built for A100 and newer)",
    )


class MonitoringConfig(ConfigModel):
    """CloudWatch Container Insights with GPU and EFA metrics, and a dashboard."""

    enabled: bool = Field(True, description="CloudWatch observability add-on (Container Insights, GPU/EFA metrics)")
    log_retention_days: int = Field(30, description="Container Insights log retention (a CloudWatch retention value)")
    dashboard: bool = Field(True, description="a GPU/EFA dashboard per cluster")


class StackConfig(ConfigModel):
    """The whole validated config of one stack (built by ``load`` from its parsed sections, by
    field name; the stack file's keys are read by the sections' models)."""

    model_config = ConfigDict(validate_by_name=True)

    # Fields that are no key of the project namespace: ``load`` fills them in from the engine
    # (project and stack) and from `aws:region`.
    FROM_ENGINE: ClassVar[frozenset[str]] = frozenset({"project", "stack", "region"})

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
    gpu_node_groups: list[GpuNodeGroupConfig] = Field(
        default_factory=list, description="GPU node groups", title="node groups"
    )
    storage: StorageConfig = Field(StorageConfig(), description="EFS and FSx for Lustre")
    etcd: EtcdConfig = Field(EtcdConfig(), description="etcd for elastic rendezvous")
    services: ServicesConfig = Field(ServicesConfig(), description="cluster services")
    monitoring: MonitoringConfig = Field(MonitoringConfig(), description="CloudWatch monitoring")
    autoscaling: AutoscalingConfig = Field(AutoscalingConfig(), description="the Cluster Autoscaler")
    burn_in: BurnInConfig = Field(BurnInConfig(), description="burn-in of new GPU nodes")
    queues: QueuesConfig = Field(QueuesConfig(), description="Kueue queues for the GPU jobs")
    jobs: list[JobBase] = Field(
        default_factory=list, description="training jobs emitted by the same stack: see docs/jobs.md"
    )
    tags: dict[str, str] = Field(default_factory=dict, description="extra tags on every AWS resource")

    @property
    def cluster_name(self) -> str:
        return self.cluster.name or f"{self.project}-{self.stack}"

    @property
    def gpu_instance_types(self) -> list[str]:
        return sorted({g.instance_type for g in self.gpu_node_groups})

    def burn_in_on(self, g: GpuNodeGroupConfig) -> bool:
        """Whether group ``g``'s new nodes are burnt in (its own setting, else the stack's)."""
        return self.burn_in.enabled if g.burn_in is None else g.burn_in

    def gpu_group(self, name: str) -> GpuNodeGroupConfig | None:
        return next((g for g in self.gpu_node_groups if g.name == name), None)


# The project namespace's keys (`gpu-training:<key>`) and the StackConfig field each one is: every
# field by its alias, but the ones ``load`` fills in itself. The loader walks these fields, so a
# new section is one field of StackConfig.
SECTIONS: dict[str, str] = {
    f.alias or name: name for name, f in StackConfig.model_fields.items() if name not in StackConfig.FROM_ENGINE
}

# Keys of other namespaces that the stack reads or tolerates (provider settings).
FOREIGN_NAMESPACES_ALLOWED = ("aws", "kubernetes", "pulumi")
