"""Preflight's placement checks: every configured instance type offered in the region (the system
type in every subnet AZ), the GPU AZ chosen as the program chooses it (a deployed stack keeps the AZ
of its GPU subnet; an explicit move of it is a WARN line), the subnet AZs, and EFA where the config
uses it, with as many interfaces as the catalog wires.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from infra.preflight.results import FAIL, PASS, SKIP, WARN, CheckResult, _guard, _list, _n, _paginate
from stacks import config as stack_config

if TYPE_CHECKING:
    from infra.preflight import _Context
    from stacks.placement import DeployedGpuSubnet


def _region_facts(cfg: stack_config.StackConfig, session: Any) -> tuple[list[str], dict[str, set[str]]]:
    """The region's AZs (as the program sees them) and which of them offer each configured type."""
    ec2 = session.client("ec2", region_name=cfg.region)
    zones = ec2.describe_availability_zones(
        Filters=[
            {"Name": "opt-in-status", "Values": ["opt-in-not-required"]},
            {"Name": "state", "Values": ["available"]},
        ]
    )["AvailabilityZones"]
    region_azs = sorted(z["ZoneName"] for z in zones)
    types = sorted({cfg.system_node_group.instance_type, *cfg.gpu_instance_types})
    offered: dict[str, set[str]] = {t: set() for t in types}
    for item in _paginate(
        ec2,
        "describe_instance_type_offerings",
        "InstanceTypeOfferings",
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": types}],
    ):
        if item["Location"] in region_azs and item["InstanceType"] in offered:
            offered[item["InstanceType"]].add(item["Location"])
    return region_azs, offered


def _check_placement(ctx: _Context) -> list[CheckResult]:
    """Instance types in the region, the GPU AZ (chosen like the program does: a deployed stack
    keeps the AZ of its GPU subnet), a move of it, the subnet AZs."""
    deployed, lookup = _deployed_gpu_subnets(ctx)
    # The GPU AZ first: the system type's line names the subnet AZs that follow from it.
    az_result = _gpu_az_result(ctx, deployed, looked_up=not lookup)
    subnet_result = _subnet_azs_result(ctx)
    return _type_results(ctx) + lookup + [az_result] + _move_warning(ctx, deployed) + [subnet_result]


def _deployed_gpu_subnets(ctx: _Context) -> tuple[list[DeployedGpuSubnet], list[CheckResult]]:
    """The stack's GPU subnet(s), found by their tags as the program finds them (none: a new
    stack); a lookup AWS refused is a line of its own."""
    from stacks.placement import DeployedGpuSubnet, gpu_subnet_tags

    found: list[DeployedGpuSubnet] = []

    def lookup() -> list[CheckResult]:
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in gpu_subnet_tags(ctx.cfg).items()]
        subnets = _paginate(ctx.client("ec2"), "describe_subnets", "Subnets", Filters=filters)
        found.extend(sorted(DeployedGpuSubnet(s["SubnetId"], s["AvailabilityZone"]) for s in subnets))
        return []

    failed = _guard("deployed GPU subnet", "ec2 DescribeSubnets", "ec2:DescribeSubnets", lookup)
    return found, failed


def _gpu_az_result(ctx: _Context, deployed: list[DeployedGpuSubnet], looked_up: bool) -> CheckResult:
    """The GPU AZ as the program chooses it (sets ctx.gpu_az), or why none can be."""
    from stacks.placement import PlacementError, choose_gpu_az

    gpu_types = ctx.cfg.gpu_instance_types
    try:
        ctx.gpu_az = choose_gpu_az(
            ctx.cfg.gpu_availability_zone,
            ctx.region_azs,
            {t: ctx.offered.get(t, set()) for t in gpu_types},
            gpu_types,
            deployed,
        )
    except PlacementError as err:
        ctx.gpu_az = None
        return CheckResult(FAIL, "GPU AZ", str(err), _gpu_az_fix(ctx, deployed))
    return CheckResult(PASS, "GPU AZ", _gpu_az_detail(ctx, ctx.gpu_az, deployed, looked_up))


def _gpu_az_detail(ctx: _Context, gpu_az: str, deployed: list[DeployedGpuSubnet], looked_up: bool) -> str:
    gpu_types = ctx.cfg.gpu_instance_types
    az_key = f"{stack_config.NAMESPACE}:gpuAvailabilityZone"
    if ctx.cfg.gpu_availability_zone != "auto":
        offers = f"offers {', '.join(gpu_types)}" if gpu_types else "is an available AZ"
        return f"{gpu_az} (from config) {offers}"
    pin = f"pin it so it can never move: set {az_key}: {gpu_az} in {ctx.stack_file}"
    if deployed:
        offers = f", and it offers {', '.join(gpu_types)}" if gpu_types else ""
        subnets = ", ".join(s.subnet_id for s in deployed)
        return f"'auto' keeps {gpu_az}, where this stack already has its GPU subnet ({subnets}){offers}; {pin}"
    why = (
        f"the first AZ by name that offers {', '.join(gpu_types)}"
        if gpu_types
        else "the first AZ by name (no GPU groups)"
    )
    unknown = (
        "" if looked_up else " (as for a new stack: whether the stack already has a GPU subnet could not be looked up)"
    )
    return f"'auto' picked {gpu_az}, {why}{unknown}; {pin}"


