"""Where the environment goes: the GPU AZ, chosen once, and the AZs of the private subnets.

Everything that must agree on the AZ (the GPU subnet, every GPU node group and its placement
group, FSx, the jobs' node selectors) gets it from here.

Chosen once: with ``gpuAvailabilityZone: auto`` a new stack gets the first AZ (by name) that offers
every GPU type. A deployed stack keeps the AZ of its GPU subnet, found by the tags the network has
put on it since its first version (``gpu_subnet_tags``), whatever the GPU types are now: a type that
AZ does not offer is refused, never a reason to move. Only an explicit ``gpuAvailabilityZone`` moves
a deployed stack, and then `pulumi preview` and `up` warn about it (``az_move_warning``; the offline
plan's summary and the pull request's plan diff say it too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.network import GPU_SUBNET_TAG
from facts.problems import Problem
from stacks.config import NAMESPACE, StackConfig
from stacks.config.loading import PlacementAsk

KEY = f"{NAMESPACE}:gpuAvailabilityZone"
# What an AZ move replaces (an explicit move's warning, or what a refused `auto` would cost).
MOVE_REPLACES = (
    "replaces every GPU node group (their nodes, and the jobs running on "
    "them), FSx for Lustre (a new, empty file system: "
    "copy out what it holds first; a protected one stops the update) and the "
    "training jobs (their node selectors name the AZ), "
    "and moves the GPU subnet"
)


class PlacementError(Exception):
    """The configured instance types cannot be placed in the requested AZ(s): a config problem of ``key``."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.problem = Problem(key, message)


@dataclass(frozen=True, order=True)
class DeployedGpuSubnet:
    """A GPU subnet this stack has already made (found by its tags)."""

    subnet_id: str
    availability_zone: str


@dataclass(frozen=True)
class RegionFacts:
    """What the GPU AZ is chosen from: the region's available AZs, the AZs offering each GPU type
    (type -> AZs) and the stack's GPU subnets already deployed (none: a new stack)."""

    region_azs: list[str]
    offered: dict[str, set[str]]
    deployed: tuple[DeployedGpuSubnet, ...] = ()


@dataclass(frozen=True)
class Placement:
    gpu_availability_zone: str
    availability_zones: list[str]  # the private-subnet AZs, sorted; the GPU AZ is one of them
    deployed_gpu_availability_zones: tuple[str, ...] = ()  # where the stack's GPU subnet is now; empty: a new stack

    @property
    def moves(self) -> bool:
        """Whether the GPU AZ moves away from where the deployed stack has it (an explicit move)."""
        return (
            bool(self.deployed_gpu_availability_zones)
            and self.gpu_availability_zone not in self.deployed_gpu_availability_zones
        )


# ---------------------------------------------------------------------------------------------
# The rule (also what preflight applies)
# ---------------------------------------------------------------------------------------------


def choose_gpu_az(
    requested: str,
    region_azs: list[str],
    offered: dict[str, set[str]],
    gpu_types: list[str],
    deployed: Sequence[DeployedGpuSubnet] = (),
) -> str:
    """Pick the GPU AZ: the requested one after checking it offers every GPU type; with ``auto``
    the AZ of the stack's GPU subnet (``deployed``) after checking it offers every GPU type, or for a
    new stack the first AZ (by name) that offers all of them. ``offered`` maps type -> AZs."""
    if requested != "auto":
        return _requested(requested, region_azs, offered, gpu_types)
    if deployed:
        return _kept(deployed, region_azs, offered, gpu_types)
    return _first_offering(region_azs, offered, gpu_types)


def _offered_in(t: str, offered: dict[str, set[str]]) -> str:
    return ", ".join(sorted(offered.get(t, ()))) or "no AZ of the region"


def _common_azs(region_azs: list[str], offered: dict[str, set[str]], gpu_types: list[str]) -> list[str]:
    """The AZs (by name) that offer every GPU type."""
    return [az for az in sorted(region_azs) if all(az in offered.get(t, set()) for t in gpu_types)]


def _requested(requested: str, region_azs: list[str], offered: dict[str, set[str]], gpu_types: list[str]) -> str:
    if requested not in region_azs:
        raise PlacementError(
            KEY, f"{requested!r} is not an available AZ of the region; available: {', '.join(region_azs)}"
        )
    missing = [t for t in gpu_types if requested not in offered.get(t, set())]
    if missing:
        where = "; ".join(f"{t} is offered in {_offered_in(t, offered)}" for t in missing)
        raise PlacementError(KEY, f"{requested!r} does not offer {', '.join(missing)} ({where})")
    return requested


