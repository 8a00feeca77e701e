"""The stack config's models: every key a user sets per environment in ``Pulumi.<env>.yaml``.

This module holds the base of every section (``ConfigModel``) and the sections of the cluster's
infrastructure: network, control plane, node groups (system and GPU, with their placement and
capacity), storage, etcd and the cluster services. ``stacks/config/stack_config.py`` holds the
sections that schedule and watch work on it (autoscaling, teams and queues, burn-in, monitoring)
and ``StackConfig``, the whole config.

Each field carries a one-line description; the configuration reference (docs/config.md) is checked
against these models (tests/test_docs.py), so a key is documented exactly where it is declared.
Checks that need more than one field, or the catalog, live in ``stacks/config/cross_checks.py``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from facts import catalog, instance_types, versions
from jobs.base import SpecModel

NAMESPACE = "gpu-training"


class ConfigModel(SpecModel):
    """Base of every config section. The rules are the job specs' (``jobs.base.SpecModel``), one set for
    every key a user writes: camelCase keys (each key has one spelling, its alias: the Python name,
    `disk_size_gib`, is no key of the stack file), unknown keys refused, values frozen, a boolean is not
    a number and a number is not a flag (`false` is not 0), and numbers are finite (`.inf` and `.nan`
    are no sizes or thresholds)."""


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
        description="prefix length of each private subnet (8,187 addresses at /19); the GPU AZ's must hold every GPU "
        "group at maxSize with the addresses the VPC CNI gives each node (100 for a p4d) and its share of the system "
        "nodes",
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


# A date alone: pydantic would read it as midnight, without a time zone.
_DATE_ONLY = re.compile(r"\s*\d{4}-\d{1,2}-\d{1,2}\s*")


def _from_go_time_text(value: Any) -> Any:
    if isinstance(value, str) and _DATE_ONLY.fullmatch(value):
        raise PydanticCustomError(
            "date_without_time",
            "a date without a time: give the moment in UTC, like 2026-10-08T11:30:00Z (a Capacity Block ends at 11:30 "
            "UTC; a date read as midnight loses half a day of the block)",
        )
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
        description="the block's length in hours, as EC2 sells them: 24-336 in steps of 24 (1-14 days), then 504-4368 "
        "in steps of 168 (to 26 weeks)",
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
        description="buy the offering at `pulumi up`: an irreversible purchase, its upfront fee paid at once and "
        "never refunded. false: preflight only shows the offerings",
    )


class CapacityConfig(ConfigModel):
    """The capacity block of a capacity-block group: its window, which the group follows, and
    optionally an offering to find (and buy) one."""

    start: Timestamp | None = Field(
        None,
        description="when the block starts, ISO 8601 with a time zone (as preflight shows it; quoted or not): the "
        "group scales to maxSize then",
    )
    end: Timestamp | None = Field(
        None,
        description="when the block ends: the group scales to zero an hour before (EC2 terminates its instances from "
        "30 minutes before)",
    )
    offering: CapacityOfferingConfig | None = Field(
        None,
        description="`{durationHours, earliestStart, latestEnd, offeringId, purchase}`: a block to find, and with "
        "`purchase: true` buy",
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
        description="`capacity-block` groups: `{start, end, offering}`, the block's window (scheduled scaling) and an "
        "offering to find or buy",
    )
    efa: bool | None = Field(
        None, description="EFA on (default where the type has it) or `false`; `true` on a type without EFA is an error"
    )
    placement_group: PlacementGroupConfig | None = Field(
        None,
        description="`{mode: create | existing | none, name}`; default `create` for EFA groups without a reservation "
        "or capacity block, else `none`",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="extra node labels; with queues at most 6, or 7 on a type without an accelerator label (the "
        "group's Kueue flavor holds at most 8 node labels, the stack's own among them)",
    )
    taints: list[Taint] = Field(
        default_factory=list,
        description="extra node taints `{key, value, effect}`, one per key and effect: at most 48, 49 without burn-in "
        "(EKS takes 50 per group; the GPU taint is always there, burn-in's startup taint with burn-in)",
    )
    burn_in: bool | None = Field(
        None,
        description="new nodes join tainted and are checked before they take work (`burnIn` of the stack when not "
        'set); see "Day two"',
    )
    autoscale: bool | None = Field(
        None,
        description=(
            "the Cluster Autoscaler sizes the group between minSize and maxSize (with `autoscaling.enabled`); "
            "desiredSize then only sets the first size. Default true; `capacity-block` groups are never autoscaled "
            "(outside the block's window every launch fails): they follow `capacity.start`/`capacity.end`, or are "
            "sized with desiredSize"
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
    trainer: bool = Field(False, description="install Kubeflow Trainer v2 with JobSet")
