"""Training jobs: typed job specs, pure manifest builders and the ``TrainingJobs`` component.

A job names the GPU node group it runs on; everything that depends on the hardware is derived from
that group's ``JobTarget`` (built once per group from the instance catalog) and never typed twice:

- ``nvidia.com/gpu`` per worker = the type's GPU count: one worker pod per node, whole nodes;
- on EFA groups ``vpc.amazonaws.com/efa`` = the group's EFA interfaces, ``hugepages-2Mi`` for the
  EFA driver, ``FI_PROVIDER=efa``, ``FI_EFA_USE_DEVICE_RDMA=1`` (only where the type does GPUDirect
  RDMA), ``FI_EFA_FORK_SAFE=1`` and the ``IPC_LOCK`` capability; non-EFA groups get none of these;
- a memory-backed ``/dev/shm``, the GPU taint tolerated, the pod pinned to the group and its AZ;
- MPI ``slotsPerWorker`` and the ``mpirun -np`` count, PyTorch ``nprocPerNode``;
- PVC mounts of the stack's FSx/EFS claims.

The builders (``build_manifests`` and one ``build_<kind>`` per kind) are pure functions returning
plain Kubernetes manifests, so they are tested without Pulumi. ``TrainingJobs`` registers them
(custom resources through ``apiextensions.CustomResource``, core objects through the typed classes)
plus, for data-stage jobs, an IAM role limited to the job's S3 prefix bound through EKS Pod Identity.

This module knows nothing of stack config: the stack hands it validated ``JobSpec`` models
(``stacks/jobs_config.py`` parses them) and a ``JobsContext``.
"""

from __future__ import annotations

import copy
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Mapping, Optional, Sequence, Union

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator
from pydantic.alias_generators import to_camel

from components.node_group import GPU_TAINT, NODE_GROUP_LABEL
from infra.catalog import InstanceType
from infra.versions import AWS_CLI_IMAGE, NCCL_TESTS_IMAGE, TENSORBOARD_IMAGE

# ---------------------------------------------------------------------------------------------
# Pinned images, operator APIs and derived settings
# ---------------------------------------------------------------------------------------------

# Images are pinned in infra/versions.py with the reason for each.
NCCL_TESTS_IMAGE_GPU_MODELS = ("A100", "H100", "H200")
NCCL_ALL_REDUCE_PERF = "/opt/nccl-tests/build/all_reduce_perf"
# 8 B to 2 GiB, doubling, one GPU per rank: enough to reach peak bus bandwidth on 2 nodes.
NCCL_TEST_ARGS = ("-b", "8", "-e", "2G", "-f", "2", "-g", "1")

TENSORBOARD_PORT = 6006

MPIJOB_API_VERSION = "kubeflow.org/v2beta1"  # mpi-operator v0.8.0
TRAINING_API_VERSION = "kubeflow.org/v1"  # training-operator v1.9.4 (PyTorchJob, PaddleJob)

# Which cluster operator each kind needs ("mpi": mpi-operator, "training": training-operator).
KIND_OPERATOR: Mapping[str, str] = {"mpi": "mpi", "nccl-test": "mpi", "pytorch-elastic": "training", "paddle": "training"}
GPU_KINDS = ("mpi", "nccl-test", "pytorch-elastic", "paddle")
SYSTEM_KINDS = ("data-stage", "tensorboard")
VOLUME_NAMES = ("fsx", "efs")

ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}
# The EFA driver preallocates ~5128 x 2 MiB huge pages; 5120Mi is what EFA jobs commonly request.
EFA_HUGEPAGES = "5120Mi"
# Kubernetes requires a cpu or memory request next to a hugepages request. Workers get a modest
# memory request and no memory limit: a worker owns its whole node and may use all of its memory.
WORKER_MEMORY_REQUEST = "8Gi"
LAUNCHER_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}}
PSERVER_RESOURCES = {"requests": {"cpu": "4", "memory": "8Gi"}}
SYSTEM_JOB_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
# mpi-operator v2 reaches the workers over SSH: they run sshd (the operator mounts the keys).
SSHD_COMMAND = ("/usr/sbin/sshd", "-De")
# Env names the builders derive from the target; a job cannot set them.
EFA_ENV_NAMES = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE")
# Pod hostnames (and so job names plus their suffix) must be DNS-1035 labels of at most 63.
MAX_HOSTNAME = 63
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
PART_OF = "gpu-training"
JOB_LABEL = "gputraining/job"


