"""The typed, validated stack config: everything a user sets per environment in Pulumi.<env>.yaml.

Keys live in the project's namespace (``gpu-training:<key>``) plus ``aws:region``. Validation runs
before any resource is registered and reports every problem at once, each naming the config key,
the bad value and what is allowed (``ConfigError``). Nothing here touches Pulumi resources or AWS.
"""

from __future__ import annotations

import ipaddress
import json
import re
from functools import lru_cache
from typing import Any, Literal, Mapping, Optional, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from infra import catalog
from infra import versions

NAMESPACE = "gpu-training"

T = TypeVar("T", bound=BaseModel)


class Problem:
    """One config problem: the key it is about, and what is wrong."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"

    def __repr__(self) -> str:
        return f"Problem({self.key!r}, {self.message!r})"


class ConfigError(Exception):
    """Raised with every problem found in a stack config."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid stack config ({len(problems)} problem(s)):\n{lines}")


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=False,
    )


# ---------------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------------


class NetworkConfig(_Model):
    vpc_cidr: str = "10.0.0.0/16"
    # Private (node) subnets are spread over this many AZs; one of them is the GPU AZ. EKS needs two.
    availability_zone_count: int = Field(2, ge=2, le=6)
    # Prefix length of each private subnet: /19 gives 8,190 addresses per AZ, enough for GPU nodes
    # with many ENIs and the VPC CNI's warm IP pools.
    private_subnet_prefix: int = Field(19, ge=16, le=24)
    # One NAT gateway (cheap, dev) or one per AZ (no cross-AZ egress dependency, prod).
    nat_gateways: Literal["single", "perAz"] = "single"


class ClusterConfig(_Model):
    name: Optional[str] = None  # default: <project>-<stack>
    kubernetes_version: str = versions.KUBERNETES_DEFAULT
    endpoint_public_access: bool = True
    endpoint_public_access_cidrs: list[str] = Field(default_factory=lambda: ["0.0.0.0/0"])
    endpoint_private_access: bool = True
    # IAM principals (role/user ARNs) given cluster-admin through EKS access entries.
    admin_principals: list[str] = Field(default_factory=list)
    # Days to keep the control-plane logs (CloudWatch log group /aws/eks/<name>/cluster).
    log_retention_days: int = 30
    deletion_protection: bool = False


def _desired_defaults_to_min(data: Any) -> Any:
    """An unset desiredSize follows minSize (so `minSize: 2` alone means two nodes)."""
    if isinstance(data, dict) and "desiredSize" not in data and "desired_size" not in data:
        for key in ("minSize", "min_size"):
            if key in data:
                return {**data, "desiredSize": data[key]}
    return data


class SystemNodeGroupConfig(_Model):
    instance_type: str = "c5.2xlarge"
    min_size: int = Field(2, ge=0)
    desired_size: int = Field(2, ge=0)
    max_size: int = Field(4, ge=1)
    disk_size_gib: int = Field(100, ge=20, le=16384, alias="diskSizeGiB")

    _desired = model_validator(mode="before")(_desired_defaults_to_min)


class Taint(_Model):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "NoExecute", "PreferNoSchedule"] = "NoSchedule"


class PlacementGroupConfig(_Model):
    # create: a new cluster placement group in the GPU AZ; existing: the named one; none: no
    # placement group (required with capacity reservations/blocks that bring their own placement).
    mode: Literal["create", "existing", "none"] = "create"
    name: Optional[str] = None


CapacityType = Literal["on-demand", "spot", "capacity-block"]


class GpuNodeGroupConfig(_Model):
    name: str
    instance_type: str
    min_size: int = Field(0, ge=0)
    desired_size: int = Field(0, ge=0)
    max_size: int = Field(2, ge=1)
    disk_size_gib: int = Field(500, ge=20, le=16384, alias="diskSizeGiB")
    capacity_type: CapacityType = "on-demand"
    capacity_reservation_id: Optional[str] = None
    # EFA on (default where the type has it) or off. Asking for it on a type without EFA is an error.
    efa: Optional[bool] = None
    placement_group: Optional[PlacementGroupConfig] = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)

    _desired = model_validator(mode="before")(_desired_defaults_to_min)

    @property
    def instance(self) -> catalog.InstanceType:
        it = catalog.get(self.instance_type)
        assert it is not None, "validated config always names a catalog type"
        return it

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


