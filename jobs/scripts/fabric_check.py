"""The fabric check: did NCCL on this node use EFA, and did the node's EFA devices carry the traffic? Standard
library only; shipped in the job's guard ConfigMap (jobs/resilience.py) and run by the progress guard of each
node's first local rank (docs/performance.md, "Fabric check").

Inputs:

- NCCL's own init lines (``NCCL_DEBUG=INFO``). NCCL reads ``NCCL_DEBUG``, ``NCCL_DEBUG_SUBSYS`` and
  ``NCCL_DEBUG_FILE`` once per process, at its first init (NCCL 2.x src/debug.cc, ncclDebugInit), so the level
  cannot be lowered after the first minutes. Instead the guard gives the worker ``NCCL_DEBUG=INFO`` with
  ``NCCL_DEBUG_SUBSYS=INIT,NET`` (the subsystems that print the network choice, at communicator creation only)
  and ``NCCL_DEBUG_FILE`` pointing at a file per process (``%h.%p``), so the job's log is not flooded and the
  check reads the lines there. A job that sets ``NCCL_DEBUG`` itself keeps its own setting; the guard then reads
  the worker's output.
- The EFA devices' byte counters, ``/sys/class/infiniband/<device>/ports/<port>/hw_counters/*_bytes`` (the
  Linux EFA driver's port statistics: tx_bytes, rx_bytes, rdma_read_bytes, rdma_write_bytes, ...;
  drivers/infiniband/hw/efa/efa_verbs.c), read when NCCL has chosen its network and again COUNTER_SECONDS later.

The decision itself is fabric_rule.py's, shared with the MPI launcher's check (mpi_fabric.py) and burn-in.

The lines it reads (recorded examples in tests/data/nccl_logs, with their sources):

- aws-ofi-nccl: ``NET/OFI Selected Provider is efa`` (``... is efa (found 16 nics)`` in 1.9+), and NCCL's
  ``Using network AWS Libfabric`` (NCCL <= 2.2x with aws-ofi-nccl < 1.9) or ``Using network Libfabric``;
- the fall-back: ``Using network Socket`` and channels ``via NET/Socket``, or a libfabric provider other than
  efa (``Selected Provider is tcp``), or ``Using network IB`` (verbs, not EFA).

Verdicts (``decide``): ``ok``; ``fallback`` (NCCL did not use EFA, or no EFA device moved); ``dead-interface``
(NCCL on EFA but some of the node's EFA devices carried nothing while others did, or fewer devices than the pod
requested); ``unknown`` (no network choice seen in the window: NCCL not initialised yet, or a CPU job).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import sys

import job_signal
import kube_api
from fabric_rule import (  # noqa: F401 (the rule's names, as the guard and the tests use them here)
    COUNTER_SECONDS,
    DEAD_INTERFACE,
    EFA_NETWORKS,
    FALLBACK,
    INFINIBAND,
    MPI_PREFIX,
    NCCL_DIR,
    NCCL_FILE,
    OK,
    PROVIDER,
    UNKNOWN,
    USING,
    VIA,
    WINDOW_SECONDS,
    Network,
    Verdict,
    byte_counters,
    counter_verdict,
    decide,
    network_verdict,
    read_network,
)

INFO_LEVELS = ("INFO", "TRACE")  # NCCL_DEBUG levels that print the init lines the check reads


def nccl_env(env: dict) -> tuple[dict, str | None]:
    """(the env to add for the worker, the NCCL_DEBUG_FILE pattern to read or None: read the worker's output).
    A job's own NCCL_DEBUG=INFO (or TRACE) is kept as it is; any other level (WARN, VERSION, unset) becomes INFO
    for the INIT and NET subsystems, into the file (FabricWatch passes the WARN lines on to the log)."""
    if env.get("NCCL_DEBUG", "").upper() in INFO_LEVELS:
        return {}, env.get("NCCL_DEBUG_FILE")
    added = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": env.get("NCCL_DEBUG_FILE") or NCCL_FILE}
    if not env.get("NCCL_DEBUG_SUBSYS"):
        added["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
    return added, added["NCCL_DEBUG_FILE"]


def file_lines(pattern: str) -> list[str]:
    """The lines of every file NCCL_DEBUG_FILE's pattern names (%h, %p: any)."""
    lines: list[str] = []
    for path in sorted(glob.glob(re.sub(r"%[hp]", "*", pattern))):
        try:
            with open(path, errors="replace") as source:
                lines += source.readlines()
        except OSError:
            continue
    return lines


class FabricWatch:
    """The check as the guard runs it, in a thread beside the worker: wait for NCCL's network choice, read the
    counters twice, decide, report (a fabric_ok or fabric_fallback signal line, an Event on the pod) and, under
    ``enforce``, ask the guard to stop the worker (``failure`` set)."""

    def __init__(self, mode: str, expected: int, env: dict, job: str, say, root: str | None = None):
        self.mode, self.expected, self.env, self.job, self.say = mode, expected, env, job, say
        self.root = root or env.get("GPUTRAINING_INFINIBAND", INFINIBAND)
        self.window = float(env.get("GPUTRAINING_FABRIC_WINDOW", WINDOW_SECONDS))
        self.counter_seconds = float(env.get("GPUTRAINING_FABRIC_COUNTER_SECONDS", COUNTER_SECONDS))
        self.pattern: str | None = None
        self.output: list[str] = []  # the worker's output lines, when the guard reads them (NCCL_DEBUG set by the job)
        self.failure: str | None = None
        self.verdict: Verdict | None = None

    def child_env(self) -> dict:
        added, self.pattern = nccl_env(self.env)
        if self.pattern:
            os.makedirs(os.path.dirname(self.pattern.replace("%h", "h").replace("%p", "p")) or ".", exist_ok=True)
        if self.pattern == NCCL_FILE:  # the guard's own files: an earlier start's go (torchrun restarts)
            for stale in glob.glob(re.sub(r"%[hp]", "*", self.pattern)):
                with contextlib.suppress(OSError):
                    os.remove(stale)
        return added

    def feed(self, line: str) -> None:
        if self.verdict is None and "NCCL" in line:
            self.output.append(line)

    def lines(self) -> list[str]:
        return (file_lines(self.pattern) if self.pattern else []) + list(self.output)

    def run(self, sleep, clock) -> Verdict:
        """Wait (``sleep``, ``clock``: time.sleep and time.monotonic, or a test's) and decide."""
        deadline = clock() + self.window
        while not read_network(self.lines()).seen and clock() < deadline:
            sleep(1.0)
        before = byte_counters(self.root)
        if read_network(self.lines()).seen:
            sleep(self.counter_seconds)
        after = byte_counters(self.root)
        self.verdict = decide(self.lines(), before, after, self.expected, self.counter_seconds)
        self.report(self.verdict)
        return self.verdict

    def relay_warnings(self, sleep, rounds: int | None = None) -> None:
        """Pass NCCL's WARN lines from the files on to stderr (the job's log), where NCCL_DEBUG=WARN (or unset)
        would have printed them: every 5 s, for the worker's life (``rounds``: a test's bound)."""
        if self.pattern is None or self.env.get("NCCL_DEBUG", "").upper() in INFO_LEVELS:
            return
        seen = 0
        while rounds is None or rounds > 0:
            warnings = [line for line in self.lines() if " NCCL WARN " in line]
            for line in warnings[seen:]:
                sys.stderr.write(line if line.endswith("\n") else line + "\n")
            sys.stderr.flush()
            seen = len(warnings)
            rounds = None if rounds is None else rounds - 1
            sleep(5.0)

    def report(self, verdict: Verdict) -> None:
        node, pod, namespace = (
            self.env.get("NODE_NAME", ""),
            self.env.get("POD_NAME", ""),
            self.env.get("POD_NAMESPACE", ""),
        )
        self.say(f"fabric check ({self.mode}): {verdict.state}: {verdict.reason}")
        if verdict.state == UNKNOWN:
            return
        name = "fabric_fallback" if verdict.failed else "fabric_ok"
        job_signal.emit(name, self.job, namespace, 1, node=node, pod=pod, state=verdict.state, reason=verdict.reason)
        if not verdict.failed:
            return
        acts = "stopping the worker (fabric: enforce)" if self.mode == "enforce" else "the job goes on (fabric: warn)"
        if pod:
            kube_api.tried(
                "record the fabric Event",
                kube_api.event,
                self.env,
                "Pod",
                pod,
                "FabricFallback" if verdict.state == FALLBACK else "FabricDeadInterface",
                f"node {node}: {verdict.reason}; {acts}",
            )
        if self.mode == "enforce":
            self.failure = f"fabric check failed on node {node or '?'}: {verdict.reason}"
