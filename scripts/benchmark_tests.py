"""Benchmark: where the fast test suite's time goes. Prints figures; asserts nothing.

    .venv/bin/python scripts/benchmark_tests.py [--workers auto] [--top 20] [pytest args]

Runs the suite twice, one run after the other: in one process (``-n 0``), with ``--durations=0``,
for the breakdown; then as ``scripts/test.sh`` runs it (``-n auto``: one worker per core, at most
8), for the wall time users see. Prints both wall times, the time per module in the one-process run
(setup, which holds the shared plans and other fixtures, and calls) and what is left for pytest's
start-up and collection. Run it after ``bash scripts/test.sh`` has set up ``.venv`` and ``.tools``.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(tests/[^:]+)::")
SUMMARY = re.compile(r"^=*\s*(\d+ passed.*?) in [\d.]+s", re.MULTILINE)


def run(args: list[str]) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "pytest", "--ignore=tests/integration", "-q", "-p", "no:cacheprovider", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.stdout.write(proc.stdout[-4000:])
        raise SystemExit(f"pytest exited {proc.returncode}: {' '.join(cmd)}")
    return wall, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="auto", help="the second run's -n (default: auto, as scripts/test.sh)")
    parser.add_argument("--top", type=int, default=20, help="modules listed (default: 20)")
    args, rest = parser.parse_known_args()

    load_before = os.getloadavg()
    one_wall, out = run(["-n", "0", "--durations=0", "--durations-min=0", *rest])
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
    many_wall, _ = run(["-n", args.workers, "--maxprocesses", "8", *rest])
    load_after = os.getloadavg()

    measured = sum(sum(c.values()) for c in per_module.values())
    print(f"one process (-n 0): {one_wall:.1f} s wall ({summary.group(1) if summary else '?'})")
    print(
        f"  in tests' setup, calls and teardown: {measured:.1f} s; start-up, collection and the rest: {one_wall - measured:.1f} s"
    )
    print(f"-n {args.workers} (as scripts/test.sh runs it): {many_wall:.1f} s wall, {one_wall / many_wall:.2f}x faster")
    print()
    print(f"{'seconds':>8} {'setup':>7} {'calls':>7} {'tests':>6}  module (one-process run)")
    ranked = sorted(per_module.items(), key=lambda kv: -sum(kv[1].values()))
    for name, c in ranked[: args.top]:
        print(f"{sum(c.values()):>8.1f} {c['setup']:>7.1f} {c['call']:>7.1f} {tests[name]:>6}  {name}")
    rest_time = sum(sum(c.values()) for _, c in ranked[args.top :])
    print(f"{rest_time:>8.1f} {'':>7} {'':>7} {'':>6}  the other {max(0, len(ranked) - args.top)} modules")
    print()
    print(
        f"load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; after: {', '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
