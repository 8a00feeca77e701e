"""botocore's service models, and a walk of a request against an operation's input shape.

botocore's own validator (botocore/validate.py, ParamValidator) checks types, required members and
``min`` only: neither ``max``, ``pattern`` nor ``enum``. This walk checks what the models say
(Smithy's constraint traits as botocore's JSON models carry them: smithy-lang/smithy
docs/source-2.0/spec/constraint-traits.rst):
- string: length (``min``/``max``, in Unicode code points, as Smithy's length trait counts), ``pattern``
  (``java_regex``), ``enum``;
- integer, long, float, double: ``min``/``max`` (Smithy's range trait), and whole numbers for integers;
- list and map: number of items (``min``/``max``), then each item (a map's keys against its key shape);
- structure: its ``required`` members, then each member given.
Two limits the models state only in their documentation, in fixed wording, are read from it too
(``documented``): "Possible values are: 1, 3, ... and N" on an integer shape (CloudWatch Logs' Days:
PutRetentionPolicy's retentionInDays) and, on an EC2 member, "Up to N characters in length" with
"Valid/Allowed characters ... a-z, A-Z, 0-9, spaces, and <chars>" (security-group names and descriptions,
rule descriptions).

A request is built of ``Node``s (``Given``, ``Struct``, ``Items``, ``Entries``) that carry the Pulumi
field each part came from, so that a finding names the field the user wrote; ``UNKNOWN`` parts
(computed at `pulumi up`) are skipped.
"""

from __future__ import annotations

import html
import importlib.metadata
import pickle
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from infra import plan_cache
from infra.api_checks.java_regex import compile_pattern

BOTOCORE_VERSION: str = importlib.metadata.version("botocore")
# The operations each service is read for (set by the checks: ``need``); a service not named is read whole.
_NEEDED: dict[str, tuple[str, ...]] = {}
_POSSIBLE = re.compile(r"Possible values are:\s*((?:\d+,\s*)+and\s+\d+)")
_UP_TO = re.compile(r"Up to (\d+) characters")
_CHARS = re.compile(r"(?:Valid characters:|Allowed characters are) a-z, A-Z, 0-9, spaces, and (\S+?)</p>")


def need(operations: Mapping[str, tuple[str, ...]]) -> None:
    """The operations the checks walk, per service: only their input shapes are kept (``model``)."""
    _NEEDED.update(operations)


@cache
def model(service: str) -> dict[str, Any]:
    """A service's model (service-2) as botocore ships it, read once per process: its operations and
    the shapes their inputs reach. A plan keeps that part in the plan cache (infra/plan_cache.py,
    .cache/aws-models/, keyed by botocore's version and the operations), so that a later plan reads
    a few hundred shapes instead of importing botocore and parsing the models whole (EC2's is 4,000)."""
    operations = _NEEDED.get(service)
    where = plan_cache.folder("aws-models") if operations else None
    entry = plan_cache.key({"botocore": BOTOCORE_VERSION, "service": service, "operations": operations, "format": 1})
    kept = plan_cache.unpickled(plan_cache.load(where, entry)) if where is not None else None
    if isinstance(kept, dict):
        return kept
    import botocore.loaders  # (only when the cache does not have it: importing botocore takes 0.1-0.3 s)

    whole = dict(botocore.loaders.Loader().load_service_model(service, "service-2"))
    if not operations:
        return whole
    part = _reachable(whole, operations)
    if where is not None:
        plan_cache.store(where, entry, pickle.dumps(part))
    return part


def _reachable(whole: dict[str, Any], operations: tuple[str, ...]) -> dict[str, Any]:
    """The operations and the shapes their inputs reach (members, list items, map keys and values)."""
    shapes, todo = {}, [whole["operations"][op]["input"]["shape"] for op in operations]
    while todo:
        name = todo.pop()
        if name in shapes:
            continue
        spec = shapes[name] = whole["shapes"][name]
        refs = list(spec.get("members", {}).values()) + [spec[k] for k in ("member", "key", "value") if k in spec]
        todo += [ref["shape"] for ref in refs]
    return {"operations": {op: whole["operations"][op] for op in operations}, "shapes": shapes}


def input_shape(service: str, operation: str) -> str:
    return str(model(service)["operations"][operation]["input"]["shape"])


def shape(service: str, name: str) -> dict[str, Any]:
    return dict(model(service)["shapes"][name])


@cache
def members(service: str, structure: str) -> dict[str, str]:
    """A structure's members by lower-cased name -> their name in the model."""
    return {name.lower(): name for name in shape(service, structure).get("members", {})}


# ---------------------------------------------------------------------------------------------
# The request: nodes that remember the Pulumi field they came from
# ---------------------------------------------------------------------------------------------


class Node:
    field: str


@dataclass
class Given(Node):
    value: Any
    field: str


class Struct(dict[str, Any], Node):
    def __init__(self, field: str) -> None:
        super().__init__()
        self.field = field


class Items(list[Any], Node):
    def __init__(self, field: str, items: list[Any] | None = None) -> None:
        super().__init__(items or [])
        self.field = field


class Entries(dict[str, Any], Node):
    def __init__(self, field: str) -> None:
        super().__init__()
        self.field = field


# Shapes whose pattern a value met but Python could not compile (java_regex): not checked, and said so.
UNCOMPILED: dict[str, str] = {}
UNKNOWN = object()  # a value computed at `pulumi up` (the plan shows "[unknown]", "[secret]", a resource)


