"""The offline engine's test for unknown values (infra/offline/unknowns.py) answers as the SDK's
``rpc.contains_unknowns``: a table of values, and every value a dev plan asks about (so the plan is the one
the SDK's walk gives: the program sees the same answers)."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from pulumi.output import UNKNOWN
from pulumi.runtime import rpc

from infra.offline import unknowns
from tests import plan_memo
from tests.helpers import dev_values, run_stack

SDK = rpc.contains_unknowns  # (outside a run: the SDK's own)
FLAT = unknowns.contains_unknowns


@pulumi.output_type
class _Status(dict):
    """An output type, as generated SDKs make them: a dict subclass with properties (one named ``values``)."""

    def __init__(self, values: Any, phase: Any):
        pulumi.set(self, "values", values)
        pulumi.set(self, "phase", phase)

    @property
    @pulumi.getter
    def values(self) -> Any:  # type: ignore[override]
        return pulumi.get(self, "values")

    @property
    @pulumi.getter
    def phase(self) -> Any:
        return pulumi.get(self, "phase")


def _cycle(tail: Any) -> list[Any]:
    looped: list[Any] = [1]
    looped.append(looped)
    looped.append(tail)
    return looped


SHARED = {"a": [1, 2]}
CASES = {
    "unknown itself": UNKNOWN,
    "a string": "x",
    "None": None,
    "an empty dict": {},
    "a flat dict": {"a": 1, "b": "two"},
    "unknown in a dict": {"a": 1, "b": UNKNOWN},
    "unknown deep in lists and dicts": {"a": [{"b": [[{"c": UNKNOWN}]]}]},
    "unknown as a key only": {UNKNOWN: 1},
    "unknown in a tuple (not looked into)": {"a": (UNKNOWN,)},
    "unknown in a set (not looked into)": [{1, 2}, frozenset()],
    "a list that holds itself": _cycle("x"),
    "a list that holds itself, then unknown": _cycle(UNKNOWN),
    "one dict twice": [SHARED, SHARED, {"b": SHARED}],
    "an output type with a `values` property": _Status(values=[1, 2], phase="Running"),
    "an output type holding unknown": _Status(values=[1, UNKNOWN], phase="Running"),
    "unknown under an output type in a list": [{"x": _Status(values=None, phase=UNKNOWN)}],
}


@pytest.mark.parametrize("value", CASES.values(), ids=CASES.keys())
def test_the_flat_walk_answers_as_the_sdk(value):
    assert unknowns.contains_unknowns(value) is SDK(value)


def test_the_table_has_both_answers():
    answers = [SDK(value) for value in CASES.values()]
    assert answers.count(True) >= 5 and answers.count(False) >= 5


def test_every_value_a_plan_asks_about_gets_the_sdks_answer(monkeypatch):
    asked: list[bool] = []
    differ: list[Any] = []

    def both(value: Any) -> bool:
        answer = FLAT(value)
        if answer is not SDK(value):
            differ.append(value)
        asked.append(answer)
        return answer

    monkeypatch.setattr(unknowns, "contains_unknowns", both)
    with plan_memo.fresh_plans():
        run_stack(dev_values(), "dev")
    assert not differ
    assert len(asked) > 1000  # (the SDK asks of every output's value)
    assert rpc.contains_unknowns is SDK  # (put back after the run)
