"""Every framework's Trainer runtimes and TrainJobs: torch (``jobs/trainjob.py``) and MPI (``jobs/trainjob_mpi.py``),
which the stack registers (components/operators.py) and the jobs' registry converts to."""

from __future__ import annotations

from collections.abc import Mapping

from facts.operators import MPIJOB
from jobs import trainjob, trainjob_mpi
from jobs.base import Manifest
from jobs.targets import JobsContext, JobTarget


def runtimes(targets: Mapping[str, JobTarget]) -> list[Manifest]:
    """Every group's runtimes, one per framework (``trainjob.FRAMEWORKS``)."""
    return trainjob.torch_runtimes(targets) + trainjob_mpi.runtimes(targets)


def convert(spec: trainjob.OnTrainer, manifests: list[Manifest], ctx: JobsContext) -> list[Manifest]:
    """``manifests`` (a job's legacy objects, topology annotations on) with its legacy job object replaced by its
    TrainJob when the job runs on Trainer (a PyTorchJob on the torch runtime, an MPIJob on the MPI runtime)."""
    if not spec.on_trainer or spec.TRAINER_FRAMEWORK is None:
        return manifests
    if spec.TRAINER_FRAMEWORK == trainjob_mpi.MPI:
        target = spec.target(ctx)
        return [trainjob_mpi.trainjob(spec, m, target) if m.get("kind") == MPIJOB.kind else m for m in manifests]
    return trainjob.convert_torch(spec, manifests, ctx)
