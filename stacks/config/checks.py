"""Checks that need more than one field of the stack config, the catalog or AWS's limits.

Each appends a ``Problem`` naming the config key, the bad value and what is allowed; ``load`` runs
them all on every section that parsed, so one typo does not hide other problems.
"""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from facts import aws_names, catalog, durations, versions
from facts.catalog import CAPACITY_BLOCK_DRAIN, CAPACITY_BLOCK_DRAIN_TEXT
from facts.problems import Problem
from facts.problems import fmt as _fmt
from stacks.config.models import (
    NAMESPACE,
    AutoscalingConfig,
    ClusterConfig,
    EtcdConfig,
    GpuNodeGroupConfig,
    MonitoringConfig,
    NetworkConfig,
    QueuesConfig,
    ServicesConfig,
    StorageConfig,
    SystemNodeGroupConfig,
)


@lru_cache(maxsize=1)
def known_regions() -> frozenset[str]:
    """Every AWS region botocore knows: the regions of each partition in its bundled endpoint data
    (read as a file: no AWS call, and no botocore session to build, which costs ~0.1 s)."""
    spec = importlib.util.find_spec("botocore")
    if spec is None or spec.origin is None:  # pragma: no cover - botocore is a pinned requirement
        return frozenset()
    path = Path(spec.origin).parent / "data" / "endpoints.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):  # pragma: no cover - a broken botocore install
        return frozenset()
    return frozenset(region for partition in data.get("partitions", []) for region in partition.get("regions", {}))


@dataclass(frozen=True)
class Sections:
    """The parsed sections the checks (and the job section) look at; None: given but invalid."""

    network: Optional[NetworkConfig]
    cluster: Optional[ClusterConfig]
    system: Optional[SystemNodeGroupConfig]
    groups: list[Optional[GpuNodeGroupConfig]]
    storage: Optional[StorageConfig]
    etcd: Optional[EtcdConfig]
    services: Optional[ServicesConfig]
    monitoring: Optional[MonitoringConfig]
    autoscaling: Optional[AutoscalingConfig] = None
    queues: Optional[QueuesConfig] = None


def check_all(az: str, region: str, cluster_name: str, s: Sections, problems: list[Problem]) -> None:
    """Every cross-field check, on each section that parsed. ``cluster_name`` is the effective one
    (``cluster.name``, else ``<project>-<stack>``)."""
    _check_az(az, region, problems)
    _check_derived_names(cluster_name, s, problems)
    if s.network is not None:
        _check_network(s.network, problems)
    if s.cluster is not None:
        _check_cluster(s.cluster, problems)
    if s.system is not None:
        _check_system(s.system, problems)
    _check_gpu_groups(s.groups, problems)
    if s.storage is not None:
        _check_storage(s.storage, problems)
    if s.etcd is not None:
        _check_etcd(s.etcd, problems)
    if s.services is not None:
        _check_services(s.services, problems)
    if s.autoscaling is not None:
        _check_autoscaling(s.autoscaling, problems)
    if s.queues is not None:
        from stacks import queues  # imports this module

        training = s.services.training_namespace if s.services is not None else None
        admins = s.cluster.admin_principals if s.cluster is not None else []
        # An autoscaling section left out is its defaults (one given but invalid is reported already).
        queues.check_config(s.queues, s.groups, s.autoscaling or AutoscalingConfig(), training, admins, problems, NAMESPACE)
    if s.monitoring is not None and s.monitoring.log_retention_days not in LOG_RETENTION_DAYS:
        problems.append(
            Problem(
                f"{NAMESPACE}:monitoring.logRetentionDays", f"{s.monitoring.log_retention_days} is not a CloudWatch retention; use one of {LOG_RETENTION_DAYS}"
            )
        )


