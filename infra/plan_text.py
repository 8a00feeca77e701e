"""The text of the offline plan's files, byte for byte what the reference writers give, written
several times faster: JSON as ``json.dumps(value, indent=2, ensure_ascii=False)`` writes it, and
Kubernetes objects as one multi-document YAML text in the form of PyYAML's pure-Python emitter.

JSON: ``json.dumps`` with an indent runs its pure-Python encoder, where every piece of text passes
up through one generator per level of nesting (CRD schemas nest twenty deep); ``json_text`` writes
the same text in one recursive pass, and leaves anything but plain JSON values to ``json.dumps``.

YAML: libyaml's emitter writes most of it (about six times faster). libyaml and the pure-Python
emitter write the same bytes for the same events, except in a few cases: a double-quoted scalar
long enough to be folded (libyaml folds without the Python emitter's backslash escapes); a literal
block that keeps its trailing line breaks ("|+", text ending in two of them), after which libyaml
also ends the document with "..."; and some keys (empty, very long, with line breaks or control
characters). A double-quoted scalar is only chosen for text with characters outside printable
ASCII, or with a space right before a line break or at the end of a multi-line text. So:

- an object with none of those is written by libyaml;
- an object whose only odd parts are a few values (a chart's CRD with tabs in three of its
  descriptions) is written by libyaml with a stand-in for each of them, and each stand-in is then
  replaced by what the Python emitter writes for that value at that place: the value alone on the
  same path from the document's root (same keys, same nesting, so the same indentation and
  column). Only quoted forms are put in: after a closing quote both emitters go on alike;
- any other object goes through the Python emitter.

The files never depend on which writer wrote them (tests/test_plan_speed_invariants.py compares
them on generated values).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any, Callable, Optional, Union

import yaml

# ---------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------


class _NotPlain(Exception):
    """A value json_text leaves to json.dumps."""


def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), -float("inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def json_text(value: Any) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False) + "\\n"``, the same text."""
    out: list[str] = []
    put = out.append
    on_path: set[int] = set()  # the containers being written: a cycle goes to json.dumps (which refuses it)

    def write(item: Any, line: str) -> None:  # line: a line break and the indentation of ``item``
        if isinstance(item, str):
            put(encode_basestring(item))
        elif item is None:
            put("null")
        elif item is True:
            put("true")
        elif item is False:
            put("false")
        elif isinstance(item, int):
            put(int.__repr__(item))
        elif isinstance(item, float):
            put(_float_text(item))
        elif isinstance(item, (list, tuple, dict)):
            if not item:
                put("{}" if isinstance(item, dict) else "[]")
                return
            if id(item) in on_path:
                raise _NotPlain
            on_path.add(id(item))
            inner = line + "  "
            if isinstance(item, dict):
                put("{")
                for i, (key, member) in enumerate(item.items()):
                    if not isinstance(key, str):
                        raise _NotPlain  # (json.dumps turns numbers, booleans and None into text)
                    put(("," if i else "") + inner)
                    put(encode_basestring(key))
                    put(": ")
                    write(member, inner)
                put(line + "}")
            else:
                put("[")
                for i, member in enumerate(item):
                    put(("," if i else "") + inner)
                    write(member, inner)
                put(line + "]")
            on_path.discard(id(item))
        else:
            raise _NotPlain

    try:
        write(value, "\n")
    except _NotPlain:
        return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False) + "\n"
    put("\n")
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------------

_STR, _MAP, _SEQ = "tag:yaml.org,2002:str", "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"


def _str_style(data: str) -> Optional[str]:
    return "|" if "\n" in data else None


