"""Capacity Blocks for ML end to end: the config, the window the group follows (scheduled actions on
its Auto Scaling group), the purchase that only `purchase: true` makes (and the plan and the PR diff
say so in words), and preflight: the block behind a group (DescribeCapacityReservations,
DescribeCapacityBlocks) checked for type, AZ, count and window, and offerings
(DescribeCapacityBlockOfferings) shown with their upfront price.

moto implements none of the Capacity Block calls: each is answered by a botocore ``before-call``
hook whose answer is first validated against the operation's output shape in botocore's EC2
service model (tests/aws_stubs.py), so a stub AWS could never send fails the test.
"""

from __future__ import annotations

import datetime
import io
from pathlib import Path
from typing import Any

import botocore.loaders
import botocore.session
import pytest
from botocore.exceptions import ParamValidationError

from components import node_scaling
from infra import plan as plan_cli
from infra import preflight
from stacks import config as stack_config
from tests.aws_stubs import new_session
from tests.helpers import BLOCK_AZ as AZ
from tests.helpers import BLOCK_ID, CR_ID, END, NS, START, block_group, capacity_block, run_stack, zulu
from tests.helpers import answer_ec2 as answer
from tests.helpers import block_reservation as reservation
from tests.helpers import block_values as values_with
from tests.helpers import load_values as load

OFFERING_ID = "cb-0123456789abcdefa"
SCHEDULE = "aws:autoscaling/schedule:Schedule"
PURCHASE = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"


def problems_of(values: dict[str, Any]) -> str:
    with pytest.raises(stack_config.ConfigError) as err:
        load(values)
    return str(err.value)


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------


def test_a_window_parses_into_aware_times():
    g = load(values_with(block_group())).gpu_group("h100")
    assert g is not None and g.capacity_block_window == (START, END)
    assert g.placement.mode == "none" and not g.autoscaled and not g.awaiting_capacity_block


@pytest.mark.parametrize(
    "change, key, words",
    [
        ({"minSize": 1, "desiredSize": 1}, "minSize", "follows the block's window"),
        ({"desiredSize": 1}, "desiredSize", "leave minSize and desiredSize out"),
        (
            {"capacity": {"start": zulu(START), "end": zulu(START + datetime.timedelta(minutes=30))}},
            "capacity.end",
            "scales to zero an hour before",
        ),
        ({"capacity": {"start": zulu(START)}}, "capacity.end", "needs both ends"),
        ({"capacity": {"start": "2030-01-01T11:30:00", "end": zulu(END)}}, "capacity.start", "has no time zone"),
        ({"capacityType": "on-demand"}, "capacity", "only used with capacityType 'capacity-block'"),
        ({"capacityReservationId": None}, "capacityReservationId", "unless capacity.offering looks for one to buy"),
    ],
)
def test_bad_capacity_config_is_refused(change, key, words):
    group = block_group(**change)
    group = {k: v for k, v in group.items() if v is not None}
    text = problems_of(values_with(group))
    assert f"{NS}:gpuNodeGroups[h100].{key}" in text and words in text, text


def test_purchase_needs_the_offering_and_its_window():
    offering = {"durationHours": 24, "earliestStart": zulu(START), "purchase": True}
    text = problems_of(values_with(block_group(capacityReservationId=None, capacity={"offering": offering})))
    assert f"{NS}:gpuNodeGroups[h100].capacity.offering.purchase" in text and "missing: offeringId, start, end" in text


def test_purchase_next_to_a_reservation_is_refused():
    offering = {"durationHours": 24, "earliestStart": zulu(START), "offeringId": OFFERING_ID, "purchase": True}
    text = problems_of(
        values_with(block_group(capacity={"start": zulu(START), "end": zulu(END), "offering": offering}))
    )
    assert "would buy a second block" in text and CR_ID in text


def test_an_offering_alone_is_valid_and_the_group_waits_for_its_block():
    group = block_group(
        capacityReservationId=None, capacity={"offering": {"durationHours": 24, "earliestStart": zulu(START)}}
    )
    cfg = load(values_with(group))
    g = cfg.gpu_group("h100")
    assert g is not None and g.awaiting_capacity_block and g.capacity_block_purchase is None
    plan = run_stack(values_with(group))
    assert not [r for r in plan.records if r.name.startswith("gpu-h100")]
    assert "no capacity block yet: the group is not built" in "\n".join(plan_cli.capacity_lines(g))


