"""The burn-in script itself (components/scripts/burn_in.py), run as the DaemonSet's containers run it:
``gate`` then ``check`` (init containers), then ``watch`` (the main container, a few rounds here), a real
process with the plan's environment, against a fake Kubernetes API on 127.0.0.1 (a node, its pods,
events, the replacement-count ConfigMap), a fake ``nvidia-smi`` that prints a recorded output, an EFA
sysfs tree and a kernel log in /dev/kmsg's record format. What it asks of the API is what the node gets.

The upgrade of a running stack (burn-in turned on over nodes that already serve jobs) is played in both
orders: the taint arriving after the pod started, and before it looked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from components import burn_in
from facts.kube import BURN_IN_LABEL, BURN_IN_TAINT, GPU_TAINT, NODE_GROUP_LABEL
from tests.fake_kube_api import http_server

DATA = Path(__file__).parent / "data" / "burn_in"
NODE = "ip-10-0-64-10.us-west-2.compute.internal"
INSTANCE = "i-0123456789abcdef0"


def _stamp(seconds_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


COUNTER = f"/api/v1/namespaces/kube-system/configmaps/{burn_in.REPLACEMENTS}"


class FakeApi:
    """Just enough of the Kubernetes API for the script: one node, its pods, events, and the
    replacement-count ConfigMap (an update with a stale resourceVersion is refused with 409, as the API
    server does)."""

    def __init__(self, pods: list[dict[str, Any]]):
        self.node: dict[str, Any] = {
            "metadata": {
                "name": NODE,
                "uid": "u-1",
                "labels": {NODE_GROUP_LABEL: "p4d"},
                "creationTimestamp": _stamp(90),  # joined a minute and a half ago
            },
            "spec": {"providerID": f"aws:///us-west-2b/{INSTANCE}", "taints": [dict(GPU_TAINT), dict(BURN_IN_TAINT)]},
        }
        self.pods = pods
        self.events: list[dict[str, Any]] = []
        self.patches: list[list[dict[str, Any]]] = []
        self.counter: dict[str, Any] = {
            "metadata": {"name": burn_in.REPLACEMENTS, "namespace": "kube-system", "resourceVersion": "1"}
        }
        self.conflicts = 0  # how many updates of the counter to refuse, as if another node's came first

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "GET" and path == f"/api/v1/nodes/{NODE}":
            return 200, self.node
        if method == "GET" and path.startswith("/api/v1/pods?fieldSelector=spec.nodeName%3D" + NODE):
            return 200, {"items": self.pods}
        if method == "POST" and path == "/api/v1/namespaces/kube-system/events":
            self.events.append(body)
            return 201, body
        if method == "PATCH" and path == f"/api/v1/nodes/{NODE}":
            self.patches.append(body)
            return self._apply(body)
        if method == "GET" and path == COUNTER:
            return 200, json.loads(json.dumps(self.counter))
        if method == "PUT" and path == COUNTER:
            return self._update_counter(body)
        return 404, {"message": f"{method} {path}"}

    def _update_counter(self, body: dict[str, Any]) -> tuple[int, Any]:
        version = self.counter["metadata"]["resourceVersion"]
        if self.conflicts or body["metadata"].get("resourceVersion") != version:
            self.conflicts = max(0, self.conflicts - 1)
            self.counter["metadata"]["resourceVersion"] = str(int(version) + 1)
            return 409, {"reason": "Conflict"}
        self.counter = {**body, "metadata": {**body["metadata"], "resourceVersion": str(int(version) + 1)}}
        return 200, self.counter

    def _apply(self, ops: list[dict[str, Any]]) -> tuple[int, Any]:
        for op in ops:  # the JSON patch operations the script uses (RFC 6902)
            *parents, leaf = op["path"].strip("/").split("/")
            target = self.node
            for p in parents:
                target = target[p]
            leaf = leaf.replace("~1", "/")
            if op["op"] == "test" and target[leaf] != op["value"]:
                return 422, {"message": "test failed"}
            if op["op"] in ("add", "replace"):
                target[leaf] = op["value"]
        return 200, self.node

    def replacements(self) -> list[float]:
        return json.loads((self.counter.get("data") or {}).get("p4d", "[]"))


@pytest.fixture
def api() -> Iterator[tuple[FakeApi, str]]:
    fake = FakeApi([])

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            assert self.headers["Authorization"] == "Bearer token-1"
            code, out = fake.handle(self.command, self.path, body)
            data = json.dumps(out).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = _serve

        def log_message(self, *args: Any) -> None:
            pass

    with http_server(Handler) as url:
        yield fake, url


def _node_files(tmp: Path, smi: str, efa: list[str], kmsg: str) -> dict[str, str]:
    """The node as the check container sees it, under ``tmp``; returns the environment of the run."""
    scripts = tmp / "scripts"
    scripts.mkdir()
    for name, text in burn_in.files(
        [burn_in.GroupExpectation("p4d", "c-gpu-p4d", "p4d.24xlarge", 8, "A100", 4)]
    ).items():
        (scripts / name).write_text(text)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    fake_smi = bin_dir / "nvidia-smi"
    calls = tmp / "nvidia-smi.calls"
    fake_smi.write_text(f"#!/bin/sh\necho run >> '{calls}'\ncat '{DATA / smi}'\n")
    fake_smi.chmod(0o755)
    ib = tmp / "infiniband"
    for dev in efa:
        (ib / dev / "device").mkdir(parents=True)
        (ib / dev / "device" / "driver").symlink_to("../../../bus/pci/drivers/efa")
    records = [f"4,{i},{i * 1000},-;{line}" for i, line in enumerate((DATA / kmsg).read_text().splitlines())]
    (tmp / "kmsg").write_text("\n".join(records) + "\n")
    sa = tmp / "sa"
    sa.mkdir()
    (sa / "token").write_text("token-1\n")
    state = tmp / "state"
    state.mkdir()
    env = {e["name"]: e["value"] for e in burn_in._env() if "value" in e}
    return {
        **env,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "NODE_NAME": NODE,
        "POD_NAMESPACE": "kube-system",
        "BURN_IN_STATE": str(state),
        "BURN_IN_EXPECTED": str(scripts / "expected.json"),
        "BURN_IN_SERVICE_ACCOUNT": str(sa),
        "BURN_IN_INFINIBAND": str(ib),
        "BURN_IN_KMSG": str(tmp / "kmsg"),
    }


def _run(env: dict[str, str], url: str, step: str) -> subprocess.CompletedProcess[str]:
    script = Path(env["BURN_IN_EXPECTED"]).with_name("burn_in.py")
    # The watch container's loop, a few rounds at once (it runs for the pod's life).
    rounds = {"BURN_IN_WATCH_ROUNDS": "2", "BURN_IN_WATCH_SECONDS": "0.05"} if step == "watch" else {}
    return subprocess.run(
        [sys.executable, str(script), step],
        env={**env, **rounds, "BURN_IN_API": url},
        capture_output=True,
        text=True,
        timeout=60,
    )


P4D_EFA = ["rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"]


def test_a_healthy_node_loses_the_taint_and_is_labelled_passed(api, tmp_path):
    fake, url = api
    env = _node_files(tmp_path, "p4d-nvidia-smi-query.csv", P4D_EFA, "p4d-kmsg-clean.txt")
    for step in ("gate", "check"):
        done = _run(env, url, step)
        assert done.returncode == 0, done.stderr
    assert fake.node["spec"]["taints"] == [GPU_TAINT]
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "passed"
    assert [e["reason"] for e in fake.events] == ["BurnInPassed"]
    assert not (tmp_path / "state" / "replace").exists()


def test_a_node_with_a_gpu_off_the_bus_stays_tainted_and_is_handed_to_replacement(api, tmp_path):
    fake, url = api
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-gpu-lost.txt", P4D_EFA[:3], "p4d-kmsg-xid79.txt")
    for step in ("gate", "check"):
        done = _run(env, url, step)
        assert done.returncode == 0, done.stderr
    assert BURN_IN_TAINT in fake.node["spec"]["taints"]
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "failed-gpu-lost.gpu-count.xid-79.efa-count"
    [event] = fake.events
    assert (event["reason"], event["type"], event["involvedObject"]["name"]) == ("BurnInFailed", "Warning", NODE)
    assert "Xid 79 on GPU 0000:90:1d" in event["message"]
    # The replace container reads the instance ID from here; the group's count has it.
    assert (tmp_path / "state" / "replace").read_text() == INSTANCE
    assert len(fake.replacements()) == 1


def test_a_node_already_running_work_is_released_unchecked(api, tmp_path):
    fake, url = api
    fake.pods = [
        {
            "metadata": {"namespace": "training", "name": "nccl-worker-0", "ownerReferences": [{"kind": "MPIJob"}]},
            "status": {"phase": "Running"},
        },
        {
            "metadata": {"namespace": "kube-system", "name": "aws-node-x", "ownerReferences": [{"kind": "DaemonSet"}]},
            "status": {"phase": "Running"},
        },
    ]
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-ecc.csv", P4D_EFA, "p4d-kmsg-clean.txt")
    for step in ("gate", "check"):
        assert _run(env, url, step).returncode == 0
    assert fake.node["spec"]["taints"] == [GPU_TAINT]
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "skipped-in-use"
    assert not (tmp_path / "state" / "check").exists() and not (tmp_path / "state" / "replace").exists()


def test_a_node_without_the_taint_is_left_alone(api, tmp_path):
    fake, url = api
    fake.node["spec"]["taints"] = [dict(GPU_TAINT)]
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-ecc.csv", P4D_EFA, "p4d-kmsg-clean.txt")
    for step in ("gate", "check"):
        assert _run(env, url, step).returncode == 0
    assert fake.patches == [] and fake.events == []


def _working_pod() -> dict[str, Any]:
    return {
        "metadata": {"namespace": "training", "name": "elastic-worker-0", "ownerReferences": [{"kind": "PyTorchJob"}]},
        "status": {"phase": "Running"},
    }


def test_upgrade_a_running_node_tainted_after_the_pod_started_is_released_by_the_watch(api, tmp_path):
    """The likely order of the `up` that turns burn-in on: the new pod's gate finds the node untainted
    (EKS has not reached it yet), then the taint arrives. The watch releases it; nothing is checked."""
    fake, url = api
    fake.node["metadata"]["creationTimestamp"] = _stamp(21 * 86400)  # serving jobs for three weeks
    fake.node["spec"]["taints"] = [dict(GPU_TAINT)]
    fake.pods = [_working_pod()]
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-ecc.csv", P4D_EFA, "p4d-kmsg-xid79.txt")
    for step in ("gate", "check", "watch"):
        done = _run(env, url, step)
        assert done.returncode == 0, done.stderr
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "in-service"
    fake.node["spec"]["taints"].append(dict(BURN_IN_TAINT))  # EKS applies the group's new taint
    done = _run(env, url, "watch")
    assert done.returncode == 0, done.stderr
    assert fake.node["spec"]["taints"] == [GPU_TAINT]
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "skipped-in-service"
    assert not (tmp_path / "nvidia-smi.calls").exists() and fake.events == []
    assert not (tmp_path / "state" / "replace").exists()


def test_upgrade_a_node_labelled_in_service_is_released_by_a_new_pods_gate(api, tmp_path):
    """The same node after the DaemonSet's pods were replaced (a later `up`): its label remembers it served
    work, so the new pod's gate releases it even with no job running on it right now."""
    fake, url = api
    fake.node["metadata"]["creationTimestamp"] = _stamp(21 * 86400)
    fake.node["metadata"]["labels"][BURN_IN_LABEL] = "in-service"
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-ecc.csv", P4D_EFA, "p4d-kmsg-xid79.txt")
    for step in ("gate", "check", "watch"):
        assert _run(env, url, step).returncode == 0
    assert fake.node["spec"]["taints"] == [GPU_TAINT]
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "skipped-in-service"
    assert not (tmp_path / "nvidia-smi.calls").exists()


