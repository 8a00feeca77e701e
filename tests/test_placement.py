"""The GPU AZ, chosen once (stacks/placement.py): `auto` picks an AZ for a new stack only; a
deployed stack keeps the AZ of its GPU subnet (found by its tags), refuses a GPU type that AZ does
not offer, and moves only on an explicit gpuAvailabilityZone, said out loud.

A deployed stack is simulated by the offline engine (infra/offline/deployed.py): the subnets an
earlier plan registered, with their ids, AZs and tags, answer the program's subnet lookups.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import pulumi
import pytest

from infra import offline
from infra import plan as plan_cli
from infra.offline import Deployed, Subnet
from stacks import config as stack_config
from stacks.placement import KEY, DeployedGpuSubnet, PlacementError, choose_gpu_az, gpu_subnet_tags
from tests.helpers import NS, dev_values, minimal_values

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
P5EN = {"name": "h200", "instanceType": "p5en.48xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 1}
OFFERED = offline.az_offerings("us-west-2")
REGION_AZS = offline.region_azs("us-west-2")


def plan(values: dict[str, Any], deployed: Deployed | None = None, stack: str = "dev") -> offline.PlanResult:
    """The real program, offline, for a stack that already has ``deployed`` (None: a new stack)."""
    from infra import program

    stack_config.load(values, "gpu-training", stack)
    return offline.run(program.main, values, project="gpu-training", stack=stack, deployed=deployed)


def dev_with(**sections: Any) -> dict[str, Any]:
    values = dev_values()
    for key, value in sections.items():
        values[f"{NS}:{key}"] = value
    return values


def gpu_subnet(result: offline.PlanResult) -> offline.Record:
    (found,) = [
        r for r in result.of_type("aws:ec2/subnet:Subnet") if r.inputs["tags"].get("gputraining/gpu-az") == "true"
    ]
    return found


@pytest.fixture(scope="module")
def dev_in_2c() -> offline.PlanResult:
    """The dev stack as deployed with its GPU AZ set to us-west-2c (where `auto` would not put it)."""
    return plan(dev_with(gpuAvailabilityZone="us-west-2c"))


# ---------------------------------------------------------------------------------------------
# The issue: adding a type must not move a deployed stack
# ---------------------------------------------------------------------------------------------


def test_a_new_stack_gets_the_first_az_offering_every_type():
    # p3dn is in 2b and 2c, p5en in 2a, 2c and 2d: a new dev stack with both goes to 2c.
    result = plan(dev_with(gpuNodeGroups=[*dev_values()[f"{NS}:gpuNodeGroups"], P5EN]))
    assert result.outputs["gpuAvailabilityZone"] == "us-west-2c"


def test_adding_a_type_the_deployed_az_lacks_is_refused_not_a_move(dev_plan):
    deployed = Deployed.from_records(dev_plan.records)  # dev as deployed: GPU subnet in us-west-2b
    subnet_id = gpu_subnet(dev_plan).id
    with pytest.raises(pulumi.RunError) as err:
        plan(dev_with(gpuNodeGroups=[*dev_values()[f"{NS}:gpuNodeGroups"], P5EN]), deployed)
    message = str(err.value)
    # One problem of the config, reported with any others (stacks/config/loading.py).
    assert message.startswith("invalid stack config (1 problem(s)):\n")
    assert f"  - {KEY}: 'auto' keeps us-west-2b, where this stack already has its GPU subnet ({subnet_id})" in message
    assert (
        "us-west-2b does not offer p5en.48xlarge (p5en.48xlarge is offered in us-west-2a, us-west-2c, us-west-2d)"
        in message
    )
    # What to do: a type the AZ offers, or a deliberate move, with what that replaces.
    assert f"set {KEY}: us-west-2c" in message
    assert "replaces every GPU node group" in message and "FSx for Lustre" in message


def test_auto_keeps_the_deployed_az_where_a_new_stack_would_go_elsewhere(dev_in_2c):
    # dev with `auto` as a new stack goes to us-west-2b; deployed in us-west-2c, it stays there.
    result = plan(dev_values(), Deployed.from_records(dev_in_2c.records))
    assert result.outputs["gpuAvailabilityZone"] == "us-west-2c"
    assert result.outputs["gpuSubnetId"] == gpu_subnet(dev_in_2c).id
    # Nothing moves: the same resources with the same inputs as the deployed stack's.
    assert [(r.type, r.name, r.inputs) for r in result.records] == [
        (r.type, r.name, r.inputs) for r in dev_in_2c.records
    ]


def test_stacks_deployed_before_the_lookup_are_found_by_the_tags_they_always_had(dev_in_2c):
    # The GPU subnet's tags as components/network.py has written them since its first version.
    old = gpu_subnet(dev_in_2c)
    tags = {
        "env": "dev",  # dev's own (gpu-training:tags)
        "gputraining/project": "gpu-training",
        "gputraining/stack": "dev",
        "kubernetes.io/cluster/gpu-training-dev": "shared",
        "Name": "gpu-training-dev-private-us-west-2c",
        "kubernetes.io/role/internal-elb": "1",
        "gputraining/gpu-az": "true",
    }
    assert old.inputs["tags"] == tags
    result = plan(dev_values(), Deployed((Subnet("subnet-0old", "us-west-2c", tags),)))
    assert result.outputs["gpuAvailabilityZone"] == "us-west-2c"


def test_other_stacks_gpu_subnets_do_not_count(dev_in_2c):
    # The same subnets, but of the prod stack (or another project): dev is a new stack.
    def renamed(key: str, value: str) -> Deployed:
        subnets = Deployed.from_records(dev_in_2c.records).subnets
        return Deployed(tuple(Subnet(s.id, s.availability_zone, {**s.tags, key: value}) for s in subnets))

    assert plan(dev_values(), renamed("gputraining/stack", "prod")).outputs["gpuAvailabilityZone"] == "us-west-2b"
    assert plan(dev_values(), renamed("gputraining/project", "other")).outputs["gpuAvailabilityZone"] == "us-west-2b"


def test_auto_without_gpu_groups_keeps_the_deployed_az(dev_in_2c):
    result = plan(dev_with(gpuNodeGroups=[], jobs=[]), Deployed.from_records(dev_in_2c.records))
    assert result.outputs["gpuAvailabilityZone"] == "us-west-2c"


def test_gpu_subnets_in_two_azs_are_refused_with_auto(dev_plan, dev_in_2c):
    both = Deployed(
        (*Deployed.from_records(dev_plan.records).subnets, *Deployed.from_records(dev_in_2c.records).subnets)
    )
    with pytest.raises(
        pulumi.RunError,
        match=(
            rf"{KEY}: 'auto' keeps the AZ of this stack's GPU subnet, but it has GPU subnets in us-west-2b "
            r"\(subnet-\w+\) and us-west-2c"
        ),
    ):
        plan(dev_values(), both)


# ---------------------------------------------------------------------------------------------
# A deliberate move: an explicit gpuAvailabilityZone, said out loud
# ---------------------------------------------------------------------------------------------


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_an_explicit_move_plans_and_warns(dev_plan, caplog):
    caplog.set_level(logging.WARNING)
    result = plan(dev_with(gpuAvailabilityZone="us-west-2c"), Deployed.from_records(dev_plan.records))
    assert result.outputs["gpuAvailabilityZone"] == "us-west-2c"
    (warning,) = [w for w in _warnings(caplog) if "GPU AZ" in w]
    assert warning.startswith("the GPU AZ MOVES from us-west-2b (where this stack's GPU subnet is) to us-west-2c")
    assert "replaces every GPU node group" in warning and "FSx for Lustre (a new, empty file system" in warning
    assert "private subnets in us-west-2a, us-west-2c" in warning
    # What moves: the node groups' and FSx's subnet is the new GPU subnet.
    new_subnet = gpu_subnet(result)
    assert new_subnet.inputs["availabilityZone"] == "us-west-2c"
    assert {tuple(r.inputs["subnetIds"]) for r in result.of_type(NODE_GROUP)} == {(new_subnet.id,)}
    assert [r.inputs["subnetIds"] for r in result.of_type(FSX)] == [new_subnet.id]


def test_an_explicit_az_equal_to_the_deployed_one_is_quiet(dev_plan, caplog):
    caplog.set_level(logging.WARNING)
    plan(dev_with(gpuAvailabilityZone="us-west-2b"), Deployed.from_records(dev_plan.records))
    assert not [w for w in _warnings(caplog) if "GPU AZ" in w]


def test_the_plan_summary_says_kept_or_moves(dev_plan, dev_in_2c):
    deployed_2b = Deployed.from_records(dev_plan.records)
    kept = plan(dev_values(), deployed_2b)
    text = plan_cli.summary(plan_cli.load_config("dev"), kept)
    assert "GPU availability zone: us-west-2b (kept by 'auto': this stack's GPU subnet is there)" in text
    assert "MOVE" not in text

    cfg = stack_config.load(dev_with(gpuAvailabilityZone="us-west-2c"), "gpu-training", "dev")
    moved = plan(dev_with(gpuAvailabilityZone="us-west-2c"), deployed_2b)
    lines = plan_cli.summary(cfg, moved).splitlines()
    assert lines[1] == "GPU availability zone: us-west-2c (from config); subnet AZs: us-west-2a, us-west-2c"
    assert lines[2].startswith(
        "MOVE: the GPU AZ MOVES from us-west-2b (where this stack's GPU subnet is) to us-west-2c"
    )
    # A new stack: as before.
    assert "(chosen automatically)" in plan_cli.summary(plan_cli.load_config("dev"), dev_plan)


def test_the_plan_command_plans_a_new_stack(dev_plan_command):
    out = dev_plan_command.stdout
    assert "GPU availability zone: us-west-2b (chosen automatically); subnet AZs: us-west-2a, us-west-2b" in out
    assert "MOVE" not in out and dev_plan_command.code == 0


# ---------------------------------------------------------------------------------------------
# The rule itself (also what preflight applies)
# ---------------------------------------------------------------------------------------------


def test_choose_gpu_az_keeps_the_deployed_az():
    deployed = [DeployedGpuSubnet("subnet-1", "us-west-2c")]
    types = ["p4d.24xlarge", "p3dn.24xlarge"]
    assert choose_gpu_az("auto", REGION_AZS, OFFERED, types) == "us-west-2b"
    assert choose_gpu_az("auto", REGION_AZS, OFFERED, types, deployed) == "us-west-2c"
    assert choose_gpu_az("auto", REGION_AZS, OFFERED, [], deployed) == "us-west-2c"
    assert choose_gpu_az("auto", REGION_AZS, OFFERED, []) == "us-west-2a"
    # An explicit AZ is the AZ (a move, when it differs: resolve_placement says so).
    assert choose_gpu_az("us-west-2b", REGION_AZS, OFFERED, types, deployed) == "us-west-2b"


def test_choose_gpu_az_refuses_a_type_the_kept_az_lacks_and_says_when_no_az_has_all():
    deployed = [DeployedGpuSubnet("subnet-1", "us-west-2b")]
    with pytest.raises(PlacementError) as err:
        choose_gpu_az("auto", REGION_AZS, OFFERED, ["p3dn.24xlarge", "p6-b300.48xlarge", "p5e.48xlarge"], deployed)
    message = str(err.value)
    assert "us-west-2b does not offer p5e.48xlarge (p5e.48xlarge is offered in us-west-2c)" in message
    assert "no AZ of the region offers p3dn.24xlarge, p6-b300.48xlarge, p5e.48xlarge together" in message
    assert not re.search(rf"set {KEY}: us-west", message)


def test_the_lookup_asks_for_this_stacks_gpu_subnet():
    cfg = stack_config.load(minimal_values(tags={"team": "ml"}), "gpu-training", "stage")
    assert gpu_subnet_tags(cfg) == {
        "gputraining/project": "gpu-training",
        "gputraining/stack": "stage",
        "gputraining/gpu-az": "true",
    }


def test_the_offline_engine_answers_subnet_lookups_like_aws(dev_plan):
    deployed = Deployed.from_records(dev_plan.records)
    found = deployed.answer("aws:ec2/getSubnets:getSubnets", {"tags": {"gputraining/gpu-az": "true"}}, "us-west-2")
    assert found["ids"] == [gpu_subnet(dev_plan).id]
    by_az = deployed.answer(
        "aws:ec2/getSubnets:getSubnets",
        {"filters": [{"name": "availability-zone", "values": ["us-west-2a"]}]},
        "us-west-2",
    )
    assert len(by_az["ids"]) == 2  # the private and the public subnet of us-west-2a
    assert (
        deployed.answer("aws:ec2/getSubnet:getSubnet", {"id": found["ids"][0]}, "us-west-2")["availabilityZone"]
        == "us-west-2b"
    )
    assert Deployed().answer("aws:ec2/getSubnets:getSubnets", {"tags": {"a": "b"}}, "us-west-2")["ids"] == []
    with pytest.raises(NotImplementedError, match="cannot filter subnets by 'state'"):
        deployed.answer(
            "aws:ec2/getSubnets:getSubnets", {"filters": [{"name": "state", "values": ["available"]}]}, "us-west-2"
        )
