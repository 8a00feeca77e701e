"""Benchmark: the offline plan against the floor of importing the SDK modules it uses. Prints
figures and the target's (issue 25: the plan with renders, cache warm, at most 2.0x floor*) with
"within target" or "MISSED"; asserts nothing.

    .venv/bin/python scripts/benchmark_plan.py [--stack dev] [--runs 5] [--in-process 3]

Each run starts fresh processes, one after the other (the order flips every run):

- floor: ``python -c`` that only imports the SDK modules the plan leaves loaded (``pulumi`` with
  its mocks, the ``pulumi_aws`` / ``pulumi_eks`` / ``pulumi_kubernetes`` modules the program
  touches, ``pydantic``, ``yaml``). The list is taken from ``sys.modules`` after a plan of the same
  stack in a process of its own, and the benchmark checks that the floor loads exactly those.
  ``pulumi_aws`` registers its subpackages as lazy modules that run only when first used, so the
  floor touches each one, as the program's first use does.
- floor*: the same imports, and the heap frozen at the end, as the plan command does: the
  interpreter's exit then skips a last full collection (about 0.5 s over ~300,000 objects). This
  is the import floor the plan is measured against: the same modules, the same way out.
- statements: ``python -c "import pulumi, pulumi_aws.ec2, ..."`` with the entry points only: it
  leaves ``pulumi_aws.ec2`` and the other lazy subpackages unrun, so it is lower than the floor;
  statements*: the same, with the heap frozen at the end (the lowest reading of "importing the SDK
  modules": the subpackages the program runs are not run).
- plan: ``python -m infra plan --stack STACK --out DIR``, the whole command, files included, as
  ``scripts/plan.sh STACK`` runs it: the Helm releases rendered, with the render cache warm (a
  folder of the benchmark's, filled by the warm-up run: what a second plan of the same config
  does). plan cold: the same with an empty cache each time (a first plan: every release rendered
  by helm, every operator manifest parsed, the cache written). plan -r: without renders (helm made
  unfindable: the plan of a checkout where scripts/plan.sh has not unpacked helm), cache warm.

Then every run's figures, the medians and the ratios: each plan against floor* and against
statements*. The process that lists the modules also times the plan in-process: importing the
program and the SDKs, the first plan, later plans (no renders).

Every process runs with Python's bytecode cache on, as it is by default (a PYTHONDONTWRITEBYTECODE
in the environment is dropped): the SDKs' bytecode is written when they are installed, the
project's on its first import, so that warm runs compare warm with warm. The plan command runs its
Helm renders beside the program, in processes of their own: on a busy machine it waits for them
longer, so the figures come with the load average before and after.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import machine

ROOT = Path(__file__).resolve().parent.parent
# The target (issue 25): the plan with renders, cache warm, at most this many times floor*.
PLAN_TARGET = 2.0
SDK_PACKAGES = ("pulumi", "pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "pydantic", "yaml")

# Run in a process of its own: plans the stack (in-process timings), then lists the SDK modules
# left loaded. A module still a lazy stub (pulumi's or importlib's _LazyModule) was never run.
_PROBE = """
import json, statistics, sys, time
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
from infra import plan, program
t_import = time.perf_counter() - t0
times = []
for _ in range({runs}):
    start = time.perf_counter()
    _, result = plan.plan({stack!r})
    times.append(time.perf_counter() - start)
loaded = sorted(
    name for name, module in sys.modules.items()
    if module is not None and name.split(".")[0] in {packages!r} and type(module).__name__ != "_LazyModule"
)
print(json.dumps({{"import": t_import, "plans": times, "resources": len(result.records),
                  "objects": len(result.kubernetes_objects()), "modules": loaded}}))
"""

# The floor: import the modules, touching each (an attribute lookup runs a lazy module, as the
# program's first use of it does), then list what is loaded, as the probe does. With ``freeze``,
# the heap is frozen at the end, so that the interpreter's exit does not collect it (as the plan
# command does): the same imports without the ~0.5 s exit collection of ~300,000 objects.
_FLOOR = """
import gc, importlib, sys
for name in {names!r}:
    getattr(importlib.import_module(name), "__all__", None)
if {freeze!r}:
    gc.freeze()
if {report!r}:
    loaded = sorted(
        name for name, module in sys.modules.items()
        if module is not None and name.split(".")[0] in {packages!r} and type(module).__name__ != "_LazyModule"
    )
    print("\\n".join(loaded))