def test_upgrade_an_idle_node_in_service_for_weeks_is_not_judged_on_its_history(api, tmp_path):
    """The other order: the taint is there when the new pod first looks, the node runs no job right now,
    but it has served jobs for weeks: their ECC counts and Xids since boot are not held against it."""
    fake, url = api
    fake.node["metadata"]["creationTimestamp"] = _stamp(40 * 86400)
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-ecc.csv", P4D_EFA, "p4d-kmsg-xid79.txt")
    for step in ("gate", "check", "watch"):
        done = _run(env, url, step)
        assert done.returncode == 0, done.stderr
    assert fake.node["spec"]["taints"] == [GPU_TAINT]
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "passed"
    [event] = fake.events
    assert event["reason"] == "BurnInPassed" and "ECC counts and Xids since boot not judged" in event["message"]
    assert (tmp_path / "nvidia-smi.calls").exists()  # its present state was checked
    assert not (tmp_path / "state" / "replace").exists() and fake.replacements() == []


def test_a_failed_node_stays_tainted_under_the_watch(api, tmp_path):
    fake, url = api
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-gpu-lost.txt", P4D_EFA, "p4d-kmsg-clean.txt")
    for step in ("gate", "check", "watch"):
        assert _run(env, url, step).returncode == 0
    assert BURN_IN_TAINT in fake.node["spec"]["taints"]
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "failed-gpu-lost.gpu-count"