def _str_presenter(dumper: yaml.representer.SafeRepresenter, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(_STR, data, style=_str_style(data))


class PythonDumper(yaml.SafeDumper):
    """PyYAML's pure-Python emitter: the reference form of the files."""


PythonDumper.add_representer(str, _str_presenter)


class _QuickRepresenter(yaml.representer.SafeRepresenter, yaml.resolver.Resolver):
    """PyYAML's representer and resolver, quicker on what manifests are made of: the nodes of
    plain dicts, lists and strings are made here, as ``represent_data`` makes them (same tags,
    styles, flow styles and shared nodes for a dict or list met twice, which become aliases); any
    other value goes through ``represent_data``. The emitter asks for the tag of every scalar
    twice; the answers are remembered for the length of one dump."""

    serialize: Callable[[yaml.Node], None]  # the emitter's

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tags: dict[tuple[str, tuple[bool, bool]], str] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode:
            return super().resolve(kind, value, implicit)
        key = (value, implicit)
        tag = self._tags.get(key)
        if tag is None:
            tag = self._tags[key] = super().resolve(kind, value, implicit)
        return tag

    def represent(self, data: Any) -> None:
        if self.default_style is not None or self.default_flow_style is not False or self.sort_keys:
            return super().represent(data)  # (not how the files are written)
        made = self.represented_objects
        keep = self.object_keeper

        def node_of(value: Any) -> Any:
            kind = type(value)
            if kind is str:
                return yaml.ScalarNode(_STR, value, style=_str_style(value))
            if kind is dict or kind is list:
                node = made.get(id(value))
                if node is not None:
                    return node
                keep.append(value)
                items: list[Any] = []
                if kind is dict:
                    node = made[id(value)] = yaml.MappingNode(_MAP, items, flow_style=False)
                    for k, v in value.items():
                        items.append((node_of(k), node_of(v)))
                else:
                    node = made[id(value)] = yaml.SequenceNode(_SEQ, items, flow_style=False)
                    for v in value:
                        items.append(node_of(v))
                return node
            self.alias_key = None
            return self.represent_data(value)

        self.serialize(node_of(data))
        self.represented_objects = {}
        self.object_keeper = []
        self.alias_key = None


if getattr(yaml, "__with_libyaml__", False):

    class _LibyamlDumper(_QuickRepresenter, yaml.CSafeDumper):
        """The same representer (made quicker) over libyaml's emitter."""

    _LibyamlDumper.add_representer(str, _str_presenter)
    FAST_DUMPER: Optional[type] = _LibyamlDumper
else:  # PyYAML built without libyaml
    FAST_DUMPER = None

_MAX_SIMPLE_KEY = 100
_STAND_IN = "standin-{}-5f0c2e91"  # plain, printable ASCII: libyaml writes it as it is

# From an object's root to a value: each step a mapping's key (False, key) or a list's index (True, i).
Where = tuple[tuple[bool, Union[str, int]], ...]


def _plain_ascii(text: str) -> bool:
    """Printable ASCII and line breaks only."""
    return text.isascii() and (text.isprintable() or text.replace("\n", "").isprintable())


def _alike_text(text: str) -> bool:
    if "\n" in text:
        return _plain_ascii(text) and " \n" not in text and not text.endswith((" ", "\n\n")) and text != "\n"
    return _plain_ascii(text)


def _alike_key(key: Any) -> bool:
    if isinstance(key, str):
        return 0 < len(key) <= _MAX_SIMPLE_KEY and "\n" not in key and _plain_ascii(key)
    return isinstance(key, int)  # bool is an int


def libyaml_writes_it_alike(value: Any) -> bool:
    """Whether libyaml's emitter writes ``value`` byte for byte as the Python emitter does (see above)."""
    odd: list[Where] = []
    return _odd_values(value, [], odd) and not odd


def _odd_values(value: Any, path: list[tuple[bool, Union[str, int]]], found: list[Where]) -> bool:
    """Append to ``found`` the path of every text libyaml may write differently; False if
    something else is odd (a key, a value of another type). ``path`` is where ``value`` is."""
    if isinstance(value, str):
        if not _alike_text(value):
            found.append(tuple(path))
        return True
    if isinstance(value, dict):
        for key, item in value.items():
            if not _alike_key(key):
                return False
            path.append((False, key))
            ok = _odd_values(item, path, found)
            path.pop()
            if not ok:
                return False
        return True
    if isinstance(value, list):
        for i, item in enumerate(value):
            path.append((True, i))
            ok = _odd_values(item, path, found)
            path.pop()
            if not ok:
                return False
        return True
    return value is None or isinstance(value, (bool, int, float))


def _dump(objects: list[Any], dumper: type) -> str:
    return yaml.dump_all(objects, Dumper=dumper, sort_keys=False, default_flow_style=False, explicit_start=True)


def _replaced(value: Any, path: Where, new: Any) -> Any:
    """``value`` with the item at ``path`` replaced by ``new``: the containers on the path are
    copied, the rest is shared."""
    if not path:
        return new
    (_, head), rest = path[0], path[1:]
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _replaced(value[head], rest, new)
    return copy


def _skeleton(path: Where, leaf: Any) -> Any:
    """``leaf`` alone on ``path``: a mapping of one key for each key, a list of one item for each index."""
    for in_list, key in reversed(path):
        leaf = [leaf] if in_list else {key: leaf}
    return leaf


def _python_form(path: Where, text: str, stand_in: str) -> Optional[str]:
    """What the Python emitter writes for ``text`` where a plain ``stand_in`` would be written, at
    ``path``; None unless it is a quoted form."""
    with_stand_in = _dump([_skeleton(path, stand_in)], PythonDumper)
    with_text = _dump([_skeleton(path, text)], PythonDumper)
    if with_stand_in.count(stand_in) != 1:
        return None
    before, after = with_stand_in.split(stand_in)
    if after != "\n" or not (with_text.startswith(before) and with_text.endswith(after)):
        return None
    form = with_text[len(before) : len(with_text) - len(after)]
    if len(form) < 2 or form[0] not in "'\"" or form[-1] != form[0]:
        return None
    return form


def _shares_containers(obj: Any) -> bool:
    """Whether a dict or list appears twice in ``obj``."""
    seen: set[int] = set()
    todo = [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, (dict, list)):
            if id(item) in seen:
                return True
            seen.add(id(item))
            todo.extend(item.values() if isinstance(item, dict) else item)
    return False


def _with_stand_ins(obj: Any, paths: list[Where]) -> Optional[str]:
    """``obj`` as one document, written by libyaml with the Python emitter's form put in for the
    odd value at each of ``paths`` (see the module's docstring); None when that cannot be done."""
    if FAST_DUMPER is None or _shares_containers(obj):
        return None  # (a dict or list met twice is written once with an anchor: stand-ins would undo that)
    stand_ins = [_STAND_IN.format(i) for i in range(len(paths))]
    forms: list[str] = []
    for path, stand_in in zip(paths, stand_ins, strict=True):
        text = obj
        for _, step in path:
            text = text[step]
        form = _python_form(path, text, stand_in)
        if form is None:
            return None
        forms.append(form)
        obj = _replaced(obj, path, stand_in)
    out = _dump([obj], FAST_DUMPER)
    for stand_in, form in zip(stand_ins, forms, strict=True):
        # "<stand-in>" then the end of its line, and nowhere else
        if out.count(stand_in) != 1 or f"{stand_in}\n" not in out:
            return None
        out = out.replace(stand_in, form)
    return out


def manifests_yaml(objects: list[Any], dumper: Optional[type] = None) -> str:
    """The Kubernetes objects as one multi-document YAML text, in the pure-Python emitter's form.

    ``dumper`` forces an emitter for the whole text (the tests compare them); by default each
    object goes the fastest way that writes it alike.
    """
    if not objects:
        return ""
    if dumper is not None:
        return _dump(objects, dumper)
    if FAST_DUMPER is None or not all(isinstance(o, dict) for o in objects):
        return _dump(objects, PythonDumper)
    # Consecutive objects that libyaml writes alike go through it at once, and so do consecutive
    # objects of the Python emitter; an object with stand-ins is written on its own. Every
    # document starts with "---", so the parts join into the text one stream would be, unless a
    # part of the Python emitter ends open ("..." at its end, which one stream writes only at its
    # very end): then the whole stream goes through the Python emitter.
    parts: list[str] = []
    run: list[Any] = []
    run_fast: Optional[bool] = None

    def flush(last: bool) -> bool:
        if run:
            text = _dump(run, FAST_DUMPER if run_fast else PythonDumper)
            if not run_fast and not last and text.endswith("...\n"):
                return False
            parts.append(text)
            run.clear()
        return True

    for o in objects:
        odd: list[Where] = []
        plain = _odd_values(o, [], odd)  # nothing odd but (maybe) some texts
        fast = plain and not odd
        own = _with_stand_ins(o, odd) if plain and odd else None
        if own is not None:
            if not flush(last=False):
                return _dump(objects, PythonDumper)
            parts.append(own)
            continue
        if run and fast != run_fast and not flush(last=False):
            return _dump(objects, PythonDumper)
        run.append(o)
        run_fast = fast
    flush(last=True)
    return "".join(parts)
