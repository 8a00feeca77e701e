"""What every job kind shares: the spec base classes (``JobBase``, and ``RunJob``, ``GpuJob`` and
``SystemJob`` under it) and the checks of a spec's numbers and flags. The node group a job runs on
(``JobTarget``) and what the builders and checks get from the stack (``JobsContext``,
``JobEnvironment``) are in ``jobs/targets.py``.

A job kind is a ``JobBase`` subclass in its own module (``jobs/<kind>.py``) that declares its
fields and implements ``build``; it may add its own checks (``check``, ``check_environment``) and
say which operator it needs (``OPERATOR``). ``jobs/registry.py`` lists the kinds. Everything that
depends on the hardware comes from the target node group's ``JobTarget``, never typed twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from types import UnionType
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from facts.aws_names import INT32_MAX, INT64_MAX
from facts.operators import Operator
from facts.problems import Problem
from jobs import spec_checks
from jobs.targets import GroupFacts, JobBuildError, JobEnvironment, JobsContext, JobTarget

Manifest = dict[str, Any]
EnvValue = StrictBool | int | float | str
VOLUME_NAMES = ("fsx", "efs")
# Env names the builders derive from the target on EFA groups; a job cannot set them.
EFA_ENV_NAMES = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE")


def _scalar_kind(annotation: Any) -> str | None:
    """ "number" for an int or float field (Optional or not), "flag" for a bool field, else None."""
    args = (
        [a for a in get_args(annotation) if a is not type(None)]
        if get_origin(annotation) in (Union, UnionType)
        else [annotation]
    )
    if len(args) != 1:
        return None
    if get_origin(args[0]) is Annotated:
        args = [get_args(args[0])[0]]
    if args[0] is bool:
        return "flag"
    if args[0] in (int, float):
        return "number"
    return None


# The text a flag key reads as a flag: what `pulumi config set` writes, and all that Pulumi's own
# Config.get_bool takes (pulumi 3.272.0 sdk/python/lib/pulumi/config.py, _get_bool: "true", "True",
# "false", "False"). pydantic's lax mode would also read yes/no/on/off/y/n/1/0 as flags, which a stack
# file (YAML 1.2, docs/config.md "How stack files are read") hands over as text.
FLAG_TEXTS = ("true", "True", "false", "False")


def numbers_and_flags_apart(model: type[BaseModel], value: Any, info: ValidationInfo) -> Any:
    """A ``mode="before"`` check for every field of a config model: a boolean is not a number and a
    number is not a flag. pydantic's lax mode would read ``ttlSecondsAfterFinished: false`` as 0 (the
    job deleted the moment it ends, the opposite of what was meant), ``nodes: true`` as 1 and
    ``enabled: 0`` as false. Text is still read as its number or flag (``"3"``, ``"true"``): it is
    what ``pulumi config set`` writes for a scalar; but a flag takes only the texts of FLAG_TEXTS,
    not ``yes`` or ``on``."""
    field = model.model_fields.get(info.field_name or "")
    kind = _scalar_kind(field.annotation) if field is not None else None
    if kind == "number" and isinstance(value, bool):
        raise PydanticCustomError(
            "bool_is_not_a_number",
            "a boolean is not a number: give a number, or leave the key out for its default",
        )
    if kind == "flag" and isinstance(value, (int, float)) and not isinstance(value, bool):
        raise PydanticCustomError("number_is_not_a_flag", "a number is not a flag: write true or false")
    if kind == "flag" and isinstance(value, str) and value not in FLAG_TEXTS:
        raise PydanticCustomError(
            "text_is_not_a_flag",
            "text is not a flag: write true or false (a stack file is YAML 1.2, where yes, no, on and off are text)",
        )
    return value


def _at_most(limit: int, width: str) -> Any:
    def check(value: int) -> int:
        if value > limit:
            raise PydanticCustomError(
                "kubernetes_int_range", f"at most {limit}: Kubernetes keeps this field as a {width}-bit integer"
            )
        return value

    return AfterValidator(check)


# The integer fields that reach a Kubernetes object (replicas, backoffLimit, ...), bounded as the
# API server bounds them (facts.aws_names.INT32_MAX).
Int32 = Annotated[int, _at_most(INT32_MAX, "32")]
Int64 = Annotated[int, _at_most(INT64_MAX, "64")]


class SpecModel(BaseModel):
    """Base of every job model, and of the stack config's sections (``stacks.config.models.ConfigModel``):
    camelCase keys (one spelling each: the alias, never the Python name), unknown keys refused, values
    frozen, a boolean is not a number, a number is not a flag (``numbers_and_flags_apart``), and numbers
    are finite (``.inf`` is no threshold)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )

    # (pydantic's mypy plugin cannot see the generated aliases, the only names the model takes,
    # and says so on the class's first decorated member)
    @field_validator("*", mode="before")  # type: ignore[pydantic-alias]
    @classmethod
    def _numbers_and_flags_apart(cls, value: Any, info: ValidationInfo) -> Any:
        return numbers_and_flags_apart(cls, value, info)


