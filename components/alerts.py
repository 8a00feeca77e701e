"""Alerts: the CloudWatch Logs metric filters that turn the jobs' signal lines into metrics, the
alarms on them and on Container Insights' metrics, the SNS topic they notify (or the one given),
and the per-job dashboards. What to watch is decided from the stack config (``stacks/alerts.py``);
this component only registers it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class MetricStat:
    """One metric an alarm reads (a MetricDataQuery with a MetricStat)."""

    id: str  # the query's id, how the expression names it (lower-case first letter)
    namespace: str  # CloudWatch namespace
    metric: str  # metric name
    dimensions: dict[str, str]  # the metric's dimensions, all of them (CloudWatch matches them exactly)
    stat: str  # statistic over each period: Average, Maximum, Sum, SampleCount, Minimum


@dataclass(frozen=True)
class AlarmSpec:
    """A CloudWatch metric alarm: one metric, or an expression over up to 10."""

    name: str  # alarm name, unique in the account and region
    description: str  # what fired and what to do (shown in the notification)
    metrics: tuple[MetricStat, ...]  # one: a plain metric alarm; more: read by ``expression``
    comparison: str  # ComparisonOperator
    threshold: float  # the value compared with
    period: int  # seconds per datapoint
    evaluation_periods: int  # the N most recent periods evaluated
    datapoints_to_alarm: int  # of those, how many must breach (M of N)
    treat_missing_data: str  # missing, notBreaching, breaching or ignore
    expression: str | None = None  # a metric math expression over the metrics' ids (None: the one metric)


@dataclass(frozen=True)
class MetricFilterSpec:
    """A CloudWatch Logs metric filter: matching log events become one metric."""

    name: str  # filter name, unique in its log group
    log_group: str  # the log group it reads (one of the add-on's)
    pattern: str  # CloudWatch Logs filter pattern
    namespace: str  # the metric's namespace
    metric: str  # the metric's name
    value: str  # the value published per matching event: a number or a $.selector
    dimensions: dict[str, str] = field(default_factory=dict)  # dimension -> $.selector (at most 3)


@dataclass
class AlertsArgs:
    topic_arn: str | None  # the SNS topic the alarms notify; None: create ``topic_name``
    topic_name: str  # name of the topic the stack creates when none is given
    filters: list[MetricFilterSpec]  # metric filters on the add-on's log groups
    alarms: list[AlarmSpec]  # the alarms
    dashboards: dict[str, dict]  # dashboard name -> its body
    log_groups: list[pulumi.Resource] = field(default_factory=list)  # the log groups the filters attach to
    tags: dict[str, str] = field(default_factory=dict)  # tags on the topic and the alarms


def _metric_query(m: MetricStat, period: int, returned: bool) -> aws.cloudwatch.MetricAlarmMetricQueryArgs:
    return aws.cloudwatch.MetricAlarmMetricQueryArgs(
        id=m.id,
        return_data=returned,
        metric=aws.cloudwatch.MetricAlarmMetricQueryMetricArgs(
            namespace=m.namespace, metric_name=m.metric, dimensions=m.dimensions, stat=m.stat, period=period
        ),
    )


def alarm_inputs(a: AlarmSpec) -> dict:
    """The MetricAlarm inputs of ``a`` but its actions and tags."""
    common = {
        "name": a.name,
        "alarm_description": a.description,
        "comparison_operator": a.comparison,
        "threshold": a.threshold,
        "evaluation_periods": a.evaluation_periods,
        "datapoints_to_alarm": a.datapoints_to_alarm,
        "treat_missing_data": a.treat_missing_data,
    }
    if a.expression is None:
        (m,) = a.metrics
        return {
            **common,
            "namespace": m.namespace,
            "metric_name": m.metric,
            "dimensions": m.dimensions,
            "statistic": m.stat,
            "period": a.period,
        }
    queries = [_metric_query(m, a.period, False) for m in a.metrics]
    queries.append(
        aws.cloudwatch.MetricAlarmMetricQueryArgs(id="e0", expression=a.expression, label=a.name, return_data=True)
    )
    return {**common, "metric_queries": queries}


class Alerts(pulumi.ComponentResource):
    def __init__(self, name: str, args: AlertsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:Alerts", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        if args.topic_arn is None:
            # Not encrypted: CloudWatch cannot publish to a topic under the AWS managed key
            # (alias/aws/sns), and a notification says which alarm fired, nothing secret.
            topic = aws.sns.Topic(f"{name}-topic", name=args.topic_name, tags=tags, opts=child)
            self.topic_arn: pulumi.Input[str] = topic.arn
        else:
            self.topic_arn = args.topic_arn
        after_groups = pulumi.ResourceOptions(parent=self, depends_on=list(args.log_groups))
        for f in args.filters:
            aws.cloudwatch.LogMetricFilter(
                f"{name}-{f.name}",
                name=f.name,
                log_group_name=f.log_group,
                pattern=f.pattern,
                metric_transformation=aws.cloudwatch.LogMetricFilterMetricTransformationArgs(
                    name=f.metric, namespace=f.namespace, value=f.value, dimensions=f.dimensions or None
                ),
                opts=after_groups,
            )
        for a in args.alarms:
            aws.cloudwatch.MetricAlarm(
                f"{name}-{a.name}",
                **alarm_inputs(a),
                alarm_actions=[self.topic_arn],
                ok_actions=[self.topic_arn],
                tags=tags,
                opts=child,
            )
        for dashboard, body in args.dashboards.items():
            aws.cloudwatch.Dashboard(
                f"{name}-{dashboard}", dashboard_name=dashboard, dashboard_body=json.dumps(body), opts=child
            )
        self.register_outputs({"topicArn": self.topic_arn, "dashboards": sorted(args.dashboards)})
