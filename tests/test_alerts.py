"""Alerts from the job spec (stacks/alerts.py, components/alerts.py): the metric filters against the
records Container Insights' Fluent Bit sends (tests/data/cloudwatch, with their sources), each
alarm evaluated with CloudWatch's alarm semantics on synthetic series (tests/cloudwatch_eval.py),
the config section's refusals, the plan's resources and the cost lines.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from components.alerts import AlarmSpec
from facts import job_signals as sig
from stacks import alerts, cost
from stacks.config import ConfigError
from tests import cloudwatch_eval as cw
from tests.helpers import NS, ROOT, elastic_job, load_values, minimal_values, run_stack

RECORDS = json.loads((ROOT / "tests" / "data" / "cloudwatch" / "log_records.json").read_text())
PERIODS = 12


def values(**over: Any) -> dict[str, Any]:
    """One p4d group (EFA), a guarded 2-node elastic job named as in the recorded lines (bert), a
    1-node NCCL test, alerts on."""
    jobs = [
        elastic_job(name="bert", minNodes=1, maxNodes=2, progress={"logPattern": "step", "intervalSeconds": 600}),
        {"name": "single", "kind": "nccl-test", "nodeGroup": "p4d", "nodes": 1},
    ]
    sections: dict[str, Any] = {"jobs": jobs, "alerts": {"enabled": True}}
    sections.update(over)
    return minimal_values(**sections)


@pytest.fixture(scope="module")
def cfg():
    return load_values(values())


@pytest.fixture(scope="module")
def plan(cfg):
    return alerts.plan(cfg)


def _alarm(plan: alerts.AlertPlan, suffix: str) -> AlarmSpec:
    return next(a for a in plan.alarms if a.name.endswith(suffix))


# ---------------------------------------------------------------------------------------------
# Metric filters against the records
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signal", sig.SIGNALS)
def test_each_signal_filter_turns_its_line_into_the_alarms_metric(cfg, plan, signal):
    f = next(f for f in plan.filters if f.metric == signal)
    record = RECORDS["application"][signal]
    value, dims = cw.metric_event(f, record)
    assert value == record["log_processed"]["value"]
    assert dims == {"job": "bert", "namespace": "training"}
    # The metric the filter publishes is the one the job's alarm (if any) reads.
    for a in plan.alarms:
        for m in a.metrics:
            if m.metric == signal:
                assert (m.namespace, m.dimensions) == (f.namespace, dims)


@pytest.mark.parametrize("other", ["plain_line_naming_a_signal", "json_line_of_another_program"])
def test_no_signal_filter_matches_other_lines(plan, other):
    record = RECORDS["application"][other]
    assert [f.name for f in plan.filters if cw.metric_event(f, record)] == []


def test_each_signal_filter_matches_its_own_signal_only(plan):
    for f in (f for f in plan.filters if f.metric in sig.SIGNALS):
        matched = {name for name, r in RECORDS["application"].items() if cw.pattern_matches(f.pattern, r)}
        assert matched == {f.metric}


def test_a_pattern_on_the_raw_log_string_would_match_nothing():
    """Why the filters read log_processed: the raw line under "log" is a string, no JSON object."""
    raw = f'{{ $.log.{sig.SIGNAL_KEY} = "{sig.SLOW_NODE}" }}'
    assert not cw.pattern_matches(raw, RECORDS["application"][sig.SLOW_NODE])


def test_the_xid_filter_counts_xid_lines_and_nothing_else(plan):
    f = next(f for f in plan.filters if f.metric == alerts.XID_METRIC)
    hits = {name for name, r in RECORDS["host"].items() if cw.metric_event(f, r)}
    assert hits == {"xid_79", "xid_48_ecc"}
    assert not any(cw.pattern_matches(f.pattern, r) for r in RECORDS["application"].values())


def _written_and_read(result) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(namespace, metric) the plan's metric filters write, and the ones its alarms read."""
    written = {
        (r.inputs["metricTransformation"]["namespace"], r.inputs["metricTransformation"]["name"])
        for r in result.records
        if r.type == "aws:cloudwatch/logMetricFilter:LogMetricFilter"
    }
    read: set[tuple[str, str]] = set()
    for r in (r for r in result.records if r.type == "aws:cloudwatch/metricAlarm:MetricAlarm"):
        if r.inputs.get("namespace"):
            read.add((r.inputs["namespace"], r.inputs["metricName"]))
        for q in r.inputs.get("metricQueries") or []:
            if q.get("metric"):
                read.add((q["metric"]["namespace"], q["metric"]["metricName"]))
    return written, read