class SecretKeyRef(SpecModel):
    """An env value taken from a Kubernetes Secret in the jobs' namespace (never inline)."""

    secret: str = Field(description="Secret name in the jobs' namespace")
    key: str = Field(description="key inside the Secret")


class VolumeMount(SpecModel):
    """One of the stack's shared volumes mounted into the job's GPU pods."""

    name: Literal["fsx", "efs"] = Field(description="`fsx` or `efs` (the stack's claims)")
    mount_path: str = Field(description="absolute path in the container, e.g. /fsx")
    read_only: bool = Field(False, description="mount read-only")
    sub_path: str | None = Field(
        None, description="a directory inside the file system to mount instead of its root (relative, no '..')"
    )


# ---------------------------------------------------------------------------------------------
# The stack as jobs see it
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# Specs
# ---------------------------------------------------------------------------------------------


# Keys whose spelling changed to the documented one after runs were named from the spec: the digest
# keeps the old spelling, so a renamed key does not rename (and re-run) an existing job.
DIGEST_KEY_SPELLINGS = {"volumeSizeGiB": "volumeSizeGib"}
# Keys added after runs were named from the spec: left out while unset, so a spec without them
# keeps its name (and its run).
DIGEST_LEFT_OUT_UNSET = (
    *("placement", "placementLayer", "progress", "checkpoints"),
    *("operator", "resourcesPerNode", "fabric", "slowNode"),
)


def _digest_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {DIGEST_KEY_SPELLINGS.get(k, k): _digest_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_digest_keys(v) for v in value]
    return value


