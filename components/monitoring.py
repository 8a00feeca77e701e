"""Monitoring: CloudWatch Container Insights on every node, GPU metrics (through DCGM) and EFA
metrics included, with the agent's own IAM role through Pod Identity, log retention, and a
dashboard of per-node GPU utilization, GPU memory and EFA traffic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from components.iam import pod_identity_role

NAMESPACE = "ContainerInsights"
# Container Insights log groups; owning them sets retention and lets `pulumi destroy` remove them.
LOG_GROUPS = ("application", "dataplane", "host", "performance")
NODE_DIMENSIONS = "{ContainerInsights,ClusterName,InstanceId,NodeName}"
DASHBOARD_METRICS = (
    ("GPU utilization per node (%)", ("node_gpu_utilization",)),
    ("GPU memory utilization per node (%)", ("node_gpu_memory_utilization",)),
    ("EFA traffic per node (bytes/s)", ("node_efa_rx_bytes", "node_efa_tx_bytes")),
    ("EFA RDMA traffic per node (bytes/s)", ("node_efa_rdma_read_bytes", "node_efa_rdma_write_bytes")),
)


@dataclass
class MonitoringArgs:
    cluster_name: str  # EKS cluster that gets the add-on; also names the log groups and the dashboard
    region: str  # AWS region of the dashboard's metrics
    addon_version: str  # version of the amazon-cloudwatch-observability managed add-on
    log_retention_days: int = 30  # retention of the Container Insights log groups, in days
    dashboard: bool = True  # create the <cluster_name>-gpu CloudWatch dashboard (GPU and EFA per node)
    cluster_ready: list[pulumi.Resource] = field(
        default_factory=list
    )  # what the add-on waits for (cluster, Pod Identity agent, nodes, CoreDNS)
    tags: dict[str, str] = field(default_factory=dict)  # tags on the log groups, the agent's IAM role and the add-on


def dashboard_body(cluster_name: str, region: str) -> dict:
    widgets = []
    for i, (title, metrics) in enumerate(DASHBOARD_METRICS):
        exprs = [
            {
                "expression": f'SEARCH(\'{NODE_DIMENSIONS} MetricName="{m}" ClusterName="{cluster_name}"\', '
                "'Average', 60)",
                "id": f"m{j}",
                "label": m,
            }
            for j, m in enumerate(metrics)
        ]
        widgets.append(
            {
                "type": "metric",
                "x": 12 * (i % 2),
                "y": 6 * (i // 2),
                "width": 12,
                "height": 6,
                "properties": {
                    "title": title,
                    "region": region,
                    "view": "timeSeries",
                    "stat": "Average",
                    "period": 60,
                    "metrics": [[e] for e in exprs],
                },
            }
        )
    return {"widgets": widgets}


class Monitoring(pulumi.ComponentResource):
    SERVICE_ACCOUNT = "cloudwatch-agent"

    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:Monitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        self.log_groups = {
            kind: aws.cloudwatch.LogGroup(
                f"{name}-{kind}",
                name=f"/aws/containerinsights/{args.cluster_name}/{kind}",
                retention_in_days=args.log_retention_days,
                tags=tags,
                opts=child,
            )
            for kind in LOG_GROUPS
        }
        role = pod_identity_role(
            f"{name}-agent",
            description=f"CloudWatch agent of {args.cluster_name} (Pod Identity)",
            managed_policies=("CloudWatchAgentServerPolicy", "AWSXrayWriteOnlyAccess"),
            tags=tags,
            parent=self,
        )
        self.addon = aws.eks.Addon(
            f"{name}-cloudwatch",
            cluster_name=args.cluster_name,
            addon_name="amazon-cloudwatch-observability",
            addon_version=args.addon_version,
            pod_identity_associations=[
                aws.eks.AddonPodIdentityAssociationArgs(role_arn=role.arn, service_account=self.SERVICE_ACCOUNT)
            ],
            # No configuration values: the add-on's defaults (chart 6.3.0) already put the agents and
            # the DCGM exporter on every node, tainted GPU nodes included (tolerations [{operator:
            # Exists}]), and keep the Container Insights metrics (node_gpu_*, node_efa_*) the
            # dashboard reads (otelContainerInsights.enabled: false).
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*self.log_groups.values(), *args.cluster_ready]),
        )
        self.dashboard_name: str | None = None
        if args.dashboard:
            self.dashboard_name = f"{args.cluster_name}-gpu"
            aws.cloudwatch.Dashboard(
                f"{name}-dashboard",
                dashboard_name=self.dashboard_name,
                dashboard_body=json.dumps(dashboard_body(args.cluster_name, args.region)),
                opts=child,
            )
        self.register_outputs({"dashboard": self.dashboard_name})
