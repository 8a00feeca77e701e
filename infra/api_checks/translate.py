"""Pulumi inputs -> the API requests that carry them (infra/api_checks/aws_model.py checks them).

The mechanical mapping and the overrides are described in ``aws_table``. A request is built of
``shapes`` nodes that remember the Pulumi field of each part; ``Coverage`` counts, per type, the
inputs (the leaves of the Pulumi inputs: scalars, a map's entries), mapped (onto an API member),
checked (mapped and known at plan time: not computed at `pulumi up`), provider-only (inputs no API
member takes: ``Api.provider_only``) and unmapped (the rest: a gap of the table).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import infra.api_checks.shapes as shapes
from infra.api_checks.aws_table import Api
from infra.api_checks.shapes import UNKNOWN, Entries, Given, Items, Struct

_INDEX = re.compile(r"\[[^\]]*\]")
_UNKNOWN_TEXT = ("[unknown]", "[secret]")
# An empty map or list: the provider does not send it (Terraform's ResourceData.GetOk reports an empty
# collection as not set, and the expand functions skip it), so the API's minimum items do not apply.
_NOT_SENT = object()


@dataclass
class Coverage:
    resources: int = 0
    inputs: int = 0
    mapped: int = 0
    checked: int = 0
    provider_only: int = 0
    unmapped: list[str] = field(default_factory=list)

    def share(self) -> float:
        return self.mapped / self.inputs if self.inputs else 1.0

    def as_json(self) -> dict[str, Any]:
        return {
            "resources": self.resources,
            "inputs": self.inputs,
            "mapped": self.mapped,
            "checked": self.checked,
            "providerOnly": self.provider_only,
            "mappedShare": round(self.share(), 4),
            "unmapped": sorted(set(self.unmapped)),
        }


# ---------------------------------------------------------------------------------------------
# Translation: Pulumi inputs -> API requests
# ---------------------------------------------------------------------------------------------


class _Requests:
    """The requests of one resource, per (operation, item), and its coverage."""

    def __init__(self, api: Api, inputs: dict[str, Any], coverage: Coverage) -> None:
        self.api, self.inputs, self.coverage = api, inputs, coverage
        self.calls: list[tuple[str, Struct, bool]] = [(op, Struct(""), i == 0) for i, op in enumerate(api.operations)]


def translate(api: Api, inputs: dict[str, Any], coverage: Coverage) -> list[tuple[str, Struct, bool]]:
    """Each call's request (operation, request, whether the create call), counting coverage."""
    reqs = _Requests(api, inputs, coverage)
    for key, value in inputs.items():
        if key in api.provider_only:
            coverage.provider_only += _leaves(value)
            coverage.inputs += _leaves(value)
            continue
        target = _target(api, key, inputs)
        if isinstance(target, str) and target.startswith("@"):
            _per_item(reqs, target[1:], key, value)
            continue
        placed = _place_top(reqs, key, value, target)
        if not placed:
            _unmapped(coverage, key, value)
    return [call for call in reqs.calls if call[1] or call[2]]


def _target(api: Api, path: str, inputs: dict[str, Any]) -> str | None:
    """The API path of a Pulumi input path (an override, else None: the mechanical mapping)."""
    plain = _INDEX.sub("", path)
    target = api.fields.get(plain)
    if isinstance(target, str) or target is None:
        return target
    return next((t for given, t in target.items() if given in inputs), None)


def _place_top(reqs: _Requests, key: str, value: Any, target: str | None) -> bool:
    op_named, _, path = (target or "").rpartition(":") if target and ":" in target else ("", "", target)
    for op, req, _ in reqs.calls:
        if op_named and op != op_named:
            continue
        name = shapes.input_shape(reqs.api.service, op)
        chosen = path if path is not None else _mechanical_top(reqs.api.service, name, key)
        if chosen is None:
            continue
        if _place(reqs, req, name, chosen.split(".") if chosen else [], value, key):
            return True
    return False


def _mechanical_top(service: str, structure: str, key: str) -> str | None:
    found = shapes.members(service, structure)
    if key.lower() in found:
        return found[key.lower()]
    if key == "tags" and "tagspecifications" in found:
        return "TagSpecifications.Tags"
    return None


