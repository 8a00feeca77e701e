"""The capacity checks of a GPU group, for ``stacks/config/node_group_checks.py``: Capacity Blocks
(a type EC2 sells them for, the instances a block holds, its window in UTC and its end at 11:30 UTC,
the offering searched for and its purchase).

Each appends a ``Problem`` naming the config key, the bad value and what is allowed.
"""

from __future__ import annotations

import datetime
import re

from facts import aws_names, catalog, instance_types
from facts.catalog import CAPACITY_BLOCK_DRAIN, CAPACITY_BLOCK_DRAIN_TEXT
from facts.problems import Problem
from facts.problems import fmt as _fmt
from stacks.config.models import CapacityConfig, CapacityOfferingConfig, GpuNodeGroupConfig

_UTC_EXAMPLE = "2026-10-08T11:30:00Z"


def _aware(when: datetime.datetime | None) -> bool:
    return when is None or (when.tzinfo is not None and when.utcoffset() is not None)


def check_capacity(
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
            f"{g.max_size} is {how}, and a Capacity Block holds at most {top} instances; use maxSize {top} or less (a "
            "second group with a block of its own for more; EC2 User Guide, 'Find and purchase Capacity Blocks')",
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
