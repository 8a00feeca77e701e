"""SageMaker as a second runtime for the GPU kinds where it makes sense (``mpi``, ``pytorch-elastic``):
one spec, ``runtime: eks`` (the kind's Kubernetes job) or ``runtime: sagemaker`` (a SageMaker
training job in the stack's VPC, reading the stack's FSx and EFS).

What carries over from the EKS spec, unchanged:
- ``image``;
- the entry script: ``command`` + ``args`` is ``[launcher..., script, --name value ...]``; the
  launcher is what SageMaker's framework container runs for the kind (``python`` under mpirun for
  ``mpi``, torchrun for ``pytorch-elastic``), the script becomes ``sagemaker_program`` and its
  ``--name value`` arguments become hyperparameters, which the container passes back as the same
  ``--name value`` arguments;
- ``volumes``: each becomes a file-system input channel named after the volume, which SageMaker
  mounts at ``/opt/ml/input/data/<name>``; the job mounts it at that same path on EKS, so the
  script sees its data at one path in both runtimes;
- ``env`` (plus the EFA settings derived from the instance type), ``activeDeadlineSeconds`` (max
  runtime), ``backoffLimit`` (retries) and the total GPUs: instances x GPUs of the ``ml.`` type,
  which is the ml. equivalent of the node group's type unless ``sagemaker.instanceType`` says.

Pure: builds a ``SageMakerJob`` description; ``components/sagemaker.py`` registers it.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping, Optional, Sequence

from pydantic import Field

from facts import catalog
from facts.aws_names import INSTANCE_NVME_STORAGE_GB, SAGEMAKER_INPUT_CHANNELS_MAX, SAGEMAKER_S3_URI_MAX
from facts.catalog import InstanceType
from facts.problems import Problem
from jobs import checks
from jobs.base import EFA_ENV_NAMES, GpuJob, GroupFacts, JobEnvironment, SpecModel
from jobs.pod import efa_env, env_text

# Where SageMaker mounts input channels (file-system channels included).
SAGEMAKER_DATA_ROOT = "/opt/ml/input/data"
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"  # SageMaker's default checkpoint directory
TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"  # what SageMaker syncs to tensorBoardS3Uri
# SageMaker's default and maximum for MaxRuntimeInSeconds (1 day, 28 days).
DEFAULT_MAX_RUNTIME = 86_400
MAX_RUNTIME_LIMIT = 2_419_200
MAX_RETRY_ATTEMPTS = 30  # RetryStrategy.MaximumRetryAttempts is 1-30
# CreateTrainingJob limits: 100 hyperparameters, keys up to 256 characters, values up to 2500.
MAX_HYPERPARAMETERS, MAX_HYPERPARAMETER_KEY, MAX_HYPERPARAMETER_VALUE = 100, 256, 2500
TRAINING_JOB_NAME_MAX = 63
NAME_HASH_LENGTH = 8  # hex digits of the spec hash in a training job name
# Hyperparameters the stack sets itself next to the script's arguments: program, submit directory,
# region, and up to three of the kind's distribution settings.
STACK_HYPERPARAMETERS = 6
MAX_ENVIRONMENT, MAX_ENVIRONMENT_VALUE = 100, 512  # CreateTrainingJob's Environment map
_CHANNEL = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
# An ECR image: SageMaker pulls training images from ECR (AWS's Deep Learning Containers live there too).
ECR_IMAGE = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([a-z0-9][a-z0-9._/-]*)(?::[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$")
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
RESERVED_HYPERPARAMETER_PREFIX = "sagemaker_"
# Hyperparameters SageMaker's training toolkit keeps for itself without the prefix (params.py's
# SAGEMAKER_HYPERPARAMETERS): the script would never see them.
RESERVED_HYPERPARAMETERS = ("default_user_module_name", "_tuning_objective_metric")
# What argparse takes as a value although it starts with '-' (its negative-number pattern): any
# other value starting with '-' reads as an option once the toolkit passes it as --name value.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# The toolkit's rule for sagemaker_program (process.validate_entry_point): a relative path of
# letters, digits and . _ + - / without '.' or '..' segments.
_SAFE_PROGRAM = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._+-]*(/[A-Za-z0-9._+-]+)*$")


class S3Input(SpecModel):
    """An S3 input channel (SageMaker only): SageMaker copies or streams the prefix into the job."""

    channel: str = Field(description="channel name: the data is at /opt/ml/input/data/<channel> (env SM_CHANNEL_<CHANNEL>)")
    s3_uri: str = Field(description="`s3://bucket/prefix` to read (every object whose key starts with the prefix)")
    mode: Literal["File", "FastFile", "Pipe"] = Field(
        "File", description="`File` copies it before training starts, `FastFile` streams files on first read, `Pipe` streams through a FIFO"
    )
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = Field(
        "FullyReplicated", description="`FullyReplicated`: every instance gets all of it; `ShardedByS3Key`: each instance a share of the objects"
    )


class SageMakerOptions(SpecModel):
    """Settings only the SageMaker runtime reads (kept in the spec when it runs on EKS)."""

    instance_type: Optional[str] = Field(None, description="the `ml.` training type (default: the ml. equivalent of the node group's type)")
    output_path: Optional[str] = Field(None, description="`s3://bucket/prefix` for the model and output files (required with runtime sagemaker)")
    source_dir: Optional[str] = Field(
        None,
        description="the code SageMaker puts in /opt/ml/code: an `s3://.../sourcedir.tar.gz`, or a directory in the image or on a volume (default: the entry script's directory)",
    )
    entry_point: Optional[str] = Field(None, description="the entry script's path inside sourceDir (default: the script in command/args)")
    inputs: list[S3Input] = Field(default_factory=list, description="S3 input channels `{channel, s3Uri, mode, distribution}` (SageMaker only)")
    checkpoint_s3_uri: Optional[str] = Field(None, description="`s3://...` that /opt/ml/checkpoints is synced to (required with spot)")
    tensorboard_s3_uri: Optional[str] = Field(None, description="`s3://...` that /opt/ml/output/tensorboard is synced to")
    spot: bool = Field(False, description="managed spot training (needs checkpointS3Uri: an interrupted job resumes from its checkpoints)")
    max_wait_seconds: Optional[int] = Field(
        None, ge=1, description="spot: how long to wait for capacity plus run, at least the max runtime (default: twice the max runtime, at most 28 days)"
    )
    volume_size_gib: int = Field(
        100,
        ge=1,
        le=16384,
        alias="volumeSizeGiB",
        description="EBS storage per instance, GiB; on types with local NVMe (ml.p3dn, ml.p4d, ml.p5) SageMaker uses the NVMe instead, and refuses more than it holds",
    )


@dataclass(frozen=True)
class EntryPoint:
    """``command`` + ``args`` as SageMaker's framework containers see it."""

    launcher: tuple[str, ...]  # what runs the script (python, torchrun...)
    script: str  # the entry script as the EKS job names it
    hyperparameters: dict[str, str]  # the script's --name value arguments


