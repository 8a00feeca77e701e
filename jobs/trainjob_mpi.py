"""The MPI side of Kubeflow Trainer v2 (``operator: trainer`` on ``mpi`` and ``nccl-test``): each GPU group's
``gputraining-<group>-mpi`` ClusterTrainingRuntime and a job's TrainJob on it.

The runtime has the shape of upstream's own MPI runtime (kubeflow/trainer v2.2.1, charts/kubeflow-trainer/
templates/runtimes/deepspeed-distributed.yaml: ``mlPolicy.mpi`` with OpenMPI, a ``launcher`` replicated job
marked as the trainer step and a ``node`` replicated job running sshd, both containers named ``node``), with
``runLauncherAsNode: false`` as today's MPIJob: the launcher owns no GPU, the ``node`` pods are the workers.
The ``node`` job carries today's worker shape (``jobs/pod.py``: all GPUs, every EFA device, huge pages,
IPC_LOCK, /dev/shm, the GPU taint tolerated, the group and AZ selected, the libfabric env); the launcher today's
launcher pod (the group's nodes, no GPU). Workers are Ready before the launcher starts (today's
``WaitForWorkersReady``): the launcher ``dependsOn`` the ``node`` job being ``Ready`` (JobSet v0.11.0
api/jobset/v1alpha2/jobset_types.go, DependsOn; it replaces the deprecated StartupPolicy; the first replicated job
cannot depend, so ``node`` is listed first); the JobSet succeeds with its launcher (``successPolicy``, as
upstream's runtime).

What a TrainJob cannot say (trainer v2.2.1 pkg/apis/trainer/v1alpha1/trainjob_types.go): ``trainer.image``,
``command`` and ``args`` go to the trainer step only (pkg/runtime/framework/plugins/jobset/builder.go,
``Builder.Trainer``), the launcher here; ``ContainerPatch`` has name, env, volumeMounts and securityContext, no
image or command. So the workers' image and command are the runtime's: sshd in ``WORKER_IMAGE``, AWS's EFA build
of nccl-tests with Open MPI (facts/versions.py). A job whose workers need another image or command stays on
the MPI operator (the check says so). The workers' env, volumes and mounts, and every pod's labels and
topology annotations, are the TrainJob's runtime patches.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from facts.kube import PART_OF
from facts.operators import MPIJOB, TRAINJOB
from jobs.base import GpuJob, Manifest
from jobs.mpi import LAUNCHER_RESOURCES, TRAINER_WORKER_COMMAND, TRAINER_WORKER_IMAGE
from jobs.pod import gpu_pod_spec, gpu_worker_container
from jobs.targets import JobTarget
from jobs.trainjob import (
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
    FRAMEWORK_LABEL,
    NODE,
    PATCH_MANAGER,
    RUNTIME_BACKOFF_LIMIT,
    RUNTIME_GRACE_SECONDS,
    RUNTIME_KIND,
    TRAINER_API_VERSION,
    _less,
    env_of_runtime,
    runtime_name,
)

MPI = "mpi"
# The trainer step of an MPI runtime (pkg/constants/constants.go at v2.2.1: Launcher = "launcher").
LAUNCHER = "launcher"
# Where Trainer mounts the SSH keys of its Secret (<job>-mpi-ssh-auth): mpi-operator's place, /root/.ssh, which
# is also Trainer's default (trainingruntime_types.go, MPIMLPolicySource.SSHAuthMountPath).
SSH_AUTH_MOUNT_PATH = "/root/.ssh"
# The workers' image and command (see above): jobs/mpi.py, which checks a job against them.
WORKER_IMAGE, WORKER_COMMAND = TRAINER_WORKER_IMAGE, TRAINER_WORKER_COMMAND


def _launcher_container(target: JobTarget) -> dict[str, Any]:
    """The launcher's container: the group's libfabric env, a small request, no GPU (as today's launcher)."""
    container: dict[str, Any] = {"name": NODE, "resources": copy.deepcopy(LAUNCHER_RESOURCES)}
    env = env_of_runtime(target)
    if env:
        container["env"] = env
    return container


def _node_container(target: JobTarget) -> dict[str, Any]:
    """A worker's container: the whole node (jobs/pod.py), sshd in the runtime's image."""
    container = gpu_worker_container(
        NODE, WORKER_IMAGE, WORKER_COMMAND, None, [], [], target.gpus, target.efa_interfaces
    )
    env = env_of_runtime(target)
    if env:
        container["env"] = env
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def _replicated_job(name: str, pod: dict[str, Any], trainer_step: bool) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"backoffLimit": RUNTIME_BACKOFF_LIMIT, "template": {"spec": pod}}}
    if trainer_step:
        template["metadata"] = {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}}
    return {"name": name, "template": template}


