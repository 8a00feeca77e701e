"""Kubeflow Trainer v2 (``operator: trainer``): the stack's ClusterTrainingRuntimes, one per GPU group and
framework, and a job's TrainJob on its group's runtime.

A runtime carries the node shape every job on the group gets (``jobs/pod.py``: all GPUs, every EFA device of
the type, huge pages, the worker memory request, ``IPC_LOCK``, ``/dev/shm`` in memory, the GPU taint
tolerated, the group and AZ selected, the libfabric env); the TrainJob carries what is the job's: image,
command, args, env, node count, and, as a runtime patch, its pods' labels and topology annotations, its shared
volumes and their mounts, its service account (the fields Trainer v2.2.1 lets a TrainJob patch:
pkg/apis/trainer/v1alpha1/trainjob_types.go, ``PodSpecPatch``, ``ContainerPatch``). It never sets
``trainer.resourcesPerNode``: Trainer replaces the runtime's whole resources with it
(pkg/runtime/framework/plugins/jobset/builder.go at v2.2.1, ``Builder.Trainer``: ``WithResources``), so the
EFA devices and huge pages would go and NCCL would fall back to sockets without an error (NVIDIA/aicr#2275,
#2287).

The TrainJob is made from the job's legacy object (what the kind builds today, with the topology annotations):
its worker template less what the runtime has is the TrainJob. ``jobs/trainjob_merge.py`` merges runtime and
TrainJob back as Trainer does, which the tests compare with the legacy pods.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from facts.kube import PART_OF
from facts.operators import MPIJOB, PADDLEJOB, PYTORCHJOB, TRAINER, TRAINJOB, Operator, OperatorKind
from facts.problems import Problem
from jobs.base import DEFAULT_BACKOFF_LIMIT, GpuJob, Manifest
from jobs.pod import efa_env, gpu_pod_spec, gpu_worker_container
from jobs.resilience import DEFAULT_GRACE
from jobs.targets import GroupFacts, JobBuildError, JobEnvironment, JobsContext, JobTarget

TRAINER_API_VERSION = TRAINJOB.api_version  # trainer.kubeflow.org/v1alpha1 (facts/operators.py)
RUNTIME_KIND = "ClusterTrainingRuntime"
# The trainer's replicated job and container, and the label that marks it as the trainer step
# (pkg/constants/constants.go at v2.2.1: Node = "node", LabelTrainJobAncestor, AncestorTrainer = "trainer").
NODE = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
# The label a runtime's framework is shown by (upstream's runtimes carry it: manifests/base/runtimes at v2.2.1).
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
# Who owns the TrainJob's runtime patch (``runtimePatches[].manager``: Kueue writes its own as
# "kueue.x-k8s.io/manager", pkg/controller/jobs/trainjob at Kueue v0.19.2).
PATCH_MANAGER = "gputraining.io/pulumi"
# The frameworks a runtime is made for, and the job kinds that run on each.
FRAMEWORKS = ("torch", "mpi")
# What a TrainJob's pods get on a group's runtime besides: the grace period to save a checkpoint (the pods'
# terminationGracePeriodSeconds is the runtime's: a TrainJob cannot patch it), and the guard's message on failure.
RUNTIME_GRACE_SECONDS = DEFAULT_GRACE
# Retries of a node's pod before its Job fails (a TrainJob has no backoffLimit of its own: the runtime's Job has it).
RUNTIME_BACKOFF_LIMIT = DEFAULT_BACKOFF_LIMIT


def runtime_name(group: str, framework: str) -> str:
    """The ClusterTrainingRuntime of a GPU group and framework: ``gputraining-<group>-<framework>``."""
    return f"gputraining-{group}-{framework}"


def runtime_container(target: JobTarget) -> dict[str, Any]:
    """The ``node`` container of a group's runtime: the whole node, as ``jobs/pod.py`` gives every worker."""
    efa = target.efa_interfaces
    container = gpu_worker_container(NODE, "", None, None, [], [], target.gpus, efa)
    del container["image"]  # every TrainJob names its own (trainer.image)
    derived = env_of_runtime(target)
    if derived:
        container["env"] = derived
    # The progress guard's message (or the log's end) in `kubectl describe pod` (jobs/resilience.py).
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def env_of_runtime(target: JobTarget) -> list[dict[str, Any]]:
    """The libfabric settings of the group (none without EFA), as ``jobs/pod.py`` derives them."""
    return [{"name": k, "value": v} for k, v in efa_env(target.efa_interfaces, target.efa_rdma).items()]


