"""A YAML text read as the Pulumi CLI reads stack files: ruamel.yaml (YAML 1.2, safe, pure Python)
where it does what gopkg.in/yaml.v3 v3.0.1, the CLI's reader, does, set to yaml.v3's way where it
does not, and refusing what yaml.v3 or the CLI refuse, naming where. Each difference and refusal is
a row of tests/test_yaml_reading.py that names the behaviour it follows.
"""

from __future__ import annotations

import base64
import datetime
import math
import re
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.composer import Composer, MaxDepthExceededError
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.resolver import VersionedResolver, implicit_resolvers
from ruamel.yaml.util import RegExp

from facts.problems import fmt

Path = tuple[str | int, ...]
MAX_LEVEL = 100  # how deep maps and lists nest by default
_TAG = "tag:yaml.org,2002:"
# yaml.v3 resolve.go allowedTimestampFormats as Go's time.Parse reads them: a date, then a time after
# T or t with a zone (Z or +hh:mm), or after a space with none; a fraction after '.' or ','.
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?:([Tt "
    r"])([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:[.,]([0-9]+))?(Z|[-+][0-9]{2}:[0-9]{2})?)?"
)


@dataclass
class Found:
    """Something in a text that stops the Pulumi CLI, and where (keys and indexes)."""

    path: Path
    message: str
    kind: str = (
        ""  # "syntax": not YAML; "depth": nested too deep; "nonfinite": an infinity or NaN (no config value can be one)
    )


class _Refused(Exception):
    def __init__(self, path: Path, message: str, kind: str = ""):
        super().__init__(message)
        self.found = Found(path, message, kind)


@dataclass(frozen=True)
class GoTime:
    """A timestamp as the Pulumi CLI hands it on: Go's time.String() (in a config value) and RFC 3339
    (json.Marshal, in a project default). An offset of zero is the machine's zone, taken to be UTC."""

    go_string: str
    rfc3339: str


def _timestamp(text: str) -> GoTime | str:
    """A plain scalar shaped like a date: a timestamp, or text where Go's time.Parse fails (no such
    date or time, a zone where none goes or none where one must)."""
    m = _TIMESTAMP.fullmatch(text)
    year, month, day, sep, hour, minute, second, fraction, zone = m.groups() if m else (None,) * 9
    try:
        when = datetime.datetime(
            int(year or ""), int(month or ""), int(day or ""), int(hour or 0), int(minute or 0), int(second or 0)
        )
    except ValueError:
        return text
    if (
        sep
        and (sep == " ") == (zone is not None)
        or zone
        and zone != "Z"
        and (int(zone[1:3]) > 24 or int(zone[4:]) > 60)
    ):
        return text
    digits = (fraction or "")[:9].rstrip("0")
    stamp = f"{when.year:04d}-{when:%m-%d} {when:%H:%M:%S}" + (f".{digits}" if digits else "")
    if zone in (None, "Z", "+00:00", "-00:00"):
        return GoTime(f"{stamp} +0000 UTC", f"{stamp.replace(' ', 'T')}Z")
    return GoTime(f"{stamp} {zone.replace(':', '')} {zone.replace(':', '')}", f"{stamp.replace(' ', 'T')}{zone}")


class _Resolver(VersionedResolver):
    """YAML 1.2's tags whatever ``%YAML`` the text declares (yaml.v3 ignores it), with yaml.v3's
    integers (``0X1F`` too) and timestamps, and without ruamel's value key ``=``."""

    _implicit: dict[Any, list[Any]] = {}
    for _versions, _tag, _regexp, _first in implicit_resolvers:
        if (1, 2) in _versions and _tag[len(_TAG) :] in ("bool", "float", "merge", "null"):
            for _char in _first:
                _implicit.setdefault(_char, []).append((_tag, _regexp))
    for _char in "-+0123456789":
        _implicit.setdefault(_char, []).append(
            (_TAG + "int", RegExp(r"^[-+]?(?:[0-9_]+|0[bB][01_]+|0[oO][0-7_]+|0[xX][0-9a-fA-F_]+)$"))
        )
        _implicit[_char].append((_TAG + "timestamp", RegExp(r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt ].*)?$")))
    processing_version = (1, 2)
    versioned_resolver = _implicit


class _Constructor(SafeConstructor):
    def construct_yaml_int(self, node: Any) -> Any:
        """Go's strconv.ParseInt with base 0 after yaml.v3 removed every ``_``: a leading 0 is octal."""
        text = node.value.replace("_", "")
        digits = text.lstrip("+-")
        if len(digits) > 1 and digits[0] == "0" and digits.isdigit():
            return int(text, 8) if max(digits) < "8" else float(text)  # 08 is no octal: a float
        return int(text, 0)

    def construct_yaml_float(self, node: Any) -> Any:
        value = super().construct_yaml_float(node)
        return (
            node.value if math.isinf(value) and "inf" not in node.value.lower() else value
        )  # beyond Go's floats: text

    def construct_yaml_binary(self, node: Any) -> str:
        return base64.b64decode(node.value.replace("\n", "").replace("\r", ""), validate=True).decode(
            "utf-8", "replace"
        )

    def construct_yaml_timestamp(self, node: Any, values: Any = None) -> Any:
        return _timestamp(node.value)

    def construct_unknown(self, node: Any) -> Any:
        """A tag yaml.v3 does not know: the value as if it had none."""
        kind = "str" if isinstance(node, ScalarNode) else "map" if isinstance(node, MappingNode) else "seq"
        return self.construct_non_recursive_object(node, _TAG + kind)


for _name in ("int", "float", "binary", "timestamp"):
    _Constructor.add_default_constructor(_name)  # the methods above
_Constructor.add_constructor(_TAG + "merge", SafeConstructor.construct_yaml_str)  # `<<` where no key is: text
for _unknown in (None, _TAG + "set", _TAG + "omap", _TAG + "pairs"):
    _Constructor.add_constructor(_unknown, _Constructor.construct_unknown)


def allowed_alias_ratio(decode_count: int) -> float:
    """yaml.v3 decode.go allowedAliasRatio: the share of decoded values that may come from aliases."""
    return (
        0.99
        if decode_count <= 400_000
        else 0.10
        if decode_count >= 4_000_000
        else 0.99 - 0.89 * (decode_count - 400_000) / 3_600_000
    )


class _Composer(Composer):
    """ruamel's composer, also checking each node as yaml.v3's decoder (decode.go) and the CLI would,
    where it is (``at``: the index or key node of each node open, None for a key): aliases, keys
    written twice, keys that are not text, merge values, nesting, infinities; and yaml.v3's count of
    values read, each alias expanded (``expanded``: a node's values and levels of maps and lists)."""

    def __init__(self, loader: Any = None):
        super().__init__(loader)
        self.warn_double_anchors = False  # a later anchor of the same name takes over, as in yaml.v3
        self.max_level = MAX_LEVEL
        self.at: list[Any] = []
        self.found: list[Found] = []
        self.decoded = self.aliased = 0
        self.expanded: dict[int, tuple[int, int]] = {}
        self.below: list[list[int]] = [[0, 0]]

    def path(self) -> Path:
        out: list[str | int] = []
        for index in self.at[1:]:
            if index is None:  # a key is being read
                break
            out.append(index if isinstance(index, int) else index.value if isinstance(index, ScalarNode) else "?")
        return tuple(out)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.at.append(index)
        event = self.parser.peek_event()
        alias = isinstance(event, AliasEvent)
        target = self.anchors.get(event.anchor) if alias else None
        if alias and (
            target is None or target.end_mark is None
        ):  # no anchor, or one still open: the alias is inside it
            name, line = event.anchor, event.start_mark.line + 1
            why = (
                f"is inside its own anchor &{name}, so its value would contain itself (the Pulumi "
                f"CLI stops with \"anchor '{name}' value contains itself\")"
            )
            if target is None:
                why = (
                    f"has no anchor &{name} before it (the Pulumi CLI stops with "
                    f"\"unknown anchor '{name}' referenced\")"
                )
            raise _Refused(self.path(), f"the alias *{name} (line {line}) {why}")
        self.count(1, 0, event.start_mark.line + 1)
        self.below.append([0, 0])
        node = super().compose_node(parent, index)
        values, levels = self.below.pop()
        if alias:  # yaml.v3 reads the alias, then what it stands for
            values, levels = self.expanded[id(node)]
            self.count(values, values, event.start_mark.line + 1)
        else:
            values, levels = values + 1, 0 if isinstance(node, ScalarNode) else levels + 1
            self.expanded[id(node)] = (values, levels)
            self.check(node, index is None)
        if len(self.at) - 1 + levels > self.max_level:  # an alias can nest what it stands for deeper
            raise _Refused(self.path()[:2], f"nests maps and lists more than {self.max_level} levels deep", "depth")
        self.below[-1][0] += values + alias
        self.below[-1][1] = max(self.below[-1][1], levels)
        self.at.pop()
        return node

    def count(self, decoded: int, aliased: int, line: int) -> None:
        self.decoded += decoded
        self.aliased += aliased
        ratio = allowed_alias_ratio(self.decoded)
        if self.aliased > 100 and self.decoded > 1000 and self.aliased / self.decoded > ratio:
            raise _Refused(
                self.path()[:2],  # (in a stack file, the config key)
                f"YAML aliases expand to too much: {self.aliased} of the first "
                f"{self.decoded} values read come from aliases (line {line}), "
                f"more than the {ratio:.0%} the Pulumi CLI's YAML reader allows, and "
                'it stops with "document contains excessive '
                'aliasing"; write the values out or nest fewer aliases',
            )

    def check(self, node: Any, is_key: bool) -> None:
        path, line = self.path(), node.start_mark.line + 1
        if isinstance(node, ScalarNode):
            try:
                value = self.loader.constructor.construct_object(node)
            except (ValueError, YAMLError):
                self.found.append(
                    Found(path, f"cannot decode `{node.value}` as a !!{str(node.tag)[len(_TAG) :]} (line {line})")
                )
                return
            if isinstance(value, float) and not math.isfinite(value) and not is_key:
                what = "not a number (NaN)" if math.isnan(value) else "infinity"
                self.found.append(Found(path, f"{node.value} (line {line}) is {what} in YAML", "nonfinite"))
        if not isinstance(node, MappingNode):
            return
        written: dict[tuple[type, str], int] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode):
                raise _Refused(path, f"a map or list cannot be a key (line {line})")
            if (type(key_node), key_node.value) in written:  # compared as written: a and "a" are one key
                lines = f"lines {written[type(key_node), key_node.value]} and {line}"
                self.found.append(
                    Found(
                        (*path, key_node.value),
                        f"the key {fmt(key_node.value)} is written twice in one map ({lines}); keep one",
                    )
                )
            written.setdefault((type(key_node), key_node.value), line)
            try:
                key = self.loader.constructor.construct_object(key_node)
            except (ValueError, YAMLError):
                continue  # noted when the key was read
            if key_node.tag == _TAG + "merge":
                sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                if not all(isinstance(source, MappingNode) for source in sources):
                    raise _Refused(
                        path,
                        f"a merge key `<<` (line {line}) takes a map, an alias of a map, or "
                        "a list of those (the Pulumi CLI stops with "
                        '"map merge requires map or sequence of maps as the value")',
                    )
            elif not isinstance(key, str):
                what = {bool: "a boolean", int: "a number", float: "a number", GoTime: "a timestamp"}.get(
                    type(key), "null"
                )
                self.found.append(
                    Found(
                        (*path, key_node.value),
                        f"the key {fmt(key_node.value)} (line {line}) is {what} in YAML, and "
                        "Pulumi takes only text keys (its CLI stops "
                        f'with "expected only string keys"): quote it, "{key_node.value}"',
                    )
                )


def decode(data: str | bytes, max_level: int = MAX_LEVEL) -> tuple[Any, list[Found]]:
    """A YAML text (its first document, as yaml.v3 reads) as the Pulumi CLI reads it, and what in it
    stops the CLI (or nothing): maps, lists, str, int, float, bool, None, ``GoTime``. Maps and lists
    nest at most ``max_level`` deep (the document's own map or list is 1)."""
    yaml = YAML(typ="safe", pure=True)
    yaml.Resolver, yaml.Composer, yaml.Constructor = _Resolver, _Composer, _Constructor
    yaml.allow_duplicate_keys = True  # refused as yaml.v3 compares keys, by the composer
    yaml.max_depth = max_level + 1  # ruamel counts a scalar as a level too
    composer: _Composer = yaml.composer
    composer.max_level = max_level
    documents = yaml.compose_all(data.encode() if isinstance(data, str) else data)
    try:
        root = next(documents, None)
        if any(f.kind != "nonfinite" for f in composer.found):
            return None, composer.found
        return yaml.constructor.construct_document(root) if root is not None else None, composer.found
    except _Refused as err:
        return None, [*composer.found, err.found]
    except MaxDepthExceededError:
        return None, [Found(composer.path()[:2], f"nests maps and lists more than {max_level} levels deep", "depth")]
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return None, [Found(composer.path(), f"{where}{err.problem or err.context}", "syntax")]
    except YAMLError as err:  # the reader: bytes that are not UTF-8/16 text, control characters
        return None, [Found(composer.path(), " ".join(str(err).split()), "syntax")]
    finally:
        documents.close()