def cluster_runtime(target: JobTarget) -> Manifest:
    """The MPI ClusterTrainingRuntime of ``target``'s group."""
    node_pod = gpu_pod_spec(target, [_node_container(target)], [])
    node_pod["restartPolicy"] = "Never"  # today's Worker replicas
    node_pod["terminationGracePeriodSeconds"] = RUNTIME_GRACE_SECONDS
    launcher_pod = gpu_pod_spec(target, [_launcher_container(target)], [], shm=False)
    launcher_pod["restartPolicy"] = "OnFailure"  # today's Launcher replica
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": {
            "name": runtime_name(target.group, MPI),
            "labels": {FRAMEWORK_LABEL: MPI, "app.kubernetes.io/part-of": PART_OF},
        },
        "spec": {
            "mlPolicy": {
                "numNodes": 1,
                MPI: {
                    "numProcPerNode": target.gpus,
                    "mpiImplementation": "OpenMPI",
                    "sshAuthMountPath": SSH_AUTH_MOUNT_PATH,
                    "runLauncherAsNode": False,
                },
            },
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": [LAUNCHER]},
                    "replicatedJobs": [
                        _replicated_job(NODE, node_pod, trainer_step=False),
                        {
                            **_replicated_job(LAUNCHER, launcher_pod, trainer_step=True),
                            "dependsOn": [{"name": NODE, "status": "Ready"}],
                        },
                    ],
                }
            },
        },
    }


def _pod_patch(template: dict[str, Any], runtime_pod: dict[str, Any]) -> dict[str, Any]:
    """What a legacy role's pod ``template`` has beyond the runtime's pod: its metadata, volumes, service account,
    and its container's env and mounts (a ``PodTemplatePatch``)."""
    pod, (have,) = template["spec"], runtime_pod["containers"]
    (container,) = pod["containers"]
    patch: dict[str, Any] = {"metadata": copy.deepcopy(template["metadata"])}
    spec: dict[str, Any] = {}
    if "serviceAccountName" in pod:
        spec["serviceAccountName"] = pod["serviceAccountName"]
    volumes = _less(pod.get("volumes", []), runtime_pod.get("volumes", []), "name")
    if volumes:
        spec["volumes"] = volumes
    patch_container: dict[str, Any] = {}
    env = _less(container.get("env", []), have.get("env", []), "name")
    if env and container["name"] != LAUNCHER:  # the launcher's env is trainer.env
        patch_container["env"] = env
    mounts = _less(container.get("volumeMounts", []), have.get("volumeMounts", []), "mountPath")
    if mounts:
        patch_container["volumeMounts"] = mounts
    if patch_container:
        spec["containers"] = [{"name": NODE, **patch_container}]
    if spec:
        patch["spec"] = spec
    return patch


def trainjob(spec: GpuJob, legacy: Manifest, target: JobTarget) -> Manifest:
    """The TrainJob of an MPI kind's job on its group's MPI runtime, made of its ``legacy`` MPIJob: the launcher's
    image, command and env as ``trainer``; each role's pod template less the runtime's as a runtime patch."""
    runtime = cluster_runtime(target)
    pods = {
        rj["name"]: rj["template"]["spec"]["template"]["spec"]
        for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]
    }
    roles = legacy["spec"][MPIJOB.replica_specs]
    launcher = roles["Launcher"]["template"]
    (container,) = launcher["spec"]["containers"]
    trainer: dict[str, Any] = {
        "image": container["image"],
        "command": list(container["command"]),
        "numNodes": roles["Worker"]["replicas"],
        "numProcPerNode": legacy["spec"]["slotsPerWorker"],
    }
    env = _less(container.get("env", []), pods[LAUNCHER]["containers"][0].get("env", []), "name")
    if env:
        trainer["env"] = env
    patches = [
        {"name": NODE, "template": {"spec": {"template": _pod_patch(roles["Worker"]["template"], pods[NODE])}}},
        {"name": LAUNCHER, "template": {"spec": {"template": _pod_patch(launcher, pods[LAUNCHER])}}},
    ]
    out_spec: dict[str, Any] = {
        "runtimeRef": {"apiGroup": TRAINJOB.group, "kind": RUNTIME_KIND, "name": runtime_name(target.group, MPI)},
        "trainer": trainer,
        "runtimePatches": [
            {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": patches}}}}
        ],
    }
    deadline = spec.bounds().get("activeDeadlineSeconds")
    if deadline is not None:
        out_spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": TRAINER_API_VERSION, "kind": TRAINJOB.kind, "metadata": legacy["metadata"], "spec": out_spec}


def runtimes(targets: Mapping[str, JobTarget]) -> list[Manifest]:
    """Every group's MPI runtime."""
    return [cluster_runtime(t) for t in targets.values()]
