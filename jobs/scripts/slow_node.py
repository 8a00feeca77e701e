"""Slow-node detection: the ranks' step times, compared node by node. Standard library only; shipped in the job's
guard ConfigMap (jobs/resilience.py) and run by the progress guard around every rank (docs/performance.md,
"Slow nodes").

The contract with the training script: the guard gives each rank ``GPUTRAINING_STEP_FILE`` (a file of its own);
the rank appends one line per step with the seconds of its OWN work in that step, before it waits for the others
(forward and backward up to the gradient exchange, or a CUDA-event timer around the compute). In a synchronous job
the whole step takes the same time on every rank (all wait for the slowest at the all-reduce), so the whole
step's time cannot tell which node is slow.

Every ``window`` seconds each rank's guard reads the new lines, prints a ``step_time`` signal (its median) and
sends it to the collector: the guard of the job's first rank, which listens on ``MASTER_ADDR:PORT`` (torchrun
gives every worker the first rank's address). The collector takes each node's median (of its ranks' medians)
and compares it with the median of the other nodes: a node above ``factor`` times that for ``windows`` windows in
a row is slow. It is reported once per start of the workers: a ``slow_node`` signal, an Event on the node's pod,
a NoSchedule taint on the node (no new work lands there) and, for a job that can go on without it (elastic, or
with checkpoints), the deletion of that pod: the training operator creates it again and the scheduler places it
on another node (with Kueue's topology-aware scheduling, Kueue itself replaces a node with an untolerated
NoSchedule taint where its node-replacement feature gates are on).

Why compare with the other nodes, not the job's median with the node in it: with two nodes the median is the
mean of both, and a node twice as slow as its peer would be only 1.33 times "the median".
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import job_signal
import kube_api

PORT = 29610  # the collector's port on the first rank's pod (torchrun's own default store port is 29500)
STEP_DIR = "/tmp/gputraining-steps"
STALE_WINDOWS = 2  # a rank's report older than this many windows no longer counts
TAINT_KEY = "gputraining/slow-node"  # jobs/slow_node.py's SLOW_NODE_TAINT_KEY


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")
    middle = n // 2
    return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def ratios(node_medians: dict[str, float]) -> dict[str, float]:
    """Each node's median step time divided by the median of the other nodes' (needs two nodes or more)."""
    if len(node_medians) < 2:
        return {}
    out = {}
    for node, value in node_medians.items():
        others = median([v for n, v in node_medians.items() if n != node])
        out[node] = value / others if others > 0 else 1.0
    return out


@dataclass
class Tracker:
    """Windows in a row above ``factor`` per node; a node is found once, when it reaches ``windows``."""

    factor: float
    windows: int
    counts: dict[str, int] = field(default_factory=dict)
    found: set[str] = field(default_factory=set)

    def update(self, node_medians: dict[str, float]) -> list[tuple[str, float]]:
        """(node, ratio) of the nodes found slow by this window."""
        new: list[tuple[str, float]] = []
        for node, ratio in ratios(node_medians).items():
            self.counts[node] = self.counts.get(node, 0) + 1 if ratio > self.factor else 0
            if self.counts[node] >= self.windows and node not in self.found:
                self.found.add(node)
                new.append((node, ratio))
        return new


class StepFile:
    """The new complete lines of a rank's step file, as seconds (a line that is not a number is skipped)."""

    def __init__(self, path: str):
        self.path, self.offset = path, 0

    def read(self) -> list[float]:
        try:
            with open(self.path, "rb") as source:
                source.seek(self.offset)
                data = source.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        out = []
        for line in data[:end].decode(errors="replace").split():
            try:
                value = float(line)
            except ValueError:
                continue
            if value >= 0:
                out.append(value)
        return out


@dataclass
class Report:
    node: str
    pod: str
    rank: str
    median: float
    at: float


