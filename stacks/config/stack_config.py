"""The stack config as a whole (``StackConfig``, and ``SECTIONS``: its keys in the stack file) and the
sections that schedule and watch work on the cluster: the Cluster Autoscaler, teams and Kueue
queues, burn-in of new GPU nodes and monitoring. The infrastructure's sections and ``ConfigModel``,
the base of every section, are in ``stacks/config/models.py``; each field carries a one-line
description, checked against docs/config.md like theirs.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from facts.kube import BURN_IN_MAX_REPLACEMENTS, BURN_IN_REPLACEMENT_WINDOW_SECONDS
from jobs.base import JobBase
from stacks.config.fleet import FleetConfig
from stacks.config.models import (
    ClusterConfig,
    ConfigModel,
    EtcdConfig,
    GpuNodeGroupConfig,
    NetworkConfig,
    ServicesConfig,
    StorageConfig,
    SystemNodeGroupConfig,
)
from stacks.queues.plan import pods_ready_budget


class AutoscalingConfig(ConfigModel):
    """The Cluster Autoscaler: GPU groups grow from zero when a job waits, and shrink when idle."""

    enabled: bool = Field(True, description="run the Cluster Autoscaler for the GPU groups with `autoscale: true`")
    scale_down_unneeded_time: str = Field(
        "10m", description="how long an idle GPU node stays before it is removed (a Go duration: `10m`, `1h30m`, `90s`)"
    )
    scale_down_delay_after_add: str = Field(
        "10m", description="no scale-down for this long after a scale-up (a Go duration like `10m`)"
    )
    expander: Literal["least-waste", "most-pods", "random"] = Field(
        "least-waste", description="which group grows when several could: `least-waste`, `most-pods` or `random`"
    )
    provisioning_requests: bool | None = Field(
        None,
        description="a queued job is admitted only once the autoscaler has brought up the nodes of its whole gang "
        "(Kueue's ProvisioningRequest admission check, `best-effort-atomic-scale-up`; `true` needs `queues.enabled`), "
        "on every autoscaled group. On AWS the scale-up is one resize of the group, not atomic. Default: on the "
        "autoscaled groups with a network topology, where Kueue places jobs only on nodes that exist "
        "(docs/topology.md); `false` is refused while there are such groups",
    )

    @field_validator("expander", mode="before")
    @classmethod
    def _no_priority_expander(cls, value: Any) -> Any:
        """`priority` needs a priorities ConfigMap of ASG-name patterns, which the stack does not
        make: without one the autoscaler skips the expander and picks at random. The stack's jobs
        each select one group, so only pods that fit several groups ever reach an expander."""
        if value == "priority":
            raise PydanticCustomError(
                "expander_priority",
                "the priority expander is not offered: it needs per-group priorities the stack does not take, and "
                "without them the autoscaler picks at random. Every job of the stack selects its node group, so the "
                "expander only decides for other pods that fit several groups. Allowed: least-waste, most-pods, random",
            )
        return value


class TeamQuotaConfig(ConfigModel):
    """A team's share of one GPU node group, in whole nodes (the quotas follow from the nodes)."""

    node_group: str = Field(description="a GPU node group of the stack")
    nodes: int = Field(
        ge=0, description="nominal quota: nodes of the group that are the team's (lent to others while idle)"
    )
    borrowing_limit: int | None = Field(
        None,
        ge=0,
        description="most nodes the team may borrow beyond its own from idle quota of others (default: no limit)",
    )
    lending_limit: int | None = Field(
        None,
        ge=0,
        description="most of its own nodes the team lends while idle, at most `nodes` (default: all of them)",
    )


class TeamConfig(ConfigModel):
    """A team: its own namespace and queue, a share of the GPU groups, and the IAM role its people use."""

    name: str = Field(description="lower-case name (a DNS label); also its ClusterQueue, and jobs name it in `team`")
    namespace: str | None = Field(
        None, description="the team's namespace, where it submits its own jobs (default: the team's name)"
    )
    role_arn: str | None = Field(
        None,
        description="IAM role whose sessions may submit jobs (MPIJobs, PyTorchJobs, PaddleJobs, Jobs) to the team's "
        "queue, in its namespace only (an EKS access entry)",
    )
    quotas: list[TeamQuotaConfig] = Field(
        default_factory=list,
        description="the team's nodes per GPU node group; groups not listed: none of its own, borrowing only",
    )
    fair_share_weight: float = Field(
        1,
        ge=0,
        description="the team's weight when idle quota is shared out (Kueue fair sharing): 2 gets twice the share of 1",
    )


# What a burn-in group's job admitted before its nodes exist waits for (stacks/queues/plan.py), in minutes.
_BUDGET = sum(m for _, m in pods_ready_budget(burn_in=True, loopback=False))
_BUDGET_LOOPBACK = sum(m for _, m in pods_ready_budget(burn_in=True, loopback=True))


