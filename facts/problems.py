"""The shape of a config problem, shared by the stack config and the job kinds' own checks.

Every problem names the config key, the bad value and what is allowed; ``ConfigError`` carries all
problems found in one pass so a user sees every mistake at once.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

# How much of a value a message shows; ``fmt`` does work in proportion to it, whatever the value.
SHOWN_CHARS = 80
# Non-ASCII characters a message names at most (the rest are counted).
NAMED_CHARS = 3
# An int with more bits than this is shown by its size: str() of a huge int is slow, and refused
# above 4300 digits.
_SHOWN_INT_BITS = 256
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_NOTE = re.compile(r" \(non-ASCII: [^()]*\)")


# The config's lists whose entries have names (`name`): a problem about such an entry names it by its
# name, `gpu-training:jobs[bert-large].env`, as the user knows it; by its position, `jobs[1]`, only
# while it has no valid name of its own (none, not text, not a DNS-1035 label, or one another entry has
# too).
# Each with the longest name it takes (a GPU group's name is part of the names EKS and EC2 give it).
NAMED_LISTS = {"gpuNodeGroups": 32, "teams": 63, "jobs": 63}
# A valid name: a DNS-1035 label, what job names must be (and group and team names are, but for a
# leading digit), so a name shown in a key is never one of the mistakes the key is about.
_ENTRY_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def entry_keys(base: str, names: list[Any]) -> list[str]:
    """The key of each entry of the named list at ``base``, given each entry's ``name`` as written
    (None where it has none): ``base[name]``, or ``base[position]`` (see NAMED_LISTS)."""
    counts: dict[str, int] = {}
    for name in names:
        if isinstance(name, str):
            counts[name] = counts.get(name, 0) + 1
    longest = NAMED_LISTS.get(re.split(r"[:.]", base)[-1], 63)
    return [
        f"{base}[{name}]"
        if isinstance(name, str) and len(name) <= longest and _ENTRY_NAME.fullmatch(name) and counts[name] == 1
        else f"{base}[{i}]"
        for i, name in enumerate(names)
    ]


def entry_names(raw: Any) -> list[Any]:
    """Each entry's ``name`` of a list as written (None for an entry without one); [] for no list."""
    if not isinstance(raw, list):
        return []
    return [entry.get("name") if isinstance(entry, dict) else None for entry in raw]


class Problem:
    """One config problem: the key it is about, and what is wrong."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message

    def __str__(self) -> str:
        text = f"{self.key}: {self.message}"
        return text + _unnamed_non_ascii(text)

    def __repr__(self) -> str:
        return f"Problem({self.key!r}, {self.message!r})"


class ConfigError(Exception):
    """Raised with every problem found in a stack config."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid stack config ({len(problems)} problem(s)):\n{lines}")


def fmt(value: Any) -> str:
    """A value as a message shows it: strings quoted, others as JSON, long ones cut at 80
    characters. A string's non-ASCII characters are named after it (``'р4d.24xlarge' (non-ASCII:
    U+0440 CYRILLIC SMALL LETTER ER at position 1)``): a look-alike letter otherwise makes a
    message repeat two strings that look the same.

    The work is bounded by the size of the message, not of the value: a value nested a thousand
    deep, one that contains itself, or one expanded from YAML aliases to gigabytes is shown by its
    first 80 characters all the same."""
    if isinstance(value, str):
        return _cut(_repr_head(value)) + non_ascii_note(value)
    out: list[str] = []
    size = 0
    for chunk in _json_chunks(value):
        out.append(chunk)
        size += len(chunk)
        if size > SHOWN_CHARS:
            break
    return _cut("".join(out))


