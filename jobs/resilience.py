"""Hang detection and auto-resume for the training kinds (``pytorch-elastic``, ``mpi``, ``paddle``;
docs/hangs-and-resume.md).

A job with ``progress`` or ``checkpoints`` runs each worker under the progress guard
(``jobs/scripts/progress_guard.py``), shipped in a ConfigMap of the job (``<name>-guard``) mounted at
``/opt/gputraining``:

- ``progress``: how the job shows progress (a log pattern or a heartbeat file) and how long it may go
  without it; the guard stops a worker that goes quiet (exit 124) so that the job's own restart machinery
  acts: torchrun's worker-group restart (bounded by ``maxRestarts``), the pod retries of MPI and Paddle
  jobs (bounded by ``backoffLimit``);
- ``checkpoints``: one directory per job and run on a shared volume (``<path>/<job>/run-<run>``, mounted at
  ``mountPath``; the same across restarts and re-creations of the job, a new one when ``run`` is bumped).
  The workers get its path in ``CHECKPOINT_DIR`` and the newest complete checkpoint in ``RESUME_FROM`` (a
  directory holding a ``COMPLETE`` file, written last); the pods get ``gracePeriodSeconds`` to save on
  SIGTERM.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from facts import job_signals
from facts.problems import Problem
from jobs import fabric as fabric_spec
from jobs import spec_checks
from jobs.base import GpuJob, Manifest, SpecModel
from jobs.pod import claim, job_efa_interfaces, labels
from jobs.targets import GroupFacts, JobEnvironment, JobsContext

SCRIPTS = Path(__file__).parent / "scripts"
GUARD_SCRIPT = (SCRIPTS / "progress_guard.py").read_text()
# What the guard's ConfigMap carries: the guard, the checks it runs and what they import, each file as it is;
# job_signals.py is the contract module of facts/ (the signal lines' shape), shipped whole.
GUARD_FILES = {
    "progress_guard.py": GUARD_SCRIPT,
    **{
        name: (SCRIPTS / name).read_text()
        for name in (
            "fabric_check.py",
            "fabric_rule.py",
            "mpi_fabric.py",
            "slow_node.py",
            "job_signal.py",
            "kube_api.py",
        )
    },
    "job_signals.py": Path(job_signals.__file__).read_text(),
}
GUARD_DIR = "/opt/gputraining"
GUARD_FILE = "progress_guard.py"
GUARD_PATH = f"{GUARD_DIR}/{GUARD_FILE}"
GUARD_VOLUME = "progress-guard"
# The interpreter that starts the guard where no launcher does (MPI ranks, Paddle trainers).
GUARD_PYTHON = "python3"
CHECKPOINT_DIR_ENV = "CHECKPOINT_DIR"
RESUME_ENV = "RESUME_FROM"
COMPLETE_MARKER = "COMPLETE"  # the guard's MARKER
HANG_EXIT = 124  # the guard's HANG_EXIT
# Bounds of the progress windows: 5 s (a test; a real job needs minutes) to 7 days.
MIN_WINDOW, MAX_WINDOW = 5, 7 * 24 * 3600
# The grace period to save on SIGTERM: 30 s (torchrun's own default shutdown timeout) to 1 hour. A spot
# interruption comes 2 minutes before the instance goes, so past about 110 s a save on spot races the end.
MIN_GRACE, MAX_GRACE, DEFAULT_GRACE = 30, 3600, 110
SPOT_NOTICE = 120
RESERVED_ENV = {
    CHECKPOINT_DIR_ENV: "is the job's checkpoint directory, set by the stack with `checkpoints`",
    RESUME_ENV: "is the newest complete checkpoint, set by the progress guard at each start",
}


class Progress(SpecModel):
    """How a job shows progress, and how long it may go without it (hang detection)."""

    log_pattern: str | None = Field(
        None, description="a Python regular expression; a line of the first rank's output that matches it is progress"
    )
    heartbeat_file: str | None = Field(
        None, description="an absolute path in the container that the first rank touches to show progress"
    )
    startup_seconds: int = Field(
        1800, description="the longest wait for the first sign after a worker starts (5..604800)"
    )
    interval_seconds: int = Field(600, description="the longest wait between two signs (5..604800)")


class Checkpoints(SpecModel):
    """Where a job keeps its checkpoints, on one of the stack's shared volumes (auto-resume)."""

    volume: str = Field(description="`fsx` or `efs`: the stack's shared volume that holds the checkpoints")
    path: str = Field("checkpoints", description="the folder on the volume; the job's is <path>/<job>/run-<run>")
    mount_path: str = Field("/checkpoints", description="where the workers see the job's folder (CHECKPOINT_DIR)")
    grace_period_seconds: int = Field(
        DEFAULT_GRACE, description="terminationGracePeriodSeconds: the time to save on SIGTERM (30..3600)"
    )


