"""Benchmark: the test command's time against its target, and where the fast suite's time goes.

    .venv/bin/python scripts/benchmark_tests.py [--breakdown] [--top 20] [pytest args]

The target (issue 25): the test command, ``bash scripts/test.sh``, runs in under 2 minutes the second
time on a fresh clone. The benchmark clones the repository's HEAD (committed work only) into a temp
folder, links this checkout's ``.venv`` and ``.tools`` into it (what the first run sets up: the
packages and helm/kubectl, minutes of downloads that are not the target), and runs the command twice,
one run after the other: the first writes what a first run writes in the clone (bytecode, mypy's
cache, the plan cache in .cache/), the second is the figure. It prints both wall times and the second
against the target: "within target" or "MISSED".

With ``--breakdown`` it first runs the suite of this checkout in one process (``-n 0``) with
``--durations=0``: the time per module (setup, which holds the shared plans and other fixtures, and
calls) and what is left for pytest's start-up and collection. Run it after ``bash scripts/test.sh``
has set up ``.venv`` and ``.tools``. The figures come with the load average before and after: on a
shared machine other work slows every run.

Each run is also timed in CPU seconds (user + system of the command and every process it started,
``getrusage(RUSAGE_CHILDREN)``), which other work on the machine changes far less than the wall time:
on the 2-core machine the second run fits in the target at idle when its CPU time is under
SECOND_RUN_CPU_TARGET: the target's seconds times the cores a second run keeps busy on average at idle
(CORES_BUSY_AT_IDLE, measured; less than two: start-up, the last tests, waits). Each run also prints the
cores it kept busy (CPU / wall): well under CORES_BUSY_AT_IDLE means other work took the cores, or the
suite waits more than it did.
The runs write bytecode as a user's do: PYTHONDONTWRITEBYTECODE, if set here, is not passed on (with
it every run compiles the project and pytest rewrites every test module again, in each process).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parent.parent
DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(tests/[^:]+)::")
SUMMARY = re.compile(r"^=*\s*(\d+ passed.*?) in [\d.]+s", re.MULTILINE)
# The target: the test command's second run on a fresh clone, in seconds.
SECOND_RUN_TARGET = 120.0
# The cores a second run keeps busy on average at idle on the 2-core machine, measured (4acba95, load 1.75
# before: 201.3 s of CPU in 105.0 s). It was taken as 1.67 before (200 s in 120 s) while some tests held a
# worker idle for seconds (socketserver's shutdown poll, the MPI launcher's replayed runs).
CORES_BUSY_AT_IDLE = 1.9
# The second run's CPU seconds that two idle cores get through in SECOND_RUN_TARGET (issue 35).
SECOND_RUN_CPU_TARGET = SECOND_RUN_TARGET * CORES_BUSY_AT_IDLE
# What a first run of the test command sets up in a clone and the benchmark takes from this checkout.
SET_UP = (".venv", ".tools")
REQUIREMENTS = ("requirements.txt", "requirements-dev.txt")  # as scripts/bootstrap.sh hashes them


@dataclass(frozen=True)
class Timed:
    wall: float
    cpu: float  # user + system seconds of the command and every process it started
    out: str


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list[str], cwd: Path) -> Timed:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start, cpu = time.perf_counter(), children_cpu()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.stdout.write(proc.stdout[-4000:])
        raise SystemExit(f"exited {proc.returncode}: {' '.join(cmd)} (in {cwd})")
    return Timed(wall, children_cpu() - cpu, proc.stdout)


def verdict(figure: float, target: float) -> str:
    return "within target" if figure < target else "MISSED"


def breakdown(top: int, rest: list[str]) -> None:
    """The suite of this checkout in one process, with every test's duration, per module."""
    cmd = [sys.executable, "-m", "pytest", "--ignore=tests/integration", "-q", "-p", "no:cacheprovider"]
    one = run([*cmd, "-n", "0", "--durations=0", "--durations-min=0", *rest], ROOT)
    one_wall, out = one.wall, one.out
    per_module: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: {"setup": 0.0, "call": 0.0, "teardown": 0.0}
    )
    tests: collections.Counter[str] = collections.Counter()
    for line in out.splitlines():
        m = DURATION.match(line)
        if m:
            per_module[m.group(3)][m.group(2)] += float(m.group(1))
            tests[m.group(3)] += m.group(2) == "call"
    summary = SUMMARY.search(out)
    measured = sum(sum(c.values()) for c in per_module.values())
    print(f"one process (-n 0): {one_wall:.1f} s wall, {one.cpu:.1f} s CPU ({summary.group(1) if summary else '?'})")
    print(
        f"  in tests' setup, calls and teardown: {measured:.1f} s; "
        f"start-up, collection and the rest: {one_wall - measured:.1f} s"
    )
    print(f"{'seconds':>8} {'setup':>7} {'calls':>7} {'tests':>6}  module (one-process run)")
    ranked = sorted(per_module.items(), key=lambda kv: -sum(kv[1].values()))
    for name, c in ranked[:top]:
        print(f"{sum(c.values()):>8.1f} {c['setup']:>7.1f} {c['call']:>7.1f} {tests[name]:>6}  {name}")
    rest_time = sum(sum(c.values()) for _, c in ranked[top:])
    print(f"{rest_time:>8.1f} {'':>7} {'':>7} {'':>6}  the other {max(0, len(ranked) - top)} modules")
    print()