@dataclass(frozen=True)
class FileSystemChannel:
    """One of the stack's shared volumes as a file-system input channel."""

    channel: str  # the volume name, "fsx" or "efs"
    volume: str
    sub_path: str  # inside the file system ("" = its root); FSx paths get the mount name in front
    read_only: bool


@dataclass(frozen=True)
class S3Channel:
    channel: str
    s3_uri: str
    mode: str
    distribution: str


@dataclass(frozen=True)
class FileSystemTarget:
    """A file system of the stack, as a channel reaches it (known once it exists)."""

    type: str  # SageMaker's FileSystemType: "FSxLustre" or "EFS"
    file_system_id: str
    mount_name: str = ""  # FSx: the mount name every directory path starts with


@dataclass(frozen=True)
class SageMakerJob:
    """Everything a SageMaker training job of one spec needs, before the stack's resources exist."""

    job: str  # the job's name in config
    training_job_name: str  # unique per stack, run and spec (SageMaker names are unique per account and region)
    image: str
    instance_type: str
    instance_count: int
    gpus_per_instance: int
    efa: bool  # EFA in use (the job's security group then also allows all traffic out to itself)
    volume_size_gib: int
    hyperparameters: dict[str, str]  # JSON-encoded values, as SageMaker's framework containers read them
    environment: dict[str, str]
    file_systems: list[FileSystemChannel]
    s3_inputs: list[S3Channel]
    output_path: str
    max_runtime_seconds: int
    retries: int  # RetryStrategy attempts (0 = none)
    spot: bool
    max_wait_seconds: Optional[int]
    checkpoint_s3_uri: Optional[str]
    tensorboard_s3_uri: Optional[str]
    s3_read: list[str] = field(default_factory=list)  # s3:// prefixes or objects the role may read
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def total_gpus(self) -> int:
        return self.instance_count * self.gpus_per_instance

    @property
    def volumes(self) -> set[str]:
        return {f.volume for f in self.file_systems}

    def create_request(
        self, role_arn: str, security_group_ids: Sequence[str], subnet_ids: Sequence[str], file_systems: dict[str, "FileSystemTarget"]
    ) -> dict[str, Any]:
        """SageMaker's CreateTrainingJob request (boto3 names) once the stack's resources exist;
        ``file_systems`` maps each volume the job reads to its file system."""
        channels: list[dict[str, Any]] = []
        for c in self.file_systems:
            fs = file_systems[c.volume]
            # FSx directory paths start with the file system's mount name; EFS paths at its root.
            root = f"/{fs.mount_name}" if fs.type == "FSxLustre" else ""
            path = f"{root}/{c.sub_path}" if c.sub_path else (root or "/")
            source = {
                "FileSystemId": fs.file_system_id,
                "FileSystemType": fs.type,
                "FileSystemAccessMode": "ro" if c.read_only else "rw",
                "DirectoryPath": path,
            }
            # A file system is mounted: File is the only input mode SageMaker takes for one.
            channels.append({"ChannelName": c.channel, "InputMode": "File", "DataSource": {"FileSystemDataSource": source}})
        for s in self.s3_inputs:
            source = {"S3DataType": "S3Prefix", "S3Uri": s.s3_uri, "S3DataDistributionType": s.distribution}
            channels.append({"ChannelName": s.channel, "InputMode": s.mode, "DataSource": {"S3DataSource": source}})
        stopping: dict[str, int] = {"MaxRuntimeInSeconds": self.max_runtime_seconds}
        if self.max_wait_seconds is not None:
            stopping["MaxWaitTimeInSeconds"] = self.max_wait_seconds
        request: dict[str, Any] = {
            "TrainingJobName": self.training_job_name,
            "RoleArn": role_arn,
            "AlgorithmSpecification": {"TrainingImage": self.image, "TrainingInputMode": "File"},
            "HyperParameters": dict(self.hyperparameters),
            "OutputDataConfig": {"S3OutputPath": self.output_path},
            "ResourceConfig": {"InstanceType": self.instance_type, "InstanceCount": self.instance_count, "VolumeSizeInGB": self.volume_size_gib},
            "StoppingCondition": stopping,
            "VpcConfig": {"SecurityGroupIds": list(security_group_ids), "Subnets": list(subnet_ids)},
            "EnableManagedSpotTraining": self.spot,
        }
        if self.environment:
            request["Environment"] = dict(self.environment)
        if channels:
            request["InputDataConfig"] = channels
        if self.retries:
            request["RetryStrategy"] = {"MaximumRetryAttempts": self.retries}
        if self.checkpoint_s3_uri:
            request["CheckpointConfig"] = {"S3Uri": self.checkpoint_s3_uri, "LocalPath": CHECKPOINT_LOCAL_PATH}
        if self.tensorboard_s3_uri:
            request["TensorBoardOutputConfig"] = {"S3OutputPath": self.tensorboard_s3_uri, "LocalPath": TENSORBOARD_LOCAL_PATH}
        if self.tags:
            request["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())]
        return request

    def execution_policy(self, partition: str, region: str, account: str) -> dict[str, Any]:
        """The execution role's policy: its S3 prefixes, the VPC network-interface actions SageMaker
        documents for VPC jobs, its CloudWatch logs and metrics, and pulling its image from ECR."""
        return execution_policy(self, partition, region, account)


# ---------------------------------------------------------------------------------------------
# The spec side: what a kind with two runtimes adds
# ---------------------------------------------------------------------------------------------


class PortableJob(GpuJob):
    """A GPU kind that runs either on EKS or as a SageMaker training job, from one spec."""

    # What may come before the entry script on SageMaker; "python" stands for any python/python3.x.
    LAUNCHERS: ClassVar[tuple[tuple[str, ...], ...]] = ()
    LAUNCHER_TEXT: ClassVar[str] = ""  # the launchers, for messages
    SCRIPT_SUFFIXES: ClassVar[tuple[str, ...]] = (".py",)

    runtime: Literal["eks", "sagemaker"] = Field(
        "eks", description="`eks`: the kind's Kubernetes job on the cluster; `sagemaker`: a SageMaker training job in the stack's VPC"
    )
    node_group: Optional[str] = Field(  # type: ignore[assignment]
        None,
        description="the GPU node group the job runs on (required with runtime eks; with sagemaker it picks the ml. type unless sagemaker.instanceType does)",
    )
    sagemaker: Optional[SageMakerOptions] = Field(None, description="SageMaker settings, read with runtime sagemaker (docs/jobs.md)")

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
                        "S3 input channels are SageMaker's: with runtime 'eks' copy the data onto a volume (a data-stage job) and mount it, or use runtime 'sagemaker'",
                    )
                )
            return
        self._check_sagemaker(key, problems)

    def _check_sagemaker(self, key: str, problems: list[Problem]) -> None:
        sm = self.sm
        k = f"{key}.sagemaker"
        room = TRAINING_JOB_NAME_MAX - len(training_job_suffix(self.run))
        if len(self.name) > room:
            problems.append(
                Problem(
                    f"{key}.name",
                    f"{checks.fmt(self.name)} is too long for runtime 'sagemaker': the training job name adds {training_job_suffix(self.run)!r} "
                    f"and SageMaker allows {TRAINING_JOB_NAME_MAX} characters; shorten it to at most {room}",
                )
            )
        if not ECR_IMAGE.match(self.image):
            problems.append(
                Problem(
                    f"{key}.image",
                    f"{checks.fmt(self.image)} is not an ECR image: SageMaker pulls training images from ECR, like "
                    "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker",
                )
            )
        if self.secret_env:
            name = sorted(self.secret_env)[0]
            problems.append(
                Problem(
                    f"{key}.secretEnv.{name}",
                    "Kubernetes Secrets do not reach SageMaker jobs: read the secret in the script (Secrets Manager) or use runtime 'eks'",
                )
            )
        for j, v in enumerate(self.volumes):
            want = f"{SAGEMAKER_DATA_ROOT}/{v.name}"
            if posixpath.normpath(v.mount_path) != want:
                problems.append(
                    Problem(
                        f"{key}.volumes[{j}].mountPath",
                        f"{checks.fmt(v.mount_path)} is not where SageMaker mounts the {v.name!r} channel; use {want} "
                        "(the same path on EKS, so the script finds its data at one path in both runtimes)",
                    )
                )
        if self.active_deadline_seconds is not None and self.active_deadline_seconds > MAX_RUNTIME_LIMIT:
            problems.append(
                Problem(
                    f"{key}.activeDeadlineSeconds",
                    f"{self.active_deadline_seconds} is more than SageMaker's longest max runtime, {MAX_RUNTIME_LIMIT} (28 days)",
                )
            )
        if sm.instance_type is not None and catalog.get_sagemaker(sm.instance_type) is None:
            problems.append(
                Problem(
                    f"{k}.instanceType",
                    f"{checks.fmt(sm.instance_type)} is not a SageMaker GPU training type of the catalog; use one of {', '.join(catalog.SAGEMAKER_TYPES)}",
                )
            )
        if sm.output_path is None:
            problems.append(Problem(f"{k}.outputPath", "is required with runtime 'sagemaker': the s3:// prefix SageMaker writes the model and output to"))
        for field_name, uri in (("outputPath", sm.output_path), ("checkpointS3Uri", sm.checkpoint_s3_uri), ("tensorboardS3Uri", sm.tensorboard_s3_uri)):
            if uri is not None:
                checks.check_s3_uri(uri, f"{k}.{field_name}", problems)
                _check_uri_length(uri, f"{k}.{field_name}", problems)
        if sm.spot and sm.checkpoint_s3_uri is None:
            problems.append(
                Problem(
                    f"{k}.spot",
                    "true needs checkpointS3Uri: a spot interruption restarts the job, which resumes from /opt/ml/checkpoints only if it is synced to S3",
                )
            )
        if sm.max_wait_seconds is not None:
            if not sm.spot:
                problems.append(Problem(f"{k}.maxWaitSeconds", "applies to spot training only; set spot: true or remove it"))
            elif sm.max_wait_seconds < self.max_runtime_seconds:
                problems.append(
                    Problem(
                        f"{k}.maxWaitSeconds", f"{sm.max_wait_seconds} is less than the max runtime ({self.max_runtime_seconds} s); it must be at least that"
                    )
                )
            elif sm.max_wait_seconds > MAX_RUNTIME_LIMIT:
                problems.append(Problem(f"{k}.maxWaitSeconds", f"{sm.max_wait_seconds} is more than SageMaker allows ({MAX_RUNTIME_LIMIT}, 28 days)"))
        channels: dict[str, str] = {v.name: f"volumes[{j}]" for j, v in enumerate(self.volumes)}
        for j, s3 in enumerate(sm.inputs):
            ik = f"{k}.inputs[{j}]"
            if not _CHANNEL.match(s3.channel):
                problems.append(Problem(f"{ik}.channel", f"{checks.fmt(s3.channel)} is not a channel name: 1-64 letters, digits, '.', '-' and '_'"))
            elif s3.channel in channels:
                problems.append(Problem(f"{ik}.channel", f"{checks.fmt(s3.channel)} is taken by {channels[s3.channel]}; channel names are unique"))
            channels.setdefault(s3.channel, f"sagemaker.inputs[{j}]")
            checks.check_s3_uri(s3.s3_uri, f"{ik}.s3Uri", problems)
            _check_uri_length(s3.s3_uri, f"{ik}.s3Uri", problems)
        if len(self.volumes) + len(sm.inputs) > SAGEMAKER_INPUT_CHANNELS_MAX:
            problems.append(
                Problem(
                    f"{k}.inputs",
                    f"{len(sm.inputs)} S3 inputs and {len(self.volumes)} volumes make {len(self.volumes) + len(sm.inputs)} input channels; "
                    f"SageMaker takes at most {SAGEMAKER_INPUT_CHANNELS_MAX} (each volume is a channel too): read several prefixes through one channel's common prefix",
                )
            )
        self._check_entry(key, problems)
        # CreateTrainingJob: at most 100 environment variables, values up to 512 characters.
        if len(self.env) + len(EFA_ENV_NAMES) > MAX_ENVIRONMENT:
            problems.append(
                Problem(
                    f"{key}.env",
                    f"{len(self.env)} variables are too many for SageMaker: at most {MAX_ENVIRONMENT - len(EFA_ENV_NAMES)} besides the EFA settings",
                )
            )
        for name, value in self.env.items():
            if len(env_text(value)) > MAX_ENVIRONMENT_VALUE:
                problems.append(
                    Problem(f"{key}.env.{name}", f"is {len(env_text(value))} characters long; SageMaker takes environment values up to {MAX_ENVIRONMENT_VALUE}")
                )
        self.check_sagemaker_kind(key, problems)

    def _check_entry(self, key: str, problems: list[Problem]) -> None:
        sm = self.sm
        before = len(problems)
        entry = self.entry_point_or_problem()
        if isinstance(entry, Problem):
            problems.append(Problem(f"{key}.{entry.key}", entry.message))
            return
        if sm.source_dir is not None:
            if sm.source_dir.startswith("s3://"):
                checks.check_s3_uri(sm.source_dir, f"{key}.sagemaker.sourceDir", problems)
                if not sm.source_dir.endswith(".tar.gz"):
                    problems.append(
                        Problem(
                            f"{key}.sagemaker.sourceDir",
                            f"{checks.fmt(sm.source_dir)} is not a .tar.gz: SageMaker unpacks an S3 source directory from a gzipped tar",
                        )
                    )
            elif not sm.source_dir.startswith("/") or ".." in sm.source_dir.split("/"):
                problems.append(
                    Problem(f"{key}.sagemaker.sourceDir", f"{checks.fmt(sm.source_dir)} is not allowed: an s3://...tar.gz or an absolute directory")
                )
        elif not entry.script.startswith("/"):
            problems.append(
                Problem(f"{key}.sagemaker.sourceDir", f"is required when the entry script ({entry.script!r}) is a relative path: say where the code is")
            )
        if sm.entry_point is not None and (
            sm.entry_point.startswith("/") or ".." in sm.entry_point.split("/") or not sm.entry_point.endswith(self.SCRIPT_SUFFIXES)
        ):
            problems.append(
                Problem(
                    f"{key}.sagemaker.entryPoint", f"{checks.fmt(sm.entry_point)} is not allowed: a {'/'.join(self.SCRIPT_SUFFIXES)} path relative to sourceDir"
                )
            )
        elif sm.entry_point is None and sm.source_dir and not sm.source_dir.startswith("s3://") and entry.script.startswith("/"):
            if not _inside(entry.script, sm.source_dir):
                problems.append(
                    Problem(
                        f"{key}.sagemaker.sourceDir",
                        f"{checks.fmt(sm.source_dir)} does not contain the entry script {entry.script!r}; set sagemaker.entryPoint",
                    )
                )
                return
        if len(problems) > before:
            return  # the entry point is reported already
        source = posixpath.normpath(sm.source_dir) if sm.source_dir and not sm.source_dir.startswith("s3://") else None
        if source is None and sm.source_dir is None and entry.script.startswith("/"):
            source = posixpath.dirname(posixpath.normpath(entry.script))
        if source is not None and (source == "/" or source == SAGEMAKER_DATA_ROOT or posixpath.dirname(source) == SAGEMAKER_DATA_ROOT):
            problems.append(
                Problem(
                    f"{key}.sagemaker.sourceDir" if sm.source_dir else f"{key}.command",
                    f"the code directory would be {source}, the root of a volume: SageMaker's container copies the whole directory into "
                    "/opt/ml/code; keep the code in a directory of its own (e.g. /opt/ml/input/data/efs/code/<job>) or give sourceDir",
                )
            )
            return
        program = sm.entry_point or _program(entry.script, sm.source_dir or posixpath.dirname(entry.script))
        if not _SAFE_PROGRAM.match(program) or any(part in (".", "..") for part in program.split("/")):
            where = "sagemaker.entryPoint" if sm.entry_point else "command"
            problems.append(
                Problem(
                    f"{key}.{where}",
                    f"the entry script would be {program!r}, which SageMaker's container refuses: a relative path of letters, digits and "
                    "'._+-/', without '.' or '..' parts (name the script plainly, e.g. train.py or src/train.py)",
                )
            )

    def check_environment(self, key: str, problems: list[Problem], env: JobEnvironment) -> None:
        if self.runtime == "eks":
            if self.node_group is None:
                problems.append(Problem(f"{key}.nodeGroup", "is required with runtime 'eks': the GPU node group the job runs on"))
                return
            super().check_environment(key, problems, env)
            return
        # SageMaker: no operator, node group or etcd of the cluster is involved.
        for j, v in enumerate(self.volumes):
            checks.check_volume(v.name, env.volumes, f"{key}.volumes[{j}].name", problems)
        instance = self.sagemaker_instance_or_problem(key, env, problems)
        if instance is None:
            return
        nvme = INSTANCE_NVME_STORAGE_GB.get(instance.name.removeprefix(catalog.ML_PREFIX))
        if nvme is not None and self.sm.volume_size_gib > nvme:
            problems.append(
                Problem(
                    f"{key}.sagemaker.volumeSizeGiB",
                    f"{self.sm.volume_size_gib} is more than the {nvme} GB of local NVMe storage of {instance.name}: SageMaker gives such a type "
                    f"its NVMe storage instead of an EBS volume and refuses a larger size; use at most {nvme}, or leave volumeSizeGiB out",
                )
            )
        if self.efa is True and not instance.efa_supported:
            problems.append(
                Problem(
                    f"{key}.efa", f"true is not allowed: {instance.name} has no EFA; use an EFA type ({', '.join(catalog.SAGEMAKER_EFA_TYPES)}) or drop efa"
                )
            )
        elif self.efa is False and instance.efa_supported:
            problems.append(
                Problem(
                    f"{key}.efa",
                    f"false is not allowed with runtime 'sagemaker' on {instance.name}: SageMaker attaches EFA to it and its launchers turn it on; "
                    "drop efa, or pick a type without EFA with sagemaker.instanceType",
                )
            )

    def sagemaker_instance_or_problem(self, key: str, env: JobEnvironment, problems: list[Problem]) -> Optional[InstanceType]:
        """The ml. type: sagemaker.instanceType, else the ml. equivalent of the node group's type."""
        sm = self.sm
        if sm.instance_type is not None:
            return catalog.get_sagemaker(sm.instance_type)  # an unknown type is reported by check()
        if self.node_group is None:
            problems.append(Problem(f"{key}.sagemaker.instanceType", "is required with runtime 'sagemaker' when the job names no nodeGroup"))
            return None
        g: Optional[GroupFacts] = env.groups.get(self.node_group)
        if g is None:
            known = ", ".join(repr(n) for n in sorted(env.groups)) or "none"
            problems.append(
                Problem(
                    f"{key}.nodeGroup",
                    f"{checks.fmt(self.node_group)} is not a GPU node group of this stack (known: {known}); with runtime 'sagemaker' set sagemaker.instanceType instead",
                )
            )
            return None
        name = catalog.sagemaker_type_for(g.instance.name)
        if name is None:
            problems.append(
                Problem(
                    f"{key}.sagemaker.instanceType",
                    f"is required: node group {g.name!r} runs {g.instance.name}, which has no SageMaker training equivalent in the catalog",
                )
            )
            return None
        return catalog.get_sagemaker(name)

    # -- the SageMaker side ------------------------------------------------------------------

    @property
    def max_runtime_seconds(self) -> int:
        return self.active_deadline_seconds if self.active_deadline_seconds is not None else DEFAULT_MAX_RUNTIME

    def entry_point_or_problem(self) -> "EntryPoint | Problem":
        """The launcher, script and hyperparameters of ``entry_line()``, or the problem (key
        relative to the job) that keeps it from running on SageMaker."""
        line = self.entry_line()
        at = next((i for i, part in enumerate(line) if part.endswith(self.SCRIPT_SUFFIXES)), None)
        if at is None:
            return Problem("command", f"{checks.fmt(line)} names no {'/'.join(self.SCRIPT_SUFFIXES)} entry script, which SageMaker needs as sagemaker_program")
        launcher = tuple(line[:at])
        if not any(_launcher_matches(launcher, allowed) for allowed in self.LAUNCHERS):
            return Problem(
                "command",
                f"{checks.fmt(list(launcher))} before the entry script is not what SageMaker runs for a {self.kind!r} job; use {self.LAUNCHER_TEXT}",
            )
        if line[at].endswith(".sh") and launcher:
            return Problem(
                "command",
                f"{checks.fmt(list(launcher))} before the shell script {line[at]!r}: SageMaker runs a .sh entry script with /bin/sh, so give it alone",
            )
        hyper = args_to_hyperparameters(line[at + 1 :])
        if isinstance(hyper, str):
            return Problem("args", hyper)
        return EntryPoint(launcher, line[at], hyper)

    def sagemaker_job(self, instance: InstanceType, region: str, stack_id: str, tags: Optional[dict[str, str]] = None) -> SageMakerJob:
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
            file_systems=[FileSystemChannel(v.name, v.name, (v.sub_path or "").strip("/"), v.read_only) for v in self.volumes],
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
        digest = self.spec_digest(stack_id, instance_type, length=NAME_HASH_LENGTH)
        return f"{self.name}-{self.run}-{digest}"


