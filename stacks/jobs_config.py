"""The ``jobs`` list of the stack config: parsing into typed ``JobSpec`` models and the checks that
need the rest of the stack (node groups, volumes, operators, etcd).

Every problem is reported at once, each naming the config key (``gpu-training:jobs[2].nodes``), the
bad value and what is allowed, like the rest of ``stacks.config``. Disabled jobs (``enabled: false``)
are parsed and checked for what they are on their own (types, names, env), but not against the
environment (node group, volumes, operators, etcd): a job can be switched off because its node
group or operator is gone.

``stacks.config`` may import this module at its top: its helpers (``Problem``, ``_parse``, ``_fmt``)
are imported when ``parse_jobs`` runs, not at import time, so either module can be imported first.
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from components import jobs as J

if TYPE_CHECKING:  # pragma: no cover
    from stacks.config import GpuNodeGroupConfig, Problem


def _cfg():
    """``stacks.config``, imported when first needed so that it can import this module at its top."""
    from stacks import config

    return config


_KIND_NAMES = ", ".join(repr(k) for k in J.JOB_KINDS)
_OPERATOR_TITLE = {"mpi": "the MPI operator", "training": "the training operator"}
# Keys people carry over from hand-written manifests; each is derived from the node group.
_DERIVED_KEYS = {
    "slotsPerWorker": "the GPUs per node of the group's instance type",
    "gpusPerNode": "the GPUs per node of the group's instance type (a worker owns a whole node)",
    "nprocPerNode": "the GPUs per node of the group's instance type",
    "replicas": "nodes",
    "efaInterfaces": "the EFA interfaces of the group (set efa: false to run without EFA)",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_S3_URI = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/.*)?$")
_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")


def job_targets(groups: Iterable["GpuNodeGroupConfig"], availability_zone: str) -> dict[str, J.JobTarget]:
    """One ``JobTarget`` per GPU node group, from the catalog facts of its instance type, the EFA
    interfaces the group attaches, its maxSize, the GPU AZ and the group's own taints."""
    return {
        g.name: J.JobTarget.from_instance(
            g.name,
            g.instance,
            efa_interfaces=g.efa_interfaces,
            max_nodes=g.max_size,
            availability_zone=availability_zone,
            extra_taints=[t.model_dump() for t in g.taints],
        )
        for g in groups
    }


def parse_jobs(
    raw: Any,
    key: str,
    problems: list["Problem"],
    *,
    groups: Mapping[str, "GpuNodeGroupConfig"],
    volumes: set[str],
    operators: set[str],
    etcd_enabled: bool,
    invalid_groups: Iterable[str] = (),
) -> list[J.JobSpec]:
    """Parse and check the ``jobs`` list; append a ``Problem`` for every problem found.

    ``groups``: GPU node group name -> its config; ``volumes``: the shared stores that exist
    ("fsx", "efs"); ``operators``: the operators installed ("mpi", "training"); ``etcd_enabled``:
    whether the stack runs etcd for PyTorch rendezvous; ``invalid_groups``: names of node groups
    whose own config has problems (already reported; jobs on them are not checked against them).
    Returns the jobs that parsed (disabled ones
    included, with ``enabled`` False); the caller raises ``ConfigError`` if ``problems`` grew.
    """
    if raw is None:
        return []
    if not isinstance(raw, list):
        problems.append(_cfg().Problem(key, f"{_cfg()._fmt(raw)} is not allowed: expected a list of jobs"))
        return []
    specs: list[J.JobSpec] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        k = f"{key}[{i}]"
        spec = _parse_job(item, k, problems)
        if spec is None:
            continue
        if spec.name in seen:
            problems.append(
                _cfg().Problem(f"{k}.name", f"{_cfg()._fmt(spec.name)} is used by jobs[{seen[spec.name]}] too; job names must be unique")
            )
        else:
            seen[spec.name] = i
        _check_self(spec, k, problems)
        if spec.enabled and getattr(spec, "node_group", None) not in set(invalid_groups):
            _check_environment(spec, k, problems, groups, volumes, operators, etcd_enabled)
        specs.append(spec)
    return specs


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


def _parse_job(item: Any, k: str, problems: list["Problem"]) -> Optional[J.JobSpec]:
    P, fmt = _cfg().Problem, _cfg()._fmt
    if not isinstance(item, dict):
        problems.append(P(k, f"{fmt(item)} is not allowed: expected a map with at least name and kind"))
        return None
    kind = item.get("kind")
    if kind is None:
        problems.append(P(f"{k}.kind", f"is required: one of {_KIND_NAMES}"))
        return None
    if not isinstance(kind, str) or kind not in J.JOB_KINDS:
        problems.append(P(f"{k}.kind", f"{fmt(kind)} is not a job kind; use one of {_KIND_NAMES}"))
        return None
    body = dict(item)
    for derived, source in _DERIVED_KEYS.items():
        if derived in body:
            problems.append(P(f"{k}.{derived}", f"{fmt(body.pop(derived))} is not allowed: it is derived from {source}; remove it"))
    return _cfg()._parse(J.JOB_KINDS[kind], k, body, problems)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Checks of a job on its own