# ---------------------------------------------------------------------------------------------
# The window: scheduled actions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "now, created, actions",
    [
        (
            START - datetime.timedelta(days=3),
            0,
            [("block-start", START, 2), ("block-end", END - datetime.timedelta(hours=1), 0)],
        ),
        (START + datetime.timedelta(hours=2), 2, [("block-end", END - datetime.timedelta(hours=1), 0)]),
        (END - datetime.timedelta(minutes=40), 0, []),
        (END + datetime.timedelta(days=1), 0, []),
    ],
)
def test_schedule_follows_the_window(now, created, actions):
    block = node_scaling.capacity_block_plan(START, END, 2, now)
    assert block.desired == created
    assert [(a.suffix, a.at, a.size) for a in block.actions] == actions


def test_plan_schedules_the_group_on_its_asg(monkeypatch):
    monkeypatch.setattr(node_scaling, "utc_now", lambda: START - datetime.timedelta(days=2))
    plan = run_stack(values_with(block_group()))
    mng = plan.named("aws:eks/nodeGroup:NodeGroup", "gpu-h100-mng")
    assert mng.inputs["scalingConfig"] == {"minSize": 0, "desiredSize": 0, "maxSize": 2}
    assert mng.options["ignoreChanges"] == ["scalingConfig.desiredSize"]
    assert "instanceTypes" not in mng.inputs  # capacity blocks: the type is in the launch template only
    schedules = {r.name: r.inputs for r in plan.of_type(SCHEDULE)}
    assert set(schedules) == {"gpu-h100-block-start", "gpu-h100-block-end"}
    up, down = schedules["gpu-h100-block-start"], schedules["gpu-h100-block-end"]
    assert (up["startTime"], up["desiredCapacity"]) == ("2030-01-01T11:30:00Z", 2)
    assert (down["startTime"], down["desiredCapacity"]) == ("2030-01-02T10:30:00Z", 0)
    for s in (up, down):
        # Only the desired capacity: min and max stay what the stack config says.
        assert (s["minSize"], s["maxSize"]) == (-1, -1)
        assert s["autoscalingGroupName"].startswith("eks-gpu-training-test-gpu-h100-")
        assert "recurrence" not in s
    assert up["scheduledActionName"] == "gpu-training-test-gpu-h100-block-start"
    lt = plan.named("aws:ec2/launchTemplate:LaunchTemplate", "gpu-h100-lt").inputs
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] == CR_ID
    assert lt["instanceMarketOptions"]["marketType"] == "capacity-block" and lt["instanceType"] == "p5.48xlarge"
    # No autoscaler tags: the scheduled actions size the group.
    assert not [r for r in plan.of_type("aws:autoscaling/tag:Tag") if r.name.startswith("gpu-h100-")]


def test_a_group_created_inside_the_window_starts_at_its_size(monkeypatch):
    monkeypatch.setattr(node_scaling, "utc_now", lambda: START + datetime.timedelta(hours=1))
    plan = run_stack(values_with(block_group()))
    mng = plan.named("aws:eks/nodeGroup:NodeGroup", "gpu-h100-mng")
    assert mng.inputs["scalingConfig"]["desiredSize"] == 2
    assert "scalingConfig.desiredSize" not in mng.options["ignoreChanges"]  # inside the window the program sets it
    assert [r.name for r in plan.of_type(SCHEDULE)] == ["gpu-h100-block-end"]


def test_without_a_window_the_group_is_sized_by_hand():
    group = block_group(capacity=None, desiredSize=1)
    plan = run_stack(values_with({k: v for k, v in group.items() if v is not None}))
    mng = plan.named("aws:eks/nodeGroup:NodeGroup", "gpu-h100-mng")
    assert mng.inputs["scalingConfig"]["desiredSize"] == 1
    assert "ignoreChanges" not in (mng.options or {})
    assert not plan.of_type(SCHEDULE)


# ---------------------------------------------------------------------------------------------
# The purchase: only with purchase: true, and said in words
# ---------------------------------------------------------------------------------------------


def purchase_group() -> dict[str, Any]:
    offering = {
        "durationHours": 24,
        "earliestStart": zulu(START - datetime.timedelta(hours=12)),
        "offeringId": OFFERING_ID,
        "purchase": True,
    }
    return block_group(
        capacityReservationId=None, capacity={"start": zulu(START), "end": zulu(END), "offering": offering}
    )


