"""``mpi``: any MPI program (Horovod/TensorFlow, ...) as a ``kubeflow.org/v2beta1`` MPIJob run by
the MPI operator. ``MpiBase`` is shared with ``nccl-test``: slotsPerWorker and ``mpirun -np`` come
from the group's GPUs, the launcher waits for the workers, and the env is forwarded with ``-x``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from facts.instance_types import InstanceType
from facts.operators import MPI_OPERATOR, MPIJOB
from facts.problems import Problem
from facts.versions import NCCL_TESTS_IMAGE
from jobs import fabric as fabric_spec
from jobs import launchers, pod, spec_checks
from jobs.base import EFA_ENV_NAMES, Manifest
from jobs.launchers import Derived
from jobs.pod import job_efa_interfaces
from jobs.resilience import GUARD_DIR, GUARD_PYTHON, GUARD_VOLUME, ResilientJob
from jobs.sagemaker import MAX_HYPERPARAMETER_VALUE, PortableJob
from jobs.targets import GroupFacts, JobsContext, JobTarget
from jobs.trainjob import OnTrainer

MPIJOB_API_VERSION = MPIJOB.api_version  # the MPI operator's (facts/operators.py)
# mpi-operator v2 reaches the workers over SSH: they run sshd (the operator mounts the keys).
SSHD_COMMAND = ("/usr/sbin/sshd", "-De")
LAUNCHER_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}}
# Open MPI as AWS's EFA installer puts it in its images (nccl-tests, Deep Learning Containers). mpirun
# is called by absolute path: that is Open MPI's --prefix, so the daemons it starts over ssh on the
# workers find Open MPI even though an ssh session does not get the image's PATH.
OPEN_MPI_MPIRUN = "/opt/amazon/openmpi/bin/mpirun"
NCCL_DEBUG = "NCCL_DEBUG"
# The launcher's fabric check (docs/performance.md, "MPI jobs"), shipped in the guard's ConfigMap.
MPI_FABRIC = "mpi_fabric.py"
# On Kubeflow Trainer (`operator: trainer`, jobs/trainjob_mpi.py) the workers run the group's MPI runtime's image
# and command: a TrainJob sets the launcher's only (trainer v2.2.1 pkg/runtime/framework/plugins/jobset/builder.go,
# Builder.Trainer; its ContainerPatch has no image or command). sshd in AWS's EFA build of nccl-tests (Open MPI).
TRAINER_WORKER_IMAGE = NCCL_TESTS_IMAGE
TRAINER_WORKER_COMMAND = list(SSHD_COMMAND)
TRAINER_WORKERS_TEXT = (
    "is not allowed with operator 'trainer': a TrainJob sets the image and command of its launcher only (trainer "
    "v2.2.1 Builder.Trainer; ContainerPatch has neither), so the workers run the group's MPI runtime's {what} "
    "({value}); keep the job on the MPI operator (drop operator) to run another"
)


class MpiBase(OnTrainer):
    """What MPIJob kinds share; with ``operator: trainer`` a TrainJob on the group's MPI runtime."""

    OPERATOR = MPI_OPERATOR
    TRAINER_FRAMEWORK = "mpi"

    mpirun_args: list[str] = Field(default_factory=list, description="extra mpirun arguments, before the command")
    worker_command: list[str] = Field(
        default_factory=lambda: list(SSHD_COMMAND),
        min_length=1,
        description="what the workers run (sshd for mpi-operator v2)",
    )
    command: list[str] = Field(min_length=1, description="what mpirun runs on every rank")
    mpirun: str = Field(
        OPEN_MPI_MPIRUN,
        description=(
            "absolute path of mpirun in the image (the remote daemons start from the same prefix); default: AWS's EFA "
            "images"
        ),
    )

    def pod_hostnames(self) -> list[str]:
        return [f"{self.name}-worker-{self.nodes - 1}", f"{self.name}-launcher"]

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        if not self.mpirun.startswith("/") or any(c.isspace() for c in self.mpirun) or self.mpirun.endswith("/"):
            problems.append(
                Problem(
                    f"{key}.mpirun",
                    f"{spec_checks.fmt(self.mpirun)} is not allowed: the absolute path of mpirun in the image, like "
                    f"{OPEN_MPI_MPIRUN}",
                )
            )
        self.check_no_nested_mpirun(key, problems)

    def trainer_problems(self) -> list[tuple[str, str]]:
        """A TrainJob's workers run the runtime's image and command (above): another is refused."""
        out = super().trainer_problems()
        if self.image != TRAINER_WORKER_IMAGE:
            out.append(
                ("image", f"{self.image!r} " + TRAINER_WORKERS_TEXT.format(what="image", value=TRAINER_WORKER_IMAGE))
            )
        if list(self.worker_command) != TRAINER_WORKER_COMMAND:
            value = " ".join(TRAINER_WORKER_COMMAND)
            out.append(
                ("workerCommand", f"{self.worker_command} " + TRAINER_WORKERS_TEXT.format(what="command", value=value))
            )
        return out

    def check_no_nested_mpirun(self, key: str, problems: list[Problem]) -> None:
        """``command`` is what mpirun runs on every rank: an mpirun in it (also in a ``bash -c`` script)
        would start one more mpirun per rank, each starting processes of its own."""
        line = list(self.command) + list(self.args)
        commands = len(self.command)
        for launch in launchers.launches(line, launchers.mpirun_start):
            at = 0 if launch.script_at is None else launch.script_at
            where = f"{key}.command[{at}]" if at < commands else f"{key}.args[{at - commands}]"
            problems.append(
                Problem(
                    where,
                    f"{spec_checks.fmt(' '.join(launch.line))} starts mpirun inside the job's own: the stack runs "
                    f"command under mpirun already ({self.mpirun}, one rank per GPU), so every rank would start "
                    "another mpirun; give only what each rank runs (like [python, train.py]) and mpirun's own options "
                    "in mpirunArgs",
                )
            )

    def check_group(self, key: str, problems: list[Problem], group: GroupFacts) -> None:
        super().check_group(key, problems, group)
        gpus, it = group.instance.gpus, group.instance.name
        derived = {
            "processes": Derived(str(self.nodes * gpus), f"{self.nodes} nodes x {gpus} GPUs of {it}: one rank per GPU"),
            "hosts": Derived(
                "the MPI operator's hostfile",
                f"/etc/mpi/hostfile, the job's {self.nodes} workers with {gpus} slots each, which the operator names "
                "in OMPI_MCA_orte_default_hostfile",
            ),
            "per node": Derived(str(gpus), f"slotsPerWorker: one rank per GPU of {it}"),
        }
        self.check_mpirun_args(derived, key, problems)

    def check_mpirun_args(self, derived: Mapping[str, Derived], key: str, problems: list[Problem]) -> None:
        """``mpirunArgs`` against what the stack (or SageMaker's launcher) gives mpirun (``jobs/launchers.py``)."""
        found = launchers.mpirun_options(self.mpirun_args)
        launchers.derived_option_problems(
            found, derived, "mpirun", launchers.MPIRUN_LABELS.__getitem__, lambda j: f"{key}.mpirunArgs[{j}]", problems
        )

    def derived_env(self) -> dict[str, str]:
        """Env this kind always sets (besides the EFA settings)."""
        return {}

    def launcher_command(self, target: JobTarget, forward: Sequence[str]) -> list[str]:
        """What the launcher runs: mpirun over every GPU of every worker."""
        return mpirun_command(self, target, forward)

    def rank_command(self) -> list[str]:
        """What mpirun runs on every rank."""
        return list(self.command) + list(self.args)

    def equip_launcher(self, pod_spec: dict[str, Any], container: dict[str, Any], ctx: JobsContext) -> None:
        """What the launcher pod needs besides mpirun (MpiJobSpec: its fabric check); nothing here."""

    def build(self, ctx: JobsContext) -> list[Manifest]:
        return [mpijob(self, ctx, self.derived_env())]


