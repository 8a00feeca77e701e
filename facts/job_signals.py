"""What a running job says about itself, in one shape that every layer reads.

The in-pod checks (the fabric check, the progress guard's hang and slow-node findings, step times)
print one JSON object per line to stdout, with the key ``SIGNAL_KEY``. Container Insights' Fluent Bit
ships container stdout to the ``/aws/containerinsights/<cluster>/application`` log group (the
CloudWatch observability add-on the stack installs; its log record carries the line under ``log``),
where CloudWatch Logs metric filters turn each signal into a metric in ``metric_namespace(cluster)``
with the dimensions below, and alarms and dashboards read those metrics. Nothing else is needed in the pod: no
AWS credentials, no agent.

A line looks like::

    {"gputraining_signal": "slow_node", "job": "bert", "namespace": "ml", "node": "ip-10-0-1-2...",
     "value": 1.8, "reason": "median step 1.8x the job's for 3 windows"}
"""

from __future__ import annotations

SIGNAL_KEY = "gputraining_signal"
METRIC_NAMESPACE = "GpuTraining/Jobs"  # the prefix of every cluster's signal namespace (metric_namespace)
# Dimensions every signal metric carries (a metric filter may map up to three: CloudWatch Logs
# PutMetricFilter's metricTransformations.dimensions).
DIMENSIONS = ("job", "namespace")

# The signals, name -> what its value means.
FABRIC_FALLBACK = "fabric_fallback"  # 1 when a node's NCCL did not use EFA (or its EFA counters stood still)
FABRIC_OK = "fabric_ok"  # 1 when a node proved NCCL on EFA with moving counters
SLOW_NODE = "slow_node"  # the node's median step time divided by the job's median
STEP_TIME = "step_time"  # seconds per step, one line per rank per window
JOB_STALLED = "job_stalled"  # 1 when the progress guard found no progress within the job's timeout
SIGNALS = (FABRIC_FALLBACK, FABRIC_OK, SLOW_NODE, STEP_TIME, JOB_STALLED)

# Where a shipped line's fields are in its CloudWatch Logs record. Container Insights' Fluent Bit
# (aws-observability/helm-charts, chart amazon-cloudwatch-observability-6.3.0, values.yaml,
# application-log.conf: the kubernetes filter with Merge_Log On and Merge_Log_Key log_processed)
# parses a container line that is one JSON map and puts its keys under this key, beside the raw
# line in "log" and the pod's metadata in "kubernetes". A metric filter reads
# ``$.log_processed.<key>``; a line that is not one JSON map has no such key and matches nothing.
RECORD_FIELD = "log_processed"


def metric_namespace(cluster: str) -> str:
    """The CloudWatch namespace of ``cluster``'s signal metrics, one per cluster.

    Two stacks in one account and region may run the same job in the same namespace; with a shared
    namespace and only job/namespace dimensions their metrics would be one and each stack's alarms
    would fire on the other's lines. The line cannot say its cluster (a pod does not know it), and a
    filter's dimensions can only be the event's own fields (CloudWatch Logs API reference,
    MetricTransformation.dimensions: "The fields to use as dimensions for the metric", at most
    three per filter), but each cluster has its own log group and filters, so the filter's
    namespace is where the cluster goes.
    """
    return f"{METRIC_NAMESPACE}/{cluster}"


# The queue signals: the queue reporter (components/scripts/queue_reporter.py) prints, every minute,
# one line of each per Kueue ClusterQueue, with the ClusterQueue's name under QUEUE_DIMENSION (not
# job/namespace: a queue is the cluster's), into the same per-cluster namespace.
QUEUE_PENDING = "queue_pending"  # workloads waiting for quota in the ClusterQueue
QUEUE_ADMITTED = "queue_admitted"  # workloads admitted and not finished
QUEUE_WAIT = "queue_wait"  # seconds the oldest pending workload has waited (0: none pending)
QUEUE_SIGNALS = (QUEUE_PENDING, QUEUE_ADMITTED, QUEUE_WAIT)
QUEUE_DIMENSION = "cluster_queue"
