"""Loading the stack config: the engine's flat ``{"ns:key": value}`` map into a ``StackConfig``.

``load`` parses every section with its model, runs the cross-field checks and the job section,
and raises ``ConfigError`` listing every problem found. Nothing here touches Pulumi or AWS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from facts.problems import ConfigError, Problem, non_ascii_note
from facts.problems import fmt as _fmt
from stacks.config import cross_checks
from stacks.config.errors import parse as _parse
from stacks.config.errors import yaml_hint
from stacks.config.job_entries import parse_job_section
from stacks.config.models import (
    FOREIGN_NAMESPACES_ALLOWED,
    NAMESPACE,
    SECTIONS,
    ClusterConfig,
    EtcdConfig,
    GpuNodeGroupConfig,
    NetworkConfig,
    QueuesConfig,
    ServicesConfig,
    StackConfig,
    StorageConfig,
    SystemNodeGroupConfig,
)

# How deep a config value may nest maps and lists. This project's values nest a few levels (a
# job's env: the job list, a job, env); beyond 32 a value is a mistake, and every reader of it
# (the models, the checks, Python's JSON decoder at about 1000 levels) would recurse on it.
MAX_DEPTH = 32


class _TooDeep:
    """A value nested too deep for Python's JSON decoder (it raised RecursionError)."""

    def __repr__(self) -> str:
        return "<nested too deep>"


TOO_DEEP = _TooDeep()


def too_deep_message() -> str:
    return f"nests maps and lists more than {MAX_DEPTH} levels deep; no value of this project's config nests more than a few"


