"""yaml.v3's decoding of a YAML document (gopkg.in/yaml.v3 v3.0.1, decode.go), ported: the
Pulumi CLI reads Pulumi.yaml and Pulumi.<stack>.yaml with it into ``interface{}``, and so does
``decode`` here.

PyYAML (libyaml, the C library yaml.v3 is a port of) parses the text into events; from there this
follows yaml.v3: only the first document; anchors registered before their node's children (an
alias inside its own anchor is refused when decoded: "anchor 'x' value contains itself"); a key
written twice in one map refused (same kind and text, as yaml.v3 compares them); merge keys
``<<`` (a map, an alias of one or a list of those; keys written in the map win, then the merged
maps in order); a map's keys are text when every key is a string or ``<<`` (merged keys then
become their text), else any scalar (Pulumi then refuses the file: it takes text keys only); and
the alias limit: every value decoded is counted, every value decoded inside an alias too, and
once more than 100 aliased values and 1000 values in all are counted, a share of aliased values
above allowedAliasRatio (99% up to 400,000 values, falling to 10% at 4,000,000) stops the file
with "document contains excessive aliasing". An alias bomb stops after a few thousand values
instead of filling memory. Values nest at most ``max_level`` deep (yaml.v3 allows 10,000).
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any, Optional, Union

import yaml

from facts.problems import fmt
from stacks.config.yaml_resolve import BINARY, MAP, MERGE, NULL, SEQ, STR, GoTime, YamlRefused, resolve

# yaml.v3 decode.go: the alias limits (alias_ratio_range_low/high, allowedAliasRatio, and the
# two floors in unmarshal).
ALIAS_RATIO_RANGE_LOW = 400_000
ALIAS_RATIO_RANGE_HIGH = 4_000_000
ALIASES_BEFORE_CHECK = 100
DECODES_BEFORE_CHECK = 1000
# yaml.v3 scannerc.go: max_flow_level and max_indents.
MAX_YAML_DEPTH = 10_000
# How deep ``decode`` nests by default: the decoder recurses (a few frames a level), and Python
# stops at 1000 frames. Nothing Pulumi reads from these files nests beyond a handful of levels.
MAX_LEVEL = 100
# Problems recorded from one document at most (an alias can repeat one problem many times).
MAX_FOUND = 20
Path = tuple[Union[str, int], ...]


def allowed_alias_ratio(decode_count: int) -> float:
    """yaml.v3 decode.go allowedAliasRatio: the share of decoded values that may come from aliases."""
    if decode_count <= ALIAS_RATIO_RANGE_LOW:
        return 0.99
    if decode_count >= ALIAS_RATIO_RANGE_HIGH:
        return 0.10
    span = ALIAS_RATIO_RANGE_HIGH - ALIAS_RATIO_RANGE_LOW
    return 0.99 - 0.89 * ((decode_count - ALIAS_RATIO_RANGE_LOW) / span)


_SCALAR, _SEQUENCE, _MAPPING, _ALIAS = "scalar", "sequence", "mapping", "alias"
_LONG_TAG_PREFIX = "tag:yaml.org,2002:"


class _Node:
    __slots__ = ("kind", "tag", "value", "plain", "children", "target", "line")

    def __init__(self, kind: str, tag: str, value: str, line: int, plain: bool = False):
        self.kind = kind
        self.tag = tag  # explicit short tag, "" for none (or the non-specific "!")
        self.value = value  # a scalar's text, an alias's anchor name
        self.plain = plain
        self.children: list[_Node] = []  # a mapping's keys and values alternate
        self.target: Optional[_Node] = None  # an alias's node
        self.line = line

    def short_tag(self) -> str:
        """yaml.v3 Node.ShortTag()."""
        if self.kind == _ALIAS:
            return self.target.short_tag() if self.target else ""
        if self.kind == _SCALAR:
            if self.tag:
                return self.tag
            if not self.plain:
                return STR
            return MERGE if self.value == "<<" else resolve("", self.value)[0]
        return self.tag or (MAP if self.kind == _MAPPING else SEQ)

    def is_merge_key(self) -> bool:
        return self.kind == _SCALAR and self.value == "<<" and (self.tag == MERGE or (not self.tag and self.plain))

    def text(self) -> Optional[str]:
        """The text a string-keyed map gets for this key (yaml.v3 sets a string to the scalar's
        text whatever it resolves to); None for a null."""
        node = self.target if self.kind == _ALIAS and self.target else self
        if node.kind != _SCALAR:
            return None
        if node.tag == BINARY:
            return _binary(node.value)
        if node.tag or not node.plain:
            return node.value
        return None if resolve("", node.value)[0] == NULL else node.value


def _short(tag: Optional[str]) -> str:
    if tag is None or tag == "!":
        return ""
    return "!!" + tag[len(_LONG_TAG_PREFIX) :] if tag.startswith(_LONG_TAG_PREFIX) else tag


_EventLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _compose(data: bytes) -> Optional[_Node]:
    """The first document's node graph (yaml.v3 reads only the first document), anchors
    resolved; raises ``YamlRefused`` with the path being read for a YAML syntax error."""
    loader = _EventLoader(data)
    anchors: dict[str, _Node] = {}
    open_nodes: list[_Node] = []
    root: Optional[_Node] = None
    try:
        while True:
            try:
                event = loader.get_event()
            except yaml.MarkedYAMLError as err:
                mark = err.problem_mark or err.context_mark
                where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
                raise YamlRefused(f"{where}{err.problem or err.context}", path=_open_path(open_nodes), kind="syntax") from None
            except yaml.YAMLError as err:  # the reader: bytes that are not UTF-8/16 text, control characters
                raise YamlRefused(" ".join(str(err).split()), path=_open_path(open_nodes), kind="syntax") from None
            if isinstance(event, (yaml.DocumentEndEvent, yaml.StreamEndEvent)):
                return root
            if isinstance(event, yaml.CollectionEndEvent):
                open_nodes.pop()
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            line = event.start_mark.line + 1 if event.start_mark else 0
            anchor = event.anchor or ""
            if isinstance(event, yaml.AliasEvent):
                node = _Node(_ALIAS, "", anchor, line)
                node.target = anchors.get(anchor)
                if node.target is None:
                    raise YamlRefused(
                        f"the alias *{anchor} (line {line}) has no anchor &{anchor} before it "
                        f"(the Pulumi CLI stops with \"unknown anchor '{anchor}' referenced\")",
                        path=_open_path(open_nodes),
                    )
            elif isinstance(event, yaml.ScalarEvent):
                node = _Node(_SCALAR, _short(event.tag), event.value, line, plain=not event.style)
            elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                kind = _SEQUENCE if isinstance(event, yaml.SequenceStartEvent) else _MAPPING
                node = _Node(kind, _short(event.tag), "", line)
            else:
                continue
            if anchor and node.kind != _ALIAS:
                anchors[anchor] = node  # before the children: an alias inside refers to it
            if open_nodes:
                open_nodes[-1].children.append(node)
            else:
                root = node
            if node.kind in (_SEQUENCE, _MAPPING):
                open_nodes.append(node)
                if len(open_nodes) > MAX_YAML_DEPTH:
                    raise YamlRefused(f"exceeded max depth of {MAX_YAML_DEPTH}", path=_open_path(open_nodes)[:2], kind="depth")
    finally:
        loader.dispose()


def _open_path(open_nodes: list[_Node]) -> Path:
    """Where the reader is: the keys and indexes of the open maps and lists."""
    path: list[Union[str, int]] = []
    for i, node in enumerate(open_nodes):
        inner = open_nodes[i + 1] if i + 1 < len(open_nodes) else None
        reading = bool(node.children) and node.children[-1] is inner  # the last child is still open
        if node.kind == _SEQUENCE:
            path.append(len(node.children) - (1 if reading else 0))
            continue
        if reading or len(node.children) % 2 == 1:  # a key was read: its value is being read
            key = node.children[-2] if reading else node.children[-1]
            path.append(key.value if key.kind == _SCALAR else "?")
        else:
            break
    return tuple(path)


def _binary(text: str) -> str:
    """A !!binary scalar's bytes, as the text the program gets (invalid UTF-8 bytes become
    U+FFFD one by one, as Go's JSON writes them)."""
    try:
        data = base64.b64decode("".join(text.split("\n")).replace("\r", ""), validate=True)
    except (binascii.Error, ValueError):
        raise YamlRefused("!!binary value contains invalid base64 data", kind="tag") from None
    out: list[str] = []
    i = 0
    while i < len(data):
        for size in (1, 2, 3, 4):
            try:
                out.append(data[i : i + size].decode("utf-8"))
            except UnicodeDecodeError:
                continue
            i += size
            break
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)


