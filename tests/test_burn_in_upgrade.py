"""The `up` that turns burn-in on over a running stack, as `python -m infra diff` reads it: the dev
stack without burn-in (a stack deployed from before burn-in, or from the branch start, whose node-group
update EKS refused: its 66-character taint key left the groups as they were) against the dev stack now.

What makes it safe, on paper: the GPU node groups are updated in place (their running nodes stay;
EKS adds the taint to them), nothing is replaced, and the burn-in DaemonSet is new and ordered after
the node groups. What its pods then do with those running nodes (release them, or judge them on their
present state only) is tests/test_burn_in_script.py's part, against a fake API server.
"""

from __future__ import annotations

import copy

import pytest

from components import burn_in
from facts.kube import BURN_IN_TAINT
from infra import plan as infra_plan
from infra.diff.compare import Diff
from infra.diff.plans import load_plan
from tests.helpers import NS, ROOT, dev_values, run_stack

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


@pytest.fixture(scope="module")
def upgrade(tmp_path_factory) -> Diff:
    before = copy.deepcopy(dev_values())
    before[f"{NS}:burnIn"] = {"enabled": False}
    folder = tmp_path_factory.mktemp("upgrade")
    infra_plan.write_files(run_stack(before, stack="dev"), folder / "base")
    infra_plan.write_files(run_stack(dev_values(), stack="dev"), folder / "head")
    return Diff(load_plan(folder / "base", ROOT), load_plan(folder / "head", ROOT))


def test_turning_burn_in_on_replaces_nothing(upgrade):
    assert [(c.key, c.forced_by) for c in upgrade.replaced] == []
    assert upgrade.resources_removed == []


def test_the_gpu_node_groups_only_gain_the_taint_in_place(upgrade):
    groups = [c for c in upgrade.updated if c.key[0] == NODE_GROUP]
    assert {c.key[1] for c in groups} == {"gpu-p4d-mng", "gpu-p3dn-mng"}
    for c in groups:
        assert c.paths and all(p.startswith("inputs.taints") for p in c.paths), c.paths
        taints = upgrade.head.resources[c.key]["inputs"]["taints"]
        assert {"key": BURN_IN_TAINT["key"], "value": "pending", "effect": "NO_SCHEDULE"} in taints


def test_the_burn_in_daemonset_is_new_and_comes_after_the_node_groups(upgrade):
    added = {name: typ for typ, name in upgrade.resources_added}
    daemon_set = next(name for name in added if name == "burn-in-daemonset")
    record = upgrade.head.resources[(added[daemon_set], daemon_set)]
    after = {d["name"] for d in record["dependsOn"]}
    assert {"gpu-p4d-mng", "gpu-p3dn-mng"} <= after
    assert record["inputs"]["metadata"]["name"] == burn_in.NAME