class ResilientJob(GpuJob):
    """A GPU kind whose workers can run under the progress guard."""

    RESERVED_ENV = {
        **GpuJob.RESERVED_ENV,
        **{name: f"is not allowed: {name} {why}" for name, why in RESERVED_ENV.items()},
    }

    progress: Progress | None = Field(None, description="hang detection (docs/hangs-and-resume.md)")
    checkpoints: Checkpoints | None = Field(
        None, description="a checkpoint directory and resume (docs/hangs-and-resume.md)"
    )
    fabric: fabric_spec.FabricMode | None = Field(
        None,
        description=(
            "the fabric check (docs/performance.md): `enforce` stops the job when NCCL does not use EFA, `warn` "
            "reports it, `off`; default enforce on an EFA group with more than one node, else off"
        ),
    )
    # Whether the kind's workers run the guard with the pod's own env (not MPI: its ranks start through sshd).
    FABRIC_CHECK: ClassVar[bool] = True

    def fabric_mode(self, efa_interfaces: int) -> str:
        """The fabric check's mode for a worker with ``efa_interfaces`` (0: not on EFA)."""
        if not self.FABRIC_CHECK or not efa_interfaces or getattr(self, "runtime", "eks") != "eks":
            return "off"
        return self.fabric or fabric_spec.default_mode(efa_interfaces, self.max_workers())

    def node_checks(self) -> list[str]:
        """The guard options of the kind's own node checks (pytorch-elastic: slowNode); none here."""
        return []

    def reports(self, efa_interfaces: int) -> bool:
        """Whether the guard reports through the API (the fabric check, a node check): its account, the pod identity."""
        return self.fabric_mode(efa_interfaces) != "off" or bool(self.node_checks())

    def guarded(self, efa_interfaces: int) -> bool:
        return self.progress is not None or self.checkpoints is not None or self.reports(efa_interfaces)

    def efa_of(self, ctx: JobsContext) -> int:
        return job_efa_interfaces(self, self.target(ctx))

    def checkpoint_folder(self) -> str:
        """The job's folder on its checkpoint volume, relative to the volume's root."""
        assert self.checkpoints is not None
        return posixpath.join(self.checkpoints.path.strip("/"), self.name, f"run-{self.run}")

    def resilience_env(self) -> dict[str, str]:
        """Env of the workers: the checkpoint directory."""
        return {CHECKPOINT_DIR_ENV: self.checkpoints.mount_path} if self.checkpoints is not None else {}

    def read_only_mounts(self) -> list[tuple[str, str]]:
        """Where the worker container cannot write, with what is mounted there: the guard's own folder
        (a ConfigMap, mounted read-only by ``equip``) and the volumes the job mounts ``readOnly``."""
        found = [(GUARD_DIR, "the progress guard's folder (its ConfigMap, mounted read-only)")]
        found += [
            (v.mount_path, f"volumes[{j}] ({v.name}, mounted with readOnly: true)")
            for j, v in enumerate(self.volumes)
            if v.read_only
        ]
        return found

    def guard_options(self, efa_interfaces: int) -> list[str]:
        out: list[str] = ["--job", self.name]
        mode = self.fabric_mode(efa_interfaces)
        if mode != "off":
            out += ["--fabric", mode, "--efa-interfaces", str(efa_interfaces)]
        out += self.node_checks()
        p = self.progress
        if p is not None:
            out += ["--log-pattern", p.log_pattern] if p.log_pattern is not None else []
            out += ["--heartbeat-file", p.heartbeat_file] if p.heartbeat_file is not None else []
            out += ["--startup-seconds", str(p.startup_seconds), "--interval-seconds", str(p.interval_seconds)]
        if self.checkpoints is not None:
            out += ["--checkpoint-dir", self.checkpoints.mount_path]
        return out

    def guard_command(self, command: list[str], efa_interfaces: int) -> list[str]:
        """``command`` under the guard, started by python3 (MPI ranks, Paddle trainers); unchanged without it."""
        if not self.guarded(efa_interfaces):
            return list(command)
        return [GUARD_PYTHON, GUARD_PATH, *self.guard_options(efa_interfaces), "--", *command]

    def guard_config_map(self, ctx: JobsContext) -> list[Manifest]:
        """The ConfigMap that carries the guard (none for a job without it), and with the fabric check the guard's
        service account and Role (Events)."""
        efa = self.efa_of(ctx)
        if not self.guarded(efa):
            return []
        nodes = bool(self.node_checks())
        account = fabric_spec.rbac(self.name, ctx.namespace, labels(self), nodes) if self.reports(efa) else []
        return [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": self.guard_config_map_name, "namespace": ctx.namespace, "labels": labels(self)},
                "data": dict(GUARD_FILES),
            },
            *account,
        ]

    @property
    def guard_config_map_name(self) -> str:
        return f"{self.name}-guard"

    def equip(self, pod_spec: dict[str, Any], container: dict[str, Any], ctx: JobsContext) -> None:
        """Give a worker pod the guard, the checkpoint folder and the grace period to save; with the fabric check
        the pod's identity and the guard's service account."""
        efa = self.efa_of(ctx)
        if not self.guarded(efa):
            return
        if self.reports(efa):
            pod_spec["serviceAccountName"] = fabric_spec.account_name(self.name)
            container["env"] = [*container.get("env", []), *fabric_spec.identity_env()]
        volumes = pod_spec.setdefault("volumes", [])
        mounts = container.setdefault("volumeMounts", [])
        volumes.append({"name": GUARD_VOLUME, "configMap": {"name": self.guard_config_map_name}})
        mounts.append({"name": GUARD_VOLUME, "mountPath": GUARD_DIR, "readOnly": True})  # read_only_mounts
        # `kubectl describe pod` shows the guard's message (or the log's end) of a container that failed.
        container["terminationMessagePolicy"] = "FallbackToLogsOnError"
        c = self.checkpoints
        if c is None:
            return
        if not any(v["name"] == c.volume for v in volumes):
            volumes.append({"name": c.volume, "persistentVolumeClaim": {"claimName": claim(ctx, self, c.volume)}})
        mounts.append({"name": c.volume, "mountPath": c.mount_path, "subPath": self.checkpoint_folder()})
        pod_spec["terminationGracePeriodSeconds"] = c.grace_period_seconds

    # -- checks ------------------------------------------------------------------------------

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        runtime = getattr(self, "runtime", "eks")
        for field in ("progress", "checkpoints"):
            if getattr(self, field) is not None and runtime != "eks":
                problems.append(Problem(f"{key}.{field}", SAGEMAKER_TEXT[field]))
        if self.progress is not None:
            check_progress(self.progress, f"{key}.progress", problems)
            check_heartbeat_writable(self.progress, self.read_only_mounts(), f"{key}.progress", problems)
        if self.checkpoints is not None:
            check_checkpoints(self.checkpoints, f"{key}.checkpoints", problems)
            taken = [(v.mount_path, j) for j, v in enumerate(self.volumes)]
            mp = posixpath.normpath(self.checkpoints.mount_path)
            for path, j in taken:
                if posixpath.normpath(path) == mp:
                    problems.append(
                        Problem(
                            f"{key}.checkpoints.mountPath", f"{spec_checks.fmt(mp)} is used by volumes[{j}] already"
                        )
                    )

    def check_group(self, key: str, problems: list[Problem], group: GroupFacts) -> None:
        super().check_group(key, problems, group)
        efa = 0 if self.efa is False else group.efa_interfaces
        check_fabric(self, efa, f"{key}.fabric", problems)

    def check_environment(self, key: str, problems: list[Problem], env: JobEnvironment) -> None:
        super().check_environment(key, problems, env)
        c = self.checkpoints
        if c is not None and c.volume in VOLUME_CHOICES and getattr(self, "runtime", "eks") == "eks":
            spec_checks.check_volume(c.volume, env.volumes, f"{key}.checkpoints.volume", problems)


