"""Benchmark: how the offline plan's cost grows with the size of the stack (issue 37). Plans generated
stacks from 1 GPU group and 1 job up to 64 groups, 512 jobs and 16 teams, and prints per point the CPU
time of each phase, the ``dependsOn`` edges and the size of resources.json, then the growth exponent of
each phase (the slope of a least-squares line through log(size), log(CPU seconds), over every point and
over the largest three, where a fixed cost no longer hides the growth); asserts nothing.

    .venv/bin/python scripts/benchmark_scaling.py [--quick] [--points N]

The phases, each timed with ``time.process_time`` (CPU of this process; the plan runs in-process):

- config: reading and validating the generated config (``stacks.config.load``);
- program: the Pulumi program run offline (``infra.offline.run``), Helm renders left out (the plan
  command renders each release beside the run, in processes of their own, from a cache);
- one line per whole-stack invariant (``infra.invariants.RULES``), the view's indexing included in
  the first rule that needs it;
- api checks: the program's Kubernetes objects against the API server's rules and their CRDs, and
  every AWS input against botocore's models (``infra/api_checks``), as the plan command runs them;
- output: resources.json and manifests.yaml written as ``python -m infra plan --out`` writes them.

The size of a point is its number of jobs (groups and teams grow with it, below the caps). A stack
of 64 groups is the most a ClusterQueue's resource group holds flavors for (Kueue's API: at most 64).
``--quick`` plans the two smallest points only (the test that checks the script runs).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from stacks.queues.queue_checks import MAX_FLAVORS_PER_RESOURCE_GROUP  # noqa: E402

NS = "gpu-training"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1.0"
AZ = "us-west-2b"
# Flavors of one ClusterQueue resource group (Kueue's CRD: maxItems 64), as the config refuses beyond it.
MAX_GROUPS = MAX_FLAVORS_PER_RESOURCE_GROUP
# (groups, jobs, teams) of the points, smallest first: each about 2 to 4 times the one before.
POINTS = ((1, 1, 0), (2, 8, 1), (4, 32, 2), (16, 128, 4), (32, 256, 8), (64, 512, 16))
KINDS = ("nccl-test", "mpi", "pytorch-elastic")


# ---------------------------------------------------------------------------------------------
# Generated stacks
# ---------------------------------------------------------------------------------------------


def _group(i: int) -> dict[str, Any]:
    return {"name": f"g{i:02d}", "instanceType": "p4d.24xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 2}


def _team(t: int, groups: int, teams: int) -> dict[str, Any]:
    """Team ``t`` gets one node of each group ``i`` with ``i % teams == t`` (every group to one team)."""
    owned = [i for i in range(groups) if i % teams == t] or [t % groups]
    return {"name": f"team{t:02d}", "quotas": [{"nodeGroup": f"g{i:02d}", "nodes": 1} for i in owned]}


def _job(j: int, groups: int, teams: int) -> dict[str, Any]:
    """Job ``j``: one node of group ``j % groups``, of its team when there are teams; the kinds and
    volumes in turn (EFS, FSx, etcd's rendezvous)."""
    g = j % groups
    kind = KINDS[j % len(KINDS)]
    out: dict[str, Any] = {"name": f"job{j:03d}", "kind": kind, "nodeGroup": f"g{g:02d}", "nodes": 1}
    if kind != "nccl-test":
        volume = ("efs", "fsx")[j % 2]
        out.update(image=IMAGE, command=["python", f"/{volume}/train.py"])
        out["volumes"] = [{"name": volume, "mountPath": f"/{volume}"}]
    if kind == "pytorch-elastic":
        del out["nodes"]
        out.update(minNodes=1, maxNodes=1, rendezvous="etcd", command=["torchrun"])
    if teams:
        owner = g % teams if groups >= teams else 0
        out["team"] = f"team{owner:02d}"
    return out


def stack_values(groups: int, jobs: int, teams: int) -> dict[str, Any]:
    """A valid stack config of ``groups`` p4d groups (at most 64), ``jobs`` one-node jobs spread over them
    and ``teams`` teams with a share of the groups (0: the shared queue only), as the engine hands it over."""
    if not 1 <= groups <= MAX_GROUPS:
        raise ValueError(f"groups must be 1 to {MAX_GROUPS}, not {groups}")
    queues: dict[str, Any] = {"enabled": True}
    if teams:
        queues["teams"] = [_team(t, groups, teams) for t in range(teams)]
    return {
        "aws:region": "us-west-2",
        f"{NS}:gpuAvailabilityZone": AZ,
        # 64 groups of 2 p4d nodes need about 13,000 addresses in the GPU AZ's subnet: a /18 has 16,379.
        f"{NS}:network": {"privateSubnetPrefix": 18},
        f"{NS}:gpuNodeGroups": [_group(i) for i in range(groups)],
        f"{NS}:storage": {"deletionProtection": False, "efs": {"enabled": True}, "fsx": {"enabled": True}},
        f"{NS}:etcd": {"replicas": 1},
        f"{NS}:queues": queues,
        f"{NS}:jobs": [_job(j, groups, teams) for j in range(jobs)],
    }


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


@dataclass
class Point:
    """One planned stack: its size, the CPU seconds of each phase, and what the plan holds."""

    groups: int
    jobs: int
    teams: int
    resources: int = 0
    edges: int = 0  # dependsOn entries over every resource
    resources_json: int = 0  # bytes
    violations: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def _timed(point: Point, phase: str, work: Callable[[], Any]) -> Any:
    start = time.process_time()
    result = work()
    point.seconds[phase] = point.seconds.get(phase, 0.0) + time.process_time() - start
    return result


def measure(groups: int, jobs: int, teams: int) -> Point:
    """Plan one generated stack, phase by phase."""
    from infra import invariants, offline, program
    from infra import plan as plan_command
    from infra.api_checks import aws_model
    from stacks import config

    point = Point(groups, jobs, teams)
    values = stack_values(groups, jobs, teams)
    cfg = _timed(point, "config", lambda: config.load(values, NS, "scaling"))
    with offline.collector_paused():
        result = _timed(
            point, "program", lambda: offline.run(program.main, values, project=NS, stack="scaling", region=cfg.region)
        )
        view = _timed(point, "invariants: view", lambda: _indexed(invariants.view(result, cfg)))
        for rule in invariants.RULES:
            point.violations += len(_timed(point, f"invariants: {rule.__name__}", partial(rule, view)))
        kube = _timed(point, "api checks: kubernetes", lambda: plan_command.api_checks(result.kubernetes_objects()))
        aws = _timed(point, "api checks: aws model", lambda: aws_model.check(result.records))
        point.violations += len(kube.refusals) + len(aws.failures)
        with tempfile.TemporaryDirectory() as out:
            _timed(point, "output", lambda: plan_command.write_files(result, Path(out), None, cfg))
            point.resources_json = (Path(out) / "resources.json").stat().st_size
    point.resources = len(result.records)
    point.edges = sum(len(r.depends_on) for r in result.records)
    gc.collect()
    return point


def _indexed(view: Any) -> Any:
    """The view with what every rule reads built (the objects, the nodes), as the first rule would."""
    _ = view.objects, view.nodes, view.queue_plan
    return view


def exponent(sizes: list[float], seconds: list[float]) -> float:
    """The slope of the least-squares line through (log size, log seconds)."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(t, 1e-6)) for t in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0


def report(points: list[Point]) -> str:
    """The table of points and the growth exponent of each phase (size: the number of jobs)."""
    lines = [
        f"{'groups':>6} {'jobs':>5} {'teams':>5} {'resources':>9} {'dependsOn':>10} {'resources.json':>15} "
        f"{'violations':>10} {'CPU s':>7}"
    ]
    for p in points:
        lines.append(
            f"{p.groups:>6} {p.jobs:>5} {p.teams:>5} {p.resources:>9} {p.edges:>10,} {p.resources_json:>15,} "
            f"{p.violations:>10} {sum(p.seconds.values()):>7.2f}"
        )
    lines += ["", f"{'phase':<48} {'CPU s at each point':<48} exponent (all points, largest 3)"]
    phases = list(points[0].seconds)
    sizes = [float(p.jobs) for p in points]
    for phase in [*phases, "invariants (all)", "total"]:
        seconds = [_phase(p, phase) for p in points]
        column = " ".join(f"{t:7.3f}" for t in seconds)
        upper = exponent(sizes[-3:], seconds[-3:])
        lines.append(f"{phase:<48} {column:<48} {exponent(sizes, seconds):6.2f} {upper:6.2f}")
    return "\n".join(lines) + "\n"


def _phase(p: Point, phase: str) -> float:
    if phase == "total":
        return sum(p.seconds.values())
    if phase == "invariants (all)":
        return sum(t for name, t in p.seconds.items() if name.startswith("invariants:"))
    return p.seconds[phase]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the two smallest points only (checks the script runs)")
    parser.add_argument("--points", type=int, default=len(POINTS), help="the first N points (default: all)")
    parser.add_argument("--json", help="also write the points to this file")
    args = parser.parse_args(argv)
    chosen = POINTS[: 2 if args.quick else args.points]
    measure(*chosen[0])  # warm-up: the first plan of a process pays for imports and first-use caches
    points = []
    for groups, jobs, teams in chosen:
        points.append(measure(groups, jobs, teams))
        print(f"planned {groups} group(s), {jobs} job(s), {teams} team(s)", file=sys.stderr, flush=True)
    sys.stdout.write(report(points))
    if args.json:
        Path(args.json).write_text(json.dumps([p.__dict__ for p in points], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