class Collector:
    """The first rank's side: the ranks' reports, one decision per window, the actions."""

    def __init__(self, options: dict, env: dict, say, clock=time.monotonic):
        self.options, self.env, self.say, self.clock = options, env, say, clock
        self.tracker = Tracker(options["factor"], options["windows"])
        self.reports: dict[tuple[str, str], Report] = {}
        self.lock = threading.Lock()

    def add(self, report: Report) -> None:
        with self.lock:
            self.reports[(report.node, report.rank)] = report

    def node_medians(self) -> tuple[dict[str, float], dict[str, str]]:
        fresh = self.clock() - STALE_WINDOWS * self.options["window"]
        by_node: dict[str, list[float]] = {}
        pods: dict[str, str] = {}
        with self.lock:
            for report in self.reports.values():
                if report.at >= fresh:
                    by_node.setdefault(report.node, []).append(report.median)
                    pods[report.node] = report.pod
        return {node: median(values) for node, values in by_node.items()}, pods

    def decide(self) -> list[tuple[str, float]]:
        medians, pods = self.node_medians()
        found = self.tracker.update(medians)
        for node, ratio in found:
            self.act(node, pods.get(node, ""), ratio, medians)
        return found

    def act(self, node: str, pod: str, ratio: float, medians: dict[str, float]) -> None:
        o, env = self.options, self.env
        others = median([v for n, v in medians.items() if n != node])
        reason = (
            f"median step {medians[node]:.3f}s is {ratio:.2f}x the other nodes' {others:.3f}s for {o['windows']} "
            f"windows of {o['window']:g}s (factor {o['factor']:g})"
        )
        if not self.confirmed(node, pod):
            return
        restart = bool(o.get("restart")) and bool(pod)
        then = "restarting the job without it" if restart else "the job goes on; the node takes no new work"
        self.say(f"slow node {node}: {reason}; tainted {TAINT_KEY}:NoSchedule; {then}")
        job_signal.emit(
            "slow_node", o["job"], env.get("POD_NAMESPACE", ""), round(ratio, 3), node=node, pod=pod, reason=reason
        )
        if pod:
            kube_api.tried(
                "record the SlowNode Event",
                kube_api.event,
                env,
                "Pod",
                pod,
                "SlowNode",
                f"node {node}: {reason}; {then}",
            )
        taint = {"key": TAINT_KEY, "value": o["job"], "effect": "NoSchedule"}
        kube_api.tried(f"taint node {node}", kube_api.taint_node, env, node, taint)
        if restart:
            kube_api.tried(f"delete pod {pod}", kube_api.delete_pod, env, pod)

    def confirmed(self, node: str, pod: str) -> bool:
        """Whether ``pod`` is a pod of the job's namespace on ``node`` (the API says so): the collector's port takes
        reports from the network, so a node is acted on only as the API server knows the job's pods."""
        namespace = self.env.get("POD_NAMESPACE", "default")
        try:
            found = kube_api.request(self.env, "GET", f"/api/v1/namespaces/{namespace}/pods/{pod}") if pod else {}
        except (OSError, ValueError) as err:
            self.say(f"slow node {node}: not acted on: pod {pod!r} could not be read ({err})")
            return False
        if found.get("spec", {}).get("nodeName") != node:
            self.say(f"slow node {node}: not acted on: the API does not show pod {pod!r} on that node")
            return False
        return True

    def serve(self, port: int) -> ThreadingHTTPServer:
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length))
                    collector.add(
                        Report(
                            str(body["node"]),
                            str(body["pod"]),
                            str(body["rank"]),
                            float(body["median"]),
                            collector.clock(),
                        )
                    )
                    code = 204
                except (ValueError, KeyError, TypeError):
                    code = 400
                self.send_response(code)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        server = ThreadingHTTPServer(("", port), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


class Reporter:
    """Every rank's side: its step file read every window, a step_time line, a report to the collector."""

    def __init__(self, options: dict, env: dict, say, rank: str):
        self.options, self.env, self.say, self.rank = options, env, say, rank
        self.path = os.path.join(env.get("GPUTRAINING_STEP_DIR", STEP_DIR), f"rank-{rank}.txt")
        self.steps = StepFile(self.path)
        self.collector: Collector | None = None  # the first rank reports to its own collector in-process
        self.warned = False

    def child_env(self) -> dict:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        if os.path.exists(self.path):
            self.steps.offset = os.path.getsize(self.path)  # an earlier start's lines are not this start's
        return {"GPUTRAINING_STEP_FILE": self.path}

    def once(self) -> float | None:
        samples = self.steps.read()
        if not samples:
            return None
        value = median(samples)
        node, pod = self.env.get("NODE_NAME", ""), self.env.get("POD_NAME", "")
        job_signal.emit(
            "step_time",
            self.options["job"],
            self.env.get("POD_NAMESPACE", ""),
            round(value, 6),
            node=node,
            rank=self.rank,
            steps=len(samples),
        )
        body = {"node": node, "pod": pod, "rank": self.rank, "median": value}
        if self.collector is not None:
            self.collector.add(Report(node, pod, self.rank, value, self.collector.clock()))
        else:
            self.send(body)
        return value

    def send(self, body: dict) -> None:
        address = self.env.get("MASTER_ADDR")
        if not address:
            return
        port = int(self.env.get("GPUTRAINING_SLOW_NODE_PORT", PORT))
        request = urllib.request.Request(
            f"http://{address}:{port}/steps", data=json.dumps(body).encode(), method="POST"
        )
        request.add_header("Content-Type", "application/json")
        try:
            urllib.request.urlopen(request, timeout=10).close()
        except OSError as err:
            if not self.warned:
                self.say(f"slow-node check: could not reach the first rank's collector at {address}:{port}: {err}")
                self.warned = True


def run(options: dict, env: dict, say, rank: str, first: bool, reporter: Reporter, stop: threading.Event) -> None:
    """The loop of one rank's guard: report every window; the first rank also collects and decides."""
    if first:
        collector = Collector(options, env, say)
        try:
            collector.serve(int(env.get("GPUTRAINING_SLOW_NODE_PORT", PORT)))
        except OSError as err:
            say(f"slow-node check: cannot listen for the ranks' step times: {err}")
            return
        reporter.collector = collector
    while not stop.wait(options["window"]):
        reporter.once()
        if first:
            collector.decide()
