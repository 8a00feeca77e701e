"""Benchmark: how long the offline plan of a stack takes. Prints figures; asserts nothing.

    .venv/bin/python scripts/benchmark_plan.py [--stack dev] [--runs 5]

The first run includes importing the Pulumi SDKs; later runs in the same process show the cost of
the program itself (config validation, the mocks, recording every registration).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    t0 = time.perf_counter()
    from infra import plan  # noqa: E402  (import cost is part of the first figure)

    t_import = time.perf_counter() - t0
    times = []
    resources = 0
    for _ in range(args.runs):
        start = time.perf_counter()
        _, result = plan.plan(args.stack)
        times.append(time.perf_counter() - start)
        resources = len(result.records)
    print(f"stack {args.stack}: {resources} resources registered")
    print(f"import of the program and SDKs: {t_import:.2f} s")
    print(f"offline plan, first run:  {times[0]:.2f} s")
    if len(times) > 1:
        rest = times[1:]
        print(f"offline plan, later runs: median {statistics.median(rest):.2f} s, min {min(rest):.2f} s, max {max(rest):.2f} s ({len(rest)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
