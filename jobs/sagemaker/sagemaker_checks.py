"""The checks of a spec with runtime ``sagemaker``: what SageMaker takes (names, ECR images, channel
names and counts, S3 URIs, runtimes, spot, the environment) and where the code and entry script
are, for ``PortableJob.check`` (``jobs/sagemaker/portable.py``).

They read the spec through ``SageMakerSpec``, what they need of it, which ``PortableJob`` has:
this module never imports the one above it.
"""

from __future__ import annotations

import posixpath
import re
from typing import ClassVar, Protocol

from facts import catalog
from facts.aws_names import SAGEMAKER_INPUT_CHANNELS_MAX, SAGEMAKER_S3_URI_MAX
from facts.problems import Problem
from jobs import spec_checks
from jobs.base import EFA_ENV_NAMES, EnvValue, SecretKeyRef, VolumeMount
from jobs.pod import env_text
from jobs.sagemaker.entry_point import EntryPoint, _inside, _program
from jobs.sagemaker.limits import (
    ECR_IMAGE,
    MAX_ENVIRONMENT,
    MAX_ENVIRONMENT_VALUE,
    MAX_RUNTIME_LIMIT,
    NAME_HASH_LENGTH,
    SAGEMAKER_DATA_ROOT,
    TRAINING_JOB_NAME_MAX,
)
from jobs.sagemaker.options import SageMakerOptions

_CHANNEL = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
# The toolkit's rule for sagemaker_program (process.validate_entry_point): a relative path of
# letters, digits and . _ + - / without '.' or '..' segments.
_SAFE_PROGRAM = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._+-]*(/[A-Za-z0-9._+-]+)*$")


class SageMakerSpec(Protocol):
    """What the checks read of a spec with runtime sagemaker (``PortableJob`` is one)."""

    SCRIPT_SUFFIXES: ClassVar[tuple[str, ...]]

    # (read-only: the specs are frozen models)
    @property
    def name(self) -> str: ...

    @property
    def run(self) -> int: ...

    @property
    def image(self) -> str: ...

    @property
    def env(self) -> dict[str, EnvValue]: ...

    @property
    def secret_env(self) -> dict[str, SecretKeyRef]: ...

    @property
    def volumes(self) -> list[VolumeMount]: ...

    @property
    def active_deadline_seconds(self) -> int | None: ...

    @property
    def sm(self) -> SageMakerOptions: ...

    @property
    def max_runtime_seconds(self) -> int: ...

    def entry_point_or_problem(self) -> EntryPoint | Problem: ...

    def check_sagemaker_kind(self, key: str, problems: list[Problem]) -> None: ...


def check_sagemaker_runtime(job: SageMakerSpec, key: str, problems: list[Problem]) -> None:
    """The checks of a spec with runtime sagemaker (``PortableJob.check``): SageMaker's names, image,
    volumes, runtime, S3 URIs, spot, input channels, entry point and environment."""
    k = f"{key}.sagemaker"
    _check_name(job, key, problems)
    _check_image(job, key, problems)
    _check_secret_env(job, key, problems)
    _check_volumes(job, key, problems)
    _check_deadline(job, key, problems)
    _check_instance_type(job.sm, k, problems)
    _check_output_uris(job.sm, k, problems)
    _check_spot(job, k, problems)
    _check_inputs(job, k, problems)
    _check_entry(job, key, problems)
    _check_environment(job, key, problems)
    job.check_sagemaker_kind(key, problems)


def _check_name(job: SageMakerSpec, key: str, problems: list[Problem]) -> None:
    """The name leaves room for the training job name's suffix."""
    room = TRAINING_JOB_NAME_MAX - len(training_job_suffix(job.run))
    if len(job.name) > room:
        problems.append(
            Problem(
                f"{key}.name",
                f"{spec_checks.fmt(job.name)} is too long for runtime 'sagemaker': the "
                f"training job name adds {training_job_suffix(job.run)!r} "
                f"and SageMaker allows {TRAINING_JOB_NAME_MAX} characters; shorten it to at most {room}",
            )
        )


