"""pydantic's validation errors as config ``Problem``s: each names the full config key, the bad
value and what is allowed (for an unknown key, the keys the model accepts there)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from facts.problems import Problem
from facts.problems import fmt as _fmt

T = TypeVar("T", bound=BaseModel)


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


def pydantic_problems(prefix: str, err: ValidationError, model: type = BaseModel) -> list[Problem]:
    out = []
    for e in err.errors(include_url=False):
        loc = prefix
        for part in e["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else f".{part}"
        kind = e["type"]
        if kind == "extra_forbidden":
            key = e["loc"][-1]
            allowed = _allowed_keys(model, e["loc"][:-1])
            msg = f"unknown key {_fmt(key)}" + (f"; allowed keys are: {', '.join(allowed)}" if allowed else "")
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
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        problems.extend(pydantic_problems(prefix, err, model))
        return None
