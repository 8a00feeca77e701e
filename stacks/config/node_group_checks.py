"""The node groups' checks, for ``check_all`` (``stacks/config/cross_checks.py``): the system group's
type and sizes; each GPU group's name, type, EFA and sizes, its capacity (reservations, Capacity
Blocks with their window, offering and purchase, spot), its placement group, labels and taints.

Each appends a ``Problem`` naming the config key, the bad value and what is allowed.
"""

from __future__ import annotations

import datetime
import re

from facts import aws_names, catalog, instance_types
from facts.catalog import CAPACITY_BLOCK_DRAIN, CAPACITY_BLOCK_DRAIN_TEXT
from facts.kube import BURN_IN_TAINT, GPU_TAINT
from facts.problems import Problem
from facts.problems import fmt as _fmt
from stacks.config.models import (
    NAMESPACE,
    CapacityConfig,
    CapacityOfferingConfig,
    GpuNodeGroupConfig,
    SystemNodeGroupConfig,
)


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
            Problem(
                f"{k}.instanceType",
                f"{_fmt(s.instance_type)} is not in the instance catalog; use one of {', '.join(catalog.SYSTEM_TYPES)}",
            )
        )
    elif it.is_gpu:
        problems.append(
            Problem(
                f"{k}.instanceType",
                f"{_fmt(s.instance_type)} is a GPU type; system nodes use one of {', '.join(catalog.SYSTEM_TYPES)}",
            )
        )
    _check_scaling(k, s.min_size, s.desired_size, s.max_size, problems)
    if s.min_size < 1:
        problems.append(
            Problem(
                f"{k}.minSize",
                f"{s.min_size} is not allowed: at least 1 (CoreDNS, the operators, etcd and the CSI controllers run on "
                "system nodes)",
            )
        )


_UTC_EXAMPLE = "2026-10-08T11:30:00Z"


def _aware(when: datetime.datetime | None) -> bool:
    return when is None or (when.tzinfo is not None and when.utcoffset() is not None)


def _check_capacity(
    k: str, g: GpuNodeGroupConfig, it: instance_types.InstanceType | None, problems: list[Problem]
) -> None:
    """Capacity Blocks: a type EC2 sells them for, and a consistent `capacity` section (window, offering, purchase)."""
    block = g.capacity_type == "capacity-block"
    _check_block_type(k, g, it, block, problems)
    if block:
        _check_block_instances(k, g, problems)
    c = g.capacity
    if c is None:
        return
    if not block:
        problems.append(
            Problem(
                f"{k}.capacity",
                f"is only used with capacityType 'capacity-block' (capacityType is {g.capacity_type!r})",
            )
        )
        return
    _check_capacity_time_zones(k, c, problems)
    _check_block_end(k, c, problems)
    _check_capacity_window(k, g, c, problems)
    o = c.offering
    if o is None:
        return
    _check_offering_size(k, g, o, problems)
    _check_offering(k, o, problems)
    _check_purchase(k, g, c, o, problems)


def _check_block_type(
    k: str, g: GpuNodeGroupConfig, it: instance_types.InstanceType | None, block: bool, problems: list[Problem]
) -> None:
    """A Capacity Block of a type EC2 sells them for."""
    if block and it is not None and it.is_gpu and not it.capacity_blocks:
        problems.append(
            Problem(
                f"{k}.capacityType",
                f"'capacity-block' is not offered for {g.instance_type}: EC2 sells Capacity Blocks for ML of "
                f"{', '.join(catalog.CAPACITY_BLOCK_TYPES)} (the catalog's types with the capacity-block usage class); "
                "use on-demand or spot, or one of those types",
            )
        )