class QueuesConfig(ConfigModel):
    """Kueue: GPU jobs wait whole in a queue until all their nodes are free, with priorities and teams."""

    enabled: bool = Field(
        True,
        description="run Kueue: a GPU job is admitted only when its whole gang fits (no half-started jobs holding "
        "nodes)",
    )
    pods_ready_timeout: str = Field(
        "30m",
        description="how long an admitted job may take until all its pods run (GPU node boot, burn-in, image pull); "
        "then it gives its nodes back and queues again. Refused below what a burn-in group's jobs admitted before "
        f"their nodes exist need ({_BUDGET}m; {_BUDGET_LOOPBACK}m with the loopback test)",
    )
    requeue_limit: int | None = Field(
        None,
        ge=0,
        description="times a job that timed out queues again before it is deactivated (default: no limit; the waits "
        "double from 1 minute to 1 hour)",
    )
    teams: list[TeamConfig] = Field(
        default_factory=list,
        description="teams with their own namespace, queue and share of the GPU groups, in one cohort",
    )


class BurnInConfig(ConfigModel):
    """Burn-in of new GPU nodes: a startup taint until a check has verified the node."""

    enabled: bool = Field(
        True,
        description="every GPU group's new nodes join with a startup taint that keeps jobs off them until a check has "
        "verified their GPUs (count, model, ECC, Xid) and EFA interfaces; a failed node stays tainted and is replaced "
        f"(at most {BURN_IN_MAX_REPLACEMENTS} of a group's nodes in {BURN_IN_REPLACEMENT_WINDOW_SECONDS // 60} "
        "minutes; past that it stays tainted and a Warning event asks a person to look; a group's `burnIn` overrides)",
    )
    loopback_test: bool = Field(
        False,
        description="the check also runs a short NCCL all-reduce over the node's own GPUs (nccl-tests' "
        "all_reduce_perf, a few seconds; V100 groups skip it: the image is built for A100 and newer)",
    )


class MonitoringConfig(ConfigModel):
    """CloudWatch Container Insights with GPU and EFA metrics, and a dashboard."""

    enabled: bool = Field(True, description="CloudWatch observability add-on (Container Insights, GPU/EFA metrics)")
    log_retention_days: int = Field(30, description="Container Insights log retention (a CloudWatch retention value)")
    dashboard: bool = Field(True, description="a GPU/EFA dashboard per cluster")


# A standard SNS topic's ARN (partition, region, account, name: letters, digits, '-' and '_', at most
# 256; SNS CreateTopic's name rule). CloudWatch alarm actions take standard topics only, not FIFO ones
# (the CloudWatch user guide, "Using Amazon CloudWatch alarms", alarm actions).
SNS_TOPIC_ARN = re.compile(r"^arn:aws(-[a-z]+)*:sns:[a-z]{2}(-[a-z]+)+-\d:\d{12}:[A-Za-z0-9_-]{1,256}$")
# The idle-GPU alarm's period (seconds); its window is a whole number of periods, at most a day
# (CloudWatch evaluates at most 1 day of periods of 5 minutes or more: "Evaluating an alarm").
IDLE_PERIOD_MINUTES = 5
IDLE_WINDOW_MAX_MINUTES = 1440
# The queue-wait budget's bound: a week (a wait longer than that is a queue nobody serves).
QUEUE_WAIT_MAX_MINUTES = 10080


class AlertsConfig(ConfigModel):
    """CloudWatch alarms and dashboards derived from the GPU jobs (docs/alerts.md)."""

    enabled: bool = Field(
        False,
        description="alarms per GPU job on EKS (idle GPUs, silent EFA, fabric fallback, stalled, slow node) and on "
        "GPU Xid errors, sent to an SNS topic; needs `monitoring.enabled`",
    )
    sns_topic_arn: str | None = Field(
        None,
        description="the standard SNS topic the alarms notify (default: the stack creates `<cluster>-alerts`; "
        "subscribe to it)",
    )
    idle_gpu_percent: int = Field(
        5, ge=1, le=100, description="a running job's GPUs count as idle below this utilization (percent)"
    )
    idle_minutes: int = Field(
        30,
        description=f"how long a running job's GPUs stay idle before its alarm fires, in minutes (a multiple of "
        f"{IDLE_PERIOD_MINUTES}, at most {IDLE_WINDOW_MAX_MINUTES})",
    )
    dashboards: bool = Field(
        True,
        description="a CloudWatch dashboard per GPU job on EKS (its pods' GPUs, EFA, steps), and one of the queues",
    )
    queue_wait_minutes: int | None = Field(
        None,
        ge=1,
        le=QUEUE_WAIT_MAX_MINUTES,
        description="an alarm per Kueue ClusterQueue when its oldest pending workload has waited longer than this, "
        f"in minutes (1 to {QUEUE_WAIT_MAX_MINUTES}; default: none; needs `queues.enabled`)",
    )

    @field_validator("sns_topic_arn")
    @classmethod
    def _standard_topic(cls, value: str | None) -> str | None:
        if value is not None and not SNS_TOPIC_ARN.match(value):
            raise PydanticCustomError(
                "sns_topic_arn",
                "{value!r} is not a standard SNS topic ARN; allowed: arn:aws:sns:<region>:<12-digit account>:<name> "
                "(name: letters, digits, '-', '_'; FIFO topics take no alarm actions)",
                {"value": value},
            )
        return value

    @field_validator("idle_minutes")
    @classmethod
    def _whole_periods(cls, value: int) -> int:
        if not (IDLE_PERIOD_MINUTES <= value <= IDLE_WINDOW_MAX_MINUTES and value % IDLE_PERIOD_MINUTES == 0):
            raise PydanticCustomError(
                "idle_minutes",
                "{value} is not allowed: a multiple of {period} from {period} to {most} (the alarm's 5-minute periods)",
                {"value": value, "period": IDLE_PERIOD_MINUTES, "most": IDLE_WINDOW_MAX_MINUTES},
            )
        return value