# ---------------------------------------------------------------------------------------------
# Job specs (the component's typed args)
# ---------------------------------------------------------------------------------------------


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


EnvValue = Union[StrictBool, int, float, str]


class SecretKeyRef(_Spec):
    """An env value taken from a Kubernetes Secret in the jobs' namespace (never inline)."""

    secret: str
    key: str


class VolumeMount(_Spec):
    name: Literal["fsx", "efs"]
    mount_path: str
    read_only: bool = False


class _JobBase(_Spec):
    name: str
    enabled: bool = True
    args: list[str] = Field(default_factory=list)
    env: dict[str, EnvValue] = Field(default_factory=dict)
    secret_env: dict[str, SecretKeyRef] = Field(default_factory=dict)


class _GpuJob(_JobBase):
    node_group: str
    nodes: int = Field(1, ge=1)
    volumes: list[VolumeMount] = Field(default_factory=list)
    # None: EFA wherever the group has it; true: the job needs EFA (an error on a group without);
    # false: run without EFA even on an EFA group (e.g. a sockets baseline for nccl-test).
    efa: Optional[bool] = None


class _MpiBase(_GpuJob):
    mpirun_args: list[str] = Field(default_factory=list)
    worker_command: list[str] = Field(default_factory=lambda: list(SSHD_COMMAND), min_length=1)


class MpiJobSpec(_MpiBase):
    """Any MPI program (Horovod/TensorFlow, ...) as an MPIJob; ``command`` is what mpirun runs."""

    kind: Literal["mpi"]
    image: str
    command: list[str] = Field(min_length=1)


class NcclTestSpec(_MpiBase):
    """nccl-tests all_reduce_perf across the group's nodes, NCCL_DEBUG=INFO."""

    kind: Literal["nccl-test"]
    nodes: int = Field(2, ge=1)  # two nodes: the point is the traffic between them
    image: str = NCCL_TESTS_IMAGE
    command: list[str] = Field(default_factory=lambda: [NCCL_ALL_REDUCE_PERF], min_length=1)
    args: list[str] = Field(default_factory=lambda: list(NCCL_TEST_ARGS))


class PyTorchElasticSpec(_GpuJob):
    """PyTorch DDP with TorchElastic as a PyTorchJob with elasticPolicy. ``nodes`` is the number of
    workers to start with; min/max default to it (fixed size) and ``nodes`` defaults to minNodes."""

    kind: Literal["pytorch-elastic"]
    image: str
    command: list[str] = Field(min_length=1)
    min_nodes: Optional[int] = Field(None, ge=1)
    max_nodes: Optional[int] = Field(None, ge=1)
    max_restarts: int = Field(3, ge=0)
    rdzv_backend: Literal["etcd", "etcd-v2", "c10d"] = "etcd"

    @model_validator(mode="before")
    @classmethod
    def _nodes_default_to_min(cls, data: Any) -> Any:
        if isinstance(data, dict) and "nodes" not in data:
            low = data.get("minNodes", data.get("min_nodes"))
            if isinstance(low, int) and not isinstance(low, bool):
                data = {**data, "nodes": low}
        return data

    @property
    def elastic_min(self) -> int:
        return self.min_nodes if self.min_nodes is not None else self.nodes

    @property
    def elastic_max(self) -> int:
        return self.max_nodes if self.max_nodes is not None else max(self.nodes, self.elastic_min)


class PaddleSpec(_GpuJob):
    """PaddlePaddle as a PaddleJob: collective (trainers only) or ps (parameter servers + trainers).
    In training-operator v1 the parameter servers are the ``Master`` replicas."""

    kind: Literal["paddle"]
    image: str
    command: list[str] = Field(min_length=1)
    mode: Literal["collective", "ps"] = "collective"
    pservers: Optional[int] = Field(None, ge=1)

    @property
    def parameter_servers(self) -> int:
        if self.mode != "ps":
            return 0
        return self.pservers if self.pservers is not None else 1


class DataStageSpec(_JobBase):
    """Copies an S3 prefix into ``path`` on a shared volume (a batch Job on the system nodes)."""

    kind: Literal["data-stage"]
    image: str = AWS_CLI_IMAGE
    source: str  # s3://bucket/prefix
    volume: Literal["fsx", "efs"]
    path: str  # inside the volume
    source_region: Optional[str] = None

    @property
    def bucket(self) -> str:
        return self.source[len("s3://") :].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        rest = self.source[len("s3://") :].split("/", 1)
        return rest[1].strip("/") if len(rest) > 1 else ""


