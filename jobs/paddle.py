"""``paddle``: PaddlePaddle as a ``kubeflow.org/v1`` PaddleJob, collective (trainers only) or ps
(parameter servers + trainers). In training-operator v1 the parameter servers are the ``Master``
replicas."""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field

from facts.operators import PADDLEJOB, TRAINING_OPERATOR
from facts.problems import Problem
from jobs import pod
from jobs.base import Int32, Manifest
from jobs.resilience import ResilientJob
from jobs.targets import JobsContext
from jobs.trainjob import OnTrainer

PSERVER_RESOURCES = {"requests": {"cpu": "4", "memory": "8Gi"}}


class PaddleSpec(ResilientJob, OnTrainer):
    """PaddlePaddle as a PaddleJob: collective (trainers only) or ps (parameter servers + trainers).
    In training-operator v1 the parameter servers are the ``Master`` replicas."""

    OPERATOR = TRAINING_OPERATOR
    # `operator: trainer` is refused: Trainer v2.2.1's ML policies are torch, mpi, jax, xgboost, flux, plainml
    # (pkg/runtime/framework/plugins at the tag): a PaddleJob has no TrainJob equivalent.
    TRAINER_MISSING = (
        "Trainer v2.2.1 has no Paddle runtime (its ML policies: torch, mpi, jax, xgboost, flux, plain): paddle jobs "
        "stay on the training operator's PaddleJob"
    )

    kind: Literal["paddle"] = Field(description="`paddle`")
    image: str = Field(description="a PaddlePaddle GPU image")
    command: list[str] = Field(min_length=1, description="the entry point of every replica")
    mode: Literal["collective", "ps"] = Field(
        "collective", description="`collective` (trainers only) or `ps` (parameter servers + trainers)"
    )
    pservers: Int32 | None = Field(None, ge=1, description="parameter servers, mode `ps` only (default 1)")

    @property
    def parameter_servers(self) -> int:
        if self.mode != "ps":
            return 0
        return self.pservers if self.pservers is not None else 1

    def pod_hostnames(self) -> list[str]:
        hosts = [f"{self.name}-worker-{self.nodes - 1}"]
        if self.parameter_servers:
            hosts.append(f"{self.name}-master-{self.parameter_servers - 1}")
        return hosts

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        if self.mode != "ps" and self.pservers is not None:
            problems.append(
                Problem(f"{key}.pservers", f"{self.pservers} is only used with mode 'ps' (mode is {self.mode!r})")
            )

    def derived_env(self) -> dict[str, str]:
        return self.resilience_env()

    def build(self, ctx: JobsContext) -> list[Manifest]:
        w = pod.gpu_worker(self, ctx, self.derived_env())
        # The training operator requires a container named "paddle" in every replica. The trainers run
        # under the progress guard when the job has progress or checkpoints (jobs/resilience.py).
        trainer = w.container("paddle", self.guard_command(list(self.command), w.efa_interfaces), self.args)
        trainer_pod = w.pod_spec([trainer])
        self.equip(trainer_pod, trainer, ctx)
        replicas: dict[str, Any] = {}
        if self.parameter_servers:
            # PS mode: the Master replicas are the parameter servers (training-operator v1 knows only
            # Master and Worker; with a Master present it runs PaddleJobs in PS mode). CPU work that
            # talks TCP to the trainers: on the same nodes and AZ, no GPU, no EFA.
            pserver: dict[str, Any] = {
                "name": "paddle",
                "image": self.image,
                "command": list(self.command),
                "resources": copy.deepcopy(PSERVER_RESOURCES),
                "volumeMounts": [dict(pod.SHM_MOUNT)] + copy.deepcopy(w.mounts),
            }
            if self.args:
                pserver["args"] = list(self.args)
            ps_env = pod.env(self, {})
            if ps_env:
                pserver["env"] = ps_env
            replicas["Master"] = {
                "replicas": self.parameter_servers,
                "restartPolicy": "OnFailure",
                "template": pod.template(self, w.pod_spec([pserver]), "pserver", ctx),
            }
        replicas["Worker"] = {
            "replicas": self.nodes,
            "restartPolicy": "OnFailure",
            "template": pod.template(self, trainer_pod, "trainer", ctx),
        }
        return [
            *self.guard_config_map(ctx),
            {
                "apiVersion": PADDLEJOB.api_version,
                "kind": PADDLEJOB.kind,
                "metadata": pod.metadata(self, ctx),
                # Running: a finished or failed job frees its GPU nodes at once.
                "spec": {
                    "runPolicy": {"cleanPodPolicy": "Running", **self.bounds()},
                    PADDLEJOB.replica_specs: replicas,
                },
            },
        ]
