"""The fabric check of an MPI job, in its launcher (docs/performance.md, "MPI jobs"). Standard library only; shipped
in the job's guard ConfigMap beside fabric_check.py (jobs/resilience.py) and run as the launcher's command:

    mpi_fabric.py --fabric enforce|warn --efa-interfaces N --hosts H --job NAME --mpirun PATH -- <mpirun ...>

Why the launcher: the ranks start through the workers' sshd (mpi-operator v2), without the pod's env, but mpirun
forwards every rank's stdout and stderr to its own (Open MPI mpirun(1), "Standard I/O"), so the launcher sees all
ranks' NCCL lines. Each carries NCCL's own prefix ``<host>:<pid>:<tid> [<local GPU>] NCCL INFO ...`` (NCCL
src/debug.cc, ncclDebugLog: hostname up to its first dot, pid, tid, cudaDev), behind mpirun's
``[<job>,<rank>]<stdout>:`` when ``--tag-output`` is on (Open MPI mpirun(1), --tag-output). The lines are grouped by
that host and fabric_check.decide gives one verdict per host.

The counters: the ranks' pods cannot be read from the launcher, so once NCCL has chosen its network on every host it
runs a second, one-shot mpirun with one process per node (``--map-by ppr:1:node``, the same hostfile and ssh path)
that prints each EFA device's ``hw_counters/*_bytes``, twice, COUNTER_SECONDS apart. The workers run sshd only, so
there is no guard of theirs to ask.

enforce: a failed host stops mpirun (SIGTERM to its group, SIGKILL after 30 s), the launcher exits 78 with the reason
as its termination message and a Warning Event on its pod; warn: the signal line and the Event, the job goes on.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

import fabric_check as fc
import job_signal
import kube_api

FABRIC_EXIT = 78  # as the progress guard's (sysexits.h EX_CONFIG)
PREFIX = "[gputraining-mpi-fabric]"
TERMINATION_LOG = "/dev/termination-log"
HOST_LINE = re.compile(r"^(?P<host>[^\s:\[]+):\d+:\d+ \[\d+\] NCCL ")
COUNTER_TAG = "gputraining-efa-counter"
ANY_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>: ?")  # Open MPI's --tag-output prefix, anywhere in a line
STOP_GRACE = 30.0


def host_of(line: str) -> str | None:
    """The host of an NCCL line (NCCL's own prefix, after mpirun's --tag-output one), or None."""
    match = HOST_LINE.match(fc.MPI_PREFIX.sub("", line.strip()))
    return match.group("host") if match else None


def by_host(lines: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in lines:
        host = host_of(line)
        if host is not None:
            out.setdefault(host, []).append(line)
    return out


def chosen_hosts(lines: list[str]) -> list[str]:
    """The hosts whose NCCL lines already name a network choice."""
    return sorted(h for h, own in by_host(lines).items() if fc.read_network(own).seen)


def counter_script(root: str) -> str:
    """What each node runs (sh): ``<tag> <host> answered``, then one line per byte counter, ``<tag> <host> <file>
    <value>``."""
    return (
        f'h=$(hostname); h=${{h%%.*}}; echo "{COUNTER_TAG} $h answered"; '
        f"for f in {root}/*/ports/*/hw_counters/*_bytes; do "
        f'[ -r "$f" ] && echo "{COUNTER_TAG} $h $f $(cat "$f")"; done; true'
    )


def counter_command(mpirun: str, hosts: int, root: str) -> list[str]:
    return [
        mpirun,
        "--allow-run-as-root",
        "-np",
        str(hosts),
        "--map-by",
        "ppr:1:node",
        "--bind-to",
        "none",
        "/bin/sh",
        "-c",
        counter_script(root),
    ]


def parse_counters(text: str, root: str) -> dict[str, dict[str, int]]:
    """Host -> device -> the sum of its ports' byte counters, from the counter mpirun's output (a host that answered
    without EFA devices: an empty dict; one that did not answer: absent)."""
    out: dict[str, dict[str, int]] = {}
    top = root.rstrip("/") + "/"
    for line in text.splitlines():
        parts = fc.MPI_PREFIX.sub("", line.strip()).split()
        if len(parts) == 3 and parts[0] == COUNTER_TAG and parts[2] == "answered":
            out.setdefault(parts[1], {})
            continue
        if len(parts) != 4 or parts[0] != COUNTER_TAG or not parts[2].startswith(top) or not parts[3].isdigit():
            continue
        device = parts[2][len(top) :].split("/")[0]
        devices = out.setdefault(parts[1], {})
        devices[device] = devices.get(device, 0) + int(parts[3])
    return out


def own_or_job(host: str, groups: dict[str, list[str]], lines: list[str]) -> list[str]:
    """A host's own NCCL lines, or, when they name no network (NCCL printed less there, or nothing), the whole job's:
    the ranks of one communicator use one network, so the others' choice stands for it and its counters decide."""
    own = groups.get(host, [])
    return own if fc.read_network(own).seen else lines