class TensorboardSpec(_JobBase):
    """TensorBoard reading ``logPath`` on a shared volume: Deployment + Service (ClusterIP unless
    ``expose``)."""

    kind: Literal["tensorboard"]
    image: str = TENSORBOARD_IMAGE
    volume: Literal["fsx", "efs"]
    log_path: str
    expose: bool = False


JobSpec = Annotated[
    Union[MpiJobSpec, NcclTestSpec, PyTorchElasticSpec, PaddleSpec, DataStageSpec, TensorboardSpec],
    Field(discriminator="kind"),
]
JOB_KINDS: Mapping[str, type[_JobBase]] = {
    "mpi": MpiJobSpec,
    "pytorch-elastic": PyTorchElasticSpec,
    "nccl-test": NcclTestSpec,
    "data-stage": DataStageSpec,
    "paddle": PaddleSpec,
    "tensorboard": TensorboardSpec,
}


# ---------------------------------------------------------------------------------------------
# Targets and context
# ---------------------------------------------------------------------------------------------


def _toleration(taint: Mapping[str, str]) -> dict[str, str]:
    if taint.get("value"):
        return {"key": taint["key"], "operator": "Equal", "value": taint["value"], "effect": taint.get("effect", "NoSchedule")}
    return {"key": taint["key"], "operator": "Exists", "effect": taint.get("effect", "NoSchedule")}


@dataclass(frozen=True)
class JobTarget:
    """One GPU node group as jobs see it. GPU and EFA numbers come from the instance catalog."""

    group: str
    instance_type: str
    gpus: int
    efa_interfaces: int  # 0 = no EFA (type without EFA, or EFA switched off on the group)
    efa_rdma: bool
    max_nodes: int
    availability_zone: str
    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]
    gpu_model: Optional[str] = None

    @classmethod
    def from_instance(
        cls,
        group: str,
        instance: InstanceType,
        *,
        efa_interfaces: int,
        max_nodes: int,
        availability_zone: str,
        extra_taints: Sequence[Mapping[str, str]] = (),
    ) -> "JobTarget":
        """The target for a node group of ``instance`` built by ``NodeGroup``: its group label and
        AZ as node selector, the GPU taint and the group's own taints tolerated."""
        if not instance.is_gpu:
            raise ValueError(f"{instance.name} has no GPU: jobs target GPU node groups only")
        if not 0 <= efa_interfaces <= instance.efa_interfaces:
            raise ValueError(f"{instance.name} has {instance.efa_interfaces} EFA interfaces, not {efa_interfaces}")
        return cls(
            group=group,
            instance_type=instance.name,
            gpus=instance.gpus,
            efa_interfaces=efa_interfaces,
            efa_rdma=instance.efa_rdma and efa_interfaces > 0,
            max_nodes=max_nodes,
            availability_zone=availability_zone,
            node_selector={NODE_GROUP_LABEL: group, ZONE_LABEL: availability_zone},
            tolerations=[dict(GPU_TOLERATION)] + [_toleration(t) for t in extra_taints],
            gpu_model=instance.gpu_model,
        )


@dataclass
class JobsContext:
    namespace: str
    targets: dict[str, JobTarget]
    # volume name ("fsx"/"efs") -> PVC name in ``namespace``; only stores that exist are present.
    claims: dict[str, str]
    # host:port of the stack's etcd (v2 API enabled), None when etcd is off.
    etcd_endpoint: Optional[str]
    system_node_selector: dict[str, str]
    cluster_name: str
    system_tolerations: list[dict[str, str]] = field(default_factory=list)
    # AWS region for the AWS CLI of data-stage jobs (a job's sourceRegion wins).
    region: Optional[str] = None


class JobBuildError(ValueError):
    """A spec the context cannot serve (parse_jobs reports these as config problems first)."""


# ---------------------------------------------------------------------------------------------
# Derivations shared by the builders
# ---------------------------------------------------------------------------------------------


def _target(spec: _GpuJob, ctx: JobsContext) -> JobTarget:
    target = ctx.targets.get(spec.node_group)
    if target is None:
        raise JobBuildError(f"job {spec.name!r}: node group {spec.node_group!r} is not one of {sorted(ctx.targets)}")
    return target


