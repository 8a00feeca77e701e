"""Jobs of a fleet's manager (docs/fleet.md, "Jobs of the fleet"): what the config checks see of them.

On a stack that lists ``fleet.workers``, a GPU job's ``nodeGroup`` may name a **fleet flavor**: a GPU
instance type with '.' as '-' (``p5-48xlarge``), the manager's ResourceFlavor of that type. Such a job
waits in the manager's queues and runs on whichever worker admits it (Kueue's MultiKueue), so it is
built for the type, not for a group (``jobs.targets.fleet_target``). Whether some worker can ever take
it is the dispatch model's check, made with the workers' supply (``stacks/fleet_jobs.py``); here, what
the job's own config decides, one rule each:

- it waits in a queue: the manager runs queues (``queues.enabled``), else MultiKueue never sees it;
- it runs on EKS: ``runtime: sagemaker`` is a SageMaker training job of the manager's account, not a
  Kubernetes job MultiKueue could hand to a worker;
- it is no TrainJob (``operator: trainer``): Kueue v0.19.2 dispatches TrainJobs
  (site/content/en/docs/tasks/run/multikueue/trainjob.md), but a TrainJob names its ClusterTrainingRuntime,
  which this project makes per node group and names after it (``jobs.trainjob.runtime_name``), and a
  worker's groups are its own: the copy would name a runtime no worker has. The kinds left (MPIJob,
  PyTorchJob, PaddleJob) are among those MultiKueue dispatches and the workers' credential serves
  (``facts.multikueue.JOB_RESOURCES``; tests/test_fleet_jobs.py builds each);
- it asks for no network placement: the manager's flavors carry no Topology, and Kueue refuses a
  topology request on a flavor without one ("Flavor %q does not support TopologyAwareScheduling",
  pkg/scheduler/flavorassigner/tas_flavorassigner.go at v0.19.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from facts import catalog
from facts.aws_names import INT32_MAX
from facts.problems import Problem
from jobs.base import GpuJob, JobBase
from jobs.targets import GroupFacts, JobsContext, JobTarget, fleet_flavor, fleet_targets
from jobs.trainjob import OnTrainer
from stacks.queues.cluster_queues import job_queues


def fleet_groups(fleet: Any) -> dict[str, GroupFacts]:
    """What a job of a fleet's manager may name as ``nodeGroup``: every GPU type of the catalog as its
    fleet flavor (none on a stack that is no manager). Its size is the workers' to say: the dispatch
    model checks ``nodes`` against what they hold."""
    if fleet is None or not fleet.workers:
        return {}
    return {
        fleet_flavor(t.name): GroupFacts(fleet_flavor(t.name), t, t.efa_interfaces, INT32_MAX)
        for t in catalog.BUILTIN.values()
        if t.is_gpu and catalog.refusal(t.name) is None
    }


def fleet_job_targets(fleet: Any) -> dict[str, JobTarget]:
    """What the jobs of a fleet's manager are built for: a ``fleet_target`` per fleet flavor (none on a
    stack that is no manager)."""
    if fleet is None or not fleet.workers:
        return {}
    return fleet_targets((g.instance for g in fleet_groups(fleet).values()), INT32_MAX)


def fleet_job_queues(cfg: Any) -> dict[str, str]:
    """The LocalQueue of each team's jobs of the fleet (the workers' LocalQueues of the same names), on a
    fleet's manager; none elsewhere."""
    return job_queues(cfg.queues.teams) if cfg.fleet.workers else {}


def fleet_context(cfg: Any) -> JobsContext:
    """A JobsContext like the manager's, for sizing its jobs of the fleet before anything exists."""
    return JobsContext(
        namespace=cfg.services.training_namespace,
        targets=fleet_job_targets(cfg.fleet),
        claims={v: f"{v}-claim" for v in ("efs", "fsx")},
        etcd_endpoint="etcd:2379",
        system_node_selector={},
        cluster_name=cfg.cluster_name,
        queues=fleet_job_queues(cfg),
    )


def is_fleet_job(spec: JobBase, fleet: Any, own_groups: Sequence[str]) -> bool:
    """Whether ``spec`` is a job of the fleet: a GPU job naming a fleet flavor of a manager (a group
    of the manager's own, of the same name, wins)."""
    group = getattr(spec, "node_group", None)
    return (
        isinstance(spec, GpuJob) and group not in own_groups and group in fleet_groups(fleet) and spec.enabled is True
    )


def check_fleet_jobs(
    keyed: Sequence[tuple[str, JobBase]], fleet: Any, queues: Any, own_groups: Sequence[str], problems: list[Problem]
) -> None:
    """The rules above, on every enabled job of the fleet among ``keyed`` (config key, spec)."""
    for key, spec in keyed:
        if not is_fleet_job(spec, fleet, own_groups):
            continue
        _queued(key, queues, problems)
        _on_eks(key, spec, problems)
        _not_trainer(key, spec, problems)
        _no_placement(key, spec, problems)


def _queued(key: str, queues: Any, problems: list[Problem]) -> None:
    if queues is not None and not queues.enabled:
        problems.append(
            Problem(
                f"{key}.nodeGroup",
                "a job of the fleet waits in the manager's queues, and queues.enabled is false: run queues on the "
                "manager, or name a node group of this stack",
            )
        )


def _on_eks(key: str, spec: JobBase, problems: list[Problem]) -> None:
    if getattr(spec, "runtime", "eks") == "sagemaker":
        problems.append(
            Problem(
                f"{key}.runtime",
                "'sagemaker' is not allowed on a job of the fleet: MultiKueue hands Kubernetes jobs to the workers, "
                "and a SageMaker training job is none; use runtime 'eks', or a node group of this stack",
            )
        )


def _not_trainer(key: str, spec: JobBase, problems: list[Problem]) -> None:
    if isinstance(spec, OnTrainer) and spec.on_trainer:
        problems.append(
            Problem(
                f"{key}.operator",
                "'trainer' is not allowed on a job of the fleet: a TrainJob names its runtime, which each stack "
                "names after its own node group, so a worker would not have it; drop operator (the kind's own "
                "operator runs it on the worker)",
            )
        )


def _no_placement(key: str, spec: JobBase, problems: list[Problem]) -> None:
    placement = getattr(spec, "placement", None)
    layer = getattr(spec, "placement_layer", None)
    if placement in ("required", "preferred") or layer is not None:
        where = f"{key}.placement" if placement in ("required", "preferred") else f"{key}.placementLayer"
        problems.append(
            Problem(
                where,
                f"{placement if where.endswith('.placement') else layer!r} is not allowed on a job of the fleet: the "
                "manager's ResourceFlavors carry no Topology and Kueue refuses a topology request on such a flavor; "
                "drop it (the worker's Kueue admits the job by quota)",
            )
        )
