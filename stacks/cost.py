"""What a stack costs per hour, from its config and the pinned prices (facts/prices.py): at idle
(control plane, system nodes, NAT gateways and their public IPv4 addresses, KMS keys, FSx, root
volumes, GPU groups at their minimum) and with every group at its maximum, per group. Spot groups
are priced at the on-demand rate (an upper bound); capacity blocks are paid up front and not priced
here. What the stack also pays for but the estimate does not count (usage-billed: logs, metrics,
backups, data, SageMaker runs) is listed by name in ``Cost.omitted``."""

from __future__ import annotations

from dataclasses import dataclass, field

from facts import job_signals as sig
from facts import prices
from stacks.alerts import cluster_queues, filter_metrics, plan, queue_reporter_on
from stacks.config import StackConfig


@dataclass(frozen=True)
class Line:
    what: str
    idle: float | None  # USD per hour at idle; None: no price known
    maximum: float | None  # USD per hour at every group's maximum


@dataclass
class Cost:
    lines: list[Line] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    omitted: list[str] = field(
        default_factory=list
    )  # what the stack pays for that is not counted, and how it is billed

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
            "lines": [
                {"what": line.what, "idlePerHour": line.idle, "maximumPerHour": line.maximum} for line in self.lines
            ],
            "notes": list(self.notes),
            "omitted": list(self.omitted),
        }


def _nodes(what: str, instance_type: str, low: int, high: int, disk_gib: int, cost: Cost) -> None:
    hourly = prices.INSTANCE_HOURLY.get(instance_type)
    disk = disk_gib * prices.EBS_GP3_GB_MONTH / prices.HOURS_PER_MONTH
    if hourly is None:
        cost.notes.append(f"{what}: {instance_type} has no on-demand price (Capacity Blocks only); not counted")
        cost.lines.append(Line(f"{what} ({instance_type}, {low}-{high} nodes)", None, None))
        return
    cost.lines.append(
        Line(
            f"{what} ({instance_type}, {low}-{high} nodes)",
            round(low * (hourly + disk), 4),
            round(high * (hourly + disk), 4),
        )
    )


def estimate(cfg: StackConfig) -> Cost:
    """The stack's hourly cost at idle and at every group's maximum."""
    cost = Cost()
    cost.lines.append(Line("EKS control plane", prices.EKS_CLUSTER_HOURLY, prices.EKS_CLUSTER_HOURLY))
    nat = cfg.network.availability_zone_count if cfg.network.nat_gateways == "perAz" else 1
    cost.lines.append(Line(f"NAT gateways ({nat})", nat * prices.NAT_GATEWAY_HOURLY, nat * prices.NAT_GATEWAY_HOURLY))
    ipv4 = round(nat * prices.PUBLIC_IPV4_HOURLY, 4)
    cost.lines.append(Line(f"public IPv4 addresses ({nat}, the NAT gateways' Elastic IPs)", ipv4, ipv4))
    keys = kms_keys(cfg)
    kms = round(len(keys) * prices.KMS_KEY_MONTH / prices.HOURS_PER_MONTH, 4)
    cost.lines.append(Line(f"KMS keys ({len(keys)}: {', '.join(keys)})", kms, kms))
    cost.notes.append(
        f"KMS keys: ${prices.KMS_KEY_MONTH:.0f} per key-month in the first year; yearly rotation (on) raises it to "
        f"${prices.KMS_KEY_MONTH_AFTER_ROTATIONS:.0f} from the third year"
    )
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
            cost.lines.append(
                Line(f"FSx for Lustre ({f.deployment_type}, {f.storage_capacity_gib} GiB)", hourly, hourly)
            )
    _alerts(cfg, cost)
    if cfg.region != prices.PRICES_REGION:
        cost.notes.append(f"prices are {prices.PRICES_REGION}'s; the stack is in {cfg.region}")
    cost.omitted += omitted(cfg)
    return cost