def non_ascii_note(text: str) -> str:
    """`` (non-ASCII: U+0440 CYRILLIC SMALL LETTER ER at position 1)`` for a text with characters
    outside ASCII (positions count characters from 1), or "" for plain ASCII."""
    if text.isascii():
        return ""
    first: dict[str, int] = {}  # each distinct character: where it first appears
    for seen, m in enumerate(_NON_ASCII.finditer(text)):
        first.setdefault(m.group(), m.start() + 1)
        if len(first) == NAMED_CHARS or seen > 1000:
            break
    named = []
    for ch, at in first.items():
        name = unicodedata.name(ch, "") or f"category {unicodedata.category(ch)}"
        times = text.count(ch)
        named.append(f"U+{ord(ch):04X} {name} at position {at}" + (f" and {times - 1} more times" if times > 1 else ""))
    others = len(text) - len(text.encode("ascii", "ignore")) - sum(text.count(ch) for ch in first)
    tail = f", and {others} other non-ASCII characters" if others else ""
    return f" (non-ASCII: {'; '.join(named)}{tail})"


def _unnamed_non_ascii(message: str) -> str:
    """A note naming the non-ASCII characters of a whole message that no ``fmt`` note names
    already (a value quoted without ``fmt``, a key, a list of known names), each with the word it
    is in: two look-alike names in one message must not look the same."""
    named = {chr(int(code, 16)) for note in _NOTE.findall(message) for code in re.findall(r"U\+([0-9A-F]{4,6}) ", note)}
    rest = _NOTE.sub("", message)
    if rest.isascii():
        return ""
    found: dict[str, str] = {}
    for m in _NON_ASCII.finditer(rest):
        ch = m.group()
        if ch in named or ch in found:
            continue
        start = max((rest.rfind(c, 0, m.start()) for c in " \n"), default=-1) + 1
        ends = [i for i in (rest.find(c, m.end()) for c in " \n") if i >= 0]
        word = rest[start : min(ends, default=len(rest))].strip("'\"`,;:.()[]{}")
        where = word.find(ch) + 1
        name = unicodedata.name(ch, "") or f"category {unicodedata.category(ch)}"
        found[ch] = f"U+{ord(ch):04X} {name} at position {where} of {word[:SHOWN_CHARS]!r}"
        if len(found) == NAMED_CHARS:
            break
    return f" (non-ASCII: {'; '.join(found.values())})" if found else ""


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def _repr_head(text: str) -> str:
    """``repr(text)`` up to the cut, from the first characters only: the same quote character
    as the whole string's repr."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    # repr() quotes with " when the string has a ' and no "; add the character that makes the
    # head choose as the whole string would, then take it out again.
    marker = "'" if ("'" in text and '"' not in text) else '"'
    shown = repr(text[:SHOWN_CHARS] + marker)
    return shown[:-2] + shown[-1]


def _json_chunks(value: Any) -> Iterator[str]:
    """``json.dumps(value, default=str)`` in pieces, lazily: the consumer stops after the first
    80 characters, so nesting and size cost nothing beyond them (a container yields its opening
    bracket before its items, so a level of nesting costs a character)."""
    if isinstance(value, str):
        yield json.dumps(value[: SHOWN_CHARS + 1])
    elif value is None or isinstance(value, bool):
        yield json.dumps(value)
    elif isinstance(value, int):
        yield _int_text(value)
    elif isinstance(value, float):
        yield json.dumps(value)
    elif isinstance(value, dict):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield (", " if i else "") + json.dumps(_json_key(key)[: SHOWN_CHARS + 1]) + ": "
            yield from _json_chunks(item)
        yield "}"
    elif isinstance(value, (list, tuple)):
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ", "
            yield from _json_chunks(item)
        yield "]"
    else:
        yield json.dumps(str(value)[: SHOWN_CHARS + 1])


def _json_key(key: Any) -> str:
    """A map key as json.dumps writes it."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, float)):
        return json.dumps(key)
    if isinstance(key, int):
        return _int_text(key)
    return str(key)


def _int_text(value: int) -> str:
    if value.bit_length() <= _SHOWN_INT_BITS:
        return int.__repr__(value)
    return f"{'-' if value < 0 else ''}<an integer of {value.bit_length()} bits>"
