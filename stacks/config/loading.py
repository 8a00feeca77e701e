"""Loading the stack config: the engine's flat ``{"ns:key": value}`` map into a ``StackConfig``.

``load`` walks StackConfig's fields (``SECTIONS``: each field is a key of the project namespace),
parses each section with its field's type, runs the cross-field checks, the GPU AZ check (when the
caller can tell which AZs offer which types) and the job section, and raises ``ConfigError``
listing every problem found. Nothing here touches Pulumi or AWS.

One run reports every problem that does not depend on another. What is skipped, because it reads
a value that has a problem of its own (already reported):

- the checks of a section, node group or job that is not the type its field asks for, or has a
  value of the wrong type or misses a required key: the checks after the model read its fields
  (an unknown key alone does not stop them: ``errors.parse`` parses the value again without it);
- the checks of jobs against a node group that did not parse or whose type is not a catalog GPU
  type (``job_entries.parse_job_section``), and of disabled jobs against the stack;
- the GPU AZ check (``PlacementAsk``) with a refused ``aws:region`` or ``gpuAvailabilityZone``, or
  with an invalid ``tags`` section where the check looks up the stack's deployed GPU subnet by its
  tags (`pulumi up`); it leaves out the node groups that did not parse or have no catalog GPU type,
  and the AZ-count part of it an invalid ``network`` section.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from facts.problems import ConfigError, Problem, entry_keys, entry_names, non_ascii_note
from facts.problems import fmt as _fmt
from stacks.config import cross_checks
from stacks.config.errors import parse as _parse
from stacks.config.errors import unknown_key_advice, yaml_hint
from stacks.config.job_entries import gpu_type, parse_job_section
from stacks.config.models import NAMESPACE, ConfigModel, GpuNodeGroupConfig
from stacks.config.stack_config import FOREIGN_NAMESPACES_ALLOWED, SECTIONS, StackConfig

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
    return (
        f"nests maps and lists more than {MAX_DEPTH} levels deep; no value of this project's config nests more than a "
        "few"
    )


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


@dataclass(frozen=True)
class PlacementAsk:
    """What the GPU AZ check reads of a config: the sections' values that parsed (see the module's
    docstring for when it is not asked). ``availability_zone_count`` is None where the network
    section is invalid; ``tags`` the stack's tags (None: invalid), which find its GPU subnet."""

    project: str
    stack: str
    region: str
    requested: str  # gpuAvailabilityZone: an AZ name or "auto"
    gpu_types: list[str]  # the node groups' GPU types, sorted
    availability_zone_count: int | None
    tags: dict[str, str] | None


# The GPU AZ check: the problems of placing the config's GPU types (stacks/placement.py has the
# rule; the caller, which knows where to look up the region's offerings, passes it in).
PlacementCheck = Callable[[PlacementAsk], list[Problem]]


def load(
    flat: Mapping[str, Any], project: str, stack: str, placement_check: PlacementCheck | None = None
) -> StackConfig:
    """Validate a stack's config (``{"ns:key": value}``) and return the typed config.

    Raises ``ConfigError`` listing every problem found; ``placement_check`` adds the GPU AZ's.
    """
    problems: list[Problem] = []
    values = _project_values(flat, problems)
    region = _region(flat.get("aws:region"), problems)
    parsed = _parse_sections(values, problems)
    groups: list[GpuNodeGroupConfig | None] = parsed.get("gpu_node_groups", [])
    cluster_name = (parsed["cluster"].name if "cluster" in parsed else None) or f"{project}-{stack}"
    sections = _checked_sections(values, parsed, region, cluster_name, problems)
    if placement_check is not None:
        ask = _placement_ask(project, stack, region, values, parsed, sections, problems)
        if ask is not None:
            problems.extend(placement_check(ask))
    if "jobs" in values:
        parsed["jobs"] = parse_job_section(values["jobs"], values.get("gpuNodeGroups"), groups, sections, problems)
    if problems:
        raise ConfigError(problems)
    parsed["gpu_node_groups"] = [g for g in groups if g is not None]
    return StackConfig(project=project, stack=stack, region=region, **parsed)


