"""Slow-node detection (jobs/scripts/slow_node.py, jobs/slow_node.py; docs/performance.md): the decision on step
times, the collector's actions against a fake API (the exact node patch), and the `slowNode` key of a
pytorch-elastic job. The real torchrun run is tests/integration/test_slow_node_torchrun.py."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from facts import job_signals
from infra.api_checks import kube_check
from infra.api_checks.kube_rules import is_label_value, is_qualified_name
from jobs import slow_node as spec_side
from tests.fake_kube_api import FakeKubeApi, serve
from tests.helpers import ROOT, built, dev_values, run_stack
from tests.helpers import elastic_job as elastic
from tests.helpers import one_job_problem as one

sys.path.insert(0, str(ROOT / "jobs" / "scripts"))
import slow_node as sn  # noqa: E402


def test_a_node_twice_as_slow_as_its_one_peer_is_2x_not_the_median_s_1_33x():
    assert sn.ratios({"a": 2.0, "b": 1.0}) == {"a": 2.0, "b": 0.5}
    assert sn.ratios({"a": 1.0}) == {}  # nothing to compare with
    assert sn.median([3.0, 1.0, 2.0, 10.0]) == 2.5


def test_found_after_m_windows_in_a_row_and_once():
    tracker = sn.Tracker(factor=1.5, windows=3)
    slow = {"a": 1.0, "b": 1.02, "c": 1.9}
    assert tracker.update(slow) == [] and tracker.update(slow) == []
    assert tracker.update(slow) == [("c", pytest.approx(1.9 / 1.01))]
    assert tracker.update(slow) == []  # reported once


def test_a_window_back_to_normal_starts_the_count_again():
    tracker = sn.Tracker(factor=1.5, windows=2)
    assert tracker.update({"a": 1.0, "b": 2.0}) == []
    assert tracker.update({"a": 1.0, "b": 1.1}) == []
    assert tracker.update({"a": 1.0, "b": 2.0}) == []
    assert [n for n, _ in tracker.update({"a": 1.0, "b": 2.0})] == ["b"]


def test_an_even_run_with_jitter_is_never_found():
    tracker = sn.Tracker(factor=1.5, windows=1)
    for i in range(50):
        assert tracker.update({"a": 1.0 + 0.2 * (i % 3), "b": 1.1, "c": 1.0 + 0.1 * (i % 5)}) == []


def test_the_step_file_gives_whole_lines_only(tmp_path):
    path = tmp_path / "rank-0.txt"
    steps = sn.StepFile(str(path))
    assert steps.read() == []
    path.write_text("0.5\n0.7\nnot-a-number\n0.6")
    assert steps.read() == [0.5, 0.7]
    with path.open("a") as out:
        out.write("1\n")
    assert steps.read() == [0.61]


def collector(tmp_path, restart: bool) -> tuple[Any, FakeKubeApi, dict[str, str]]:
    fake = FakeKubeApi(
        {
            "ip-b": {
                "metadata": {"name": "ip-b"},
                "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
            }
        },
        pods={"bert-worker-0": "ip-a", "bert-worker-1": "ip-b"},
    )
    options = {"job": "bert", "factor": 1.5, "windows": 2, "window": 60.0, "restart": restart}
    return options, fake, {"POD_NAMESPACE": "ml", "NODE_NAME": "ip-a"}


@pytest.mark.parametrize("restart", [True, False])
def test_the_collector_reports_taints_and_restarts_without_the_node(tmp_path, capsys, restart):
    options, fake, env = collector(tmp_path, restart)
    with serve(fake, tmp_path / "sa") as api:
        c = sn.Collector(options, {**env, **api}, lambda text: None, clock=lambda: 100.0)
        for window in range(2):
            for node, pod, value in (("ip-a", "bert-worker-0", 1.0), ("ip-b", "bert-worker-1", 2.4)):
                c.add(sn.Report(node, pod, "0" if node == "ip-a" else "1", value, 100.0))
            found = c.decide()
            assert [n for n, _ in found] == ([] if window == 0 else ["ip-b"])
    gpu_taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    [(path, patch)] = fake.of("PATCH")
    assert path == "/api/v1/nodes/ip-b"
    assert patch == [
        {"op": "test", "path": "/spec/taints", "value": [gpu_taint]},
        {
            "op": "add",
            "path": "/spec/taints/-",
            "value": {"key": "gputraining/slow-node", "value": "bert", "effect": "NoSchedule"},
        },
    ]
    [(_, event)] = fake.of("POST", "/namespaces/ml/events")
    assert event["reason"] == "SlowNode" and event["involvedObject"]["name"] == "bert-worker-1"
    assert "2.40x the other nodes'" in event["message"]
    deleted = [p for p, _ in fake.of("DELETE")]
    assert deleted == (["/api/v1/namespaces/ml/pods/bert-worker-1"] if restart else [])
    [line] = [json.loads(x) for x in capsys.readouterr().out.splitlines() if job_signals.SIGNAL_KEY in x]
    assert line[job_signals.SIGNAL_KEY] == "slow_node" and line["node"] == "ip-b" and line["value"] == 2.4


def test_a_report_naming_a_node_the_pod_is_not_on_is_not_acted_on(tmp_path, capsys):
    """The collector's port takes reports from the network: a node is tainted only where the API shows the pod."""
    fake = FakeKubeApi(pods={"bert-worker-1": "ip-b"})
    options = {"job": "bert", "factor": 1.5, "windows": 1, "window": 60.0, "restart": True}
    said: list[str] = []
    with serve(fake, tmp_path / "sa") as api:
        c = sn.Collector(options, {"POD_NAMESPACE": "ml", **api}, said.append, clock=lambda: 1.0)
        c.add(sn.Report("ip-a", "bert-worker-0", "0", 1.0, 1.0))
        c.add(sn.Report("ip-control-plane", "bert-worker-1", "1", 9.0, 1.0))  # a forged report
        assert [n for n, _ in c.decide()] == ["ip-control-plane"]
    assert fake.of("PATCH") == [] and fake.of("DELETE") == [] and fake.of("POST") == []
    assert "not acted on: the API does not show pod 'bert-worker-1' on that node" in said[-1]
    assert "slow_node" not in capsys.readouterr().out


