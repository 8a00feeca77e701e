"""Burn-in of one GPU node, run by the burn-in DaemonSet's init containers (components/burn_in.py).
Standard library only; the decisions are burn_in_decisions.py, shipped next to it.

``burn_in.py gate``: whether the node still carries the burn-in taint (and, for a group with the
loopback test, writes ``<state>/loopback``). A node that lost it (it passed
before, or someone removed it) is not checked again: burn-in is before work, and a pod restarted on a
node running jobs must neither run the loopback test on their GPUs nor quarantine the node (the node
monitoring agent watches running nodes). Writes ``<state>/check`` when the node is to be checked.

``burn_in.py check``: runs the tools, decides, and acts on the node through the Kubernetes API:
passed -> removes the taint and labels the node ``gputraining/burn-in=passed``; failed -> keeps the
taint, labels ``gputraining/burn-in=failed-<reasons>``, records a Warning event on the node and writes
the instance ID to ``<state>/replace`` for the next init container, which marks the instance Unhealthy
in its Auto Scaling group (the group then terminates and replaces it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import burn_in_decisions as bd

# Where the API server, the service account, the EFA devices and the kernel log are (the defaults are
# a pod's; the tests point them at a fake API server on loopback and at files).
API = os.environ.get("BURN_IN_API", "https://kubernetes.default.svc")
SA = Path(os.environ.get("BURN_IN_SERVICE_ACCOUNT", "/var/run/secrets/kubernetes.io/serviceaccount"))
INFINIBAND = Path(os.environ.get("BURN_IN_INFINIBAND", "/sys/class/infiniband"))
KMSG = os.environ.get("BURN_IN_KMSG", "/dev/kmsg")
_KMSG_HEADER = re.compile(r"^\d+,\d+,\d+,[^;]*;")
SMI_QUERY = "index,name,pci.bus_id,ecc.errors.uncorrected.volatile.total"


def _request(method: str, path: str, body: object = None, content_type: str = "application/json") -> dict:
    ctx = ssl.create_default_context(cafile=str(SA / "ca.crt")) if API.startswith("https:") else None
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(API + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + (SA / "token").read_text().strip())
    req.add_header("Content-Type", content_type)
    with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
        return json.loads(resp.read() or b"{}")


def _taint_key() -> str:
    return os.environ["BURN_IN_TAINT_KEY"]


def _node(name: str) -> dict:
    return _request("GET", f"/api/v1/nodes/{name}")


def _group(node: dict) -> str:
    return node["metadata"].get("labels", {}).get(os.environ["NODE_GROUP_LABEL"], "")


def _working_pods(node_name: str) -> list[str]:
    """The pods on the node that no DaemonSet owns (work: jobs, services), as namespace/name."""
    pods = _request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node_name}").get("items") or []
    out = []
    for pod in pods:
        meta = pod.get("metadata", {})
        owners = {o.get("kind") for o in meta.get("ownerReferences") or []}
        mirror = "kubernetes.io/config.mirror" in (meta.get("annotations") or {})
        if "DaemonSet" not in owners and not mirror and pod.get("status", {}).get("phase") in ("Pending", "Running"):
            out.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return out


def gate(node_name: str, state: Path, expected_file: Path) -> int:
    node = _node(node_name)
    taints = node.get("spec", {}).get("taints") or []
    if not any(t.get("key") == _taint_key() for t in taints):
        print(f"{node_name}: no burn-in taint (burnt in before, or released by hand): nothing to do")
        return 0
    working = _working_pods(node_name)
    if working:
        # A node that runs work already got the taint afterwards (the first `up` that turned burn-in on
        # for its group: EKS puts a node group's new taints on its running nodes too). Burn-in is for new
        # nodes: release it unchecked rather than test GPUs under a job or quarantine the job's node.
        print(f"{node_name}: already runs {', '.join(working[:5])}: released without a check")
        _patch_node(node_name, node, bd.Verdict((), ("node already in use",)), label="skipped-in-use")
        return 0
    (state / "check").write_text("1")
    loopback = json.loads(expected_file.read_text()).get(_group(node), {}).get("loopback", False)
    if loopback:
        (state / "loopback").write_text("1")
    print(f"{node_name}: carries the burn-in taint: checking it" + (" (with the loopback test)" if loopback else ""))
    return 0


def _run(cmd: list[str], timeout: int = 120) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{cmd[0]}: {e}"
    return done.stdout + done.stderr


def _kernel_log() -> list[str]:
    """The kernel's log since boot, one message per line (the container is privileged). /dev/kmsg gives
    one record per read: ``<prio>,<seq>,<usec>,<flags>;<message>``, then `` KEY=value`` lines."""
    lines: list[str] = []
    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        print(f"cannot read {KMSG} ({e}): Xids not checked", file=sys.stderr)
        return lines
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten before it was read; read on
                continue
            if not chunk:
                break
            for line in chunk.decode(errors="replace").splitlines():
                if line and not line.startswith(" "):
                    lines.append(_KMSG_HEADER.sub("", line).strip())
    finally:
        os.close(fd)
    return lines


def _infiniband(root: Path = INFINIBAND) -> list[tuple[str, str]]:
    if not root.is_dir():
        return []
    out = []
    for dev in sorted(root.iterdir()):
        driver = dev / "device" / "driver"
        out.append((dev.name, os.path.basename(os.readlink(driver)) if driver.is_symlink() else ""))
    return out


def _optional(path: Path) -> str | None:
    return path.read_text(errors="replace") if path.is_file() else None


def _patch_node(name: str, node: dict, verdict: bd.Verdict, label: str | None = None) -> None:
    """Label the node with the verdict and, when it passed, remove the taint. A JSON patch whose test
    of the taints fails (someone changed them meanwhile) fails whole: the pod restarts and reads again."""
    taints = node.get("spec", {}).get("taints") or []
    ops: list[dict] = [{"op": "add", "path": "/metadata/labels/" + os.environ["BURN_IN_LABEL"].replace("/", "~1"), "value": label or verdict.label}]
    if verdict.passed:
        ops = [{"op": "test", "path": "/spec/taints", "value": taints}, *ops]
        ops.append({"op": "replace", "path": "/spec/taints", "value": [t for t in taints if t.get("key") != _taint_key()]})
    _request("PATCH", f"/api/v1/nodes/{name}", ops, "application/json-patch+json")


def _event(node: dict, verdict: bd.Verdict) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = node["metadata"]
    namespace = os.environ.get("POD_NAMESPACE", "kube-system")
    body = {
        "metadata": {"generateName": f"{meta['name']}.burn-in-", "namespace": namespace},
        "involvedObject": {"kind": "Node", "name": meta["name"], "uid": meta.get("uid", "")},
        "reason": "BurnInPassed" if verdict.passed else "BurnInFailed",
        "message": verdict.message[:1024],
        "type": "Normal" if verdict.passed else "Warning",
        "source": {"component": "gputraining-burn-in", "host": meta["name"]},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    _request("POST", f"/api/v1/namespaces/{namespace}/events", body)


def check(node_name: str, state: Path, expected_file: Path) -> int:
    if not (state / "check").exists():
        print(f"{node_name}: not checked (see the gate's log)")
        return 0
    node = _node(node_name)
    group = _group(node)
    table = json.loads(expected_file.read_text())
    if group not in table:
        print(f"{node_name}: group {group!r} has no burn-in expectations; leaving it tainted", file=sys.stderr)
        return 1
    want = table[group]
    expected = bd.Expected(want["gpus"], want["gpuModel"], want["efa"])
    smi = _run(["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader"])
    fi_info = _run(["fi_info", "-p", "efa"]) if shutil.which("fi_info") and expected.efa else None
    dcgmi = _run(["dcgmi", "diag", "-r", "1"], timeout=600) if shutil.which("dcgmi") else None
    verdict = bd.decide(
        expected, smi, _kernel_log(), _infiniband(), fi_info, _optional(state / "loopback.log"), dcgmi
    )
    print(f"{node_name} ({group}, {want['instanceType']}): {verdict.message}")
    _patch_node(node_name, node, verdict)
    _event(node, verdict)
    if not verdict.passed:
        provider_id = node.get("spec", {}).get("providerID", "")  # aws:///us-west-2b/i-0123...
        (state / "replace").write_text(provider_id.rsplit("/", 1)[-1])
    return 0


def main(argv: list[str]) -> int:
    node_name = os.environ["NODE_NAME"]
    state = Path(os.environ.get("BURN_IN_STATE", "/run/burn-in"))
    if argv[1:] == ["gate"]:
        return gate(node_name, state, Path(os.environ["BURN_IN_EXPECTED"]))
    if argv[1:] == ["check"]:
        return check(node_name, state, Path(os.environ["BURN_IN_EXPECTED"]))
    print("usage: burn_in.py gate|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