def _field(key: str) -> Any:
    return StackConfig.model_fields[SECTIONS[key]]


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
                problems.append(
                    Problem(full_key, f"unknown key{non_ascii_note(key)}" + unknown_key_advice(key, SECTIONS))
                )
                continue
            if value == "" and _field(key).annotation is not str:
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
    """Each section given, by its StackConfig field's type (the job section is parsed last, against
    the others, by job_entries): ``{field name: value}``, without the sections that did not parse."""
    parsed: dict[str, Any] = {}
    for key, name in SECTIONS.items():
        if key not in values:
            continue
        field = _field(key)
        item = get_args(field.annotation)[0] if get_origin(field.annotation) is list else None
        if item is not None and not issubclass(item, ConfigModel):
            continue  # the jobs: each entry is parsed by its kind's model
        section = _parse_section(field, item, values[key], f"{NAMESPACE}:{key}", problems)
        if section is not None:
            parsed[name] = section
    return parsed


def _parse_section(field: Any, item: Any, raw: Any, key: str, problems: list[Problem]) -> Any:
    """One section by its field's type: text, a map of strings, a list of models or a model; None
    after appending its problems."""
    if field.annotation is str:
        if isinstance(raw, str):
            return raw
        problems.append(Problem(key, f"{_fmt(raw)} is not allowed: expected a string"))
    elif get_origin(field.annotation) is dict:
        if not isinstance(raw, dict):
            problems.append(Problem(key, f"{_fmt(raw)} is not allowed: expected a map of strings"))
        elif bad := [k for k, v in raw.items() if not isinstance(k, str) or not isinstance(v, str)]:
            for k in bad:
                hint = yaml_hint(raw[k]) or yaml_hint(k)
                problems.append(Problem(f"{key}.{k}", f"{_fmt(raw[k])} is not allowed: expected a string{hint}"))
        else:
            return raw
    elif item is not None:
        if isinstance(raw, list):
            keys = entry_keys(key, entry_names(raw))
            return [_parse(item, k, entry, problems) for k, entry in zip(keys, raw, strict=True)]
        problems.append(Problem(key, f"{_fmt(raw)} is not allowed: expected a list of {field.title}"))
    else:
        return _parse(field.annotation, key, {} if raw is None else raw, problems)
    return None


def _checked_sections(
    values: dict[str, Any], parsed: dict[str, Any], region: str, cluster_name: str, problems: list[Problem]
) -> cross_checks.Sections:
    """Run the cross-field checks on every section that parsed (a section given but invalid is
    None and skipped, one left out its default), so one typo does not hide other problems."""
    known: dict[str, Any] = {name: _known(name, key in values, parsed) for key, name in SECTIONS.items()}
    sections = cross_checks.Sections(**{f.name: known[f.name] for f in dataclasses.fields(cross_checks.Sections)})
    cross_checks.check_all(known["gpu_availability_zone"] or "auto", region, cluster_name, sections, problems)
    if "tags" in parsed:
        cross_checks.check_tags(parsed["tags"], problems)
    return sections


def _known(name: str, given: bool, parsed: dict[str, Any]) -> Any:
    """What the checks know of section ``name``: what parsed; None where it was given but did not
    parse, except a list that was no list: no entries (its entries that did not parse are None);
    else its default."""
    if name in parsed:
        return parsed[name]
    default = StackConfig.model_fields[name].get_default(call_default_factory=True)
    return None if given and not isinstance(default, list) else default


def _placement_ask(
    project: str,
    stack: str,
    region: str,
    values: dict[str, Any],
    parsed: dict[str, Any],
    sections: cross_checks.Sections,
    problems: list[Problem],
) -> PlacementAsk | None:
    """What the GPU AZ check is asked, or None where it depends on a value refused already."""
    az_key = f"{NAMESPACE}:gpuAvailabilityZone"
    if any(p.key in ("aws:region", az_key) for p in problems):
        return None
    groups = [g for g in sections.gpu_node_groups if g is not None and gpu_type(g)]
    return PlacementAsk(
        project=project,
        stack=stack,
        region=region,
        requested=parsed.get("gpu_availability_zone", "auto"),
        gpu_types=sorted({g.instance_type for g in groups}),
        availability_zone_count=sections.network.availability_zone_count if sections.network is not None else None,
        tags=parsed.get("tags", None if "tags" in values else {}),
    )
