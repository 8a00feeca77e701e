"""The pod pieces every job kind shares: GPU/EFA requests, env, volumes, tolerations, placement,
labels and metadata. Derived from the target node group, never typed twice:

- ``nvidia.com/gpu`` per worker = the type's GPU count: one worker pod per node, whole nodes;
- on EFA groups ``vpc.amazonaws.com/efa`` = the group's EFA interfaces, ``hugepages-2Mi`` for the
  EFA driver, ``FI_PROVIDER=efa``, ``FI_EFA_USE_DEVICE_RDMA=1`` (only where the type does GPUDirect
  RDMA), ``FI_EFA_FORK_SAFE=1`` and the ``IPC_LOCK`` capability; non-EFA groups get none of these;
- a memory-backed ``/dev/shm``, the GPU taint tolerated, the pod pinned to the group and its AZ;
- PVC mounts of the stack's FSx/EFS claims.
"""

from __future__ import annotations

import copy
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from facts.kube import EFA_HUGEPAGES_REQUEST, EFA_RESOURCE, GPU_RESOURCE, HUGEPAGES_2MI_RESOURCE, PART_OF
from jobs.base import EnvValue, GpuJob, JobBase, RunJob
from jobs.targets import JobBuildError, JobsContext, JobTarget

JOB_LABEL = "gputraining/job"
# EFA nodes reserve 5128 x 2 MiB huge pages at boot (facts/kube.py); a worker requests 5120Mi of them.
EFA_HUGEPAGES = EFA_HUGEPAGES_REQUEST
# Kubernetes requires a cpu or memory request next to a hugepages request. Workers get a modest
# memory request and no memory limit: a worker owns its whole node and may use all of its memory.
WORKER_MEMORY_REQUEST = "8Gi"
SYSTEM_JOB_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
SHM_VOLUME = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}


def job_efa_interfaces(spec: GpuJob, target: JobTarget) -> int:
    """EFA interfaces a worker of ``spec`` requests on ``target`` (0 = no EFA settings at all)."""
    return 0 if spec.efa is False else target.efa_interfaces


def efa_env(efa_interfaces: int, rdma: bool) -> dict[str, str]:
    """The libfabric settings of an EFA worker; empty without EFA."""
    if not efa_interfaces:
        return {}
    env = {"FI_PROVIDER": "efa"}
    if rdma:
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    env["FI_EFA_FORK_SAFE"] = "1"
    return env