def _crossed(a, b) -> set[tuple[str, str]]:
    """What an alarm of either plan reads that the other's filters write."""
    (wa, ra), (wb, rb) = _written_and_read(a), _written_and_read(b)
    return (ra & wb) | (rb & wa)


def _stack_run(stack: str):
    from stacks.config.stackfile import read_stack_config

    _, committed = read_stack_config(stack, ROOT)
    return run_stack(committed, stack)


@pytest.fixture(scope="module")
def dev_and_prod():
    return _stack_run("dev"), _stack_run("prod")


def test_dev_and_prod_alarms_read_only_their_own_clusters_signal_metrics(dev_and_prod):
    """Two stacks in one account and region: no alarm of one reads a metric the other's filters
    write, though each stack's own alarms do read its filters' metrics."""
    dev, prod = dev_and_prod
    assert _crossed(dev, prod) == set()
    for result in (dev, prod):
        written, read = _written_and_read(result)
        assert read & written, "the stack's signal alarms read its own filters' metrics"


def test_one_shared_signal_namespace_would_cross_the_stacks(monkeypatch):
    """The rule fires: with one namespace for every cluster (the old design), both stacks' filters
    write the metrics both stacks' alarms read."""
    monkeypatch.setattr(sig, "metric_namespace", lambda cluster: sig.METRIC_NAMESPACE)
    one = run_stack(values(), "dev")
    other = run_stack(values(), "prod")
    assert _crossed(one, other)


# ---------------------------------------------------------------------------------------------
# Alarms on synthetic series
# ---------------------------------------------------------------------------------------------


def series(cfg, *, gpu: float | None, efa: float | None, signals: dict[str, list[float | None]] | None = None):
    """Every metric the alarms read, per period: the job bert's pods at ``gpu`` % and ``efa`` bytes
    per period on each EFA counter; each named signal's own values; None: no data."""
    out: dict[Any, list[float | None]] = {}
    job = next(j for j in alerts.watched_jobs(cfg) if j.name == "bert")
    for pod in job.pods:
        dims = {"ClusterName": cfg.cluster_name, "Namespace": job.namespace, "PodName": pod}
        out[cw.key(alerts.CI, "pod_gpu_utilization", dims)] = [gpu] * PERIODS
        for m in ("pod_efa_rx_bytes", "pod_efa_tx_bytes"):
            out[cw.key(alerts.CI, m, dims)] = [efa] * PERIODS
    for name, vals in (signals or {}).items():
        out[cw.key(sig.metric_namespace(cfg.cluster_name), name, {"job": "bert", "namespace": job.namespace})] = vals
    return out


def _at(period: int, value: float) -> list[float | None]:
    return [value if t == period else None for t in range(PERIODS)]


