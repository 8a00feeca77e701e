"""The Kubernetes API as the job's own pods reach it: Events, a node's taint, a pod's deletion. Standard library
only; shipped in the job's guard ConfigMap (jobs/resilience.py). The pod's service account (``<job>-guard``,
with the Role jobs/fabric.py renders) authenticates; a call the API refuses is reported, never fatal: a check
that cannot tell the API still tells the log.

The defaults are a pod's; tests point ``GPUTRAINING_API`` at a fake API server on loopback and
``GPUTRAINING_SERVICE_ACCOUNT`` at a folder with a token (tests/integration/fake_api.py).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
COMPONENT = "gputraining-guard"


def api_base(env: dict) -> str:
    if env.get("GPUTRAINING_API"):
        return env["GPUTRAINING_API"].rstrip("/")
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://{host}:{port}" if host else "https://kubernetes.default.svc"


def request(env: dict, method: str, path: str, body: object = None, content_type: str = "application/json") -> dict:
    base = api_base(env)
    account = env.get("GPUTRAINING_SERVICE_ACCOUNT", SA_DIR)
    context = ssl.create_default_context(cafile=os.path.join(account, "ca.crt")) if base.startswith("https:") else None
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    with open(os.path.join(account, "token")) as token:
        req.add_header("Authorization", "Bearer " + token.read().strip())
    req.add_header("Content-Type", content_type)
    with urllib.request.urlopen(req, context=context, timeout=20) as resp:
        return json.loads(resp.read() or b"{}")


def tried(what: str, call, *args) -> bool:
    """Run an API call; on failure say why on stderr and go on."""
    try:
        call(*args)
        return True
    except (OSError, urllib.error.URLError, ValueError) as err:
        detail = err.read().decode(errors="replace")[:300] if isinstance(err, urllib.error.HTTPError) else ""
        sys.stderr.write(f"gputraining: could not {what}: {err} {detail}\n")
        return False


def event(env: dict, kind: str, name: str, reason: str, message: str, warning: bool = True) -> None:
    """An Event on the object (``Pod`` in the job's namespace, or ``Node``), as ``kubectl describe`` shows it."""
    namespace = env.get("POD_NAMESPACE", "default")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    involved = {"kind": kind, "name": name, "apiVersion": "v1"}
    if kind == "Pod":
        involved["namespace"] = namespace
    body = {
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT, "host": env.get("NODE_NAME", "")},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    request(env, "POST", f"/api/v1/namespaces/{namespace}/events", body)


def taint_node(env: dict, node: str, taint: dict) -> None:
    """Add ``taint`` to the node unless it carries its key already: a JSON patch that tests the taints it read,
    so a change made meanwhile fails it whole instead of being overwritten."""
    current = request(env, "GET", f"/api/v1/nodes/{node}").get("spec", {}).get("taints")
    if current and any(t.get("key") == taint["key"] for t in current):
        return
    if current:
        ops = [
            {"op": "test", "path": "/spec/taints", "value": current},
            {"op": "add", "path": "/spec/taints/-", "value": taint},
        ]
    else:
        ops = [{"op": "add", "path": "/spec/taints", "value": [taint]}]
    request(env, "PATCH", f"/api/v1/nodes/{node}", ops, "application/json-patch+json")


def delete_pod(env: dict, pod: str) -> None:
    namespace = env.get("POD_NAMESPACE", "default")
    request(env, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}")