"""


def entry_points(modules: list[str]) -> list[str]:
    """The modules a program would name in its imports: each top-level package, the deepest
    loaded packages under it (``pulumi_aws.ec2``, ``pulumi_kubernetes.core.v1``), and the mocks."""
    loaded = set(modules)
    packages = {m.rsplit(".", 1)[0] for m in modules if "." in m}  # a module with a loaded child is a package
    leaves = [m for m in sorted(packages) if not any(p.startswith(m + ".") for p in packages)]
    wanted = {m for m in modules if "." not in m} | ({"pulumi.runtime.mocks"} & loaded)
    # Below pulumi, pydantic and yaml the packages are the SDK's own internals, imported by the top.
    wanted |= {m for m in leaves if m.split(".")[0] in ("pulumi_aws", "pulumi_eks", "pulumi_kubernetes")}
    return sorted(wanted)


ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "GPU_TRAINING_PLAN_CACHE")}

# The plan command with helm out of reach: its releases are not rendered (the plan says so).
_NO_RENDERS = """
import runpy, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from infra import releases
releases.HELM = Path({root!r}) / "no-such-folder" / "helm"
sys.argv = ["infra", "plan", "--stack", {stack!r}, "--out", {out!r}]
runpy.run_module("infra", run_name="__main__", alter_sys=True)
"""


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=ROOT, env={**ENV, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd[:4])} ...\n{proc.stderr}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--runs", type=int, default=5, help="alternating runs of the floor and the plan (default 5)")
    parser.add_argument(
        "--in-process", type=int, default=3, help="plans in one process, for the in-process figures (default 3)"
    )
    args = parser.parse_args()
    py = sys.executable

    probe = subprocess.run(
        [
            py,
            "-c",
            _PROBE.format(root=str(ROOT), runs=max(1, args.in_process), stack=args.stack, packages=SDK_PACKAGES),
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        sys.exit(f"the plan of stack {args.stack} failed:\n{probe.stderr}")
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    modules: list[str] = found["modules"]
    names = entry_points(modules)

    floor_cmd = [py, "-c", _FLOOR.format(names=modules, freeze=False, report=False, packages=SDK_PACKAGES)]
    frozen_cmd = [py, "-c", _FLOOR.format(names=modules, freeze=True, report=False, packages=SDK_PACKAGES)]
    statements_cmd = [py, "-c", "import " + ", ".join(names)]
    frozen_statements_cmd = [py, "-c", "import gc\nimport " + ", ".join(names) + "\ngc.freeze()"]
    check = subprocess.run(
        [py, "-c", _FLOOR.format(names=modules, freeze=False, report=True, packages=SDK_PACKAGES)],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
    )
    floor_loads = set(check.stdout.split())

    load_before = os.getloadavg()
    print(f"stack {args.stack}: {found['resources']} resources registered, {found['objects']} Kubernetes objects")
    by_package = ", ".join(f"{p} {sum(1 for m in modules if m.split('.')[0] == p)}" for p in SDK_PACKAGES)
    print(f"SDK modules loaded by the plan: {len(modules)} ({by_package})")
    print(f"  entry points: {', '.join(names)}")
    missing, extra = sorted(set(modules) - floor_loads), sorted(floor_loads - set(modules))
    print(
        f"  the floor loads {len(floor_loads)} of them"
        + (f"; missing {missing[:5]}" if missing else "")
        + (f"; also {extra[:5]}" if extra else "")
    )
    print()
    print(
        "floor: imports those modules; floor*: the same, exit without a last "
        "collection (as the plan command): the import floor;"
    )
    print(
        "statements(*): `import <entry points>` only (and exit as floor*), "
        "which leaves pulumi_aws's lazy subpackages unrun;"
    )
    print(
        "plan: `python -m infra plan` with the Helm renders, cache warm; plan "
        "cold: cache empty; plan -r: no renders. See --help."
    )

    columns = ("floor", "floor*", "statements", "statements*", "plan", "plan cold", "plan -r")
    figures: dict[str, list[float]] = {c: [] for c in columns}
    with tempfile.TemporaryDirectory(prefix="benchmark-plan-") as tmp:
        out = str(Path(tmp) / "out")
        plan_cmd = [py, "-m", "infra", "plan", "--stack", args.stack, "--out", out]
        commands = {
            "floor": floor_cmd,
            "floor*": frozen_cmd,
            "statements": statements_cmd,
            "statements*": frozen_statements_cmd,
            "plan": plan_cmd,
            "plan cold": plan_cmd,
            "plan -r": [py, "-c", _NO_RENDERS.format(root=str(ROOT), stack=args.stack, out=out)],
        }
        colds = itertools.count()

        def env(column: str) -> dict[str, str]:
            """The render cache of each plan: one kept warm, or a new empty one."""
            if column in ("plan", "plan -r"):
                return {"GPU_TRAINING_PLAN_CACHE": str(Path(tmp) / "warm")}
            if column == "plan cold":
                return {"GPU_TRAINING_PLAN_CACHE": str(Path(tmp) / f"cold-{next(colds)}")}
            return {}

        for c in columns:  # warm the file cache and the bytecode, and fill the warm render cache
            timed(commands[c], env(c))
        # Each plan is what it says: the warm cache has every render; without helm, none is made.
        kept = len(list((Path(tmp) / "warm" / "helm-renders").glob("*.entry")))
        unrendered = subprocess.run(
            commands["plan -r"], cwd=ROOT, env={**ENV, **env("plan -r")}, capture_output=True, text=True
        ).stdout
        if not kept or "not rendered" not in unrendered:
            sys.exit(f"the plans are not what they should be: {kept} renders kept; without helm: {unrendered[-300:]}")
        print(f"render cache: {kept} renders kept by the warm-up plan")
        width = 14
        print(f"{'run':>4}" + "".join(f"{c + ' s':>{width}}" for c in columns))
        for i in range(args.runs):
            order = columns if i % 2 == 0 else tuple(reversed(columns))
            run = {c: timed(commands[c], env(c)) for c in order}
            for c in columns:
                figures[c].append(run[c])
            print(f"{i + 1:>4}" + "".join(f"{run[c]:>{width}.2f}" for c in columns))

    med = {c: statistics.median(figures[c]) for c in columns}
    low = {c: min(figures[c]) for c in columns}
    print()
    print(f"median of {args.runs}: " + ", ".join(f"{c} {med[c]:.2f} s" for c in columns))
    # On a shared machine the fastest run of each is the one least disturbed by others.
    print(f"fastest of {args.runs}: " + ", ".join(f"{c} {low[c]:.2f} s" for c in columns))
    print()
    print(
        "the plan against the import floor (medians; fastest runs in brackets): floor* "
        f"{med['floor*']:.2f} s, statements* {med['statements*']:.2f} s"
    )
    for c, what in (
        ("plan", "with renders, cache warm (a second `scripts/plan.sh`)"),
        ("plan cold", "with renders, cache empty (the first)"),
        ("plan -r", "without renders"),
    ):
        print(
            f"  {what + ':':<56} {med[c]:.2f} s = {med[c] / med['floor*']:.2f}x floor* ({low[c] / low['floor*']:.2f}x),"
            f" {med[c] / med['statements*']:.2f}x statements* ({low[c] / low['statements*']:.2f}x)"
        )
    print(
        "  (and plan / floor, which pays the exit collection the plan command skips: "
        f"{med['plan'] / med['floor']:.2f}; plan / statements: {med['plan'] / med['statements']:.2f})"
    )
    ratio, fastest = med["plan"] / med["floor*"], low["plan"] / low["floor*"]
    print(
        f"target: the plan of {args.stack} with the Helm renders scripts/plan.sh makes (cache warm: unchanged charts "
        f"are not rendered again) at most {PLAN_TARGET:.1f}x floor* (importing the SDK modules the program uses): "
        f"{ratio:.2f}x (median; fastest runs {fastest:.2f}x): {'within target' if ratio <= PLAN_TARGET else 'MISSED'}"
    )
    load_after = os.getloadavg()
    print(
        f"load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; after: "
        f"{', '.join(f'{x:.2f}' for x in load_after)} ({os.cpu_count()} CPUs)"
    )
    print(machine.describe())  # cores, CPU model and load now (scripts/machine.py)
    later = found["plans"][1:]
    print(
        f"in-process: importing the program and SDKs {found['import']:.2f} s, first plan {found['plans'][0]:.2f} s"
        + (f", later plans median {statistics.median(later):.2f} s ({len(later)})" if later else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