SCENARIOS = {
    "healthy run": (
        {"gpu": 92.0, "efa": 4.0e9, "signals": {sig.STEP_TIME: [0.41] * PERIODS, sig.FABRIC_OK: _at(0, 1)}},
        set(),
    ),
    "socket fallback": (
        {"gpu": 61.0, "efa": 0.0, "signals": {sig.FABRIC_FALLBACK: _at(1, 1), sig.STEP_TIME: [2.9] * PERIODS}},
        {"efa-silent", "fabric-fallback"},
    ),
    "idle admitted job": ({"gpu": 0.0, "efa": 0.0}, {"gpu-idle", "efa-silent"}),
    "straggler": (
        {"gpu": 88.0, "efa": 3.0e9, "signals": {sig.SLOW_NODE: _at(4, 1), sig.STEP_TIME: [0.8] * PERIODS}},
        {"slow-node"},
    ),
    # A hung job also holds idle GPUs: both fire.
    "stalled": ({"gpu": 0.5, "efa": 1.0e6, "signals": {sig.JOB_STALLED: _at(9, 1)}}, {"stalled", "gpu-idle"}),
    "not running": ({"gpu": None, "efa": None}, set()),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_which_alarms_fire(cfg, plan, scenario):
    spec, expected = SCENARIOS[scenario]
    s = series(cfg, **spec)
    prefix = f"{cfg.cluster_name}-bert-"
    fired = {a.name.removeprefix(prefix) for a in plan.alarms if a.name.startswith(prefix) and cw.fired(a, s, PERIODS)}
    assert fired == expected


def test_the_idle_alarm_waits_its_whole_window(cfg, plan):
    a = _alarm(plan, "bert-gpu-idle")
    window = cfg.alerts.idle_minutes // 5
    idle_then_busy = {k: [0.0] * (window - 1) + [90.0] * (PERIODS - window + 1) for k in series(cfg, gpu=0, efa=0)}
    assert not cw.fired(a, idle_then_busy, PERIODS)
    assert cw.evaluate(a, series(cfg, gpu=0.0, efa=0.0), PERIODS).index("ALARM") == window - 1


def test_the_xid_alarm_fires_on_one_xid(cfg, plan):
    a = _alarm(plan, "-gpu-xid")
    m = a.metrics[0]
    assert cw.fired(a, {cw.key(m.namespace, m.metric, m.dimensions): _at(2, 1)}, PERIODS)
    assert not cw.fired(a, {}, PERIODS)


def test_a_single_node_job_gets_no_fabric_or_slow_node_alarm(cfg, plan):
    names = {a.name for a in plan.alarms if "-single-" in a.name}
    assert names == {f"{cfg.cluster_name}-single-gpu-idle"}


def test_no_alarm_reads_more_metrics_than_cloudwatch_takes(plan):
    assert all(len(a.metrics) <= alerts.ALARM_METRICS_MAX for a in plan.alarms)
    big = load_values(values(jobs=[elastic_job(name="wide", minNodes=1, maxNodes=2)]))
    wide = dataclasses.replace(alerts.watched_jobs(big)[0], pods=tuple(f"wide-worker-{i}" for i in range(64)))
    assert len(alerts.efa_silent_alarm(big, wide).metrics) == alerts.ALARM_METRICS_MAX
    assert len(alerts.idle_alarm(big, wide).metrics) == alerts.ALARM_METRICS_MAX


def test_the_evaluator_tells_missing_from_breaching(plan):
    """The evaluator's own rule, broken once: the same gap read as breaching fires the idle alarm."""
    a = _alarm(plan, "bert-gpu-idle")
    gap: dict[Any, list[float | None]] = {}
    assert not cw.fired(a, gap, PERIODS)
    assert cw.fired(dataclasses.replace(a, treat_missing_data="breaching"), gap, PERIODS)
    assert cw.evaluate(dataclasses.replace(a, treat_missing_data="missing"), gap, PERIODS)[-1] == "INSUFFICIENT_DATA"


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------

REFUSED = [
    ({"alerts": {"enabled": True, "snsTopicArn": "arn:aws:sns:us-west-2:1234:x"}}, "alerts.snsTopicArn"),
    ({"alerts": {"enabled": True, "snsTopicArn": "arn:aws:sns:us-west-2:123456789012:a.fifo"}}, "alerts.snsTopicArn"),
    ({"alerts": {"enabled": True, "idleMinutes": 7}}, "alerts.idleMinutes"),
    ({"alerts": {"enabled": True, "idleMinutes": 2880}}, "alerts.idleMinutes"),
    ({"alerts": {"enabled": True, "idleGpuPercent": 0}}, "alerts.idleGpuPercent"),
    ({"alerts": {"enabled": True}, "monitoring": {"enabled": False}}, "alerts.enabled"),
]


@pytest.mark.parametrize("over,key", REFUSED, ids=[f"{k}-{i}" for i, (_, k) in enumerate(REFUSED)])
def test_bad_alert_settings_are_refused_naming_the_key(over, key):
    with pytest.raises(ConfigError) as err:
        load_values(values(**over))
    assert f"{NS}:{key}" in str(err.value)


def test_a_given_topic_is_used_and_none_is_created():
    arn = "arn:aws:sns:us-west-2:123456789012:oncall"
    result = run_stack(values(alerts={"enabled": True, "snsTopicArn": arn}))
    assert not [r for r in result.records if r.type == "aws:sns/topic:Topic"]
    alarms = [r for r in result.records if r.type == "aws:cloudwatch/metricAlarm:MetricAlarm"]
    assert alarms and all(r.inputs["alarmActions"] == [arn] for r in alarms)


def test_alerts_off_registers_nothing_and_costs_nothing():
    cfg = load_values(values(alerts={"enabled": False}))
    assert alerts.plan(cfg) == alerts.AlertPlan([], [], {})
    assert not [line for line in cost.estimate(cfg).lines if "CloudWatch" in line.what]


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


def test_the_plan_registers_what_the_alert_plan_says(cfg, plan):
    result = run_stack(values())
    by_type: dict[str, set[str]] = {}
    for r in result.records:
        by_type.setdefault(r.type, set()).add(r.inputs.get("name") or r.inputs.get("dashboardName") or "")
    assert by_type["aws:cloudwatch/metricAlarm:MetricAlarm"] == {a.name for a in plan.alarms}
    assert by_type["aws:cloudwatch/logMetricFilter:LogMetricFilter"] == {f.name for f in plan.filters}
    assert f"{cfg.cluster_name}-job-bert" in by_type["aws:cloudwatch/dashboard:Dashboard"]
    filters = [r for r in result.records if r.type == "aws:cloudwatch/logMetricFilter:LogMetricFilter"]
    # A filter needs its log group: each waits for the add-on's log groups.
    assert all({d["name"] for d in r.depends_on} >= {"monitoring-application", "monitoring-host"} for r in filters)
    assert result.outputs["jobDashboards"] == {n: alerts.dashboard_url(cfg.region, n) for n in sorted(plan.dashboards)}


def test_the_cost_table_prices_alarm_metrics_and_dashboards(cfg, plan):
    lines = {line.what: line for line in cost.estimate(cfg).lines if "CloudWatch" in line.what}
    fixed = next(line for what, line in lines.items() if what.startswith("CloudWatch alarms"))
    n_metrics = sum(len(a.metrics) for a in plan.alarms)
    assert f"reading {n_metrics} metrics" in fixed.what
    assert fixed.idle == fixed.maximum == round((n_metrics * 0.10 + len(plan.dashboards) * 3.00) / 730, 4)
    signals = next(line for what, line in lines.items() if what.startswith("CloudWatch metrics"))
    queue_metrics = len(alerts.cluster_queues(cfg)) * len(sig.QUEUE_SIGNALS)  # published even when idle
    assert signals.idle == round(queue_metrics * 0.30 / 730, 4)
    assert signals.maximum == round(alerts.filter_metrics(cfg) * 0.30 / 730, 4)
    assert alerts.cluster_queues(cfg), "queues are on by default"
    assert alerts.filter_metrics(cfg) == 2 * len(sig.SIGNALS) + 1 + len(alerts.cluster_queues(cfg)) * len(
        sig.QUEUE_SIGNALS
    )


def test_the_watched_pods_are_the_workers_the_job_kinds_name(cfg):
    """The pods the alarms read (PodName) are the worker pods the kinds' own hostnames name."""
    specs = {j.name: j for j in cfg.jobs}
    for job in alerts.watched_jobs(cfg):
        workers = {h for h in specs[job.name].pod_hostnames() if "-worker-" in h}
        assert workers and workers <= set(job.pods), job.name


def test_the_aws_model_check_reads_an_alarms_dimensions_as_name_value_items():
    """The provider sends a dimensions map as Dimension {Name, Value} items: a name over the
    model's 255 characters is refused, in a plain alarm and in a metric query alike."""
    from infra.api_checks import aws_model

    typ = "aws:cloudwatch/metricAlarm:MetricAlarm"
    base = {
        "name": "a",
        "comparisonOperator": "GreaterThanThreshold",
        "evaluationPeriods": 1,
        "threshold": 1,
        "namespace": "GpuTraining/Jobs",
        "metricName": "slow_node",
        "period": 60,
        "statistic": "Maximum",
    }
    assert aws_model.check_records([(typ, "ok", {**base, "dimensions": {"job": "bert"}})]).failures == []
    long = {"x" * 256: "bert"}
    plain = aws_model.check_records([(typ, "plain", {**base, "dimensions": long})]).failures
    query = {
        "id": "m0",
        "metric": {"metricName": "m", "namespace": "n", "period": 60, "stat": "Sum", "dimensions": long},
    }
    nested = {k: v for k, v in base.items() if k not in ("namespace", "metricName", "period", "statistic")}
    queried = aws_model.check_records([(typ, "query", {**nested, "metricQueries": [query]})]).failures
    assert [str(f) for f in plain] and all("Name" in str(f) for f in plain)
    assert [str(f) for f in queried] and all("Name" in str(f) for f in queried)
