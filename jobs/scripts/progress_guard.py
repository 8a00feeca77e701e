#!/usr/bin/env python3
"""The progress guard: the stack runs every worker of a job with ``progress`` or ``checkpoints`` under it
(docs/hangs-and-resume.md). Python 3.8+ standard library only; shipped in the job's ConfigMap
(``jobs/resilience.py``) and started as the worker's command:

    python3 progress_guard.py [--log-pattern RE | --heartbeat-file PATH] [--startup-seconds N]
        [--interval-seconds N] [--checkpoint-dir DIR] [--same-python] [--job NAME]
        [--fabric enforce|warn|off --efa-interfaces N] [--slow-node-factor K [--slow-node-windows M]
        [--slow-node-window SECONDS] [--slow-node-restart]] -- COMMAND [ARGS...]

It

- offers the newest complete checkpoint: with ``--checkpoint-dir``, the child gets ``RESUME_FROM``, the
  path of the newest directory under DIR that holds a ``COMPLETE`` file (newest = last in natural order
  of the names: ``step-99`` < ``step-100``); a directory without it (a save cut off mid-write) is never
  offered. Under torchrun the first rank chooses for all: it writes its choice into DIR
  (``.resume-choice-<digest of the round>``) and the other ranks of the same start take it;
- watches progress in the first rank of the job only (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or
  PADDLE_TRAINER_ID is 0, or none is set): a line of the child's output matching ``--log-pattern``, or a
  newer modification time of ``--heartbeat-file``. With no sign for ``--startup-seconds`` after the
  start, or for ``--interval-seconds`` after the last sign, it writes why to stderr and to the
  container's termination message, stops the child (SIGTERM to its process group, SIGKILL after
  STOP_SECONDS) and exits 124, so that the job's own restart machinery acts: torchrun restarts the
  worker group (within maxRestarts), MPI and Paddle pods fail and are retried (within backoffLimit);
- passes SIGTERM on to the child (under torchrun the child already has it: torchrun signals the
  worker's whole process group) and exits with the child's code, so a worker can save on SIGTERM.

With ``--fabric enforce|warn`` the node's first local rank also runs the fabric check (fabric_check.py: did NCCL
use EFA, did the EFA counters move; ``enforce`` stops the child, exit 78); with ``--slow-node-factor`` every rank
reports its step times and the first rank finds slow nodes (slow_node.py). Both report through signal lines
(job_signal.py) and the Kubernetes API (kube_api.py), shipped beside it; docs/performance.md.

``--same-python`` runs COMMAND with this interpreter (``sys.executable -u COMMAND...``): torchrun starts
the guard as it would start the training script, and the guard starts the script the same way.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its siblings in the ConfigMap, however loaded
import fabric_check  # noqa: E402
import slow_node  # noqa: E402

HANG_EXIT = 124  # as timeout(1): the command ran out of time
STOP_SECONDS = 10.0  # from SIGTERM to SIGKILL when the guard stops a hung child
MARKER = "COMPLETE"  # written last into a checkpoint directory: the checkpoint is whole
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PADDLE_TRAINER_ID")
# The rank within its node: torchrun's, Open MPI's, MPICH/Intel MPI's. The node's first local rank runs the
# node's checks (the fabric check).
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
FABRIC_EXIT = 78  # sysexits.h EX_CONFIG: the node's fabric is not what the job needs (fabric: enforce)
TERMINATION_LOG = "/dev/termination-log"
PREFIX = "progress-guard:"
# One choice of RESUME_FROM per start of the job's ranks: the first rank's, written into the checkpoint folder
# (CHOICE_PREFIX + a digest of ROUND_VARS) for the others, who wait for it up to CHOICE_WAIT seconds. On a
# shared file system (EFS, FSx) each pod's client caches listings and attributes for a while, so ranks that
# looked on their own could see different newest checkpoints.
CHOICE_PREFIX = ".resume-choice-"
CHOICE_WAIT = 180.0  # beyond EFS/NFS's longest attribute cache (acdirmax, 60 s)
CHOICE_FRESH = 600.0  # a choice older than this at a rank's start is an earlier round's
CHOICE_KEEP = 24 * 3600.0  # the first rank removes choices older than this
# What every rank of one start shares and the next start does not: under torchrun, the run id and the
# address and port of the workers' store, which the first rank's agent takes afresh (a free port) at every
# rendezvous round (torch 2.13 torch/distributed/elastic/rendezvous/api.py, RendezvousStoreInfo.build).
ROUND_VARS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")


def natural_key(name: str) -> list:
    """``step-99`` before ``step-100``: digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]


