"""Benchmark: the first set-up on a fresh clone, and the first plans after it.

    .venv/bin/python scripts/benchmark_setup.py [--keep]

Clones the repository's HEAD (committed work only) into a temporary folder and times, one after the other:

1. ``bash scripts/bootstrap.sh``: creating ``.venv`` and installing requirements-dev.txt into it, with pip's
   cache off (``PIP_NO_CACHE_DIR=1``), so every package is downloaded as on a fresh machine;
2. ``bash scripts/plan.sh dev``, the first plan: helm and kubectl are linked from this checkout's ``.tools``
   (their download is not timed: it needs the internet, which a build machine may not have), the Helm renders
   and the plan cache empty;
3. ``bash scripts/plan.sh dev`` again: the plan as every later run sees it (renders cached).

It prints each wall time with the machine line (scripts/machine.py: cores, CPU model, load average) before and
after: on a shared machine other work slows every step. docs/development.md ("Figures") quotes its output.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.stdout.write(done.stdout[-4000:])
        raise SystemExit(f"exited {done.returncode}: {' '.join(cmd)} (in {cwd})")
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    args = parser.parse_args(argv)
    tools = ROOT / ".tools"
    if not (tools / "bin" / "helm").exists():
        raise SystemExit("run bash scripts/plan.sh here first: the benchmark links this checkout's .tools")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    tmp = Path(tempfile.mkdtemp(prefix="gpu-training-setup-"))
    clone = tmp / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    # The interpreter the checkout's .venv was made from, as bootstrap.sh's PYTHON.
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "PYTHON": getattr(sys, "_base_executable", sys.executable)}
    env.pop("VIRTUAL_ENV", None)
    print(f"set-up of a fresh clone of {head.strip()} (pip's cache off; .tools linked from this checkout):")
    print(f"  before: {machine.describe()}", flush=True)
    try:
        bootstrap = timed(["bash", "scripts/bootstrap.sh"], clone, env)
        print(f"  bash scripts/bootstrap.sh (.venv, every package downloaded): {bootstrap:.1f} s wall", flush=True)
        (clone / ".tools").symlink_to(tools)
        first = timed(["bash", "scripts/plan.sh", "dev"], clone, env)
        print(f"  bash scripts/plan.sh dev, first plan (renders and plan cache empty): {first:.1f} s wall", flush=True)
        second = timed(["bash", "scripts/plan.sh", "dev"], clone, env)
        print(f"  bash scripts/plan.sh dev, second plan: {second:.1f} s wall")
        print(f"  set-up and first plan in all: {bootstrap + first:.1f} s wall")
    finally:
        print(f"  after: {machine.describe()}")
        if args.keep:
            print(f"  clone kept: {clone}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