def host_verdicts(
    lines: list[str],
    before: dict[str, dict[str, int]],
    after: dict[str, dict[str, int]],
    expected: int,
    seconds: float,
) -> dict[str, fc.Verdict]:
    """One verdict per host that printed NCCL lines or answered the counter run (fabric_check.decide); a host missing
    from either reading (the counter run failed there) is judged by the lines alone, never failed for it."""
    groups = by_host(lines)
    out = {}
    for host in sorted(set(groups) | set(before) | set(after)):
        own = own_or_job(host, groups, lines)
        if host in before and host in after:
            out[host] = fc.decide(own, before[host], after[host], expected, seconds)
        else:
            out[host] = by_lines(own, "its EFA counters could not be read")
    return out


def by_lines(lines: list[str], why: str) -> fc.Verdict:
    verdict = fc.network_verdict(fc.read_network(lines))
    return verdict or fc.Verdict(fc.OK, f"NCCL chose EFA ({why})")


def lines_only(lines: list[str]) -> dict[str, fc.Verdict]:
    """Per host, what the lines alone say (the run ended before the counters could be read)."""
    groups = by_host(lines)
    why = "the run ended before its counters were read"
    return {host: by_lines(own_or_job(host, groups, lines), why) for host in sorted(groups)}


class LauncherCheck:
    """mpirun under the check: its output passed on and read, the verdicts reported, enforce acted on."""

    def __init__(self, args: argparse.Namespace, env: dict, say):
        self.args, self.env, self.say = args, env, say
        self.root = env.get("GPUTRAINING_INFINIBAND", fc.INFINIBAND)
        self.window = float(env.get("GPUTRAINING_FABRIC_WINDOW", fc.WINDOW_SECONDS))
        self.seconds = float(env.get("GPUTRAINING_FABRIC_COUNTER_SECONDS", fc.COUNTER_SECONDS))
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.verdicts: dict[str, fc.Verdict] | None = None
        self.failure: str | None = None

    def feed(self, line: str) -> None:
        if self.verdicts is None and "NCCL" in line:
            # Open MPI's --tag-output tags what it forwards, and under load a tag can land inside a line (seen with
            # Open MPI 4.1 in tests/integration/test_mpi_fabric_openmpi.py): each tag starts a line of its own.
            pieces = [piece for piece in ANY_TAG.split(line) if piece.strip()]
            with self.lock:
                self.lines += pieces

    def seen(self) -> list[str]:
        with self.lock:
            return list(self.lines)

    def counters(self) -> dict[str, dict[str, int]]:
        cmd = counter_command(self.args.mpirun, self.args.hosts, self.root)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            self.say(f"fabric check: could not read the EFA counters ({err})")
            return {}
        return parse_counters(done.stdout, self.root)

    def run(self, sleep, clock) -> dict[str, fc.Verdict]:
        deadline, first = clock() + self.window, None
        while clock() < deadline:
            chosen = chosen_hosts(self.seen())
            first = first if first is not None or not chosen else clock()
            # NCCL's init is collective: the other hosts print their choice within seconds of the first one's (or
            # print less; the job's choice then stands for them, own_or_job).
            if len(chosen) >= self.args.hosts or (first is not None and clock() - first >= self.seconds):
                break
            sleep(1.0)
        before = self.counters()
        sleep(self.seconds)
        after = self.counters()
        verdicts = host_verdicts(self.seen(), before, after, self.args.efa_interfaces, self.seconds)
        self.finish(verdicts)
        return verdicts

    def finish(self, verdicts: dict[str, fc.Verdict]) -> None:
        with self.lock:  # once: the check's thread, or the main one when mpirun ended first
            if self.verdicts is not None:
                return
            self.verdicts = verdicts
        if not verdicts:
            self.say(f"fabric check ({self.args.fabric}): unknown: no host printed NCCL's network choice")
        for host, verdict in verdicts.items():
            self.report(host, verdict)

    def report(self, host: str, verdict: fc.Verdict) -> None:
        mode, env = self.args.fabric, self.env
        self.say(f"fabric check ({mode}): {host}: {verdict.state}: {verdict.reason}")
        if verdict.state == fc.UNKNOWN:
            return
        name = "fabric_fallback" if verdict.failed else "fabric_ok"
        pod, namespace = env.get("POD_NAME", ""), env.get("POD_NAMESPACE", "")
        job_signal.emit(
            name, self.args.job, namespace, 1, node=host, pod=pod, state=verdict.state, reason=verdict.reason
        )
        if not verdict.failed:
            return
        acts = "stopping the job (fabric: enforce)" if mode == "enforce" else "the job goes on (fabric: warn)"
        reason = "FabricFallback" if verdict.state == fc.FALLBACK else "FabricDeadInterface"
        if pod:
            kube_api.tried(
                "record the fabric Event", kube_api.event, env, "Pod", pod, reason, f"{host}: {verdict.reason}; {acts}"
            )
        if mode == "enforce" and self.failure is None:
            self.failure = f"fabric check failed on {host}: {verdict.reason}"


