"""Go durations, for the settings of Go programs the stack configures that Go reads with
``time.ParseDuration``: the Cluster Autoscaler's ``--scale-down-unneeded-time`` and
``--scale-down-delay-after-add`` (``flag.Duration``s) and Kueue's ``waitForPodsReady.timeout``.

The grammar, as Go documents it ("a possibly signed sequence of decimal numbers, each with
optional fraction and a unit suffix, such as "300ms", "-1.5h" or "2h45m""), with the bare "0":

    duration  = [ "+" | "-" ] ( "0" | component { component } )
    component = number unit
    number    = digits [ "." [ digits ] ] | "." digits        digits: ASCII 0-9 only
    unit      = "ns" | "us" | "µs" (U+00B5) | "μs" (U+03BC) | "ms" | "s" | "m" | "h"

``SYNTAX`` is that grammar as one regular expression. A duration is an int64 of nanoseconds: Go
refuses one beyond 2**63 - 1 ns (about 292 years) and takes -2**63. Each component's fraction is
turned into nanoseconds through a float64 and truncated (``int(digits * (unit / 10**len))``), as
Go does: "0.3333333333333333333h" is 20m. Like Go, only a fraction's first 18 or 19 significant
digits count (those whose value fits 2**63); the rest are worth less than a millionth of a
nanosecond.

What Go refuses is refused with Go's words (the text quoted with Python's quotes): "time:
invalid duration", "time: missing unit in duration" (a number without a unit) or "time: unknown
unit 'd' in duration" (the unit being everything up to the next digit or ".", as Go reads it).
"""

from __future__ import annotations

import re

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
LIMIT = 1 << 63  # a negative duration reaches -LIMIT, a positive one LIMIT - 1

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_UNIT = "|".join(sorted(UNITS, key=len, reverse=True))
SYNTAX = re.compile(rf"[-+]?(?:0|(?:{_NUMBER}(?:{_UNIT}))+)")

# How Go reads one component, to say what is wrong with it: digits, a fraction, then the unit as
# everything up to the next digit or "."
_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


class DurationError(ValueError):
    """What Go's ``time.ParseDuration`` says of a duration it refuses."""


def parse_go_duration(text: str) -> int:
    """The duration ``text`` in nanoseconds, or ``DurationError`` where Go refuses it."""
    invalid = DurationError(f"time: invalid duration {text!r}")
    body = text[1:] if text[:1] in ("-", "+") else text
    if body == "0":
        return 0
    if not body:
        raise invalid
    total, at = 0, 0
    while at < len(body):
        part = _PART.match(body, at)
        assert part is not None  # every group may be empty
        at = part.end()
        whole, fraction, unit_text = part.group(1), part.group(2) or "", part.group(3)
        value = whole.lstrip("0")
        if not (whole or fraction) or len(value) > 19 or int(value or 0) > LIMIT:
            raise invalid
        if not unit_text:
            raise DurationError(f"time: missing unit in duration {text!r}")
        unit = UNITS.get(unit_text)
        if unit is None:
            raise DurationError(f"time: unknown unit {unit_text!r} in duration {text!r}")
        total += int(value or 0) * unit
        # Go reads a fraction's digits while their value fits 2**63: 18 or 19 after any leading zeros.
        significant = fraction.lstrip("0")
        kept = significant[:19] if int(significant[:19] or 0) <= LIMIT else significant[:18]
        if kept:
            total += int(int(kept) * (unit / 10 ** (len(fraction) - len(significant) + len(kept))))
        if total > LIMIT:
            raise invalid
    if text[:1] == "-":
        return -total
    if total == LIMIT:
        raise invalid
    return total


def go_duration_problem(text: str | object) -> str | None:
    """Why Go's ``time.ParseDuration`` refuses ``text``, or None."""
    if not isinstance(text, str):
        return "not text"
    try:
        parse_go_duration(text)
    except DurationError as err:
        return str(err)
    return None