def decode_config_values(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Turn the engine's flat config map (``ns:key`` -> JSON text or plain string) into values."""
    # The engine passes structured values (maps, lists) as JSON text and scalars as plain text.
    # Scalars stay text: the models coerce "3" or "true" where a number or a flag is expected.
    out: dict[str, Any] = {}
    for key, value in flat.items():
        decoded = value
        if isinstance(value, str) and value[:1] in "[{":
            try:
                decoded = json.loads(value)
            except ValueError:
                pass
            except RecursionError:
                decoded = TOO_DEEP
        out[key] = decoded
    return out


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests maps and lists deeper than MAX_DEPTH (without recursing, and
    stopping there: a value that contains itself is too deep as well)."""
    if value is TOO_DEEP:
        return True
    todo = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, (dict, list)):
            if level > MAX_DEPTH:
                return True
            todo.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def load(flat: Mapping[str, Any], project: str, stack: str) -> StackConfig:
    """Validate a stack's config (``{"ns:key": value}``) and return the typed config.

    Raises ``ConfigError`` listing every problem found.
    """
    problems: list[Problem] = []
    values = _project_values(flat, problems)
    region = _region(flat.get("aws:region"), problems)
    parsed = _parse_sections(values, problems)
    groups: list[GpuNodeGroupConfig | None] = parsed.get("gpu_node_groups", [])
    cluster_name = (parsed["cluster"].name if "cluster" in parsed else None) or f"{project}-{stack}"
    sections = _checked_sections(values, parsed, region, cluster_name, problems)
    if "jobs" in values:
        parsed["jobs"] = parse_job_section(values["jobs"], values.get("gpuNodeGroups"), groups, sections, problems)
    if problems:
        raise ConfigError(problems)
    parsed["gpu_node_groups"] = [g for g in groups if g is not None]
    return StackConfig(project=project, stack=stack, region=region, **parsed)


def _project_values(flat: Mapping[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """The values of the project's namespace by key; unknown keys and namespaces are problems."""
    values: dict[str, Any] = {}
    for full_key, value in sorted(flat.items()):
        ns, _, key = full_key.partition(":")
        if _too_deep(value):
            problems.append(Problem(full_key, too_deep_message()))
            continue
        if ns == NAMESPACE:
            if key not in SECTIONS:
                allowed = ", ".join(sorted(SECTIONS))
                problems.append(Problem(full_key, f"unknown key{non_ascii_note(key)}; allowed keys are: {allowed}"))
                continue
            if value == "" and SECTIONS[key][1] is not str:
                # A key written without a value (all its entries commented out, say): the CLI warns
                # and hands the program "" ("treated as null in a future version"). The section's
                # defaults, as for a key left out.
                continue
            values[key] = value
        elif ns not in FOREIGN_NAMESPACES_ALLOWED:
            problems.append(
                Problem(full_key, f"unknown namespace {_fmt(ns)}; this project reads {NAMESPACE}:* and aws:region")
            )
    return values


def _region(region: Any, problems: list[Problem]) -> str:
    if _too_deep(region):
        return ""  # said already
    if not region:
        problems.append(Problem("aws:region", "is required (e.g. us-west-2)"))
        return ""
    if isinstance(region, dict) and set(region) == {"value"}:
        inner = region["value"]
        shown = inner if isinstance(inner, str) and len(inner) <= 40 and inner.isprintable() else _fmt(inner)
        problems.append(
            Problem(
                "aws:region",
                f"{_fmt(region)} is not allowed in a stack file: write the region itself, `aws:region: {shown}`",
            )
        )
    elif not isinstance(region, str) or not re.fullmatch(r"[a-z]{2}(-gov)?-[a-z]+-\d", region):
        problems.append(Problem("aws:region", f"{_fmt(region)} is not an AWS region name like 'us-west-2'"))
    elif cross_checks.known_regions() and region not in cross_checks.known_regions():
        known = ", ".join(sorted(cross_checks.known_regions()))
        problems.append(
            Problem(
                "aws:region",
                f"{_fmt(region)} is not an AWS region known to this toolkit's AWS SDK (botocore); known: {known}",
            )
        )
    return region if isinstance(region, str) else ""


def _parse_sections(values: dict[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """Each section through its model (the job section is parsed last, against the others)."""
    parsed: dict[str, Any] = {}
    for name, (field, model) in SECTIONS.items():
        if name not in values or model == "jobs":
            continue
        raw, key = values[name], f"{NAMESPACE}:{name}"
        if model is str:
            if not isinstance(raw, str):
                problems.append(Problem(key, f"{_fmt(raw)} is not allowed: expected a string"))
            else:
                parsed[field] = raw
        elif model is dict:
            if not isinstance(raw, dict):
                problems.append(Problem(key, f"{_fmt(raw)} is not allowed: expected a map of strings"))
            elif bad := [k for k, v in raw.items() if not isinstance(k, str) or not isinstance(v, str)]:
                for k in bad:
                    problems.append(
                        Problem(
                            f"{key}.{k}",
                            f"{_fmt(raw[k])} is not allowed: expected a string{yaml_hint(raw[k]) or yaml_hint(k)}",
                        )
                    )
            else:
                parsed[field] = raw
        elif model is list:
            if not isinstance(raw, list):
                problems.append(Problem(key, f"{_fmt(raw)} is not allowed: expected a list of node groups"))
                continue
            parsed[field] = [_parse(GpuNodeGroupConfig, f"{key}[{i}]", item, problems) for i, item in enumerate(raw)]
        else:
            section = _parse(model, key, {} if raw is None else raw, problems)
            if section is not None:
                parsed[field] = section
    return parsed


def _checked_sections(
    values: dict[str, Any], parsed: dict[str, Any], region: str, cluster_name: str, problems: list[Problem]
) -> cross_checks.Sections:
    """Run the cross-field checks on every section that parsed (a section given but invalid is
    None and skipped), so one typo does not hide other problems."""

    def section(name: str, field: str, default: Any) -> Any:
        return parsed.get(field, None if name in values else default)

    sections = cross_checks.Sections(
        network=section("network", "network", NetworkConfig()),
        cluster=section("cluster", "cluster", ClusterConfig()),
        system=section("systemNodeGroup", "system_node_group", SystemNodeGroupConfig()),
        groups=parsed.get("gpu_node_groups", []),
        storage=section("storage", "storage", StorageConfig()),
        etcd=section("etcd", "etcd", EtcdConfig()),
        services=section("services", "services", ServicesConfig()),
        monitoring=parsed.get("monitoring"),
        autoscaling=parsed.get("autoscaling"),
        queues=section("queues", "queues", QueuesConfig()),
    )
    cross_checks.check_all(parsed.get("gpu_availability_zone", "auto"), region, cluster_name, sections, problems)
    if "tags" in parsed:
        cross_checks.check_tags(parsed["tags"], problems)
    return sections