def env_text(value: EnvValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def env(spec: JobBase, derived: Mapping[str, str]) -> list[dict[str, Any]]:
    """Derived values first (they win), then the job's plain env, then its secret references."""
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in derived.items()]
    for name in sorted(spec.env):
        if name not in derived:
            out.append({"name": name, "value": env_text(spec.env[name])})
    for name in sorted(spec.secret_env):
        if name not in derived and name not in spec.env:
            ref = spec.secret_env[name]
            out.append({"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}})
    return out


def labels(spec: JobBase) -> dict[str, str]:
    return {
        JOB_LABEL: spec.name,
        "gputraining/job-kind": spec.kind,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


# Kueue's labels on a job: the LocalQueue it waits in and its WorkloadPriorityClass.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# The same on the job's pod templates, under the stack's own keys: a job whose queue or priority
# changes is replaced (a spec change), since Kueue refuses to move a running job to another queue.
POD_QUEUE_LABEL = "gputraining/queue"
POD_PRIORITY_LABEL = "gputraining/priority"


def queue_labels(spec: JobBase, ctx: JobsContext) -> dict[str, str]:
    """Kueue's queue and priority labels of a GPU job when the stack runs queues; else none."""
    if not isinstance(spec, GpuJob):
        return {}
    queue = spec.queue_name(ctx)
    if queue is None:
        return {}
    return {QUEUE_LABEL: queue, PRIORITY_CLASS_LABEL: spec.priority}


def metadata(
    spec: JobBase, ctx: JobsContext, name: str | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """The job's metadata; a GPU job (the MPIJob, PyTorchJob or PaddleJob itself) also carries its
    Kueue labels."""
    meta: dict[str, Any] = {
        "name": name or spec.name,
        "namespace": ctx.namespace,
        "labels": {**labels(spec), **queue_labels(spec, ctx)},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def claim(ctx: JobsContext, spec: JobBase, volume: str) -> str:
    """The PVC of one of the stack's stores."""
    found = ctx.claims.get(volume)
    if found is None:
        raise JobBuildError(
            f"job {spec.name!r}: volume {volume!r} has no claim in this stack (claims: {sorted(ctx.claims)})"
        )
    return found


def pvc_volumes(spec: GpuJob, ctx: JobsContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod volumes and container mounts of the job's ``volumes``."""
    volumes, mounts = [], []
    for v in spec.volumes:
        volumes.append({"name": v.name, "persistentVolumeClaim": {"claimName": claim(ctx, spec, v.name)}})
        mount: dict[str, Any] = {"name": v.name, "mountPath": v.mount_path}
        if v.read_only:
            mount["readOnly"] = True
        if v.sub_path:
            mount["subPath"] = v.sub_path.strip("/")
        mounts.append(mount)
    return volumes, mounts


@dataclass(frozen=True)
class GpuWorker:
    """What every GPU kind's workers share on their target group: the group, the EFA interfaces
    they request, the job's env (EFA settings first), and the pod volumes with their mounts."""

    spec: GpuJob
    target: JobTarget
    efa_interfaces: int
    env: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    mounts: list[dict[str, Any]]

    def container(self, name: str, command: list[str] | None, args: list[str] | None) -> dict[str, Any]:
        """A container owning the whole node (see ``gpu_worker_container``)."""
        return gpu_worker_container(
            name, self.spec.image, command, args, self.env, self.mounts, self.target.gpus, self.efa_interfaces
        )

    def pod_spec(self, containers: list[dict[str, Any]], with_volumes: bool = True, shm: bool = True) -> dict[str, Any]:
        """A pod of these containers on the target group (see ``gpu_pod_spec``)."""
        return gpu_pod_spec(self.target, containers, self.volumes if with_volumes else [], shm=shm)


def gpu_worker(spec: GpuJob, ctx: JobsContext, extra_env: Mapping[str, str] | None = None) -> GpuWorker:
    """The worker pieces of ``spec`` on its target group; ``extra_env`` is env the kind always sets."""
    target = spec.target(ctx)
    efa = job_efa_interfaces(spec, target)
    volumes, mounts = pvc_volumes(spec, ctx)
    return GpuWorker(
        spec, target, efa, env(spec, {**efa_env(efa, target.efa_rdma), **(extra_env or {})}), volumes, mounts
    )


def gpu_worker_container(
    name: str,
    image: str,
    command: list[str] | None,
    args: list[str] | None,
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
    gpus: int,
    efa_interfaces: int,
) -> dict[str, Any]:
    """A container that owns a whole GPU node: all its GPUs, and on EFA all its EFA interfaces,
    huge pages and IPC_LOCK (libfabric pins memory for RDMA)."""
    limits: dict[str, Any] = {GPU_RESOURCE: gpus}
    requests: dict[str, Any] = {GPU_RESOURCE: gpus, "memory": WORKER_MEMORY_REQUEST}
    container: dict[str, Any] = {"name": name, "image": image}
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    if env:
        container["env"] = copy.deepcopy(env)
    if efa_interfaces:
        for r in (limits, requests):
            r[EFA_RESOURCE] = efa_interfaces
            r[HUGEPAGES_2MI_RESOURCE] = EFA_HUGEPAGES
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    container["resources"] = {"limits": limits, "requests": requests}
    container["volumeMounts"] = [dict(SHM_MOUNT)] + copy.deepcopy(mounts)
    return container


def gpu_pod_spec(
    target: JobTarget, containers: list[dict[str, Any]], volumes: list[dict[str, Any]], shm: bool = True
) -> dict[str, Any]:
    """A pod pinned to the target group and its AZ, tolerating its taints, with /dev/shm in memory."""
    pod: dict[str, Any] = {
        "nodeSelector": dict(target.node_selector),
        "tolerations": copy.deepcopy(target.tolerations),
        "containers": containers,
    }
    vols = ([copy.deepcopy(SHM_VOLUME)] if shm else []) + copy.deepcopy(volumes)
    if vols:
        pod["volumes"] = vols
    return pod


RUN_LABEL = "gputraining/run"


def template(spec: JobBase, pod_spec: dict[str, Any], role: str, ctx: JobsContext | None = None) -> dict[str, Any]:
    """A pod template labelled with the job, the pod's role in it and, for jobs that run to
    completion, the run number (so bumping ``run`` changes the spec: a new run replaces the old).
    With ``ctx``, a queued GPU job's pods also carry its queue and priority (``POD_QUEUE_LABEL``)."""
    pod_labels = {**labels(spec), "gputraining/role": role}
    if isinstance(spec, RunJob):
        pod_labels[RUN_LABEL] = str(spec.run)
    queued = queue_labels(spec, ctx) if ctx is not None else {}
    if queued:
        pod_labels[POD_QUEUE_LABEL] = queued[QUEUE_LABEL]
        pod_labels[POD_PRIORITY_LABEL] = queued[PRIORITY_CLASS_LABEL]
    return {"metadata": {"labels": pod_labels}, "spec": pod_spec}


def system_pod(ctx: JobsContext, pod: dict[str, Any]) -> dict[str, Any]:
    """A pod spec placed on the system nodes."""
    out = dict(pod)
    if ctx.system_node_selector:
        out["nodeSelector"] = dict(ctx.system_node_selector)
    if ctx.system_tolerations:
        out["tolerations"] = copy.deepcopy(ctx.system_tolerations)
    return out


def volume_path(volume: str, path: str) -> str:
    """Where ``path`` inside a volume appears in a system pod (volumes mount at /mnt/<volume>)."""
    rel = posixpath.normpath("/" + path.strip("/")).lstrip("/")
    base = f"/mnt/{volume}"
    return f"{base}/{rel}" if rel else base
