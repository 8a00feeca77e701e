"""A capacity block's group against the clock (issue 24, item 4): what the program registers, sets
and holds back at five times around the block (far before it, just before its start, inside it,
just before the scale-down, in the drain and after the end), taken from the one clock
``components.node_scaling.utc_now``; and what preflight and the plan summary say while the window
is open.

(a) An `up` shortly before the start must not register a start action Auto Scaling would refuse,
and any `up` inside the window must leave the group at its block's size, whatever ran before: the
program then sends the desired size itself (not ignored), and `refresh: always` reads the running
size, so Pulumi sends UpdateNodegroupConfig exactly when the group is short.
(b) EKS upgrades a capacity-block group only at desired size 0: inside the window the node group
inputs EKS would apply by upgrading or replacing it keep their state values, with a warning.
"""

from __future__ import annotations

import datetime
import io
from typing import Any

import pulumi
import pulumi_aws as aws
import pytest

from components import node_scaling
from components.node_scaling import HELD_BACK, SCHEDULE_LEAD
from facts.catalog import CAPACITY_BLOCK_DRAIN
from infra import plan as plan_cli
from infra import preflight
from tests.aws_stubs import new_session
from tests.helpers import (
    END,
    START,
    answer_ec2,
    block_group,
    block_reservation,
    block_values,
    capacity_block,
    load_values,
    run_stack,
)

MNG = "aws:eks/nodeGroup:NodeGroup"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
DOWN = END - CAPACITY_BLOCK_DRAIN
MINUTE = datetime.timedelta(minutes=1)
DESIRED = "scalingConfig.desiredSize"

# (name, now, phase, desired size sent, sent on every `up`, actions registered, held back)
TIMES = [
    ("far before", START - datetime.timedelta(days=2), "before", 0, False, ["block-start", "block-end"], False),
    ("just before the start", START - 10 * MINUTE, "open", 2, True, ["block-end"], True),
    ("the lead's first minute", START - SCHEDULE_LEAD, "open", 2, True, ["block-end"], True),
    ("inside the window", START + datetime.timedelta(hours=3), "open", 2, True, ["block-end"], True),
    ("just before the scale-down", DOWN - 5 * MINUTE, "closing", 0, False, ["block-end"], True),
    ("in the drain", DOWN + 10 * MINUTE, "draining", 0, True, [], True),
    ("after the end", END + datetime.timedelta(days=1), "over", 0, True, [], False),
]


@pytest.mark.parametrize("name, now, phase, desired, steered, actions, held", TIMES, ids=[t[0] for t in TIMES])
def test_the_plan_at_each_time(name, now, phase, desired, steered, actions, held):
    block = node_scaling.capacity_block_plan(START, END, 2, now)
    assert (block.phase, block.desired, block.steered, block.held) == (phase, desired, steered, held)
    assert [a.suffix for a in block.actions] == actions
    # No action is ever registered closer than the lead unless it may already exist (the scale-down
    # in its last lead): a new start action can never be refused.
    assert all(a.at - now > SCHEDULE_LEAD for a in block.actions if a.suffix == "block-start")


def test_the_clock_is_the_default(monkeypatch):
    monkeypatch.setattr(node_scaling, "utc_now", lambda: START + MINUTE)
    assert node_scaling.capacity_block_plan(START, END, 2).phase == "open"


def test_the_held_inputs_are_node_group_inputs():
    args = aws.eks.NodeGroupArgs
    inputs = {getattr(v.fget, "_pulumi_name", k) for k, v in vars(args).items() if isinstance(v, property)}
    assert set(HELD_BACK) <= inputs
    # What UpdateNodegroupConfig changes with the group running is not held back.
    assert not {"labels", "taints", "scalingConfig", "updateConfig", "nodeRepairConfig", "tags"} & set(HELD_BACK)


def plan_at(monkeypatch, now: datetime.datetime, **over: Any) -> tuple[Any, list[str]]:
    """The test stack's plan with the clock at ``now``, and the warnings the program logged."""
    warned: list[str] = []
    real_warn = pulumi.log.warn
    monkeypatch.setattr(node_scaling, "utc_now", lambda: now)
    monkeypatch.setattr(pulumi.log, "warn", lambda msg, *a, **k: (warned.append(msg), real_warn(msg, *a, **k)))
    return run_stack(block_values(block_group(**over))), warned