class EfsConfig(_Model):
    enabled: bool = True
    throughput_mode: Literal["elastic", "bursting"] = "elastic"
    performance_mode: Literal["generalPurpose", "maxIO"] = "generalPurpose"


class S3LinkConfig(_Model):
    """An S3 bucket/prefix linked to FSx for import (and optionally export)."""

    bucket: str
    prefix: str = ""
    # Where the linked data appears inside the file system (data repository associations only).
    file_system_path: str = "/s3"
    export: bool = False


FsxDeploymentType = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]


class FsxConfig(_Model):
    enabled: bool = True
    deployment_type: FsxDeploymentType = "SCRATCH_2"
    storage_capacity_gib: int = Field(1200, alias="storageCapacityGiB")
    # MB/s per TiB of storage; PERSISTENT types only.
    per_unit_storage_throughput: Optional[int] = None
    s3: Optional[S3LinkConfig] = None


class StorageConfig(_Model):
    efs: EfsConfig = EfsConfig()
    fsx: FsxConfig = FsxConfig()
    # Protect the stores that hold data (file systems and their KMS key) from `pulumi destroy`.
    # On by default; a dev stack turns it off explicitly.
    deletion_protection: bool = True


class EtcdConfig(_Model):
    """etcd for PyTorch's etcd rendezvous (v2 API)."""

    enabled: bool = True
    replicas: int = 1
    cpu: str = "250m"
    memory: str = "512Mi"


class ServicesConfig(_Model):
    """Cluster services that can be switched off per environment."""

    training_namespace: str = "training"
    nvidia_device_plugin: bool = True
    efa_device_plugin: bool = True
    mpi_operator: bool = True
    training_operator: bool = True


class MonitoringConfig(_Model):
    """CloudWatch Container Insights with GPU and EFA metrics, and a dashboard."""

    enabled: bool = True
    log_retention_days: int = 30
    dashboard: bool = True


class StackConfig(_Model):
    project: str
    stack: str
    region: str
    gpu_availability_zone: str = "auto"
    network: NetworkConfig = NetworkConfig()
    cluster: ClusterConfig = ClusterConfig()
    system_node_group: SystemNodeGroupConfig = SystemNodeGroupConfig()
    gpu_node_groups: list[GpuNodeGroupConfig] = Field(default_factory=list)
    storage: StorageConfig = StorageConfig()
    etcd: EtcdConfig = EtcdConfig()
    services: ServicesConfig = ServicesConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    # Training jobs (components.jobs JobSpec models), checked against the rest of the stack.
    jobs: list[Any] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)

    @property
    def cluster_name(self) -> str:
        return self.cluster.name or f"{self.project}-{self.stack}"

    @property
    def gpu_instance_types(self) -> list[str]:
        return sorted({g.instance_type for g in self.gpu_node_groups})

    def gpu_group(self, name: str) -> Optional[GpuNodeGroupConfig]:
        return next((g for g in self.gpu_node_groups if g.name == name), None)


# Top-level keys in the project namespace and the model each one parses into.
SECTIONS: dict[str, tuple[str, type]] = {
    "gpuAvailabilityZone": ("gpu_availability_zone", str),
    "network": ("network", NetworkConfig),
    "cluster": ("cluster", ClusterConfig),
    "systemNodeGroup": ("system_node_group", SystemNodeGroupConfig),
    "gpuNodeGroups": ("gpu_node_groups", list),
    "storage": ("storage", StorageConfig),
    "etcd": ("etcd", EtcdConfig),
    "services": ("services", ServicesConfig),
    "monitoring": ("monitoring", MonitoringConfig),
    "jobs": ("jobs", "jobs"),
    "tags": ("tags", dict),
}

