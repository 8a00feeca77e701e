"""The service models' ``pattern`` traits (Java regular expressions) as Python ``re`` patterns.

Semantics, from Smithy's pattern trait (smithy-lang/smithy docs/source-2.0/spec/constraint-traits.rst,
"pattern trait"): the value must match the pattern, and patterns are NOT implicitly anchored (a model
anchors one with ``^...$`` where it means the whole value): so ``search``, not ``fullmatch``.

What Python's ``re`` lacks is translated:
- ``\\p{L}``, ``\\p{N}``, ``\\p{Zs}``, ... (Unicode general categories) and ``\\p{Alnum}`` (POSIX, ASCII in
  Java): a value that is all ASCII is matched with the categories' ASCII members (exact for it); any
  other value with the categories' members over all of Unicode (built once per category, on demand);
- ``\\uD800\\uDC00-\\uDBFF\\uDFFF`` (a UTF-16 surrogate pair range): the code points it stands for;
- ``(?i)`` after the start: the whole pattern case-insensitive (the models put it right after ``^``);
- ``\\w-`` inside a class: Java reads the ``-`` as a literal there.
A pattern that still does not compile is reported as such (``Pattern.error``), never guessed.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from functools import cache

_PROPERTY = re.compile(r"\\p\{(\w+)\}")
_SURROGATES = re.compile(r"\\u(D[89AB][0-9A-F]{2})\\u(D[C-F][0-9A-F]{2})", re.IGNORECASE)
# POSIX classes of java.util.regex.Pattern (ASCII only, without UNICODE_CHARACTER_CLASS).
_POSIX = {
    "Alnum": "A-Za-z0-9",
    "Alpha": "A-Za-z",
    "Digit": "0-9",
    "Lower": "a-z",
    "Upper": "A-Z",
    "Punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "Space": " \\t\\n\\x0b\\f\\r",
}


@dataclass(frozen=True)
class Pattern:
    """One model pattern: ``matches(value)``; ``error`` when it cannot be compiled (then nothing is checked)."""

    source: str
    ascii: re.Pattern[str] | None
    error: str | None = None

    def matches(self, value: str) -> bool | None:
        """Whether ``value`` matches; None when the pattern could not be compiled."""
        if self.ascii is None:
            return None
        if value.isascii():
            return self.ascii.search(value) is not None
        full = _compiled(self.source, False)
        return full.search(value) is not None if full is not None else None


@cache
def compile_pattern(source: str) -> Pattern:
    """The pattern of a model (cached: each is translated and compiled once per process)."""
    try:
        return Pattern(source, _compiled(source, True))
    except (re.error, KeyError) as err:
        return Pattern(source, None, f"{type(err).__name__}: {err}")


@cache
def _compiled(source: str, ascii_only: bool) -> re.Pattern[str] | None:
    flags = 0
    text = _SURROGATES.sub(lambda m: _surrogate_pair(m.group(1), m.group(2)), source)
    if "(?i)" in text:
        text, flags = text.replace("(?i)", ""), re.IGNORECASE
    text = text.replace("\\w-", "\\w\\-")
    out, pos = [], 0
    for m in _PROPERTY.finditer(text):
        inside = _in_class(text, m.start())
        members = _members(m.group(1), ascii_only)
        out += [text[pos : m.start()], members if inside else f"[{members}]"]
        pos = m.end()
    out.append(text[pos:])
    return re.compile("".join(out), flags)


def _surrogate_pair(high: str, low: str) -> str:
    point = 0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00)
    return f"\\U{point:08X}"


def _in_class(text: str, at: int) -> bool:
    """Whether position ``at`` of ``text`` is inside a ``[...]`` (escapes skipped)."""
    depth, i = 0, 0
    while i < at:
        if text[i] == "\\":
            i += 2
            continue
        depth += text[i] == "["
        depth -= text[i] == "]" and depth > 0
        i += 1
    return depth > 0


def _members(name: str, ascii_only: bool) -> str:
    """A class's members as the inside of a ``[...]``: POSIX names, else a Unicode general category
    (``L`` all letters, ``Zs`` one subcategory). KeyError when it is neither."""
    if name in _POSIX:
        return _POSIX[name]
    if not re.fullmatch(r"[A-Z][a-z]?", name):
        raise KeyError(f"\\p{{{name}}} is not a category this translation knows")
    return _category_ranges(name, 128 if ascii_only else sys.maxunicode + 1)


@cache
def _category_ranges(category: str, end: int) -> str:
    """The code points below ``end`` whose general category starts with ``category``, as ranges."""
    ranges: list[tuple[int, int]] = []
    for point in range(end):
        if unicodedata.category(chr(point)).startswith(category):
            if ranges and ranges[-1][1] == point - 1:
                ranges[-1] = (ranges[-1][0], point)
            else:
                ranges.append((point, point))
    return "".join(_range(a, b) for a, b in ranges)


def _range(first: int, last: int) -> str:
    low = re.escape(chr(first))
    return low if first == last else f"{low}-{re.escape(chr(last))}"
