"""yaml.v3's reading of a scalar (gopkg.in/yaml.v3 v3.0.1, resolve.go), ported: which plain
scalars are booleans, numbers, null or timestamps, as the Pulumi CLI reads stack files.

YAML 1.2's core schema with yaml.v3's quirks: booleans are only true/True/TRUE and
false/False/FALSE (``yes``, ``on``, ``No`` stay text); numbers are whatever Go's strconv parses
after every ``_`` is removed (``1_000``, ``0x1F``, ``0o755``, ``0b101``, and ``0755`` as an octal
493 "for compatibility" with YAML 1.1; ``08`` is not an octal, so it falls through to the float
8); floats follow YAML's form (``1e3``, ``.5``, ``.inf``, ``.nan``) and Go's range (``1e400`` is
text); null is ``~``, ``null``, ``Null``, ``NULL`` or nothing; a timestamp is a date
``2024-05-01``, optionally with a time (``T``/``t`` and a zone, or a space and none); ``22:30``
(YAML 1.1's base 60) is text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional


class YamlRefused(Exception):
    """What stops yaml.v3 (or the Pulumi CLI) from reading a file; ``path`` is where."""

    def __init__(self, message: str, path: tuple[Any, ...] = (), kind: str = ""):
        super().__init__(message)
        self.message = message
        self.path = path
        self.kind = kind  # "syntax": not YAML; "depth": nested too deep; "tag": a tag that does not fit


# yaml.v3's short tags.
STR, BOOL, INT, FLOAT, NULL, TIMESTAMP, BINARY, MERGE, MAP, SEQ = (
    "!!str",
    "!!bool",
    "!!int",
    "!!float",
    "!!null",
    "!!timestamp",
    "!!binary",
    "!!merge",
    "!!map",
    "!!seq",
)
_LONG_TAG_PREFIX = "tag:yaml.org,2002:"
RESOLVABLE = {"", STR, BOOL, INT, FLOAT, NULL, TIMESTAMP}


_RESOLVE_MAP: dict[str, tuple[str, Any]] = {}
for _value, _tag, _words in (
    (True, BOOL, ("true", "True", "TRUE")),
    (False, BOOL, ("false", "False", "FALSE")),
    (None, NULL, ("", "~", "null", "Null", "NULL")),
    (math.nan, FLOAT, (".nan", ".NaN", ".NAN")),
    (math.inf, FLOAT, (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")),
    (-math.inf, FLOAT, ("-.inf", "-.Inf", "-.INF")),
    ("<<", MERGE, ("<<",)),
):
    for _word in _words:
        _RESOLVE_MAP[_word] = (_tag, _value)

# resolveTable: the first character's class (S sign, D digit, M in the map, . float).
_HINT = {"+": "S", "-": "S", ".": "."}
_HINT.update({c: "D" for c in "0123456789"})
_HINT.update({c: "M" for c in "yYnNtTfFoO~"})

_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
# What Go's strconv.ParseFloat accepts from a text starting with '.' (underscores between digits).
_DOT_FLOAT = re.compile(r"\.[0-9](_?[0-9])*([eE][-+]?[0-9](_?[0-9])*)?")


def _go_parse_uint(text: str, base: int) -> Optional[int]:
    """Go's strconv.ParseUint(text, base, 64), or None where it fails."""
    if not text or not text.isascii():
        return None
    base0 = base == 0
    if base0:
        base = 10
        if text[0] == "0":
            prefix = text[1:2].lower()
            if len(text) >= 3 and prefix in ("b", "o", "x"):
                base, text = {"b": 2, "o": 8, "x": 16}[prefix], text[2:]
            else:
                base, text = 8, text[1:]
    n = 0
    for c in text:
        if c == "_" and base0:
            continue  # yaml.v3 removes underscores before it parses, so none are left here
        if "0" <= c <= "9":
            digit = ord(c) - ord("0")
        elif "a" <= c.lower() <= "z":
            digit = ord(c.lower()) - ord("a") + 10
        else:
            return None
        if digit >= base:
            return None
        n = n * base + digit
        if n >= 1 << 64:
            return None
    return n


def _go_parse_int(text: str, base: int) -> Optional[int]:
    """Go's strconv.ParseInt(text, base, 64), or None where it fails."""
    if not text:
        return None
    negative = text[0] == "-"
    unsigned = _go_parse_uint(text[1:] if text[0] in "+-" else text, base)
    if unsigned is None or unsigned > (1 << 63) - (0 if negative else 1):
        return None
    return -unsigned if negative else unsigned


def _go_parse_float(text: str) -> Optional[float]:
    """Go's strconv.ParseFloat(text, 64) for the decimal texts yaml.v3 passes it; None where it
    fails (out of range: Go returns an error where Python returns an infinity)."""
    value = float(text.replace("_", ""))
    return None if math.isinf(value) else value


