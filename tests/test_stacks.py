"""Every stack file in the repository plans offline: a new environment is covered by copying a file."""

from __future__ import annotations

import pytest

from stacks.config.stackfile import read_stack_config
from tests.conftest import ROOT, run_stack

STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


def test_the_repository_has_dev_and_prod():
    assert {"dev", "prod"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_file_plans(stack: str):
    _, values = read_stack_config(stack, ROOT)
    result = run_stack(values, stack=stack)
    kinds = {r.type for r in result.records}
    assert {"eks:index:Cluster", "eks:index:ManagedNodeGroup", "aws:ec2/vpc:Vpc"} <= kinds
    assert result.outputs["clusterName"]