def _check_image(job: SageMakerSpec, key: str, problems: list[Problem]) -> None:
    if not ECR_IMAGE.match(job.image):
        problems.append(
            Problem(
                f"{key}.image",
                f"{spec_checks.fmt(job.image)} is not an ECR image: SageMaker pulls training images from ECR, like "
                "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker",
            )
        )


def _check_secret_env(job: SageMakerSpec, key: str, problems: list[Problem]) -> None:
    if job.secret_env:
        name = sorted(job.secret_env)[0]
        problems.append(
            Problem(
                f"{key}.secretEnv.{name}",
                "Kubernetes Secrets do not reach SageMaker jobs: read the secret in "
                "the script (Secrets Manager) or use runtime 'eks'",
            )
        )


def _check_volumes(job: SageMakerSpec, key: str, problems: list[Problem]) -> None:
    """Each volume mounted where SageMaker mounts its channel."""
    for j, v in enumerate(job.volumes):
        want = f"{SAGEMAKER_DATA_ROOT}/{v.name}"
        if posixpath.normpath(v.mount_path) != want:
            problems.append(
                Problem(
                    f"{key}.volumes[{j}].mountPath",
                    f"{spec_checks.fmt(v.mount_path)} is not where SageMaker mounts the {v.name!r} channel; use {want} "
                    "(the same path on EKS, so the script finds its data at one path in both runtimes)",
                )
            )


def _check_deadline(job: SageMakerSpec, key: str, problems: list[Problem]) -> None:
    if job.active_deadline_seconds is not None and job.active_deadline_seconds > MAX_RUNTIME_LIMIT:
        problems.append(
            Problem(
                f"{key}.activeDeadlineSeconds",
                f"{job.active_deadline_seconds} is more than SageMaker's longest "
                f"max runtime, {MAX_RUNTIME_LIMIT} (28 days)",
            )
        )


def _check_instance_type(sm: SageMakerOptions, k: str, problems: list[Problem]) -> None:
    if sm.instance_type is not None and catalog.get_sagemaker(sm.instance_type) is None:
        problems.append(
            Problem(
                f"{k}.instanceType",
                f"{spec_checks.fmt(sm.instance_type)} is not a SageMaker GPU training type of the "
                f"catalog; use one of {', '.join(catalog.SAGEMAKER_TYPES)}",
            )
        )


def _check_output_uris(sm: SageMakerOptions, k: str, problems: list[Problem]) -> None:
    """An output path, and S3 URIs SageMaker takes for the output, checkpoints and TensorBoard."""
    if sm.output_path is None:
        problems.append(
            Problem(
                f"{k}.outputPath",
                "is required with runtime 'sagemaker': the s3:// prefix SageMaker writes the model and output to",
            )
        )
    for field_name, uri in (
        ("outputPath", sm.output_path),
        ("checkpointS3Uri", sm.checkpoint_s3_uri),
        ("tensorboardS3Uri", sm.tensorboard_s3_uri),
    ):
        if uri is not None:
            spec_checks.check_s3_uri(uri, f"{k}.{field_name}", problems)
            _check_uri_length(uri, f"{k}.{field_name}", problems)


