"""Preflight's placement checks: every configured instance type offered in the region (the system
type in every subnet AZ), the GPU AZ chosen as the program chooses it, the subnet AZs, and EFA
where the config uses it, with as many interfaces as the catalog wires.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from infra.preflight.results import FAIL, PASS, SKIP, CheckResult, _list, _n, _paginate
from stacks import config as stack_config

if TYPE_CHECKING:
    from infra.preflight import _Context


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
    """Instance types in the region, the GPU AZ (chosen like the program does), the subnet AZs."""
    from stacks.placement import PlacementError, choose_gpu_az, choose_subnet_azs

    cfg, region = ctx.cfg, ctx.cfg.region
    results: list[CheckResult] = []
    gpu_types = cfg.gpu_instance_types
    requested = cfg.gpu_availability_zone
    az_key = f"{stack_config.NAMESPACE}:gpuAvailabilityZone"

    # The GPU AZ first: the system type's line names the subnet AZs that follow from it.
    az_result: CheckResult
    try:
        if gpu_types or requested != "auto":
            ctx.gpu_az = choose_gpu_az(requested, ctx.region_azs, {t: ctx.offered.get(t, set()) for t in gpu_types}, gpu_types)
        else:
            ctx.gpu_az = ctx.region_azs[0] if ctx.region_azs else None
        if ctx.gpu_az is None:
            az_result = CheckResult(FAIL, "GPU AZ", f"{region} has no available AZ", f"check aws:region in {ctx.stack_file}")
        elif requested == "auto":
            why = f"the first AZ by name that offers {', '.join(gpu_types)}" if gpu_types else "the first AZ by name (no GPU groups)"
            az_result = CheckResult(
                PASS,
                "GPU AZ",
                f"'auto' picked {ctx.gpu_az}, {why}; pin it so it can never move: set {az_key}: {ctx.gpu_az} in {ctx.stack_file}",
            )
        else:
            offers = f"offers {', '.join(gpu_types)}" if gpu_types else "is an available AZ"
            az_result = CheckResult(PASS, "GPU AZ", f"{ctx.gpu_az} (from config) {offers}")
    except PlacementError as err:
        ctx.gpu_az = None
        if requested == "auto":
            fix = "choose GPU types that one AZ offers together, or split the groups across stacks"
        else:
            candidates = [az for az in ctx.region_azs if all(az in ctx.offered.get(t, set()) for t in gpu_types)]
            fix = (
                f"set {az_key} to one of {_list(candidates)} (or 'auto') in {ctx.stack_file}" if candidates else "choose GPU types that one AZ offers together"
            )
        az_result = CheckResult(FAIL, "GPU AZ", str(err), fix)

    if ctx.gpu_az is not None:
        try:
            ctx.subnet_azs = choose_subnet_azs(ctx.gpu_az, ctx.region_azs, cfg.network.availability_zone_count)
        except PlacementError as err:
            ctx.subnet_azs = None
            subnet_result = CheckResult(
                FAIL, "subnet AZs", str(err), f"lower network.availabilityZoneCount in {ctx.stack_file} to at most {len(ctx.region_azs)}"
            )
        else:
            subnet_result = CheckResult(
                PASS, "subnet AZs", f"private subnets in {', '.join(ctx.subnet_azs)} (the GPU AZ {ctx.gpu_az} and {len(ctx.subnet_azs) - 1} more)"
            )
    else:
        subnet_result = CheckResult(SKIP, "subnet AZs", "not checked: no GPU AZ")

    # Every configured type offered in the region.
    users: dict[str, list[str]] = defaultdict(list)
    users[cfg.system_node_group.instance_type].append("system nodes")
    for g in cfg.gpu_node_groups:
        users[g.instance_type].append(f"GPU group {g.name}")
    for t in sorted(users):
        check = f"{t} ({', '.join(users[t])})"
        azs = ctx.offered.get(t, set())
        if not azs:
            results.append(CheckResult(FAIL, check, f"no AZ of {region} offers {t}", f"choose another instance type or region in {ctx.stack_file}"))
            continue
        if t == cfg.system_node_group.instance_type and ctx.subnet_azs:
            missing = [az for az in ctx.subnet_azs if az not in azs]
            if missing:
                results.append(
                    CheckResult(
                        FAIL,
                        check,
                        f"offered in {_list(azs)} but not in subnet AZ {', '.join(missing)}: system nodes could not start there",
                        f"set systemNodeGroup.instanceType in {ctx.stack_file} to a type offered in {', '.join(ctx.subnet_azs)}",
                    )
                )
                continue
        results.append(CheckResult(PASS, check, f"offered in {_list(azs)}"))
    return results + [az_result, subnet_result]


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
                    FAIL, check, f"EC2 DescribeInstanceTypes does not know {g.instance_type} in {ctx.cfg.region}", f"choose a type offered in {ctx.cfg.region}"
                )
            )
        elif not it.efa_supported:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"EC2 reports no EFA support for {g.instance_type}; the group would wire {g.efa_interfaces} EFA interface(s)",
                    f"set efa: false for group {g.name} in {ctx.stack_file}",
                )
            )
        elif it.efa_interfaces < g.efa_interfaces:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"the group wires {g.efa_interfaces} EFA interfaces (instance catalog) but EC2 reports at most {it.efa_interfaces} for {g.instance_type}",
                    "correct the instance catalog (facts/catalog.py) to what EC2 reports",
                )
            )
        else:
            results.append(CheckResult(PASS, check, f"EfaSupported, up to {_n(it.efa_interfaces, 'interface')}; the group wires {g.efa_interfaces}"))
    return results
