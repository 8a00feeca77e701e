"""CloudWatch semantics, small and offline, for the alert tests: a metric filter's JSON pattern on a
log record, an alarm's evaluation on a series, and a dashboard body's structure.

- Filter patterns: the JSON subset the stack writes, ``{ SELECTOR OP VALUE [&& ...] }`` with ``=`` /
  ``!=``, a quoted string (a trailing ``*`` matches any rest) or a number (CloudWatch Logs user
  guide, "Filter pattern syntax for metric filters": "Using filter patterns to match terms in JSON
  log events"; a selector that names no field of the event does not match).
- Alarms: CloudWatch user guide, "Evaluating an alarm": each evaluation reads the last
  ``evaluation_periods`` periods; the alarm goes to ALARM when at least ``datapoints_to_alarm`` of
  them breach; missing datapoints per ``treat_missing_data`` (notBreaching: good; breaching: bad;
  ignore: the state stays; missing: left out, and with every one missing INSUFFICIENT_DATA).
  Metric math: the expressions the stack writes, ``MAX([ids])`` and ``SUM([ids])`` (a period with no
  data in any of them has no value).
- Dashboards: CloudWatch API reference, "Dashboard Body Structure and Syntax": ``widgets`` (at most
  500), each with a ``type``, ``x`` 0-23, ``y`` >= 0, ``width`` 1-24 and ``height`` 1-1000 in a grid of 24
  columns, and ``properties``; a metric widget's ``metrics`` are arrays ``[namespace, name, (dimension
  name, value)*, {rendering options}?]`` or an expression ``[{"expression": ..., "id": ...}]``, its
  ``stat`` one of the statistics, ``period`` a multiple of 60, ``view`` timeSeries, singleValue,
  gauge, bar or pie; a text widget's ``markdown``. And one rule of this stack's own: no two widgets
  of a computed layout overlap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from components.alerts import AlarmSpec

# ---------------------------------------------------------------------------------------------
# Metric filter patterns
# ---------------------------------------------------------------------------------------------

_TERM = re.compile(r'^\s*(\$(?:\.[A-Za-z0-9_]+)+)\s*(=|!=)\s*("(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?)\s*$')


def select(record: Mapping[str, Any], selector: str) -> Any:
    """The value at ``$.a.b`` in ``record``; KeyError when a step is missing or no object."""
    node: Any = record
    for step in selector[2:].split("."):
        if not isinstance(node, Mapping) or step not in node:
            raise KeyError(selector)
        node = node[step]
    return node


def _term_matches(record: Mapping[str, Any], term: str) -> bool:
    m = _TERM.match(term)
    if m is None:
        raise ValueError(f"not a term of the supported JSON subset: {term!r}")
    selector, op, raw = m.groups()
    try:
        value = select(record, selector)
    except KeyError:
        return False
    if raw.startswith('"'):
        want = raw[1:-1]
        if not isinstance(value, str):
            hit = False
        elif want.endswith("*"):
            hit = value.startswith(want[:-1])
        else:
            hit = value == want
    else:
        hit = isinstance(value, (int, float)) and not isinstance(value, bool) and value == float(raw)
    return hit if op == "=" else not hit


def pattern_matches(pattern: str, record: Mapping[str, Any]) -> bool:
    p = pattern.strip()
    if not (p.startswith("{") and p.endswith("}")):
        raise ValueError(f"not a JSON filter pattern: {pattern!r}")
    return all(_term_matches(record, t) for t in p[1:-1].split("&&"))


def metric_event(f: Any, record: Mapping[str, Any]) -> tuple[float, dict[str, str]] | None:
    """What metric filter ``f`` (a MetricFilterSpec) publishes for ``record``: (value, dimensions), or
    None when it does not match (or a value or dimension selector names no field: CloudWatch then
    publishes nothing for the event)."""
    if not pattern_matches(f.pattern, record):
        return None
    try:
        value = float(select(record, f.value)) if f.value.startswith("$.") else float(f.value)
        dims = {name: str(select(record, sel)) for name, sel in f.dimensions.items()}
    except (KeyError, TypeError, ValueError):
        return None
    return value, dims


# ---------------------------------------------------------------------------------------------
# Alarms
# ---------------------------------------------------------------------------------------------

# A series: per metric key (namespace, name, sorted dimensions), one value per period, None: no data.
Series = Mapping[tuple[str, str, tuple[tuple[str, str], ...]], Sequence[float | None]]


def key(namespace: str, metric: str, dimensions: Mapping[str, str]) -> tuple[str, str, tuple[tuple[str, str], ...]]:
    return namespace, metric, tuple(sorted(dimensions.items()))


_EXPR = re.compile(r"^(MAX|SUM)\(\[([a-z0-9_, ]+)\]\)$")


def alarm_values(a: AlarmSpec, series: Series, periods: int) -> list[float | None]:
    """The alarm's value per period: its metric's, or its expression's over its metrics."""
    columns = {m.id: list(series.get(key(m.namespace, m.metric, m.dimensions), [None] * periods)) for m in a.metrics}
    if a.expression is None:
        return columns[a.metrics[0].id]
    m = _EXPR.match(a.expression)
    if m is None:
        raise ValueError(f"expression not evaluated here: {a.expression!r}")
    fn, ids = m.group(1), [i.strip() for i in m.group(2).split(",")]
    out: list[float | None] = []
    for t in range(periods):
        present = [v for i in ids if (v := columns[i][t]) is not None]
        out.append(None if not present else (max(present) if fn == "MAX" else sum(present)))
    return out


