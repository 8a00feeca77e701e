"""Checks that need more than one field of the stack config, the catalog or AWS's limits.

Each appends a ``Problem`` naming the config key, the bad value and what is allowed; ``load`` runs
them all on every section that parsed, so one typo does not hide other problems. Here: the names
derived from the cluster name, tags, the AZ, the network, the cluster, the autoscaler, etcd and the
services (the queues' are ``stacks/queues/queue_checks.py``, the node groups'
``stacks/config/node_group_checks.py``, storage's ``stacks/config/storage_checks.py``).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from facts import aws_names, durations, versions
from facts.kube import RESERVED_NAMESPACES
from facts.problems import Problem
from facts.problems import fmt as _fmt
from stacks.config.address_checks import check_subnet_addresses
from stacks.config.fleet import FleetConfig
from stacks.config.models import (
    NAMESPACE,
    ClusterConfig,
    EtcdConfig,
    GpuNodeGroupConfig,
    NetworkConfig,
    ServicesConfig,
    StorageConfig,
    SystemNodeGroupConfig,
)
from stacks.config.node_group_checks import _K8S_NAME, _check_gpu_groups, _check_system
from stacks.config.stack_config import (
    AlertsConfig,
    AutoscalingConfig,
    BurnInConfig,
    MonitoringConfig,
    QueuesConfig,
    StackConfig,
)
from stacks.config.storage_checks import check_storage
from stacks.queues import check_config as check_queues

# The alarms read Container Insights metrics and the container logs the add-on ships.
ALERTS_NEED_MONITORING = "true needs monitoring.enabled: the alarms read the metrics and logs of Container Insights"


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
    """The parsed sections the checks (and the job section) look at, by their StackConfig field
    names: a section left out is its default, one given but invalid None."""

    network: NetworkConfig | None
    cluster: ClusterConfig | None
    system_node_group: SystemNodeGroupConfig | None
    gpu_node_groups: list[GpuNodeGroupConfig | None]
    storage: StorageConfig | None
    etcd: EtcdConfig | None
    services: ServicesConfig | None
    monitoring: MonitoringConfig | None
    alerts: AlertsConfig | None
    autoscaling: AutoscalingConfig | None
    queues: QueuesConfig | None
    burn_in: BurnInConfig | None
    fleet: FleetConfig | None = None

    def or_default(self, name: str) -> Any:
        """Section ``name``, or its default where it was given but invalid (its problems are
        reported already): what a check against the rest of the stack assumes of it."""
        value = getattr(self, name)
        return StackConfig.model_fields[name].get_default(call_default_factory=True) if value is None else value


def check_all(az: str, region: str, cluster_name: str, s: Sections, problems: list[Problem]) -> None:
    """Every cross-field check, on each section that parsed. ``cluster_name`` is the effective one
    (``cluster.name``, else ``<project>-<stack>``)."""
    _check_az(az, region, problems)
    _check_derived_names(cluster_name, s, problems)
    if s.network is not None:
        _check_network(s.network, problems)
    if s.cluster is not None:
        _check_cluster(s.cluster, problems)
    if s.system_node_group is not None:
        _check_system(s.system_node_group, problems)
    _check_gpu_groups(s.gpu_node_groups, s.or_default("burn_in").enabled, problems)
    check_subnet_addresses(s.network, s.system_node_group, s.gpu_node_groups, problems)
    if s.storage is not None:
        check_storage(s.storage, problems)
    if s.etcd is not None:
        _check_etcd(s.etcd, problems)
    if s.services is not None:
        _check_services(s.services, problems)
    if s.autoscaling is not None:
        _check_autoscaling(s.autoscaling, problems)
    if s.queues is not None:
        training = s.services.training_namespace if s.services is not None else None
        admins = s.cluster.admin_principals if s.cluster is not None else []
        check_queues(
            s.queues,
            s.gpu_node_groups,
            s.or_default("autoscaling"),
            training,
            admins,
            problems,
            NAMESPACE,
            s.or_default("burn_in"),
        )
    _check_fleet_worker_endpoint(s, problems)
    if s.alerts is not None and s.alerts.enabled and not s.or_default("monitoring").enabled:
        problems.append(Problem(f"{NAMESPACE}:alerts.enabled", ALERTS_NEED_MONITORING))
    if s.monitoring is not None and s.monitoring.log_retention_days not in LOG_RETENTION_DAYS:
        problems.append(
            Problem(
                f"{NAMESPACE}:monitoring.logRetentionDays",
                f"{s.monitoring.log_retention_days} is not a CloudWatch retention; use one of {LOG_RETENTION_DAYS}",
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
                f"{_fmt(cluster_name)}{where} is not a valid EKS cluster name: letters, digits, '-' and '_', starting "
                f"with a letter or digit, at most {aws_names.EKS_CLUSTER_NAME_MAX} characters",
            )
        )
        return
    groups = ["system"] + [f"gpu-{g.name}" for g in s.gpu_node_groups if g is not None]
    longest = max(groups, key=len)
    node_group = f"{cluster_name}-{longest}"
    if len(node_group) > aws_names.EKS_NODEGROUP_NAME_MAX:
        room = aws_names.EKS_NODEGROUP_NAME_MAX - len(longest) - 1
        problems.append(
            Problem(
                k,
                f"{_fmt(cluster_name)}{where} makes the node group name {node_group!r} {len(node_group)} characters "
                f"long; EKS allows {aws_names.EKS_NODEGROUP_NAME_MAX}: use a cluster name of at most {room} characters "
                "(or shorter GPU group names)",
            )
        )


def check_tags(tags: dict[str, str], problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:tags"
    # The stack adds up to 6 tags of its own (project, stack, node group, Name, cluster, role).
    room = aws_names.TAGS_PER_RESOURCE - 6
    if len(tags) > room:
        problems.append(
            Problem(
                k,
                f"{len(tags)} tags are too many: AWS allows {aws_names.TAGS_PER_RESOURCE} per resource and the stack "
                f"adds 6; at most {room}",
            )
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
    for key, value in (
        ("scaleDownUnneededTime", a.scale_down_unneeded_time),
        ("scaleDownDelayAfterAdd", a.scale_down_delay_after_add),
    ):
        why = durations.go_duration_problem(value)
        if why:
            problems.append(
                Problem(
                    f"{k}.{key}",
                    f"{_fmt(value)} is not a Go duration ({why}): a number with a unit, ns, us, ms, s, m or h, or "
                    "several, like 10m, 90s or 1h30m",
                )
            )
        elif durations.parse_go_duration(value) < 0:
            problems.append(
                Problem(f"{k}.{key}", f"{_fmt(value)} is negative: the time to wait is 0 or more, like 10m")
            )


def _check_az(az: str, region: str, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:gpuAvailabilityZone"
    if az == "auto":
        return
    if not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d[a-z]", az):
        problems.append(
            Problem(k, f"{_fmt(az)} is not allowed: use 'auto' or an AZ name like '{region or 'us-west-2'}b'")
        )
    elif region and not az.startswith(region):
        problems.append(
            Problem(k, f"{_fmt(az)} is not in the stack's region {region!r}; use an AZ of {region} or 'auto'")
        )


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
        problems.append(
            Problem(
                f"{k}.vpcCidr",
                f"{_fmt(n.vpc_cidr)} is not a private range; use 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 space",
            )
        )
    # Private subnets take one /private_subnet_prefix block each; public subnets share one more.
    needed = n.availability_zone_count + 1
    have = 0 if n.private_subnet_prefix <= net.prefixlen else 2 ** (n.private_subnet_prefix - net.prefixlen)
    if have < needed:
        problems.append(
            Problem(
                f"{k}.vpcCidr",
                f"{_fmt(n.vpc_cidr)} is too small: {n.availability_zone_count} AZs need {needed} "
                f"/{n.private_subnet_prefix} blocks ({n.availability_zone_count} private subnets + 1 for the public "
                f"subnets) but it holds {have}; use a larger VPC CIDR or a longer network.privateSubnetPrefix",
            )
        )
    elif n.private_subnet_prefix + 4 > 28:
        problems.append(
            Problem(
                f"{k}.privateSubnetPrefix",
                f"{n.private_subnet_prefix} leaves no room for public subnets (/{n.private_subnet_prefix + 4} > /28)",
            )
        )


LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
RFC1918 = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


def _check_fleet_worker_endpoint(s: Sections, problems: list[Problem]) -> None:
    """A fleet's worker serves its API on the public endpoint: the manager's Kueue, in another VPC (or
    region), connects to it there; this project builds no peering to reach a private-only endpoint."""
    if s.fleet is None or not s.fleet.manager or s.or_default("cluster").endpoint_public_access:
        return
    problems.append(
        Problem(
            f"{NAMESPACE}:cluster.endpointPublicAccess",
            "false on a fleet worker (fleet.manager is set): the manager's Kueue connects to this cluster's API "
            "server from its own VPC over the public endpoint; keep it true and narrow it with "
            "cluster.endpointPublicAccessCidrs to the manager's NAT gateway addresses",
        )
    )


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
                    f"{_fmt(cidr)} is not allowed: {why}; give the public IPv4 blocks the API's clients connect from "
                    "(0.0.0.0/0: anywhere)",
                )
            )
    if len(c.endpoint_public_access_cidrs) > aws_names.EKS_PUBLIC_ACCESS_CIDRS_MAX:
        problems.append(
            Problem(
                f"{k}.endpointPublicAccessCidrs",
                f"{len(c.endpoint_public_access_cidrs)} blocks are too many: EKS takes at most "
                f"{aws_names.EKS_PUBLIC_ACCESS_CIDRS_MAX} per cluster (a quota that cannot be raised); merge "
                "neighbouring blocks into larger ones",
            )
        )
    if not c.endpoint_public_access and not c.endpoint_private_access:
        problems.append(
            Problem(
                f"{k}.endpointPrivateAccess",
                "false together with endpointPublicAccess false leaves no way to reach the API server",
            )
        )
    for i, arn in enumerate(c.admin_principals):
        why = aws_names.role_arn_problem(arn, example="Admin")
        if why:
            problems.append(Problem(f"{k}.adminPrincipals[{i}]", why))
    if len(set(c.admin_principals)) != len(c.admin_principals):
        problems.append(Problem(f"{k}.adminPrincipals", "lists the same principal twice"))
    if c.log_retention_days not in LOG_RETENTION_DAYS:
        problems.append(
            Problem(
                f"{k}.logRetentionDays",
                f"{c.log_retention_days} is not a CloudWatch retention; use one of {LOG_RETENTION_DAYS}",
            )
        )


def _quantity(text: str, suffixes: str) -> bool:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)" + suffixes, text)
    return m is not None and float(m.group(1)) > 0


def _check_etcd(e: EtcdConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:etcd"
    if e.replicas not in (1, 3, 5):
        problems.append(
            Problem(f"{k}.replicas", f"{e.replicas} is not allowed: use 1 (dev), 3 or 5 (an odd count keeps a quorum)")
        )
    if not _quantity(e.cpu, r"m?"):
        problems.append(Problem(f"{k}.cpu", f"{_fmt(e.cpu)} is not a positive Kubernetes CPU quantity like 250m or 1"))
    if not _quantity(e.memory, r"(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?"):
        problems.append(
            Problem(
                f"{k}.memory", f"{_fmt(e.memory)} is not a positive Kubernetes memory quantity like 512Mi, 1Gi or 1G"
            )
        )


def _check_services(sv: ServicesConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:services"
    ns = sv.training_namespace
    if not _K8S_NAME.match(ns) or len(ns) > 63 or ns.startswith("kube-"):
        problems.append(
            Problem(
                f"{k}.trainingNamespace",
                f"{_fmt(ns)} is not allowed: a Kubernetes namespace name (lower-case letters, digits, '-'), not kube-*",
            )
        )
    elif ns in RESERVED_NAMESPACES:
        problems.append(
            Problem(
                f"{k}.trainingNamespace",
                f"{_fmt(ns)} is not allowed: it belongs to Kubernetes or to a service this stack installs "
                f"({', '.join(RESERVED_NAMESPACES)})",
            )
        )