SAGEMAKER_TEXT = {
    "progress": "is not allowed with runtime 'sagemaker': the stack's progress guard runs in the job's pods on EKS; "
    "on SageMaker, bound the run with activeDeadlineSeconds (its MaxRuntimeInSeconds); "
    "or use runtime 'eks'",
    "checkpoints": (
        "is not allowed with runtime 'sagemaker': on SageMaker use sagemaker.checkpointS3Uri (SageMaker syncs "
        "/opt/ml/checkpoints to it and back when a job starts again); or use runtime 'eks'"
    ),
}


def check_fabric(spec: ResilientJob, efa_interfaces: int, k: str, problems: list[Problem]) -> None:
    """`fabric` enforce or warn needs a kind whose workers run it and a job on EFA."""
    asked = spec.fabric in ("enforce", "warn")
    if asked and not spec.FABRIC_CHECK:
        problems.append(
            Problem(
                k,
                f"{spec.fabric!r} is not allowed for kind {spec.kind!r}: its ranks start through sshd without the "
                "pod's env; prove the fabric with a nccl-test job, or set fabric: off",
            )
        )
    elif asked and not efa_interfaces:
        problems.append(Problem(k, f"{spec.fabric!r} needs a job on EFA (an EFA node group, efa not false); use 'off'"))


