"""Preflight's capacity checks: a GPU group's capacity reservation or Capacity Block (its type, AZ
and state; for a block, its instance count against maxSize and its window against
capacity.start/end), and a capacity-block group's offerings with their upfront price, or the
offering `pulumi up` will buy (and the block an earlier `up` bought); while a group's window is
open, a WARN that `pulumi up` holds back the changes EKS would apply by upgrading the group.
"""

from __future__ import annotations

import datetime
import functools
from typing import TYPE_CHECKING, Any

from components import node_scaling
from facts.catalog import CAPACITY_BLOCK_DRAIN_TEXT
from infra.preflight.results import (
    FAIL,
    PASS,
    WARN,
    CheckResult,
    _error_code,
    _guard,
    _is_client_error,
    _paginate,
    _unanswered,
)
from stacks import config as stack_config

if TYPE_CHECKING:
    from infra.preflight import _Context

# Capacity reservation states in which the reservation is gone or can never be used.
_DEAD_RESERVATION_STATES = {
    "expired",
    "cancelled",
    "cancelling",
    "failed",
    "payment-failed",
    "unsupported",
    "unavailable",
}


def _check_reservations(ctx: _Context) -> list[CheckResult]:
    results: list[CheckResult] = []
    for g in ctx.cfg.gpu_node_groups:
        if not g.capacity_reservation_id:
            continue
        check = f"capacity reservation {g.capacity_reservation_id} (GPU group {g.name})"
        results.extend(
            _guard(
                check,
                "ec2 DescribeCapacityReservations",
                "ec2:DescribeCapacityReservations",
                functools.partial(_reservation_line, ctx, g, check),
            )
        )
    results += _check_capacity_offerings(ctx)
    results += _check_windows(ctx)
    return results


def _check_windows(ctx: _Context) -> list[CheckResult]:
    """A WARN per capacity-block group whose window is open now (no AWS call): inside it `pulumi up`
    holds back the changes EKS would apply by upgrading or replacing the group
    (``components.node_scaling.BlockPlan``, on the clock the program reads)."""
    results = []
    for g in ctx.cfg.gpu_node_groups:
        window = g.capacity_block_window
        if window is None or g.awaiting_capacity_block:
            continue
        block = node_scaling.capacity_block_plan(*window, g.max_size)
        if block.held:
            results.append(
                CheckResult(
                    WARN,
                    f"capacity block window (GPU group {g.name})",
                    node_scaling.held_back_text(block),
                    f"a change to {node_scaling.HELD_BACK_TEXT} of group {g.name} "
                    "waits for the first `pulumi up` after "
                    f"{node_scaling.utc_text(block.end)}; the preview warns while it is held back",
                )
            )
    return results


def _describe_reservation(ctx: _Context, rid: str) -> dict[str, Any] | None:
    """The capacity reservation ``rid``, or None when EC2 does not know it."""
    from botocore.exceptions import ClientError

    try:
        found = (
            ctx.client("ec2")
            .describe_capacity_reservations(CapacityReservationIds=[rid])
            .get("CapacityReservations", [])
        )
    except ClientError as err:
        code, _ = _error_code(err)
        if not code.startswith("InvalidCapacityReservationId"):
            raise
        found = []
    return found[0] if found else None


