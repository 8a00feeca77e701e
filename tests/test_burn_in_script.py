"""The burn-in script itself (components/scripts/burn_in.py), run as the DaemonSet's init containers run
it: ``gate`` then ``check``, a real process with the plan's environment, against a fake Kubernetes API
on 127.0.0.1 (nodes, pods, events), a fake ``nvidia-smi`` that prints a recorded output, an EFA sysfs
tree and a kernel log in /dev/kmsg's record format. What it asks of the API is what the node gets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from components import burn_in
from facts.kube import BURN_IN_LABEL, BURN_IN_TAINT, GPU_TAINT, NODE_GROUP_LABEL

DATA = Path(__file__).parent / "data" / "burn_in"
NODE = "ip-10-0-64-10.us-west-2.compute.internal"
INSTANCE = "i-0123456789abcdef0"


class FakeApi:
    """Just enough of the Kubernetes API for the script: one node, its pods, events."""

    def __init__(self, pods: list[dict[str, Any]]):
        self.node: dict[str, Any] = {
            "metadata": {"name": NODE, "uid": "u-1", "labels": {NODE_GROUP_LABEL: "p4d"}},
            "spec": {"providerID": f"aws:///us-west-2b/{INSTANCE}", "taints": [dict(GPU_TAINT), dict(BURN_IN_TAINT)]},
        }
        self.pods = pods
        self.events: list[dict[str, Any]] = []
        self.patches: list[list[dict[str, Any]]] = []

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
        return 404, {"message": f"{method} {path}"}

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

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


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
    fake_smi.write_text(f"#!/bin/sh\ncat '{DATA / smi}'\n")
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
    return subprocess.run(
        [sys.executable, str(script), step], env={**env, "BURN_IN_API": url}, capture_output=True, text=True, timeout=60
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
    # The replace container reads the instance ID from here.
    assert (tmp_path / "state" / "replace").read_text() == INSTANCE


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
