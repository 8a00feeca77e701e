"""The text of the offline plan's files, written by the standard emitters.

- JSON (resources.json, outputs.json, cost.json): ``json.dumps`` indented by two spaces, text as it
  is (no ``\\u`` escapes), and a final line break.
- YAML (manifests.yaml, releases.yaml): the Kubernetes objects as one multi-document text, each
  document started with ``---``, by PyYAML's safe dumper over LibYAML (``CSafeDumper``; the
  pure-Python ``SafeDumper`` where PyYAML was built without LibYAML): keys in the objects' own
  order, block style, multi-line text as a literal block (``|``) where YAML allows one.

The same objects give the same bytes: both emitters are deterministic and keys keep their order.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

_STR = "tag:yaml.org,2002:str"


def json_text(value: Any) -> str:
    """``value`` as the plan's JSON files hold it: ``json.dumps(value, indent=2, ensure_ascii=False)``
    and a line break, byte for byte. With an indent, ``json.dumps`` takes the pure-Python encoder (the C
    one has none: CPython 3.11 Lib/json/encoder.py, ``JSONEncoder.iterencode``), a chain of generators
    that was half of the plan command's CPU; ``_layout`` lays the same text out directly. What it does
    not know (a key that is not a string, another type, a cycle) goes to ``json.dumps`` as before."""
    parts: list[str] = []
    try:
        _layout(value, "\n", parts)
    except (_NotPlain, RecursionError):
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    parts.append("\n")
    return "".join(parts)


class _NotPlain(Exception):
    """A value ``_layout`` leaves to ``json.dumps``."""


_encode_str = json.encoder.encode_basestring  # ensure_ascii=False (the C function where CPython has it)


def _float(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _layout(value: Any, newline: str, parts: list[str]) -> None:
    """``value`` at the indent of ``newline`` (a line break and the spaces of the current level), in the
    order json's encoder tests types (Lib/json/encoder.py, ``_make_iterencode``)."""
    if isinstance(value, str):
        parts.append(_encode_str(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, int):
        parts.append(int.__repr__(value))
    elif isinstance(value, float):
        parts.append(_float(value))
    elif isinstance(value, (list, tuple)):
        _layout_list(value, newline, parts)
    elif isinstance(value, dict):
        _layout_dict(value, newline, parts)
    else:
        raise _NotPlain


def _layout_list(value: list[Any] | tuple[Any, ...], newline: str, parts: list[str]) -> None:
    if not value:
        parts.append("[]")
        return
    inner = newline + "  "
    parts.append("[" + inner)
    for i, item in enumerate(value):
        if i:
            parts.append("," + inner)
        _layout(item, inner, parts)
    parts.append(newline + "]")


def _layout_dict(value: dict[Any, Any], newline: str, parts: list[str]) -> None:
    if not value:
        parts.append("{}")
        return
    inner = newline + "  "
    parts.append("{" + inner)
    first = True
    for key, item in value.items():
        if not isinstance(key, str):
            raise _NotPlain
        parts.append(("" if first else "," + inner) + _encode_str(key) + ": ")
        first = False
        _layout(item, inner, parts)
    parts.append(newline + "}")


if getattr(yaml, "__with_libyaml__", False):

    class PlanDumper(yaml.CSafeDumper):
        """The safe dumper the YAML files are written with (LibYAML's emitter)."""

else:  # PyYAML built without LibYAML

    class PlanDumper(yaml.SafeDumper):  # type: ignore[no-redef]
        """The safe dumper the YAML files are written with (the pure-Python emitter)."""


def _str_presenter(dumper: yaml.representer.SafeRepresenter, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(_STR, data, style="|" if "\n" in data else None)


PlanDumper.add_representer(str, _str_presenter)


def manifests_yaml(objects: list[Any]) -> str:
    """The Kubernetes objects as one multi-document YAML text ("" for none)."""
    return yaml.dump_all(objects, Dumper=PlanDumper, sort_keys=False, default_flow_style=False, explicit_start=True)