def _reservation_line(
    ctx: _Context, g: stack_config.GpuNodeGroupConfig, check: str, cr: dict[str, Any] | None = None
) -> list[CheckResult]:
    rid = g.capacity_reservation_id
    if cr is None:
        cr = _describe_reservation(ctx, rid or "")
    if cr is None:
        return [
            CheckResult(
                FAIL,
                check,
                f"does not exist in {ctx.cfg.region} for this account",
                f"check capacityReservationId of group {g.name} in {ctx.stack_file} "
                "(and that aws:region is the reservation's region)",
            )
        ]
    problems, fixes = [], []
    az, typ, state = cr.get("AvailabilityZone"), cr.get("InstanceType"), cr.get("State", "")
    kind = cr.get("ReservationType", "default")
    if typ != g.instance_type:
        problems.append(f"it reserves {typ}, the group uses {g.instance_type}")
        fixes.append(f"set instanceType: {typ} for group {g.name} or use a reservation of {g.instance_type}")
    if ctx.gpu_az is None:
        problems.append(f"it is in {az} but no GPU AZ could be chosen")
        fixes.append("fix the GPU AZ check first")
    elif az != ctx.gpu_az:
        how = "'auto' picked" if ctx.cfg.gpu_availability_zone == "auto" else "config sets"
        problems.append(f"it is in {az} but the GPU AZ is {ctx.gpu_az} ({how})")
        fixes.append(
            f"set {stack_config.NAMESPACE}:gpuAvailabilityZone: {az} in "
            f"{ctx.stack_file} or use a reservation in {ctx.gpu_az}"
        )
    if state in _DEAD_RESERVATION_STATES:
        problems.append(f"its state is {state}")
        fixes.append("use a reservation that is active or scheduled")
    if g.capacity_type == "capacity-block" and kind != "capacity-block":
        problems.append("it is an on-demand capacity reservation, not a capacity block")
        fixes.append(f"set capacityType: on-demand for group {g.name}")
    elif g.capacity_type != "capacity-block" and kind == "capacity-block":
        problems.append("it is a capacity block")
        fixes.append(f"set capacityType: capacity-block for group {g.name}")
    if g.capacity_type == "capacity-block" and kind == "capacity-block":
        return _capacity_block_lines(ctx, g, check, cr, problems, fixes)
    if problems:
        return [CheckResult(FAIL, check, "; ".join(problems), "; ".join(fixes))]
    count = cr.get("TotalInstanceCount")
    return [
        CheckResult(PASS, check, f"{kind} reservation of {count} x {typ} in {az}, {state} (group maxSize {g.max_size})")
    ]


# ---------------------------------------------------------------------------------------------
# Capacity Blocks: the block behind a group (count, window), and offerings to buy
# ---------------------------------------------------------------------------------------------


def _utc(when: Any) -> datetime.datetime | None:
    """A timestamp botocore parsed (a datetime, or text) as an aware UTC datetime."""
    if isinstance(when, str):
        try:
            when = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(when, datetime.datetime):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.astimezone(datetime.UTC)


def _when(when: datetime.datetime | None) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else "?"


def _capacity_block(ctx: _Context, block_id: str) -> dict[str, Any] | None:
    """The Capacity Block ``block_id`` (DescribeCapacityBlocks), or None when EC2 does not list it or
    the endpoint cannot answer (the reservation's own dates then stand for the block's)."""
    try:
        blocks = _paginate(ctx.client("ec2"), "describe_capacity_blocks", "CapacityBlocks", CapacityBlockIds=[block_id])
    except Exception as err:
        if (
            isinstance(err, NotImplementedError)
            or _unanswered(err)
            or (_is_client_error(err) and "NotFound" in _error_code(err)[0])
        ):
            return None
        raise
    return next((b for b in blocks if b.get("CapacityBlockId") == block_id), None)


def _capacity_block_lines(
    ctx: _Context,
    g: stack_config.GpuNodeGroupConfig,
    check: str,
    cr: dict[str, Any],
    problems: list[str],
    fixes: list[str],
) -> list[CheckResult]:
    """A capacity-block group's block: its type, AZ and state (checked by the caller), its instance
    count against maxSize, and its window against capacity.start/end."""
    block_id = cr.get("CapacityBlockId")
    block = _capacity_block(ctx, block_id) if block_id else None
    source = block or cr
    start, end = _utc(source.get("StartDate")), _utc(source.get("EndDate"))
    count = int(cr.get("TotalInstanceCount") or 0)
    if (
        block is not None
        and block.get("State") in _DEAD_RESERVATION_STATES
        and f"its state is {block.get('State')}" not in problems
    ):
        problems.append(f"its capacity block {block_id} is {block.get('State')}")
        fixes.append("use a capacity block that is active or scheduled")
    warnings = []
    if count < g.max_size:
        problems.append(
            f"it holds {count} instances but the group scales to maxSize {g.max_size} "
            f"in its window: the launches beyond {count} fail"
        )
        fixes.append(f"set maxSize: {count} for group {g.name}")
    elif count > g.max_size:
        warnings.append(
            f"it holds {count} instances and the group uses at most {g.max_size}: "
            f"{count - g.max_size} paid for and left idle"
        )
    window = g.capacity_block_window
    where = f"capacity.start: {_when(start)} and capacity.end: {_when(end)}"
    if window is not None:
        want_start, want_end = (_utc(w) for w in window)
        if (want_start, want_end) != (start, end):
            problems.append(
                f"its window is {_when(start)} to {_when(end)}, the group's is {_when(want_start)} to "
                f"{_when(want_end)}: the group would scale at the wrong times"
            )
            fixes.append(f"set {where} for group {g.name}")
    label = f"capacity block {block_id}" if block_id else "capacity block"
    detail = (
        f"{label} of {count} x {cr.get('InstanceType')} in {cr.get('AvailabilityZone')}, "
        f"{source.get('State') or cr.get('State')}, {_when(start)} to {_when(end)}"
    )
    if problems:
        return [CheckResult(FAIL, check, f"{detail}: " + "; ".join(problems), "; ".join(fixes))]
    if warnings:
        return [
            CheckResult(
                WARN,
                check,
                f"{detail}: " + "; ".join(warnings),
                f"set maxSize: {count} for group {g.name} to use all of it",
            )
        ]
    if window is None:
        return [
            CheckResult(
                PASS,
                check,
                f"{detail} (group maxSize {g.max_size}); the group is sized by hand: set "
                f"{where} in {ctx.stack_file} and it follows the "
                f"window by itself ({g.max_size} nodes at the start, 0 {CAPACITY_BLOCK_DRAIN_TEXT} before the end)",
            )
        ]
    return [CheckResult(PASS, check, f"{detail}, the group's window (group maxSize {g.max_size})")]