class StackConfig(ConfigModel):
    """The whole validated config of one stack (built by ``load`` from its parsed sections, by
    field name; the stack file's keys are read by the sections' models)."""

    model_config = ConfigDict(validate_by_name=True)

    # Fields that are no key of the project namespace: ``load`` fills them in from the engine
    # (project and stack) and from `aws:region`.
    FROM_ENGINE: ClassVar[frozenset[str]] = frozenset({"project", "stack", "region"})

    project: str = Field(description="Pulumi project name")
    stack: str = Field(description="Pulumi stack name")
    region: str = Field(description="AWS region (`aws:region`)")
    gpu_availability_zone: str = Field(
        "auto",
        description="the one AZ of every GPU node group, FSx and the placement groups. `auto` picks the first AZ "
        "(by name) that offers every configured GPU type; pin it once chosen",
    )
    network: NetworkConfig = Field(NetworkConfig(), description="the VPC")
    cluster: ClusterConfig = Field(ClusterConfig(), description="the EKS control plane")
    system_node_group: SystemNodeGroupConfig = Field(SystemNodeGroupConfig(), description="the system node group")
    gpu_node_groups: list[GpuNodeGroupConfig] = Field(
        default_factory=list,
        description="GPU node groups; at most 64 with queues (a Kueue ClusterQueue holds one flavor per group, "
        "at most 64)",
        title="node groups",
    )
    storage: StorageConfig = Field(StorageConfig(), description="EFS and FSx for Lustre")
    etcd: EtcdConfig = Field(EtcdConfig(), description="etcd for elastic rendezvous")
    services: ServicesConfig = Field(ServicesConfig(), description="cluster services")
    monitoring: MonitoringConfig = Field(MonitoringConfig(), description="CloudWatch monitoring")
    alerts: AlertsConfig = Field(AlertsConfig(), description="alarms and dashboards from the GPU jobs")
    autoscaling: AutoscalingConfig = Field(AutoscalingConfig(), description="the Cluster Autoscaler")
    burn_in: BurnInConfig = Field(BurnInConfig(), description="burn-in of new GPU nodes")
    queues: QueuesConfig = Field(QueuesConfig(), description="Kueue queues for the GPU jobs")
    jobs: list[JobBase] = Field(
        default_factory=list, description="training jobs emitted by the same stack: see docs/jobs.md"
    )
    fleet: FleetConfig = Field(
        FleetConfig(), description="several stacks behind one queue (Kueue MultiKueue): see docs/fleet.md"
    )
    tags: dict[str, str] = Field(default_factory=dict, description="extra tags on every AWS resource")

    @property
    def cluster_name(self) -> str:
        return self.cluster.name or f"{self.project}-{self.stack}"

    @property
    def gpu_instance_types(self) -> list[str]:
        return sorted({g.instance_type for g in self.gpu_node_groups})

    def burn_in_on(self, g: GpuNodeGroupConfig) -> bool:
        """Whether group ``g``'s new nodes are burnt in (its own setting, else the stack's)."""
        return self.burn_in.enabled if g.burn_in is None else g.burn_in

    def gpu_group(self, name: str) -> GpuNodeGroupConfig | None:
        return next((g for g in self.gpu_node_groups if g.name == name), None)


# The project namespace's keys (`gpu-training:<key>`) and the StackConfig field each one is: every
# field by its alias, but the ones ``load`` fills in itself. The loader walks these fields, so a
# new section is one field of StackConfig.
SECTIONS: dict[str, str] = {
    f.alias or name: name for name, f in StackConfig.model_fields.items() if name not in StackConfig.FROM_ENGINE
}

# Keys of other namespaces that the stack reads or tolerates (provider settings).
FOREIGN_NAMESPACES_ALLOWED = ("aws", "kubernetes", "pulumi")