def _gpu_az_fix(ctx: _Context, deployed: list[DeployedGpuSubnet]) -> str:
    cfg, az_key = ctx.cfg, f"{stack_config.NAMESPACE}:gpuAvailabilityZone"
    gpu_types = cfg.gpu_instance_types
    candidates = [az for az in ctx.region_azs if all(az in ctx.offered.get(t, set()) for t in gpu_types)]
    if not ctx.region_azs:
        return f"check aws:region in {ctx.stack_file}"
    kept = sorted({s.availability_zone for s in deployed})
    if cfg.gpu_availability_zone == "auto" and len(kept) > 1:
        return f"set {az_key} to the AZ to keep ({' or '.join(kept)}) in {ctx.stack_file}"
    if cfg.gpu_availability_zone == "auto" and kept and candidates:
        return (
            f"choose GPU types {kept[0]} offers, or move the GPU AZ on purpose: set "
            f"{az_key} to one of {_list(candidates)} in {ctx.stack_file} "
            "(that replaces the GPU node groups and FSx for Lustre)"
        )
    if cfg.gpu_availability_zone == "auto" or not candidates:
        return "choose GPU types that one AZ offers together, or split the groups across stacks"
    return f"set {az_key} to one of {_list(candidates)} (or 'auto') in {ctx.stack_file}"


def _move_warning(ctx: _Context, deployed: list[DeployedGpuSubnet]) -> list[CheckResult]:
    """A WARN line when the configured GPU AZ is not where the deployed stack has its GPU subnet."""
    from stacks.placement import az_move_warning

    moved_from = sorted({s.availability_zone for s in deployed})
    if ctx.gpu_az is None or not moved_from or ctx.gpu_az in moved_from:
        return []
    return [
        CheckResult(WARN, "move of the GPU AZ", az_move_warning(moved_from, ctx.gpu_az, ctx.subnet_azs or [ctx.gpu_az]))
    ]


def _subnet_azs_result(ctx: _Context) -> CheckResult:
    """The private subnets' AZs that follow from the GPU AZ (sets ctx.subnet_azs)."""
    from stacks.placement import PlacementError, choose_subnet_azs

    if ctx.gpu_az is None:
        return CheckResult(SKIP, "subnet AZs", "not checked: no GPU AZ")
    try:
        ctx.subnet_azs = choose_subnet_azs(ctx.gpu_az, ctx.region_azs, ctx.cfg.network.availability_zone_count)
    except PlacementError as err:
        ctx.subnet_azs = None
        return CheckResult(
            FAIL,
            "subnet AZs",
            str(err),
            f"lower network.availabilityZoneCount in {ctx.stack_file} to at most {len(ctx.region_azs)}",
        )
    return CheckResult(
        PASS,
        "subnet AZs",
        f"private subnets in {', '.join(ctx.subnet_azs)} (the GPU AZ {ctx.gpu_az} and {len(ctx.subnet_azs) - 1} more)",
    )


def _type_results(ctx: _Context) -> list[CheckResult]:
    """Every configured type offered in the region; the system type in every subnet AZ."""
    cfg, region = ctx.cfg, ctx.cfg.region
    users: dict[str, list[str]] = defaultdict(list)
    users[cfg.system_node_group.instance_type].append("system nodes")
    for g in cfg.gpu_node_groups:
        users[g.instance_type].append(f"GPU group {g.name}")
    results: list[CheckResult] = []
    for t in sorted(users):
        check = f"{t} ({', '.join(users[t])})"
        azs = ctx.offered.get(t, set())
        if not azs:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"no AZ of {region} offers {t}",
                    f"choose another instance type or region in {ctx.stack_file}",
                )
            )
            continue
        missing = (
            [az for az in ctx.subnet_azs or [] if az not in azs] if t == cfg.system_node_group.instance_type else []
        )
        if missing:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"offered in {_list(azs)} but not in subnet AZ "
                    f"{', '.join(missing)}: system nodes could not start there",
                    f"set systemNodeGroup.instanceType in {ctx.stack_file} to a type "
                    f"offered in {', '.join(ctx.subnet_azs or [])}",
                )
            )
            continue
        results.append(CheckResult(PASS, check, f"offered in {_list(azs)}"))
    return results


def _check_efa(ctx: _Context) -> list[CheckResult]:
    from infra import aws_catalog

    groups = [g for g in ctx.cfg.gpu_node_groups if g.efa_interfaces > 0]
    if not groups:
        return []
    described = aws_catalog.describe([g.instance_type for g in groups], session=ctx.session, region=ctx.cfg.region)
    results = []
    for g in groups:
        check = f"EFA for GPU group {g.name} ({g.instance_type})"
        it = described.get(g.instance_type)
        if it is None:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"EC2 DescribeInstanceTypes does not know {g.instance_type} in {ctx.cfg.region}",
                    f"choose a type offered in {ctx.cfg.region}",
                )
            )
        elif not it.efa_supported:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"EC2 reports no EFA support for {g.instance_type}; the group "
                    f"would wire {g.efa_interfaces} EFA interface(s)",
                    f"set efa: false for group {g.name} in {ctx.stack_file}",
                )
            )
        elif it.efa_interfaces < g.efa_interfaces:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"the group wires {g.efa_interfaces} EFA interfaces (instance catalog) but EC2 "
                    f"reports at most {it.efa_interfaces} for {g.instance_type}",
                    "correct the instance catalog (facts/catalog.py) to what EC2 reports",
                )
            )
        else:
            results.append(
                CheckResult(
                    PASS,
                    check,
                    f"EfaSupported, up to {_n(it.efa_interfaces, 'interface')}; the group wires {g.efa_interfaces}",
                )
            )
    return results
