"""The queues' alerts: the queue reporter (components/scripts/queue_reporter.py) run as its pod runs
it against a fake Kubernetes API, its lines through the plan's metric filters, the queue-wait alarm on
synthetic series (tests/cloudwatch_eval.py), the queues dashboard's structure, the reporter's RBAC,
objects, requests and cost, and the config key's refusals.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from components import queue_reporter as qr
from facts import allocatable
from facts import job_signals as sig
from infra.api_checks import kube_check
from stacks import alerts, cost
from stacks.config import ConfigError
from tests import cloudwatch_eval as cw
from tests.fake_kube_api import http_server
from tests.helpers import load_values, minimal_values, run_stack

API = "kueue.x-k8s.io/v1beta2"


def _stamp(seconds_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _wl(name: str, queue: str, age: float, conditions: list[dict[str, Any]] | None = None, **extra: Any) -> dict:
    wl: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "training", "creationTimestamp": _stamp(age)},
        "spec": {"queueName": queue, **extra.pop("spec", {})},
        "status": {"conditions": conditions or [], **extra},
    }
    return wl


def _cond(kind: str, status: str, ago: float) -> dict[str, Any]:
    return {"type": kind, "status": status, "lastTransitionTime": _stamp(ago), "reason": "r", "message": "m"}


def _workloads() -> list[dict[str, Any]]:
    """The workloads, their times relative to now (built when the fake API starts)."""
    return [
        _wl("new", "training", 600),  # pending 10 minutes, no condition yet
        # Evicted and back in the queue 2 minutes ago: it waits since then, not since its creation.
        _wl("requeued", "training", 7200, [_cond("QuotaReserved", "False", 120)]),
        _wl(
            "running",
            "training",
            9000,
            [_cond("QuotaReserved", "True", 8000), _cond("Admitted", "True", 8000)],
            admission={"clusterQueue": "gpu"},
        ),
        _wl("done", "training", 9000, [_cond("QuotaReserved", "True", 8000), _cond("Finished", "True", 10)]),
        _wl("stopped", "training", 99999, spec={"active": False}),  # deactivated: not waiting
        _wl("other-team", "vision", 3000),  # pending in another ClusterQueue
        _wl("lost", "nowhere", 5000),  # its LocalQueue does not exist: counted nowhere
    ]


LOCAL_QUEUES = [
    {"metadata": {"namespace": "training", "name": "training"}, "spec": {"clusterQueue": "gpu"}},
    {"metadata": {"namespace": "training", "name": "vision"}, "spec": {"clusterQueue": "vision"}},
]
CLUSTER_QUEUES = [{"metadata": {"name": "gpu"}}, {"metadata": {"name": "vision"}}, {"metadata": {"name": "idle"}}]


class FakeApi:
    """Kueue's three lists; anything else is 404, and every request is recorded."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []
        self.lists = {
            f"/apis/{API}/workloads": _workloads(),
            f"/apis/{API}/localqueues": LOCAL_QUEUES,
            f"/apis/{API}/clusterqueues": CLUSTER_QUEUES,
        }


@pytest.fixture
def fake_api() -> Iterator[tuple[FakeApi, str]]:
    api = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            api.requests.append(("GET", self.path))
            items = api.lists.get(self.path)
            body = json.dumps({"items": items} if items is not None else {"kind": "Status", "code": 404}).encode()
            self.send_response(200 if items is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Handler) as url:
        yield api, url


