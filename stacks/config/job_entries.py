"""The ``jobs`` section of the stack config: parsing each entry into its kind's spec model and
running the kind's checks, on its own and against the rest of the stack.

Disabled jobs (``enabled: false``) are parsed and checked for what they are on their own (types,
names, env), but not against the environment (node group, volumes, operators, etcd): a job can be
switched off because its node group or operator is gone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from facts import catalog, operators
from facts.problems import Problem, entry_keys, entry_names
from facts.problems import fmt as _fmt
from jobs import spec_checks
from jobs.base import JobBase
from jobs.registry import JOB_KINDS
from jobs.sagemaker import PortableJob, SageMakerJob
from jobs.targets import GroupFacts, JobEnvironment
from stacks import queues
from stacks.config.errors import parse
from stacks.config.fleet_jobs import check_fleet_jobs, fleet_groups, is_fleet_job
from stacks.config.models import (
    NAMESPACE,
    EtcdConfig,
    GpuNodeGroupConfig,
    ServicesConfig,
    StorageConfig,
)

_KIND_NAMES = ", ".join(repr(k) for k in JOB_KINDS)
# Keys people carry over from hand-written manifests; each is derived from the node group.
DERIVED_KEYS = {
    "slotsPerWorker": "the GPUs per node of the group's instance type",
    "gpusPerNode": "the GPUs per node of the group's instance type (a worker owns a whole node)",
    "nprocPerNode": "the GPUs per node of the group's instance type",
    "replicas": "nodes",
    "efaInterfaces": "the EFA interfaces of the group (set efa: false to run without EFA)",
}


def gpu_type(g: GpuNodeGroupConfig) -> bool:
    """Whether the group's instance type is a GPU type of the catalog (else its checks say so)."""
    it = catalog.get(g.instance_type)
    return it is not None and it.is_gpu


def group_facts(g: GpuNodeGroupConfig) -> GroupFacts:
    return GroupFacts(name=g.name, instance=g.instance, efa_interfaces=g.efa_interfaces, max_size=g.max_size)


def runtime_of(spec: JobBase) -> str:
    """Where a job runs: ``eks`` or ``sagemaker``."""
    return spec.runtime if isinstance(spec, PortableJob) else "eks"


def sagemaker_jobs(
    specs: Iterable[JobBase], groups: Iterable[GpuNodeGroupConfig], region: str, stack_id: str, tags: dict[str, str]
) -> list[SageMakerJob]:
    """The SageMaker training jobs of the enabled ``runtime: sagemaker`` specs (validated specs:
    their instance types resolve)."""
    env = JobEnvironment(
        groups={g.name: group_facts(g) for g in groups}, volumes=frozenset(), operators=frozenset(), etcd_enabled=False
    )
    out = []
    for spec in specs:
        if not (spec.enabled and isinstance(spec, PortableJob) and spec.runtime == "sagemaker"):
            continue
        problems: list[Problem] = []
        instance = spec.sagemaker_instance_or_problem(spec.name, env, problems)
        if instance is None:
            raise ValueError(f"job {spec.name!r}: " + "; ".join(str(p) for p in problems))
        out.append(spec.sagemaker_job(instance, region, stack_id, tags))
    return out


def job_environment(
    groups: Iterable[GpuNodeGroupConfig | None],
    storage: StorageConfig | None,
    services: ServicesConfig | None,
    etcd: EtcdConfig | None,
    queues: Any = None,
) -> JobEnvironment:
    """What the stack offers jobs (sections that did not parse count as their defaults)."""
    storage = storage or StorageConfig()
    services = services or ServicesConfig()
    return JobEnvironment(
        groups={g.name: group_facts(g) for g in groups if g is not None},
        volumes=frozenset(name for name, on in (("efs", storage.efs.enabled), ("fsx", storage.fsx.enabled)) if on),
        operators=frozenset(op.name for op in operators.installed(services)),
        etcd_enabled=(etcd or EtcdConfig()).enabled,
        queues=True if queues is None else bool(queues.enabled),
    )


def parse_job_section(
    raw: Any,
    raw_groups: Any,
    groups: list[GpuNodeGroupConfig | None],
    sections: Any,
    problems: list[Problem],
) -> list[JobBase]:
    """The job section of ``load``: ``raw_groups`` is the gpuNodeGroups value as written, ``groups``
    what parsed of it (None where a group has problems of its own, already reported: jobs on those
    groups are not checked against them)."""
    raw_list = raw_groups if isinstance(raw_groups, list) else []
    invalid = {
        str(item.get("name")) for item, g in zip(raw_list, groups, strict=True) if g is None and isinstance(item, dict)
    }
    # A group whose instance type is not a GPU type of the catalog is reported by the group checks.
    invalid |= {g.name for g in groups if g is not None and not gpu_type(g)}
    usable = [g for g in groups if g is not None and g.name not in invalid]
    env = job_environment(
        usable,
        sections.or_default("storage"),
        sections.or_default("services"),
        sections.or_default("etcd"),
        sections.or_default("queues"),
    )
    # A fleet's manager: its jobs may name a fleet flavor (stacks/config/fleet_jobs.py); its own groups win.
    env = dataclasses.replace(env, groups={**fleet_groups(sections.fleet), **env.groups})
    specs = parse_jobs(raw, f"{NAMESPACE}:jobs", problems, env, invalid_groups=invalid)
    keyed = _keyed(raw, specs)
    own = [g.name for g in usable]
    check_fleet_jobs(keyed, sections.fleet, sections.queues, own, problems)
    if sections.queues is not None:
        local = [(k, s) for k, s in keyed if not is_fleet_job(s, sections.fleet, own)]
        _check_queued_jobs(local, usable, sections, env, problems)
    return specs