def newest_complete(directory: str) -> tuple[str | None, list[str]]:
    """(the newest complete checkpoint under ``directory`` or None, the names passed over as incomplete)."""
    try:
        names = sorted(os.listdir(directory), key=natural_key)
    except FileNotFoundError:
        return None, []
    incomplete: list[str] = []
    for name in reversed(names):
        path = os.path.join(directory, name)
        if not os.path.isdir(path) or name.startswith("."):
            continue
        if os.path.isfile(os.path.join(path, MARKER)):
            return path, incomplete
        incomplete.append(name)
    return None, incomplete


def round_key(env: dict) -> str | None:
    """What identifies this start of the job's ranks (ROUND_VARS), or None outside torchrun."""
    if not all(env.get(var) for var in ROUND_VARS):
        return None
    return "/".join(env[var] for var in ROUND_VARS)


def choice_path(directory: str, key: str) -> str:
    return os.path.join(directory, CHOICE_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16])


def write_choice(directory: str, key: str, newest: str | None) -> None:
    """The first rank's choice, for the others (written whole: a temporary file renamed), and old choices gone."""
    path = choice_path(directory, key)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as out:
        json.dump({"key": key, "resume_from": newest, "written": time.time()}, out)
    os.replace(temporary, path)
    for name in os.listdir(directory):
        old = os.path.join(directory, name)
        if name.startswith(CHOICE_PREFIX) and old != path:
            try:
                if time.time() - os.stat(old).st_mtime > CHOICE_KEEP:
                    os.remove(old)
            except OSError:
                pass


def read_choice(directory: str, key: str, started: float) -> tuple[bool, str | None]:
    """(found, the first rank's choice) for this start: a choice of this key written since CHOICE_FRESH before
    ``started`` (wall time), whose checkpoint this pod already sees whole."""
    try:
        with open(choice_path(directory, key)) as source:
            choice = json.load(source)
    except (OSError, ValueError):
        return False, None
    if choice.get("key") != key or float(choice.get("written", 0)) < started - CHOICE_FRESH:
        return False, None
    chosen = choice.get("resume_from")
    if chosen is not None and not os.path.isfile(os.path.join(chosen, MARKER)):
        return False, None
    return True, chosen


def await_choice(directory: str, key: str, started: float, wait: float | None = None) -> tuple[bool, str | None]:
    """The first rank's choice, waited for up to ``wait`` seconds (CHOICE_WAIT, read when called)."""
    deadline = time.monotonic() + (CHOICE_WAIT if wait is None else wait)
    while True:
        found, chosen = read_choice(directory, key, started)
        if found or time.monotonic() >= deadline:
            return found, chosen
        time.sleep(0.2)


def watched(env: dict) -> bool:
    """Whether this process is the job's first rank (the one whose progress the guard watches)."""
    for var in RANK_VARS:
        value = env.get(var)
        if value is not None and value.strip() != "":
            return value.strip() == "0"
    return True


def rank_of(env: dict) -> str:
    """This process's rank in the job (RANK_VARS), "0" when none is set."""
    return next((env[v].strip() for v in RANK_VARS if env.get(v, "").strip()), "0")


def node_leader(env: dict) -> bool:
    """Whether this process is its node's first local rank (or nothing says otherwise)."""
    for var in LOCAL_RANK_VARS:
        value = env.get(var)
        if value is not None and value.strip() != "":
            return value.strip() == "0"
    return True


def overdue(now: float, started: float, last_sign: float | None, startup: float, interval: float) -> str | None:
    """Why the worker counts as hung at ``now``, or None while it is within its window."""
    if last_sign is None:
        if now - started > startup:
            return f"no progress within {startup:g}s of the start (startupSeconds)"
        return None
    if now - last_sign > interval:
        return f"no progress for {now - last_sign:.1f}s since the last sign (intervalSeconds {interval:g})"
    return None


