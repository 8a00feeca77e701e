"""What the stack watches, from the job specs: per GPU job on EKS the alarms (idle GPUs, silent
EFA, fabric fallback, stalled, slow node) and a dashboard, per cluster the metric filters that
turn the jobs' signal lines (facts/job_signals.py) into metrics and the GPU Xid alarm; and the
wiring that registers them (``components/alerts.py``).

Metrics read, with their sources:
- Container Insights with enhanced observability (the add-on, ``ContainerInsights`` namespace):
  ``pod_gpu_utilization`` / ``pod_gpu_memory_utilization`` and ``pod_efa_rx_bytes`` /
  ``pod_efa_tx_bytes`` with dimensions ClusterName, Namespace, PodName; ``pod_number_of_container_restarts``
  likewise (aws/amazon-cloudwatch-agent, translator/translate/otel/exporter/awsemf, the kubernetes
  metric declarations). PodName is the pod's own name for pods whose owner is no Deployment,
  DaemonSet, Job, ReplicaSet or StatefulSet (amazon-cloudwatch-agent, internal/containerinsightscommon
  k8sapiserver podstore.go, addPodOwnersAndPodName): the MPIJob, PyTorchJob and PaddleJob workers, named
  ``<job>-worker-<i>`` by their operators.
- The signal metrics (``GpuTraining/Jobs/<cluster>``, dimensions job and namespace), from metric filters on
  ``/aws/containerinsights/<cluster>/application``: the JSON line's keys are under
  ``log_processed`` in the record (facts/job_signals.py, RECORD_FIELD), so the filter is a JSON
  pattern on ``$.log_processed.gputraining_signal``.
- GPU Xid errors: the NVIDIA driver's kernel line ``NVRM: Xid (PCI:...): <code>, ...`` reaches
  ``/aws/containerinsights/<cluster>/host`` (the add-on's host-log.conf: journald's kernel transport,
  MESSAGE renamed ``message``); a metric filter counts them. Double-bit ECC errors are Xid 48, row
  remapping 63/64 (NVIDIA's Xid catalog), so the same alarm covers ECC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components.alerts import AlarmSpec, Alerts, AlertsArgs, MetricFilterSpec, MetricStat
from components.monitoring import Monitoring
from components.queue_reporter import QueueReporter, QueueReporterArgs
from components.queues import KUEUE_API
from facts import job_signals as sig
from facts import versions
from facts.kube import NODE_GROUP_LABEL, SYSTEM_GROUP
from stacks import queues
from stacks.config import StackConfig
from stacks.dashboards import job_dashboard, job_dashboard_name, queues_dashboard, queues_dashboard_name
from stacks.watched import CI, WatchedJob, watched_jobs

# Alarms on metric math read at most 10 metrics (CloudWatch user guide, "Limits that apply to
# alarms based on metric math expressions": a hard limit).
ALARM_METRICS_MAX = 10


@dataclass
class AlertPlan:
    filters: list[MetricFilterSpec]
    alarms: list[AlarmSpec]
    dashboards: dict[str, dict]


def log_group(cluster: str, kind: str) -> str:
    return f"/aws/containerinsights/{cluster}/{kind}"


def xid_namespace(cluster: str) -> str:
    """The Xid metric's namespace: the host log records carry no cluster name a dimension could read."""
    return f"GpuTraining/Nodes/{cluster}"


XID_METRIC = "gpu_xid_events"


def signal_filter(cluster: str, signal: str, dimensions: tuple[str, ...] = sig.DIMENSIONS) -> MetricFilterSpec:
    """A signal of the jobs (or, with the queue dimension, of the queue reporter) into a metric of the cluster."""
    field = f"$.{sig.RECORD_FIELD}"
    return MetricFilterSpec(
        name=f"gputraining-{signal}",
        log_group=log_group(cluster, "application"),
        pattern=f'{{ {field}.{sig.SIGNAL_KEY} = "{signal}" }}',
        namespace=sig.metric_namespace(cluster),
        metric=signal,
        value=f"{field}.value",
        dimensions={d: f"{field}.{d}" for d in dimensions},
    )