def resolve(tag: str, text: str) -> tuple[str, Any]:
    """yaml.v3 resolve(): the tag and value of a scalar ``text`` (``tag`` "" for an untagged
    plain scalar, else its explicit short tag). Raises ``YamlRefused`` where yaml.v3 fails."""
    if tag not in RESOLVABLE:
        return tag, text
    rtag, value = _resolve_untagged(tag, text)
    if tag in ("", rtag, STR):
        return rtag, value
    if tag == FLOAT and rtag == INT:
        return FLOAT, float(value)
    raise YamlRefused(f"cannot decode {rtag} `{text}` as a {tag}", kind="tag")


def _resolve_untagged(tag: str, text: str) -> tuple[str, Any]:
    hint = _HINT.get(text[:1], "N" if not text else "")
    if not hint or tag == STR:
        return STR, text
    if text in _RESOLVE_MAP:
        return _RESOLVE_MAP[text]
    if hint == ".":
        if _DOT_FLOAT.fullmatch(text):
            value = _go_parse_float(text)
            if value is not None:
                return FLOAT, value
    elif hint in ("D", "S"):
        if tag in ("", TIMESTAMP):
            stamp = GoTime.parse(text)
            if stamp is not None:
                return TIMESTAMP, stamp
        plain = text.replace("_", "")
        number = _go_parse_int(plain, 0)
        if number is None:
            number = _go_parse_uint(plain, 0)
        if number is not None:
            return INT, number
        if _YAML_STYLE_FLOAT.fullmatch(plain):
            value = _go_parse_float(plain)
            if value is not None:
                return FLOAT, value
        # Fallbacks of resolve.go for 0b/-0b/0o/-0o (they parse the rest in that base, sign and all).
        for prefix, base in (("0b", 2), ("0o", 8)):
            if plain.startswith(prefix):
                number = _go_parse_int(plain[2:], base)
                if number is None:
                    number = _go_parse_uint(plain[2:], base)
            elif plain.startswith("-" + prefix):
                number = _go_parse_int("-" + plain[3:], base)
            if number is not None:
                return INT, number
    return STR, text


# resolve.go allowedTimestampFormats, as Go's time.Parse reads them: "2006-1-2T15:4:5.999999999Z07:00"
# (T or t), "2006-1-2 15:4:5.999999999" (no zone) and "2006-1-2"; month, day, hour, minute and
# second take 1 or 2 digits, the fraction any number of digits after '.' or ','.
_DATE = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})")
_DATE_TIME = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})([Tt ])([0-9]{1,2}):([0-9]{1,2}):([0-9]{1,2})(?:[.,]([0-9]+))?(Z|[-+][0-9]{2}:[0-9]{2})?")


@dataclass(frozen=True)
class GoTime:
    """A timestamp as Go's time.Parse reads it with yaml.v3's layouts (resolve.go
    allowedTimestampFormats), in UTC or at a fixed offset."""

    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    nanosecond: int = 0
    offset: int = 0  # seconds east of UTC

    @classmethod
    def parse(cls, text: str) -> Optional[GoTime]:
        date = _DATE.fullmatch(text)
        if date:
            return cls._checked(*(int(g) for g in date.groups()))
        m = _DATE_TIME.fullmatch(text)
        if not m:
            return None
        year, month, day, sep, hour, minute, second, frac, zone = m.groups()
        if (sep == " ") == (zone is not None):  # a zone with T/t (Z or +hh:mm), none with a space
            return None
        nanos = int((frac or "")[:9].ljust(9, "0"))
        offset = 0
        if zone and zone != "Z":
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 24 or minutes > 60:
                return None
            offset = (hours * 60 + minutes) * 60 * (-1 if zone[0] == "-" else 1)
        return cls._checked(int(year), int(month), int(day), int(hour), int(minute), int(second), nanos, offset)

    @classmethod
    def _checked(cls, year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, nanos: int = 0, offset: int = 0) -> Optional[GoTime]:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        if not (1 <= month <= 12 and 1 <= day <= days[month - 1] and hour < 24 and minute < 60 and second < 60):
            return None
        return cls(year, month, day, hour, minute, second, nanos, offset)

    def _fraction(self) -> str:
        return "." + f"{self.nanosecond:09d}".rstrip("0") if self.nanosecond else ""

    def _numeric_offset(self, colon: bool) -> str:
        minutes = abs(self.offset) // 60
        return f"{'-' if self.offset < 0 else '+'}{minutes // 60:02d}{':' if colon else ''}{minutes % 60:02d}"

    def go_string(self) -> str:
        """Go's time.Time.String(): what Pulumi hands the program for a timestamp. Go names a zone
        by the machine's local zone when the offset matches it: taken here for UTC, so an offset of
        zero reads "+0000 UTC" and others "-0500 -0500"."""
        zone = "+0000 UTC" if self.offset == 0 else f"{self._numeric_offset(False)} {self._numeric_offset(False)}"
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d} {self.hour:02d}:{self.minute:02d}:{self.second:02d}{self._fraction()} {zone}"

    def rfc3339(self) -> str:
        """Go's time.RFC3339Nano form (json.Marshal of a time.Time)."""
        zone = "Z" if self.offset == 0 else self._numeric_offset(True)
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}T{self.hour:02d}:{self.minute:02d}:{self.second:02d}{self._fraction()}{zone}"