@pytest.mark.parametrize("name, now, phase, desired, steered, actions, held", TIMES, ids=[t[0] for t in TIMES])
def test_the_program_at_each_time(monkeypatch, name, now, phase, desired, steered, actions, held):
    plan, warned = plan_at(monkeypatch, now)
    mng = plan.named(MNG, "gpu-h100-mng")
    ignored = mng.options.get("ignoreChanges", [])
    assert mng.inputs["scalingConfig"]["desiredSize"] == desired
    assert (DESIRED not in ignored) == steered
    assert set(HELD_BACK) <= set(ignored) if held else not set(HELD_BACK) & set(ignored)
    assert sorted(r.name for r in plan.of_type(SCHEDULE)) == sorted(f"gpu-h100-{a}" for a in actions)
    said = [w for w in warned if "gpu-training-test-gpu-h100" in w and "held back" in w]
    assert len(said) == (1 if held else 0), warned


def test_an_up_just_before_the_start_registers_no_start_action_and_sets_the_size(monkeypatch):
    # (a): the first `up` ten minutes before the start. The start action's call would come after the
    # start (a first `up` creates the cluster first) and Auto Scaling would refuse it; instead the
    # group is created at its size (EKS: the launches fail until the block is active, then succeed),
    # and the next `up` still sends it.
    plan, _ = plan_at(monkeypatch, START - 10 * MINUTE)
    mng = plan.named(MNG, "gpu-h100-mng")
    assert mng.inputs["scalingConfig"] == {"minSize": 0, "desiredSize": 2, "maxSize": 2}
    assert DESIRED not in mng.options["ignoreChanges"]
    (down,) = plan.of_type(SCHEDULE)
    assert (down.name, down.inputs["startTime"], down.inputs["desiredCapacity"]) == (
        "gpu-h100-block-end",
        "2030-01-02T10:30:00Z",
        0,
    )


def test_inside_the_window_the_group_is_at_its_size_whatever_ran_before(monkeypatch):
    # The failed first `up` left the group at 0 with no start action; an `up` inside the window sends
    # maxSize as the desired size: Pulumi compares it with the refreshed, running size.
    plan, _ = plan_at(monkeypatch, START + datetime.timedelta(hours=5), maxSize=4)
    mng = plan.named(MNG, "gpu-h100-mng")
    assert mng.inputs["scalingConfig"]["desiredSize"] == 4 and DESIRED not in mng.options["ignoreChanges"]


def test_a_change_inside_the_window_is_held_back_with_the_reason(monkeypatch):
    # (b): a Kubernetes bump, a disk size or a stack tag reaches the group as a new version or a new
    # launch template version (UpdateNodegroupVersion), which EKS refuses above desired size 0.
    plan, warned = plan_at(monkeypatch, START + datetime.timedelta(hours=1), diskSizeGiB=900)
    mng = plan.named(MNG, "gpu-h100-mng")
    assert {"version", "launchTemplate", "amiType"} <= set(mng.options["ignoreChanges"])
    assert {"labels", "taints", "tags"}.isdisjoint(mng.options["ignoreChanges"])
    # The launch template itself takes the change (a new version the group does not use yet).
    lt = plan.named("aws:ec2/launchTemplate:LaunchTemplate", "gpu-h100-lt")
    assert lt.inputs["blockDeviceMappings"][0]["ebs"]["volumeSize"] == 900 and "ignoreChanges" not in lt.options
    (text,) = [w for w in warned if "held back" in w]
    assert text.startswith(
        "node group gpu-training-test-gpu-h100: its capacity block's window is open (2030-01-01 11:30 UTC to "
        "2030-01-02 11:30 UTC)"
    )
    assert (
        "held back until 2030-01-02 11:30 UTC" in text and "desired size 0" in text and "the Kubernetes version" in text
    )
    assert "brings the group to 2 nodes (maxSize) if it has fewer, until 2030-01-02 10:10 UTC" in text


def test_outside_the_window_nothing_is_held_back(monkeypatch):
    plan, warned = plan_at(monkeypatch, START - datetime.timedelta(hours=1))
    assert plan.named(MNG, "gpu-h100-mng").options["ignoreChanges"] == [DESIRED]
    assert not [w for w in warned if "held back" in w]


