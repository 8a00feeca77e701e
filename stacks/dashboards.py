"""A CloudWatch dashboard per GPU job: its pods' GPU use and memory, EFA traffic, step times,
container restarts, the signals its checks report, and its alarms' names. The body follows
CloudWatch's "Dashboard Body Structure and Syntax" (CloudWatch API reference): a 24-column grid of
widgets, each with x, y, width, height and properties; a metric widget lists its metrics as
``[namespace, name, dimension, value, ..., {options}]``.
"""

from __future__ import annotations

from typing import Any

from facts import job_signals as sig
from stacks.config import StackConfig
from stacks.watched import CI, WatchedJob

GRID_COLUMNS = 24  # the dashboard grid's width
HALF = GRID_COLUMNS // 2
GRAPH_HEIGHT = 6
HEADER_HEIGHT = 3
PERIOD = 60  # seconds per point on the graphs (Container Insights' collection interval)
# A graph lists a job's pods one by one up to this many.
DASHBOARD_PODS_MAX = 100


def job_dashboard_name(cluster: str, job: str) -> str:
    """Dashboard names take letters, digits, '-' and '_' (PutDashboard); cluster and job names are such."""
    return f"{cluster}-job-{job}"


def _pod_lines(cluster: str, job: WatchedJob, metric: str, label: str = "") -> list[list[Any]]:
    return [
        [CI, metric, "ClusterName", cluster, "Namespace", job.namespace, "PodName", pod, {"label": f"{pod}{label}"}]
        for pod in job.pods[:DASHBOARD_PODS_MAX]
    ]


def _signal_line(cluster: str, job: WatchedJob, signal: str, stat: str) -> list[Any]:
    return [
        sig.metric_namespace(cluster),
        signal,
        "job",
        job.name,
        "namespace",
        job.namespace,
        {"stat": stat, "label": signal},
    ]


def _graph(title: str, region: str, metrics: list[list[Any]], stat: str = "Average") -> dict[str, Any]:
    return {
        "type": "metric",
        "properties": {
            "title": title,
            "region": region,
            "view": "timeSeries",
            "stat": stat,
            "period": PERIOD,
            "metrics": metrics,
        },
    }


def _header(cfg: StackConfig, job: WatchedJob, alarms: list[str]) -> dict[str, Any]:
    text = (
        f"## Job {job.name}\n"
        f"Namespace `{job.namespace}`, node group `{job.group}`, {len(job.pods)} worker pod(s)"
        + (", EFA" if job.efa else "")
        + f". Alarms: {', '.join(f'`{a}`' for a in alarms) or 'none'} (docs/alerts.md says what each means)."
    )
    return {"type": "text", "properties": {"markdown": text}}


def job_widgets(cfg: StackConfig, job: WatchedJob) -> list[dict[str, Any]]:
    """The graphs of a job's dashboard, in reading order (placed by ``layout``)."""
    c, r = cfg.cluster_name, cfg.region
    graphs = [
        _graph("GPU utilization per pod (%)", r, _pod_lines(c, job, "pod_gpu_utilization")),
        _graph("GPU memory utilization per pod (%)", r, _pod_lines(c, job, "pod_gpu_memory_utilization")),
    ]
    if job.efa:
        efa = _pod_lines(c, job, "pod_efa_rx_bytes", " rx") + _pod_lines(c, job, "pod_efa_tx_bytes", " tx")
        graphs.append(_graph("EFA traffic per pod (bytes per minute)", r, efa, stat="Sum"))
    steps = [
        _signal_line(cfg.cluster_name, job, sig.STEP_TIME, "Average"),
        _signal_line(cfg.cluster_name, job, sig.STEP_TIME, "Maximum"),
    ]
    graphs.append(_graph("Step time (s): average and slowest rank", r, steps))
    graphs.append(
        _graph("Container restarts per pod", r, _pod_lines(c, job, "pod_number_of_container_restarts"), "Maximum")
    )
    signals = [
        _signal_line(cfg.cluster_name, job, s, "Maximum") for s in (sig.FABRIC_FALLBACK, sig.SLOW_NODE, sig.JOB_STALLED)
    ]
    graphs.append(_graph("Findings: fabric fallback, slow node (factor), stalled", r, signals, stat="Maximum"))
    return graphs


def layout(header: dict[str, Any], graphs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The header across the top, then the graphs two to a row."""
    out = [{**header, "x": 0, "y": 0, "width": GRID_COLUMNS, "height": HEADER_HEIGHT}]
    for i, g in enumerate(graphs):
        out.append(
            {
                **g,
                "x": HALF * (i % 2),
                "y": HEADER_HEIGHT + GRAPH_HEIGHT * (i // 2),
                "width": HALF,
                "height": GRAPH_HEIGHT,
            }
        )
    return out


def job_dashboard(cfg: StackConfig, job: WatchedJob, alarms: list[str]) -> dict[str, Any]:
    """The dashboard body of ``job``."""
    return {"widgets": layout(_header(cfg, job, alarms), job_widgets(cfg, job))}


def queues_dashboard_name(cluster: str) -> str:
    return f"{cluster}-queues"


def _queue_lines(cfg: StackConfig, signal: str, cluster_queues: list[str]) -> list[list[Any]]:
    ns = sig.metric_namespace(cfg.cluster_name)
    return [[ns, signal, sig.QUEUE_DIMENSION, cq, {"label": cq}] for cq in cluster_queues]


def queues_dashboard(cfg: StackConfig, cluster_queues: list[str], alarms: list[str]) -> dict[str, Any]:
    """The queues' dashboard: per ClusterQueue the pending and admitted workloads and the oldest
    pending one's wait (the queue reporter's lines, facts/job_signals.py)."""
    r = cfg.region
    text = (
        f"## Queues of {cfg.cluster_name}\n"
        f"ClusterQueues: {', '.join(f'`{cq}`' for cq in cluster_queues)}. Alarms: "
        f"{', '.join(f'`{a}`' for a in alarms) or 'none (alerts.queueWaitMinutes unset)'} (docs/alerts.md)."
    )
    graphs = [
        _graph(
            "Pending workloads per ClusterQueue", r, _queue_lines(cfg, sig.QUEUE_PENDING, cluster_queues), "Maximum"
        ),
        _graph(
            "Admitted workloads per ClusterQueue", r, _queue_lines(cfg, sig.QUEUE_ADMITTED, cluster_queues), "Maximum"
        ),
        _graph(
            "Oldest pending wait (s) per ClusterQueue", r, _queue_lines(cfg, sig.QUEUE_WAIT, cluster_queues), "Maximum"
        ),
    ]
    return {"widgets": layout({"type": "text", "properties": {"markdown": text}}, graphs)}
