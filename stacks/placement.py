"""Where the environment goes: the GPU AZ, chosen once, and the AZs of the private subnets.

Everything that must agree on the AZ (the GPU subnet, every GPU node group and its placement
group, FSx, the jobs' node selectors) gets it from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi_aws as aws

from stacks.config import NAMESPACE, StackConfig


class PlacementError(Exception):
    """The configured instance types cannot be placed in the requested AZ(s)."""


@dataclass(frozen=True)
class Placement:
    gpu_availability_zone: str
    availability_zones: list[str]  # the private-subnet AZs, sorted; the GPU AZ is one of them


def choose_gpu_az(requested: str, region_azs: list[str], offered: dict[str, set[str]], gpu_types: list[str]) -> str:
    """Pick the GPU AZ: the requested one after checking it offers every GPU type, or with
    ``auto`` the first AZ (by name) that offers all of them. ``offered`` maps type -> AZs."""
    key = f"{NAMESPACE}:gpuAvailabilityZone"
    if requested != "auto":
        if requested not in region_azs:
            raise PlacementError(f"{key}: {requested!r} is not an available AZ of the region; available: {', '.join(region_azs)}")
        missing = [t for t in gpu_types if requested not in offered.get(t, set())]
        if missing:
            where = "; ".join(f"{t} is offered in {', '.join(sorted(offered.get(t, ()))) or 'no AZ of the region'}" for t in missing)
            raise PlacementError(f"{key}: {requested!r} does not offer {', '.join(missing)} ({where})")
        return requested
    candidates = [az for az in sorted(region_azs) if all(az in offered.get(t, set()) for t in gpu_types)]
    if not candidates:
        where = "; ".join(f"{t}: {', '.join(sorted(offered.get(t, ()))) or 'none'}" for t in gpu_types)
        raise PlacementError(
            f"{key}: 'auto' found no single AZ that offers every GPU type ({where}); split the node groups across stacks or choose types offered together"
        )
    return candidates[0]


def choose_subnet_azs(gpu_az: str, region_azs: list[str], count: int) -> list[str]:
    """The GPU AZ plus the next AZs by name, ``count`` in all, sorted."""
    others = [az for az in sorted(region_azs) if az != gpu_az]
    if len(others) < count - 1:
        raise PlacementError(f"{NAMESPACE}:network.availabilityZoneCount: {count} AZs asked for but the region has {len(others) + 1}")
    return sorted([gpu_az] + others[: count - 1])


def resolve_placement(cfg: StackConfig) -> Placement:
    """Ask AWS (through the provider's invokes, so credentials and region come from the stack)
    which AZs exist and which offer the GPU types, then choose."""
    zones = aws.get_availability_zones(state="available", filters=[{"name": "opt-in-status", "values": ["opt-in-not-required"]}])
    region_azs = sorted(zones.names)
    gpu_types = cfg.gpu_instance_types
    offered: dict[str, set[str]] = {t: set() for t in gpu_types}
    if gpu_types:
        result = aws.ec2.get_instance_type_offerings(
            location_type="availability-zone",
            filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=gpu_types)],
        )
        for t, loc in zip(result.instance_types, result.locations, strict=True):
            offered.setdefault(t, set()).add(loc)
    if gpu_types:
        gpu_az = choose_gpu_az(cfg.gpu_availability_zone, region_azs, offered, gpu_types)
    elif cfg.gpu_availability_zone != "auto":
        gpu_az = choose_gpu_az(cfg.gpu_availability_zone, region_azs, offered, [])
    else:
        gpu_az = region_azs[0]
    return Placement(gpu_az, choose_subnet_azs(gpu_az, region_azs, cfg.network.availability_zone_count))
