"""The jobs of a fleet's manager against its workers (docs/fleet.md, "Jobs of the fleet"): for every job,
which workers could ever take it and why not the others (``stacks.fleet.verdict``), which Kueue's
dispatcher offers it first (``stacks.fleet.offer_rounds``), and the refusal of a job no worker can take.

A job of the fleet (``stacks/config/fleet_jobs.py``) is built exactly as the stack builds it (the same
pipeline, the fleet flavor's ``jobs.targets.fleet_target``); what its GPU pods ask for is read from that
object as Kueue reads it (``stacks.queues.admission.pod_sets``). On a worker, the copy waits in the
LocalQueue of the same namespace and name (MultiKueue creates the remote Workload and job in the
namespace of the manager's, with the same labels: pkg/controller/admissionchecks/multikueue/workload.go
at v0.19.2, ``clone``), so a worker's verdict is taken against the ClusterQueue its own LocalQueue of
that name feeds.

Where the workers' supply comes from: the offline plan reads the workers' stack files when they are in the
project (``present_workers``), before the program runs. `pulumi up` reads no stack file (the engine hands
the program its own config only): there the supply is the worker stacks' ``fleetWorker`` outputs, read
through stack references, and ``refusals_from_outputs`` is the same check made inside an apply on those
outputs. (This module imports ``stacks.fleet``, which reads stack files with ruamel.yaml for the offline
plan; the program must import the check without it, tests/test_layers.py.)
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facts.multikueue import INCREMENTAL_ROUND_MINUTES
from facts.problems import ConfigError, Problem
from jobs.base import GpuJob
from jobs.registry import build_manifests
from jobs.targets import JobBuildError, JobsContext
from stacks import fleet
from stacks.config.fleet_jobs import fleet_context, is_fleet_job
from stacks.config.models import NAMESPACE
from stacks.queues.admission import pod_sets
from stacks.queues.resources import GPU, RESOURCES


def fleet_specs(cfg: Any) -> list[GpuJob]:
    """The enabled jobs of the fleet of manager ``cfg`` (none on another stack)."""
    own = [g.name for g in cfg.gpu_node_groups]
    return [j for j in cfg.jobs if isinstance(j, GpuJob) and is_fleet_job(j, cfg.fleet, own)]


@dataclass(frozen=True)
class FleetJobPlan:
    """One job of the fleet as the plan says it."""

    name: str
    kind: str
    instance_type: str
    nodes: int
    local_queue: str  # namespace/name
    verdicts: tuple[fleet.Verdict, ...]
    rounds: tuple[tuple[str, ...], ...]  # the dispatcher's offers, round by round
    down: frozenset[str] = frozenset()  # workers whose MultiKueueCluster is inactive (day two, not a plan state)

    @property
    def takers(self) -> list[str]:
        """The workers that could ever take the job."""
        return [v.cluster for v in self.verdicts if v.fits]

    @property
    def goes_to(self) -> list[str]:
        """The workers that get a copy of the job in the first round holding an active taker (one of them
        keeps it), or [] when no active worker can take it: it waits on the manager, not refused."""
        active = [c for c in self.takers if c not in self.down]
        return next(([c for c in r if c in active] for r in self.rounds if any(c in active for c in r)), [])

    @property
    def refusal(self) -> str | None:
        if self.takers:
            return None
        reasons = "; ".join(f"{v.cluster}: {v.reason}" for v in self.verdicts) or "the fleet lists no worker"
        return f"no worker of the fleet can ever admit it ({reasons})"


def gang(spec: GpuJob, ctx: JobsContext) -> tuple[int, dict[str, int]]:
    """The job's GPU pods as Kueue counts them: how many, and the most one of them asks per resource."""
    pods = [ps for m in build_manifests(spec, ctx) for ps in pod_sets(m, ctx.targets) if ps.per_pod.get(GPU, 0) > 0]
    per_node = {r: max((ps.per_pod.get(r, 0) for ps in pods), default=0) for r in RESOURCES}
    return sum(ps.count for ps in pods), per_node


def worker_verdict(job: fleet.FleetJob, namespace: str, local_queue: str, w: fleet.WorkerSupply) -> fleet.Verdict:
    """``stacks.fleet.verdict`` against the ClusterQueue worker ``w``'s LocalQueue feeds."""
    cq = next((c for ns, name, c in w.local_queues if (ns, name) == (namespace, local_queue)), None)
    if cq is None:
        return fleet.Verdict(w.cluster, False, f"no LocalQueue {namespace}/{local_queue}")
    return fleet.verdict(fleet.FleetJob(job.name, cq, job.instance_type, job.nodes, job.per_node), w)


def plan_job(
    spec: GpuJob,
    ctx: JobsContext,
    workers: Sequence[fleet.WorkerSupply],
    dispatcher: str,
    down: frozenset[str] = frozenset(),
) -> FleetJobPlan:
    """The verdicts and the dispatcher's offers of one job of the fleet; ``down``: workers whose
    MultiKueueCluster is inactive. Kueue hands a copy only to connected workers (workload.go
    remoteClientsForAC: a cluster not connected is ``unavailable``), while the Incremental dispatcher
    nominates from every cluster of the MultiKueueConfig (incrementaldispatcher.go GetRemoteClusters): a
    worker down still takes its place in a round, and gets no copy."""
    target = spec.target(ctx)
    nodes, per_node = gang(spec, ctx)
    local_queue = ctx.queues[spec.team or ""]
    job = fleet.FleetJob(spec.name, "", target.instance_type, nodes, per_node)
    verdicts = tuple(worker_verdict(job, ctx.namespace, local_queue, w) for w in workers)
    rounds = fleet.offer_rounds([w.cluster for w in workers], dispatcher)
    return FleetJobPlan(
        spec.name,
        spec.kind,
        target.instance_type,
        nodes,
        f"{ctx.namespace}/{local_queue}",
        verdicts,
        tuple(tuple(r) for r in rounds),
        down,
    )