def say(text: str) -> None:
    sys.stderr.write(f"{PREFIX} {text}\n")
    sys.stderr.flush()


def pump(source, sink, check: LauncherCheck) -> None:
    for line in iter(source.readline, ""):
        sink.write(line)
        sink.flush()
        check.feed(line)


def stop(child: subprocess.Popen, text: str) -> int:
    say(text)
    try:
        with open(TERMINATION_LOG, "w") as out:
            out.write(f"{PREFIX} {text}\n")
    except OSError:
        pass
    for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            break
        try:
            child.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    return FABRIC_EXIT


def supervise(args: argparse.Namespace, env: dict) -> int:
    check = LauncherCheck(args, env, say)
    child = subprocess.Popen(
        args.command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    pumps = [
        threading.Thread(target=pump, args=(child.stdout, sys.stdout, check), daemon=True),
        threading.Thread(target=pump, args=(child.stderr, sys.stderr, check), daemon=True),
    ]
    for thread in pumps:
        thread.start()
    threading.Thread(target=check.run, args=(time.sleep, time.monotonic), daemon=True).start()
    while child.poll() is None:
        if check.failure is not None:
            return stop(child, f"{check.failure}. Stopping the job (exit {FABRIC_EXIT})")
        time.sleep(0.5)
    for thread in pumps:
        thread.join(timeout=5)
    # mpirun ended before the counters were read: the lines' verdicts are reported, the job's own exit code stands
    # (a finished job is not failed afterwards: the launcher's retry would run it all again).
    check.finish(lines_only(check.seen()))
    return child.returncode


def parse(argv: list) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mpi_fabric.py")
    parser.add_argument("--fabric", choices=("enforce", "warn"), required=True)
    parser.add_argument("--efa-interfaces", type=int, default=0)
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--job", default="")
    parser.add_argument("--mpirun", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no command after --")
    return args


def main(argv: list | None = None) -> int:
    return supervise(parse(sys.argv[1:] if argv is None else argv), dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