# ---------------------------------------------------------------------------------------------


def _check_self(spec: J.JobSpec, k: str, problems: list["Problem"]) -> None:
    P, fmt = _cfg().Problem, _cfg()._fmt
    name = spec.name
    if not J.DNS1035_LABEL.match(name) or len(name) > J.MAX_HOSTNAME:
        problems.append(
            P(
                f"{k}.name",
                f"{fmt(name)} is not a valid Kubernetes name: lower-case letters, digits and '-', "
                f"starting with a letter and ending with a letter or digit, at most {J.MAX_HOSTNAME} characters",
            )
        )
    else:
        hosts = J.pod_hostnames(spec)
        host = max(hosts, key=len) if hosts else ""
        if len(host) > J.MAX_HOSTNAME:
            room = J.MAX_HOSTNAME - (len(host) - len(name))
            problems.append(
                P(
                    f"{k}.name",
                    f"{fmt(name)} makes the pod hostname {host!r} {len(host)} characters long; hostnames are at most "
                    f"{J.MAX_HOSTNAME}: shorten the name to at most {room} characters",
                )
            )

    _check_image(spec.image, f"{k}.image", problems)
    _check_env(spec, k, problems)

    if isinstance(spec, J.PyTorchElasticSpec):
        low, high = spec.elastic_min, spec.elastic_max
        if low > high:
            problems.append(P(f"{k}.minNodes", f"{low} is greater than maxNodes {high}"))
        elif not low <= spec.nodes <= high:
            problems.append(P(f"{k}.nodes", f"{spec.nodes} is outside minNodes..maxNodes ({low}..{high}); the job starts with this many nodes"))
    if isinstance(spec, J.PaddleSpec) and spec.mode != "ps" and spec.pservers is not None:
        problems.append(P(f"{k}.pservers", f"{spec.pservers} is only used with mode 'ps' (mode is {spec.mode!r})"))
    if isinstance(spec, J.DataStageSpec):
        if not _S3_URI.match(spec.source):
            problems.append(P(f"{k}.source", f"{fmt(spec.source)} is not an S3 URI like 's3://my-bucket/datasets/coco'"))
        _check_relative_path(spec.path, f"{k}.path", problems)
        if spec.source_region is not None and not _REGION.match(spec.source_region):
            problems.append(P(f"{k}.sourceRegion", f"{fmt(spec.source_region)} is not an AWS region name like 'us-west-2'"))
    if isinstance(spec, J.TensorboardSpec):
        _check_relative_path(spec.log_path, f"{k}.logPath", problems)
    if isinstance(spec, J._GpuJob):
        _check_mounts(spec, k, problems)


def _check_image(image: str, k: str, problems: list["Problem"]) -> None:
    P, fmt = _cfg().Problem, _cfg()._fmt
    if not image or any(c.isspace() for c in image):
        problems.append(P(k, f"{fmt(image)} is not an image reference"))
        return
    if "@" in image:
        return
    last = image.rsplit("/", 1)[-1]
    if ":" not in last or last.endswith(":latest"):
        problems.append(P(k, f"{fmt(image)} is not pinned: give a tag other than 'latest' (or a digest) so every run gets the same image"))


def _check_env(spec: J.JobSpec, k: str, problems: list["Problem"]) -> None:
    P, fmt = _cfg().Problem, _cfg()._fmt
    reserved = {n: "is derived from the node group (set on EFA groups only)" for n in J.EFA_ENV_NAMES}
    if isinstance(spec, J.NcclTestSpec):
        reserved["NCCL_DEBUG"] = "is always INFO for nccl-test (the log must show which provider NCCL chose)"
    for field, names in (("env", list(spec.env)), ("secretEnv", list(spec.secret_env))):
        for name in names:
            if not _ENV_NAME.match(name):
                problems.append(P(f"{k}.{field}.{name}", f"{fmt(name)} is not an environment variable name (letters, digits and '_', not starting with a digit)"))
            elif name in reserved:
                problems.append(P(f"{k}.{field}.{name}", f"{reserved[name]}; remove it"))
    for name in sorted(set(spec.env) & set(spec.secret_env)):
        problems.append(P(f"{k}.secretEnv.{name}", "is set in env too; give each variable one source"))
    for name, ref in spec.secret_env.items():
        if not _DNS1123_SUBDOMAIN.match(ref.secret) or len(ref.secret) > 253:
            problems.append(P(f"{k}.secretEnv.{name}.secret", f"{fmt(ref.secret)} is not a valid Kubernetes Secret name"))
        if not _SECRET_KEY.match(ref.key):
            problems.append(P(f"{k}.secretEnv.{name}.key", f"{fmt(ref.key)} is not a valid Secret key (letters, digits, '-', '_' and '.')"))


