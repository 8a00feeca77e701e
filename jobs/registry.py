"""The job kinds: one line each. Adding a kind is a new ``jobs/<kind>.py`` module with its
``JobBase`` subclass, plus one line here."""

from __future__ import annotations

from collections.abc import Mapping

from jobs import topology, trainjob, trainjob_runtimes
from jobs.base import GpuJob, JobBase, Manifest
from jobs.data_stage import DataStageSpec
from jobs.mpi import MpiJobSpec
from jobs.nccl_test import NcclTestSpec
from jobs.paddle import PaddleSpec
from jobs.pytorch_elastic import PyTorchElasticSpec
from jobs.targets import JobsContext
from jobs.tensorboard import TensorboardSpec

# kind (the `kind:` value in config) -> its spec class
JOB_KINDS: Mapping[str, type[JobBase]] = {
    "mpi": MpiJobSpec,
    "pytorch-elastic": PyTorchElasticSpec,
    "nccl-test": NcclTestSpec,
    "data-stage": DataStageSpec,
    "paddle": PaddleSpec,
    "tensorboard": TensorboardSpec,
}

# Kinds whose workers own GPU nodes, and which cluster operator each kind needs.
GPU_KINDS = tuple(k for k, cls in JOB_KINDS.items() if issubclass(cls, GpuJob))
SYSTEM_KINDS = tuple(k for k in JOB_KINDS if k not in GPU_KINDS)
KIND_OPERATOR: Mapping[str, str] = {k: op.name for k, cls in JOB_KINDS.items() if (op := cls.OPERATOR) is not None}


def build_manifests(spec: JobBase, ctx: JobsContext) -> list[Manifest]:
    """The Kubernetes manifests of one job, with Kueue's topology annotations on its pod sets
    (``jobs/topology.py``), as a TrainJob with ``operator: trainer``; nothing for a disabled job."""
    if not spec.enabled:
        return []
    manifests = [topology.annotate(m, spec, ctx) for m in spec.build(ctx)]
    if isinstance(spec, trainjob.OnTrainer):  # `operator: trainer`: the TrainJob instead (jobs/trainjob.py)
        return trainjob_runtimes.convert(spec, manifests, ctx)
    return manifests