def _per_item(reqs: _Requests, operation: str, key: str, value: Any) -> None:
    """Each item of a Pulumi list as one call of ``operation`` (a route table's routes)."""
    name = shapes.input_shape(reqs.api.service, operation)
    reqs.calls = [c for c in reqs.calls if c[0] != operation or c[1]]
    for i, item in enumerate(value if isinstance(value, list) else [value]):
        req = Struct("")
        for sub, sub_value in (item or {}).items():
            where = f"{key}[{i}].{sub}"
            target = _target(reqs.api, where, item)
            chosen = target if target is not None else shapes.members(reqs.api.service, name).get(sub.lower())
            if chosen is None or not _place(reqs, req, name, chosen.split("."), sub_value, where):
                _unmapped(reqs.coverage, where, sub_value)
        reqs.calls.append((operation, req, False))


def _place(reqs: _Requests, node: Struct, structure: str, path: list[str], value: Any, where: str) -> bool:
    """Put ``value`` at ``path`` (API member names, case-insensitive) under ``node``, a ``structure``;
    False (and nothing counted) when it does not fit there."""
    c = reqs.coverage
    counted = (c.inputs, c.mapped, c.checked)
    placed = _place_at(reqs, node, structure, path, value, where)
    if not placed:
        c.inputs, c.mapped, c.checked = counted
    return placed


def _place_at(reqs: _Requests, node: Struct, structure: str, path: list[str], value: Any, where: str) -> bool:
    service = reqs.api.service
    if not path:
        return _fill(reqs, node, structure, value, where)
    member = shapes.members(service, structure).get(path[0].lower())
    if member is None:
        return False
    ref = shapes.shape(service, structure)["members"][member]
    kind = shapes.shape(service, ref["shape"])["type"]
    if len(path) == 1:
        converted = _convert(reqs, ref["shape"], value, where)
        if converted is None:
            return False
        if converted is _NOT_SENT:
            return True
        existing = node.get(member)
        if isinstance(existing, Items) and isinstance(converted, Items):
            _merge(existing, converted)
        elif isinstance(existing, Struct) and isinstance(converted, Struct):
            existing.update(converted)
        else:
            node[member] = converted
        return True
    if kind not in ("list", "structure"):
        return False
    created = member not in node
    if kind == "list":
        inner = shapes.shape(service, ref["shape"])["member"]["shape"]
        items = node.setdefault(member, Items(where, [Struct(where)]))
        placed = _place_at(reqs, items[0], inner, path[1:], value, where)
    else:
        placed = _place_at(reqs, node.setdefault(member, Struct(where)), ref["shape"], path[1:], value, where)
    if not placed and created:
        del node[member]  # (no empty structure left behind for the walk to find required members missing in)
    return placed


def _merge(existing: Items, more: Items) -> None:
    """Two inputs into one list: one item each, both structures, are one item (an Auto Scaling tag and
    its group); else the items of both (a cluster's public and private subnets)."""
    if len(existing) == len(more) == 1 and isinstance(existing[0], Struct) and isinstance(more[0], Struct):
        existing[0].update(more[0])
    else:
        existing.extend(more)


def _fill(reqs: _Requests, node: Struct, structure: str, value: Any, where: str) -> bool:
    """A Pulumi object as the members of ``node`` (the request itself: a provider that sends it as given)."""
    if not isinstance(value, dict):
        return False
    converted = _convert(reqs, structure, value, where)
    if isinstance(converted, Struct):
        node.update(converted)
    return converted is _NOT_SENT or isinstance(converted, Struct)


def _convert(reqs: _Requests, name: str, value: Any, where: str) -> Any:
    """A Pulumi value as the API value of shape ``name``; None when it does not fit (unmapped)."""
    coverage, service = reqs.coverage, reqs.api.service
    if _is_unknown(value) or _is_empty(value):
        coverage.inputs += 1
        coverage.mapped += 1
        return UNKNOWN if _is_unknown(value) else _NOT_SENT
    spec = shapes.shape(service, name)
    kind = spec["type"]
    if kind == "structure":
        return _structure(reqs, name, value, where) if isinstance(value, dict) else None
    if kind == "list":
        return _list(reqs, spec["member"]["shape"], value, where)
    if kind == "map":
        return _map(reqs, spec["value"]["shape"], value, where) if isinstance(value, dict) else None
    scalar = _scalar(kind, value)
    if scalar is None:
        return None
    coverage.inputs += 1
    coverage.mapped += 1
    plain = _INDEX.sub("", where)
    if plain in reqs.api.not_sent and reqs.api.not_sent[plain] == value:
        return _NOT_SENT
    coverage.checked += 1
    suffix = reqs.api.suffix.get(plain, 0)
    if suffix and isinstance(scalar, str):
        return Given(scalar + "0" * suffix, f"{where} (+ {suffix} characters the provider appends)")
    return Given(scalar, where)