def job_efa_interfaces(spec: _GpuJob, target: JobTarget) -> int:
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


def _env_text(value: EnvValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _env(spec: _JobBase, derived: Mapping[str, str]) -> list[dict[str, Any]]:
    """Derived values first (they win), then the job's plain env, then its secret references."""
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in derived.items()]
    for name in sorted(spec.env):
        if name not in derived:
            out.append({"name": name, "value": _env_text(spec.env[name])})
    for name in sorted(spec.secret_env):
        if name not in derived and name not in spec.env:
            ref = spec.secret_env[name]
            out.append({"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}})
    return out


def _labels(spec: _JobBase) -> dict[str, str]:
    return {
        JOB_LABEL: spec.name,
        "gputraining/job-kind": spec.kind,  # type: ignore[attr-defined]
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
    }


def _metadata(spec: _JobBase, ctx: JobsContext, name: Optional[str] = None, annotations: Optional[dict[str, str]] = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name or spec.name, "namespace": ctx.namespace, "labels": _labels(spec)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def _claim(ctx: JobsContext, spec: _JobBase, volume: str) -> str:
    claim = ctx.claims.get(volume)
    if claim is None:
        raise JobBuildError(f"job {spec.name!r}: volume {volume!r} has no claim in this stack (claims: {sorted(ctx.claims)})")
    return claim


def _pvc_volumes(spec: _GpuJob, ctx: JobsContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes, mounts = [], []
    for v in spec.volumes:
        volumes.append({"name": v.name, "persistentVolumeClaim": {"claimName": _claim(ctx, spec, v.name)}})
        mount: dict[str, Any] = {"name": v.name, "mountPath": v.mount_path}
        if v.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    return volumes, mounts


SHM_VOLUME = {"name": "dshm", "emptyDir": {"medium": "Memory"}}
SHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}


def gpu_worker_container(
    name: str, image: str, command: Optional[list[str]], args: Optional[list[str]], env: list[dict[str, Any]],
    mounts: list[dict[str, Any]], gpus: int, efa_interfaces: int,
) -> dict[str, Any]:
    """A container that owns a whole GPU node: all its GPUs, and on EFA all its EFA interfaces,
    huge pages and IPC_LOCK (libfabric pins memory for RDMA)."""
    limits: dict[str, Any] = {"nvidia.com/gpu": gpus}
    requests: dict[str, Any] = {"nvidia.com/gpu": gpus, "memory": WORKER_MEMORY_REQUEST}
    container: dict[str, Any] = {"name": name, "image": image}
    if command:
        container["command"] = list(command)
    if args:
        container["args"] = list(args)
    if env:
        container["env"] = copy.deepcopy(env)
    if efa_interfaces:
        for r in (limits, requests):
            r["vpc.amazonaws.com/efa"] = efa_interfaces
            r["hugepages-2Mi"] = EFA_HUGEPAGES
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    container["resources"] = {"limits": limits, "requests": requests}
    container["volumeMounts"] = [dict(SHM_MOUNT)] + copy.deepcopy(mounts)
    return container


def _gpu_pod_spec(target: JobTarget, containers: list[dict[str, Any]], volumes: list[dict[str, Any]], shm: bool = True) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "nodeSelector": dict(target.node_selector),
        "tolerations": copy.deepcopy(target.tolerations),
        "containers": containers,
    }
    vols = ([copy.deepcopy(SHM_VOLUME)] if shm else []) + copy.deepcopy(volumes)
    if vols:
        pod["volumes"] = vols
    return pod


def _template(spec: _JobBase, pod_spec: dict[str, Any], role: str) -> dict[str, Any]:
    return {"metadata": {"labels": {**_labels(spec), "gputraining/role": role}}, "spec": pod_spec}


def pod_hostnames(spec: _JobBase) -> list[str]:
    """The longest pod hostnames the operators give this job's pods (each must be <= 63 characters)."""
    n = spec.name
    if isinstance(spec, (MpiJobSpec, NcclTestSpec)):
        return [f"{n}-worker-{spec.nodes - 1}", f"{n}-launcher"]
    if isinstance(spec, PyTorchElasticSpec):
        return [f"{n}-worker-{max(spec.elastic_max, spec.nodes) - 1}"]
    if isinstance(spec, PaddleSpec):
        hosts = [f"{n}-worker-{spec.nodes - 1}"]
        if spec.parameter_servers:
            hosts.append(f"{n}-master-{spec.parameter_servers - 1}")
        return hosts
    return []


# ---------------------------------------------------------------------------------------------
# Builders, one per kind
# ---------------------------------------------------------------------------------------------


def mpirun_command(spec: Union[MpiJobSpec, NcclTestSpec], target: JobTarget, forward: Sequence[str]) -> list[str]:
    """``mpirun`` over every GPU of every worker: one rank per GPU (-np = nodes x GPUs), no CPU
    binding (the frameworks pin their own threads), and the environment forwarded with ``-x``:
    ranks start through sshd on the workers and would not see the container's env otherwise."""
    cmd = ["mpirun", "--allow-run-as-root", "-np", str(spec.nodes * target.gpus), "--bind-to", "none", "--map-by", "slot"]
    for name in ["PATH", "LD_LIBRARY_PATH", *forward]:
        cmd += ["-x", name]
    return cmd + list(spec.mpirun_args) + list(spec.command) + list(spec.args)


def _mpijob(spec: Union[MpiJobSpec, NcclTestSpec], ctx: JobsContext, extra_env: Mapping[str, str]) -> dict[str, Any]:
    target = _target(spec, ctx)
    efa = job_efa_interfaces(spec, target)
    derived = {**efa_env(efa, target.efa_rdma), **extra_env}
    env = _env(spec, derived)
    forward = [e["name"] for e in env]
    volumes, mounts = _pvc_volumes(spec, ctx)

    # The launcher runs on the GPU group without GPU or EFA requests. It uses the training image,
    # which is large and already cached on those nodes (not worth pulling onto small system nodes),
    # and it stays in the workers' AZ. It is created only once every worker is Ready
    # (WaitForWorkersReady), so mpirun never starts before the worker hostnames resolve.
    launcher = {
        "name": "launcher",
        "image": spec.image,
        "command": mpirun_command(spec, target, forward),
        "env": env,
        "resources": copy.deepcopy(LAUNCHER_RESOURCES),
    }
    worker = gpu_worker_container("worker", spec.image, spec.worker_command, None, env, mounts, target.gpus, efa)
    return {
        "apiVersion": MPIJOB_API_VERSION,
        "kind": "MPIJob",
        "metadata": _metadata(spec, ctx),
        "spec": {
            "slotsPerWorker": target.gpus,
            "launcherCreationPolicy": "WaitForWorkersReady",
            # Running: once the launcher is done the workers (sshd, holding the GPUs) are removed;
            # the launcher pod and its log stay.
            "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 6},
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": _template(spec, _gpu_pod_spec(target, [launcher], [], shm=False), "launcher"),
                },
                "Worker": {
                    # Always set: an omitted Worker.replicas is 0 and the job never starts.
                    "replicas": spec.nodes,
                    "restartPolicy": "Never",
                    "template": _template(spec, _gpu_pod_spec(target, [worker], volumes), "worker"),
                },
            },
        },
    }