def _keyed(raw: Any, specs: list[JobBase]) -> list[tuple[str, JobBase]]:
    """Each parsed job with its config key (the first entry of its name)."""
    first: dict[str, str] = {}
    names = entry_names(raw)
    for k, name in zip(entry_keys(f"{NAMESPACE}:jobs", names), names, strict=True):
        if isinstance(name, str):
            first.setdefault(name, k)
    return [(first[s.name], s) for s in specs if s.name in first]


def _check_queued_jobs(
    keyed: list[tuple[str, JobBase]],
    groups: list[GpuNodeGroupConfig],
    sections: Any,
    env: JobEnvironment,
    problems: list[Problem],
) -> None:
    """Jobs against the queues (``stacks/queues/``): a job's team exists, and every job can be
    admitted by its queue at all (else it would wait forever). ``env`` is what the stack offers jobs."""
    before = len(problems)
    queues.check_job_teams(keyed, sections.queues, problems)
    if len(problems) > before or not sections.queues.enabled or not groups:
        return
    storage: StorageConfig = sections.or_default("storage")
    services: ServicesConfig = sections.or_default("services")
    plan = queues.build_plan(
        groups=groups,
        queues=sections.queues,
        autoscaling=sections.or_default("autoscaling"),
        training_namespace=services.training_namespace,
        services=queues.NodeServices(
            fsx=storage.fsx.enabled,
            efa_device_plugin=services.efa_device_plugin,
            monitoring=sections.or_default("monitoring").enabled,
            **queues.burn_in_services(groups, sections.or_default("burn_in")),
        ),
        operators=sorted(env.operators),
        volumes=sorted(env.volumes),
        etcd=env.etcd_enabled,
        jobs=keyed,
    )
    queues.check_jobs(plan, problems, "")


def parse_jobs(
    raw: Any, key: str, problems: list[Problem], env: JobEnvironment, invalid_groups: Iterable[str] = ()
) -> list[JobBase]:
    """Parse and check the ``jobs`` list; append a ``Problem`` for every problem found.

    Returns the jobs that parsed (disabled ones included, with ``enabled`` False); the caller
    raises ``ConfigError`` if ``problems`` grew.
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(Problem(key, f"{_fmt(raw)} is not allowed: expected a list of jobs"))
        return []
    skip = set(invalid_groups)
    specs: list[JobBase] = []
    seen: dict[str, int] = {}
    for i, (k, item) in enumerate(zip(entry_keys(key, entry_names(raw)), raw, strict=True)):
        spec = _parse_job(item, k, problems)
        if spec is None:
            continue
        if spec.name in seen:
            problems.append(
                Problem(
                    f"{k}.name", f"{_fmt(spec.name)} is used by jobs[{seen[spec.name]}] too; job names must be unique"
                )
            )
        else:
            seen[spec.name] = i
        spec.check(k, problems)
        if spec.enabled and getattr(spec, "node_group", None) not in skip:
            spec.check_environment(k, problems, env)
        specs.append(spec)
    return specs


def _parse_job(item: Any, k: str, problems: list[Problem]) -> JobBase | None:
    if not isinstance(item, dict):
        problems.append(Problem(k, f"{_fmt(item)} is not allowed: expected a map with at least name and kind"))
        return None
    kind = item.get("kind")
    if kind is None:
        problems.append(Problem(f"{k}.kind", f"is required: one of {_KIND_NAMES}"))
        return None
    if not isinstance(kind, str) or kind not in JOB_KINDS:
        problems.append(Problem(f"{k}.kind", f"{_fmt(kind)} is not a job kind; use one of {_KIND_NAMES}"))
        return None
    body = dict(item)
    for derived, source in DERIVED_KEYS.items():
        if derived in body:
            problems.append(
                Problem(
                    f"{k}.{derived}",
                    f"{_fmt(body.pop(derived))} is not allowed: it is derived from {source}; remove it",
                )
            )
    for field in ("env", "secretEnv"):
        if field in body:
            body[field] = spec_checks.raw_env(body[field], f"{k}.{field}", problems)
    return parse(JOB_KINDS[kind], k, body, problems)
