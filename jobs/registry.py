"""The job kinds: one line each. Adding a kind is a new ``jobs/<kind>.py`` module with its
``JobBase`` subclass, plus one line here."""

from __future__ import annotations

from collections.abc import Mapping

from facts.operators import REPLICA_SPECS
from jobs import topology, trainjob, trainjob_runtimes
from jobs.base import GpuJob, JobBase, Manifest
from jobs.data_stage import DataStageSpec
from jobs.mpi import MpiJobSpec
from jobs.nccl_test import NcclTestSpec
from jobs.paddle import PaddleSpec
from jobs.pod import QUEUE_LABEL
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


def managed(manifest: Manifest, spec: JobBase, ctx: JobsContext) -> Manifest:
    """A queued job object of a fleet target with its ``runPolicy.managedBy`` (``JobTarget.managed_by``);
    others unchanged."""
    target = ctx.targets.get(getattr(spec, "node_group", None) or "")
    if target is None or target.managed_by is None or manifest.get("kind") not in REPLICA_SPECS:
        return manifest
    if QUEUE_LABEL not in ((manifest.get("metadata") or {}).get("labels") or {}):
        return manifest
    manifest["spec"].setdefault("runPolicy", {})["managedBy"] = target.managed_by
    return manifest


def build_manifests(spec: JobBase, ctx: JobsContext) -> list[Manifest]:
    """The Kubernetes manifests of one job, with Kueue's topology annotations on its pod sets
    (``jobs/topology.py``), as a TrainJob with ``operator: trainer``; nothing for a disabled job."""
    if not spec.enabled:
        return []
    manifests = [managed(topology.annotate(m, spec, ctx), spec, ctx) for m in spec.build(ctx)]
    if isinstance(spec, trainjob.OnTrainer):  # `operator: trainer`: the TrainJob instead (jobs/trainjob.py)
        return trainjob_runtimes.convert(spec, manifests, ctx)
    return manifests