def cluster_runtime(target: JobTarget, framework: str) -> Manifest:
    """The ClusterTrainingRuntime of ``target``'s group for ``framework`` (torch: torchrun on every node)."""
    if framework != "torch":
        raise JobBuildError(f"no Trainer runtime for framework {framework!r} (runtimes: {', '.join(FRAMEWORKS)})")
    pod = gpu_pod_spec(target, [runtime_container(target)], [])
    pod["restartPolicy"] = "OnFailure"
    pod["terminationGracePeriodSeconds"] = RUNTIME_GRACE_SECONDS
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": {
            "name": runtime_name(target.group, framework),
            "labels": {FRAMEWORK_LABEL: framework, "app.kubernetes.io/part-of": PART_OF},
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, framework: {"numProcPerNode": target.gpus}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "template": {
                                "metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}},
                                "spec": {"backoffLimit": RUNTIME_BACKOFF_LIMIT, "template": {"spec": pod}},
                            },
                        }
                    ]
                }
            },
        },
    }


def torch_runtimes(targets: Mapping[str, JobTarget]) -> list[Manifest]:
    """Every group's torch runtime (jobs/trainjob_runtimes.py has every framework's)."""
    return [cluster_runtime(t, "torch") for t in targets.values()]


def _less(items: list[dict[str, Any]], taken: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """``items`` without those the runtime has already (the same entry, by ``key``)."""
    have = {i[key]: i for i in taken}
    out = []
    for item in items:
        if item[key] in have and have[item[key]] != item:
            raise JobBuildError(f"the runtime has {key} {item[key]!r} otherwise: {have[item[key]]} != {item}")
        if item[key] not in have:
            out.append(copy.deepcopy(item))
    return out


def trainjob(spec: GpuJob, legacy: Manifest, template: dict[str, Any], framework: str, target: JobTarget) -> Manifest:
    """The TrainJob of ``spec`` on its group's ``framework`` runtime, from the worker pod ``template`` of its
    ``legacy`` object (one container): the runtime's pod less that template is what the TrainJob says."""
    pod = template["spec"]
    (container,) = pod["containers"]
    runtime = runtime_container(target)
    shm = gpu_pod_spec(target, [], [])["volumes"]
    trainer: dict[str, Any] = {"image": container["image"], "numNodes": spec.nodes, "numProcPerNode": target.gpus}
    for field in ("command", "args"):
        if field in container:
            trainer[field] = list(container[field])
    job_env = _less(container.get("env", []), runtime.get("env", []), "name")
    if job_env:
        trainer["env"] = job_env
    patch_pod: dict[str, Any] = {"metadata": copy.deepcopy(template["metadata"])}
    volumes = _less(pod.get("volumes", []), shm, "name")
    mounts = _less(container.get("volumeMounts", []), runtime["volumeMounts"], "mountPath")
    account = pod.get("serviceAccountName")  # the progress guard's own (Events, the slow-node patch)
    if volumes or mounts or account:
        patch_pod["spec"] = {}
        if account:
            patch_pod["spec"]["serviceAccountName"] = account
        if volumes:
            patch_pod["spec"]["volumes"] = volumes
        if mounts:
            patch_pod["spec"]["containers"] = [{"name": NODE, "volumeMounts": mounts}]
    out_spec: dict[str, Any] = {
        "runtimeRef": {
            "apiGroup": TRAINJOB.group,
            "kind": RUNTIME_KIND,
            "name": runtime_name(target.group, framework),
        },
        "trainer": trainer,
        "runtimePatches": [
            {
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {"replicatedJobs": [{"name": NODE, "template": {"spec": {"template": patch_pod}}}]}
                    }
                },
            }
        ],
    }
    deadline = spec.bounds().get("activeDeadlineSeconds")
    if deadline is not None:
        out_spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": TRAINER_API_VERSION, "kind": TRAINJOB.kind, "metadata": legacy["metadata"], "spec": out_spec}