class MpiJobSpec(PortableJob, MpiBase, ResilientJob):
    """Any MPI program (Horovod/TensorFlow, ...) as an MPIJob; ``command`` is what mpirun runs.
    With ``runtime: sagemaker``, a SageMaker training job whose framework container runs the
    script under mpirun (``sagemaker_mpi_enabled``), one process per GPU."""

    LAUNCHERS = ((), ("python",))
    LAUNCHER_TEXT = (
        "[python, /path/train.py, --name, value...] (python or python3; the container runs it as python -m mpi4py "
        "under mpirun)"
    )
    SCRIPT_SUFFIXES = (".py", ".sh")
    # The ranks start through the workers' sshd, without the pod's env: the fabric check runs in the launcher, over
    # mpirun's output (jobs/scripts/mpi_fabric.py, MPI_FABRIC), not in the ranks' guard.

    kind: Literal["mpi"] = Field(description="`mpi`")
    image: str = Field(
        description=(
            "the training image (with Open MPI and sshd; on SageMaker an ECR image with SageMaker's training toolkit)"
        )
    )

    def entry_line(self) -> list[str]:
        return list(self.command) + list(self.args)

    def rank_command(self) -> list[str]:
        # efa 0: the ranks' guard (progress, checkpoints) never runs the fabric check; the launcher does.
        return self.guard_command(list(self.command), 0) + list(self.args)

    def launcher_command(self, target: JobTarget, forward: Sequence[str]) -> list[str]:
        """mpirun, under the launcher's fabric check when the job has one (docs/performance.md, "MPI jobs")."""
        mpirun = super().launcher_command(target, forward)
        efa = job_efa_interfaces(self, target)
        mode = self.fabric_mode(efa)
        if mode == "off":
            return mpirun
        check = [GUARD_PYTHON, f"{GUARD_DIR}/{MPI_FABRIC}", "--fabric", mode, "--efa-interfaces", str(efa)]
        check += ["--hosts", str(self.nodes), "--job", self.name, "--mpirun", self.mpirun]
        return [*check, "--", *mpirun]

    def equip_launcher(self, pod_spec: dict[str, Any], container: dict[str, Any], ctx: JobsContext) -> None:
        """With the fabric check the launcher runs it: the guard's files, its service account (Events), the pod's
        identity and its termination message."""
        if self.fabric_mode(self.efa_of(ctx)) == "off":
            return
        pod_spec["serviceAccountName"] = fabric_spec.account_name(self.name)
        container["env"] = [*container.get("env", []), *fabric_spec.identity_env()]
        pod_spec.setdefault("volumes", []).append(
            {"name": GUARD_VOLUME, "configMap": {"name": self.guard_config_map_name}}
        )
        container.setdefault("volumeMounts", []).append(
            {"name": GUARD_VOLUME, "mountPath": GUARD_DIR, "readOnly": True}
        )
        container["terminationMessagePolicy"] = "FallbackToLogsOnError"

    def derived_env(self) -> dict[str, str]:
        return {**super().derived_env(), **self.resilience_env()}

    def fabric_nccl_env(self, ctx: JobsContext) -> dict[str, str]:
        """With the launcher's fabric check, NCCL's init and network lines for it (forwarded to the ranks with -x like
        all env): NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET, unless the job sets them itself (its value wins)."""
        if self.fabric_mode(self.efa_of(ctx)) == "off" or NCCL_DEBUG in self.env or NCCL_DEBUG in self.secret_env:
            return {}
        added = {NCCL_DEBUG: "INFO"}
        if "NCCL_DEBUG_SUBSYS" not in self.env and "NCCL_DEBUG_SUBSYS" not in self.secret_env:
            added["NCCL_DEBUG_SUBSYS"] = "INIT,NET"
        return added

    def build(self, ctx: JobsContext) -> list[Manifest]:
        return [*self.guard_config_map(ctx), mpijob(self, ctx, {**self.derived_env(), **self.fabric_nccl_env(ctx)})]

    def sagemaker_distribution(self, instance: InstanceType, environment: Mapping[str, str]) -> dict[str, Any]:
        # SageMaker's MPI launcher starts the ranks over SSH like mpi-operator does: the env reaches
        # them only through -x, as in mpirun_command.
        options = list(self.mpirun_args)
        for name, value in environment.items():
            # The launcher sets -x NCCL_DEBUG=<its --NCCL_DEBUG option> itself: give it the value
            # that way rather than a second -x.
            options += ["--NCCL_DEBUG", value] if name == NCCL_DEBUG else ["-x", name]
        return {
            "sagemaker_mpi_enabled": True,
            "sagemaker_mpi_num_of_processes_per_host": instance.gpus,
            "sagemaker_mpi_custom_mpi_options": " ".join(options),
        }

    def check_sagemaker_instance(self, key: str, problems: list[Problem], instance: InstanceType) -> None:
        # SageMaker's MPI launcher (sagemaker_training/mpi.py, MasterRunner._create_command) runs
        # mpirun --host <host>:<GPUs>,... -np <instances x GPUs> with the custom options after them.
        n, gpus = self.max_workers(), instance.gpus
        launcher = (
            f"SageMaker's MPI launcher passes mpirun --host and -np for the training job's {n} instances of "
            f"{instance.name}"
        )
        derived = {
            "processes": Derived(str(n * gpus), f"{n} instances x {gpus} GPUs: {launcher}"),
            "hosts": Derived(f"the {n} instances, {gpus} processes each", launcher),
            "per node": Derived(str(gpus), f"sagemaker_mpi_num_of_processes_per_host, the GPUs of {instance.name}"),
        }
        self.check_mpirun_args(derived, key, problems)

    def check_sagemaker_kind(self, key: str, problems: list[Problem]) -> None:
        # The container splits sagemaker_mpi_custom_mpi_options on whitespace.
        debug = self.env.get(NCCL_DEBUG)
        if debug is not None and (not str(debug) or any(c.isspace() for c in str(debug))):
            problems.append(
                Problem(
                    f"{key}.env.{NCCL_DEBUG}",
                    f"{spec_checks.fmt(debug)} is not allowed with runtime 'sagemaker': one word, like INFO",
                )
            )
        options = " ".join([*self.mpirun_args, *(f"-x {n}" for n in [*EFA_ENV_NAMES, *self.env])])
        if len(json.dumps(options)) > MAX_HYPERPARAMETER_VALUE:
            problems.append(
                Problem(
                    f"{key}.mpirunArgs",
                    f"with the env forwarded, the MPI options come to {len(options)} characters; SageMaker takes "
                    f"{MAX_HYPERPARAMETER_VALUE}",
                )
            )
        for j, arg in enumerate(self.mpirun_args):
            if not arg or any(c.isspace() for c in arg):
                problems.append(
                    Problem(
                        f"{key}.mpirunArgs[{j}]",
                        f"{spec_checks.fmt(arg)} is not allowed with runtime 'sagemaker': SageMaker splits MPI options "
                        "on whitespace",
                    )
                )