@dataclass(frozen=True)
class Finding:
    field: str
    value: Any
    rule: str
    shape: str


# ---------------------------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------------------------


def walk(
    service: str, name: str, node: Any, doc: str = "", top_optional: frozenset[str] = frozenset()
) -> list[Finding]:
    """Every rule of shape ``name`` that ``node`` breaks (``doc``: the member's documentation;
    ``top_optional``: required members of this structure that the provider fills itself)."""
    if node is UNKNOWN:
        return []
    spec = shape(service, name)
    kind = spec["type"]
    if kind == "structure":
        return _structure(service, name, spec, node, top_optional)
    if kind == "list":
        return _count(name, spec, node) + [
            f for item in node for f in walk(service, spec["member"]["shape"], item, _doc(spec["member"]))
        ]
    if kind == "map":
        return _count(name, spec, node) + [
            f
            for key, value in node.items()
            for f in walk(service, spec["key"]["shape"], Given(key, f"{node.field}[{key!r}] (key)"))
            + walk(service, spec["value"]["shape"], value)
        ]
    if not isinstance(node, Given) or node.value is UNKNOWN:
        return []
    if kind == "string":
        return _string(service, name, spec, node, doc)
    if kind in ("integer", "long", "float", "double"):
        return _number(name, spec, node, kind)
    return []  # boolean, timestamp, blob: no constraint the plan's values meet here


def _doc(ref: dict[str, Any]) -> str:
    return str(ref.get("documentation", ""))


def _structure(service: str, name: str, spec: dict[str, Any], node: Struct, optional: frozenset[str]) -> list[Finding]:
    found = [
        Finding(node.field or "(inputs)", None, f"required member {member!r} is missing", name)
        for member in spec.get("required", [])
        if member not in node and member not in optional
    ]
    for member, value in node.items():
        ref = spec["members"][member]
        found += walk(service, ref["shape"], value, _doc(ref))
    return found


def _count(name: str, spec: dict[str, Any], node: Items | Entries) -> list[Finding]:
    what = "items" if isinstance(node, Items) else "entries"
    n = len(node)
    if "min" in spec and n < spec["min"]:
        return [Finding(node.field, n, f"at least {spec['min']} {what}, has {n}", name)]
    if "max" in spec and n > spec["max"]:
        return [Finding(node.field, n, f"at most {spec['max']} {what}, has {n}", name)]
    return []


def _string(service: str, name: str, spec: dict[str, Any], node: Given, doc: str) -> list[Finding]:
    text = str(node.value)
    found = []
    if "min" in spec and len(text) < spec["min"]:
        found.append(Finding(node.field, text, f"length {len(text)} is under the minimum {spec['min']}", name))
    if "max" in spec and len(text) > spec["max"]:
        found.append(Finding(node.field, text, f"length {len(text)} is over the maximum {spec['max']}", name))
    if "enum" in spec and text not in spec["enum"]:
        found.append(Finding(node.field, text, f"not one of {', '.join(spec['enum'])}", name))
    matched = compile_pattern(spec["pattern"]).matches(text) if "pattern" in spec else True
    if matched is False:
        found.append(Finding(node.field, text, f"does not match the pattern {spec['pattern']}", name))
    elif matched is None:
        UNCOMPILED[f"{service} {name}"] = compile_pattern(spec["pattern"]).error or ""

    return found + _documented_string(name, node, text, doc)


def _number(name: str, spec: dict[str, Any], node: Given, kind: str) -> list[Finding]:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [Finding(node.field, value, f"not a number ({kind})", name)]
    if kind in ("integer", "long") and not float(value).is_integer():
        return [Finding(node.field, value, f"not a whole number ({kind})", name)]
    if "min" in spec and value < spec["min"]:
        return [Finding(node.field, value, f"under the minimum {spec['min']}", name)]
    if "max" in spec and value > spec["max"]:
        return [Finding(node.field, value, f"over the maximum {spec['max']}", name)]
    allowed = documented_values(str(spec.get("documentation", "")))
    if allowed and value not in allowed:
        return [Finding(node.field, value, f"not one of the documented values {', '.join(map(str, allowed))}", name)]
    return []


@cache
def documented_values(doc: str) -> tuple[int, ...]:
    """The values an integer shape's documentation lists ("Possible values are: 1, 3, ... and N")."""
    m = _POSSIBLE.search(doc)
    return tuple(int(v) for v in re.findall(r"\d+", m.group(1))) if m else ()


_ASCII_ALNUM = frozenset(chr(c) for c in range(128) if chr(c).isalnum())


@cache
def documented_string(doc: str) -> tuple[int | None, str | None]:
    """A member's documented length bound and the characters it allows beside a-z, A-Z, 0-9 and
    spaces (EC2's wording), each None when absent."""
    up_to, chars = _UP_TO.search(doc), _CHARS.search(doc)
    return (int(up_to.group(1)) if up_to else None), (html.unescape(chars.group(1)) if chars else None)


def _documented_string(name: str, node: Given, text: str, doc: str) -> list[Finding]:
    if not doc:
        return []
    limit, extra = documented_string(doc)
    found = []
    if limit is not None and len(text) > limit:
        found.append(Finding(node.field, text, f"length {len(text)} is over the documented maximum {limit}", name))
    bad = "".join(sorted(set(text) - _ASCII_ALNUM - set(" " + extra))) if extra is not None else ""
    if bad:
        rule = f"characters {bad!r} are not among the documented a-z, A-Z, 0-9, spaces and {extra}"
        found.append(Finding(node.field, text, rule, name))
    return found