def parse(argv: list) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="progress_guard")
    sign = parser.add_mutually_exclusive_group()
    sign.add_argument("--log-pattern", help="a line of output matching this regex is progress")
    sign.add_argument("--heartbeat-file", help="a newer modification time of this file is progress")
    parser.add_argument("--startup-seconds", type=float, default=1800.0)
    parser.add_argument("--interval-seconds", type=float, default=600.0)
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--same-python", action="store_true", help="run COMMAND with this interpreter")
    parser.add_argument("--job", default="", help="the job's name, in the signal lines")
    parser.add_argument("--fabric", choices=("enforce", "warn", "off"), default="off")
    parser.add_argument("--efa-interfaces", type=int, default=0, help="the EFA devices the pod requested")
    parser.add_argument("--slow-node-factor", type=float, help="on: a node this many times slower than the others")
    parser.add_argument("--slow-node-windows", type=int, default=3, help="for this many windows in a row")
    parser.add_argument("--slow-node-window", type=float, default=300.0, help="of this many seconds")
    parser.add_argument("--slow-node-restart", action="store_true", help="delete the slow node's pod")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command after --")
    return args


def say(text: str) -> None:
    sys.stderr.write(f"{PREFIX} {text}\n")
    sys.stderr.flush()


def terminate_message(text: str) -> None:
    """The container's termination message (``kubectl describe pod``: Last State, Message)."""
    try:
        with open(TERMINATION_LOG, "w") as out:
            out.write(f"{PREFIX} {text}\n")
    except OSError:
        pass