def _money(fee: Any, currency: Any) -> str:
    try:
        amount = f"{float(fee):,.2f}"
    except (TypeError, ValueError):
        amount = str(fee)
    return f"${amount} {currency}" if currency in (None, "USD") else f"{amount} {currency}"


def _offering_text(o: dict[str, Any]) -> str:
    return (
        f"{o.get('CapacityBlockOfferingId')} in {o.get('AvailabilityZone')}: "
        f"{o.get('InstanceCount')} x {o.get('InstanceType')}, "
        f"{_when(_utc(o.get('StartDate')))} to {_when(_utc(o.get('EndDate')))} "
        f"({o.get('CapacityBlockDurationHours')} h), "
        f"upfront {_money(o.get('UpfrontFee'), o.get('CurrencyCode'))}"
    )


# At most this many offerings on the report line of a group.
MAX_OFFERINGS_SHOWN = 5


def _check_capacity_offerings(ctx: _Context) -> list[CheckResult]:
    """Each capacity-block group with ``capacity.offering``: the offerings EC2 has for it (with their
    upfront price), and for ``purchase: true`` the one `pulumi up` will buy, or the block it bought."""
    results: list[CheckResult] = []
    for g in ctx.cfg.gpu_node_groups:
        if g.capacity_type != "capacity-block" or g.capacity is None or g.capacity.offering is None:
            continue
        if g.capacity_block_purchase:
            check = f"capacity block purchase {g.capacity_block_purchase} (GPU group {g.name})"
            results += _guard(
                check,
                "ec2 DescribeCapacityReservations / DescribeCapacityBlockOfferings",
                "ec2:DescribeCapacityReservations and ec2:DescribeCapacityBlockOfferings",
                functools.partial(_purchase_line, ctx, g, check),
            )
        else:
            check = f"capacity block offerings (GPU group {g.name})"
            results += _guard(
                check,
                "ec2 DescribeCapacityBlockOfferings",
                "ec2:DescribeCapacityBlockOfferings",
                functools.partial(_offerings_line, ctx, g, check),
            )
    return results


def _offerings(ctx: _Context, g: stack_config.GpuNodeGroupConfig) -> list[dict[str, Any]]:
    """DescribeCapacityBlockOfferings for ``g``: maxSize instances of its type, the offering's
    duration and dates; sorted by start, then fee."""
    o = g.capacity.offering if g.capacity is not None else None
    assert o is not None
    kwargs: dict[str, Any] = {
        "InstanceType": g.instance_type,
        "InstanceCount": g.max_size,
        "CapacityDurationHours": o.duration_hours,
        "StartDateRange": o.earliest_start,
    }
    if o.latest_end is not None:
        kwargs["EndDateRange"] = o.latest_end
    found = _paginate(ctx.client("ec2"), "describe_capacity_block_offerings", "CapacityBlockOfferings", **kwargs)

    def fee(item: dict[str, Any]) -> float:
        try:
            return float(item.get("UpfrontFee") or 0)
        except ValueError:
            return 0.0

    return sorted(
        found, key=lambda i: (_utc(i.get("StartDate")) or datetime.datetime.max.replace(tzinfo=datetime.UTC), fee(i))
    )