def _structure(reqs: _Requests, name: str, value: dict[str, Any], where: str) -> Struct:
    out = Struct(where)
    for key, sub in value.items():
        sub_where = f"{where}.{key}" if where else key
        target = _target(reqs.api, sub_where, value)
        path = target.split(".") if target is not None else [key]
        if not _place(reqs, out, name, path, sub, sub_where):
            _unmapped(reqs.coverage, sub_where, sub)
    return out


def _list(reqs: _Requests, item: str, value: Any, where: str) -> Items | None:
    item_spec = shapes.shape(reqs.api.service, item)
    if isinstance(value, dict) and _is_tag(item_spec) and not _is_one_item(item_spec, value):
        key, val = _tag_members(item_spec)
        out = Items(where)
        for k, v in value.items():
            entry = Struct(f"{where}[{k!r}]")
            entry[key] = Given(k, f"{where}[{k!r}] (key)")
            entry[val] = UNKNOWN if _is_unknown(v) else Given(v, f"{where}[{k!r}]")
            reqs.coverage.inputs += 1
            reqs.coverage.mapped += 1
            reqs.coverage.checked += not _is_unknown(v)
            out.append(entry)
        return out
    values = value if isinstance(value, list) else [value]
    converted = [_convert(reqs, item, v, f"{where}[{i}]") for i, v in enumerate(values)]
    if any(c is None for c in converted):
        return None
    return Items(where, [c for c in converted if c is not _NOT_SENT])


def _map(reqs: _Requests, value_shape: str, value: dict[str, Any], where: str) -> Entries | None:
    out = Entries(where)
    for k, v in value.items():
        converted = _convert(reqs, value_shape, v, f"{where}[{k!r}]")
        if converted is None:
            return None
        if converted is not _NOT_SENT:
            out[k] = converted
    return out


def _scalar(kind: str, value: Any) -> Any:
    """A Pulumi scalar as the API's ``kind``; None when it is not one (a mapping gap, not a user error:
    the provider's own conversions are followed, e.g. Terraform's "true" strings for booleans)."""
    if isinstance(value, (dict, list)) or value is None:
        return None
    if kind == "boolean":
        return value if isinstance(value, bool) else {"true": True, "false": False}.get(str(value))
    if kind in ("integer", "long", "float", "double") and isinstance(value, str):
        try:
            return int(value) if kind in ("integer", "long") else float(value)
        except ValueError:
            return value  # left to the walk, which refuses it as not a number
    if kind == "string" and not isinstance(value, str):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


_TAG_KEY, _TAG_VALUE = ("key", "tagkey"), ("value", "tagvalue")  # Tag {Key, Value}; KMS's Tag {TagKey, TagValue}
# CloudWatch's Dimension {Name, Value}: the provider sends a dimensions map as such items, like tags.
_DIMENSION = ("name", "value")


def _is_tag(spec: dict[str, Any]) -> bool:
    names = {m.lower() for m in spec.get("members", {})}
    if spec["type"] == "structure" and names == set(_DIMENSION):
        return True
    return spec["type"] == "structure" and bool(names & set(_TAG_KEY)) and bool(names & set(_TAG_VALUE))


def _is_one_item(spec: dict[str, Any], value: dict[str, Any]) -> bool:
    """Whether a Pulumi object is one item of a list of tags (its keys are the item's members: an Auto
    Scaling group's tag) rather than a map of tags."""
    names = {m.lower() for m in spec["members"]}
    return all(k.lower() in names for k in value)


def _tag_members(spec: dict[str, Any]) -> tuple[str, str]:
    by_lower = {m.lower(): m for m in spec["members"]}
    return next(by_lower[k] for k in (*_TAG_KEY, "name") if k in by_lower), next(
        by_lower[v] for v in _TAG_VALUE if v in by_lower
    )


def _is_empty(value: Any) -> bool:
    return isinstance(value, (dict, list)) and not value


def _is_unknown(value: Any) -> bool:
    return isinstance(value, str) and (value in _UNKNOWN_TEXT or value.startswith("resource:"))


def _leaves(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_leaves(v) for v in value.values()) or 1
    if isinstance(value, list):
        return sum(_leaves(v) for v in value) or 1
    return 1


def _unmapped(coverage: Coverage, where: str, value: Any) -> None:
    coverage.inputs += _leaves(value)
    coverage.unmapped.append(_INDEX.sub("", where))
