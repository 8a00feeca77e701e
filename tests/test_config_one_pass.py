"""One pass over a bad config (stacks/config/loading.py): every problem that does not depend on
another is reported in the same run. An unknown key does not stop the checks of its section, node
group or job; the GPU AZ check (the AZ must offer every GPU type) runs with the rest; an unknown key
close to an allowed one gets "did you mean"; and the loader reads its sections off StackConfig's
fields."""

from __future__ import annotations

import contextlib
import io
import subprocess
import textwrap
from typing import Any

import pulumi
import pytest
from pydantic import model_validator

from infra import offline
from infra.__main__ import main as infra_main
from infra.plan import offline_placement_check
from stacks import config as stack_config
from stacks.config.errors import parse
from stacks.config.loading import PlacementAsk
from stacks.config.models import ConfigModel
from stacks.placement import AwsRegionFacts, RegionFacts
from tests.helpers import NS, minimal_values

AZ = f"{NS}:gpuAvailabilityZone"


def _group(**fields: Any) -> dict[str, Any]:
    return {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 2, **fields}


def _job(**fields: Any) -> dict[str, Any]:
    return {"name": "nccl", "kind": "nccl-test", "nodeGroup": "p4d", "nodes": 2, **fields}


V100 = {"name": "v100", "instanceType": "p3dn.24xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 2}
# An nccl-tests build for V100 (the default image is built for newer GPUs: a problem of its own).
V100_NCCL = "123456789012.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:v100"


def problems_of(values: dict[str, Any]) -> list[stack_config.Problem]:
    """The problems `python -m infra plan` reports for ``values`` (the GPU AZ checked offline)."""
    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(values, "gpu-training", "test", placement_check=offline_placement_check)
    return err.value.problems


def keys_of(values: dict[str, Any]) -> list[str]:
    return sorted(p.key for p in problems_of(values))


# ---------------------------------------------------------------------------------------------
# Every independent problem, in one run
# ---------------------------------------------------------------------------------------------

ONE_PASS = {
    "an unknown key does not hide the group's own rules": (
        {"gpuNodeGroups": [_group(maxSzie=3, minSize=3)]},
        ["gpuNodeGroups[p4d].maxSzie", "gpuNodeGroups[p4d].minSize"],
    ),
    "an unknown key does not hide the job's checks against its group and queue": (
        # 4 nodes of a group of at most 2: the group's size, and the queue that can never admit it.
        {"jobs": [_job(nodes=4, colour="red")]},
        ["jobs[nccl].colour", "jobs[nccl].nodes", "jobs[nccl].nodes"],
    ),
    "an unknown key does not hide the section's cross-field rules": (
        {"network": {"vpcCidr": "10.0.0.0/8", "subnets": 3}},
        ["network.subnets", "network.vpcCidr"],
    ),
    "an unknown key deep in a section does not hide the rules of its part": (
        {"storage": {"fsx": {"storageCapacityGiB": 1000, "colour": "red"}}},
        ["storage.fsx.colour", "storage.fsx.storageCapacityGiB"],
    ),
    "the GPU AZ's offering with a job's problem": (
        {
            "gpuAvailabilityZone": "us-west-2a",
            "gpuNodeGroups": [V100],
            "jobs": [_job(nodeGroup="v100", nodes=3, image=V100_NCCL)],
        },
        ["gpuAvailabilityZone", "jobs[nccl].nodes", "jobs[nccl].nodes"],
    ),
    "the GPU AZ's offering with the AZ count and an unknown key in the same section": (
        {
            "gpuAvailabilityZone": "us-west-2a",
            "gpuNodeGroups": [V100],
            "network": {"availabilityZoneCount": 6, "natGateway": "single"},
        },
        ["gpuAvailabilityZone", "network.availabilityZoneCount", "network.natGateway"],
    ),
    "auto without an AZ that offers every type, with other sections' problems": (
        {
            "gpuNodeGroups": [_group(name="h200", instanceType="p5e.48xlarge"), _group(instanceType="p3.2xlarge")],
            "cluster": {"kubernetesVersion": "1.29"},
            "tags": {"cost": 31},
        },
        ["cluster.kubernetesVersion", "gpuAvailabilityZone", "tags.cost"],
    ),
    "mistakes in every part of the stack at once": (
        {
            "gpuAvailabilityZone": "us-west-2a",
            "network": {"vpcCidr": "10.0.0.0/8", "natGateway": "single"},
            "cluster": {"kubernetesVersion": "1.29"},
            "gpuNodeGroups": [V100, _group(name="big", instanceType="p3dn.24xlarge", maxSzie=3, minSize=3)],
            "queues": {"pods_ready_timeout": "20m"},
            "jobs": [_job(nodeGroup="big", nodes=1, colour="red", priority="urgent")],
            "tags": {"cost": 31},
        },
        [
            "cluster.kubernetesVersion",
            "gpuAvailabilityZone",
            "gpuNodeGroups[big].maxSzie",
            "gpuNodeGroups[big].minSize",
            "jobs[nccl].colour",
            "jobs[nccl].priority",
            "network.natGateway",
            "network.vpcCidr",
            "queues.pods_ready_timeout",
            "tags.cost",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(ONE_PASS))
def test_every_independent_problem_is_reported_in_one_run(case: str):
    sections, expected = ONE_PASS[case]
    assert keys_of(minimal_values(**sections)) == sorted(f"{NS}:{k}" for k in expected)


def test_the_gpu_az_problem_keeps_its_message():
    values = minimal_values(gpuAvailabilityZone="us-west-2a", gpuNodeGroups=[V100], jobs=[_job(colour="red")])
    messages = {p.key: p.message for p in problems_of(values)}
    assert (
        messages[AZ] == "'us-west-2a' does not offer p3dn.24xlarge (p3dn.24xlarge is offered in us-west-2b, us-west-2c)"
    )
    # The job names a group the stack does not have: its own problem, beside the AZ's.
    assert messages[f"{NS}:jobs[nccl].nodeGroup"].startswith("'p4d' is not a GPU node group of this stack")


# What depends on a value refused already is not checked (loading.py's docstring lists it).
DEPENDENT = {
    "no AZ check in a refused region": (
        {"aws:region": "us-mars-1", "gpuAvailabilityZone": "us-west-2a", "gpuNodeGroups": [V100]},
        ["aws:region", AZ],  # the AZ is not in the (refused) region: said once, by the AZ's own rule
    ),
    "no AZ check for a refused AZ name": (
        {"gpuAvailabilityZone": "west", "gpuNodeGroups": [V100]},
        [AZ],
    ),
    "no job checks against a group with a value of the wrong type": (
        {"gpuNodeGroups": [_group(maxSize="lots")], "jobs": [_job(nodes=9)]},
        [f"{NS}:gpuNodeGroups[p4d].maxSize"],
    ),
    "no group rules on a group with a value of the wrong type": (
        {"gpuNodeGroups": [_group(maxSize="lots", minSize=3, colour="red")]},
        [f"{NS}:gpuNodeGroups[p4d].colour", f"{NS}:gpuNodeGroups[p4d].maxSize"],
    ),
    "no AZ check of a type the catalog does not have (its group's problem)": (
        {"gpuAvailabilityZone": "us-west-2a", "gpuNodeGroups": [_group(instanceType="p9.huge")]},
        [f"{NS}:gpuNodeGroups[p4d].instanceType"],
    ),
}


@pytest.mark.parametrize("case", sorted(DEPENDENT))
def test_problems_that_depend_on_a_refused_value_are_not_reported(case: str):
    sections, expected = DEPENDENT[case]
    assert keys_of(minimal_values(**sections)) == sorted(expected)


def test_a_config_without_problems_passes_the_gpu_az_check():
    cfg = stack_config.load(
        minimal_values(gpuNodeGroups=[V100]), "gpu-training", "test", placement_check=offline_placement_check
    )
    assert cfg.gpu_instance_types == ["p3dn.24xlarge"]


class _Window(ConfigModel):
    """A model with a rule of the whole model (an "after" validator), for the second parse."""

    start: int = 0
    end: int = 0

    @model_validator(mode="after")
    def _ordered(self) -> _Window:
        if self.end < self.start:
            raise ValueError("end is before start")
        return self


def test_the_second_parse_reports_rules_of_the_whole_model_once():
    problems: list[stack_config.Problem] = []
    assert parse(_Window, "w", {"start": 2, "end": 1, "colour": "red"}, problems) is None
    assert [(p.key, "end is before start" in p.message) for p in problems] == [("w.colour", False), ("w", True)]
    problems = []
    assert parse(_Window, "w", {"start": 1, "end": 2, "colour": "red"}, problems) == _Window(start=1, end=2)
    assert [p.key for p in problems] == ["w.colour"]


# ---------------------------------------------------------------------------------------------
# "did you mean"
# ---------------------------------------------------------------------------------------------

SUGGESTED = [
    ({"gpuNodeGroups": [_group(maxSzie=3)]}, "gpuNodeGroups[p4d].maxSzie", "maxSize"),
    (
        {"gpuNodeGroups": [{"name": "p4d", "instanceTyp": "p4d.24xlarge"}]},
        "gpuNodeGroups[p4d].instanceTyp",
        "instanceType",
    ),
    ({"systemNodeGroup": {"instanceTyp": "c5.2xlarge"}}, "systemNodeGroup.instanceTyp", "instanceType"),
    ({"jobs": [{"name": "nccl", "kind": "nccl-test", "nodeGrup": "p4d"}]}, "jobs[nccl].nodeGrup", "nodeGroup"),
    ({"network": {"vpccidr": "10.0.0.0/16"}}, "network.vpccidr", "vpcCidr"),  # case aside
    ({"storage": {"fsx": {"deploymentTyp": "SCRATCH_2"}}}, "storage.fsx.deploymentTyp", "deploymentType"),
]


@pytest.mark.parametrize("sections, key, allowed", SUGGESTED, ids=[k for _, k, _ in SUGGESTED])
def test_an_unknown_key_close_to_an_allowed_one_gets_a_suggestion(sections: dict[str, Any], key: str, allowed: str):
    found = {p.key: p.message for p in problems_of(minimal_values(**sections))}
    wrong = key.rsplit(".", 1)[1]
    assert found[f"{NS}:{key}"] == f"unknown key {wrong!r}; did you mean {allowed!r}?"


def test_an_unknown_section_close_to_one_gets_a_suggestion():
    found = {p.key: p.message for p in problems_of(minimal_values(gpuNodeGrups=[]))}
    assert found == {f"{NS}:gpuNodeGrups": "unknown key; did you mean 'gpuNodeGroups'?"}


NOT_CLOSE = [
    ({"network": {"subnets": 3}}, "network.subnets", ["availabilityZoneCount", "natGateways", "vpcCidr"]),
    ({"gpuNodeGroups": [_group(colour="red")]}, "gpuNodeGroups[p4d].colour", ["instanceType", "maxSize", "taints"]),
    ({"jobs": [_job(colour="red")]}, "jobs[nccl].colour", ["nodeGroup", "nodes", "image"]),
    ({"colour": "red"}, "colour", list(stack_config.SECTIONS)),
]


@pytest.mark.parametrize("sections, key, allowed", NOT_CLOSE, ids=[k for _, k, _ in NOT_CLOSE])
def test_an_unknown_key_close_to_none_lists_the_allowed_keys(sections: dict[str, Any], key: str, allowed: list[str]):
    found = {p.key: p.message for p in problems_of(minimal_values(**sections))}
    message = found[f"{NS}:{key}"]
    assert "did you mean" not in message
    listed = message.split("; allowed keys are: ", 1)[1].split(", ")
    assert set(allowed) <= set(listed) and listed == sorted(listed)


# ---------------------------------------------------------------------------------------------
# The loader walks StackConfig's fields
# ---------------------------------------------------------------------------------------------


def test_the_sections_are_stack_configs_fields():
    fields = stack_config.StackConfig.model_fields
    assert {
        f.alias: name for name, f in fields.items() if name not in stack_config.StackConfig.FROM_ENGINE
    } == stack_config.SECTIONS
    assert set(stack_config.SECTIONS.values()) | stack_config.StackConfig.FROM_ENGINE == set(fields)


@pytest.mark.parametrize("key", sorted(stack_config.SECTIONS))
def test_every_section_of_the_wrong_type_is_refused_by_its_key(key: str):
    (problem,) = problems_of(minimal_values(**{key: 7}))
    assert problem.key.startswith(f"{NS}:{key}") and "7 is not allowed" in problem.message


# ---------------------------------------------------------------------------------------------
# Through the real entries: `python -m infra plan`, and the program `pulumi up` runs
# ---------------------------------------------------------------------------------------------

MANY_MISTAKES = textwrap.dedent(
    f"""\
    config:
      aws:region: us-west-2
      gpu-training:gpuAvailabilityZone: us-west-2a
      gpu-training:network:
        vpcCidr: 10.0.0.0/8
        natGateway: single
      gpu-training:cluster:
        kubernetesVersion: "1.29"
      gpu-training:gpuNodeGroups:
        - name: v100
          instanceType: p3dn.24xlarge
        - name: big
          instanceType: p3dn.24xlarge
          maxSzie: 3
          minSize: 3
          maxSize: 2
      gpu-training:jobs:
        - name: nccl
          kind: nccl-test
          nodeGrup: v100
          nodes: 1
        - name: nccl-big
          kind: nccl-test
          nodeGroup: big
          nodes: 1
          colour: red
          image: {V100_NCCL}
      gpu-training:tags:
        cost: 31
    """
)
MANY_KEYS = [
    f"{NS}:network.natGateway: unknown key 'natGateway'; did you mean 'natGateways'?",
    f"{NS}:network.vpcCidr: '10.0.0.0/8' is not allowed: AWS VPCs are /16 to /28",
    f"{NS}:cluster.kubernetesVersion: '1.29' is not supported",
    f"{AZ}: 'us-west-2a' does not offer p3dn.24xlarge",
    f"{NS}:gpuNodeGroups[big].maxSzie: unknown key 'maxSzie'; did you mean 'maxSize'?",
    f"{NS}:gpuNodeGroups[big].minSize: 3 is greater than maxSize 2",
    f"{NS}:jobs[nccl].nodeGroup: is required",
    f"{NS}:jobs[nccl].nodeGrup: unknown key 'nodeGrup'; did you mean 'nodeGroup'?",
    f"{NS}:jobs[nccl-big].colour: unknown key 'colour'; allowed keys are: ",
    f"{NS}:tags.cost: 31 is not allowed: expected a string",
]


def test_the_plan_command_reports_every_mistake_in_one_run(tmp_path):
    """The command's entry point in-process (the real process's exit code on a bad config is
    test_plan_cli.py's): exit 2, each of the mistakes on stderr, no traceback, no files."""
    stack_file = tmp_path / "Pulumi.many.yaml"
    stack_file.write_text(MANY_MISTAKES)
    out = tmp_path / "out"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = infra_main(["plan", "--stack", "many", "--config-file", str(stack_file), "--out", str(out)])
    proc = subprocess.CompletedProcess([], code, stdout.getvalue(), stderr.getvalue())
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == f"error: stack 'many': invalid stack config ({len(MANY_KEYS)} problem(s)):"
    for expected in MANY_KEYS:
        assert sum(line.startswith(f"  - {expected}") for line in lines) == 1, expected
    assert not out.exists()


def test_the_program_reports_the_gpu_az_with_the_other_problems():
    """`pulumi up` runs the program, which checks the GPU AZ against AWS's answers (the offline
    engine's here) together with the rest of the config."""
    from infra import program

    values = minimal_values(gpuAvailabilityZone="us-west-2a", gpuNodeGroups=[V100], jobs=[_job(colour="red")])
    with pytest.raises(pulumi.RunError) as err:
        offline.run(program.main, values, project="gpu-training", stack="test")
    message = str(err.value)
    assert message.startswith("invalid stack config (3 problem(s)):")
    assert f"  - {AZ}: 'us-west-2a' does not offer p3dn.24xlarge" in message
    assert f"  - {NS}:jobs[nccl].colour: unknown key 'colour'" in message
    assert f"  - {NS}:jobs[nccl].nodeGroup: 'p4d' is not a GPU node group of this stack" in message


def _ask(**over: Any) -> PlacementAsk:
    fields: dict[str, Any] = {
        "project": "gpu-training",
        "stack": "test",
        "region": "us-west-2",
        "requested": "us-west-2a",
        "gpu_types": ["p3dn.24xlarge"],
        "availability_zone_count": 2,
        "tags": {},
    }
    return PlacementAsk(**{**fields, **over})


def test_the_programs_check_says_nothing_where_it_cannot_look(monkeypatch):
    """Without the stack's tags its GPU subnet cannot be found, and a lookup that fails (no
    credentials) is left to the placement after the config, which reports it."""
    facts = AwsRegionFacts()

    def no_credentials(gpu_types: list[str], tags: dict[str, str]) -> RegionFacts:
        raise RuntimeError("no credentials")

    monkeypatch.setattr(facts, "facts", no_credentials)
    assert facts.check(_ask()) == []
    answered = RegionFacts(offline.region_azs("us-west-2"), offline.az_offerings("us-west-2"))
    monkeypatch.setattr(facts, "facts", lambda gpu_types, tags: answered)
    assert facts.check(_ask(tags=None)) == []
    assert [p.key for p in facts.check(_ask())] == [AZ]
    assert [p.key for p in facts.check(_ask(requested="auto", availability_zone_count=6))] == [
        f"{NS}:network.availabilityZoneCount"
    ]