@dataclass
class Found:
    """Something in a document that stops the Pulumi CLI, and where (keys and indexes)."""

    path: Path
    message: str
    kind: str = ""  # as YamlRefused's; "nonfinite": an infinity or NaN (only config values go to JSON); "more": a count


class _Decoder:
    """yaml.v3's decoder into interface{} (maps with text keys or any keys, lists, strings, ints,
    floats, booleans, null, timestamps), with its counts of decoded and aliased values."""

    def __init__(self, max_level: int):
        self.max_level = max_level
        self.decode_count = 0
        self.alias_count = 0
        self.alias_depth = 0
        self.expanding: dict[int, Path] = {}  # the aliases being expanded: where each was met
        self.merged: Optional[set[Any]] = None
        self.reading_key = 0  # > 0 while a map key is decoded
        self.found: list[Found] = []
        self.more_found = 0

    def document(self, root: _Node) -> Any:
        self._count((), root)
        return self.unmarshal(root, (), 1)

    def note(self, path: Path, message: str, kind: str = "") -> None:
        if len(self.found) < MAX_FOUND:
            self.found.append(Found(path, message, kind))
        else:
            self.more_found += 1

    def _count(self, path: Path, node: _Node) -> None:
        self.decode_count += 1
        if self.alias_depth:
            self.alias_count += 1
        if (
            self.alias_count > ALIASES_BEFORE_CHECK
            and self.decode_count > DECODES_BEFORE_CHECK
            and self.alias_count / self.decode_count > allowed_alias_ratio(self.decode_count)
        ):
            raise YamlRefused(
                f"YAML aliases expand to too much: {self.alias_count} of the first {self.decode_count} values read come from "
                f"aliases (line {node.line}), more than the {allowed_alias_ratio(self.decode_count):.0%} the Pulumi CLI's YAML "
                'reader allows, and it stops with "document contains excessive aliasing"; write the values out or nest fewer aliases',
                path=path[:2],  # (in a stack file, the config key): where in the expansion it stopped says little
            )

    def unmarshal(self, node: _Node, path: Path, level: int, into: Optional[tuple[dict[Any, Any], bool]] = None) -> Any:
        """The value of ``node`` at ``path``; ``level`` is its nesting if it is a map or list
        (the document's map is 1); ``into``: the map a merge adds to, and whether its keys are text."""
        self._count(path, node)
        if node.kind == _ALIAS:
            return self._alias(node, path, level, into)
        if node.kind == _SCALAR:
            return self._scalar(node, path)
        if level > self.max_level:
            raise YamlRefused(f"nests maps and lists more than {self.max_level} levels deep", path=path[:2], kind="depth")
        if node.kind == _SEQUENCE:
            return [self.unmarshal(child, (*path, i), level + 1) for i, child in enumerate(node.children)]
        return self._mapping(node, path, level, into)

    def _alias(self, node: _Node, path: Path, level: int, into: Optional[tuple[dict[Any, Any], bool]]) -> Any:
        if id(node) in self.expanding:
            raise YamlRefused(
                f"the alias *{node.value} (line {node.line}) is inside its own anchor &{node.value}, so its value would contain "
                f"itself (the Pulumi CLI stops with \"anchor '{node.value}' value contains itself\")",
                path=self.expanding[id(node)],
            )
        assert node.target is not None
        self.expanding[id(node)] = path
        self.alias_depth += 1
        try:
            return self.unmarshal(node.target, path, level, into)
        finally:
            self.alias_depth -= 1
            del self.expanding[id(node)]

    def _scalar(self, node: _Node, path: Path) -> Any:
        if node.tag == STR or (not node.tag and not node.plain):
            return node.value
        tag = node.tag
        if not tag and node.value == "<<":
            tag = MERGE
        try:
            rtag, value = resolve(tag, node.value)
            if rtag == BINARY:
                value = _binary(value)
        except YamlRefused as err:
            raise YamlRefused(f"{err.message} (line {node.line})", path=path, kind=err.kind) from None
        if isinstance(value, float) and not math.isfinite(value) and not self.reading_key:
            what = "not a number (NaN)" if math.isnan(value) else "infinity"
            self.note(path, f"{node.value} (line {node.line}) is {what} in YAML", kind="nonfinite")
        return value

    def _mapping(self, node: _Node, path: Path, level: int, into: Optional[tuple[dict[Any, Any], bool]]) -> dict[Any, Any]:
        pairs = node.children
        first: dict[tuple[str, str], int] = {}
        duplicate = False
        for written in pairs[0::2]:
            same = (written.kind, written.value)
            if same in first:
                duplicate = True
                shown = written.value if written.kind == _SCALAR else f"*{written.value}" if written.kind == _ALIAS else "a map or list"
                self.note(
                    (*path, written.value) if written.kind == _SCALAR else path,
                    f"the key {fmt(shown)} is written twice in one map (lines {first[same]} and {written.line}); keep one",
                )
            else:
                first[same] = written.line
        if duplicate:
            return {}  # yaml.v3 does not decode a map with a key written twice
        out, text_keys = into if into is not None else ({}, all(k.short_tag() in (STR, MERGE) for k in pairs[0::2]))
        merged, self.merged = self.merged, None
        merge_value: Optional[_Node] = None
        for key_node, value_node in zip(pairs[0::2], pairs[1::2], strict=True):
            if key_node.is_merge_key():
                merge_value = value_node
                continue
            key = self._key(key_node, path, level)
            if isinstance(key, (dict, list)):
                raise YamlRefused(f"a map or list cannot be a key (line {key_node.line})", path=path)
            if text_keys and not isinstance(key, str):
                key = key_node.text()  # merged into a map of text keys: its text (a null is dropped)
                if key is None:
                    continue
            elif not isinstance(key, str):
                self._not_text_key(key_node, key, path)
            if merged is not None:
                if key in merged:
                    continue
                merged.add(key)
            out[key] = self.unmarshal(value_node, (*path, key if isinstance(key, str) else str(key_node.value)), level + 1)
        self.merged = merged
        if merge_value is not None:
            self._merge(node, merge_value, out, text_keys, path, level)
        return out

    def _key(self, node: _Node, path: Path, level: int) -> Any:
        self.reading_key += 1
        try:
            return self.unmarshal(node, path, level + 1)
        finally:
            self.reading_key -= 1

    def _not_text_key(self, key_node: _Node, key: Any, path: Path) -> None:
        what = {bool: "a boolean", int: "a number", float: "a number", GoTime: "a timestamp", type(None): "null"}.get(type(key), "not text")
        text = key_node.value if key_node.kind == _SCALAR else f"*{key_node.value}"
        self.note(
            (*path, text),
            f"the key {fmt(text)} (line {key_node.line}) is {what} in YAML, and Pulumi takes only text keys (its CLI stops with "
            f'"expected only string keys"): quote it, "{text}"',
        )

    def _merge(self, parent: _Node, merge_value: _Node, out: dict[Any, Any], text_keys: bool, path: Path, level: int) -> None:
        merged = self.merged
        if merged is None:
            self.merged = set()
            for key_node in parent.children[0::2]:
                key = self._key(key_node, path, level)
                if not isinstance(key, (dict, list)):
                    self.merged.add(key)
        sources = merge_value.children if merge_value.kind == _SEQUENCE else [merge_value]
        for source in sources:
            target = source.target if source.kind == _ALIAS else source
            if target is None or target.kind != _MAPPING or (merge_value.kind == _SEQUENCE and source.kind not in (_ALIAS, _MAPPING)):
                raise YamlRefused(
                    f"a merge key `<<` (line {merge_value.line}) takes a map, an alias of a map, or a list of those (the Pulumi "
                    'CLI stops with "map merge requires map or sequence of maps as the value")',
                    path=path,
                )
        for source in sources:
            self.unmarshal(source, path, level, into=(out, text_keys))
        self.merged = merged


def decode(data: Union[str, bytes], max_level: int = MAX_LEVEL) -> tuple[Any, list[Found]]:
    """A YAML text (its first document) read as yaml.v3 reads it into interface{}, and what in it
    stops the Pulumi CLI (or nothing): maps, lists, str, int, float, bool, None, ``GoTime``.
    Maps and lists nest at most ``max_level`` deep (the document's own map or list is 1)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if data.startswith(b"\xef\xbb\xbf"):  # loaders.go readFileStripUTF8BOM
        data = data[3:]
    decoder = _Decoder(max_level)
    try:
        root = _compose(data)
        value = decoder.document(root) if root is not None else None
    except YamlRefused as err:
        return None, [*decoder.found, Found(err.path, err.message, err.kind)]
    found = decoder.found
    if decoder.more_found:
        last = found[-1]
        found = [*found, Found(last.path, f"and {decoder.more_found} more problems in the file like these", "more")]
    return value, found
