"""What a stack costs per hour, from its config and the pinned prices (facts/prices.py): at idle
(control plane, system nodes, NAT gateways, FSx, root volumes, GPU groups at their minimum) and
with every group at its maximum, per group. Spot groups are priced at the on-demand rate (an upper
bound); capacity blocks are paid up front and not priced here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from facts import prices
from stacks.config import StackConfig


@dataclass(frozen=True)
class Line:
    what: str
    idle: Optional[float]  # USD per hour at idle; None: no price known
    maximum: Optional[float]  # USD per hour at every group's maximum


@dataclass
class Cost:
    lines: list[Line] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def idle(self) -> float:
        return round(sum(line.idle or 0.0 for line in self.lines), 2)

    @property
    def maximum(self) -> float:
        return round(sum(line.maximum or 0.0 for line in self.lines), 2)

    def as_json(self) -> dict[str, object]:
        return {
            "region": prices.PRICES_REGION,
            "date": prices.PRICES_DATE,
            "idlePerHour": self.idle,
            "maximumPerHour": self.maximum,
            "lines": [{"what": line.what, "idlePerHour": line.idle, "maximumPerHour": line.maximum} for line in self.lines],
            "notes": list(self.notes),
        }


def _nodes(what: str, instance_type: str, low: int, high: int, disk_gib: int, cost: Cost) -> None:
    hourly = prices.INSTANCE_HOURLY.get(instance_type)
    disk = disk_gib * prices.EBS_GP3_GB_MONTH / prices.HOURS_PER_MONTH
    if hourly is None:
        cost.notes.append(f"{what}: {instance_type} has no on-demand price (Capacity Blocks only); not counted")
        cost.lines.append(Line(f"{what} ({instance_type}, {low}-{high} nodes)", None, None))
        return
    cost.lines.append(Line(f"{what} ({instance_type}, {low}-{high} nodes)", round(low * (hourly + disk), 4), round(high * (hourly + disk), 4)))


def estimate(cfg: StackConfig) -> Cost:
    """The stack's hourly cost at idle and at every group's maximum."""
    cost = Cost()
    cost.lines.append(Line("EKS control plane", prices.EKS_CLUSTER_HOURLY, prices.EKS_CLUSTER_HOURLY))
    nat = cfg.network.availability_zone_count if cfg.network.nat_gateways == "perAz" else 1
    cost.lines.append(Line(f"NAT gateways ({nat})", nat * prices.NAT_GATEWAY_HOURLY, nat * prices.NAT_GATEWAY_HOURLY))
    s = cfg.system_node_group
    _nodes("system nodes", s.instance_type, s.desired_size, s.max_size, s.disk_size_gib, cost)
    for g in cfg.gpu_node_groups:
        if g.capacity_type == "capacity-block":
            cost.notes.append(f"GPU group {g.name}: a capacity block, paid up front; not counted")
            continue
        if g.capacity_type == "spot":
            cost.notes.append(f"GPU group {g.name}: spot, priced at the on-demand rate (an upper bound)")
        _nodes(f"GPU group {g.name}", g.instance_type, g.min_size, g.max_size, g.disk_size_gib, cost)
    f = cfg.storage.fsx
    if f.enabled:
        key = (f.deployment_type, f.per_unit_storage_throughput if f.deployment_type.startswith("PERSISTENT") else None)
        per_gb = prices.FSX_GB_MONTH.get(key)
        if per_gb is None:
            cost.notes.append(f"FSx {f.deployment_type}: no pinned price; not counted")
        else:
            hourly = round(f.storage_capacity_gib * per_gb / prices.HOURS_PER_MONTH, 4)
            cost.lines.append(Line(f"FSx for Lustre ({f.deployment_type}, {f.storage_capacity_gib} GiB)", hourly, hourly))
    if cfg.storage.efs.enabled:
        cost.notes.append(f"EFS bills what is stored (${prices.EFS_GB_MONTH:.2f} per GB-month): nothing when empty")
    if cfg.region != prices.PRICES_REGION:
        cost.notes.append(f"prices are {prices.PRICES_REGION}'s; the stack is in {cfg.region}")
    return cost


def describe(cost: Cost) -> str:
    """Lines for the plan summary."""
    out = [
        f"Cost per hour (on-demand, {prices.PRICES_REGION} prices of {prices.PRICES_DATE}): idle ${cost.idle:.2f}, every group at its maximum ${cost.maximum:.2f}"
    ]
    for line in cost.lines:
        idle = "n/a" if line.idle is None else f"${line.idle:.2f}"
        top = "n/a" if line.maximum is None else f"${line.maximum:.2f}"
        out.append(f"  {line.what}: idle {idle}, maximum {top}")
    out += [f"  note: {n}" for n in cost.notes]
    return "\n".join(out) + "\n"