def _check_uri_length(uri: str, k: str, problems: list[Problem]) -> None:
    if len(uri) > SAGEMAKER_S3_URI_MAX:
        problems.append(Problem(k, f"{checks.fmt(uri)} is {len(uri)} characters long; SageMaker takes S3 URIs of at most {SAGEMAKER_S3_URI_MAX}"))


def training_job_suffix(run: int) -> str:
    """What the training job name adds to the job name (the hash shown as 8 x's)."""
    return f"-{run}-" + "x" * NAME_HASH_LENGTH


def _launcher_matches(launcher: tuple[str, ...], allowed: tuple[str, ...]) -> bool:
    if len(launcher) != len(allowed):
        return False
    for part, want in zip(launcher, allowed, strict=True):
        base = posixpath.basename(part)
        if want == "python":
            if not _PYTHON.match(base):
                return False
        elif part != want and base != want:
            return False
    return True


def _inside(path: str, directory: str) -> bool:
    d = posixpath.normpath(directory)
    return posixpath.normpath(path).startswith(d.rstrip("/") + "/")


def _program(script: str, source_dir: str) -> str:
    """The entry script relative to the source directory (its file name for an S3 tarball)."""
    if script.startswith("/") and not source_dir.startswith("s3://") and _inside(script, source_dir):
        return posixpath.relpath(posixpath.normpath(script), posixpath.normpath(source_dir))
    if script.startswith("/"):
        return posixpath.basename(script)
    return posixpath.normpath(script)  # ./train.py -> train.py