def queue_filter(cluster: str, signal: str) -> MetricFilterSpec:
    """A queue signal of the reporter into a metric per ClusterQueue."""
    return signal_filter(cluster, signal, (sig.QUEUE_DIMENSION,))


def xid_filter(cluster: str) -> MetricFilterSpec:
    return MetricFilterSpec(
        name="gputraining-gpu-xid",
        log_group=log_group(cluster, "host"),
        pattern='{ $.message = "NVRM: Xid*" }',
        namespace=xid_namespace(cluster),
        metric=XID_METRIC,
        value="1",
    )


def _signal(cluster: str, job: WatchedJob, signal: str, stat: str) -> MetricStat:
    return MetricStat("m0", sig.metric_namespace(cluster), signal, {"job": job.name, "namespace": job.namespace}, stat)


def _pod_metrics(cluster: str, job: WatchedJob, metrics: tuple[str, ...], stat: str) -> tuple[MetricStat, ...]:
    """Each of ``metrics`` for the job's first pods, as many as an alarm reads."""
    pods = job.pods[: ALARM_METRICS_MAX // len(metrics)]
    return tuple(
        MetricStat(f"m{i}", CI, metric, {"ClusterName": cluster, "Namespace": job.namespace, "PodName": pod}, stat)
        for i, (pod, metric) in enumerate((p, m) for p in pods for m in metrics)
    )


def idle_alarm(cfg: StackConfig, job: WatchedJob) -> AlarmSpec:
    """Every watched pod's GPUs below the idle threshold for the whole window (a job that runs
    and holds its nodes but computes nothing); no data (the job not running) is no alarm."""
    metrics = _pod_metrics(cfg.cluster_name, job, ("pod_gpu_utilization",), "Average")
    periods = cfg.alerts.idle_minutes // 5
    return AlarmSpec(
        name=f"{cfg.cluster_name}-{job.name}-gpu-idle",
        description=f"job {job.name} ({job.namespace}): its GPUs stayed below {cfg.alerts.idle_gpu_percent}% for "
        f"{cfg.alerts.idle_minutes} minutes while it holds its nodes. See docs/alerts.md, gpu-idle.",
        metrics=metrics,
        expression=f"MAX([{', '.join(m.id for m in metrics)}])",
        comparison="LessThanThreshold",
        threshold=float(cfg.alerts.idle_gpu_percent),
        period=300,
        evaluation_periods=periods,
        datapoints_to_alarm=periods,
        treat_missing_data="notBreaching",
    )


def efa_silent_alarm(cfg: StackConfig, job: WatchedJob) -> AlarmSpec:
    """No byte through the EFA devices of the watched pods for 15 minutes while they run."""
    metrics = _pod_metrics(cfg.cluster_name, job, ("pod_efa_rx_bytes", "pod_efa_tx_bytes"), "Sum")
    return AlarmSpec(
        name=f"{cfg.cluster_name}-{job.name}-efa-silent",
        description=f"job {job.name} ({job.namespace}): no traffic on its pods' EFA devices for 15 minutes: NCCL "
        "is probably on sockets. See docs/alerts.md, efa-silent.",
        metrics=metrics,
        expression=f"SUM([{', '.join(m.id for m in metrics)}])",
        comparison="LessThanOrEqualToThreshold",
        threshold=0.0,
        period=300,
        evaluation_periods=3,
        datapoints_to_alarm=3,
        treat_missing_data="notBreaching",
    )


def signal_alarm(
    cfg: StackConfig, job: WatchedJob, signal: str, kind: str, stat: str, period: int, why: str
) -> AlarmSpec:
    """One signal line of the job in a period is enough (the in-pod check decided already)."""
    return AlarmSpec(
        name=f"{cfg.cluster_name}-{job.name}-{kind}",
        description=f"job {job.name} ({job.namespace}): {why}. See docs/alerts.md, {kind}.",
        metrics=(_signal(cfg.cluster_name, job, signal, stat),),
        comparison="GreaterThanOrEqualToThreshold",
        threshold=1.0,
        period=period,
        evaluation_periods=1,
        datapoints_to_alarm=1,
        treat_missing_data="notBreaching",
    )


def job_alarms(cfg: StackConfig, job: WatchedJob) -> list[AlarmSpec]:
    out = [idle_alarm(cfg, job)]
    if job.efa and job.multi_node:
        out.append(efa_silent_alarm(cfg, job))
        why = "a node's NCCL did not use EFA, or its EFA counters stood still"
        out.append(signal_alarm(cfg, job, sig.FABRIC_FALLBACK, "fabric-fallback", "Maximum", 60, why))
    if job.guarded:
        why = "the progress guard found no progress within the job's timeout"
        out.append(signal_alarm(cfg, job, sig.JOB_STALLED, "stalled", "Maximum", 60, why))
    if job.multi_node:
        why = "a node's steps are slower than the job's by the slow-node factor"
        out.append(signal_alarm(cfg, job, sig.SLOW_NODE, "slow-node", "SampleCount", 300, why))
    return out


def xid_alarm(cfg: StackConfig) -> AlarmSpec:
    return AlarmSpec(
        name=f"{cfg.cluster_name}-gpu-xid",
        description=f"cluster {cfg.cluster_name}: a GPU node's driver logged an NVIDIA Xid error (ECC included). See "
        "docs/alerts.md, gpu-xid.",
        metrics=(MetricStat("m0", xid_namespace(cfg.cluster_name), XID_METRIC, {}, "Sum"),),
        comparison="GreaterThanOrEqualToThreshold",
        threshold=1.0,
        period=300,
        evaluation_periods=1,
        datapoints_to_alarm=1,
        treat_missing_data="notBreaching",
    )


def queue_wait_alarm(cfg: StackConfig, cluster_queue: str, minutes: int) -> AlarmSpec:
    """The ClusterQueue's oldest pending workload has waited past the budget (the reporter's
    ``queue_wait`` grows by a minute a minute, so one reading above it is enough); no data (the
    reporter not running) is no alarm."""
    return AlarmSpec(
        name=f"{cfg.cluster_name}-queue-{cluster_queue}-wait",
        description=f"ClusterQueue {cluster_queue}: a workload has waited over {minutes} minutes for quota. See "
        "docs/alerts.md, queue-wait.",
        metrics=(
            MetricStat(
                "m0",
                sig.metric_namespace(cfg.cluster_name),
                sig.QUEUE_WAIT,
                {sig.QUEUE_DIMENSION: cluster_queue},
                "Maximum",
            ),
        ),
        comparison="GreaterThanThreshold",
        threshold=float(minutes * 60),
        period=60,
        evaluation_periods=1,
        datapoints_to_alarm=1,
        treat_missing_data="notBreaching",
    )


def cluster_queues(cfg: StackConfig) -> list[str]:
    """The ClusterQueues the stack makes, none without queues."""
    p = queues.plan_for(cfg)
    return [] if p is None else [cq.name for cq in p.cluster_queues]


def _queue_parts(cfg: StackConfig, p: AlertPlan) -> None:
    cqs = cluster_queues(cfg)
    if not cqs:
        return
    p.filters += [queue_filter(cfg.cluster_name, s) for s in sig.QUEUE_SIGNALS]
    minutes = cfg.alerts.queue_wait_minutes
    waits = [queue_wait_alarm(cfg, cq, minutes) for cq in cqs] if minutes else []
    p.alarms += waits
    if cfg.alerts.dashboards:
        p.dashboards[queues_dashboard_name(cfg.cluster_name)] = queues_dashboard(cfg, cqs, [a.name for a in waits])


def plan(cfg: StackConfig) -> AlertPlan:
    """Everything the stack watches, or nothing with alerts off."""
    if not (cfg.alerts.enabled and cfg.monitoring.enabled):
        return AlertPlan([], [], {})
    jobs = watched_jobs(cfg)
    filters = [signal_filter(cfg.cluster_name, s) for s in sig.SIGNALS]
    alarms = [a for j in jobs for a in job_alarms(cfg, j)]
    if cfg.gpu_node_groups:
        filters.append(xid_filter(cfg.cluster_name))
        alarms.append(xid_alarm(cfg))
    dashboards = {}
    if cfg.alerts.dashboards:
        dashboards = {
            job_dashboard_name(cfg.cluster_name, j.name): job_dashboard(cfg, j, [a.name for a in job_alarms(cfg, j)])
            for j in jobs
        }
    out = AlertPlan(filters, alarms, dashboards)
    _queue_parts(cfg, out)
    return out


def filter_metrics(cfg: StackConfig) -> int:
    """The most metrics the metric filters make: each signal of each watched job (a metric per
    dimension combination, job and namespace), the Xid count, and each queue signal per ClusterQueue."""
    p = plan(cfg)
    xid = any(f.metric == XID_METRIC for f in p.filters)
    queued = len(cluster_queues(cfg)) * len(sig.QUEUE_SIGNALS) * bool(p.filters)
    return len(watched_jobs(cfg)) * len(sig.SIGNALS) * bool(p.filters) + xid + queued


def queue_reporter_on(cfg: StackConfig) -> bool:
    """The reporter runs where its lines are read: alerts on and queues on."""
    return bool(plan(cfg).filters) and bool(cluster_queues(cfg))


def dashboard_url(region: str, name: str) -> str:
    """The dashboard's page in the CloudWatch console."""
    return f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#dashboards/dashboard/{name}"


def build_alerts(
    cfg: StackConfig, monitoring: Monitoring, tags: dict[str, str], k8s_opts: pulumi.ResourceOptions | None = None
) -> dict[str, Any]:
    """Register the alerts next to ``monitoring`` (and the queue reporter, through ``k8s_opts``'
    provider); returns the stack outputs of both."""
    outputs: dict[str, Any] = {}
    if k8s_opts is not None and queue_reporter_on(cfg):
        args = QueueReporterArgs(
            image=versions.ETCD_MEMBER_IMAGE,  # the stack's stdlib python image
            kueue_api=KUEUE_API,
            signal_key=sig.SIGNAL_KEY,
            node_selector={NODE_GROUP_LABEL: SYSTEM_GROUP},
        )
        QueueReporter("queue-reporter", args, opts=k8s_opts)
    if monitoring.dashboard_name:
        outputs["dashboardName"] = monitoring.dashboard_name
    p = plan(cfg)
    if not (p.alarms or p.dashboards):
        return outputs
    alerts = Alerts(
        "alerts",
        AlertsArgs(
            topic_arn=cfg.alerts.sns_topic_arn,
            topic_name=f"{cfg.cluster_name}-alerts",
            filters=p.filters,
            alarms=p.alarms,
            dashboards=p.dashboards,
            log_groups=list(monitoring.log_groups.values()),
            tags=tags,
        ),
    )
    outputs["alertsTopicArn"] = alerts.topic_arn
    if p.dashboards:
        outputs["jobDashboards"] = {name: dashboard_url(cfg.region, name) for name in sorted(p.dashboards)}
    return outputs


def dashboard_lines(cfg: StackConfig) -> list[str]:
    """The plan's line listing the job and queue dashboards, with their console links (none with alerts off)."""
    names = sorted(plan(cfg).dashboards)
    if not names:
        return []
    return [f"Job and queue dashboards ({len(names)}): " + ", ".join(dashboard_url(cfg.region, n) for n in names)]