def build_mpi(spec: MpiJobSpec, ctx: JobsContext) -> list[dict[str, Any]]:
    return [_mpijob(spec, ctx, {})]


def build_nccl_test(spec: NcclTestSpec, ctx: JobsContext) -> list[dict[str, Any]]:
    # NCCL_DEBUG=INFO: the log then says "NET/OFI Selected Provider is efa" or shows the fall-back
    # to sockets ("NET/Socket"), which would otherwise go unnoticed.
    return [_mpijob(spec, ctx, {"NCCL_DEBUG": "INFO"})]


def _etcd_host_port(endpoint: str) -> tuple[str, int]:
    text = endpoint.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise JobBuildError(f"etcd endpoint {endpoint!r} is not host:port")
    return host, int(port)


def build_pytorch_elastic(spec: PyTorchElasticSpec, ctx: JobsContext) -> list[dict[str, Any]]:
    target = _target(spec, ctx)
    efa = job_efa_interfaces(spec, target)
    volumes, mounts = _pvc_volumes(spec, ctx)
    env = _env(spec, efa_env(efa, target.efa_rdma))
    # The training operator requires a container named "pytorch"; it sets PET_* (rendezvous,
    # nnodes min:max, nproc per node, max restarts) for torchrun / torch.distributed.run.
    container = gpu_worker_container("pytorch", spec.image, spec.command, spec.args, env, mounts, target.gpus, efa)
    policy: dict[str, Any] = {
        "rdzvBackend": spec.rdzv_backend,
        "minReplicas": spec.elastic_min,
        "maxReplicas": spec.elastic_max,
        "maxRestarts": spec.max_restarts,
    }
    if spec.rdzv_backend in ("etcd", "etcd-v2"):
        if not ctx.etcd_endpoint:
            raise JobBuildError(f"job {spec.name!r}: rdzvBackend {spec.rdzv_backend!r} needs the stack's etcd, which is off")
        policy["rdzvHost"], policy["rdzvPort"] = _etcd_host_port(ctx.etcd_endpoint)
    # c10d: the operator points the rendezvous at <name>-worker-0.
    return [
        {
            "apiVersion": TRAINING_API_VERSION,
            "kind": "PyTorchJob",
            "metadata": _metadata(spec, ctx),
            "spec": {
                "nprocPerNode": str(target.gpus),
                "elasticPolicy": policy,
                # Only Worker replicas: elasticPolicy rendezvous needs no Master.
                "pytorchReplicaSpecs": {
                    "Worker": {
                        "replicas": spec.nodes,
                        "restartPolicy": "OnFailure",
                        "template": _template(spec, _gpu_pod_spec(target, [container], volumes), "worker"),
                    }
                },
            },
        }
    ]