def check_progress(p: Progress, k: str, problems: list[Problem]) -> None:
    """One sign (a log pattern or a heartbeat file), a valid regex that does not match every line,
    an absolute heartbeat path, windows in range."""
    if (p.log_pattern is None) == (p.heartbeat_file is None):
        problems.append(Problem(k, "needs exactly one of logPattern and heartbeatFile (how the job shows progress)"))
    if p.log_pattern is not None:
        check_pattern(p.log_pattern, f"{k}.logPattern", problems)
    if p.heartbeat_file is not None:
        path = p.heartbeat_file
        if not path.startswith("/") or ".." in path.split("/") or path.endswith("/"):
            problems.append(
                Problem(
                    f"{k}.heartbeatFile",
                    f"{spec_checks.fmt(path)} is not allowed: an absolute file path in the container without '..', "
                    "like '/tmp/heartbeat'",
                )
            )
    for name, value in (("startupSeconds", p.startup_seconds), ("intervalSeconds", p.interval_seconds)):
        check_range(value, MIN_WINDOW, MAX_WINDOW, f"{k}.{name}", problems)


def check_heartbeat_writable(p: Progress, read_only: list[tuple[str, str]], k: str, problems: list[Problem]) -> None:
    """The heartbeat file is one the first rank can write: not under a read-only mount (``read_only``:
    path, what is mounted there). The guard would never see it change and stop every worker as hung,
    attempt after attempt."""
    path = p.heartbeat_file
    if path is None or not path.startswith("/"):
        return
    norm = posixpath.normpath(path)
    for mount, what in read_only:
        top = posixpath.normpath(mount) if mount.startswith("/") else mount
        if norm == top or norm.startswith(top.rstrip("/") + "/"):
            problems.append(
                Problem(
                    f"{k}.heartbeatFile",
                    f"{spec_checks.fmt(path)} is not allowed: {top} is {what}, which the workers cannot write, so "
                    "the guard would stop every worker as hung; give a path the job writes, like '/tmp/heartbeat' or "
                    "one on a volume mounted read-write",
                )
            )
            return