def _check_spot(job: SageMakerSpec, k: str, problems: list[Problem]) -> None:
    """Spot with checkpoints, and a max wait only with spot, from the max runtime to SageMaker's limit."""
    sm = job.sm
    if sm.spot and sm.checkpoint_s3_uri is None:
        problems.append(
            Problem(
                f"{k}.spot",
                "true needs checkpointS3Uri: a spot interruption restarts the job, which "
                "resumes from /opt/ml/checkpoints only if it is synced to S3",
            )
        )
    if sm.max_wait_seconds is not None:
        if not sm.spot:
            problems.append(
                Problem(f"{k}.maxWaitSeconds", "applies to spot training only; set spot: true or remove it")
            )
        elif sm.max_wait_seconds < job.max_runtime_seconds:
            problems.append(
                Problem(
                    f"{k}.maxWaitSeconds",
                    f"{sm.max_wait_seconds} is less than the max runtime "
                    f"({job.max_runtime_seconds} s); it must be at least that",
                )
            )
        elif sm.max_wait_seconds > MAX_RUNTIME_LIMIT:
            problems.append(
                Problem(
                    f"{k}.maxWaitSeconds",
                    f"{sm.max_wait_seconds} is more than SageMaker allows ({MAX_RUNTIME_LIMIT}, 28 days)",
                )
            )


def _check_inputs(job: SageMakerSpec, k: str, problems: list[Problem]) -> None:
    """The S3 inputs: channel names unique among them and the volumes, S3 URIs, and at most SageMaker's
    channel count."""
    sm = job.sm
    channels: dict[str, str] = {v.name: f"volumes[{j}]" for j, v in enumerate(job.volumes)}
    for j, s3 in enumerate(sm.inputs):
        ik = f"{k}.inputs[{j}]"
        if not _CHANNEL.match(s3.channel):
            problems.append(
                Problem(
                    f"{ik}.channel",
                    f"{spec_checks.fmt(s3.channel)} is not a channel name: 1-64 letters, digits, '.', '-' and '_'",
                )
            )
        elif s3.channel in channels:
            problems.append(
                Problem(
                    f"{ik}.channel",
                    f"{spec_checks.fmt(s3.channel)} is taken by {channels[s3.channel]}; channel names are unique",
                )
            )
        channels.setdefault(s3.channel, f"sagemaker.inputs[{j}]")
        spec_checks.check_s3_uri(s3.s3_uri, f"{ik}.s3Uri", problems)
        _check_uri_length(s3.s3_uri, f"{ik}.s3Uri", problems)
    if len(job.volumes) + len(sm.inputs) > SAGEMAKER_INPUT_CHANNELS_MAX:
        problems.append(
            Problem(
                f"{k}.inputs",
                f"{len(sm.inputs)} S3 inputs and {len(job.volumes)} volumes make "
                f"{len(job.volumes) + len(sm.inputs)} input channels; "
                f"SageMaker takes at most {SAGEMAKER_INPUT_CHANNELS_MAX} (each volume is a channel "
                "too): read several prefixes through one channel's common prefix",
            )
        )


def _check_environment(job: SageMakerSpec, key: str, problems: list[Problem]) -> None:
    # CreateTrainingJob: at most 100 environment variables, values up to 512 characters.
    if len(job.env) + len(EFA_ENV_NAMES) > MAX_ENVIRONMENT:
        problems.append(
            Problem(
                f"{key}.env",
                f"{len(job.env)} variables are too many for SageMaker: at most "
                f"{MAX_ENVIRONMENT - len(EFA_ENV_NAMES)} besides the EFA settings",
            )
        )
    for name, value in job.env.items():
        if len(env_text(value)) > MAX_ENVIRONMENT_VALUE:
            problems.append(
                Problem(
                    f"{key}.env.{name}",
                    f"is {len(env_text(value))} characters long; SageMaker takes "
                    f"environment values up to {MAX_ENVIRONMENT_VALUE}",
                )
            )