# ---------------------------------------------------------------------------------------------
# The job's choice: `operator`
# ---------------------------------------------------------------------------------------------

# Why Trainer's pods cannot take `resourcesPerNode` on an EFA group (the key is the TrainJob's own).
RESOURCES_PER_NODE_TEXT = (
    "is not allowed on EFA group {group!r}: Trainer replaces the runtime's resources with it (trainer v2.2.1 "
    "pkg/runtime/framework/plugins/jobset/builder.go, Builder.Trainer), so the pods would lose the group's "
    "{efa} EFA devices and huge pages and NCCL would fall back to sockets without an error (NVIDIA/aicr#2275); "
    "the group's runtime already gives each node all its GPUs and EFA devices: drop resourcesPerNode"
)


class OnTrainer(GpuJob):
    """A GPU kind that can run as a TrainJob (``operator: trainer``) on its group's runtime of
    ``TRAINER_FRAMEWORK``, or says why not (``TRAINER_MISSING``)."""

    TRAINER_FRAMEWORK: ClassVar[str | None] = None
    TRAINER_MISSING: ClassVar[str] = "Trainer v2.2.1 has no runtime for this kind"

    operator: str | None = Field(
        None,
        description="the operator that runs the job: the kind's legacy one (default) or `trainer`, a TrainJob on the "
        "group's runtime (Kubeflow Trainer v2, `services.trainer`; docs/trainer.md)",
    )

    def per_node(self) -> dict[str, Any] | None:
        """The kind's ``resourcesPerNode`` (a kind without the key has none)."""
        value = getattr(self, "resources_per_node", None)
        return dict(value) if value is not None else None

    @property
    def on_trainer(self) -> bool:
        return self.operator == TRAINER.name

    def operator_of(self) -> Operator | None:
        return TRAINER if self.on_trainer else self.OPERATOR

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        legacy = self.OPERATOR.name if self.OPERATOR is not None else None
        if self.operator is not None and self.operator not in (legacy, TRAINER.name):
            problems.append(
                Problem(f"{key}.operator", f"{self.operator!r} is not one of {legacy!r} (the default), 'trainer'")
            )
        if not self.on_trainer:
            if self.per_node() is not None:
                problems.append(Problem(f"{key}.resourcesPerNode", "is read with operator 'trainer' only"))
            return
        if self.TRAINER_FRAMEWORK is None:
            problems.append(Problem(f"{key}.operator", f"'trainer' is not allowed: {self.TRAINER_MISSING}"))
            return
        for text in self.trainer_problems():
            problems.append(Problem(f"{key}.{text[0]}", text[1]))

    def trainer_problems(self) -> list[tuple[str, str]]:
        """(key under the job, message) of what a TrainJob on the runtime cannot carry."""
        out: list[tuple[str, str]] = []
        if getattr(self, "runtime", "eks") != "eks":
            out.append(("operator", "'trainer' runs on EKS only: drop it or runtime 'sagemaker'"))
        if self.ttl_seconds_after_finished is not None:
            out.append(
                (
                    "ttlSecondsAfterFinished",
                    "is not allowed with operator 'trainer': a TrainJob has no clean-up of its own (its JobSet's is "
                    "the runtime's)",
                )
            )
        if self.backoff_limit != RUNTIME_BACKOFF_LIMIT:
            out.append(
                (
                    "backoffLimit",
                    f"{self.backoff_limit} is not allowed with operator 'trainer': a TrainJob has no retries of its "
                    f"own, its pods take the runtime's backoffLimit ({RUNTIME_BACKOFF_LIMIT})",
                )
            )
        checkpoints = getattr(self, "checkpoints", None)
        if checkpoints is not None and checkpoints.grace_period_seconds != RUNTIME_GRACE_SECONDS:
            out.append(
                (
                    "checkpoints.gracePeriodSeconds",
                    f"{checkpoints.grace_period_seconds} is not allowed with operator 'trainer': its pods take the "
                    f"runtime's grace period ({RUNTIME_GRACE_SECONDS} s), which a TrainJob cannot patch (trainer "
                    "v2.2.1 PodSpecPatch has no terminationGracePeriodSeconds)",
                )
            )
        return out

    def check_environment(self, key: str, problems: list[Problem], env: JobEnvironment) -> None:
        super().check_environment(key, problems, env)
        group = env.groups.get(self.node_group)
        if group is not None and self.on_trainer:
            self.check_trainer_group(key, problems, group)

    def check_trainer_group(self, key: str, problems: list[Problem], group: GroupFacts) -> None:
        """What the group's runtime gives that the job would take away."""
        if not group.efa_interfaces:
            return
        if self.per_node() is not None:
            problems.append(
                Problem(
                    f"{key}.resourcesPerNode",
                    RESOURCES_PER_NODE_TEXT.format(group=group.name, efa=group.efa_interfaces),
                )
            )
        if self.efa is False:
            problems.append(
                Problem(
                    f"{key}.efa",
                    f"false is not allowed with operator 'trainer': the runtime of group {group.name!r} gives every "
                    "node its EFA devices; run the job on its legacy operator to leave EFA out",
                )
            )