def check_pattern(pattern: str, k: str, problems: list[Problem]) -> None:
    """A Python regular expression (what the guard compiles) that an empty line does not match."""
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        problems.append(
            Problem(k, f"{spec_checks.fmt(pattern)} is not a valid Python regular expression ({err}); e.g. 'step \\d+'")
        )
        return
    if compiled.search("") is not None:
        problems.append(
            Problem(
                k,
                f"{spec_checks.fmt(pattern)} is not allowed: it matches an empty line, so any output would count as "
                "progress; give a pattern of what the job prints when it progresses, e.g. 'step \\d+'",
            )
        )


def check_range(value: int, low: int, high: int, k: str, problems: list[Problem]) -> None:
    if not low <= value <= high:
        problems.append(Problem(k, f"{value} is out of range: {low} to {high} seconds"))


def check_checkpoints(c: Checkpoints, k: str, problems: list[Problem]) -> None:
    """A volume name the stack knows, a folder inside it, an absolute mount path, a grace period in range."""
    if c.volume not in VOLUME_CHOICES:
        problems.append(
            Problem(
                f"{k}.volume",
                f"{spec_checks.fmt(c.volume)} is not a shared volume: use one of {', '.join(VOLUME_CHOICES)}",
            )
        )
    if c.path.startswith("/") or ".." in c.path.split("/") or not c.path.strip("/"):
        problems.append(
            Problem(
                f"{k}.path",
                f"{spec_checks.fmt(c.path)} is not allowed: a folder relative to the volume's root without '..', like "
                "'checkpoints'",
            )
        )
    mp = c.mount_path
    norm = posixpath.normpath(mp) if mp.startswith("/") else mp
    if not mp.startswith("/") or ".." in mp.split("/") or norm in ("/", "/dev/shm", GUARD_DIR):
        problems.append(
            Problem(
                f"{k}.mountPath",
                f"{spec_checks.fmt(mp)} is not allowed: an absolute path like '/checkpoints' (not '/', /dev/shm or "
                f"{GUARD_DIR})",
            )
        )
    check_range(c.grace_period_seconds, MIN_GRACE, MAX_GRACE, f"{k}.gracePeriodSeconds", problems)


VOLUME_CHOICES = ("fsx", "efs")


def restart_bound(spec: GpuJob) -> str:
    """What bounds the restarts after a hang, in words."""
    max_restarts = getattr(spec, "max_restarts", None)
    if max_restarts is not None:
        return (
            f"torchrun restarts the worker group up to {max_restarts}x (maxRestarts), then the pod fails (backoffLimit "
            f"{spec.backoff_limit})"
        )
    return f"the pod fails and is retried up to {spec.backoff_limit}x (backoffLimit)"


def describe(spec: GpuJob) -> tuple[str, str]:
    """(hang detection, checkpoints) of a job for the plan's job table."""
    if not isinstance(spec, ResilientJob):
        return "n/a for this kind", "n/a for this kind"
    p, c = spec.progress, spec.checkpoints
    hang = "off"
    if p is not None:
        sign = f"log /{p.log_pattern}/" if p.log_pattern is not None else f"heartbeat {p.heartbeat_file}"
        hang = f"on: {sign}, first within {p.startup_seconds}s, then every {p.interval_seconds}s; {restart_bound(spec)}"
    saved = "off"
    if c is not None:
        saved = (
            f"on: {c.volume} folder {spec.checkpoint_folder()} at {c.mount_path}, {c.grace_period_seconds}s to save on "
            "SIGTERM"
        )
    return hang, saved