def fresh_clone_runs(rest: list[str]) -> tuple[Timed, Timed, str]:
    """The test command run twice in a fresh clone of HEAD: both runs and the second's summary."""
    with tempfile.TemporaryDirectory(prefix="benchmark-tests-") as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], check=True)
        # scripts/bootstrap.sh would install into the linked .venv if the clone's requirements differ.
        want = hashlib.sha256(b"".join((clone / f).read_bytes() for f in REQUIREMENTS)).hexdigest()
        stamp = ROOT / ".venv" / ".requirements.sha256"
        if not stamp.exists() or stamp.read_text().strip() != want:
            raise SystemExit(f"{stamp} is not for HEAD's {' and '.join(REQUIREMENTS)}: run `bash scripts/bootstrap.sh`")
        for name in SET_UP:
            (clone / name).symlink_to((ROOT / name).resolve())
        cmd = ["bash", "scripts/test.sh", *rest]
        first = run(cmd, clone)
        second = run(cmd, clone)
    summary = SUMMARY.search(second.out)
    return first, second, summary.group(1) if summary else "?"


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--breakdown", action="store_true", help="first the suite in one process, per module")
    parser.add_argument("--top", type=int, default=20, help="modules listed with --breakdown (default: 20)")
    args, rest = parser.parse_known_args()

    load_before = load()
    if args.breakdown:
        breakdown(args.top, rest)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    first, second, summary = fresh_clone_runs(rest)
    print(f"`bash scripts/test.sh` on a fresh clone of {head.stdout.strip()} ({', '.join(SET_UP)} linked):")
    print(f"  first run: {first.wall:.1f} s wall, {first.cpu:.1f} s CPU ({first.cpu / first.wall:.2f} cores busy)")
    print(
        f"  second run: {second.wall:.1f} s wall ({summary}); target under {SECOND_RUN_TARGET:.0f} s: "
        f"{verdict(second.wall, SECOND_RUN_TARGET)}"
    )
    print(
        f"  second run: {second.cpu:.1f} s CPU (user + system, every process; {second.cpu / second.wall:.2f} cores "
        f"busy); under {SECOND_RUN_CPU_TARGET:.0f} s ({SECOND_RUN_TARGET:.0f} s at the {CORES_BUSY_AT_IDLE} cores "
        f"busy at idle) for the target: {verdict(second.cpu, SECOND_RUN_CPU_TARGET)}"
    )
    print(f"load average (1, 5, 15 min) before: {load_before}")
    print(machine.describe())  # cores, CPU model and load now (scripts/machine.py)
    return 0


if __name__ == "__main__":
    sys.exit(main())