def _check_block_instances(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    """A capacity-block group runs on one block, which holds at most 64 instances ("Each Capacity Block
    can have up to 64 instances", EC2 User Guide, "Find and purchase Capacity Blocks";
    aws_names.CAPACITY_BLOCK_INSTANCES_MAX), whether the config names it by reservation id or by offering:
    past that the group's scheduled size launches instances the block does not have."""
    top = aws_names.CAPACITY_BLOCK_INSTANCES_MAX
    if g.max_size <= top:
        return
    how = (
        "the instance count of the block capacity.offering looks for"
        if g.capacity is not None and g.capacity.offering is not None
        else "the size the group scales to on its block"
    )
    problems.append(
        Problem(
            f"{k}.maxSize",
            f"{g.max_size} is {how}, and a Capacity Block holds at most {top} instances (EC2 User Guide); use maxSize "
            f"{top} or less (a second group with a block of its own for more)",
        )
    )


def _check_capacity_time_zones(k: str, c: CapacityConfig, problems: list[Problem]) -> None:
    """Every time of the `capacity` section is written in UTC, as preflight shows it: a time without
    a zone is no moment at all, and one in another zone is easily taken for local time."""
    o = c.offering
    for key, when in (
        ("start", c.start),
        ("end", c.end),
        ("offering.earliestStart", o and o.earliest_start),
        ("offering.latestEnd", o and o.latest_end),
    ):
        if not when:
            continue
        why = "has no time zone" if not _aware(when) else "is not in UTC" if when.utcoffset() else None
        if why:
            problems.append(
                Problem(
                    f"{k}.capacity.{key}",
                    f"{when.isoformat()} {why}; write it in UTC like {_UTC_EXAMPLE}, as preflight shows it",
                )
            )


def _utc(when: datetime.datetime | None) -> bool:
    """A time given in UTC (other times are refused by _check_capacity_time_zones)."""
    return when is not None and _aware(when) and not when.utcoffset()


def _check_block_end(k: str, c: CapacityConfig, problems: list[Problem]) -> None:
    """`end` is a time a Capacity Block ends at: every block ends at 11:30 UTC ("All Capacity Blocks
    end at 11:30AM UTC", EC2 User Guide, "Find and purchase Capacity Blocks"). Another end, such as
    the block's end written in local time as if it were UTC, or a date whose time is left at 00:00,
    keeps the group up hours after EC2 took the instances back, or scales it down hours early."""
    if not _utc(c.end):
        return
    assert c.end is not None
    if c.end.time() != aws_names.CAPACITY_BLOCK_END_UTC:
        problems.append(
            Problem(
                f"{k}.capacity.end",
                f"{c.end.isoformat()} is not a Capacity Block end time: every block ends at "
                f"{aws_names.CAPACITY_BLOCK_END_UTC:%H:%M} UTC (EC2 User Guide); give the block's end as preflight "
                f"shows it, like {c.end:%Y-%m-%d}T{aws_names.CAPACITY_BLOCK_END_UTC:%H:%M:%S}Z",
            )
        )


def _check_capacity_window(k: str, g: GpuNodeGroupConfig, c: CapacityConfig, problems: list[Problem]) -> None:
    """The block's window: both ends, longer than the drain, and no fixed sizes beside it."""
    if (c.start is None) != (c.end is None):
        problems.append(
            Problem(
                f"{k}.capacity.{'end' if c.end is None else 'start'}",
                "is required with capacity.start/end: the block's window needs both ends",
            )
        )
    window = g.capacity_block_window
    if window is not None and _aware(window[0]) and _aware(window[1]):
        start, end = window
        if end - start <= CAPACITY_BLOCK_DRAIN:
            problems.append(
                Problem(
                    f"{k}.capacity.end",
                    f"{end.isoformat()} is not more than {CAPACITY_BLOCK_DRAIN_TEXT} after capacity.start "
                    f"{start.isoformat()}: the group scales to zero {CAPACITY_BLOCK_DRAIN_TEXT} before the block ends",
                )
            )
        if g.min_size or g.desired_size:
            key, value = ("minSize", g.min_size) if g.min_size else ("desiredSize", g.desired_size)
            problems.append(
                Problem(
                    f"{k}.{key}",
                    f"{value} is not allowed with capacity.start/end: the group follows the block's window (maxSize "
                    f"nodes from its start, 0 {CAPACITY_BLOCK_DRAIN_TEXT} before its end, by scheduled actions and, "
                    "inside the window, by `pulumi up` itself); leave minSize and desiredSize out",
                )
            )


def _check_offering(k: str, o: CapacityOfferingConfig, problems: list[Problem]) -> None:
    """The offering searched for: a range a block fits in, and an offering id of EC2's form."""
    _check_offering_range(k, o, problems)
    if o.offering_id is not None and not re.fullmatch(r"cb-[0-9a-z]{8,32}", o.offering_id):
        problems.append(
            Problem(
                f"{k}.capacity.offering.offeringId",
                f"{_fmt(o.offering_id)} is not a Capacity Block offering id like cb-0123456789abcdefg",
            )
        )


def _check_offering_range(k: str, o: CapacityOfferingConfig, problems: list[Problem]) -> None:
    """earliestStart..latestEnd holds a block of durationHours: a shorter range matches no offering
    (EC2 looks for blocks that start and end inside it, DescribeCapacityBlockOfferings)."""
    if not (_utc(o.latest_end) and _utc(o.earliest_start)):
        return
    assert o.latest_end is not None
    span = o.latest_end - o.earliest_start
    if span <= datetime.timedelta(0):
        problems.append(
            Problem(
                f"{k}.capacity.offering.latestEnd",
                f"{o.latest_end.isoformat()} is not after earliestStart {o.earliest_start.isoformat()}",
            )
        )
    elif span < datetime.timedelta(hours=o.duration_hours):
        problems.append(
            Problem(
                f"{k}.capacity.offering.latestEnd",
                f"{o.latest_end.isoformat()} is {span.total_seconds() / 3600:g} hours after earliestStart "
                f"{o.earliest_start.isoformat()}, less than durationHours {o.duration_hours}: no block of that length "
                "fits in the range; move latestEnd to "
                f"{(o.earliest_start + datetime.timedelta(hours=o.duration_hours)).isoformat()} or later, or leave it "
                "out",
            )
        )


def _check_purchase(
    k: str, g: GpuNodeGroupConfig, c: CapacityConfig, o: CapacityOfferingConfig, problems: list[Problem]
) -> None:
    """A purchase names the offering it buys and its window, and buys no second block."""
    if not o.purchase:
        return
    missing = [name for name, v in (("offeringId", o.offering_id), ("start", c.start), ("end", c.end)) if v is None]
    if missing:
        problems.append(
            Problem(
                f"{k}.capacity.offering.purchase",
                "true needs the offering it buys: set capacity.offering.offeringId and the block's window "
                f"capacity.start and capacity.end (missing: {', '.join(missing)}) as preflight lists them for the "
                "offering you choose",
            )
        )
    if g.capacity_reservation_id:
        problems.append(
            Problem(
                f"{k}.capacity.offering.purchase",
                f"true would buy a second block: the group already targets {g.capacity_reservation_id}; drop "
                "capacityReservationId or purchase",
            )
        )


def _check_offering_size(k: str, g: GpuNodeGroupConfig, o: CapacityOfferingConfig, problems: list[Problem]) -> None:
    """A block length EC2 sells (aws_names.CAPACITY_BLOCK_HOURS)."""
    why = aws_names.capacity_block_duration_problem(o.duration_hours)
    if why:
        problems.append(
            Problem(
                f"{k}.capacity.offering.durationHours", f"{o.duration_hours} hours is not a length EC2 sells: {why}"
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


def _check_gpu_groups(groups: list[GpuNodeGroupConfig | None], burn_in: bool, problems: list[Problem]) -> None:
    """Every GPU group's checks; ``burn_in``: the stack's burnIn.enabled (a group's burnIn overrides it)."""
    base = f"{NAMESPACE}:gpuNodeGroups"
    seen: dict[str, int] = {}
    for i, g in enumerate(groups):
        if g is None:
            continue
        k = f"{base}[{i}]"
        _check_group_name(k, i, g, seen, problems)
        it = _check_group_type(k, g, problems)
        _check_scaling(k, g.min_size, g.desired_size, g.max_size, problems)
        _check_reservation_required(k, g, problems)
        _check_capacity(k, g, it, problems)
        _check_reservation_id(k, g, problems)
        _check_autoscale(k, g, problems)
        _check_spot(k, g, problems)
        _check_placement_group(k, g, problems)
        _check_labels(k, g, problems)
        _check_taints(k, g, problems)
        _check_taint_count(k, g, burn_in if g.burn_in is None else g.burn_in, problems)


def _check_group_name(k: str, i: int, g: GpuNodeGroupConfig, seen: dict[str, int], problems: list[Problem]) -> None:
    """A valid node group name, unique among the groups (``seen`` maps the names so far to their index)."""
    if not _K8S_NAME.match(g.name) or len(g.name) > 32:
        problems.append(
            Problem(
                f"{k}.name",
                f"{_fmt(g.name)} is not allowed: lower-case letters, digits and '-', starting and ending with a letter "
                "or digit, at most 32 characters",
            )
        )
    if g.name in seen:
        problems.append(
            Problem(
                f"{k}.name",
                f"{_fmt(g.name)} is used by gpuNodeGroups[{seen[g.name]}] too; node group names must be unique",
            )
        )
    else:
        seen[g.name] = i


def _check_group_type(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> instance_types.InstanceType | None:
    """A GPU type of the catalog, not refused, with EFA if the group asks for it; returns the type's catalog entry."""
    it = catalog.get(g.instance_type)
    refused = catalog.refusal(g.instance_type)
    if refused is not None:
        problems.append(Problem(f"{k}.instanceType", refused))
    elif it is None or not it.is_gpu:
        problems.append(
            Problem(
                f"{k}.instanceType",
                f"{_fmt(g.instance_type)} is not a GPU type in the instance catalog; use one of "
                f"{', '.join(catalog.GPU_TYPES)}",
            )
        )
    elif g.efa and not it.efa_supported:
        efa_types = ", ".join(t for t in catalog.GPU_TYPES if catalog.BUILTIN[t].efa_supported)
        problems.append(
            Problem(f"{k}.efa", f"true is not allowed: {g.instance_type} has no EFA; EFA types are {efa_types}")
        )
    return it


def _check_reservation_required(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    if (
        g.capacity_type == "capacity-block"
        and not g.capacity_reservation_id
        and (g.capacity is None or g.capacity.offering is None)
    ):
        problems.append(
            Problem(
                f"{k}.capacityReservationId",
                "is required with capacityType 'capacity-block' (the cr-... id of the block), unless "
                "capacity.offering looks for one to buy",
            )
        )


def _check_reservation_id(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    if g.capacity_reservation_id and not re.fullmatch(r"cr-[0-9a-f]{8,17}", g.capacity_reservation_id):
        problems.append(
            Problem(
                f"{k}.capacityReservationId",
                f"{_fmt(g.capacity_reservation_id)} is not a capacity reservation id like cr-0123456789abcdef0",
            )
        )


def _check_autoscale(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    if g.capacity_type == "capacity-block" and g.autoscale:
        problems.append(
            Problem(
                f"{k}.autoscale",
                "true is not allowed with capacityType 'capacity-block': outside the block's window every launch "
                "fails and the autoscaler backs off again and again, and EKS needs the group at desired size 0 before "
                "an upgrade. Leave it out (false is the default here) and give the block's window as capacity.start "
                "and capacity.end (the group then scales itself), or set desiredSize to the block's instance count "
                "for its window, 0 after",
            )
        )


def _check_spot(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    if g.capacity_type == "spot" and g.capacity_reservation_id:
        problems.append(Problem(f"{k}.capacityReservationId", "cannot be used with capacityType 'spot'"))


def _check_placement_group(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    pg = g.placement_group
    if pg is None:
        return
    if pg.mode == "existing" and not pg.name:
        problems.append(Problem(f"{k}.placementGroup.name", "is required with mode 'existing'"))
    if pg.mode != "existing" and pg.name:
        problems.append(
            Problem(
                f"{k}.placementGroup.name", f"{_fmt(pg.name)} is only used with mode 'existing' (mode is {pg.mode!r})"
            )
        )
    if pg.mode == "create" and (g.capacity_reservation_id or g.capacity_type == "capacity-block"):
        problems.append(
            Problem(
                f"{k}.placementGroup.mode",
                "'create' cannot be combined with a capacity reservation/block; use 'none' or the reservation's own "
                "placement group with 'existing'",
            )
        )


def _check_labels(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    for lk, lv in g.labels.items():
        if not _LABEL_KEY.match(lk) or _reserved_label(lk):
            problems.append(
                Problem(
                    f"{k}.labels.{lk}",
                    f"{_fmt(lk)} is not an allowed label key (a valid Kubernetes label key outside the kubernetes.io, "
                    "k8s.io and eks.amazonaws.com domains)",
                )
            )
        if not _LABEL_VALUE.match(lv):
            problems.append(Problem(f"{k}.labels.{lk}", f"{_fmt(lv)} is not a valid Kubernetes label value"))


def stack_taints(burn_in: bool) -> list[dict[str, str]]:
    """The taints the stack puts on a GPU group's nodes besides the config's ``taints``: the GPU taint
    (components/node_group.py) and, with burn-in, its startup taint (stacks/environment.py)."""
    return [GPU_TAINT, *([BURN_IN_TAINT] if burn_in else [])]


def _check_taint_count(k: str, g: GpuNodeGroupConfig, burn_in: bool, problems: list[Problem]) -> None:
    """EKS takes at most 50 taints per node group (aws_names.EKS_NODEGROUP_TAINTS_MAX), the stack's own among them."""
    ours = stack_taints(burn_in)
    room = aws_names.EKS_NODEGROUP_TAINTS_MAX - len(ours)
    if len(g.taints) > room:
        named = " and ".join(t["key"] for t in ours)
        problems.append(
            Problem(
                f"{k}.taints",
                f"{len(g.taints)} taints are too many: EKS allows {aws_names.EKS_NODEGROUP_TAINTS_MAX} per node group "
                f"and the stack adds {len(ours)} ({named}); at most {room}",
            )
        )


def _check_taints(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    taint_at: dict[tuple[str, str], int] = {}
    for j, t in enumerate(g.taints):
        if (t.key, t.effect) in taint_at:
            problems.append(
                Problem(
                    f"{k}.taints[{j}]",
                    f"{t.key!r} with effect {t.effect} is taints[{taint_at[t.key, t.effect]}] already; a key has one "
                    "taint per effect",
                )
            )
        taint_at.setdefault((t.key, t.effect), j)
        if not _LABEL_KEY.match(t.key) or _reserved_label(t.key):
            problems.append(
                Problem(
                    f"{k}.taints[{j}].key",
                    f"{_fmt(t.key)} is not an allowed taint key (a valid Kubernetes key outside the kubernetes.io, "
                    "k8s.io and eks.amazonaws.com domains)",
                )
            )
        if not _LABEL_VALUE.match(t.value):
            problems.append(
                Problem(
                    f"{k}.taints[{j}].value",
                    f"{_fmt(t.value)} is not a valid taint value (up to 63 letters, digits, '-', '_', '.')",
                )
            )
        if t.key == GPU_TAINT["key"]:
            problems.append(
                Problem(
                    f"{k}.taints[{j}].key",
                    f"{GPU_TAINT['key']!r} is set on every GPU group already; list only extra taints",
                )
            )
