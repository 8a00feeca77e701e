"""A config's queue plan made once per program run and per plan command (``stacks.queues.plans_kept``):
the alerts, cost, autoscaler and queues ask for it a dozen times. Each rule of the memory is broken once:
outside the scope nothing is kept, another config object is planned anew, and the scope ends."""

from __future__ import annotations

import io
from typing import Any

import pytest

from infra import plan
from stacks import queues
from stacks.queues import plan as queue_plan
from tests.helpers import dev_values, load_values, run_stack


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The configs a queue plan was made of, in order."""
    configs: list[Any] = []
    make = queue_plan._plan_for
    monkeypatch.setattr(queue_plan, "_plan_for", lambda cfg: configs.append(cfg) or make(cfg))
    return configs


def test_inside_the_scope_a_configs_plan_is_made_once(made):
    cfg = load_values(dev_values())
    with queues.plans_kept():
        first = queues.plan_for(cfg)
        assert first is not None and queues.plan_for(cfg) is first
    assert made == [cfg]


def test_outside_the_scope_each_call_makes_the_plan(made):
    cfg = load_values(dev_values())
    assert queues.plan_for(cfg) == queues.plan_for(cfg)
    assert made == [cfg, cfg]


def test_another_config_object_is_planned_anew_and_the_memory_ends_with_the_scope(made):
    values = dev_values()
    one, other = load_values(values), load_values(values)
    with queues.plans_kept():
        queues.plan_for(one)
        queues.plan_for(other)
    with queues.plans_kept():
        queues.plan_for(one)
    assert made == [one, other, one]


def test_a_program_run_makes_its_configs_queue_plan_once(made):
    run_stack(dev_values(), stack="dev")  # (patched: planned afresh, conftest.py)
    assert len(made) == 1


def test_the_plan_command_makes_each_configs_queue_plan_once(made, tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert plan.run_cli("dev", str(tmp_path / "plan"), stdout=out, stderr=err, verbose=True) == plan.EXIT_OK
    assert len(made) == 2  # the program's config and the command's