def build_paddle(spec: PaddleSpec, ctx: JobsContext) -> list[dict[str, Any]]:
    target = _target(spec, ctx)
    efa = job_efa_interfaces(spec, target)
    volumes, mounts = _pvc_volumes(spec, ctx)
    env = _env(spec, efa_env(efa, target.efa_rdma))
    # The training operator requires a container named "paddle" in every replica.
    trainer = gpu_worker_container("paddle", spec.image, spec.command, spec.args, env, mounts, target.gpus, efa)
    replicas: dict[str, Any] = {}
    if spec.parameter_servers:
        # PS mode: the Master replicas are the parameter servers (training-operator v1 knows only
        # Master and Worker; with a Master present it runs PaddleJobs in PS mode). CPU work that
        # talks TCP to the trainers: on the same nodes and AZ, no GPU, no EFA.
        pserver = {
            "name": "paddle",
            "image": spec.image,
            "command": list(spec.command),
            "resources": copy.deepcopy(PSERVER_RESOURCES),
            "volumeMounts": [dict(SHM_MOUNT)] + copy.deepcopy(mounts),
        }
        if spec.args:
            pserver["args"] = list(spec.args)
        ps_env = _env(spec, {})
        if ps_env:
            pserver["env"] = ps_env
        replicas["Master"] = {
            "replicas": spec.parameter_servers,
            "restartPolicy": "OnFailure",
            "template": _template(spec, _gpu_pod_spec(target, [pserver], volumes), "pserver"),
        }
    replicas["Worker"] = {
        "replicas": spec.nodes,
        "restartPolicy": "OnFailure",
        "template": _template(spec, _gpu_pod_spec(target, [trainer], volumes), "trainer"),
    }
    return [
        {
            "apiVersion": TRAINING_API_VERSION,
            "kind": "PaddleJob",
            "metadata": _metadata(spec, ctx),
            "spec": {"paddleReplicaSpecs": replicas},
        }
    ]


def _system_pod(ctx: JobsContext, pod: dict[str, Any]) -> dict[str, Any]:
    out = dict(pod)
    if ctx.system_node_selector:
        out["nodeSelector"] = dict(ctx.system_node_selector)
    if ctx.system_tolerations:
        out["tolerations"] = copy.deepcopy(ctx.system_tolerations)
    return out


def _volume_path(volume: str, path: str) -> str:
    rel = posixpath.normpath("/" + path.strip("/")).lstrip("/")
    base = f"/mnt/{volume}"
    return f"{base}/{rel}" if rel else base


def data_stage_source_uri(spec: DataStageSpec) -> str:
    return f"s3://{spec.bucket}/{spec.prefix}/" if spec.prefix else f"s3://{spec.bucket}/"