def _first_offering(region_azs: list[str], offered: dict[str, set[str]], gpu_types: list[str]) -> str:
    if not region_azs:
        raise PlacementError(KEY, "'auto' found no available AZ in the region")
    candidates = _common_azs(region_azs, offered, gpu_types)
    if not candidates:
        where = "; ".join(f"{t}: {', '.join(sorted(offered.get(t, ()))) or 'none'}" for t in gpu_types)
        raise PlacementError(
            KEY,
            f"'auto' found no single AZ that offers every GPU type ({where}); split the "
            "node groups across stacks or choose types offered together",
        )
    return candidates[0]


def _kept(
    deployed: Sequence[DeployedGpuSubnet], region_azs: list[str], offered: dict[str, set[str]], gpu_types: list[str]
) -> str:
    """``auto`` on a deployed stack: the AZ of its GPU subnet, or a PlacementError saying why not."""
    azs = sorted({s.availability_zone for s in deployed})
    if len(azs) > 1:
        where = " and ".join(
            f"{az} ({', '.join(s.subnet_id for s in sorted(deployed) if s.availability_zone == az)})" for az in azs
        )
        raise PlacementError(
            KEY,
            f"'auto' keeps the AZ of this stack's GPU subnet, but it has "
            f"GPU subnets in {where} (an interrupted move?); "
            f"set {KEY} to the AZ to keep: {' or '.join(azs)}",
        )
    kept = azs[0]
    missing = [t for t in gpu_types if kept not in offered.get(t, set())]
    if missing:
        raise PlacementError(
            KEY, _kept_az_lacks(kept, sorted(deployed)[0].subnet_id, missing, region_azs, offered, gpu_types)
        )
    return kept


def _kept_az_lacks(
    kept: str,
    subnet_id: str,
    missing: list[str],
    region_azs: list[str],
    offered: dict[str, set[str]],
    gpu_types: list[str],
) -> str:
    where = "; ".join(f"{t} is offered in {_offered_in(t, offered)}" for t in missing)
    candidates = _common_azs(region_azs, offered, gpu_types)
    if candidates:
        move = (
            f"or move the GPU AZ on purpose: set {KEY}: {' or '.join(candidates)} "
            f"(every GPU type is offered there), which {MOVE_REPLACES}"
        )
    else:
        move = (
            f"no AZ of the region offers {', '.join(gpu_types)} together, so moving "
            "would not help: split the groups across stacks"
        )
    return (
        f"'auto' keeps {kept}, where this stack already has its GPU "
        f"subnet ({subnet_id}), and {kept} does not offer "
        f"{', '.join(missing)} ({where}). Choose GPU types {kept} offers, {move}"
    )


def az_move_warning(from_azs: Sequence[str], to_az: str, subnet_azs: Sequence[str]) -> str:
    """What moving a deployed stack's GPU AZ does, in words (preview/up warning, plan summary, preflight)."""
    return (
        f"the GPU AZ MOVES from {', '.join(from_azs)} (where this stack's GPU subnet "
        f"is) to {to_az} ({KEY}): `pulumi up` {MOVE_REPLACES} "
        f"(private subnets in {', '.join(subnet_azs)}). To keep the stack where it is, set {KEY}: {from_azs[0]}"
    )


def choose_subnet_azs(gpu_az: str, region_azs: list[str], count: int) -> list[str]:
    """The GPU AZ plus the next AZs by name, ``count`` in all, sorted."""
    others = [az for az in sorted(region_azs) if az != gpu_az]
    if len(others) < count - 1:
        raise PlacementError(
            f"{NAMESPACE}:network.availabilityZoneCount", f"{count} AZs asked for but the region has {len(others) + 1}"
        )
    return sorted([gpu_az] + others[: count - 1])


def placement_problems(ask: PlacementAsk, facts: RegionFacts) -> list[Problem]:
    """The config problems of placing ``ask`` with ``facts`` (the GPU AZ check of
    ``stacks.config.load``): the GPU AZ's, and the AZ count's where the network section parsed."""
    found = []
    gpu_az = None
    try:
        gpu_az = choose_gpu_az(ask.requested, facts.region_azs, facts.offered, ask.gpu_types, facts.deployed)
    except PlacementError as err:
        found.append(err.problem)
    count = ask.availability_zone_count
    if count is not None and facts.region_azs:
        try:
            # The count only depends on how many AZs the region has: any of them stands in for a refused GPU AZ.
            choose_subnet_azs(gpu_az or sorted(facts.region_azs)[0], facts.region_azs, count)
        except PlacementError as err:
            found.append(err.problem)
    return found