def test_a_node_tainted_already_is_not_patched_again(tmp_path):
    taint = {"key": sn.TAINT_KEY, "value": "bert", "effect": "NoSchedule"}
    fake = FakeKubeApi({"ip-b": {"metadata": {"name": "ip-b"}, "spec": {"taints": [taint]}}})
    with serve(fake, tmp_path / "sa") as api:
        sn.kube_api.taint_node(api, "ip-b", taint)
    assert fake.of("PATCH") == []


def test_each_rank_prints_its_step_time_and_reports_it(tmp_path, capsys):
    env = {"GPUTRAINING_STEP_DIR": str(tmp_path), "NODE_NAME": "ip-a", "POD_NAME": "p0", "POD_NAMESPACE": "ml"}
    options = {"job": "bert", "factor": 1.5, "windows": 2, "window": 60.0}
    reporter = sn.Reporter(options, env, print, "3")
    step_file = reporter.child_env()["GPUTRAINING_STEP_FILE"]
    c = sn.Collector(options, env, print, clock=lambda: 1.0)
    reporter.collector = c
    with open(step_file, "a") as out:
        out.write("0.2\n0.4\n0.3\n")
    assert reporter.once() == 0.3 and reporter.once() is None
    [line] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line[job_signals.SIGNAL_KEY] == "step_time" and line["rank"] == "3" and line["value"] == 0.3
    assert c.node_medians() == ({"ip-a": 0.3}, {"ip-a": "p0"})


# -- the job spec ------------------------------------------------------------------------------


def test_the_taint_key_and_its_value_are_valid_kubernetes_names():
    assert is_qualified_name(spec_side.SLOW_NODE_TAINT_KEY) == [] and spec_side.SLOW_NODE_TAINT_KEY == sn.TAINT_KEY
    assert is_label_value("x" * 63) == []  # the value is the job's name


def test_slow_node_renders_the_guard_options_and_the_node_rights():
    manifests = built("pytorch-elastic", "p3", slowNode={"factor": 2, "windows": 4, "windowSeconds": 120})
    job = next(m for m in manifests if m["kind"] == "PyTorchJob")
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    line = container["command"]
    at = line.index("--slow-node-factor")
    assert line[at : at + 7] == [
        "--slow-node-factor",
        "2",
        "--slow-node-windows",
        "4",
        "--slow-node-window",
        "120",
        "--slow-node-restart",
    ]
    kinds = {m["kind"]: m for m in manifests}
    assert kinds["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    assert kinds["ClusterRoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "imagenet-guard", "namespace": "training"}
    ]
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]} in kinds["Role"]["rules"]


def test_a_fixed_size_job_without_checkpoints_is_not_restarted():
    manifests = built("pytorch-elastic", "p3", nodes=2, minNodes=2, maxNodes=2, slowNode={})
    job = next(m for m in manifests if m["kind"] == "PyTorchJob")
    line = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert "--slow-node-factor" in line and "--slow-node-restart" not in line


@pytest.mark.parametrize(
    ("section", "key", "text"),
    [
        ({"factor": 1.0}, "slowNode.factor", "1 is out of range: 1.1 to 10"),
        ({"windows": 0}, "slowNode.windows", "0 is out of range: 1 to 100"),
        ({"windowSeconds": 0}, "slowNode.windowSeconds", "0 is out of range"),
    ],
)
def test_out_of_range_values_are_refused(section, key, text):
    problem = one([elastic(nodes=2, nodeGroup="p3", slowNode=section)])
    assert problem.key.endswith(f"jobs[imagenet].{key}") and text in problem.message


def test_one_node_has_nothing_to_compare_with():
    problem = one([elastic(nodes=1, nodeGroup="p3", slowNode={})])
    assert problem.key.endswith("jobs[imagenet].slowNode") and "2 nodes or more" in problem.message


def test_the_dev_stack_with_slow_node_registers_the_rights_the_api_server_takes():
    """The dev stack's elastic job with slowNode, through the real program offline: the guard's account, its Role
    and the cluster-wide node rights are registered and every object passes the plan's Kubernetes check."""
    values = dev_values()
    jobs = values["gpu-training:jobs"]
    elastic_job = next(j for j in jobs if j["name"] == "resnet50-elastic")
    elastic_job["slowNode"] = {"windows": 2}
    objects = run_stack(values).kubernetes_objects()
    mine = {
        (o["kind"], o["metadata"]["name"])
        for o in objects
        if o["metadata"].get("labels", {}).get("gputraining/job") == "resnet50-elastic"
    }
    assert ("ClusterRole", "gputraining-training-resnet50-elastic-guard") in mine
    assert ("ClusterRoleBinding", "gputraining-training-resnet50-elastic-guard") in mine
    assert {("ServiceAccount", "resnet50-elastic-guard"), ("Role", "resnet50-elastic-guard")} <= mine
    assert [str(r) for r in kube_check.check(objects).refusals] == []