# Keys of other namespaces that the stack reads or tolerates (provider settings).
FOREIGN_NAMESPACES_ALLOWED = ("aws", "kubernetes", "pulumi")


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_keys(model: type, loc: tuple) -> list[str]:
    """The config keys a model accepts at ``loc`` (a pydantic error location inside ``model``)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return []
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(f.alias or n for n, f in current.model_fields.items())
    return []


def _model_in(annotation: Any) -> Any:
    """The BaseModel inside Optional[...] / list[...] annotations, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _pydantic_problems(prefix: str, err: ValidationError, model: type = BaseModel) -> list[Problem]:
    out = []
    for e in err.errors(include_url=False):
        loc = prefix
        for part in e["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else f".{part}"
        kind = e["type"]
        if kind == "extra_forbidden":
            key = e["loc"][-1]
            allowed = _allowed_keys(model, e["loc"][:-1])
            msg = f"unknown key {key!r}" + (f"; allowed keys are: {', '.join(allowed)}" if allowed else "")
        elif kind == "missing":
            msg = "is required"
        else:
            msg = f"{_fmt(e.get('input'))} is not allowed: {e['msg']}"
        out.append(Problem(loc, msg))
    return out


def _parse(model: type[T], prefix: str, raw: Any, problems: list[Problem]) -> Optional[T]:
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        problems.extend(_pydantic_problems(prefix, err, model))
        return None


def decode_config_values(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Turn the engine's flat config map (``ns:key`` -> JSON text or plain string) into values."""
    # The engine passes structured values (maps, lists) as JSON text and scalars as plain text.
    # Scalars stay text: the models coerce "3" or "true" where a number or a flag is expected.
    out: dict[str, Any] = {}
    for key, value in flat.items():
        decoded = value
        if isinstance(value, str) and value[:1] in "[{":
            try:
                decoded = json.loads(value)
            except ValueError:
                pass
        out[key] = decoded
    return out


def load(flat: Mapping[str, Any], project: str, stack: str) -> StackConfig:
    """Validate a stack's config (``{"ns:key": value}``) and return the typed config.

    Raises ``ConfigError`` listing every problem found.
    """
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    for full_key, value in sorted(flat.items()):
        ns, _, key = full_key.partition(":")
        if ns == NAMESPACE:
            if key not in SECTIONS:
                allowed = ", ".join(sorted(SECTIONS))
                problems.append(Problem(full_key, f"unknown key; allowed keys are: {allowed}"))
                continue
            values[key] = value
        elif ns in FOREIGN_NAMESPACES_ALLOWED:
            continue
        else:
            problems.append(
                Problem(full_key, f"unknown namespace {ns!r}; this project reads {NAMESPACE}:* and aws:region")
            )

    def key(name: str) -> str:
        return f"{NAMESPACE}:{name}"

    region = flat.get("aws:region")
    if not region:
        problems.append(Problem("aws:region", "is required (e.g. us-west-2)"))
        region = ""
    elif not isinstance(region, str) or not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", region):
        problems.append(Problem("aws:region", f"{_fmt(region)} is not an AWS region name like 'us-west-2'"))
    elif known_regions() and region not in known_regions():
        problems.append(Problem("aws:region", f"{_fmt(region)} is not an AWS region known to this toolkit's AWS SDK (botocore); known: {', '.join(sorted(known_regions()))}"))

    parsed: dict[str, Any] = {}
    for name, (field, model) in SECTIONS.items():
        if name not in values:
            continue
        raw = values[name]
        if model == "jobs":
            continue  # parsed last: jobs are checked against the node groups, stores and services
        if model is str:
            if not isinstance(raw, str):
                problems.append(Problem(key(name), f"{_fmt(raw)} is not allowed: expected a string"))
            else:
                parsed[field] = raw
        elif model is dict:
            if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
                problems.append(Problem(key(name), f"{_fmt(raw)} is not allowed: expected a map of strings"))
            else:
                parsed[field] = raw
        elif model is list:
            if not isinstance(raw, list):
                problems.append(Problem(key(name), f"{_fmt(raw)} is not allowed: expected a list of node groups"))
                continue
            groups = []
            for i, item in enumerate(raw):
                g = _parse(GpuNodeGroupConfig, f"{key(name)}[{i}]", item, problems)
                groups.append(g)
            parsed[field] = groups
        else:
            if raw is None:
                raw = {}
            section = _parse(model, key(name), raw, problems)
            if section is not None:
                parsed[field] = section

    # Semantic checks run on every section that parsed, so one typo does not hide other problems.
    _check_az(parsed.get("gpu_availability_zone", "auto"), region, problems)
    network = parsed.get("network", NetworkConfig())
    if "network" in values and "network" not in parsed:
        network = None
    if network is not None:
        _check_network(network, problems)
    cluster = parsed.get("cluster", None if "cluster" in values else ClusterConfig())
    if cluster is not None:
        _check_cluster(cluster, problems)
    system = parsed.get("system_node_group", None if "systemNodeGroup" in values else SystemNodeGroupConfig())
    if system is not None:
        _check_system(system, problems)
    groups = parsed.get("gpu_node_groups", [])
    _check_gpu_groups(groups, problems)
    storage = parsed.get("storage", None if "storage" in values else StorageConfig())
    if storage is not None:
        _check_storage(storage, problems)
    etcd = parsed.get("etcd", None if "etcd" in values else EtcdConfig())
    if etcd is not None:
        _check_etcd(etcd, problems)
    services = parsed.get("services", None if "services" in values else ServicesConfig())
    if services is not None:
        _check_services(services, problems)
    monitoring = parsed.get("monitoring")
    if monitoring is not None and monitoring.log_retention_days not in LOG_RETENTION_DAYS:
        problems.append(
            Problem(f"{NAMESPACE}:monitoring.logRetentionDays", f"{monitoring.log_retention_days} is not a CloudWatch retention; use one of {LOG_RETENTION_DAYS}")
        )

    if "jobs" in values:
        raw_groups = values.get("gpuNodeGroups") if isinstance(values.get("gpuNodeGroups"), list) else []
        invalid = {str(item.get("name")) for item, g in zip(raw_groups, groups) if g is None and isinstance(item, dict)}
        parsed["jobs"] = _parse_jobs(values["jobs"], groups, storage, services, parsed.get("etcd", EtcdConfig()), problems, invalid)

    if problems:
        raise ConfigError(problems)

    parsed["gpu_node_groups"] = [g for g in groups if g is not None]
    return StackConfig(project=project, stack=stack, region=region, **parsed)


# ---------------------------------------------------------------------------------------------
# Semantic checks
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def known_regions() -> frozenset[str]:
    """Every EC2 region botocore knows (read from its bundled endpoint data; no AWS call)."""
    try:
        import botocore.session
    except ImportError:  # pragma: no cover - botocore is a pinned requirement
        return frozenset()
    session = botocore.session.get_session()
    regions: set[str] = set()
    for partition in session.get_available_partitions():
        regions.update(session.get_available_regions("ec2", partition_name=partition))
    return frozenset(regions)


def _parse_jobs(raw, groups, storage, services, etcd, problems: list[Problem], invalid_groups: set[str]) -> list:
    from stacks.jobs_config import parse_jobs

    storage = storage or StorageConfig()
    services = services or ServicesConfig()
    volumes = {name for name, on in (("efs", storage.efs.enabled), ("fsx", storage.fsx.enabled)) if on}
    operators = {name for name, on in (("mpi", services.mpi_operator), ("training", services.training_operator)) if on}
    return parse_jobs(
        raw,
        f"{NAMESPACE}:jobs",
        problems,
        groups={g.name: g for g in groups if g is not None},
        volumes=volumes,
        operators=operators,
        etcd_enabled=etcd.enabled,
        invalid_groups=invalid_groups,
    )


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
    if not any(net.subnet_of(ipaddress.ip_network(r)) for r in RFC1918):
        problems.append(
            Problem(f"{k}.vpcCidr", f"{_fmt(n.vpc_cidr)} is not a private range; use 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16 space")
        )
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
_ARN = re.compile(r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:(role|user|assumed-role)/[\w+=,.@/-]+$")


def _check_cluster(c: ClusterConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:cluster"
    if c.kubernetes_version not in versions.KUBERNETES_SUPPORTED:
        problems.append(
            Problem(
                f"{k}.kubernetesVersion",
                f"{_fmt(c.kubernetes_version)} is not supported; use one of {', '.join(versions.KUBERNETES_SUPPORTED)}",
            )
        )
    if c.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}", c.name):
        problems.append(Problem(f"{k}.name", f"{_fmt(c.name)} is not a valid EKS cluster name (letters, digits, - and _, up to 100)"))
    for i, cidr in enumerate(c.endpoint_public_access_cidrs):
        try:
            ipaddress.ip_network(cidr, strict=True)
        except ValueError as err:
            problems.append(Problem(f"{k}.endpointPublicAccessCidrs[{i}]", f"{_fmt(cidr)} is not a valid CIDR block ({err})"))
    if not c.endpoint_public_access and not c.endpoint_private_access:
        problems.append(Problem(f"{k}.endpointPrivateAccess", "false together with endpointPublicAccess false leaves no way to reach the API server"))
    for i, arn in enumerate(c.admin_principals):
        if not _ARN.match(arn):
            problems.append(
                Problem(f"{k}.adminPrincipals[{i}]", f"{_fmt(arn)} is not an IAM role or user ARN like arn:aws:iam::123456789012:role/Admin")
            )
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
        problems.append(
            Problem(f"{k}.instanceType", f"{_fmt(s.instance_type)} is not in the instance catalog; use one of {', '.join(catalog.SYSTEM_TYPES)}")
        )
    elif it.is_gpu:
        problems.append(Problem(f"{k}.instanceType", f"{_fmt(s.instance_type)} is a GPU type; system nodes use one of {', '.join(catalog.SYSTEM_TYPES)}"))
    _check_scaling(k, s.min_size, s.desired_size, s.max_size, problems)
    if s.max_size < 1:
        problems.append(Problem(f"{k}.maxSize", "must be at least 1: system pods need a node"))


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
                Problem(f"{k}.name", f"{_fmt(g.name)} is not allowed: lower-case letters, digits and '-', starting and ending with a letter or digit, at most 32 characters")
            )
        if g.name in seen:
            problems.append(Problem(f"{k}.name", f"{_fmt(g.name)} is used by gpuNodeGroups[{seen[g.name]}] too; node group names must be unique"))
        else:
            seen[g.name] = i
        it = catalog.get(g.instance_type)
        if it is None or not it.is_gpu:
            problems.append(
                Problem(f"{k}.instanceType", f"{_fmt(g.instance_type)} is not a GPU type in the instance catalog; use one of {', '.join(catalog.GPU_TYPES)}")
            )
        elif g.efa and not it.efa_supported:
            efa_types = ", ".join(t for t in catalog.GPU_TYPES if catalog.BUILTIN[t].efa_supported)
            problems.append(Problem(f"{k}.efa", f"true is not allowed: {g.instance_type} has no EFA; EFA types are {efa_types}"))
        _check_scaling(k, g.min_size, g.desired_size, g.max_size, problems)
        if g.capacity_type == "capacity-block" and not g.capacity_reservation_id:
            problems.append(Problem(f"{k}.capacityReservationId", "is required with capacityType 'capacity-block' (the cr-... id of the block)"))
        if g.capacity_reservation_id and not re.fullmatch(r"cr-[0-9a-f]{8,17}", g.capacity_reservation_id):
            problems.append(Problem(f"{k}.capacityReservationId", f"{_fmt(g.capacity_reservation_id)} is not a capacity reservation id like cr-0123456789abcdef0"))
        if g.capacity_type == "spot" and g.capacity_reservation_id:
            problems.append(Problem(f"{k}.capacityReservationId", "cannot be used with capacityType 'spot'"))
        pg = g.placement_group
        if pg is not None:
            if pg.mode == "existing" and not pg.name:
                problems.append(Problem(f"{k}.placementGroup.name", "is required with mode 'existing'"))
            if pg.mode != "existing" and pg.name:
                problems.append(Problem(f"{k}.placementGroup.name", f"{_fmt(pg.name)} is only used with mode 'existing' (mode is {pg.mode!r})"))
            if pg.mode == "create" and g.capacity_reservation_id:
                problems.append(
                    Problem(f"{k}.placementGroup.mode", "'create' cannot be combined with a capacity reservation/block; use 'none' or the reservation's own placement group with 'existing'")
                )
        for lk, lv in g.labels.items():
            if not _LABEL_KEY.match(lk) or _reserved_label(lk):
                problems.append(
                    Problem(f"{k}.labels.{lk}", f"{_fmt(lk)} is not an allowed label key (a valid Kubernetes label key outside the kubernetes.io, k8s.io and eks.amazonaws.com domains)")
                )
            if not _LABEL_VALUE.match(lv):
                problems.append(Problem(f"{k}.labels.{lk}", f"{_fmt(lv)} is not a valid Kubernetes label value"))
        for j, t in enumerate(g.taints):
            if not _LABEL_KEY.match(t.key) or _reserved_label(t.key):
                problems.append(Problem(f"{k}.taints[{j}].key", f"{_fmt(t.key)} is not an allowed taint key (a valid Kubernetes key outside the kubernetes.io, k8s.io and eks.amazonaws.com domains)"))
            if not _LABEL_VALUE.match(t.value):
                problems.append(Problem(f"{k}.taints[{j}].value", f"{_fmt(t.value)} is not a valid taint value (up to 63 letters, digits, '-', '_', '.')"))
            if t.key == "nvidia.com/gpu":
                problems.append(Problem(f"{k}.taints[{j}].key", "'nvidia.com/gpu' is set on every GPU group already; list only extra taints"))


# FSx for Lustre rules (AWS FSx API reference, CreateFileSystem StorageCapacity and
# PerUnitStorageThroughput): 1200 GiB, 2400 GiB, then steps of 3600 (SCRATCH_1) or 2400 (others).
FSX_CAPACITY_STEP = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
FSX_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def fsx_capacity_allowed(deployment_type: str, capacity: int) -> bool:
    step = FSX_CAPACITY_STEP[deployment_type]
    return capacity in (1200, 2400) or (capacity > 2400 and capacity % step == 0)


def _check_storage(st: StorageConfig, problems: list[Problem]) -> None:
    e = st.efs
    if e.enabled and e.performance_mode == "maxIO" and e.throughput_mode == "elastic":
        problems.append(
            Problem(f"{NAMESPACE}:storage.efs.performanceMode", "'maxIO' is not allowed with throughputMode 'elastic' (EFS offers Elastic throughput with generalPurpose only); use generalPurpose, or throughputMode bursting")
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
            Problem(f"{k}.perUnitStorageThroughput", f"{f.per_unit_storage_throughput} is not allowed: {f.deployment_type} has no per-unit throughput setting (PERSISTENT_1/PERSISTENT_2 only)")
        )
    if allowed is not None and f.per_unit_storage_throughput is None:
        problems.append(
            Problem(f"{k}.perUnitStorageThroughput", f"is required for {f.deployment_type}: one of {', '.join(map(str, allowed))} (MB/s/TiB)")
        )
    elif allowed is not None and f.per_unit_storage_throughput not in allowed:
        problems.append(
            Problem(
                f"{k}.perUnitStorageThroughput",
                f"{_fmt(f.per_unit_storage_throughput)} is not allowed for {f.deployment_type}: use one of {', '.join(map(str, allowed))} (MB/s/TiB)",
            )
        )
    if f.s3 is not None:
        if f.deployment_type == "SCRATCH_1":
            problems.append(Problem(f"{k}.s3", "an S3 link needs SCRATCH_2, PERSISTENT_1 or PERSISTENT_2 (SCRATCH_1 has no data repository associations)"))
        if not _BUCKET.match(f.s3.bucket):
            problems.append(Problem(f"{k}.s3.bucket", f"{_fmt(f.s3.bucket)} is not an S3 bucket name (just the name, no s3:// or path)"))
        if f.s3.prefix.startswith("/"):
            problems.append(Problem(f"{k}.s3.prefix", f"{_fmt(f.s3.prefix)} must not start with '/'"))
        if not f.s3.file_system_path.startswith("/"):
            problems.append(Problem(f"{k}.s3.fileSystemPath", f"{_fmt(f.s3.file_system_path)} must be an absolute path like /s3"))


def _quantity(text: str, suffixes: str) -> bool:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)" + suffixes, text)
    return bool(m) and float(m.group(1)) > 0


def _check_etcd(e: EtcdConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:etcd"
    if e.replicas not in (1, 3, 5):
        problems.append(Problem(f"{k}.replicas", f"{e.replicas} is not allowed: use 1 (dev), 3 or 5 (an odd count keeps a quorum)"))
    if not _quantity(e.cpu, r"m?"):
        problems.append(Problem(f"{k}.cpu", f"{_fmt(e.cpu)} is not a positive Kubernetes CPU quantity like 250m or 1"))
    if not _quantity(e.memory, r"(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?"):
        problems.append(Problem(f"{k}.memory", f"{_fmt(e.memory)} is not a positive Kubernetes memory quantity like 512Mi, 1Gi or 1G"))


# Namespaces that exist already or that the stack's services create for themselves.
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "mpi-operator", "kubeflow", "amazon-cloudwatch")


def _check_services(sv: ServicesConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:services"
    ns = sv.training_namespace
    if not _K8S_NAME.match(ns) or len(ns) > 63 or ns.startswith("kube-"):
        problems.append(Problem(f"{k}.trainingNamespace", f"{_fmt(ns)} is not allowed: a Kubernetes namespace name (lower-case letters, digits, '-'), not kube-*"))
    elif ns in RESERVED_NAMESPACES:
        problems.append(
            Problem(f"{k}.trainingNamespace", f"{_fmt(ns)} is not allowed: it belongs to Kubernetes or to a service this stack installs ({', '.join(RESERVED_NAMESPACES)})")
        )
