"""``tensorboard``: TensorBoard reading a log path on a shared volume, as a Deployment and a
Service (ClusterIP unless ``expose``) on the system nodes."""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field

from facts.problems import Problem
from facts.versions import TENSORBOARD_IMAGE
from jobs import pod, spec_checks
from jobs.base import Manifest, SystemJob
from jobs.targets import JobsContext

TENSORBOARD_PORT = 6006


class TensorboardSpec(SystemJob):
    """TensorBoard reading ``logPath`` on a shared volume: Deployment + Service (ClusterIP unless
    ``expose``)."""

    kind: Literal["tensorboard"] = Field(description="`tensorboard`")
    image: str = Field(TENSORBOARD_IMAGE, description="an image with TensorBoard")
    log_path: str = Field(description="the event-file folder inside the volume")
    expose: bool = Field(False, description="a LoadBalancer Service instead of ClusterIP")

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        spec_checks.check_relative_path(self.log_path, f"{key}.logPath", problems)

    def build(self, ctx: JobsContext) -> list[Manifest]:
        claim = pod.claim(ctx, self, self.volume)
        logdir = pod.volume_path(self.volume, self.log_path)
        selector = {pod.JOB_LABEL: self.name}
        container: dict[str, Any] = {
            "name": "tensorboard",
            "image": self.image,
            "command": [
                "tensorboard",
                "--logdir",
                logdir,
                "--host",
                "0.0.0.0",
                "--port",
                str(TENSORBOARD_PORT),
                *self.args,
            ],
            "ports": [{"name": "http", "containerPort": TENSORBOARD_PORT}],
            "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10},
            "resources": copy.deepcopy(pod.SYSTEM_JOB_RESOURCES),
            # TensorBoard only reads the event files.
            "volumeMounts": [{"name": self.volume, "mountPath": f"/mnt/{self.volume}", "readOnly": True}],
        }
        env = pod.env(self, {})
        if env:
            container["env"] = env
        spec = pod.system_pod(
            ctx,
            {
                "containers": [container],
                "volumes": [{"name": self.volume, "persistentVolumeClaim": {"claimName": claim}}],
            },
        )
        return [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": pod.metadata(self, ctx),
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": selector},
                    "template": pod.template(self, spec, "tensorboard"),
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": pod.metadata(self, ctx),
                "spec": {
                    # In-cluster only (kubectl port-forward) unless the job asks to be exposed.
                    "type": "LoadBalancer" if self.expose else "ClusterIP",
                    "selector": selector,
                    "ports": [{"name": "http", "port": TENSORBOARD_PORT, "targetPort": "http", "protocol": "TCP"}],
                },
            },
        ]
