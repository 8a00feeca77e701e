"""The queue reporter: every minute, per Kueue ClusterQueue, how many workloads wait, how many are
admitted, and how long the oldest waiting one has waited, printed as signal lines (facts/job_signals.py)
that the stack's CloudWatch Logs metric filters turn into metrics. Kueue exports these only to
Prometheus; this keeps the stack on the one path it already has (stdout -> Container Insights ->
metric filters) without a scraper. Standard library only (shipped in a ConfigMap, run by python).

What it reads, from Kueue's Workload API (kubernetes-sigs/kueue apis/kueue/v1beta2/workload_types.go
at v0.19.2): ``spec.queueName`` (the LocalQueue), ``spec.active``, ``status.admission.clusterQueue``,
and ``status.conditions`` of types ``QuotaReserved``, ``Admitted`` and ``Finished``; a LocalQueue's
``spec.clusterQueue`` names the ClusterQueue of a workload that has no admission yet.

- pending: not finished, active, and no ``QuotaReserved=True`` condition;
- admitted: ``Admitted=True`` and not finished;
- wait: the oldest pending workload's seconds since it last started waiting: the
  ``QuotaReserved=False`` condition's ``lastTransitionTime`` (set when Kueue first found it could
  not reserve quota, and again when an evicted workload goes back to the queue), else its
  ``creationTimestamp``; 0 with none pending.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

API = os.environ.get("QUEUE_REPORTER_API", "https://kubernetes.default.svc")
SA = Path(os.environ.get("QUEUE_REPORTER_SERVICE_ACCOUNT", "/var/run/secrets/kubernetes.io/serviceaccount"))
KUEUE = os.environ.get("QUEUE_REPORTER_KUEUE_API", "kueue.x-k8s.io/v1beta2")
INTERVAL = float(os.environ.get("QUEUE_REPORTER_INTERVAL_SECONDS", "60"))
ROUNDS = int(os.environ.get("QUEUE_REPORTER_ROUNDS", "0"))  # 0: forever (tests run a few)
SIGNAL_KEY = os.environ.get("QUEUE_REPORTER_SIGNAL_KEY", "gputraining_signal")


def _get(path: str) -> dict:
    ctx = ssl.create_default_context(cafile=str(SA / "ca.crt")) if API.startswith("https:") else None
    req = urllib.request.Request(API + path)
    req.add_header("Authorization", "Bearer " + (SA / "token").read_text().strip())
    with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
        return json.loads(resp.read())


def _items(resource: str) -> list[dict]:
    return _get(f"/apis/{KUEUE}/{resource}").get("items") or []


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _condition(wl: dict, kind: str) -> dict | None:
    return next((c for c in wl.get("status", {}).get("conditions") or [] if c.get("type") == kind), None)


def _true(wl: dict, kind: str) -> bool:
    c = _condition(wl, kind)
    return c is not None and c.get("status") == "True"


def _pending(wl: dict) -> bool:
    active = wl.get("spec", {}).get("active", True) is not False
    return active and not _true(wl, "Finished") and not _true(wl, "QuotaReserved")


def _waiting_since(wl: dict) -> float:
    c = _condition(wl, "QuotaReserved")
    if c is not None and c.get("status") == "False" and c.get("lastTransitionTime"):
        return _epoch(c["lastTransitionTime"])
    return _epoch(wl["metadata"]["creationTimestamp"])


def _cluster_queue(wl: dict, local_queues: dict[tuple[str, str], str]) -> str | None:
    admitted = (wl.get("status", {}).get("admission") or {}).get("clusterQueue")
    if admitted:
        return admitted
    return local_queues.get((wl["metadata"].get("namespace", ""), wl.get("spec", {}).get("queueName", "")))


def report(workloads: list[dict], local_queues: list[dict], cluster_queues: list[dict], now: float) -> list[dict]:
    """The signal lines of one round: three per ClusterQueue, in name order."""
    lq = {(q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"] for q in local_queues}
    names = sorted(q["metadata"]["name"] for q in cluster_queues)
    pending = {n: 0 for n in names}
    admitted = {n: 0 for n in names}
    wait = {n: 0.0 for n in names}
    for wl in workloads:
        cq = _cluster_queue(wl, lq)
        if cq not in pending:
            continue  # a queue name that leads nowhere: Kueue reports it on the workload itself
        if _pending(wl):
            pending[cq] += 1
            wait[cq] = max(wait[cq], round(max(0.0, now - _waiting_since(wl)), 1))
        elif _true(wl, "Admitted") and not _true(wl, "Finished"):
            admitted[cq] += 1
    lines = []
    for n in names:
        for signal, value in (("queue_pending", pending[n]), ("queue_admitted", admitted[n]), ("queue_wait", wait[n])):
            lines.append({SIGNAL_KEY: signal, "cluster_queue": n, "value": value})
    return lines


def once() -> None:
    lines = report(_items("workloads"), _items("localqueues"), _items("clusterqueues"), time.time())
    for line in lines:
        print(json.dumps(line), flush=True)


def main() -> int:
    done = 0
    while True:
        try:
            once()
        except (OSError, ValueError, KeyError) as e:  # the API away a moment: say so, try next round
            print(f"queue reporter: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        done += 1
        if ROUNDS and done >= ROUNDS:
            return 0
        time.sleep(INTERVAL)


if __name__ == "__main__":
    sys.exit(main())