def _check_entry(job: SageMakerSpec, key: str, problems: list[Problem]) -> None:
    sm = job.sm
    before = len(problems)
    entry = job.entry_point_or_problem()
    if isinstance(entry, Problem):
        problems.append(Problem(f"{key}.{entry.key}", entry.message))
        return
    if sm.source_dir is not None:
        if sm.source_dir.startswith("s3://"):
            spec_checks.check_s3_uri(sm.source_dir, f"{key}.sagemaker.sourceDir", problems)
            if not sm.source_dir.endswith(".tar.gz"):
                problems.append(
                    Problem(
                        f"{key}.sagemaker.sourceDir",
                        f"{spec_checks.fmt(sm.source_dir)} is not a .tar.gz: SageMaker "
                        "unpacks an S3 source directory from a gzipped tar",
                    )
                )
        elif not sm.source_dir.startswith("/") or ".." in sm.source_dir.split("/"):
            problems.append(
                Problem(
                    f"{key}.sagemaker.sourceDir",
                    f"{spec_checks.fmt(sm.source_dir)} is not allowed: an s3://...tar.gz or an absolute directory",
                )
            )
    elif not entry.script.startswith("/"):
        problems.append(
            Problem(
                f"{key}.sagemaker.sourceDir",
                f"is required when the entry script ({entry.script!r}) is a relative path: say where the code is",
            )
        )
    if sm.entry_point is not None and (
        sm.entry_point.startswith("/")
        or ".." in sm.entry_point.split("/")
        or not sm.entry_point.endswith(job.SCRIPT_SUFFIXES)
    ):
        problems.append(
            Problem(
                f"{key}.sagemaker.entryPoint",
                f"{spec_checks.fmt(sm.entry_point)} is not allowed: a "
                f"{'/'.join(job.SCRIPT_SUFFIXES)} path relative to sourceDir",
            )
        )
    elif (
        sm.entry_point is None
        and sm.source_dir
        and not sm.source_dir.startswith("s3://")
        and entry.script.startswith("/")
        and not _inside(entry.script, sm.source_dir)
    ):
        problems.append(
            Problem(
                f"{key}.sagemaker.sourceDir",
                f"{spec_checks.fmt(sm.source_dir)} does not contain the entry script "
                f"{entry.script!r}; set sagemaker.entryPoint",
            )
        )
        return
    if len(problems) > before:
        return  # the entry point is reported already
    source = posixpath.normpath(sm.source_dir) if sm.source_dir and not sm.source_dir.startswith("s3://") else None
    if source is None and sm.source_dir is None and entry.script.startswith("/"):
        source = posixpath.dirname(posixpath.normpath(entry.script))
    if source is not None and (
        source == "/" or source == SAGEMAKER_DATA_ROOT or posixpath.dirname(source) == SAGEMAKER_DATA_ROOT
    ):
        problems.append(
            Problem(
                f"{key}.sagemaker.sourceDir" if sm.source_dir else f"{key}.command",
                f"the code directory would be {source}, the root of a volume: "
                "SageMaker's container copies the whole directory into "
                "/opt/ml/code; keep the code in a directory of its own (e.g. "
                "/opt/ml/input/data/efs/code/<job>) or give sourceDir",
            )
        )
        return
    program = sm.entry_point or _program(entry.script, sm.source_dir or posixpath.dirname(entry.script))
    if not _SAFE_PROGRAM.match(program) or any(part in (".", "..") for part in program.split("/")):
        where = "sagemaker.entryPoint" if sm.entry_point else "command"
        problems.append(
            Problem(
                f"{key}.{where}",
                f"the entry script would be {program!r}, which SageMaker's container "
                "refuses: a relative path of letters, digits and "
                "'._+-/', without '.' or '..' parts (name the script plainly, e.g. train.py or src/train.py)",
            )
        )


def _check_uri_length(uri: str, k: str, problems: list[Problem]) -> None:
    if len(uri) > SAGEMAKER_S3_URI_MAX:
        problems.append(
            Problem(
                k,
                f"{spec_checks.fmt(uri)} is {len(uri)} characters long; SageMaker "
                f"takes S3 URIs of at most {SAGEMAKER_S3_URI_MAX}",
            )
        )


def training_job_suffix(run: int) -> str:
    """What the training job name adds to the job name (the hash shown as 8 x's)."""
    return f"-{run}-" + "x" * NAME_HASH_LENGTH
