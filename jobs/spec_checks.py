"""Checks every job kind shares: names and pod hostnames, images, env, mounts, paths, volumes.

Each appends a ``Problem`` naming the config key, the bad value and what is allowed.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any

from facts import topology
from facts.aws_names import bucket_problem, image_reference_problem
from facts.problems import Problem
from facts.problems import fmt as fmt

# Pod hostnames (and so job names plus their suffix) must be DNS-1035 labels of at most 63.
MAX_HOSTNAME = 63
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Environment variable names. Kubernetes 1.35 and 1.36 (the versions the stack runs) take any
# printable ASCII character but '=', at least one (apimachinery's validation.IsRelaxedEnvVarName, under
# RelaxedEnvironmentVariableValidation: KEP-4369, GA and locked on since 1.34). The stack takes C
# identifiers only, the names a SageMaker training job's Environment takes (botocore's sagemaker
# model, TrainingEnvironmentKey: [a-zA-Z_][a-zA-Z0-9_]*), so one spec runs on either runtime.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_NAME_TEXT = "letters, digits and '_', not starting with a digit"
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# s3://<bucket>[/<prefix>]; what S3 allows as a bucket name is facts.aws_names.bucket_problem's.
S3_URI = re.compile(r"^s3://([^/\s]+)(/\S*)?$")
REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")


def check_name(name: str, hostnames: list[str], k: str, problems: list[Problem]) -> None:
    """A DNS-1035 name whose longest pod hostname still fits 63 characters."""
    if not DNS1035_LABEL.match(name) or len(name) > MAX_HOSTNAME:
        problems.append(
            Problem(
                k,
                f"{fmt(name)} is not a valid Kubernetes name: lower-case letters, digits and '-', "
                f"starting with a letter and ending with a letter or digit, at most {MAX_HOSTNAME} characters",
            )
        )
        return
    host = max(hostnames, key=len) if hostnames else ""
    if len(host) > MAX_HOSTNAME:
        room = MAX_HOSTNAME - (len(host) - len(name))
        problems.append(
            Problem(
                k,
                f"{fmt(name)} makes the pod hostname {host!r} {len(host)} characters long; hostnames are at most "
                f"{MAX_HOSTNAME}: shorten the name to at most {room} characters",
            )
        )


def check_image(image: str, k: str, problems: list[Problem]) -> None:
    """An image reference a container runtime parses (facts.aws_names.image_reference_problem:
    distribution/reference's grammar, which names a stray character such as a pasted quote or a
    space), pinned by a tag other than latest, or by digest."""
    if not image:
        problems.append(Problem(k, f"{fmt(image)} is not an image reference"))
        return
    if why := image_reference_problem(image):
        problems.append(
            Problem(
                k,
                f"{fmt(image)} is not a valid image reference: {why}; like nvcr.io/nvidia/pytorch:24.01-py3 or "
                "<registry>/<repository>@sha256:<64 hex digits>",
            )
        )
        return
    if "@" in image:
        return
    last = image.rsplit("/", 1)[-1]
    if ":" not in last or last.endswith(":latest"):
        problems.append(
            Problem(
                k,
                f"{fmt(image)} is not pinned: give a tag other than 'latest' (or a digest) so every run gets the same "
                "image",
            )
        )


def env_name_problem(name: str) -> str | None:
    """Why ``name`` is no environment variable name of a job (see _ENV_NAME), or None. A name with '='
    is told so once: Kubernetes itself refuses it, and it is most often NAME=VALUE written as the name."""
    if _ENV_NAME.fullmatch(name):
        return None
    if "=" in name:
        before, _, after = name.partition("=")
        hint = f"; give the value after the colon instead: {before}: {after}" if _ENV_NAME.fullmatch(before) else ""
        return (
            f"{fmt(name)} is not an environment variable name: a name may not contain '=' (Kubernetes refuses it: its "
            f"names are printable ASCII other than '='){hint}"
        )
    if not name:
        return f"{fmt(name)} is not an environment variable name: a name has at least one character ({_ENV_NAME_TEXT})"
    return (
        f"{fmt(name)} is not an environment variable name the stack takes: {_ENV_NAME_TEXT}, the names a SageMaker "
        "training job takes too (Kubernetes 1.35 and 1.36 would take any printable ASCII but '=')"
    )


def raw_env(raw: Any, k: str, problems: list[Problem]) -> Any:
    """``env`` or ``secretEnv`` as written (``k``: its key), before the job's model reads it: a bad name
    is one problem, and so is a name without a value (YAML reads ``NAME:`` and ``{NAME}`` as null);
    both are left out of what the model reads, which would add a line per value type it tried."""
    if not isinstance(raw, dict):
        return raw
    kept: dict[Any, Any] = {}
    for name, value in raw.items():
        why = env_name_problem(str(name))
        if why:
            problems.append(Problem(f"{k}.{name}", why))
        elif value is None:
            wanted = (
                "the Secret and its key, {secret: <name>, key: <key>}"
                if k.endswith("secretEnv")
                else f'one, like {name}: "1" ("" for an empty value)'
            )
            problems.append(
                Problem(f"{k}.{name}", f"has no value (YAML reads `{name}:` and `{{{name}}}` as null): give {wanted}")
            )
        else:
            kept[name] = value
    return kept


def check_env(
    env: Mapping[str, Any], secret_env: Mapping[str, Any], reserved: Mapping[str, str], k: str, problems: list[Problem]
) -> None:
    """Valid variable names, none of the derived ones, one source each, valid Secret references."""
    for field, names in (("env", list(env)), ("secretEnv", list(secret_env))):
        for name in names:
            why = env_name_problem(name)
            if why:
                problems.append(Problem(f"{k}.{field}.{name}", why))
            elif name in reserved:
                problems.append(Problem(f"{k}.{field}.{name}", f"{reserved[name]}; remove it"))
    for name in sorted(set(env) & set(secret_env)):
        problems.append(Problem(f"{k}.secretEnv.{name}", "is set in env too; give each variable one source"))
    for name, ref in secret_env.items():
        if not _DNS1123_SUBDOMAIN.match(ref.secret) or len(ref.secret) > 253:
            problems.append(
                Problem(f"{k}.secretEnv.{name}.secret", f"{fmt(ref.secret)} is not a valid Kubernetes Secret name")
            )
        if not _SECRET_KEY.match(ref.key):
            problems.append(
                Problem(
                    f"{k}.secretEnv.{name}.key",
                    f"{fmt(ref.key)} is not a valid Secret key (letters, digits, '-', '_' and '.')",
                )
            )


def check_s3_uri(uri: str, k: str, problems: list[Problem], example: str = "s3://my-bucket/datasets/coco") -> None:
    """``s3://bucket[/prefix]`` with a bucket name S3 allows."""
    m = S3_URI.match(uri)
    if not m:
        problems.append(Problem(k, f"{fmt(uri)} is not an S3 URI like {example!r}"))
    elif why := bucket_problem(m.group(1)):
        problems.append(Problem(k, f"{fmt(uri)} names a bucket S3 does not allow: {why}"))