def test_purchase_true_buys_the_offering_and_targets_it(monkeypatch):
    monkeypatch.setattr(node_scaling, "utc_now", lambda: START - datetime.timedelta(days=2))
    plan = run_stack(values_with(purchase_group()))
    (bought,) = plan.of_type(PURCHASE)
    assert bought.inputs["capacityBlockOfferingId"] == OFFERING_ID and bought.inputs["instancePlatform"] == "Linux/UNIX"
    assert bought.inputs["tags"]["gputraining/capacity-block-offering"] == OFFERING_ID  # how preflight finds it later
    assert bought.options["retainOnDelete"] is True
    lt = plan.named("aws:ec2/launchTemplate:LaunchTemplate", "gpu-h100-lt")
    assert (
        lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]["capacityReservationId"] == bought.id
    )
    assert "placement" not in lt.inputs  # the block brings its own placement
    assert {r.name for r in plan.of_type(SCHEDULE)} == {"gpu-h100-block-start", "gpu-h100-block-end"}


def test_purchase_false_buys_nothing():
    group = purchase_group()
    group["capacity"]["offering"]["purchase"] = False
    group["capacityReservationId"] = CR_ID
    plan = run_stack(values_with(group))
    assert not plan.of_type(PURCHASE)
    g = load(values_with(group)).gpu_group("h100")
    assert g is not None
    assert "nothing is bought" in "\n".join(plan_cli.capacity_lines(g))


def _write_plan(values: dict[str, Any], folder: Path) -> None:
    cfg = load(values)
    plan_cli.write_files(run_stack(values), folder, None, cfg)


def test_plan_summary_and_pr_diff_say_the_purchase_in_words(tmp_path, monkeypatch):
    monkeypatch.setattr(node_scaling, "utc_now", lambda: START - datetime.timedelta(days=2))
    cfg = load(values_with(purchase_group()))
    g = cfg.gpu_group("h100")
    assert g is not None
    lines = "\n".join(plan_cli.capacity_lines(g))
    assert f"PURCHASE: `pulumi up` BUYS Capacity Block offering {OFFERING_ID}" in lines and "irreversible" in lines
    assert (
        "block 2030-01-01 11:30 UTC to 2030-01-02 11:30 UTC: scheduled to 2 nodes at its start and to 0 at 2030-01-02 "
        "10:30 UTC"
    ) in lines

    from infra.diff import cli as plan_diff

    reserved = block_group()
    _write_plan(values_with(reserved), tmp_path / "base")
    _write_plan(values_with(purchase_group()), tmp_path / "head")
    out = io.StringIO()
    assert plan_diff.main([str(tmp_path / "base"), str(tmp_path / "head")], out=out) == 0
    text = out.getvalue()
    assert f"**This change BUYS a Capacity Block:** `pulumi up` purchases offering `{OFFERING_ID}`" in text
    assert "irreversible" in text
    # The same plan on both sides buys nothing new: no purchase sentence.
    out = io.StringIO()
    plan_diff.main([str(tmp_path / "head"), str(tmp_path / "head")], out=out)
    assert "BUYS" not in out.getvalue()


# ---------------------------------------------------------------------------------------------
# Preflight, against stubs validated on botocore's EC2 model
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def session(aws):
    return new_session()


def offering(**over: Any) -> dict[str, Any]:
    o = {
        "CapacityBlockOfferingId": OFFERING_ID,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": AZ,
        "InstanceCount": 2,
        "StartDate": START,
        "EndDate": END,
        "CapacityBlockDurationHours": 24,
        "UpfrontFee": "1234.56",
        "CurrencyCode": "USD",
        "Tenancy": "default",
    }
    o.update(over)
    return o


def run(session: Any, *groups: dict[str, Any]) -> list[preflight.CheckResult]:
    return preflight.run_checks(load(values_with(*groups)), session, today=datetime.date(2029, 12, 1))


def line(results: list[preflight.CheckResult], prefix: str) -> preflight.CheckResult:
    found = [r for r in results if r.check.startswith(prefix)]
    assert len(found) == 1, [r.line() for r in results]
    return found[0]


def test_stubs_are_checked_against_the_model(session):
    answer(
        session,
        "DescribeCapacityBlocks",
        lambda _b: {"CapacityBlocks": [{"CapacityBlockId": BLOCK_ID, "StartDate": "not a time"}]},
    )
    with pytest.raises(ParamValidationError):
        session.client("ec2", region_name="us-west-2").describe_capacity_blocks(CapacityBlockIds=[BLOCK_ID])


