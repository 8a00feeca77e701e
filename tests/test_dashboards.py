"""The dashboards (stacks/dashboards.py, components/monitoring.py): every body of the committed
stacks against CloudWatch's dashboard body structure (tests/cloudwatch_eval.py, from the API
reference's "Dashboard Body Structure and Syntax"), each rule of the check broken once, and the
picture in docs/ drawn from dev's dashboard as it is now.
"""

from __future__ import annotations

import copy

import pytest

from components.monitoring import dashboard_body
from infra.dashboard_svg import job_picture
from stacks import alerts
from stacks.config import load
from stacks.config.stackfile import read_stack_config
from stacks.dashboards import GRID_COLUMNS
from tests import cloudwatch_eval as cw
from tests.helpers import ROOT


def _cfg(stack: str):
    project, values = read_stack_config(stack, ROOT)
    return load(values, project, stack)


@pytest.fixture(scope="module", params=["dev", "prod"])
def stack_dashboards(request):
    cfg = _cfg(request.param)
    return {**alerts.plan(cfg).dashboards, f"{cfg.cluster_name}-gpu": dashboard_body(cfg.cluster_name, cfg.region)}


def test_every_dashboard_of_the_committed_stacks_has_cloudwatchs_structure(stack_dashboards):
    assert stack_dashboards
    for name, body in stack_dashboards.items():
        assert cw.dashboard_problems(body) == [], name


def test_a_job_dashboard_shows_gpu_efa_steps_restarts_and_the_alarms():
    cfg = _cfg("dev")
    job = next(j for j in alerts.watched_jobs(cfg) if j.name == "resnet50-elastic")
    body = alerts.plan(cfg).dashboards[f"{cfg.cluster_name}-job-{job.name}"]
    metrics = {line[1] for w in body["widgets"] for line in w["properties"].get("metrics", [])}
    assert {"pod_gpu_utilization", "pod_gpu_memory_utilization", "pod_efa_rx_bytes", "step_time"} <= metrics
    assert "pod_number_of_container_restarts" in metrics
    header = body["widgets"][0]["properties"]["markdown"]
    assert all(a.name in header for a in alerts.job_alarms(cfg, job))
    plotted = {line[7] for w in body["widgets"] for line in w["properties"].get("metrics", []) if len(line) > 8}
    assert plotted == set(job.pods)


def _good():
    cfg = _cfg("dev")
    return copy.deepcopy(next(iter(alerts.plan(cfg).dashboards.values())))


BREAKS = {
    "off the grid": (lambda b: b["widgets"][1].update(x=GRID_COLUMNS - 6), "off the 24-column grid"),
    "overlap": (lambda b: b["widgets"][2].update(x=0, y=b["widgets"][1]["y"]), "overlaps"),
    "bad stat": (lambda b: b["widgets"][1]["properties"].update(stat="Mean"), "stat"),
    "bad period": (lambda b: b["widgets"][1]["properties"].update(period=90), "multiple of 60"),
    "unknown type": (lambda b: b["widgets"][1].update(type="graph"), "type"),
    "metric line": (lambda b: b["widgets"][1]["properties"]["metrics"].append(["ContainerInsights", 3]), "strings"),
    "no markdown": (lambda b: b["widgets"][0]["properties"].pop("markdown"), "markdown"),
    "no widgets": (lambda b: b.update(widgets=[]), "1 to 500"),
}


@pytest.mark.parametrize("what", BREAKS)
def test_each_rule_of_the_structure_check_fires(what):
    body = _good()
    assert cw.dashboard_problems(body) == []
    change, words = BREAKS[what]
    change(body)
    problems = cw.dashboard_problems(body)
    assert problems and words in " ".join(problems)


def test_the_picture_in_docs_is_devs_dashboard_as_it_is():
    """docs/alerts-dashboard.svg: .venv/bin/python -m infra.dashboard_svg --stack dev --job resnet50-elastic"""
    assert (ROOT / "docs" / "alerts-dashboard.svg").read_text() == job_picture("dev", "resnet50-elastic")
