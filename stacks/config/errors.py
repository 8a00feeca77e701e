"""pydantic's validation errors as config ``Problem``s: each names the full config key, the bad
value and what is allowed (for an unknown key, the nearest key the model accepts there, or all of
them when none is close)."""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from facts.problems import NAMED_LISTS, Problem, entry_keys, entry_names
from facts.problems import fmt as _fmt

T = TypeVar("T", bound=BaseModel)

# How alike an unknown key and an allowed one must be (difflib's ratio, ignoring case) to suggest
# it: `maxSzie` -> maxSize is 0.86, `nodeGrup` -> nodeGroup 0.94; unrelated keys stay below 0.5.
CLOSE_KEY = 0.8


def unknown_key_advice(key: Any, allowed: Iterable[str]) -> str:
    """What follows "unknown key" in a message: the nearest allowed key when one is close
    (``; did you mean 'maxSize'?``), else every allowed key (nothing when none are known)."""
    allowed = sorted(allowed)
    by_lower = {a.lower(): a for a in allowed}
    close = difflib.get_close_matches(key.lower(), by_lower, n=1, cutoff=CLOSE_KEY) if isinstance(key, str) else []
    if close:
        return f"; did you mean {_fmt(by_lower[close[0]])}?"
    return f"; allowed keys are: {', '.join(allowed)}" if allowed else ""


def _allowed_keys(model: type, loc: tuple) -> list[str]:
    """The config keys a model accepts at ``loc`` (a pydantic error location inside ``model``)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = next((f for n, f in current.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return []
        current = model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(f.alias or n for n, f in current.model_fields.items())
    return []


def model_in(annotation: Any) -> Any:
    """The BaseModel inside Optional[...] / list[...] annotations, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = model_in(arg)
        if found is not None:
            return found
    return None


def _loc_key(prefix: str, loc: tuple[Any, ...], raw: Any) -> str:
    """The key of pydantic's ``loc`` in ``raw`` under ``prefix``: an entry of a named list (NAMED_LISTS,
    ``teams``) by its name, other list items by position."""
    key, node, parent = prefix, raw, None
    for part in loc:
        if isinstance(part, int):
            named = parent in NAMED_LISTS and isinstance(node, list) and 0 <= part < len(node)
            key = entry_keys(key, entry_names(node))[part] if named else f"{key}[{part}]"
        else:
            key += f".{part}"
        parent = part
        node = _child(node, part)
    return key


def _child(node: Any, part: Any) -> Any:
    """``node[part]`` where there is one, else None."""
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return None


def pydantic_problems(prefix: str, err: ValidationError, model: type = BaseModel, raw: Any = None) -> list[Problem]:
    out = []
    for e in err.errors(include_url=False):
        loc = _loc_key(prefix, e["loc"], raw)
        kind = e["type"]
        if kind == "extra_forbidden":
            key = e["loc"][-1]
            msg = f"unknown key {_fmt(key)}" + unknown_key_advice(key, _allowed_keys(model, e["loc"][:-1]))
        elif kind == "missing":
            msg = "is required"
        else:
            msg = f"{_fmt(e.get('input'))} is not allowed: {e['msg']}" + yaml_hint(e.get("input"), kind)
        out.append(Problem(loc, msg))
    return out


def yaml_hint(value: Any, kind: str = "string_type") -> str:
    """A hint for a YAML surprise where text was meant: an unquoted true/false is a boolean, an
    unquoted number a number (Pulumi reads stack files as YAML 1.2: yes/no/on/off stay text).

    The hint does not repeat the value as text to write: YAML may have read it from another
    spelling (``0755`` is 493, ``1e3`` 1000), and only the user knows what they meant."""
    if kind != "string_type":
        return ""
    if isinstance(value, bool):
        return " (YAML reads an unquoted true or false as a boolean: put the value in quotes)"
    if isinstance(value, (int, float)):
        return " (YAML reads an unquoted number, also one like 0755 or 1e3, as a number: put the value in quotes)"
    return ""


def parse(model: type[T], prefix: str, raw: Any, problems: list[Problem]) -> T | None:
    """``raw`` as a ``model``, or None after appending its problems.

    An unknown key does not stop the checks: the value is parsed again without its unknown keys
    (they mean nothing to the model), and what parses then is returned, so that the checks that
    read the typed value (cross-field rules, a job's checks, the checks against the rest of the
    stack) still report the value's other problems in the same run; the caller knows from
    ``problems`` that the config is refused. A value with a problem of another kind (a wrong type,
    a missing key) is not returned: the checks after the model read its fields, and a value read
    in place of the one written would make them report what is not wrong."""
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        reported = pydantic_problems(prefix, err, model, raw)
        problems.extend(reported)
        stripped = _without_unknown_keys(raw, err)
    if stripped is None:
        return None
    try:
        return model.model_validate(stripped)
    except ValidationError as err:
        # Only rules of the whole model (its "after" validators) can fail now and not before.
        seen = {str(p) for p in reported}
        problems.extend(p for p in pydantic_problems(prefix, err, model, stripped) if str(p) not in seen)
        return None


def _without_unknown_keys(raw: Any, err: ValidationError) -> Any:
    """A copy of ``raw`` without the keys ``err`` calls unknown, or None when parsing it again
    would not give a model: ``err`` has no unknown key, or problems of other kinds too."""
    errors = err.errors(include_url=False)
    if not errors or any(e["type"] != "extra_forbidden" for e in errors):
        return None
    stripped = copy.deepcopy(raw)
    for e in errors:
        *path, key = e["loc"]
        parent = stripped
        for part in path:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                return None  # a location through a union's tag: not a place in the value
        if not isinstance(parent, dict):
            return None
        parent.pop(key, None)  # (gone already where YAML aliases share the map)
    return stripped