def build_data_stage(spec: DataStageSpec, ctx: JobsContext) -> list[dict[str, Any]]:
    claim = _claim(ctx, spec, spec.volume)
    dest = _volume_path(spec.volume, spec.path)
    derived: dict[str, str] = {}
    region = spec.source_region or ctx.region
    if region:
        derived = {"AWS_REGION": region, "AWS_DEFAULT_REGION": region}
    container: dict[str, Any] = {
        "name": "stage",
        "image": spec.image,
        "command": ["aws", "s3", "sync", data_stage_source_uri(spec), dest + "/", "--no-progress", *spec.args],
        "resources": copy.deepcopy(SYSTEM_JOB_RESOURCES),
        "volumeMounts": [{"name": spec.volume, "mountPath": f"/mnt/{spec.volume}"}],
    }
    env = _env(spec, derived)
    if env:
        container["env"] = env
    pod = _system_pod(
        ctx,
        {
            # Its own service account: Pod Identity binds the S3-read role to it alone.
            "serviceAccountName": spec.name,
            "restartPolicy": "Never",
            "containers": [container],
            "volumes": [{"name": spec.volume, "persistentVolumeClaim": {"claimName": claim}}],
        },
    )
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(spec, ctx)},
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            # A copy of a large prefix can take hours: `pulumi up` does not wait for it
            # (kubectl wait / logs do). No ttlSecondsAfterFinished: a Job that deletes itself
            # would be recreated by the next `pulumi up`.
            "metadata": _metadata(spec, ctx, annotations={"pulumi.com/skipAwait": "true"}),
            "spec": {"backoffLimit": 3, "template": _template(spec, pod, "stage")},
        },
    ]


def build_tensorboard(spec: TensorboardSpec, ctx: JobsContext) -> list[dict[str, Any]]:
    claim = _claim(ctx, spec, spec.volume)
    logdir = _volume_path(spec.volume, spec.log_path)
    selector = {JOB_LABEL: spec.name}
    container: dict[str, Any] = {
        "name": "tensorboard",
        "image": spec.image,
        "command": ["tensorboard", "--logdir", logdir, "--host", "0.0.0.0", "--port", str(TENSORBOARD_PORT), *spec.args],
        "ports": [{"name": "http", "containerPort": TENSORBOARD_PORT}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10},
        "resources": copy.deepcopy(SYSTEM_JOB_RESOURCES),
        # TensorBoard only reads the event files.
        "volumeMounts": [{"name": spec.volume, "mountPath": f"/mnt/{spec.volume}", "readOnly": True}],
    }
    env = _env(spec, {})
    if env:
        container["env"] = env
    pod = _system_pod(
        ctx,
        {"containers": [container], "volumes": [{"name": spec.volume, "persistentVolumeClaim": {"claimName": claim}}]},
    )
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _metadata(spec, ctx),
            "spec": {"replicas": 1, "selector": {"matchLabels": selector}, "template": _template(spec, pod, "tensorboard")},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _metadata(spec, ctx),
            "spec": {
                # In-cluster only (kubectl port-forward) unless the job asks to be exposed.
                "type": "LoadBalancer" if spec.expose else "ClusterIP",
                "selector": selector,
                "ports": [{"name": "http", "port": TENSORBOARD_PORT, "targetPort": "http", "protocol": "TCP"}],
            },
        },
    ]


_BUILDERS = {
    "mpi": build_mpi,
    "nccl-test": build_nccl_test,
    "pytorch-elastic": build_pytorch_elastic,
    "paddle": build_paddle,
    "data-stage": build_data_stage,
    "tensorboard": build_tensorboard,
}


def build_manifests(spec: JobSpec, ctx: JobsContext) -> list[dict[str, Any]]:
    """The Kubernetes manifests of one job; nothing for a disabled job."""
    if not spec.enabled:
        return []
    return _BUILDERS[spec.kind](spec, ctx)  # type: ignore[operator]


# ---------------------------------------------------------------------------------------------
# IAM for data-stage jobs
# ---------------------------------------------------------------------------------------------

POD_IDENTITY_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ],
}


def data_stage_policy(spec: DataStageSpec, partition: str = "aws") -> dict[str, Any]:
    """Read access to the job's bucket/prefix and nothing else: list the bucket only under the
    prefix, get objects only below it."""
    bucket_arn = f"arn:{partition}:s3:::{spec.bucket}"
    prefix = spec.prefix
    listing: dict[str, Any] = {"Sid": "ListPrefix", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn}
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]}}
    objects = f"{bucket_arn}/{prefix}/*" if prefix else f"{bucket_arn}/*"
    return {
        "Version": "2012-10-17",
        "Statement": [listing, {"Sid": "ReadPrefix", "Effect": "Allow", "Action": "s3:GetObject", "Resource": objects}],
    }


# ---------------------------------------------------------------------------------------------
# Component
# ---------------------------------------------------------------------------------------------