def check_relative_path(path: str, k: str, problems: list[Problem]) -> None:
    """A path inside a volume: no '..'."""
    parts = [p for p in path.split("/") if p]
    if ".." in parts:
        problems.append(Problem(k, f"{fmt(path)} is not allowed: a path inside the volume, without '..'"))


def check_sub_path(volume: str, path: str, k: str, problems: list[Problem]) -> None:
    """A directory inside a file system, relative to its root: no leading '/', no '..'."""
    if path.startswith("/") or ".." in path.split("/") or not path.strip("/"):
        where = (
            "FSx paths get the file system's mount name (/<mountName>) in front"
            if volume == "fsx"
            else "paths start at the file system's root"
        )
        problems.append(
            Problem(
                k, f"{fmt(path)} is not allowed: a directory relative to the file system's root, without '..' ({where})"
            )
        )


def check_mounts(mounts: Iterable[tuple[str, str]], k: str, problems: list[Problem]) -> None:
    """Each volume mounted once, at its own absolute path, not over / or /dev/shm."""
    names: dict[str, int] = {}
    paths: dict[str, int] = {}
    for j, (name, mount_path) in enumerate(mounts):
        vk = f"{k}.volumes[{j}]"
        if name in names:
            problems.append(Problem(f"{vk}.name", f"{fmt(name)} is mounted by volumes[{names[name]}] already"))
        names.setdefault(name, j)
        path = posixpath.normpath(mount_path) if mount_path.startswith("/") else mount_path
        if not mount_path.startswith("/") or ".." in mount_path.split("/"):
            problems.append(
                Problem(f"{vk}.mountPath", f"{fmt(mount_path)} is not allowed: an absolute path like '/fsx'")
            )
        elif path == "/" or path == "/dev/shm" or path.startswith("/dev/shm/"):
            problems.append(
                Problem(
                    f"{vk}.mountPath",
                    f"{fmt(mount_path)} is not allowed: '/' and '/dev/shm' (the shared-memory volume) are taken",
                )
            )
        elif path in paths:
            problems.append(Problem(f"{vk}.mountPath", f"{fmt(mount_path)} is used by volumes[{paths[path]}] already"))
        paths.setdefault(path, j)


def check_volume(name: str, volumes: Iterable[str], k: str, problems: list[Problem]) -> None:
    """The volume's store is enabled in the stack."""
    available = set(volumes)
    if name not in available:
        on = ", ".join(sorted(available)) or "none"
        problems.append(
            Problem(k, f"{fmt(name)} is not available: its store is not enabled in this stack (enabled stores: {on})")
        )


def check_placement(
    placement: str | None, layer: int | None, group: Any, queues: bool, key: str, problems: list[Problem]
) -> None:
    """A job's ``placement`` and ``placementLayer`` against its node group (``group``: name, instance,
    efa_interfaces): a placement needs queues and a group with a network topology, and the layer must
    be one of the group's type."""
    asks = placement in ("required", "preferred") or layer is not None
    if not asks:
        return
    where = f"{key}.placement" if placement in ("required", "preferred") else f"{key}.placementLayer"
    what = fmt(placement) if where.endswith(".placement") else str(layer)
    if not queues:
        problems.append(
            Problem(
                where, f"{what} needs queues (queues.enabled): Kueue places jobs by topology; drop it, or run queues"
            )
        )
        return
    layers = topology.group_layers(group.instance, group.efa_interfaces)
    if not layers:
        it = group.instance
        why = (
            f"{it.name} nodes carry no network layer labels (EC2 describes no topology for the type)"
            if not it.network_layers
            else "its EFA is off (efa: false), and only EFA groups get a Kueue Topology"
        )
        problems.append(
            Problem(
                where,
                f"{what} needs a node group with a network topology, and group {group.name!r} has none: {why}; drop "
                "placement (Kueue then admits the job by quota alone) or use an EFA group of a type with network "
                "layers",
            )
        )
        return
    if layer is not None and layer > layers:
        problems.append(
            Problem(
                f"{key}.placementLayer",
                f"{layer} is not a network layer of {group.instance.name} (node group {group.name!r}): its nodes carry "
                f"{topology.layer_label(1)} to -{layers}; use 1 (the top, coarsest) to {layers} (the finest)",
            )
        )