def plans(cfg: Any, workers: Sequence[fleet.WorkerSupply], down: frozenset[str] = frozenset()) -> list[FleetJobPlan]:
    """Every job of the fleet of manager ``cfg`` against ``workers`` (those it cannot build are left to
    the job checks); ``down`` as in ``plan_job``."""
    ctx = fleet_context(cfg)
    out = []
    for spec in fleet_specs(cfg):
        try:
            out.append(plan_job(spec, ctx, workers, cfg.fleet.dispatcher, down))
        except JobBuildError:
            continue
    return out


def problems(cfg: Any, workers: Sequence[fleet.WorkerSupply]) -> list[Problem]:
    """A problem for every job of the fleet no worker can ever take, naming the job's key."""
    return [Problem(f"{NAMESPACE}:jobs[{p.name}]", p.refusal) for p in plans(cfg, workers) if p.refusal is not None]


# ---------------------------------------------------------------------------------------------
# Where the supply comes from
# ---------------------------------------------------------------------------------------------


def present_workers(cfg: Any, manager_file: Path) -> list[fleet.WorkerSupply] | None:
    """The workers' supply from their stack files when all are present (``stacks.fleet.worker_stack_file``),
    else None: the check then waits for the stack references at `pulumi up`."""
    if not cfg.fleet.workers:
        return None
    if not all(fleet.worker_stack_file(w.stack, manager_file).exists() for w in cfg.fleet.workers):
        return None
    return fleet.offline_workers(cfg, manager_file)


def check(cfg: Any, manager_file: Path) -> list[fleet.WorkerSupply] | None:
    """Raise ConfigError for the jobs of the fleet no worker can take (workers from their stack files);
    the workers read, or None when the check waits for `pulumi up`."""
    workers = present_workers(cfg, manager_file)
    if workers is not None and (found := problems(cfg, workers)):
        raise ConfigError(found)
    return workers


def refusals_from_outputs(cfg: Any, outputs: Sequence[Mapping[str, Any]]) -> None:
    """The check at `pulumi up`, inside an apply on the worker stacks' ``fleetWorker`` outputs (in the
    order of ``fleet.workers``): raises ConfigError as ``check`` does."""
    found = problems(cfg, [fleet.supply_from_output(o) for o in outputs])
    if found:
        raise ConfigError(found)


# ---------------------------------------------------------------------------------------------
# The plan's lines
# ---------------------------------------------------------------------------------------------


def offers(rounds: Sequence[Sequence[str]], takers: Sequence[str], dispatcher: str) -> str:
    """Which workers Kueue's dispatcher offers the job first, and which of those could keep it."""
    if not rounds:
        return "no worker to offer it to"
    first = rounds[0]
    keeps = [c for c in first if c in takers]
    if dispatcher == "AllAtOnce":
        head = f"AllAtOnce offers it to {', '.join(first)} at once"
    else:
        later = "; ".join(f"+{INCREMENTAL_ROUND_MINUTES * i} min: {', '.join(r)}" for i, r in enumerate(rounds[1:], 1))
        head = f"Incremental offers it to {', '.join(first)} first" + (f" ({later})" if later else "")
    if len(keeps) == 1:
        return f"{head}; only {keeps[0]} can keep it"
    if keeps:
        return f"{head}; the first of them to admit it keeps it"
    reach = next((i for i, r in enumerate(rounds) if any(c in takers for c in r)), None)
    return f"{head}; none of them can take it" + (f", round {reach + 1} can" if reach is not None else "")


def line(p: FleetJobPlan, dispatcher: str) -> str:
    """One job of the fleet: the workers that could take it, why not the others, the dispatcher's offer."""
    could = ", ".join(f"{v.cluster} ({v.reason})" for v in p.verdicts if v.fits) or "none"
    not_ = "; ".join(f"{v.cluster}: {v.reason}" for v in p.verdicts if not v.fits)
    text = (
        f"{p.name} ({p.kind}, {p.nodes} x {p.instance_type}, {p.local_queue}): could run on {could}"
        + (f"; not {not_}" if not_ else "")
        + f"; {offers(p.rounds, p.takers, dispatcher)}"
    )
    return textwrap.fill(text, width=120, initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False)


def lines(cfg: Any, workers: Sequence[fleet.WorkerSupply] | None) -> list[str]:
    """The plan summary's part on the jobs of the fleet (nothing on a stack that runs none)."""
    specs = fleet_specs(cfg)
    if not specs:
        return []
    head = f"Jobs of the fleet ({len(cfg.fleet.workers)} workers, dispatcher {cfg.fleet.dispatcher}):"
    if workers is None:
        return ["", head, "  (the workers' stack files are not in the project: checked at `pulumi up`)"]
    return ["", head, *(line(p, cfg.fleet.dispatcher) for p in plans(cfg, workers))]