def test_the_plan_summary_says_what_is_held_back(monkeypatch):
    monkeypatch.setattr(node_scaling, "utc_now", lambda: START + datetime.timedelta(hours=1))
    g = load_values(block_values(block_group())).gpu_group("h100")
    assert g is not None
    lines = plan_cli.capacity_lines(g)
    assert (
        lines[0] == "block 2030-01-01 11:30 UTC to 2030-01-02 11:30 UTC: scheduled to 2 nodes at its start and to 0 "
        "at 2030-01-02 10:30 UTC"
    )
    assert lines[1].startswith("HELD BACK (plan time 2030-01-01 12:30 UTC): its capacity block's window is open")
    monkeypatch.setattr(node_scaling, "utc_now", lambda: START - datetime.timedelta(days=1))
    assert len(plan_cli.capacity_lines(g)) == 1


# ---------------------------------------------------------------------------------------------
# Preflight: a WARN line per group whose window is open
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def session(aws):
    return new_session()


def window_lines(session: Any, now: datetime.datetime, monkeypatch) -> list[preflight.CheckResult]:
    monkeypatch.setattr(node_scaling, "utc_now", lambda: now)
    answer_ec2(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": [block_reservation()]})
    answer_ec2(session, "DescribeCapacityBlocks", lambda _b: {"CapacityBlocks": [capacity_block()]})
    results = preflight.run_checks(load_values(block_values(block_group())), session, today=datetime.date(2029, 12, 1))
    return [r for r in results if r.check.startswith("capacity block window")]


def test_preflight_warns_while_the_window_is_open(session, monkeypatch):
    (r,) = window_lines(session, DOWN + MINUTE, monkeypatch)
    assert r.status == preflight.WARN and r.check == "capacity block window (GPU group h100)"
    assert (
        "held back until 2030-01-02 11:30 UTC" in r.detail
        and "brings the group to 0 if the scale-down has not" in r.detail
    )
    assert "waits for the first `pulumi up` after 2030-01-02 11:30 UTC" in r.fix
    assert preflight.report([r], io.StringIO()) == preflight.EXIT_OK


@pytest.mark.parametrize("now", [START - datetime.timedelta(days=1), END + MINUTE])
def test_preflight_is_quiet_outside_the_window(session, monkeypatch, now):
    assert window_lines(session, now, monkeypatch) == []


# ---------------------------------------------------------------------------------------------
# The window written as preflight prints it, unquoted (a YAML timestamp)
# ---------------------------------------------------------------------------------------------


def _stack_file(tmp_path, capacity: str) -> dict[str, Any]:
    from stacks.config.stackfile import read_stack_config
    from tests.helpers import ROOT

    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.t.yaml").write_text(
        "config:\n"
        "  aws:region: us-west-2\n"
        "  gpu-training:gpuAvailabilityZone: us-west-2b\n"
        "  gpu-training:gpuNodeGroups:\n"
        "    - name: h100\n"
        "      instanceType: p5.48xlarge\n"
        "      maxSize: 2\n"
        "      capacityType: capacity-block\n"
        "      capacityReservationId: cr-0123456789abcdef0\n"
        f"      capacity: {capacity}\n"
    )
    return read_stack_config("t", tmp_path)[1]


@pytest.mark.parametrize(
    "capacity",
    [
        "{start: 2030-01-01T11:30:00Z, end: 2030-01-02T11:30:00Z}",  # as preflight prints it, unquoted
        '{start: "2030-01-01T11:30:00Z", end: "2030-01-02T11:30:00Z"}',
        "{start: 2030-01-01 11:30:00, end: 2030-01-02T11:30:00.000Z}",  # (another zone than UTC is refused)
    ],
)
def test_a_window_reads_the_same_whether_its_times_are_quoted_or_yaml_timestamps(tmp_path, capacity):
    from stacks import config as stack_config

    values = _stack_file(tmp_path, capacity)
    g = stack_config.load(values, "gpu-training", "t").gpu_group("h100")
    assert g.capacity_block_window == (START, END)


def test_an_impossible_unquoted_time_is_still_refused_naming_the_key(tmp_path):
    from stacks import config as stack_config

    values = _stack_file(tmp_path, "{start: 2030-02-30T11:30:00Z, end: 2030-01-02T11:30:00Z}")
    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(values, "gpu-training", "t")
    assert "capacity.start" in str(err.value) and "2030-02-30T11:30:00Z" in str(err.value)