def _run(url: str, tmp_path) -> subprocess.CompletedProcess[str]:
    (tmp_path / "token").write_text("t0ken\n")
    pod = qr.pod_spec(qr.QueueReporterArgs("python", API, sig.SIGNAL_KEY, {}))
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"]}
    env |= {"QUEUE_REPORTER_API": url, "QUEUE_REPORTER_SERVICE_ACCOUNT": str(tmp_path), "QUEUE_REPORTER_ROUNDS": "1"}
    return subprocess.run(
        [sys.executable, str(qr.SCRIPT)],
        env={**env, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_reporter_counts_each_cluster_queue_from_the_workloads(fake_api, tmp_path):
    api, url = fake_api
    done = _run(url, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    got = {(x[sig.QUEUE_DIMENSION], x[sig.SIGNAL_KEY]): x["value"] for x in lines}
    assert {k: v for k, v in got.items() if k[1] != sig.QUEUE_WAIT} == {
        ("gpu", sig.QUEUE_PENDING): 2,
        ("gpu", sig.QUEUE_ADMITTED): 1,
        ("vision", sig.QUEUE_PENDING): 1,
        ("vision", sig.QUEUE_ADMITTED): 0,
        ("idle", sig.QUEUE_PENDING): 0,
        ("idle", sig.QUEUE_ADMITTED): 0,
    }
    # The oldest pending one's wait: "new" (10 minutes), not "requeued" (created 2 hours ago,
    # waiting since its QuotaReserved=False 2 minutes ago).
    assert 600 <= got[("gpu", sig.QUEUE_WAIT)] < 600 + 120
    assert 3000 <= got[("vision", sig.QUEUE_WAIT)] < 3000 + 120
    assert got[("idle", sig.QUEUE_WAIT)] == 0
    # It only lists.
    assert {p for _, p in api.requests} == set(api.lists)


def test_the_reporter_survives_an_api_that_is_not_there_yet(fake_api, tmp_path):
    api, url = fake_api
    api.lists.clear()  # Kueue's CRDs not installed yet: 404
    done = _run(url, tmp_path)
    assert done.returncode == 0 and done.stdout == ""
    assert "HTTPError" in done.stderr


# ---------------------------------------------------------------------------------------------
# The stack's side
# ---------------------------------------------------------------------------------------------


def values(**alert_over: Any) -> dict[str, Any]:
    return minimal_values(alerts={"enabled": True, **alert_over})


@pytest.fixture(scope="module")
def cfg():
    return load_values(values(queueWaitMinutes=45))


def test_the_reporters_lines_become_the_metrics_the_wait_alarm_and_dashboard_read(cfg):
    plan = alerts.plan(cfg)
    (cq,) = alerts.cluster_queues(cfg)
    for signal in sig.QUEUE_SIGNALS:
        f = next(f for f in plan.filters if f.metric == signal)
        line = {sig.SIGNAL_KEY: signal, sig.QUEUE_DIMENSION: cq, "value": 7}
        record = {"log": json.dumps(line), sig.RECORD_FIELD: line, "kubernetes": {"namespace_name": "kube-system"}}
        event = cw.metric_event(f, record)
        assert event == (7, {sig.QUEUE_DIMENSION: cq})
        assert f.namespace == sig.metric_namespace(cfg.cluster_name)
        # No job filter takes the queue line.
        assert not [g.name for g in plan.filters if g.metric in sig.SIGNALS and cw.pattern_matches(g.pattern, record)]
    (alarm,) = [a for a in plan.alarms if a.name.endswith("-wait")]
    (m,) = alarm.metrics
    assert (m.namespace, m.metric, m.dimensions) == (f.namespace, sig.QUEUE_WAIT, {sig.QUEUE_DIMENSION: cq})
    body = plan.dashboards[f"{cfg.cluster_name}-queues"]
    assert cw.dashboard_problems(body) == []
    shown = {
        (line[1], line[3]) for w in body["widgets"] if w["type"] == "metric" for line in w["properties"]["metrics"]
    }
    assert shown == {(s, cq) for s in sig.QUEUE_SIGNALS}


@pytest.mark.parametrize(
    ("waits", "fires"),
    [
        ([0, 60, 600, 1800, 2640, 0], False),  # waited 44 minutes, then admitted
        ([0, 600, 1800, 2700, 2760, 2820], True),  # over 45 minutes
        ([None] * 6, False),  # the reporter not running: no data, no alarm
    ],
)
def test_the_wait_alarm_fires_past_the_budget_only(cfg, waits, fires):
    (alarm,) = [a for a in alerts.plan(cfg).alarms if a.name.endswith("-wait")]
    (m,) = alarm.metrics
    assert cw.fired(alarm, {cw.key(m.namespace, m.metric, m.dimensions): waits}, len(waits)) is fires


def test_no_wait_alarm_without_a_budget_and_nothing_without_queues():
    plain = alerts.plan(load_values(values()))
    assert not [a for a in plain.alarms if a.name.endswith("-wait")]
    assert [f for f in plain.filters if f.metric == sig.QUEUE_WAIT]
    off = load_values(minimal_values(alerts={"enabled": True, "queueWaitMinutes": 30}, queues={"enabled": False}))
    p = alerts.plan(off)
    assert not alerts.cluster_queues(off) and not alerts.queue_reporter_on(off)
    assert not [f for f in p.filters if f.metric in sig.QUEUE_SIGNALS] and not p.dashboards.get(
        f"{off.cluster_name}-queues"
    )


@pytest.mark.parametrize("bad", [0, -5, 10081, "soon"])
def test_a_bad_wait_budget_is_refused_naming_the_key(bad):
    with pytest.raises(ConfigError) as e:
        load_values(values(queueWaitMinutes=bad))
    msg = str(e.value)
    assert "alerts.queueWaitMinutes" in msg and str(bad) in msg, msg


@pytest.fixture(scope="module")
def stack():
    return run_stack(values(queueWaitMinutes=45))


def _objects(result, kind: str) -> list[dict[str, Any]]:
    return [o for o in result.kubernetes_objects() if o["kind"] == kind and qr.NAME in o["metadata"]["name"]]


def test_the_reporter_may_only_list_kueues_queues_and_workloads(stack):
    (role,) = _objects(stack, "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues", "clusterqueues"], "verbs": ["list"]}
    ]
    (binding,) = _objects(stack, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": qr.NAME, "namespace": "kube-system"}]


def test_the_reporters_objects_pass_the_plans_kubernetes_check(stack):
    mine = [o for o in stack.kubernetes_objects() if qr.NAME in o["metadata"].get("name", "")]
    assert {o["kind"] for o in mine} == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
    }
    report = kube_check.check(mine)
    assert report.refusals == [], report.refusals
    broken = [
        dict(o, metadata={**o["metadata"], "name": "Not_A_Name"}) if o["kind"] == "ConfigMap" else o for o in mine
    ]
    assert kube_check.check(broken).refusals, "the check refuses a bad object"


def test_the_reporter_runs_on_the_system_nodes_with_the_requests_the_facts_list(stack):
    (dep,) = _objects(stack, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gputraining/node-group": "system"}
    (c,) = pod["containers"]
    assert c["resources"]["requests"] == {
        "cpu": f"{allocatable.QUEUE_REPORTER.cpu_m}m",
        "memory": f"{allocatable.QUEUE_REPORTER.memory_mib}Mi",
    }
    (cm,) = _objects(stack, "ConfigMap")
    assert cm["data"][qr.SCRIPT.name] == qr.SCRIPT.read_text()
    assert dep["spec"]["template"]["metadata"]["annotations"]["gputraining/script-sha256"] == qr.script_digest()


def test_no_reporter_without_queues_or_alerts():
    for over in ({"queues": {"enabled": False}}, {"alerts": {"enabled": False}}):
        result = run_stack(minimal_values(**{"alerts": {"enabled": True}, **over}))
        assert not [o for o in result.kubernetes_objects() if qr.NAME in o["metadata"].get("name", "")], over


def test_the_cost_counts_the_queue_metrics_even_idle(cfg):
    line = next(x for x in cost.estimate(cfg).lines if x.what.startswith("CloudWatch metrics"))
    assert line.idle == round(len(alerts.cluster_queues(cfg)) * len(sig.QUEUE_SIGNALS) * 0.30 / 730, 4) > 0
