"""The estimated critical path of a first `pulumi up`: FSx is created beside the cluster, so the
whole stack takes no longer than the chain no stack can avoid (network, cluster, system nodes,
managed add-ons)."""

from __future__ import annotations

import dataclasses

import pytest

from infra import critical_path
from infra import plan as plan_mod


@pytest.fixture(scope="module", params=["dev", "prod"])
def records(request):
    return request.getfixturevalue(f"{request.param}_plan").records  # (the shared plans: read only)


def test_the_critical_path_is_within_5_percent_of_the_floor(records):
    path = critical_path.estimate(records)
    assert 15 <= path.floor <= 25, path.floor
    assert path.total <= path.floor * 1.05, critical_path.describe(path)
    names = [s.name for s in path.floor_chain]
    assert "cluster-eks" in names and "system-mng" in names


def test_fsx_waiting_for_the_cluster_would_show(prod_plan):
    """Make prod's PERSISTENT_2 file system (~15 min) wait for a rule that references the cluster's
    security group (as it did): the estimate must see the longer chain."""
    records = prod_plan.records  # (changed below in copies: dataclasses.replace)
    fs = next(r for r in records if r.type == "aws:fsx/lustreFileSystem:LustreFileSystem")
    node_rule = next(r for r in records if r.name.startswith("fsx-lustre-988") and r.name.endswith("-from-nodes"))
    changed = [
        dataclasses.replace(r, depends_on=[*r.depends_on, {"type": node_rule.type, "name": node_rule.name}])
        if r is fs
        else r
        for r in records
    ]
    # The rule references the cluster's security group, an output of the cluster.
    cluster = next(r for r in records if r.type == "eks:index:Cluster")
    changed = [
        dataclasses.replace(r, depends_on=[*r.depends_on, {"type": cluster.type, "name": cluster.name}])
        if r.name == node_rule.name
        else r
        for r in changed
    ]
    slow = critical_path.estimate(changed)
    assert slow.total > slow.floor * 1.05
    chain = [s.name for s in slow.chain]
    assert chain.index("cluster-eks") < chain.index(node_rule.name) < chain.index(fs.name)
    assert slow.total >= 25


def test_typical_minutes(prod_plan):
    fsx = [r for r in prod_plan.records if r.type.startswith("aws:fsx/lustre")]
    assert critical_path.minutes(fsx[0]) == 15.0  # PERSISTENT_2
    component = dataclasses.replace(fsx[0], type="gputraining:components:FsxStore", custom=False)
    assert critical_path.minutes(component) == 0.0


def test_the_plan_summary_prints_it(tmp_path, capsys):
    assert plan_mod.run_cli("prod", None) == 0
    out = capsys.readouterr().out
    assert "Estimated `pulumi up` of a new stack:" in out and "critical path: " in out and "cluster-eks (10)" in out