def test_the_block_behind_the_group_matches_its_type_az_count_and_window(session):
    answer(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": [reservation()]})
    seen = answer(session, "DescribeCapacityBlocks", lambda _b: {"CapacityBlocks": [capacity_block()]})
    r = line(run(session, block_group()), f"capacity reservation {CR_ID}")
    assert r.status == preflight.PASS, r.line()
    assert (
        f"capacity block {BLOCK_ID} of 2 x p5.48xlarge in {AZ}, scheduled, 2030-01-01T11:30:00Z to 2030-01-02T11:30:00Z"
        in r.detail
    )
    assert seen and seen[0]["CapacityBlockId.1"] == BLOCK_ID


def test_a_window_other_than_the_blocks_fails_with_the_right_one(session):
    answer(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": [reservation()]})
    later = END + datetime.timedelta(days=1)
    answer(session, "DescribeCapacityBlocks", lambda _b: {"CapacityBlocks": [capacity_block(EndDate=later)]})
    r = line(run(session, block_group()), f"capacity reservation {CR_ID}")
    assert r.status == preflight.FAIL
    assert "the group would scale at the wrong times" in r.detail
    assert f"capacity.end: {zulu(later)}" in r.fix


@pytest.mark.parametrize(
    "count, status, words", [(1, preflight.FAIL, "set maxSize: 1"), (4, preflight.WARN, "2 paid for and left idle")]
)
def test_the_blocks_instance_count_against_max_size(session, count, status, words):
    answer(
        session,
        "DescribeCapacityReservations",
        lambda _b: {"CapacityReservations": [reservation(TotalInstanceCount=count)]},
    )
    answer(session, "DescribeCapacityBlocks", lambda _b: {"CapacityBlocks": [capacity_block()]})
    r = line(run(session, block_group()), f"capacity reservation {CR_ID}")
    assert r.status == status and words in r.line(), r.line()


@pytest.mark.parametrize(
    "over, words",
    [
        ({"InstanceType": "p5en.48xlarge"}, "it reserves p5en.48xlarge, the group uses p5.48xlarge"),
        ({"AvailabilityZone": "us-west-2a"}, f"it is in us-west-2a but the GPU AZ is {AZ}"),
        ({"State": "expired"}, "its state is expired"),
    ],
)
def test_type_az_and_state_mismatches_fail(session, over, words):
    answer(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": [reservation(**over)]})
    answer(session, "DescribeCapacityBlocks", lambda _b: {"CapacityBlocks": [capacity_block()]})
    r = line(run(session, block_group()), f"capacity reservation {CR_ID}")
    assert r.status == preflight.FAIL and words in r.detail


def test_without_a_window_preflight_gives_the_one_to_set(session):
    answer(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": [reservation()]})
    answer(session, "DescribeCapacityBlocks", lambda _b: {"CapacityBlocks": [capacity_block()]})
    group = {k: v for k, v in block_group(capacity=None).items() if v is not None}
    r = line(run(session, group), f"capacity reservation {CR_ID}")
    assert r.status == preflight.PASS
    assert f"set capacity.start: {zulu(START)} and capacity.end: {zulu(END)}" in r.detail


def test_describe_capacity_blocks_unanswered_falls_back_to_the_reservation(session):
    # moto does not implement DescribeCapacityBlocks: the reservation's own dates stand.
    answer(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": [reservation()]})
    r = line(run(session, block_group()), f"capacity reservation {CR_ID}")
    assert r.status == preflight.PASS and "2030-01-02T11:30:00Z" in r.detail


def offering_group(**offering_over: Any) -> dict[str, Any]:
    o = {"durationHours": 24, "earliestStart": zulu(START - datetime.timedelta(hours=12)), **offering_over}
    return {k: v for k, v in block_group(capacityReservationId=None, capacity={"offering": o}).items() if v is not None}


def test_offerings_are_shown_with_their_upfront_price_and_nothing_is_bought(session):
    other = offering(
        CapacityBlockOfferingId="cb-0fedcba9876543210",
        StartDate=START + datetime.timedelta(days=1),
        EndDate=END + datetime.timedelta(days=1),
    )
    seen = answer(session, "DescribeCapacityBlockOfferings", lambda _b: {"CapacityBlockOfferings": [other, offering()]})
    r = line(run(session, offering_group()), "capacity block offerings (GPU group h100)")
    assert r.status == preflight.PASS, r.line()
    assert (
        f"{OFFERING_ID} in {AZ}: 2 x p5.48xlarge, 2030-01-01T11:30:00Z to 2030-01-02T11:30:00Z (24 h), upfront "
        "$1,234.56 USD"
    ) in r.detail
    assert r.detail.index(OFFERING_ID) < r.detail.index("cb-0fedcba9876543210")  # the earliest first
    assert (
        "nothing is bought" in r.detail
        and f"capacity.offering.offeringId: {OFFERING_ID}" in r.detail
        and "purchase: true" in r.detail
    )
    request = seen[0]
    assert (request["InstanceType"], request["InstanceCount"], request["CapacityDurationHours"]) == (
        "p5.48xlarge",
        2,
        24,
    )
    assert request["StartDateRange"].startswith("2029-12-31T23:30:00")


def test_offerings_only_in_another_az_fail(session):
    answer(
        session,
        "DescribeCapacityBlockOfferings",
        lambda _b: {"CapacityBlockOfferings": [offering(AvailabilityZone="us-west-2d")]},
    )
    r = line(run(session, offering_group()), "capacity block offerings")
    assert r.status == preflight.FAIL and "only in us-west-2d" in r.detail and "gpuAvailabilityZone" in r.fix


def test_no_offering_is_a_warning(session):
    answer(session, "DescribeCapacityBlockOfferings", lambda _b: {"CapacityBlockOfferings": []})
    r = line(run(session, offering_group()), "capacity block offerings")
    assert r.status == preflight.WARN and "no offering of 2 x p5.48xlarge for 24 h" in r.detail


def purchasing() -> dict[str, Any]:
    g = offering_group(offeringId=OFFERING_ID, purchase=True)
    g["capacity"].update(start=zulu(START), end=zulu(END))
    return g


def test_purchase_says_it_will_buy_and_what_it_costs(session):
    answer(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": []})
    answer(session, "DescribeCapacityBlockOfferings", lambda _b: {"CapacityBlockOfferings": [offering()]})
    results = run(session, purchasing())
    r = line(results, f"capacity block purchase {OFFERING_ID}")
    assert r.status == preflight.WARN
    assert "`pulumi up` WILL BUY" in r.detail and "upfront $1,234.56 USD" in r.detail and "irreversible" in r.detail
    assert preflight.report([r], io.StringIO()) == preflight.EXIT_OK  # a warning, not a failure


def test_purchase_of_an_offering_no_longer_offered_fails(session):
    answer(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": []})
    answer(
        session,
        "DescribeCapacityBlockOfferings",
        lambda _b: {"CapacityBlockOfferings": [offering(CapacityBlockOfferingId="cb-0fedcba9876543210")]},
    )
    r = line(run(session, purchasing()), f"capacity block purchase {OFFERING_ID}")
    assert r.status == preflight.FAIL and "would fail to buy it" in r.detail


def test_purchase_with_a_window_other_than_the_offerings_fails(session):
    answer(session, "DescribeCapacityReservations", lambda _b: {"CapacityReservations": []})
    answer(
        session,
        "DescribeCapacityBlockOfferings",
        lambda _b: {"CapacityBlockOfferings": [offering(EndDate=END + datetime.timedelta(hours=24))]},
    )
    r = line(run(session, purchasing()), f"capacity block purchase {OFFERING_ID}")
    assert r.status == preflight.FAIL and "not capacity.start/end" in r.detail


def test_a_bought_block_is_checked_like_a_reservation(session):
    requests = answer(
        session,
        "DescribeCapacityReservations",
        lambda _b: {
            "CapacityReservations": [
                reservation(Tags=[{"Key": "gputraining/capacity-block-offering", "Value": OFFERING_ID}])
            ]
        },
    )
    answer(session, "DescribeCapacityBlocks", lambda _b: {"CapacityBlocks": [capacity_block()]})
    r = line(run(session, purchasing()), f"capacity block purchase {OFFERING_ID}")
    assert r.status == preflight.PASS, r.line()
    assert f"bought as {CR_ID}" in r.check and "2030-01-02T11:30:00Z" in r.detail
    assert (
        requests[0]["Filter.1.Name"] == "tag:gputraining/capacity-block-offering"
        and requests[0]["Filter.1.Value.1"] == OFFERING_ID
    )


def test_the_ec2_model_has_every_call_preflight_makes():
    model = botocore.session.get_session().get_service_model("ec2")
    for op in ("DescribeCapacityReservations", "DescribeCapacityBlocks", "DescribeCapacityBlockOfferings"):
        assert op in model.operation_names
    members = model.shape_for("CapacityReservation").members
    assert {"CapacityBlockId", "StartDate", "EndDate", "TotalInstanceCount", "ReservationType"} <= set(members)
    assert {"UpfrontFee", "CurrencyCode", "CapacityBlockOfferingId"} <= set(
        model.shape_for("CapacityBlockOffering").members
    )
