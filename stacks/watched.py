"""The GPU jobs the stack watches (alarms, dashboards): the enabled GPU jobs on the cluster, with
what the alarms need of them (their worker pods, EFA, the progress guard).
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.base import GpuJob
from stacks.config import StackConfig
from stacks.config.job_entries import runtime_of

CI = "ContainerInsights"  # Container Insights' metric namespace (components/monitoring.py)


@dataclass(frozen=True)
class WatchedJob:
    """A GPU job on EKS as the alarms see it."""

    name: str
    namespace: str
    group: str
    pods: tuple[str, ...]  # its worker pods (one per node, all its GPUs)
    efa: bool  # it runs on EFA
    guarded: bool  # the progress guard watches it (a job_stalled signal can come)

    @property
    def multi_node(self) -> bool:
        return len(self.pods) > 1


def watched_jobs(cfg: StackConfig) -> list[WatchedJob]:
    """The enabled GPU jobs that run on the cluster (not on SageMaker) and whose group is built."""
    out = []
    for j in cfg.jobs:
        if not (j.enabled and isinstance(j, GpuJob)) or runtime_of(j) != "eks":
            continue
        g = cfg.gpu_group(j.node_group)
        if g is None or g.awaiting_capacity_block:
            continue
        out.append(
            WatchedJob(
                name=j.name,
                namespace=cfg.services.training_namespace,
                group=g.name,
                pods=tuple(f"{j.name}-worker-{i}" for i in range(j.max_workers())),
                efa=bool(g.efa_interfaces) and j.efa is not False,
                guarded=getattr(j, "progress", None) is not None,
            )
        )
    return out