def _check_relative_path(path: str, k: str, problems: list["Problem"]) -> None:
    parts = [p for p in path.split("/") if p]
    if ".." in parts:
        problems.append(_cfg().Problem(k, f"{_cfg()._fmt(path)} is not allowed: a path inside the volume, without '..'"))


def _check_mounts(spec: J._GpuJob, k: str, problems: list["Problem"]) -> None:
    P, fmt = _cfg().Problem, _cfg()._fmt
    names: dict[str, int] = {}
    paths: dict[str, int] = {}
    for j, v in enumerate(spec.volumes):
        vk = f"{k}.volumes[{j}]"
        if v.name in names:
            problems.append(P(f"{vk}.name", f"{fmt(v.name)} is mounted by volumes[{names[v.name]}] already"))
        names.setdefault(v.name, j)
        path = posixpath.normpath(v.mount_path) if v.mount_path.startswith("/") else v.mount_path
        if not v.mount_path.startswith("/") or ".." in v.mount_path.split("/"):
            problems.append(P(f"{vk}.mountPath", f"{fmt(v.mount_path)} is not allowed: an absolute path like '/fsx'"))
        elif path == "/" or path == "/dev/shm" or path.startswith("/dev/shm/"):
            problems.append(P(f"{vk}.mountPath", f"{fmt(v.mount_path)} is not allowed: '/' and '/dev/shm' (the shared-memory volume) are taken"))
        elif path in paths:
            problems.append(P(f"{vk}.mountPath", f"{fmt(v.mount_path)} is used by volumes[{paths[path]}] already"))
        paths.setdefault(path, j)


# ---------------------------------------------------------------------------------------------
# Checks against the environment (enabled jobs only)
# ---------------------------------------------------------------------------------------------


def _check_environment(
    spec: J.JobSpec,
    k: str,
    problems: list["Problem"],
    groups: Mapping[str, "GpuNodeGroupConfig"],
    volumes: set[str],
    operators: set[str],
    etcd_enabled: bool,
) -> None:
    P, fmt = _cfg().Problem, _cfg()._fmt
    operator = J.KIND_OPERATOR.get(spec.kind)
    if operator is not None and operator not in operators:
        on = ", ".join(sorted(operators)) or "none"
        problems.append(
            P(f"{k}.kind", f"{spec.kind!r} jobs need {_OPERATOR_TITLE[operator]} ({operator!r}), which is not enabled in this stack (enabled operators: {on})")
        )

    def check_volume(name: str, vk: str) -> None:
        if name not in volumes:
            on = ", ".join(sorted(volumes)) or "none"
            problems.append(P(vk, f"{fmt(name)} is not available: its store is not enabled in this stack (enabled stores: {on})"))

    if isinstance(spec, (J.DataStageSpec, J.TensorboardSpec)):
        check_volume(spec.volume, f"{k}.volume")
        return

    for j, v in enumerate(spec.volumes):
        check_volume(v.name, f"{k}.volumes[{j}].name")

    if isinstance(spec, J.PyTorchElasticSpec) and spec.rdzv_backend in ("etcd", "etcd-v2") and not etcd_enabled:
        problems.append(
            P(f"{k}.rdzvBackend", f"{spec.rdzv_backend!r} needs the stack's etcd, which is disabled; enable etcd or use rdzvBackend 'c10d'")
        )

    g = groups.get(spec.node_group)
    if g is None:
        known = ", ".join(repr(n) for n in sorted(groups)) or "none (add one under gpuNodeGroups)"
        problems.append(P(f"{k}.nodeGroup", f"{fmt(spec.node_group)} is not a GPU node group of this stack; known groups: {known}"))
        return
    it = g.instance
    if spec.nodes > g.max_size:
        problems.append(P(f"{k}.nodes", f"{spec.nodes} is more than node group {g.name!r} can hold (maxSize {g.max_size})"))
    if isinstance(spec, J.PyTorchElasticSpec) and spec.elastic_max > g.max_size:
        problems.append(P(f"{k}.maxNodes", f"{spec.elastic_max} is more than node group {g.name!r} can hold (maxSize {g.max_size})"))
    if spec.efa is True and not g.efa_enabled:
        why = "its efa setting is off" if it.efa_supported else f"{it.name} has no EFA"
        problems.append(P(f"{k}.efa", f"true is not allowed: node group {g.name!r} runs without EFA ({why}); use an EFA group or drop efa"))
    if isinstance(spec, J.NcclTestSpec) and spec.image == J.NCCL_TESTS_IMAGE and it.gpu_model not in J.NCCL_TESTS_IMAGE_GPU_MODELS:
        problems.append(
            P(
                f"{k}.image",
                f"the default nccl-tests image is built for {', '.join(J.NCCL_TESTS_IMAGE_GPU_MODELS)} GPUs and cannot run on "
                f"node group {g.name!r} ({it.name}, {it.gpu_model}); set image to an nccl-tests build for {it.gpu_model}",
            )
        )