def mpirun_command(spec: MpiBase, target: JobTarget, forward: Sequence[str]) -> list[str]:
    """``mpirun`` over every GPU of every worker: one rank per GPU (-np = nodes x GPUs), no CPU
    binding (the frameworks pin their own threads), and the environment forwarded with ``-x``:
    ranks start through sshd on the workers and would not see the container's env otherwise."""
    cmd = [
        spec.mpirun,
        "--allow-run-as-root",
        "-np",
        str(spec.nodes * target.gpus),
        "--bind-to",
        "none",
        "--map-by",
        "slot",
    ]
    for name in ["PATH", "LD_LIBRARY_PATH", *forward]:
        cmd += ["-x", name]
    return cmd + list(spec.mpirun_args) + spec.rank_command()


def mpijob(spec: MpiBase, ctx: JobsContext, extra_env: Mapping[str, str]) -> dict[str, Any]:
    """The MPIJob of an MPI kind."""
    w = pod.gpu_worker(spec, ctx, extra_env)
    target, env = w.target, w.env
    forward = [e["name"] for e in env]

    # The launcher runs on the GPU group without GPU or EFA requests. It uses the training image,
    # which is large and already cached on those nodes (not worth pulling onto small system nodes),
    # and it stays in the workers' AZ. It is created only once every worker is Ready
    # (WaitForWorkersReady), so mpirun never starts before the worker hostnames resolve.
    launcher = {
        "name": "launcher",
        "image": spec.image,
        "command": spec.launcher_command(target, forward),
        "env": env,
        "resources": copy.deepcopy(LAUNCHER_RESOURCES),
    }
    launcher_pod = w.pod_spec([launcher], with_volumes=False, shm=False)
    spec.equip_launcher(launcher_pod, launcher, ctx)
    worker = w.container("worker", spec.worker_command, None)
    worker_pod = w.pod_spec([worker])
    if isinstance(spec, ResilientJob):
        # The ranks run in the workers (through sshd): the guard, the checkpoints and the grace period are theirs.
        spec.equip(worker_pod, worker, ctx)
    return {
        "apiVersion": MPIJOB_API_VERSION,
        "kind": MPIJOB.kind,
        "metadata": pod.metadata(spec, ctx),
        "spec": {
            "slotsPerWorker": target.gpus,
            "launcherCreationPolicy": "WaitForWorkersReady",
            # Running: once the launcher is done the workers (sshd, holding the GPUs) are removed;
            # the launcher pod and its log stay. mpi-operator applies backoffLimit, the deadline and
            # the TTL to the launcher Job.
            "runPolicy": {"cleanPodPolicy": "Running", **spec.bounds()},
            MPIJOB.replica_specs: {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": pod.template(spec, launcher_pod, "launcher", ctx),
                },
                "Worker": {
                    # Always set: an omitted Worker.replicas is 0 and the job never starts.
                    "replicas": spec.nodes,
                    "restartPolicy": "Never",
                    "template": pod.template(spec, worker_pod, "worker", ctx),
                },
            },
        },
    }