def _alerts(cfg: StackConfig, cost: Cost) -> None:
    """The alarms and dashboards (fixed, per month), and the metrics of the metric filters (only
    while jobs report: nothing at idle, every job's every signal at the maximum)."""
    p = plan(cfg)
    if not (p.alarms or p.dashboards):
        return
    alarm_metrics = sum(len(a.metrics) for a in p.alarms)
    monthly = (
        alarm_metrics * prices.CLOUDWATCH_ALARM_METRIC_MONTH + len(p.dashboards) * prices.CLOUDWATCH_DASHBOARD_MONTH
    )
    fixed = round(monthly / prices.HOURS_PER_MONTH, 4)
    cost.lines.append(
        Line(
            f"CloudWatch alarms ({len(p.alarms)}, reading {alarm_metrics} metric{'s' * (alarm_metrics != 1)}) and "
            f"dashboards ({len(p.dashboards)})",
            fixed,
            fixed,
        )
    )
    metrics = filter_metrics(cfg)
    top = round(metrics * prices.CLOUDWATCH_CUSTOM_METRIC_MONTH / prices.HOURS_PER_MONTH, 4)
    # The queue reporter publishes its metrics every minute whether or not anything runs.
    always = len(cluster_queues(cfg)) * len(sig.QUEUE_SIGNALS) if queue_reporter_on(cfg) else 0
    idle = round(always * prices.CLOUDWATCH_CUSTOM_METRIC_MONTH / prices.HOURS_PER_MONTH, 4)
    cost.lines.append(
        Line(f"CloudWatch metrics from the jobs' and queues' signals and Xid lines (up to {metrics})", idle, top)
    )
    cost.notes.append(
        "CloudWatch: alarms and dashboards at their monthly price; the account's free tier "
        "(10 alarm metrics, 3 dashboards, 10 metrics) is not deducted"
    )


def kms_keys(cfg: StackConfig) -> list[str]:
    """The customer managed KMS keys the stack creates: the cluster's secrets key, and a key for EFS
    and for a PERSISTENT FSx file system (scratch ones use FSx's own key)."""
    keys = ["EKS secrets"]
    if cfg.storage.efs.enabled:
        keys.append("EFS")
    if cfg.storage.fsx.enabled and cfg.storage.fsx.deployment_type.startswith("PERSISTENT"):
        keys.append("FSx")
    return keys


def omitted(cfg: StackConfig) -> list[str]:
    """What the stack pays for that the estimate leaves out (all billed by use), one entry each."""
    from stacks.config.job_entries import sagemaker_jobs

    out = [
        "NAT gateway data processing (per GB through the NAT gateways) and "
        "data transfer (out to the internet, across AZs)",
        "EKS control-plane logs (all five types) in CloudWatch Logs: per GB ingested "
        f"and stored (kept {cfg.cluster.log_retention_days} days)",
    ]
    if cfg.monitoring.enabled:
        out.append(
            "Container Insights (CloudWatch observability add-on): metrics per "
            "metric-month, container logs per GB ingested and "
            f"stored (kept {cfg.monitoring.log_retention_days} days)"
            + ("; the dashboard per dashboard-month" if cfg.monitoring.dashboard else "")
        )
    if cfg.storage.efs.enabled:
        out.append(
            f"EFS storage: what is stored (${prices.EFS_GB_MONTH:.2f} per GB-month, Standard); nothing when empty"
        )
    f = cfg.storage.fsx
    if f.enabled and f.deployment_type.startswith("PERSISTENT") and (f.backup_retention_days or f.final_backup):
        kinds = ([f"daily, kept {f.backup_retention_days} days"] if f.backup_retention_days else []) + (
            ["a final backup on delete"] if f.final_backup else []
        )
        out.append(f"FSx backups ({', '.join(kinds)}): per GB-month of backup storage")
    jobs = sagemaker_jobs(cfg.jobs, cfg.gpu_node_groups, cfg.region, cfg.cluster_name, {})
    if jobs:
        runs = ", ".join(
            f"{j.job} on {j.instance_count} x {j.instance_type}" + (" (spot)" if j.spot else "") for j in jobs
        )
        out.append(f"SageMaker training jobs ({runs}): per instance-second while each runs")
    exposed = [j.name for j in cfg.jobs if j.enabled and getattr(j, "expose", False)]
    if exposed:
        out.append(
            f"load balancers of exposed jobs ({', '.join(exposed)}): per hour "
            "and per LCU, with their public IPv4 addresses"
        )
    return out


def describe(cost: Cost) -> str:
    """Lines for the plan summary."""
    out = [
        f"Cost per hour (on-demand, {prices.PRICES_REGION} prices of {prices.PRICES_DATE}): idle "
        f"${cost.idle:.2f}, every group at its maximum ${cost.maximum:.2f}"
    ]
    for line in cost.lines:
        idle = "n/a" if line.idle is None else f"${line.idle:.2f}"
        top = "n/a" if line.maximum is None else f"${line.maximum:.2f}"
        out.append(f"  {line.what}: idle {idle}, maximum {top}")
    out += [f"  note: {n}" for n in cost.notes]
    out += [f"  not counted: {o}" for o in cost.omitted]
    return "\n".join(out) + "\n"