@dataclass
class TrainingJobsArgs:
    jobs: Sequence[JobSpec]
    context: JobsContext
    tags: dict[str, str] = field(default_factory=dict)
    # What every job object waits for: the namespace, the operators (their CRDs), the claims,
    # etcd, the Pod Identity agent. Children do not inherit a component's depends_on.
    depends_on: list[pulumi.Resource] = field(default_factory=list)


_CORE_CLASSES = {
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("v1", "Service"): k8s.core.v1.Service,
}


class TrainingJobs(pulumi.ComponentResource):
    """Registers the jobs' Kubernetes objects. The Kubernetes provider comes through ``opts``
    (``providers=[k8s_provider]`` or ``provider=``) and is inherited by every child."""

    def __init__(self, name: str, args: TrainingJobsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gputraining:components:TrainingJobs", name, None, opts)
        ctx = args.context
        self.resources: dict[str, list[pulumi.Resource]] = {}
        self._partition: Optional[pulumi.Output[str]] = None
        enabled = [j for j in args.jobs if j.enabled]
        for spec in enabled:
            # A data-stage pod must start with its credentials in place: Pod Identity injects them
            # at pod admission only if the association (and the role's policy) already exist.
            identity = self._pod_identity(name, spec, ctx, args) if isinstance(spec, DataStageSpec) else []
            created: list[pulumi.Resource] = list(identity)
            accounts: list[pulumi.Resource] = []
            for manifest in build_manifests(spec, ctx):
                waits_for = list(args.depends_on)
                if manifest["kind"] == "Job":
                    waits_for += identity + accounts
                res = self._register(name, manifest, waits_for)
                created.append(res)
                if manifest["kind"] == "ServiceAccount":
                    accounts.append(res)
            self.resources[spec.name] = created

        self.job_names = [j.name for j in enabled]
        self.register_outputs(
            {"jobs": self.job_names, "disabledJobs": [j.name for j in args.jobs if not j.enabled], "namespace": ctx.namespace}
        )

    def _register(self, prefix: str, manifest: dict[str, Any], depends_on: list[pulumi.Resource]) -> pulumi.Resource:
        api, kind = manifest["apiVersion"], manifest["kind"]
        meta = manifest["metadata"]
        rname = f"{prefix}-{meta['name']}-{kind.lower()}"
        opts = pulumi.ResourceOptions(parent=self, depends_on=depends_on)
        if (api, kind) == ("v1", "ServiceAccount"):
            return k8s.core.v1.ServiceAccount(rname, metadata=meta, opts=opts)
        cls = _CORE_CLASSES.get((api, kind))
        if cls is not None:
            return cls(rname, metadata=meta, spec=manifest["spec"], opts=opts)
        # A training job is a run: the operators do not carry a changed spec over to pods that
        # already exist, so a changed job is replaced (deleted first: its name is fixed).
        job_opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(replace_on_changes=["spec"], delete_before_replace=True))
        return k8s.apiextensions.CustomResource(rname, api_version=api, kind=kind, metadata=meta, spec=manifest["spec"], opts=job_opts)

    def _pod_identity(self, prefix: str, spec: DataStageSpec, ctx: JobsContext, args: TrainingJobsArgs) -> list[pulumi.Resource]:
        child = pulumi.ResourceOptions(parent=self)
        if self._partition is None:
            self._partition = aws.get_partition_output(opts=pulumi.InvokeOutputOptions(parent=self)).partition
        tags = {**args.tags, JOB_LABEL: spec.name}
        base = f"{prefix}-{spec.name}"
        role = aws.iam.Role(
            f"{base}-s3-read",
            # IAM role names are at most 64 characters; a prefix (at most 38) plus AWS's suffix fits.
            name_prefix=f"{spec.name[:30]}-stage-",
            assume_role_policy=json.dumps(POD_IDENTITY_TRUST),
            description=f"data-stage job {ctx.namespace}/{spec.name}: read {data_stage_source_uri(spec)}",
            tags=tags,
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{base}-s3-read",
            role=role.id,
            policy=self._partition.apply(lambda p: json.dumps(data_stage_policy(spec, p))),
            opts=child,
        )
        association = aws.eks.PodIdentityAssociation(
            f"{base}-pod-identity",
            cluster_name=ctx.cluster_name,
            namespace=ctx.namespace,
            service_account=spec.name,
            role_arn=role.arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        return [role, policy, association]