def _breaches(a: AlarmSpec, v: float) -> bool:
    return {
        "GreaterThanOrEqualToThreshold": v >= a.threshold,
        "GreaterThanThreshold": v > a.threshold,
        "LessThanThreshold": v < a.threshold,
        "LessThanOrEqualToThreshold": v <= a.threshold,
    }[a.comparison]


def evaluate(a: AlarmSpec, series: Series, periods: int) -> list[str]:
    """The alarm's state after each period (OK, ALARM, INSUFFICIENT_DATA)."""
    values = alarm_values(a, series, periods)
    state, states = "INSUFFICIENT_DATA", []
    for t in range(periods):
        window = values[max(0, t + 1 - a.evaluation_periods) : t + 1]
        marks = [None if v is None else _breaches(a, v) for v in window]
        if a.treat_missing_data in ("notBreaching", "breaching"):
            marks = [(a.treat_missing_data == "breaching") if b is None else b for b in marks]
        present = [b for b in marks if b is not None]
        if not present:
            state = state if a.treat_missing_data == "ignore" else "INSUFFICIENT_DATA"
        elif sum(present) >= a.datapoints_to_alarm:
            state = "ALARM"
        elif len(window) == a.evaluation_periods or a.treat_missing_data != "missing":
            state = "OK"
        states.append(state)
    return states


def fired(a: AlarmSpec, series: Series, periods: int) -> bool:
    return "ALARM" in evaluate(a, series, periods)


# ---------------------------------------------------------------------------------------------
# Dashboards
# ---------------------------------------------------------------------------------------------

GRID = 24
WIDGET_TYPES = {"metric", "text", "log", "alarm", "explorer"}
VIEWS = {"timeSeries", "singleValue", "gauge", "bar", "pie", "table"}
STATS = {"SampleCount", "Average", "Sum", "Minimum", "Maximum"}


def _metric_line_problems(i: int, line: Any) -> list[str]:
    if isinstance(line, list) and len(line) == 1 and isinstance(line[0], dict) and "expression" in line[0]:
        return [] if isinstance(line[0]["expression"], str) else [f"widget {i}: an expression must be a string"]
    if not isinstance(line, list) or len(line) < 2:
        return [f"widget {i}: a metric line is not [namespace, name, ...]: {line!r}"]
    body = line[:-1] if isinstance(line[-1], dict) else line
    out = []
    if not all(isinstance(x, str) for x in body) or len(body) % 2:
        out.append(f"widget {i}: namespace, name and (dimension, value) pairs must be strings: {line!r}")
    if isinstance(line[-1], dict) and line[-1].get("stat", "Average") not in STATS:
        out.append(f"widget {i}: stat {line[-1]['stat']!r} is not a statistic")
    return out


def _widget_problems(i: int, w: Mapping[str, Any]) -> list[str]:
    out = []
    if w.get("type") not in WIDGET_TYPES:
        out.append(f"widget {i}: type {w.get('type')!r} not in {sorted(WIDGET_TYPES)}")
    x, y, width, height = (w.get(k) for k in ("x", "y", "width", "height"))
    if not all(isinstance(v, int) for v in (x, y, width, height)):
        return [*out, f"widget {i}: x, y, width and height must be integers"]
    if not (0 <= x < GRID and y >= 0 and 1 <= width <= GRID and 1 <= height <= 1000 and x + width <= GRID):
        out.append(f"widget {i}: ({x}, {y}, {width}x{height}) is off the 24-column grid")
    p = w.get("properties")
    if not isinstance(p, Mapping):
        return [*out, f"widget {i}: no properties"]
    if w.get("type") == "text" and not isinstance(p.get("markdown"), str):
        out.append(f"widget {i}: a text widget needs markdown")
    if w.get("type") == "metric":
        if p.get("view", "timeSeries") not in VIEWS or p.get("stat", "Average") not in STATS:
            out.append(f"widget {i}: view {p.get('view')!r} or stat {p.get('stat')!r} not allowed")
        if p.get("period", 60) % 60 or not isinstance(p.get("region"), str):
            out.append(f"widget {i}: period must be a multiple of 60 and region given")
        if not p.get("metrics"):
            out.append(f"widget {i}: a metric widget needs metrics")
        for line in p.get("metrics", []):
            out += _metric_line_problems(i, line)
    return out


def _overlaps(widgets: Sequence[Mapping[str, Any]]) -> list[str]:
    cells: dict[tuple[int, int], int] = {}
    out = []
    for i, w in enumerate(widgets):
        for cx in range(w["x"], w["x"] + w["width"]):
            for cy in range(w["y"], w["y"] + w["height"]):
                if (cx, cy) in cells:
                    out.append(f"widget {i} overlaps widget {cells[cx, cy]} at ({cx}, {cy})")
                    return out
                cells[cx, cy] = i
    return out


def dashboard_problems(body: Mapping[str, Any]) -> list[str]:
    widgets = body.get("widgets")
    if not isinstance(widgets, list) or not 1 <= len(widgets) <= 500:
        return ["widgets must be a list of 1 to 500 widgets"]
    out = [p for i, w in enumerate(widgets) for p in _widget_problems(i, w)]
    return out or _overlaps(widgets)