class JobBase(SpecModel):
    """Fields and behaviour every job kind has."""

    # Which cluster operator runs this kind (facts/operators.py), or None (plain Kubernetes objects).
    OPERATOR: ClassVar[Operator | None] = None
    # Env names a job of this kind may not set, with the reason.
    RESERVED_ENV: ClassVar[Mapping[str, str]] = {
        n: "is derived from the node group (set on EFA groups only)" for n in EFA_ENV_NAMES
    }

    kind: str = Field(description="the job kind (see docs/jobs.md)")
    name: str = Field(description="Kubernetes name of the job, unique in the stack")
    enabled: bool = Field(True, description="`false` keeps the job in config but emits nothing")
    image: str = Field(description="container image, pinned by tag (not `latest`) or digest")
    args: list[str] = Field(default_factory=list, description="arguments after the command")
    env: dict[str, EnvValue] = Field(default_factory=dict, description="plain environment variables")
    secret_env: dict[str, SecretKeyRef] = Field(
        default_factory=dict, description="environment variables from Secrets: `{NAME: {secret, key}}`"
    )

    def spec_digest(self, *salt: str, exclude: frozenset[str] = frozenset(), length: int = 8) -> str:
        """The first ``length`` hex digits of the sha256 of ``salt`` and the spec (its canonical
        JSON, without the ``exclude`` fields), one per line: what names a run."""
        dumped = _digest_keys(self.model_dump(mode="json", by_alias=True, exclude=set(exclude)))
        dumped = {k: v for k, v in dumped.items() if not (k in DIGEST_LEFT_OUT_UNSET and v is None)}
        spec = json.dumps(dumped, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256("\n".join([*salt, spec]).encode()).hexdigest()[:length]

    def operator_of(self) -> Operator | None:
        """The operator this job needs: the kind's (``OPERATOR``), unless the job names another (``operator``)."""
        return self.OPERATOR

    def build(self, ctx: JobsContext) -> list[Manifest]:
        """The job's Kubernetes manifests (pure: no Pulumi, no AWS)."""
        raise NotImplementedError

    def pod_hostnames(self) -> list[str]:
        """The longest pod hostnames the operators give this job's pods (each must be <= 63)."""
        return []

    def check(self, key: str, problems: list[Problem]) -> None:
        """Checks of the job on its own (run for disabled jobs too)."""
        spec_checks.check_name(self.name, self.pod_hostnames(), f"{key}.name", problems)
        spec_checks.check_image(self.image, f"{key}.image", problems)
        spec_checks.check_env(self.env, self.secret_env, self.reserved_env(), key, problems)

    def derived_env(self) -> dict[str, str]:
        """Env the kind's builder gives the job's containers besides the EFA settings (``jobs/pod.py``:
        derived values win over the job's own); none here."""
        return {}

    def reserved_env(self) -> dict[str, str]:
        """Every env name the job may not set, with the reason: the kind's RESERVED_ENV and each name of
        ``derived_env`` (on EKS; the SageMaker runtime builds no pods): set in ``env``, the stack's value
        would replace the job's without a word."""
        reserved = dict(self.RESERVED_ENV)
        if getattr(self, "runtime", "eks") == "eks":
            for name, value in self.derived_env().items():
                reserved.setdefault(
                    name,
                    f"is set by the stack for this job, to {spec_checks.fmt(value)}, and the stack's value wins over "
                    "the job's",
                )
        return reserved

    def check_environment(self, key: str, problems: list[Problem], env: JobEnvironment) -> None:
        """Checks against the rest of the stack (enabled jobs only)."""
        op = self.operator_of()
        if op is not None and op.name not in env.operators:
            on = ", ".join(sorted(env.operators)) or "none"
            problems.append(
                Problem(
                    f"{key}.kind",
                    f"{self.kind!r} jobs need {op.title} ({op.name!r}), which is not enabled in this stack (enabled "
                    f"operators: {on})",
                )
            )

    def pod_identity_policy(self, partition: str) -> dict[str, Any] | None:
        """An IAM policy for the job's own service account (bound through EKS Pod Identity), or
        None when the job needs no AWS access."""
        return None

    def pod_identity_description(self, namespace: str) -> str:
        """The description of the job's IAM role (when it has one)."""
        return f"job {namespace}/{self.name}"


# Defaults of every run's bounds (docs/watching-jobs.md, "Retries, deadlines and clean-up").
# 3 retries: a job that fails three times is broken, and every retry holds whole GPU nodes.
DEFAULT_BACKOFF_LIMIT = 3
# The priorities a GPU job can have: Kueue WorkloadPriorityClasses of these names and values (the
# stack creates them). A job without a priority label (a team's own job) counts as 0, the same as
# `normal`.
PRIORITIES: Mapping[str, int] = {"low": -100, "normal": 0, "high": 100}


class RunJob(JobBase):
    """A job that runs to completion: a run number, bounded retries, an optional deadline and
    clean-up after it finishes."""

    run: int = Field(
        1, ge=1, description="the run number: bump it to run the job again (a new run replaces the old one)"
    )
    backoff_limit: Int32 = Field(
        DEFAULT_BACKOFF_LIMIT,
        ge=0,
        description="retries before the job is marked Failed and its pods stop (`runPolicy.backoffLimit` / Job "
        "`backoffLimit`)",
    )
    active_deadline_seconds: Int64 | None = Field(
        None, ge=1, description="fail the job once it has run this long (default: no deadline)"
    )
    ttl_seconds_after_finished: Int32 | None = Field(
        None,
        ge=0,
        description="delete the finished job this many seconds after it ends (default: keep it; a `pulumi refresh` "
        "then `up` would run it again)",
    )

    def bounds(self) -> dict[str, int]:
        """The retry, deadline and clean-up settings (keys as in runPolicy and batch/v1 Job spec)."""
        out = {"backoffLimit": self.backoff_limit}
        if self.active_deadline_seconds is not None:
            out["activeDeadlineSeconds"] = self.active_deadline_seconds
        if self.ttl_seconds_after_finished is not None:
            out["ttlSecondsAfterFinished"] = self.ttl_seconds_after_finished
        return out


class GpuJob(RunJob):
    """A job whose workers own whole nodes of one GPU node group."""

    node_group: str = Field(
        description="the GPU node group the job runs on; on a fleet's manager, or a fleet flavor: the GPU type "
        "with '.' as '-' (`p5-48xlarge`), run on whichever worker admits it (docs/fleet.md)"
    )
    nodes: Int32 = Field(1, ge=1, description="worker nodes (one worker pod per node, all its GPUs)")
    volumes: list[VolumeMount] = Field(
        default_factory=list, description="shared volumes to mount: `{name: fsx|efs, mountPath, readOnly}`"
    )
    efa: bool | None = Field(
        None,
        description="default: EFA wherever the group has it; `true`: the job needs EFA; `false`: run without EFA even "
        "on an EFA group",
    )
    team: str | None = Field(
        None, description="the team whose queue the job waits in (`queues.teams[].name`); default: the shared queue"
    )
    priority: Literal["low", "normal", "high"] = Field(
        "normal",
        description="`low`, `normal` or `high`: the order in its queue, and a higher one preempts a lower one there",
    )
    placement: Literal["required", "preferred", "none"] | None = Field(
        None,
        description="where Kueue puts the workers in the EC2 network: `required` (all in one domain of "
        "`placementLayer`, or wait), `preferred` (the smallest domain from that layer up that holds them), `none`; "
        "default `preferred` on a group with a network topology, nothing elsewhere (docs/topology.md, Topology-aware "
        "placement; ignored with `runtime: sagemaker`)",
    )
    placement_layer: int | None = Field(
        None,
        ge=1,
        description="the network layer `placement` asks for, 1 (the top, coarsest) to the finest of the group's type "
        "(3; 4 on p6-b200/p6-b300); default: the finest",
    )

    def queue_name(self, ctx: JobsContext) -> str | None:
        """The LocalQueue the job waits in, or None when the stack runs no queues."""
        if not ctx.queues:
            return None
        queue = ctx.queues.get(self.team or "")
        if queue is None:
            raise JobBuildError(
                f"job {self.name!r}: team {self.team!r} has no queue in this stack (teams: "
                f"{sorted(t for t in ctx.queues if t)})"
            )
        return queue

    def target(self, ctx: JobsContext) -> JobTarget:
        target = ctx.targets.get(self.node_group)
        if target is None:
            raise JobBuildError(
                f"job {self.name!r}: node group {self.node_group!r} is not one of {sorted(ctx.targets)}"
            )
        return target

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        spec_checks.check_mounts([(v.name, v.mount_path) for v in self.volumes], key, problems)
        for j, v in enumerate(self.volumes):
            if v.sub_path is not None:
                spec_checks.check_sub_path(v.name, v.sub_path, f"{key}.volumes[{j}].subPath", problems)
        if self.placement == "none" and self.placement_layer is not None:
            problems.append(Problem(f"{key}.placementLayer", "is not read with placement 'none': drop one of them"))

    def max_workers(self) -> int:
        """The most worker nodes the job can run on at once."""
        return self.nodes

    def check_environment(self, key: str, problems: list[Problem], env: JobEnvironment) -> None:
        super().check_environment(key, problems, env)
        for j, v in enumerate(self.volumes):
            spec_checks.check_volume(v.name, env.volumes, f"{key}.volumes[{j}].name", problems)
        g = env.groups.get(self.node_group)
        if g is None:
            known = ", ".join(repr(n) for n in sorted(env.groups)) or "none (add one under gpuNodeGroups)"
            problems.append(
                Problem(
                    f"{key}.nodeGroup",
                    f"{spec_checks.fmt(self.node_group)} is not a GPU node group of this stack; known groups: {known}",
                )
            )
            return
        if self.nodes > g.max_size:
            problems.append(
                Problem(
                    f"{key}.nodes", f"{self.nodes} is more than node group {g.name!r} can hold (maxSize {g.max_size})"
                )
            )
        if self.efa is True and not g.efa_interfaces:
            why = "its efa setting is off" if g.instance.efa_supported else f"{g.instance.name} has no EFA"
            problems.append(
                Problem(
                    f"{key}.efa",
                    f"true is not allowed: node group {g.name!r} runs without EFA ({why}); use an EFA group or drop "
                    "efa",
                )
            )
        spec_checks.check_placement(self.placement, self.placement_layer, g, env.queues, key, problems)
        self.check_group(key, problems, g)

    def check_group(self, key: str, problems: list[Problem], group: GroupFacts) -> None:
        """Kind-specific checks against the target group (the group exists)."""


class SystemJob(JobBase):
    """A job on the system nodes that reads or writes one shared volume."""

    volume: Literal["fsx", "efs"] = Field(description="the shared volume: `fsx` or `efs`")

    def check_environment(self, key: str, problems: list[Problem], env: JobEnvironment) -> None:
        super().check_environment(key, problems, env)
        spec_checks.check_volume(self.volume, env.volumes, f"{key}.volume", problems)
