"""The plan's JSON files: ``json_text`` lays out the text of ``json.dumps(value, indent=2,
ensure_ascii=False)`` byte for byte (its own walk, several times quicker), and leaves what it does not
know to ``json.dumps``."""

from __future__ import annotations

import enum
import json
import random
from typing import Any

import pytest

from infra.plan_text import json_text

SCALARS: list[Any] = [None, True, False, 0, -3, 2**70, 1.5, 1e16, -0.0, float("nan"), float("inf"), float("-inf")]
TEXTS = ["", 'é\n"\\\u2028x', "a\x00b", "\ud800", "\U0001f600"]


class Colour(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    BIG = 2


def _reference(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 4 or roll < 0.4:
        return rng.choice([*SCALARS, *TEXTS, Colour.RED, Size.BIG])
    if roll < 0.7:
        items = [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        return items if rng.random() < 0.8 else tuple(items)
    return {rng.choice(["a", "é", "", 'k"']): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_the_text_is_json_dumps_text_for_generated_values():
    rng = random.Random(7)
    for _ in range(3000):
        value = _value(rng)
        assert json_text(value) == _reference(value), value


def test_the_text_of_a_plan_is_json_dumps_text(dev_plan):
    records = [r.as_json() for r in dev_plan.records]
    assert json_text(records) == _reference(records)
    assert json_text(dev_plan.outputs) == _reference(dev_plan.outputs)


@pytest.mark.parametrize("value", [{1: "a", "b": [2.5]}, {True: None}, {"x": [{None: 1}]}])
def test_keys_that_are_not_strings_are_json_dumps_own(value):
    assert json_text(value) == _reference(value)


def test_what_json_refuses_it_refuses_too():
    with pytest.raises(TypeError):
        json_text({"x": {1, 2}})
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="Circular reference"):
        json_text(cycle)