def test_past_the_bound_a_failed_node_is_kept_tainted_and_a_person_is_asked_to_look(api, tmp_path):
    fake, url = api
    now = time.time()
    held = [now - 600, now - 1200, now - 1800]  # three of the group's nodes replaced in the last hour
    fake.counter["data"] = {"p4d": json.dumps(held)}
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-gpu-lost.txt", P4D_EFA, "p4d-kmsg-clean.txt")
    for step in ("gate", "check"):
        done = _run(env, url, step)
        assert done.returncode == 0, done.stderr
    assert not (tmp_path / "state" / "replace").exists()
    assert BURN_IN_TAINT in fake.node["spec"]["taints"]
    assert fake.node["metadata"]["labels"][BURN_IN_LABEL] == "failed-gpu-lost.gpu-count"
    assert [(e["reason"], e["type"]) for e in fake.events] == [
        ("BurnInFailed", "Warning"),
        ("BurnInReplacementHeld", "Warning"),
    ]
    assert "a person must look" in fake.events[1]["message"] and "group p4d" in fake.events[1]["message"]
    assert fake.replacements() == held


def test_the_bound_counts_only_the_last_hour_and_survives_a_concurrent_update(api, tmp_path):
    fake, url = api
    now = time.time()
    fake.counter["data"] = {"p4d": json.dumps([now - 7200, now - 600, now - 1200])}  # one is two hours old
    fake.conflicts = 1  # another node's check updated the count first
    env = _node_files(tmp_path, "p4d-nvidia-smi-query-gpu-lost.txt", P4D_EFA, "p4d-kmsg-clean.txt")
    for step in ("gate", "check"):
        done = _run(env, url, step)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "state" / "replace").read_text() == INSTANCE
    kept = fake.replacements()
    assert len(kept) == 3 and min(kept) > now - 3600
