"""The private subnets against the addresses their nodes take (``facts/addresses.py``), for
``check_all`` (``stacks/config/cross_checks.py``). Every private subnet has ``network.privateSubnetPrefix``;
the GPU AZ's holds every GPU group at ``maxSize`` and its share of the system nodes, which EC2 Auto
Scaling spreads evenly over the AZs ("Amazon EC2 Auto Scaling attempts to distribute instances evenly
between the Availability Zones that are enabled for your Auto Scaling group", EC2 Auto Scaling User
Guide, "Availability Zone distribution"). The other subnets hold only their share, so the GPU
subnet is the one to check. Without room, launches fail for want of addresses, or pods wait with
no IP to give them.
"""

from __future__ import annotations

from math import ceil

from facts import addresses, catalog, instance_types
from facts.instance_types import EFA_ONLY
from facts.problems import Problem
from stacks.config.models import NAMESPACE, GpuNodeGroupConfig, NetworkConfig, SystemNodeGroupConfig

# The prefixes network.privateSubnetPrefix takes (its model's bounds).
_PREFIXES = range(16, 25)


def gpu_node_addresses(g: GpuNodeGroupConfig) -> tuple[int, str]:
    """The addresses one node of ``g`` takes, and how (for the message)."""
    it = g.instance
    layout = instance_types.efa_layout(it) if g.efa_interfaces else ()
    further = [s for s in layout if (s.card, s.device) != (0, 0)]
    ena = sum(1 for s in further if s.interface_type != EFA_ONLY)
    per_interface = addresses.INTERFACES[it.name][1]
    how = (
        f"{1 + addresses.VPC_CNI_WARM_ENI_TARGET} interfaces x {per_interface} "
        "addresses: the primary and the VPC CNI's warm one"
    )
    if ena:
        how += f", and {ena} more interface(s) with an address each"
    if len(further) > ena:
        how += f"; its {len(further) - ena} efa-only interfaces take none"
    return addresses.training_node_addresses(it.name, ena), how


def _system_share(s: SystemNodeGroupConfig, azs: int) -> tuple[int, int, str]:
    """(nodes in one AZ, addresses per node, how) of the system group."""
    interfaces, per_interface = addresses.INTERFACES[s.instance_type]
    how = f"all {interfaces} interfaces x {per_interface} addresses, the most the VPC CNI gives a {s.instance_type}"
    return ceil(s.max_size / azs), addresses.system_node_addresses(s.instance_type), how


def _smallest_prefix(need: int) -> int | None:
    fitting = [p for p in _PREFIXES if addresses.subnet_addresses(p) >= need]
    return max(fitting) if fitting else None


def check_subnet_addresses(
    n: NetworkConfig | None,
    s: SystemNodeGroupConfig | None,
    groups: list[GpuNodeGroupConfig | None],
    problems: list[Problem],
) -> None:
    """The GPU subnet holds every GPU group at maxSize and its share of the system nodes."""
    usable_groups = [
        g
        for g in groups
        if g is not None and g.instance_type in addresses.INTERFACES and catalog.get(g.instance_type) is not None
    ]
    if n is None or s is None or s.instance_type not in addresses.INTERFACES:
        return
    parts: list[tuple[int, str]] = []
    for g in usable_groups:
        per_node, how = gpu_node_addresses(g)
        parts.append((g.max_size * per_node, f"{g.name} {g.max_size} x {per_node} ({g.instance_type}: {how})"))
    share, per_system, how = _system_share(s, n.availability_zone_count)
    parts.append(
        (
            share * per_system,
            f"system {share} x {per_system} (ceil({s.max_size} nodes / {n.availability_zone_count} AZs); {how})",
        )
    )
    need = sum(p[0] for p in parts)
    have = addresses.subnet_addresses(n.private_subnet_prefix)
    if need <= have:
        return
    default = "" if "private_subnet_prefix" in n.model_fields_set else " (the default)"
    best = _smallest_prefix(need)
    fix = (
        f"use privateSubnetPrefix {best} ({addresses.subnet_addresses(best):,} "
        f"addresses; vpcCidr must hold {n.availability_zone_count + 1} "
        "such blocks) or lower maxSize"
        if best is not None
        else f"no prefix the stack takes holds that much (/{_PREFIXES[0]}: "
        f"{addresses.subnet_addresses(_PREFIXES[0]):,}): lower maxSize"
    )
    problems.append(
        Problem(
            f"{NAMESPACE}:network.privateSubnetPrefix",
            f"{n.private_subnet_prefix}{default} gives each private subnet {have:,} addresses "
            f"(2^{32 - n.private_subnet_prefix} = {2 ** (32 - n.private_subnet_prefix):,} minus the "
            f"{addresses.SUBNET_RESERVED} AWS reserves), but the GPU AZ's subnet "
            f"needs {need:,} with every group at maxSize: " + " + ".join(p[1] for p in parts) + f"; {fix}",
        )
    )