# ---------------------------------------------------------------------------------------------
# At preview and up: ask AWS through the provider's invokes (credentials and region of the stack)
# ---------------------------------------------------------------------------------------------


def gpu_subnet_tags(cfg: StackConfig) -> dict[str, str]:
    """The tags that find this stack's GPU subnet (``subnet_tags`` of its project, stack and tags)."""
    return subnet_tags(cfg.project, cfg.stack, cfg.tags)


def subnet_tags(project: str, stack: str, tags: dict[str, str]) -> dict[str, str]:
    """The tags that find a stack's GPU subnet. The network has put them on it since its first
    version (the stack's project and stack tags, as stacks/environment.py tags every resource, and
    GPU_SUBNET_TAG), so stacks deployed before this lookup existed are found too."""
    stack_tags = {"gputraining/project": project, "gputraining/stack": stack, **tags}
    return {
        "gputraining/project": stack_tags["gputraining/project"],
        "gputraining/stack": stack_tags["gputraining/stack"],
        GPU_SUBNET_TAG: "true",
    }


def deployed_gpu_subnets(tags: dict[str, str]) -> list[DeployedGpuSubnet]:
    """The stack's GPU subnet(s) in AWS, found by ``tags`` (``subnet_tags``): none for a new stack.
    Also works in `pulumi preview`."""
    found = aws.ec2.get_subnets(tags=tags)
    return sorted(DeployedGpuSubnet(i, aws.ec2.get_subnet(id=i).availability_zone) for i in (found.ids or []))


def _region_facts(gpu_types: list[str]) -> tuple[list[str], dict[str, set[str]]]:
    """The region's available AZs and, per GPU type, the AZs offering it."""
    zones = aws.get_availability_zones(
        state="available", filters=[{"name": "opt-in-status", "values": ["opt-in-not-required"]}]
    )
    offered: dict[str, set[str]] = {t: set() for t in gpu_types}
    if gpu_types:
        result = aws.ec2.get_instance_type_offerings(
            location_type="availability-zone",
            filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=gpu_types)],
        )
        for t, loc in zip(result.instance_types, result.locations, strict=True):
            offered.setdefault(t, set()).add(loc)
    return sorted(zones.names), offered


class AwsRegionFacts:
    """The region's facts as AWS answers the program (the provider's invokes, with the stack's
    credentials and region), each question asked once: the config check and the placement read
    the same answers."""

    def __init__(self) -> None:
        self._answers: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], RegionFacts] = {}

    def facts(self, gpu_types: list[str], tags: dict[str, str]) -> RegionFacts:
        """The facts for placing ``gpu_types`` in the stack whose GPU subnet ``tags`` find."""
        question = (tuple(sorted(set(gpu_types))), tuple(sorted(tags.items())))
        if question not in self._answers:
            region_azs, offered = _region_facts(list(question[0]))
            self._answers[question] = RegionFacts(region_azs, offered, tuple(deployed_gpu_subnets(tags)))
        return self._answers[question]

    def check(self, ask: PlacementAsk) -> list[Problem]:
        """The GPU AZ check of ``stacks.config.load`` against AWS. Without the stack's tags (an
        invalid tags section) its GPU subnet cannot be looked up: nothing to say then. A lookup
        that fails (no credentials, say) says nothing either: the config's other problems are
        reported, and the placement asks again once they are fixed, failing the same way."""
        if ask.tags is None:
            return []
        try:
            facts = self.facts(ask.gpu_types, subnet_tags(ask.project, ask.stack, ask.tags))
        except Exception:  # the placement's own lookup repeats it and reports it
            return []
        return placement_problems(ask, facts)


def resolve_placement(cfg: StackConfig, aws_facts: AwsRegionFacts | None = None) -> Placement:
    """Ask AWS which AZs exist, which offer the GPU types and where the stack's GPU subnet already
    is (through ``aws_facts``, which may have the answers already), then choose; an explicit move of
    a deployed stack's GPU AZ is warned about."""
    gpu_types = cfg.gpu_instance_types
    facts = (aws_facts or AwsRegionFacts()).facts(gpu_types, gpu_subnet_tags(cfg))
    region_azs = facts.region_azs
    gpu_az = choose_gpu_az(cfg.gpu_availability_zone, region_azs, facts.offered, gpu_types, facts.deployed)
    subnet_azs = choose_subnet_azs(gpu_az, region_azs, cfg.network.availability_zone_count)
    placement = Placement(gpu_az, subnet_azs, tuple(sorted({s.availability_zone for s in facts.deployed})))
    if placement.moves:
        pulumi.log.warn(az_move_warning(placement.deployed_gpu_availability_zones, gpu_az, subnet_azs))
    return placement