def args_to_hyperparameters(args: Sequence[str]) -> "dict[str, str] | str":
    """The script's ``--name value`` / ``--name=value`` arguments as hyperparameters (SageMaker's
    containers pass each back as ``--name value``), or why they cannot be."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            return (
                f"{arg!r} is not allowed with runtime 'sagemaker': SageMaker passes script arguments as --name value "
                "hyperparameters, so every argument after the entry script must be one"
            )
        name, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                return f"{arg!r} has no value: SageMaker passes script arguments as --name value hyperparameters; give it one (e.g. {arg}=true)"
            value = args[i + 1]
            i += 2
        else:
            i += 1
        if len(name) < 2:
            # SageMaker's containers pass a one-letter hyperparameter back as -x, not --x.
            return f"{arg!r} is not allowed with runtime 'sagemaker': hyperparameter names need two characters or more (SageMaker passes a one-letter name back as -{name})"
        if name.startswith(RESERVED_HYPERPARAMETER_PREFIX) or name in RESERVED_HYPERPARAMETERS:
            return f"{arg!r} is not allowed: hyperparameters starting with {RESERVED_HYPERPARAMETER_PREFIX!r}, {' and '.join(RESERVED_HYPERPARAMETERS)} are SageMaker's own"
        if value.startswith("-") and not _NEGATIVE_NUMBER.match(value):
            return (
                f"--{name} {value!r}: a value starting with '-' (other than a negative number) is not allowed with runtime 'sagemaker': "
                "SageMaker passes it back as --name value, and the script's parser would read it as an option"
            )
        if name in out:
            return f"--{name} is given twice; a hyperparameter has one value"
        if len(name) > MAX_HYPERPARAMETER_KEY or len(json.dumps(value)) > MAX_HYPERPARAMETER_VALUE:
            return f"--{name} is too long for a hyperparameter (names up to {MAX_HYPERPARAMETER_KEY} characters, values up to {MAX_HYPERPARAMETER_VALUE})"
        out[name] = value
    if len(out) > MAX_HYPERPARAMETERS - STACK_HYPERPARAMETERS:
        return f"{len(out)} arguments are more than SageMaker's {MAX_HYPERPARAMETERS} hyperparameters leave room for"
    return out


# ---------------------------------------------------------------------------------------------
# IAM
# ---------------------------------------------------------------------------------------------

# The network-interface permissions SageMaker documents for training jobs in a VPC ("Give SageMaker
# AI Access to Resources in your Amazon VPC"). The Describe calls take no resource-level scoping.
VPC_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
)


def _split_s3(uri: str) -> tuple[str, str]:
    rest = uri[len("s3://") :]
    bucket, _, key = rest.partition("/")
    return bucket, key


def execution_policy(job: SageMakerJob, partition: str, region: str, account: str) -> dict[str, Any]:
    """Least privilege for one training job (see ``SageMakerJob.execution_policy``)."""
    read = sorted(set(job.s3_read))
    write = sorted({job.output_path, *([job.tensorboard_s3_uri] if job.tensorboard_s3_uri else [])})
    both = [job.checkpoint_s3_uri] if job.checkpoint_s3_uri else []

    def objects(uris: Sequence[str]) -> list[str]:
        # S3Prefix semantics: every key that starts with the prefix.
        return [f"arn:{partition}:s3:::{b}/{k}*" for b, k in map(_split_s3, uris)]

    listing: dict[str, list[str]] = {}
    for uri in [*read, *write, *both]:
        b, k = _split_s3(uri)
        listing.setdefault(b, []).append(f"{k}*")
    statements: list[dict[str, Any]] = []
    for i, (bucket, prefixes) in enumerate(sorted(listing.items())):
        statement: dict[str, Any] = {
            "Sid": f"ListBucket{i}",
            "Effect": "Allow",
            "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
            "Resource": f"arn:{partition}:s3:::{bucket}",
        }
        if "*" not in prefixes:
            statement["Condition"] = {"StringLike": {"s3:prefix": sorted(set(prefixes))}}
        statements.append(statement)
    if read or both:
        statements.append({"Sid": "ReadInputs", "Effect": "Allow", "Action": "s3:GetObject", "Resource": objects([*read, *both])})
    statements.append({"Sid": "WriteOutputs", "Effect": "Allow", "Action": ["s3:PutObject", "s3:AbortMultipartUpload"], "Resource": objects([*write, *both])})
    statements.append({"Sid": "VpcNetworkInterfaces", "Effect": "Allow", "Action": list(VPC_ACTIONS), "Resource": "*"})
    log_groups = f"arn:{partition}:logs:{region}:{account}:log-group:/aws/sagemaker/TrainingJobs"
    statements.append(
        {
            "Sid": "Logs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            "Resource": [log_groups, f"{log_groups}:*"],
        }
    )
    statements.append(
        {
            "Sid": "Metrics",
            "Effect": "Allow",
            "Action": "cloudwatch:PutMetricData",
            "Resource": "*",
            "Condition": {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
        }
    )
    statements.append({"Sid": "EcrLogin", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"})
    m = ECR_IMAGE.match(job.image)
    if m:
        repo_account, repo_region, repo = m.group(1), m.group(2), m.group(3)
        statements.append(
            {
                "Sid": "PullImage",
                "Effect": "Allow",
                "Action": ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
                "Resource": f"arn:{partition}:ecr:{repo_region}:{repo_account}:repository/{repo}",
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}
