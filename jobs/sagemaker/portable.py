"""``PortableJob``: a GPU kind that runs either on EKS (the kind's Kubernetes job) or as a SageMaker
training job, from one spec (``runtime``). The kinds give their launchers, entry line and
distribution settings; this class checks the spec for the runtime it names (SageMaker's own
checks are ``jobs/sagemaker/sagemaker_checks.py``), picks the ml. type and describes the training job.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from facts import catalog
from facts.aws_names import INSTANCE_NVME_STORAGE_GB
from facts.instance_types import InstanceType
from facts.problems import Problem
from jobs import spec_checks
from jobs.base import GpuJob
from jobs.pod import efa_env, env_text
from jobs.sagemaker.entry_point import EntryPoint, _launcher_matches, _program, args_to_hyperparameters
from jobs.sagemaker.limits import DEFAULT_MAX_RUNTIME, MAX_RETRY_ATTEMPTS, MAX_RUNTIME_LIMIT, NAME_HASH_LENGTH
from jobs.sagemaker.options import SageMakerOptions
from jobs.sagemaker.sagemaker_checks import check_sagemaker_runtime
from jobs.sagemaker.training_job import FileSystemChannel, S3Channel, SageMakerJob
from jobs.targets import GroupFacts, JobEnvironment

# Fields that only steer the job on EKS (its Kueue queue, priority and placement): they leave the name of a
# SageMaker job alone, so adding them (or changing them) never starts a new SageMaker training run.
EKS_ONLY_FIELDS = frozenset({"team", "priority", "placement", "placement_layer"})


class PortableJob(GpuJob):
    """A GPU kind that runs either on EKS or as a SageMaker training job, from one spec."""

    # What may come before the entry script on SageMaker; "python" stands for any python/python3.x.
    LAUNCHERS: ClassVar[tuple[tuple[str, ...], ...]] = ()
    LAUNCHER_TEXT: ClassVar[str] = ""  # the launchers, for messages
    SCRIPT_SUFFIXES: ClassVar[tuple[str, ...]] = (".py",)

    runtime: Literal["eks", "sagemaker"] = Field(
        "eks",
        description="`eks`: the kind's Kubernetes job on the cluster; `sagemaker`: a "
        "SageMaker training job in the stack's VPC",
    )
    node_group: str | None = Field(  # type: ignore[assignment]
        None,
        description="the GPU node group the job runs on (required with runtime eks; with sagemaker "
        "it picks the ml. type unless sagemaker.instanceType does)",
    )
    sagemaker: SageMakerOptions | None = Field(
        None, description="SageMaker settings, read with runtime sagemaker (docs/sagemaker.md)"
    )

    @property
    def sm(self) -> SageMakerOptions:
        """The SageMaker settings (their defaults when the job has none)."""
        return self.sagemaker or SageMakerOptions()

    # -- hooks of the kinds ------------------------------------------------------------------

    def entry_line(self) -> list[str]:
        """What the job runs: the launcher, the script and its arguments."""
        raise NotImplementedError

    def sagemaker_distribution(self, instance: InstanceType, environment: Mapping[str, str]) -> dict[str, Any]:
        """The kind's distribution hyperparameters (unencoded values)."""
        raise NotImplementedError

    def check_sagemaker_kind(self, key: str, problems: list[Problem]) -> None:
        """Kind-specific checks of the SageMaker runtime."""

    def check_sagemaker_instance(self, key: str, problems: list[Problem], instance: InstanceType) -> None:
        """Kind-specific checks of the SageMaker runtime against its ml. type (enabled jobs)."""

    # -- checks ------------------------------------------------------------------------------

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        sm = self.sm
        k = f"{key}.sagemaker"
        if self.runtime == "eks":
            if sm.inputs:
                problems.append(
                    Problem(
                        f"{k}.inputs",
                        "S3 input channels are SageMaker's: with runtime 'eks' copy the data onto a volume "
                        "(a data-stage job) and mount it, or use runtime 'sagemaker'",
                    )
                )
            return
        check_sagemaker_runtime(self, key, problems)

    def check_environment(self, key: str, problems: list[Problem], env: JobEnvironment) -> None:
        if self.runtime == "eks":
            if self.node_group is None:
                problems.append(
                    Problem(f"{key}.nodeGroup", "is required with runtime 'eks': the GPU node group the job runs on")
                )
                return
            super().check_environment(key, problems, env)
            return
        # SageMaker: no operator, node group or etcd of the cluster is involved.
        for j, v in enumerate(self.volumes):
            spec_checks.check_volume(v.name, env.volumes, f"{key}.volumes[{j}].name", problems)
        instance = self.sagemaker_instance_or_problem(key, env, problems)
        if instance is None:
            return
        self.check_sagemaker_instance(key, problems, instance)
        nvme = INSTANCE_NVME_STORAGE_GB.get(instance.name.removeprefix(catalog.ML_PREFIX))
        if nvme is not None and self.sm.volume_size_gib > nvme:
            problems.append(
                Problem(
                    f"{key}.sagemaker.volumeSizeGiB",
                    f"{self.sm.volume_size_gib} is more than the {nvme} GB of local NVMe "
                    f"storage of {instance.name}: SageMaker gives such a type "
                    "its NVMe storage instead of an EBS volume and refuses a larger size; "
                    f"use at most {nvme}, or leave volumeSizeGiB out",
                )
            )
        if self.efa is True and not instance.efa_supported:
            problems.append(
                Problem(
                    f"{key}.efa",
                    f"true is not allowed: {instance.name} has no EFA; use an EFA type "
                    f"({', '.join(catalog.SAGEMAKER_EFA_TYPES)}) or drop efa",
                )
            )
        elif self.efa is False and instance.efa_supported:
            problems.append(
                Problem(
                    f"{key}.efa",
                    f"false is not allowed with runtime 'sagemaker' on {instance.name}: "
                    "SageMaker attaches EFA to it and its launchers turn it on; "
                    "drop efa, or pick a type without EFA with sagemaker.instanceType",
                )
            )

    def sagemaker_instance_or_problem(
        self, key: str, env: JobEnvironment, problems: list[Problem]
    ) -> InstanceType | None:
        """The ml. type: sagemaker.instanceType, else the ml. equivalent of the node group's type."""
        sm = self.sm
        if sm.instance_type is not None:
            return catalog.get_sagemaker(sm.instance_type)  # an unknown type is reported by check()
        if self.node_group is None:
            problems.append(
                Problem(
                    f"{key}.sagemaker.instanceType",
                    "is required with runtime 'sagemaker' when the job names no nodeGroup",
                )
            )
            return None
        g: GroupFacts | None = env.groups.get(self.node_group)
        if g is None:
            known = ", ".join(repr(n) for n in sorted(env.groups)) or "none"
            problems.append(
                Problem(
                    f"{key}.nodeGroup",
                    f"{spec_checks.fmt(self.node_group)} is not a GPU node group of this stack (known: "
                    f"{known}); with runtime 'sagemaker' set sagemaker.instanceType instead",
                )
            )
            return None
        name = catalog.sagemaker_type_for(g.instance.name)
        if name is None:
            problems.append(
                Problem(
                    f"{key}.sagemaker.instanceType",
                    f"is required: node group {g.name!r} runs {g.instance.name}, which has "
                    "no SageMaker training equivalent in the catalog",
                )
            )
            return None
        return catalog.get_sagemaker(name)

    # -- the SageMaker side ------------------------------------------------------------------

    @property
    def max_runtime_seconds(self) -> int:
        return self.active_deadline_seconds if self.active_deadline_seconds is not None else DEFAULT_MAX_RUNTIME

    def entry_point_or_problem(self) -> EntryPoint | Problem:
        """The launcher, script and hyperparameters of ``entry_line()``, or the problem (key
        relative to the job) that keeps it from running on SageMaker."""
        line = self.entry_line()
        at = next((i for i, part in enumerate(line) if part.endswith(self.SCRIPT_SUFFIXES)), None)
        if at is None:
            return Problem(
                "command",
                f"{spec_checks.fmt(line)} names no {'/'.join(self.SCRIPT_SUFFIXES)} entry "
                "script, which SageMaker needs as sagemaker_program",
            )
        launcher = tuple(line[:at])
        if not any(_launcher_matches(launcher, allowed) for allowed in self.LAUNCHERS):
            return Problem(
                "command",
                f"{spec_checks.fmt(list(launcher))} before the entry script is not what "
                f"SageMaker runs for a {self.kind!r} job; use {self.LAUNCHER_TEXT}",
            )
        if line[at].endswith(".sh") and launcher:
            return Problem(
                "command",
                f"{spec_checks.fmt(list(launcher))} before the shell script {line[at]!r}: "
                "SageMaker runs a .sh entry script with /bin/sh, so give it alone",
            )
        hyper = args_to_hyperparameters(line[at + 1 :])
        if isinstance(hyper, str):
            return Problem("args", hyper)
        return EntryPoint(launcher, line[at], hyper)

    def sagemaker_job(
        self, instance: InstanceType, region: str, stack_id: str, tags: dict[str, str] | None = None
    ) -> SageMakerJob:
        """The SageMaker training job of this spec (checked: call only when it has no problems)."""
        entry = self.entry_point_or_problem()
        if isinstance(entry, Problem):
            raise ValueError(f"job {self.name!r}: {entry.key}: {entry.message}")
        sm = self.sm
        assert sm.output_path is not None, "checked: outputPath is required with runtime sagemaker"
        efa_on = instance.efa_supported and self.efa is not False
        derived = efa_env(instance.efa_interfaces if efa_on else 0, instance.efa_rdma)
        environment = {**derived, **{k: env_text(v) for k, v in self.env.items() if k not in derived}}
        source_dir = sm.source_dir or posixpath.dirname(entry.script)
        program = sm.entry_point or _program(entry.script, source_dir)
        settings: dict[str, Any] = {
            "sagemaker_program": program,
            "sagemaker_submit_directory": source_dir,
            "sagemaker_region": region,
            **self.sagemaker_distribution(instance, environment),
        }
        hyperparameters = {k: json.dumps(v) for k, v in sorted(entry.hyperparameters.items())}
        hyperparameters.update({k: json.dumps(v) for k, v in settings.items()})
        max_wait = None
        if sm.spot:
            max_wait = sm.max_wait_seconds or min(2 * self.max_runtime_seconds, MAX_RUNTIME_LIMIT)
        s3_read = [s.s3_uri for s in sm.inputs]
        if source_dir.startswith("s3://"):
            s3_read.append(source_dir)
        return SageMakerJob(
            job=self.name,
            training_job_name=self.training_job_name(stack_id, instance.name),
            image=self.image,
            instance_type=instance.name,
            instance_count=self.max_workers(),
            gpus_per_instance=instance.gpus,
            efa=bool(derived),
            volume_size_gib=sm.volume_size_gib,
            hyperparameters=hyperparameters,
            environment=environment,
            file_systems=[
                FileSystemChannel(v.name, v.name, (v.sub_path or "").strip("/"), v.read_only) for v in self.volumes
            ],
            s3_inputs=[S3Channel(s.channel, s.s3_uri, s.mode, s.distribution) for s in sm.inputs],
            output_path=sm.output_path,
            max_runtime_seconds=self.max_runtime_seconds,
            retries=min(self.backoff_limit, MAX_RETRY_ATTEMPTS),
            spot=sm.spot,
            max_wait_seconds=max_wait,
            checkpoint_s3_uri=sm.checkpoint_s3_uri,
            tensorboard_s3_uri=sm.tensorboard_s3_uri,
            s3_read=s3_read,
            tags={**(tags or {}), "gputraining/job": self.name},
        )

    def training_job_name(self, stack_id: str, instance_type: str) -> str:
        """``<name>-<run>-<8 hex>``: the hash covers the stack, the spec and the ml. type (which can
        come from the node group), so two stacks in one account never share a name and a changed
        job is a new training job with a new name."""
        digest = self.spec_digest(stack_id, instance_type, exclude=EKS_ONLY_FIELDS, length=NAME_HASH_LENGTH)
        return f"{self.name}-{self.run}-{digest}"