def convert_torch(spec: OnTrainer, manifests: list[Manifest], ctx: JobsContext) -> list[Manifest]:
    """``manifests`` (a job's legacy objects, topology annotations on) with its PyTorchJob replaced by its TrainJob
    when the job runs on Trainer; as they are otherwise (jobs/trainjob_runtimes.py converts every kind)."""
    if not spec.on_trainer or spec.TRAINER_FRAMEWORK is None:
        return manifests
    target = spec.target(ctx)
    out = []
    for m in manifests:
        template = worker_template(m)
        if template is None:
            out.append(m)
            continue
        job = trainjob(spec, m, template, spec.TRAINER_FRAMEWORK, target)
        if spec.per_node() is not None:
            job["spec"]["trainer"]["resourcesPerNode"] = copy.deepcopy(spec.per_node())
        out.append(job)
    return out


# The legacy kinds a TrainJob is made from: kind -> (replica specs, the worker replica type).
LEGACY_WORKERS = {"PyTorchJob": ("pytorchReplicaSpecs", "Worker")}


def worker_template(manifest: Manifest) -> dict[str, Any] | None:
    """The worker pod template of a legacy job object, None for any other object."""
    found = LEGACY_WORKERS.get(manifest.get("kind", ""))
    if found is None:
        return None
    specs, role = found
    template: dict[str, Any] = manifest["spec"][specs][role]["template"]
    return template


# The object each GPU kind is on its legacy operator: the kinds upstream calls legacy (training operator v1,
# MPIJob v2beta1), Kubeflow Trainer v2 being where its work goes.
LEGACY_KINDS: dict[str, OperatorKind] = {
    "pytorch-elastic": PYTORCHJOB,
    "paddle": PADDLEJOB,
    "mpi": MPIJOB,
    "nccl-test": MPIJOB,
}


def api_of(spec: GpuJob) -> tuple[OperatorKind | None, bool]:
    """(the kind of the job's object on EKS, whether that is a legacy API); (None, False) for a kind not listed."""
    if isinstance(spec, OnTrainer) and spec.on_trainer:
        return TRAINJOB, False
    legacy = LEGACY_KINDS.get(spec.kind)
    return legacy, legacy is not None