class Guard:
    def __init__(self, args: argparse.Namespace, env: dict):
        self.args = args
        self.env = env
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.last_sign: float | None = None
        self.last_wall: float | None = None  # the heartbeat file's last modification time seen
        self.pattern = re.compile(args.log_pattern) if args.log_pattern else None
        self.watching = bool(args.log_pattern or args.heartbeat_file) and watched(env)
        self.fabric: fabric_check.FabricWatch | None = None
        if args.fabric != "off" and node_leader(env):
            self.fabric = fabric_check.FabricWatch(args.fabric, args.efa_interfaces, env, args.job, say)
        self.slow: slow_node.Reporter | None = None
        if args.slow_node_factor is not None:
            self.slow = slow_node.Reporter(self.slow_options(), env, say, rank_of(env))
        self.child: subprocess.Popen | None = None
        self.pumps: list[threading.Thread] = []  # the threads that copy the child's output

    def slow_options(self) -> dict:
        a = self.args
        window, windows, factor = a.slow_node_window, a.slow_node_windows, a.slow_node_factor
        return {"job": a.job, "factor": factor, "windows": windows, "window": window, "restart": a.slow_node_restart}

    def sign(self) -> None:
        self.last_sign = time.monotonic()

    def pump(self, source, sink) -> None:
        """Copy the child's output line by line, noting lines that match the pattern."""
        for raw in iter(source.readline, b""):
            sink.buffer.write(raw)
            sink.flush()
            text = raw.decode("utf-8", "replace")
            if self.pattern is not None and self.pattern.search(text):
                self.sign()
            if self.fabric is not None:
                self.fabric.feed(text)

    def heartbeat(self) -> None:
        try:
            mtime = os.stat(self.args.heartbeat_file).st_mtime
        except OSError:
            return
        if mtime >= self.started_wall and (self.last_wall is None or mtime > self.last_wall):
            self.last_wall = mtime
            self.sign()

    def start(self) -> subprocess.Popen:
        command = list(self.args.command)
        if self.args.same_python:
            command = [sys.executable, "-u", *command]
        env = dict(self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")  # progress lines reach the guard as they are written
        if self.args.checkpoint_dir:
            env.pop("RESUME_FROM", None)
            newest = self.resume_from()
            if newest is not None:
                env["RESUME_FROM"] = newest
        if self.fabric is not None:
            env.update(self.fabric.child_env())
        if self.slow is not None:
            env.update(self.slow.child_env())
        reads_nccl = self.fabric is not None and self.fabric.pattern is None  # the job's own NCCL_DEBUG: its output
        pipe = subprocess.PIPE if (self.watching and self.pattern is not None) or reads_nccl else None
        self.child = subprocess.Popen(command, env=env, stdout=pipe, stderr=pipe)
        if pipe is not None:
            for source, sink in ((self.child.stdout, sys.stdout), (self.child.stderr, sys.stderr)):
                pump = threading.Thread(target=self.pump, args=(source, sink), daemon=True)
                pump.start()
                self.pumps.append(pump)
        return self.child

    def resume_from(self) -> str | None:
        """The newest complete checkpoint as the first rank sees it: it chooses and writes its choice down, the
        other ranks of the same start (round_key) wait for it; outside torchrun each rank looks for itself."""
        directory = self.args.checkpoint_dir
        os.makedirs(directory, exist_ok=True)
        key = round_key(self.env)
        if key is not None and not watched(self.env):
            found, chosen = await_choice(directory, key, self.started_wall)
            if found:
                return chosen
            say(f"no choice of the first rank within {CHOICE_WAIT:g}s ({choice_path(directory, key)}): looking myself")
        newest, skipped = newest_complete(directory)
        if watched(self.env):
            if key is not None:
                write_choice(directory, key, newest)
            passed = f"; passed over (no {MARKER} file): {', '.join(skipped)}" if skipped else ""
            say(
                f"resuming from {newest}{passed}"
                if newest
                else f"no complete checkpoint in {directory}: starting fresh{passed}"
            )
        return newest

    def stop_hung(self, why: str) -> int:
        sign = (
            f"a line matching /{self.args.log_pattern}/" if self.pattern else f"a touch of {self.args.heartbeat_file}"
        )
        text = f"worker hung: {why}; progress is {sign}. Stopping it (exit {HANG_EXIT}) so that the job restarts it"
        return self.stop(text, HANG_EXIT)

    def stop(self, text: str, code: int) -> int:
        """Say why, leave it as the termination message, stop the child and its group; exit ``code``."""
        child = self.child
        assert child is not None
        say(text)
        terminate_message(text)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_group(child.pid)
        try:
            child.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        self.drain()
        return code

    def fabric_check(self) -> None:
        assert self.fabric is not None
        self.fabric.run(time.sleep, time.monotonic)
        self.fabric.relay_warnings(time.sleep)

    def drain(self) -> None:
        """Let the pumps pass on what the child wrote last (its own children may hold the pipes: not forever)."""
        for pump in self.pumps:
            pump.join(5.0)

    def run(self) -> int:
        child = self.start()
        forward = "TORCHELASTIC_RUN_ID" not in self.env  # torchrun signals the whole group itself

        def on_term(signum, frame) -> None:
            if forward and child.poll() is None:
                child.send_signal(signum)

        signal.signal(signal.SIGTERM, on_term)
        if self.fabric is not None:
            threading.Thread(target=self.fabric_check, daemon=True).start()
        if self.slow is not None:
            report = (self.slow.options, self.env, say, self.slow.rank, watched(self.env), self.slow, threading.Event())
            threading.Thread(target=slow_node.run, args=report, daemon=True).start()
        tick = max(0.05, min(1.0, self.args.interval_seconds / 20, self.args.startup_seconds / 20))
        while True:
            try:
                code = child.wait(tick)
                self.drain()
                return code if code >= 0 else 128 - code
            except subprocess.TimeoutExpired:
                pass
            if self.fabric is not None and self.fabric.failure is not None:
                return self.stop(f"{self.fabric.failure}. Stopping it (exit {FABRIC_EXIT})", FABRIC_EXIT)
            if not self.watching:
                continue
            if self.args.heartbeat_file:
                self.heartbeat()
            why = overdue(
                time.monotonic(), self.started, self.last_sign, self.args.startup_seconds, self.args.interval_seconds
            )
            if why is not None:
                return self.stop_hung(why)


def stop_group(pid: int) -> None:
    """SIGTERM to the child and, when the guard leads its process group (as a torchrun worker or a
    container's PID 1), to every process of it (the child's own workers): the guard ignores it."""
    try:
        os.kill(pid, signal.SIGTERM)
        if os.getpgid(0) == os.getpid():
            os.killpg(os.getpid(), signal.SIGTERM)
    except ProcessLookupError:
        pass


def main(argv: list | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    return Guard(args, dict(os.environ)).run()


if __name__ == "__main__":
    sys.exit(main())
