"""Go's duration syntax, for the flags of Go programs the stack configures (the Cluster Autoscaler's
``--scale-down-unneeded-time`` and the like are ``flag.Duration``s, read by ``time.ParseDuration``).

``parse_go_duration`` accepts exactly what Go's ``time.ParseDuration`` accepts (Go 1.22 to 1.26,
src/time/format.go): an optional sign, then one or more of a decimal number (``1``, ``1.5``, ``.5``,
``5.``) with a unit, ``ns``, ``us`` (or ``µs`` U+00B5, ``μs`` U+03BC), ``ms``, ``s``, ``m``, ``h``,
as in ``1h30m`` or ``1.5h``; or ``0`` alone. The result is in nanoseconds, within int64, computed as
Go computes it (fractions through a float64).
"""

from __future__ import annotations

from typing import Union

NANOSECOND = 1
MICROSECOND = 1000 * NANOSECOND
MILLISECOND = 1000 * MICROSECOND
SECOND = 1000 * MILLISECOND
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
UNITS = {
    "ns": NANOSECOND,
    "us": MICROSECOND,
    "\u00b5s": MICROSECOND,  # U+00B5 micro sign
    "\u03bcs": MICROSECOND,  # U+03BC Greek small letter mu
    "ms": MILLISECOND,
    "s": SECOND,
    "m": MINUTE,
    "h": HOUR,
}
_MAX = 1 << 63  # Go works in uint64 and allows 1<<63 only for a negative duration


class DurationError(ValueError):
    """What Go's ``time.ParseDuration`` would say (the same wording)."""


def _digit(c: str) -> bool:
    return "0" <= c <= "9"  # Go compares bytes: other scripts' digits are not digits


def _leading_int(s: str) -> tuple[int, str]:
    x, i = 0, 0
    while i < len(s) and _digit(s[i]):
        if x > _MAX // 10:
            raise OverflowError
        x = x * 10 + ord(s[i]) - ord("0")
        if x > _MAX:
            raise OverflowError
        i += 1
    return x, s[i:]


def _leading_fraction(s: str) -> tuple[int, float, str]:
    x, scale, i, overflow = 0, 1.0, 0, False
    while i < len(s) and _digit(s[i]):
        if not overflow:
            if x > (_MAX - 1) // 10:
                overflow = True
            else:
                y = x * 10 + ord(s[i]) - ord("0")
                if y > _MAX:
                    overflow = True
                else:
                    x = y
                    scale *= 10
        i += 1
    return x, scale, s[i:]


def parse_go_duration(text: str) -> int:
    """The duration ``text`` in nanoseconds, or ``DurationError`` where Go's parser fails."""
    orig, s, neg = text, text, False
    invalid = DurationError(f"time: invalid duration {orig!r}")
    if s and s[0] in "-+":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if s == "":
        raise invalid
    d = 0
    while s:
        if not (s[0] == "." or _digit(s[0])):
            raise invalid
        before = len(s)
        try:
            v, s = _leading_int(s)
        except OverflowError:
            raise invalid from None
        pre = before != len(s)
        post = False
        f, scale = 0, 1.0
        if s and s[0] == ".":
            s = s[1:]
            before = len(s)
            f, scale, s = _leading_fraction(s)
            post = before != len(s)
        if not pre and not post:
            raise invalid
        i = 0
        while i < len(s) and not (s[i] == "." or _digit(s[i])):
            i += 1
        if i == 0:
            raise DurationError(f"time: missing unit in duration {orig!r}")
        unit_text, s = s[:i], s[i:]
        unit = UNITS.get(unit_text)
        if unit is None:
            raise DurationError(f"time: unknown unit {unit_text!r} in duration {orig!r}")
        if v > _MAX // unit:
            raise invalid
        v *= unit
        if f > 0:
            v += int(float(f) * (float(unit) / scale))
            if v > _MAX:
                raise invalid
        d += v
        if d > _MAX:
            raise invalid
    if neg:
        return -d
    if d > _MAX - 1:
        raise invalid
    return d


def go_duration_problem(text: Union[str, object]) -> "str | None":
    """Why Go's ``time.ParseDuration`` refuses ``text``, or None."""
    if not isinstance(text, str):
        return "not text"
    try:
        parse_go_duration(text)
    except DurationError as err:
        return str(err)
    return None
