"""scripts/plan_diff.py: the markdown difference of two offline plans, for pull-request comments."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import plan as infra_plan
from tests.helpers import NS, ROOT, dev_values, run_stack

_spec = importlib.util.spec_from_file_location("plan_diff", ROOT / "scripts" / "plan_diff.py")
plan_diff = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan_diff)


def _resource(typ: str, name: str, inputs: dict, parent: dict | None = None, deps: list | None = None) -> dict:
    return {"type": typ, "name": name, "id": f"{name}-id", "parent": parent, "dependsOn": deps or [], "inputs": inputs}


def write_plan(folder: Path, resources: list[dict], manifests: list[dict], outputs: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    (folder / "resources.json").write_text(json.dumps(resources))
    (folder / "manifests.yaml").write_text(yaml.safe_dump_all(manifests, explicit_start=True) if manifests else "")
    (folder / "outputs.json").write_text(json.dumps(outputs))
    return folder


def run(argv: list[str]) -> str:
    out = io.StringIO()
    assert plan_diff.main([str(a) for a in argv], out=out) == 0
    return out.getvalue()


NET = {"type": "gputraining:components:Network", "name": "network"}
BASE_RESOURCES = [
    _resource("gputraining:components:Network", "network", {}),
    _resource("aws:ec2/vpc:Vpc", "network-vpc", {"cidrBlock": "10.0.0.0/16"}, NET),
    _resource("aws:ec2/subnet:Subnet", "network-private-a", {"cidrBlock": "10.0.0.0/19", "tags": {"a": "1"}}, NET),
    _resource("aws:ec2/eip:Eip", "network-nat-b", {"domain": "vpc"}, NET),
    _resource(
        "aws:eks/nodeGroup:NodeGroup", "gpu", {"scalingConfig": {"maxSize": 2, "minSize": 0}, "labels": ["x", "y"]}
    ),
]
BASE_MANIFESTS = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "training"}},
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": "training"},
        "data": {"k": "1", "same": "s"},
    },
    {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "old", "namespace": "training"},
        "spec": {"ports": [{"port": 80}]},
    },
]


@pytest.fixture
def synthetic(tmp_path: Path) -> tuple[Path, Path]:
    base = write_plan(
        tmp_path / "base", BASE_RESOURCES, BASE_MANIFESTS, {"gpuAvailabilityZone": "us-west-2b", "vpcId": "vpc-1"}
    )
    head_resources = copy.deepcopy(BASE_RESOURCES)
    head_resources[2]["inputs"]["cidrBlock"] = "10.0.32.0/19"  # changed
    head_resources[2]["inputs"]["tags"]["b"] = "2"  # key added
    del head_resources[3]  # EIP removed
    head_resources[3]["inputs"]["scalingConfig"]["maxSize"] = 4
    head_resources[3]["inputs"]["labels"] = ["x", "z"]
    head_resources[3]["dependsOn"] = [{"type": "aws:ec2/vpc:Vpc", "name": "network-vpc"}]
    head_resources.append(_resource("aws:ec2/natGateway:NatGateway", "network-nat-a", {"subnetId": "s"}, NET))
    head_manifests = copy.deepcopy(BASE_MANIFESTS)
    head_manifests[1]["data"]["k"] = "2"
    del head_manifests[2]
    head_manifests.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "new", "namespace": "training"},
            "spec": {},
        }
    )
    head = write_plan(
        tmp_path / "head", head_resources, head_manifests, {"gpuAvailabilityZone": "us-west-2c", "vpcId": "vpc-1"}
    )
    return base, head


def test_synthetic_plans(synthetic):
    base, head = synthetic
    md = run([base, head, "--title", "Offline plan: dev"])
    assert md.startswith(plan_diff.MARKER + "\n### Offline plan: dev\n")
    assert "Resources: **1 added, 1 removed, 2 changed** (5 → 5)" in md
    assert "Kubernetes objects: **1 added, 1 removed, 1 changed** (3 → 3)" in md
    sections = {s.split("\n", 1)[0]: s for s in md.split("#### ")[1:]}
    assert "| `aws:ec2/natGateway:NatGateway` | `network-nat-a` |" in sections["Resources added"]
    assert "| `aws:ec2/eip:Eip` | `network-nat-b` |" in sections["Resources removed"]
    changed = sections["Resources changed"]
    assert "| `aws:ec2/subnet:Subnet` | `network-private-a` | `inputs.cidrBlock`, `inputs.tags.b` |" in changed
    assert (
        "| `aws:eks/nodeGroup:NodeGroup` | `gpu` | `inputs.labels[1]`, `inputs.scalingConfig.maxSize`, `dependsOn` |"
        in changed
    )
    assert "network-vpc" not in changed and "minSize" not in changed  # unchanged things stay out
    assert "| `Deployment (apps/v1)` | `training/new` |" in sections["Kubernetes objects added"]
    assert "| `Service (v1)` | `training/old` |" in sections["Kubernetes objects removed"]
    assert "| `ConfigMap (v1)` | `training/cfg` | `data.k` |" in sections["Kubernetes objects changed"]
    assert "Namespace" not in md
    assert (
        "`gpuAvailabilityZone`" in sections["Stack outputs changed"]
        and "vpcId" not in sections["Stack outputs changed"]
    )
    # The GPU AZ moves (us-west-2b -> us-west-2c): said in words, before anything else.
    first = md.split("\n")[3]
    assert first.startswith(
        "**This change MOVES the GPU AZ** from `us-west-2b` to `us-west-2c` (stack output `gpuAvailabilityZone`)"
    )
    assert (
        "replaces every GPU node group" in first
        and "FSx for Lustre" in first
        and "`gpuAvailabilityZone: auto`" in first
    )


def test_identical_plans_say_so(synthetic):
    base, _ = synthetic
    md = run([base, base])
    assert "Resources: **0 added, 0 removed, 0 changed** (5 → 5)" in md
    assert "No difference in resources, Kubernetes objects or stack outputs." in md
    assert "####" not in md and "MOVES" not in md


def test_new_stack_compares_with_an_empty_plan(synthetic, tmp_path):
    _, head = synthetic
    md = run([tmp_path / "missing", head, "--base-status", "absent"])
    assert "The base branch has no plan for this stack (new stack)" in md
    assert "Resources: **5 added, 0 removed, 0 changed** (0 → 5)" in md
    assert "MOVES" not in md  # a new stack has no AZ to move from


def test_failed_base_plan_is_noted(synthetic):
    base, head = synthetic
    md = run([base, head, "--base-status", "failed"])
    assert "The offline plan of the base branch failed" in md and "**5 added" in md


def test_failed_head_plan_shows_its_output(synthetic, tmp_path):
    base, head = synthetic
    log = tmp_path / "head.log"
    log.write_text(
        "error: stack 'dev': invalid stack config (1 problem(s)):\n  - gpu-training:gpuNodeGroups[0].maxSize: 0 is not allowed\n"
    )
    md = run([base, head, "--head-status", "failed", "--head-log", log])
    assert "**The offline plan of this pull request failed**" in md
    assert "gpuNodeGroups[0].maxSize: 0 is not allowed" in md
    assert "Resources:" not in md


def test_long_tables_are_cut(tmp_path):
    base = write_plan(tmp_path / "base", [], [], {})
    head = write_plan(
        tmp_path / "head", [_resource("aws:ec2/subnet:Subnet", f"s{i:02}", {}) for i in range(12)], [], {}
    )
    md = run([base, head, "--max-rows", "5"])
    assert "`s04`" in md and "`s05`" not in md and "_... and 7 more_" in md


def test_project_roots_do_not_count_as_a_change(tmp_path):
    # The plan records the kustomize directory as an absolute path: base and head are checked out
    # in different folders.
    def plan_in(root: Path) -> list[dict]:
        return [_resource("kubernetes:kustomize/v2:Directory", "ops", {"directory": f"{root}/manifests/ops"})]

    base_root, head_root = tmp_path / "base", tmp_path / "head"
    base = write_plan(tmp_path / "plan-base", plan_in(base_root), [], {})
    head = write_plan(tmp_path / "plan-head", plan_in(head_root), [], {})
    assert "`inputs.directory`" in run([base, head])
    md = run([base, head, "--base-root", base_root, "--head-root", head_root])
    assert "No difference in resources" in md


def test_changed_paths():
    assert plan_diff.changed_paths({"a": {"b": 1, "c": [1, 2]}}, {"a": {"b": 1, "c": [1, 3]}}) == ["a.c[1]"]
    assert plan_diff.changed_paths({"a": [1]}, {"a": [1, 2]}) == ["a"]
    assert plan_diff.changed_paths({"a": 1}, {"b": 1}) == ["a", "b"]
    assert plan_diff.changed_paths(1, 1) == []


def test_runs_as_a_script(synthetic):
    base, head = synthetic
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "plan_diff.py"), str(base), str(head)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "**1 added, 1 removed, 2 changed**" in done.stdout


def test_real_plans_one_config_value_changed(dev_plan, tmp_path):
    """The dev plan against the dev plan with the p4d group's maxSize raised from 2 to 4."""
    values = dev_values()
    groups = values[f"{NS}:gpuNodeGroups"]
    p4d = next(g for g in groups if g["name"] == "p4d")
    assert p4d["maxSize"] != 4
    p4d["maxSize"] = 4
    changed = run_stack(values, stack="dev")
    infra_plan.write_files(dev_plan, tmp_path / "base")
    infra_plan.write_files(changed, tmp_path / "head")

    md = run([tmp_path / "base", tmp_path / "head", "--title", "Offline plan: dev"])
    n = len(dev_plan.records)
    # The node group, and the queue's quota, which follows the group's maxSize (stacks/queues/).
    assert f"Resources: **0 added, 0 removed, 2 changed** ({n} → {n})" in md
    rows = [line for line in md.splitlines() if line.startswith("| `") and "maxSize" in line]
    assert len(rows) == 1 and "`inputs.scalingConfig.maxSize`" in rows[0] and "p4d" in rows[0]
    assert "Kubernetes objects: **0 added, 0 removed, 1 changed**" in md
    assert (
        "| `ClusterQueue (kueue.x-k8s.io/v1beta2)` | `gpu` | " in md
        and "`spec.resourceGroups[0].flavors[0].resources[2].nominalQuota`" in md
    )
    assert "Resources added" not in md and "Resources removed" not in md
