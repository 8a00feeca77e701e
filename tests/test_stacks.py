"""Every stack file in the repository plans offline: a new environment is covered by copying a file."""

from __future__ import annotations

import pytest

from stacks.config.stackfile import read_stack_config
from tests.helpers import ROOT, run_stack

STACKS = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))


def test_the_repository_has_dev_and_prod():
    assert {"dev", "prod"} <= set(STACKS)


@pytest.mark.parametrize("stack", STACKS)
def test_each_stack_file_plans(stack: str, request):
    _, values = read_stack_config(stack, ROOT)
    # dev and prod: the session's shared plans of the same files (read only)
    result = request.getfixturevalue(f"{stack}_plan") if stack in ("dev", "prod") else run_stack(values, stack=stack)
    kinds = {r.type for r in result.records}
    assert {"eks:index:Cluster", "eks:index:ManagedNodeGroup", "aws:ec2/vpc:Vpc"} <= kinds
    assert result.outputs["clusterName"]
