"""The text of the offline plan's files, written by the standard emitters.

- JSON (resources.json, outputs.json, cost.json): ``json.dumps`` indented by two spaces, text as it
  is (no ``\\u`` escapes), and a final line break.
- YAML (manifests.yaml, releases.yaml): the Kubernetes objects as one multi-document text, each
  document started with ``---``, by PyYAML's safe dumper over LibYAML (``CSafeDumper``; the
  pure-Python ``SafeDumper`` where PyYAML was built without LibYAML): keys in the objects' own
  order, block style, multi-line text as a literal block (``|``) where YAML allows one.

The same objects give the same bytes: both emitters are deterministic and keys keep their order.
Two shortcuts, each giving what the dumper gives: a document of plain values is turned into YAML's
nodes directly (``_yaml_node``), and a document written before in this process is taken from memory
(``_document``: the same CRDs are in most plans).
"""

from __future__ import annotations

import hashlib
import json
import pickle
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


class _NotPlainYaml(Exception):
    """A document ``_yaml_node`` leaves to the dumper's own representer."""


_MAP, _SEQ = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"
_INT, _BOOL, _NULL = "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"


def _yaml_node(value: Any, seen: set[int]) -> yaml.Node:
    """The node PlanDumper's representer makes of ``value``, made directly (PyYAML 6.0.3
    lib/yaml/representer.py, ``SafeRepresenter``: ``represent_str`` as ``_str_presenter``, ``represent_dict``
    in the dict's order with ``default_flow_style=False``, ``represent_list``, ``represent_int``,
    ``represent_bool``, ``represent_none``). Its ``represent_data`` goes through alias bookkeeping and a
    type lookup for every value, most of a document's dump. A dict or list met twice (which the
    representer writes as an anchor and alias) or any other type is left to the representer."""
    kind = type(value)
    if kind is str:
        return yaml.ScalarNode(_STR, value, style="|" if "\n" in value else None)
    if kind is dict or kind is list:
        if id(value) in seen:
            raise _NotPlainYaml
        seen.add(id(value))
        if kind is dict:
            pairs = [(_yaml_node(k, seen), _yaml_node(v, seen)) for k, v in value.items()]
            return yaml.MappingNode(_MAP, pairs, flow_style=False)
        return yaml.SequenceNode(_SEQ, [_yaml_node(v, seen) for v in value], flow_style=False)
    if kind is bool:
        return yaml.ScalarNode(_BOOL, "true" if value else "false")
    if kind is int:
        return yaml.ScalarNode(_INT, str(value))
    if value is None:
        return yaml.ScalarNode(_NULL, "null")
    raise _NotPlainYaml


class _FastPlanDumper(PlanDumper):
    """PlanDumper whose documents of dicts, lists, text, booleans, integers and None are represented by
    ``_yaml_node``; the rest by the representer as before (the same nodes, so the same bytes)."""

    def represent(self, data: Any) -> None:
        try:
            node = _yaml_node(data, set())
        except (_NotPlainYaml, RecursionError):
            super().represent(data)
            return
        self.serialize(node)


def _dump(objects: list[Any]) -> str:
    options: dict[str, Any] = {"sort_keys": False, "default_flow_style": False, "explicit_start": True}
    return yaml.dump_all(objects, Dumper=_FastPlanDumper, **options)


# The text of documents written before in this process (the same CRDs are in most plans: four fifths of a
# plan's YAML), by a digest of their pickle: equal pickles are equal values of the same types, sharing
# the same objects (which YAML writes as anchors), so they dump alike. The oldest go first past the
# bound (characters of text kept: a plan's YAML is 2-3 million).
_written: dict[bytes, str] = {}
_written_chars = [0]  # the characters of _written's texts
WRITTEN_KEPT = 16_000_000
# What ends a stream whose last document ends open (a block scalar kept with its final empty lines,
# ``|+``): LibYAML's emitter (yaml_emitter_emit_stream_end, open_ended) and PyYAML's write it at the
# end of the stream only, never between documents.
_OPEN_END = "\n...\n"


def _document(obj: Any) -> str:
    """``obj`` alone as a YAML stream, from memory if it was written before."""
    try:
        key = hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()
    except Exception:  # noqa: BLE001 - not picklable (or too deep): dumped as it is, not kept
        return _dump([obj])
    text = _written.get(key)
    if text is None:
        text = _written[key] = _dump([obj])
        _written_chars[0] += len(text)
        while _written_chars[0] > WRITTEN_KEPT:
            _written_chars[0] -= len(_written.pop(next(iter(_written))))
    return text


def manifests_yaml(objects: list[Any]) -> str:
    """The Kubernetes objects as one multi-document YAML text ("" for none): what ``yaml.dump_all`` writes
    of them, made of each document's own text (``_document``), the open end of a document written only
    after the last."""
    parts = [_document(obj) for obj in objects]
    for i in range(len(parts) - 1):
        if parts[i].endswith(_OPEN_END):
            parts[i] = parts[i][: -len(_OPEN_END) + 1]
    return "".join(parts)
