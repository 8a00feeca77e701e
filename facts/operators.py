"""The cluster operators the stack can install, one ``Operator`` value each, which every layer reads
instead of restating it: the job kinds name their operator (``JobBase.OPERATOR``), the config
switches it on (``services.<switch>``) and checks that a job's operator is on, the queues turn on
Kueue's integrations of its kinds and size their pod sets from the kinds' replica specs, the team
policy checks the kinds' pod templates, and the component installs its pinned manifest.

A new operator is its manifest vendored and pinned (facts/versions.py, manifests/vendor/SOURCES.md),
one ``Operator`` here listed in ``OPERATORS``, and its switch in ``stacks.config.models.ServicesConfig``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from facts import versions
from facts.versions import Vendored


@dataclass(frozen=True)
class OperatorKind:
    """A custom resource kind an operator runs: the objects the stack's GPU jobs are made of."""

    kind: str  # "MPIJob"
    api_version: str  # the version the stack writes, "kubeflow.org/v2beta1"
    # the spec's map of replica types, "mpiReplicaSpecs": one pod set (and pod template) per type; None for a
    # kind whose pod templates are its runtime's (TrainJob: its pods are checked as pods)
    replica_specs: str | None
    integration: str  # Kueue's framework for the kind, "kubeflow.org/mpijob"

    @property
    def group(self) -> str:
        """The API group, "kubeflow.org"."""
        return self.api_version.split("/")[0]

    @property
    def plural(self) -> str:
        """The resource name, "mpijobs"."""
        return self.kind.lower() + "s"


@dataclass(frozen=True)
class Operator:
    """A cluster operator: installed from its vendored manifest when its switch is on."""

    name: str  # what job kinds name (JobBase.OPERATOR) and the config checks list, "mpi"
    title: str  # in messages, "the MPI operator"
    switch: str  # the key under `services` that installs it, "mpiOperator"
    component: (
        str  # the Pulumi component type, gputraining:components:<component> (in every stack's state: never renamed)
    )
    resource: str  # the component's resource name, "mpi-operator" (in every stack's state too)
    namespace: str  # the namespace its manifest creates (no team or training namespace may take it)
    version: str  # its release, the component's output
    manifest: Vendored  # the install manifest, checked against its sha256 before it is read
    kinds: tuple[OperatorKind, ...]  # the kinds it runs
    on_by_default: bool = True  # its switch's default (a new operator starts off: running stacks opt in)

    @property
    def switch_field(self) -> str:
        """The switch as the config model's field, "mpi_operator"."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.switch).lower()

    def installed(self, services: Any) -> bool:
        """Whether the (validated) ``services`` section switches it on."""
        return bool(getattr(services, self.switch_field))


MPIJOB = OperatorKind("MPIJob", "kubeflow.org/v2beta1", "mpiReplicaSpecs", "kubeflow.org/mpijob")
PYTORCHJOB = OperatorKind("PyTorchJob", "kubeflow.org/v1", "pytorchReplicaSpecs", "kubeflow.org/pytorchjob")
PADDLEJOB = OperatorKind("PaddleJob", "kubeflow.org/v1", "paddleReplicaSpecs", "kubeflow.org/paddlejob")
# Kubeflow Trainer v2's job: a TrainJob names a (Cluster)TrainingRuntime, which holds the pod templates (a
# JobSet's replicated jobs); Kueue's integration name at v0.19.2: pkg/controller/jobs/trainjob/trainjob_controller.go.
TRAINJOB = OperatorKind("TrainJob", "trainer.kubeflow.org/v1alpha1", None, "trainer.kubeflow.org/trainjob")

MPI_OPERATOR = Operator(
    name="mpi",
    title="the MPI operator",
    switch="mpiOperator",
    component="MpiOperator",
    resource="mpi-operator",
    namespace="mpi-operator",
    version=versions.MPI_OPERATOR_VERSION,
    manifest=versions.MPI_OPERATOR_MANIFEST,
    kinds=(MPIJOB,),
)
# Its own v1 MPIJob CRD is dropped from the manifest (facts/versions.py): MPIJob is the MPI operator's.
TRAINING_OPERATOR = Operator(
    name="training",
    title="the training operator",
    switch="trainingOperator",
    component="TrainingOperator",
    resource="training-operator",
    namespace="kubeflow",
    version=versions.TRAINING_OPERATOR_REF,
    manifest=versions.TRAINING_OPERATOR_MANIFEST,
    kinds=(PYTORCHJOB, PADDLEJOB),
)

# Kubeflow Trainer v2 with JobSet (facts/versions.py: the chart rendered with our values). Off by default: a stack
# turns it on (`services.trainer`) and moves jobs to it one by one (`operator: trainer`, docs/trainer.md).
TRAINER = Operator(
    name="trainer",
    title="Kubeflow Trainer v2 with JobSet",
    switch="trainer",
    component="Trainer",
    resource="kubeflow-trainer",
    namespace="kubeflow-system",
    version=versions.TRAINER_VERSION,
    manifest=versions.TRAINER_MANIFEST,
    kinds=(TRAINJOB,),
    on_by_default=False,
)

# Every operator, in the order the stack installs them (and lists their Kueue integrations).
OPERATORS = (MPI_OPERATOR, TRAINING_OPERATOR, TRAINER)
# Every kind the operators run, and its replica specs: kind -> the spec's map of replica types.
KINDS = tuple(k for op in OPERATORS for k in op.kinds)
REPLICA_SPECS = {k.kind: k.replica_specs for k in KINDS if k.replica_specs is not None}


def installed(services: Any) -> tuple[Operator, ...]:
    """The operators the (validated) ``services`` section switches on, in ``OPERATORS`` order."""
    return tuple(op for op in OPERATORS if op.installed(services))