# EKS cluster names; the cluster name also names EKS node groups (<cluster>-system,
# <cluster>-gpu-<group>, at most 63 characters). Kubernetes objects named after it (the PVs) use
# its lower-case form (components/storage.py), so upper case and '_' are fine.
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def _check_derived_names(cluster_name: str, s: Sections, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:cluster.name"
    given = s.cluster is not None and s.cluster.name is not None
    where = "" if given else " (the default <project>-<stack>; set cluster.name)"
    if not _CLUSTER_NAME.match(cluster_name) or len(cluster_name) > aws_names.EKS_CLUSTER_NAME_MAX:
        problems.append(
            Problem(
                k,
                f"{_fmt(cluster_name)}{where} is not a valid EKS cluster name: letters, digits, '-' and '_', starting with a "
                f"letter or digit, at most {aws_names.EKS_CLUSTER_NAME_MAX} characters",
            )
        )
        return
    groups = ["system"] + [f"gpu-{g.name}" for g in s.groups if g is not None]
    longest = max(groups, key=len)
    node_group = f"{cluster_name}-{longest}"
    if len(node_group) > aws_names.EKS_NODEGROUP_NAME_MAX:
        room = aws_names.EKS_NODEGROUP_NAME_MAX - len(longest) - 1
        problems.append(
            Problem(
                k,
                f"{_fmt(cluster_name)}{where} makes the node group name {node_group!r} {len(node_group)} characters long; EKS allows "
                f"{aws_names.EKS_NODEGROUP_NAME_MAX}: use a cluster name of at most {room} characters (or shorter GPU group names)",
            )
        )


def check_tags(tags: dict[str, str], problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:tags"
    # The stack adds up to 6 tags of its own (project, stack, node group, Name, cluster, role).
    room = aws_names.TAGS_PER_RESOURCE - 6
    if len(tags) > room:
        problems.append(
            Problem(k, f"{len(tags)} tags are too many: AWS allows {aws_names.TAGS_PER_RESOURCE} per resource and the stack adds 6; at most {room}")
        )
    for key, value in tags.items():
        why = aws_names.tag_key_problem(key)
        if why:
            problems.append(Problem(f"{k}.{key}", f"{_fmt(key)} is not allowed as a tag key: {why}"))
        why = aws_names.tag_value_problem(value)
        if why:
            problems.append(Problem(f"{k}.{key}", f"{_fmt(value)} is not allowed as a tag value: {why}"))


def _check_autoscaling(a: AutoscalingConfig, problems: list[Problem]) -> None:
    """The autoscaler reads its duration flags with Go's time.ParseDuration: whatever that takes
    (1h30m, 1.5h, 90s) is taken, nothing else; a negative duration is no time to wait."""
    k = f"{NAMESPACE}:autoscaling"
    for key, value in (("scaleDownUnneededTime", a.scale_down_unneeded_time), ("scaleDownDelayAfterAdd", a.scale_down_delay_after_add)):
        why = durations.go_duration_problem(value)
        if why:
            problems.append(
                Problem(
                    f"{k}.{key}", f"{_fmt(value)} is not a Go duration ({why}): a number with a unit, ns, us, ms, s, m or h, or several, like 10m, 90s or 1h30m"
                )
            )
        elif durations.parse_go_duration(value) < 0:
            problems.append(Problem(f"{k}.{key}", f"{_fmt(value)} is negative: the time to wait is 0 or more, like 10m"))


def _check_az(az: str, region: str, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:gpuAvailabilityZone"
    if az == "auto":
        return
    if not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d[a-z]", az):
        problems.append(Problem(k, f"{_fmt(az)} is not allowed: use 'auto' or an AZ name like '{region or 'us-west-2'}b'"))
    elif region and not az.startswith(region):
        problems.append(Problem(k, f"{_fmt(az)} is not in the stack's region {region!r}; use an AZ of {region} or 'auto'"))


def _check_network(n: NetworkConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:network"
    try:
        net = ipaddress.ip_network(n.vpc_cidr, strict=True)
    except ValueError as err:
        problems.append(Problem(f"{k}.vpcCidr", f"{_fmt(n.vpc_cidr)} is not a valid IPv4 CIDR block ({err})"))
        return
    if net.version != 4:
        problems.append(Problem(f"{k}.vpcCidr", f"{_fmt(n.vpc_cidr)} is not allowed: an IPv4 CIDR block is required"))
        return
    if not 16 <= net.prefixlen <= 28:
        problems.append(Problem(f"{k}.vpcCidr", f"{_fmt(n.vpc_cidr)} is not allowed: AWS VPCs are /16 to /28"))
        return
    if not any(net.subnet_of(ipaddress.IPv4Network(r)) for r in RFC1918):
        problems.append(Problem(f"{k}.vpcCidr", f"{_fmt(n.vpc_cidr)} is not a private range; use 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 space"))
    # Private subnets take one /private_subnet_prefix block each; public subnets share one more.
    needed = n.availability_zone_count + 1
    if n.private_subnet_prefix <= net.prefixlen:
        have = 0
    else:
        have = 2 ** (n.private_subnet_prefix - net.prefixlen)
    if have < needed:
        problems.append(
            Problem(
                f"{k}.vpcCidr",
                f"{_fmt(n.vpc_cidr)} is too small: {n.availability_zone_count} AZs need {needed} "
                f"/{n.private_subnet_prefix} blocks ({n.availability_zone_count} private subnets + 1 for the public subnets) "
                f"but it holds {have}; use a larger VPC CIDR or a longer network.privateSubnetPrefix",
            )
        )
    elif n.private_subnet_prefix + 4 > 28:
        problems.append(
            Problem(f"{k}.privateSubnetPrefix", f"{n.private_subnet_prefix} leaves no room for public subnets (/{n.private_subnet_prefix + 4} > /28)")
        )


LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
RFC1918 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")
_ASSUMED_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/.+$")


def role_arn_problem(arn: str) -> Optional[str]:
    """Why ``arn`` cannot be an EKS access entry's principal (an IAM role or user), or None."""
    assumed = _ASSUMED_ROLE.match(arn)
    if assumed:
        role = f"arn:{assumed.group(1)}:iam::{assumed.group(2)}:role/{assumed.group(3)}"
        return f"{_fmt(arn)} is an STS session, which EKS access entries refuse; give the role itself: {role} (with its path, if it has one)"
    if not _ARN.match(arn):
        return f"{_fmt(arn)} is not an IAM role or user ARN like arn:aws:iam::123456789012:role/Team"
    return None


def _check_cluster(c: ClusterConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:cluster"
    if c.kubernetes_version not in versions.KUBERNETES_SUPPORTED:
        problems.append(
            Problem(
                f"{k}.kubernetesVersion",
                f"{_fmt(c.kubernetes_version)} is not supported; use one of {', '.join(versions.KUBERNETES_SUPPORTED)}",
            )
        )
    for i, cidr in enumerate(c.endpoint_public_access_cidrs):
        why = aws_names.public_access_cidr_problem(cidr)
        if why:
            problems.append(
                Problem(
                    f"{k}.endpointPublicAccessCidrs[{i}]",
                    f"{_fmt(cidr)} is not allowed: {why}; give the public IPv4 blocks the API's clients connect from (0.0.0.0/0: anywhere)",
                )
            )
    if len(c.endpoint_public_access_cidrs) > aws_names.EKS_PUBLIC_ACCESS_CIDRS_MAX:
        problems.append(
            Problem(
                f"{k}.endpointPublicAccessCidrs",
                f"{len(c.endpoint_public_access_cidrs)} blocks are too many: EKS takes at most {aws_names.EKS_PUBLIC_ACCESS_CIDRS_MAX} per cluster "
                "(a quota that cannot be raised); merge neighbouring blocks into larger ones",
            )
        )
    if not c.endpoint_public_access and not c.endpoint_private_access:
        problems.append(Problem(f"{k}.endpointPrivateAccess", "false together with endpointPublicAccess false leaves no way to reach the API server"))
    for i, arn in enumerate(c.admin_principals):
        assumed = _ASSUMED_ROLE.match(arn)
        if assumed:
            role = f"arn:{assumed.group(1)}:iam::{assumed.group(2)}:role/{assumed.group(3)}"
            problems.append(
                Problem(
                    f"{k}.adminPrincipals[{i}]",
                    f"{_fmt(arn)} is an STS session, which EKS access entries refuse; give the role itself: {role} (with its path, if it has one)",
                )
            )
        elif not _ARN.match(arn):
            problems.append(Problem(f"{k}.adminPrincipals[{i}]", f"{_fmt(arn)} is not an IAM role or user ARN like arn:aws:iam::123456789012:role/Admin"))
    if len(set(c.admin_principals)) != len(c.admin_principals):
        problems.append(Problem(f"{k}.adminPrincipals", "lists the same principal twice"))
    if c.log_retention_days not in LOG_RETENTION_DAYS:
        problems.append(Problem(f"{k}.logRetentionDays", f"{c.log_retention_days} is not a CloudWatch retention; use one of {LOG_RETENTION_DAYS}"))


def _check_scaling(k: str, min_size: int, desired: int, max_size: int, problems: list[Problem]) -> None:
    if min_size > max_size:
        problems.append(Problem(f"{k}.minSize", f"{min_size} is greater than maxSize {max_size}"))
    elif not min_size <= desired <= max_size:
        problems.append(Problem(f"{k}.desiredSize", f"{desired} is outside minSize..maxSize ({min_size}..{max_size})"))


def _check_system(s: SystemNodeGroupConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:systemNodeGroup"
    it = catalog.get(s.instance_type)
    if it is None:
        problems.append(Problem(f"{k}.instanceType", f"{_fmt(s.instance_type)} is not in the instance catalog; use one of {', '.join(catalog.SYSTEM_TYPES)}"))
    elif it.is_gpu:
        problems.append(Problem(f"{k}.instanceType", f"{_fmt(s.instance_type)} is a GPU type; system nodes use one of {', '.join(catalog.SYSTEM_TYPES)}"))
    _check_scaling(k, s.min_size, s.desired_size, s.max_size, problems)
    if s.min_size < 1:
        problems.append(
            Problem(f"{k}.minSize", f"{s.min_size} is not allowed: at least 1 (CoreDNS, the operators, etcd and the CSI controllers run on system nodes)")
        )


def _aware(when: Optional[datetime.datetime]) -> bool:
    return when is None or (when.tzinfo is not None and when.utcoffset() is not None)


def _check_capacity(k: str, g: GpuNodeGroupConfig, it: Optional[catalog.InstanceType], problems: list[Problem]) -> None:
    """Capacity Blocks: a type EC2 sells them for, and a consistent `capacity` section (window, offering, purchase)."""
    block = g.capacity_type == "capacity-block"
    if block and it is not None and it.is_gpu and not it.capacity_blocks:
        problems.append(
            Problem(
                f"{k}.capacityType",
                f"'capacity-block' is not offered for {g.instance_type}: EC2 sells Capacity Blocks for ML of {', '.join(catalog.CAPACITY_BLOCK_TYPES)} "
                "(the catalog's types with the capacity-block usage class); use on-demand or spot, or one of those types",
            )
        )
    c = g.capacity
    if c is None:
        return
    if not block:
        problems.append(Problem(f"{k}.capacity", f"is only used with capacityType 'capacity-block' (capacityType is {g.capacity_type!r})"))
        return
    o = c.offering
    for key, when in (("start", c.start), ("end", c.end), ("offering.earliestStart", o and o.earliest_start), ("offering.latestEnd", o and o.latest_end)):
        if when and not _aware(when):
            problems.append(
                Problem(f"{k}.capacity.{key}", f"{when.isoformat()} has no time zone; write it in UTC like 2026-10-01T11:30:00Z, as preflight shows it")
            )
    if (c.start is None) != (c.end is None):
        problems.append(
            Problem(f"{k}.capacity.{'end' if c.end is None else 'start'}", "is required with capacity.start/end: the block's window needs both ends")
        )
    window = g.capacity_block_window
    if window is not None and _aware(window[0]) and _aware(window[1]):
        start, end = window
        if end - start <= CAPACITY_BLOCK_DRAIN:
            problems.append(
                Problem(
                    f"{k}.capacity.end",
                    f"{end.isoformat()} is not more than {CAPACITY_BLOCK_DRAIN_TEXT} after capacity.start {start.isoformat()}: the group scales to zero "
                    f"{CAPACITY_BLOCK_DRAIN_TEXT} before the block ends",
                )
            )
        if g.min_size or g.desired_size:
            key, value = ("minSize", g.min_size) if g.min_size else ("desiredSize", g.desired_size)
            problems.append(
                Problem(
                    f"{k}.{key}",
                    f"{value} is not allowed with capacity.start/end: the group follows the block's window (maxSize nodes from its start, 0 "
                    f"{CAPACITY_BLOCK_DRAIN_TEXT} before its end, by scheduled actions); leave minSize and desiredSize out",
                )
            )
    if o is None:
        return
    if o.latest_end is not None and _aware(o.latest_end) and _aware(o.earliest_start) and o.latest_end <= o.earliest_start:
        problems.append(Problem(f"{k}.capacity.offering.latestEnd", f"{o.latest_end.isoformat()} is not after earliestStart {o.earliest_start.isoformat()}"))
    if o.offering_id is not None and not re.fullmatch(r"cb-[0-9a-z]{8,32}", o.offering_id):
        problems.append(Problem(f"{k}.capacity.offering.offeringId", f"{_fmt(o.offering_id)} is not a Capacity Block offering id like cb-0123456789abcdefg"))
    if o.purchase:
        missing = [name for name, v in (("offeringId", o.offering_id), ("start", c.start), ("end", c.end)) if v is None]
        if missing:
            problems.append(
                Problem(
                    f"{k}.capacity.offering.purchase",
                    "true needs the offering it buys: set capacity.offering.offeringId and the block's window capacity.start and capacity.end "
                    f"(missing: {', '.join(missing)}) as preflight lists them for the offering you choose",
                )
            )
        if g.capacity_reservation_id:
            problems.append(
                Problem(
                    f"{k}.capacity.offering.purchase",
                    f"true would buy a second block: the group already targets {g.capacity_reservation_id}; drop capacityReservationId or purchase",
                )
            )


_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
RESERVED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io", "eks.amazonaws.com")


def _reserved_label(key: str) -> bool:
    """Labels in these domains (or their subdomains) are refused by kubelet or owned by EKS."""
    if "/" not in key:
        return False
    domain = key.split("/", 1)[0]
    return any(domain == d or domain.endswith("." + d) for d in RESERVED_LABEL_DOMAINS)


def _check_gpu_groups(groups: list[Optional[GpuNodeGroupConfig]], problems: list[Problem]) -> None:
    base = f"{NAMESPACE}:gpuNodeGroups"
    seen: dict[str, int] = {}
    for i, g in enumerate(groups):
        if g is None:
            continue
        k = f"{base}[{i}]"
        if not _K8S_NAME.match(g.name) or len(g.name) > 32:
            problems.append(
                Problem(
                    f"{k}.name",
                    f"{_fmt(g.name)} is not allowed: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 32 characters",
                )
            )
        if g.name in seen:
            problems.append(Problem(f"{k}.name", f"{_fmt(g.name)} is used by gpuNodeGroups[{seen[g.name]}] too; node group names must be unique"))
        else:
            seen[g.name] = i
        it = catalog.get(g.instance_type)
        refused = catalog.refusal(g.instance_type)
        if refused is not None:
            problems.append(Problem(f"{k}.instanceType", refused))
        elif it is None or not it.is_gpu:
            problems.append(
                Problem(f"{k}.instanceType", f"{_fmt(g.instance_type)} is not a GPU type in the instance catalog; use one of {', '.join(catalog.GPU_TYPES)}")
            )
        elif g.efa and not it.efa_supported:
            efa_types = ", ".join(t for t in catalog.GPU_TYPES if catalog.BUILTIN[t].efa_supported)
            problems.append(Problem(f"{k}.efa", f"true is not allowed: {g.instance_type} has no EFA; EFA types are {efa_types}"))
        _check_scaling(k, g.min_size, g.desired_size, g.max_size, problems)
        if g.capacity_type == "capacity-block" and not g.capacity_reservation_id and (g.capacity is None or g.capacity.offering is None):
            problems.append(
                Problem(
                    f"{k}.capacityReservationId",
                    "is required with capacityType 'capacity-block' (the cr-... id of the block), unless capacity.offering looks for one to buy",
                )
            )
        _check_capacity(k, g, it, problems)
        if g.capacity_reservation_id and not re.fullmatch(r"cr-[0-9a-f]{8,17}", g.capacity_reservation_id):
            problems.append(
                Problem(f"{k}.capacityReservationId", f"{_fmt(g.capacity_reservation_id)} is not a capacity reservation id like cr-0123456789abcdef0")
            )
        if g.capacity_type == "capacity-block" and g.autoscale:
            problems.append(
                Problem(
                    f"{k}.autoscale",
                    "true is not allowed with capacityType 'capacity-block': outside the block's window every launch fails and the "
                    "autoscaler backs off again and again, and EKS needs the group at desired size 0 before an upgrade. Leave it out "
                    "(false is the default here) and give the block's window as capacity.start and capacity.end (the group then scales "
                    "itself), or set desiredSize to the block's instance count for its window, 0 after",
                )
            )
        if g.capacity_type == "spot" and g.capacity_reservation_id:
            problems.append(Problem(f"{k}.capacityReservationId", "cannot be used with capacityType 'spot'"))
        pg = g.placement_group
        if pg is not None:
            if pg.mode == "existing" and not pg.name:
                problems.append(Problem(f"{k}.placementGroup.name", "is required with mode 'existing'"))
            if pg.mode != "existing" and pg.name:
                problems.append(Problem(f"{k}.placementGroup.name", f"{_fmt(pg.name)} is only used with mode 'existing' (mode is {pg.mode!r})"))
            if pg.mode == "create" and (g.capacity_reservation_id or g.capacity_type == "capacity-block"):
                problems.append(
                    Problem(
                        f"{k}.placementGroup.mode",
                        "'create' cannot be combined with a capacity reservation/block; use 'none' or the reservation's own placement group with 'existing'",
                    )
                )
        for lk, lv in g.labels.items():
            if not _LABEL_KEY.match(lk) or _reserved_label(lk):
                problems.append(
                    Problem(
                        f"{k}.labels.{lk}",
                        f"{_fmt(lk)} is not an allowed label key (a valid Kubernetes label key outside the kubernetes.io, k8s.io and eks.amazonaws.com domains)",
                    )
                )
            if not _LABEL_VALUE.match(lv):
                problems.append(Problem(f"{k}.labels.{lk}", f"{_fmt(lv)} is not a valid Kubernetes label value"))
        # EKS takes at most 50 taints per node group, and the GPU taint is one of them.
        if len(g.taints) > aws_names.EKS_NODEGROUP_TAINTS_MAX - 1:
            problems.append(
                Problem(
                    f"{k}.taints",
                    f"{len(g.taints)} taints are too many: EKS allows {aws_names.EKS_NODEGROUP_TAINTS_MAX} per node group and the GPU taint is one; "
                    f"at most {aws_names.EKS_NODEGROUP_TAINTS_MAX - 1}",
                )
            )
        taint_at: dict[tuple[str, str], int] = {}
        for j, t in enumerate(g.taints):
            if (t.key, t.effect) in taint_at:
                problems.append(
                    Problem(
                        f"{k}.taints[{j}]", f"{t.key!r} with effect {t.effect} is taints[{taint_at[t.key, t.effect]}] already; a key has one taint per effect"
                    )
                )
            taint_at.setdefault((t.key, t.effect), j)
            if not _LABEL_KEY.match(t.key) or _reserved_label(t.key):
                problems.append(
                    Problem(
                        f"{k}.taints[{j}].key",
                        f"{_fmt(t.key)} is not an allowed taint key (a valid Kubernetes key outside the kubernetes.io, k8s.io and eks.amazonaws.com domains)",
                    )
                )
            if not _LABEL_VALUE.match(t.value):
                problems.append(Problem(f"{k}.taints[{j}].value", f"{_fmt(t.value)} is not a valid taint value (up to 63 letters, digits, '-', '_', '.')"))
            if t.key == "nvidia.com/gpu":
                problems.append(Problem(f"{k}.taints[{j}].key", "'nvidia.com/gpu' is set on every GPU group already; list only extra taints"))


# FSx for Lustre rules (AWS FSx API reference, CreateFileSystem StorageCapacity and
# PerUnitStorageThroughput): 1200 GiB, 2400 GiB, then steps of 3600 (SCRATCH_1) or 2400 (others).
FSX_CAPACITY_STEP = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
FSX_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}


def fsx_capacity_allowed(deployment_type: str, capacity: int) -> bool:
    step = FSX_CAPACITY_STEP[deployment_type]
    return capacity in (1200, 2400) or (capacity > 2400 and capacity % step == 0)


def _check_storage(st: StorageConfig, problems: list[Problem]) -> None:
    e = st.efs
    if e.enabled and e.performance_mode == "maxIO" and e.throughput_mode == "elastic":
        problems.append(
            Problem(
                f"{NAMESPACE}:storage.efs.performanceMode",
                "'maxIO' is not allowed with throughputMode 'elastic' (EFS offers Elastic throughput with generalPurpose only); use generalPurpose, or throughputMode bursting",
            )
        )
    k = f"{NAMESPACE}:storage.fsx"
    f = st.fsx
    if not f.enabled:
        return
    step = FSX_CAPACITY_STEP[f.deployment_type]
    if not fsx_capacity_allowed(f.deployment_type, f.storage_capacity_gib):
        problems.append(
            Problem(
                f"{k}.storageCapacityGiB",
                f"{f.storage_capacity_gib} is not allowed for {f.deployment_type}: use 1200, 2400 or a multiple of {step} GiB",
            )
        )
    allowed = FSX_THROUGHPUT.get(f.deployment_type)
    if allowed is None and f.per_unit_storage_throughput is not None:
        problems.append(
            Problem(
                f"{k}.perUnitStorageThroughput",
                f"{f.per_unit_storage_throughput} is not allowed: {f.deployment_type} has no per-unit throughput setting (PERSISTENT_1/PERSISTENT_2 only)",
            )
        )
    if allowed is not None and f.per_unit_storage_throughput is None:
        problems.append(Problem(f"{k}.perUnitStorageThroughput", f"is required for {f.deployment_type}: one of {', '.join(map(str, allowed))} (MB/s/TiB)"))
    elif allowed is not None and f.per_unit_storage_throughput not in allowed:
        problems.append(
            Problem(
                f"{k}.perUnitStorageThroughput",
                f"{_fmt(f.per_unit_storage_throughput)} is not allowed for {f.deployment_type}: use one of {', '.join(map(str, allowed))} (MB/s/TiB)",
            )
        )
    if not f.deployment_type.startswith("PERSISTENT"):
        if f.backup_retention_days:
            problems.append(
                Problem(
                    f"{k}.backupRetentionDays",
                    f"{f.backup_retention_days} is not allowed: {f.deployment_type} has no backups (PERSISTENT_1/PERSISTENT_2 only); use 0",
                )
            )
        if f.final_backup:
            problems.append(Problem(f"{k}.finalBackup", f"true is not allowed: {f.deployment_type} has no backups (PERSISTENT_1/PERSISTENT_2 only)"))
    if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", f.backup_start_time):
        problems.append(Problem(f"{k}.backupStartTime", f"{_fmt(f.backup_start_time)} is not a UTC time HH:MM like 03:00"))
    if f.s3 is not None:
        if f.deployment_type == "SCRATCH_1":
            problems.append(Problem(f"{k}.s3", "an S3 link needs SCRATCH_2, PERSISTENT_1 or PERSISTENT_2 (SCRATCH_1 has no data repository associations)"))
        why = aws_names.bucket_problem(f.s3.bucket)
        if why:
            problems.append(Problem(f"{k}.s3.bucket", f"{_fmt(f.s3.bucket)} is not an S3 bucket name: {why}"))
        if f.s3.prefix.startswith("/"):
            problems.append(Problem(f"{k}.s3.prefix", f"{_fmt(f.s3.prefix)} must not start with '/'"))
        if not f.s3.file_system_path.startswith("/"):
            problems.append(Problem(f"{k}.s3.fileSystemPath", f"{_fmt(f.s3.file_system_path)} must be an absolute path like /s3"))


def _quantity(text: str, suffixes: str) -> bool:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)" + suffixes, text)
    return m is not None and float(m.group(1)) > 0


def _check_etcd(e: EtcdConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:etcd"
    if e.replicas not in (1, 3, 5):
        problems.append(Problem(f"{k}.replicas", f"{e.replicas} is not allowed: use 1 (dev), 3 or 5 (an odd count keeps a quorum)"))
    if not _quantity(e.cpu, r"m?"):
        problems.append(Problem(f"{k}.cpu", f"{_fmt(e.cpu)} is not a positive Kubernetes CPU quantity like 250m or 1"))
    if not _quantity(e.memory, r"(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?"):
        problems.append(Problem(f"{k}.memory", f"{_fmt(e.memory)} is not a positive Kubernetes memory quantity like 512Mi, 1Gi or 1G"))


# Namespaces that exist already or that the stack's services create for themselves.
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "mpi-operator", "kubeflow", "amazon-cloudwatch", "kueue-system")


def _check_services(sv: ServicesConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:services"
    ns = sv.training_namespace
    if not _K8S_NAME.match(ns) or len(ns) > 63 or ns.startswith("kube-"):
        problems.append(
            Problem(f"{k}.trainingNamespace", f"{_fmt(ns)} is not allowed: a Kubernetes namespace name (lower-case letters, digits, '-'), not kube-*")
        )
    elif ns in RESERVED_NAMESPACES:
        problems.append(
            Problem(
                f"{k}.trainingNamespace",
                f"{_fmt(ns)} is not allowed: it belongs to Kubernetes or to a service this stack installs ({', '.join(RESERVED_NAMESPACES)})",
            )
        )