def _offerings_line(ctx: _Context, g: stack_config.GpuNodeGroupConfig, check: str) -> list[CheckResult]:
    found = _offerings(ctx, g)
    usable = [o for o in found if ctx.gpu_az is None or o.get("AvailabilityZone") == ctx.gpu_az]
    o = g.capacity.offering if g.capacity is not None else None
    assert o is not None
    asked = f"{g.max_size} x {g.instance_type} for {o.duration_hours} h from {_when(_utc(o.earliest_start))}"
    if not found:
        return [
            CheckResult(
                WARN,
                check,
                f"EC2 has no offering of {asked}",
                "try other dates or another duration (capacity.offering)",
            )
        ]
    if not usable:
        azs = sorted({str(x.get("AvailabilityZone")) for x in found})
        return [
            CheckResult(
                FAIL,
                check,
                f"EC2 offers {asked} only in {', '.join(azs)}, not in the GPU AZ "
                f"{ctx.gpu_az}: a block there cannot serve the group",
                f"set {stack_config.NAMESPACE}:gpuAvailabilityZone to one of "
                f"{', '.join(azs)} in {ctx.stack_file}, or try other dates",
            )
        ]
    shown = "; ".join(_offering_text(x) for x in usable[:MAX_OFFERINGS_SHOWN])
    more = f" (and {len(usable) - MAX_OFFERINGS_SHOWN} more)" if len(usable) > MAX_OFFERINGS_SHOWN else ""
    first = usable[0]
    how = (
        "nothing is bought. To buy one with `pulumi up` (irreversible: the upfront fee "
        "is charged at once), set capacity.offering.offeringId: "
        f"{first.get('CapacityBlockOfferingId')}, capacity.start: {_when(_utc(first.get('StartDate')))}, capacity.end: "
        f"{_when(_utc(first.get('EndDate')))} and capacity.offering.purchase: true "
        f"for group {g.name} (or those of another offering)"
    )
    return [CheckResult(PASS, check, f"{len(usable)} offering(s) in {ctx.gpu_az}: {shown}{more}; {how}")]


def _purchased(ctx: _Context, offering_id: str) -> dict[str, Any] | None:
    """The capacity reservation the stack bought from ``offering_id`` (tagged so by the node group), if any."""
    found = _paginate(
        ctx.client("ec2"),
        "describe_capacity_reservations",
        "CapacityReservations",
        Filters=[{"Name": "tag:gputraining/capacity-block-offering", "Values": [offering_id]}],
    )
    return found[0] if found else None


def _purchase_line(ctx: _Context, g: stack_config.GpuNodeGroupConfig, check: str) -> list[CheckResult]:
    offering_id = g.capacity_block_purchase
    assert offering_id is not None
    bought = _purchased(ctx, offering_id)
    if bought is not None:
        # Bought by an earlier `pulumi up`: from now on it is the group's block.
        return _reservation_line(ctx, g, f"{check}: bought as {bought.get('CapacityReservationId')}", bought)
    match = next((o for o in _offerings(ctx, g) if o.get("CapacityBlockOfferingId") == offering_id), None)
    if match is None:
        return [
            CheckResult(
                FAIL,
                check,
                f"EC2 does not offer {offering_id} (or no longer) for {g.max_size} x "
                f"{g.instance_type} at the offering's duration and dates: "
                "`pulumi up` would fail to buy it",
                "run preflight with purchase: false to list the current offerings and choose another",
            )
        ]
    problems, fixes = [], []
    if ctx.gpu_az is not None and match.get("AvailabilityZone") != ctx.gpu_az:
        problems.append(f"it is in {match.get('AvailabilityZone')} but the GPU AZ is {ctx.gpu_az}")
        fixes.append(
            f"set {stack_config.NAMESPACE}:gpuAvailabilityZone: "
            f"{match.get('AvailabilityZone')} or choose an offering in {ctx.gpu_az}"
        )
    window = g.capacity_block_window
    start, end = _utc(match.get("StartDate")), _utc(match.get("EndDate"))
    if window is not None and tuple(_utc(w) for w in window) != (start, end):
        problems.append(f"its window is {_when(start)} to {_when(end)}, not capacity.start/end")
        fixes.append(f"set capacity.start: {_when(start)} and capacity.end: {_when(end)} for group {g.name}")
    if problems:
        return [CheckResult(FAIL, check, f"{_offering_text(match)}: " + "; ".join(problems), "; ".join(fixes))]
    return [
        CheckResult(
            WARN,
            check,
            f"`pulumi up` WILL BUY {_offering_text(match)}. The purchase is "
            "irreversible: the fee is charged at once and never refunded",
            "go ahead only if this is the block you mean to pay for; otherwise set purchase: false",
        )
    ]
