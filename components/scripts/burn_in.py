"""Burn-in of one GPU node, run by the burn-in DaemonSet's containers (components/burn_in.py).
Standard library only; the decisions are burn_in_decisions.py, shipped next to it.

``burn_in.py gate`` (first init container): what to do with the node (``burn_in_decisions.next_step``).
No burn-in taint: nothing (it passed before, or was released; ``watch`` takes over). A node that has
served work (a verdict label of one, or pods of its own running) got the taint from its node group's
update (EKS puts a group's new taints on its running nodes too): released unchecked, never quarantined.
Otherwise ``<state>/check`` is written (and ``<state>/loopback`` for a group with the loopback test),
and ``<state>/present-only`` when the node is older than a new node can be at its first check: a node
that was in service before is judged on what it shows now, not on its past jobs' ECC counts and Xids.

``burn_in.py check``: runs the tools, decides, and acts on the node through the Kubernetes API:
passed -> removes the taint and labels the node ``gputraining/burn-in=passed``; failed -> keeps the
taint, labels ``gputraining/burn-in=failed-<reasons>``, records a Warning event on the node and, while
fewer than ``BURN_IN_MAX_REPLACEMENTS`` nodes of its group were replaced in the last
``BURN_IN_REPLACEMENT_WINDOW`` seconds (counted in a ConfigMap every node's check shares), writes the
instance ID to ``<state>/replace`` for the next init container, which marks the instance Unhealthy in
its Auto Scaling group. Past the bound the node stays tainted and labelled and a Warning event
``BurnInReplacementHeld`` says a person must look (a check that fails every node of a type would
otherwise replace instances forever).

``burn_in.py watch`` (the main container, for the pod's life): every ``BURN_IN_WATCH_SECONDS`` reads
the node. Seen without the taint and without a verdict, it is labelled ``in-service`` (it takes work);
a node in service that gets the taint later (the node group's update reached it after the gate ran)
is released at once (``skipped-in-service``), so no running node is left tainted for good.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
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


def _label(node: dict) -> str:
    return node["metadata"].get("labels", {}).get(os.environ["BURN_IN_LABEL"], "")


def _tainted(node: dict) -> bool:
    return any(t.get("key") == _taint_key() for t in node.get("spec", {}).get("taints") or [])


def _age_seconds(node: dict) -> float:
    """Seconds since the node object was created (it registers once, when it joins the cluster)."""
    created = node["metadata"].get("creationTimestamp")
    if not created:
        return 0.0
    return time.time() - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _release(node_name: str, node: dict, label: str, why: str) -> None:
    print(f"{node_name}: {why}: released without a check ({label})")
    _patch_node(node_name, node, bd.Verdict((), (why,)), label=label)


def gate(node_name: str, state: Path, expected_file: Path) -> int:
    node = _node(node_name)
    tainted = _tainted(node)
    working = _working_pods(node_name) if tainted else []
    step = bd.next_step(tainted, _label(node), _age_seconds(node), working)
    if step == bd.NOTHING:
        (state / "in-service").write_text("1")
        print(f"{node_name}: no burn-in taint (burnt in before, or released): nothing to do")
        return 0
    if step == bd.RELEASE_IN_SERVICE:
        _release(node_name, node, "skipped-in-service", f"in service before ({_label(node)})")
        return 0
    if step == bd.RELEASE_IN_USE:
        _release(node_name, node, "skipped-in-use", f"already runs {', '.join(working[:5])}")
        return 0
    (state / "check").write_text("1")
    if step == bd.CHECK_PRESENT:
        (state / "present-only").write_text("1")
    loopback = json.loads(expected_file.read_text()).get(_group(node), {}).get("loopback", False)
    if loopback:
        (state / "loopback").write_text("1")
    how = " on its present state (in service since before the taint)" if step == bd.CHECK_PRESENT else ""
    print(f"{node_name}: carries the burn-in taint: checking it{how}" + (" with the loopback test" if loopback else ""))
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
    """Label the node with the verdict and, when it passed and carries the taint, remove the taint. A JSON
    patch whose test of the taints fails (someone changed them meanwhile) fails whole: read again."""
    taints = node.get("spec", {}).get("taints") or []
    key = "/metadata/labels/" + os.environ["BURN_IN_LABEL"].replace("/", "~1")
    ops: list[dict] = [{"op": "add", "path": key, "value": label or verdict.label}]
    if verdict.passed and _tainted(node):
        kept = [t for t in taints if t.get("key") != _taint_key()]
        ops = [{"op": "test", "path": "/spec/taints", "value": taints}, *ops]
        ops.append({"op": "replace", "path": "/spec/taints", "value": kept})
    _request("PATCH", f"/api/v1/nodes/{name}", ops, "application/json-patch+json")


def _event(node: dict, reason: str, message: str, warning: bool) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = node["metadata"]
    namespace = os.environ.get("POD_NAMESPACE", "kube-system")
    body = {
        "metadata": {"generateName": f"{meta['name']}.burn-in-", "namespace": namespace},
        "involvedObject": {"kind": "Node", "name": meta["name"], "uid": meta.get("uid", "")},
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": "gputraining-burn-in", "host": meta["name"]},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    _request("POST", f"/api/v1/namespaces/{namespace}/events", body)


def _replacements_path() -> str:
    namespace = os.environ.get("POD_NAMESPACE", "kube-system")
    return f"/api/v1/namespaces/{namespace}/configmaps/{os.environ['BURN_IN_REPLACEMENTS']}"


def _claim_replacement(group: str, node_name: str) -> tuple[bool, int]:
    """Count one replacement of ``group`` in the shared ConfigMap, if the bound allows it: (allowed, how
    many in the window before this one). An update with a stale resourceVersion is refused (409) and
    read again, so two nodes failing at once cannot both take the last place."""
    limit = int(os.environ.get("BURN_IN_MAX_REPLACEMENTS", "3"))
    window = float(os.environ.get("BURN_IN_REPLACEMENT_WINDOW", "3600"))
    for _ in range(10):
        cm = _request("GET", _replacements_path())
        data = cm.get("data") or {}
        times = bd.recent(json.loads(data.get(group, "[]")), time.time(), window)
        if not bd.may_replace(times, time.time(), limit, window):
            return False, len(times)
        cm["data"] = {**data, group: json.dumps([*times, time.time()])}
        try:
            _request("PUT", _replacements_path(), cm)
        except urllib.error.HTTPError as e:
            if e.code == 409:
                print(f"{node_name}: the replacement count changed meanwhile: reading it again")
                continue
            raise
        return True, len(times)
    raise RuntimeError("the replacement count kept changing: giving up (the pod restarts and tries again)")


def _hand_to_replacement(node: dict, group: str, state: Path) -> None:
    name = node["metadata"]["name"]
    allowed, before = _claim_replacement(group, name)
    if not allowed:
        limit = os.environ.get("BURN_IN_MAX_REPLACEMENTS", "3")
        window = int(float(os.environ.get("BURN_IN_REPLACEMENT_WINDOW", "3600")) // 60)
        message = (
            f"{before} node(s) of group {group} failed burn-in and were replaced in the last {window} minutes "
            f"(at most {limit}): this one stays tainted and is not replaced. A check that fails every node of a "
            "type points at the check, the driver or the AMI, not the hardware: a person must look "
            f"(kubectl -n kube-system logs {os.environ.get('POD_NAME', 'ds/gputraining-burn-in')} -c check)"
        )
        print(f"{name}: {message}", file=sys.stderr)
        _event(node, "BurnInReplacementHeld", message, warning=True)
        return
    provider_id = node.get("spec", {}).get("providerID", "")  # aws:///us-west-2b/i-0123...
    (state / "replace").write_text(provider_id.rsplit("/", 1)[-1])


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
    history = not (state / "present-only").exists()
    verdict = bd.decide(
        expected, smi, _kernel_log() if history else [], _infiniband(), _optional(state / "loopback.log"), history
    )
    print(f"{node_name} ({group}, {want['instanceType']}): {verdict.message}")
    _patch_node(node_name, node, verdict)
    _event(node, "BurnInPassed" if verdict.passed else "BurnInFailed", verdict.message, warning=not verdict.passed)
    if not verdict.passed:
        _hand_to_replacement(node, group, state)
    return 0


def watch_once(node_name: str, state: Path) -> None:
    """One look at the node: label one that works untainted ``in-service``; release one in service that
    got the taint after the gate ran. A node being judged, or failed, is left as it is."""
    node = _node(node_name)
    label = _label(node)
    if not _tainted(node):
        if not label:
            _patch_node(node_name, node, bd.Verdict((), ("in service",)), label="in-service")
            print(f"{node_name}: takes work without a burn-in verdict: labelled in-service")
        (state / "in-service").write_text("1")
        return
    if label in bd.IN_SERVICE_LABELS or ((state / "in-service").exists() and not label.startswith("failed")):
        _release(node_name, node, "skipped-in-service", "the taint came after the node was in service")


def watch(node_name: str, state: Path) -> int:
    every = float(os.environ.get("BURN_IN_WATCH_SECONDS", "15"))
    rounds = int(os.environ.get("BURN_IN_WATCH_ROUNDS", "0"))  # 0: for the pod's life
    done = 0
    while rounds == 0 or done < rounds:
        try:
            watch_once(node_name, state)
        except (OSError, ValueError, KeyError) as e:  # the API away a moment, a patch that lost a race: look again
            print(f"{node_name}: {e}", file=sys.stderr)
        done += 1
        time.sleep(every)
    return 0


def main(argv: list[str]) -> int:
    node_name = os.environ["NODE_NAME"]
    state = Path(os.environ.get("BURN_IN_STATE", "/run/burn-in"))
    if argv[1:] == ["gate"]:
        return gate(node_name, state, Path(os.environ["BURN_IN_EXPECTED"]))
    if argv[1:] == ["check"]:
        return check(node_name, state, Path(os.environ["BURN_IN_EXPECTED"]))
    if argv[1:] == ["watch"]:
        return watch(node_name, state)
    print("usage: burn_in.py gate|check|watch", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
