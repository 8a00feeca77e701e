"""Day two (issue 37): what a running stack's `pulumi up` sends as an update and the API refuses, said as
REFUSED by `infra diff` and by the plan of a running stack (infra/diff/refusals.py); and the FSx claim,
which keeps its first request so that growing FSx is not one of them.

The running stack deployed from main at the branch start is vendored (tests/data/day_two, SOURCES.md):
the records of its plan that the checks read.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from infra import offline
from infra import plan as infra_plan
from infra.diff import cli as plan_diff
from infra.diff.compare import REPLACE, Diff
from infra.diff.plans import Plan, index
from infra.diff.refusals import RESIZE_ADMISSION, of_diff, of_records, quantity
from stacks import config as stack_config
from stacks.config.stackfile import read_stack_config
from tests.helpers import NS, ROOT, dev_values

DATA = ROOT / "tests" / "data" / "day_two"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
PV = "kubernetes:core/v1:PersistentVolume"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
CLUSTER = "eks:index:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
SC = "kubernetes:storage.k8s.io/v1:StorageClass"
GROWN = {"dev": 2400, "prod": 7200}  # the next size up of each stack's FSx (1200 and 4800 on main)


def main_state(stack: str) -> list[dict[str, Any]]:
    return json.loads((DATA / f"main-c9c0557-{stack}.json").read_text())


def values_of(stack: str, capacity: int | None = None) -> dict[str, Any]:
    values = dev_values() if stack == "dev" else copy.deepcopy(read_stack_config("prod", ROOT)[1])
    if capacity is not None:
        values[f"{NS}:storage"]["fsx"]["storageCapacityGiB"] = capacity
    return values


def run_deployed(stack: str, values: dict[str, Any], state: list[dict[str, Any]]) -> offline.PlanResult:
    """The plan of the running stack whose state is ``state``."""
    from infra import program

    stack_config.load(values, "gpu-training", stack)
    deployed = offline.Deployed(resources=tuple(state))
    return offline.run(program.main, values, project="gpu-training", stack=stack, deployed=deployed)


def records(result: offline.PlanResult) -> list[dict[str, Any]]:
    return [r.as_json() for r in result.records]


def one(recs: list[dict[str, Any]], typ: str, name: str) -> dict[str, Any]:
    (found,) = [r for r in recs if r["type"] == typ and r["name"] == name]
    return found


def plan_of(recs: list[dict[str, Any]]) -> Plan:
    return Plan(index(recs), {}, {}, present=True)


def test_the_vendored_state_is_the_one_sources_names():
    sources = (DATA / "SOURCES.md").read_text()
    for stack in ("dev", "prod"):
        digest = hashlib.sha256((DATA / f"main-c9c0557-{stack}.json").read_bytes()).hexdigest()
        assert f"| main-c9c0557-{stack}.json | {stack} | {len(main_state(stack))} | {digest} |" in sources


# ---------------------------------------------------------------------------------------------
# The FSx claim: a constant request, the PV follows the file system
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["dev", "prod"])
def grown(request) -> tuple[str, offline.PlanResult]:
    """Each stack as deployed from main, planned with its FSx grown one step."""
    stack = request.param
    return stack, run_deployed(stack, values_of(stack, GROWN[stack]), main_state(stack))


def test_the_claim_keeps_its_first_request_and_the_pv_follows_the_file_system(grown):
    stack, result = grown
    recs = records(result)
    claim, pv = one(recs, PVC, "fsx-pvc"), one(recs, PV, "fsx-pv")
    assert claim["options"]["ignoreChanges"] == ["spec.resources.requests"]
    assert claim["inputs"]["spec"]["storageClassName"] == ""  # a static claim, which may not grow
    assert pv["inputs"]["spec"]["capacity"]["storage"] == f"{GROWN[stack]}Gi"
    assert "ignoreChanges" not in (pv.get("options") or {})
    assert one(recs, FSX, "fsx-fs")["inputs"]["storageCapacity"] == GROWN[stack]


def test_growing_fsx_on_a_stack_deployed_from_main_is_safe(grown):
    """The running-stack upgrade from main: FSx and its PV update in place, the claim's request stays
    (its state's), nothing is refused, in the plan of the running stack and in `infra diff`."""
    stack, result = grown
    assert infra_plan.refused_lines(result) == []
    diff = Diff(plan_of(main_state(stack)), plan_of(records(result)))
    assert of_diff(diff) == [] and diff.replaced == []
    changed = {c.key: c.paths for c in diff.updated}
    assert changed[(FSX, "fsx-fs")] == ["inputs.storageCapacity"]
    assert changed[(PV, "fsx-pv")] == ["inputs.spec.capacity.storage"]
    # The claim: only the new option (recorded in the state, no update); its request is the one `pulumi up`
    # keeps from the state.
    assert (PVC, "fsx-pvc") not in changed
    assert {c.key: c.paths for c in diff.state_only}[(PVC, "fsx-pvc")] == ["options.ignoreChanges"]


def test_the_claim_as_main_registers_it_is_refused(grown):
    """Break the rule once: the grown claim without ignoreChanges (main's program) is REFUSED, naming the
    admission plugin; growing it is what failed every `up`."""
    stack, result = grown
    recs = records(result)
    claim = one(recs, PVC, "fsx-pvc")
    del claim["options"]
    deployed = one(main_state(stack), PVC, "fsx-pvc")["inputs"]["spec"]["resources"]["requests"]["storage"]
    assert deployed != f"{GROWN[stack]}Gi"
    (refusal,) = of_records(main_state(stack), recs)
    assert refusal.key == (PVC, "fsx-pvc") and refusal.source == RESIZE_ADMISSION
    assert refusal.change == f"spec.resources.requests.storage {deployed} -> {GROWN[stack]}Gi"
    assert "a static claim" in refusal.rule


def test_the_plan_of_a_running_stack_says_refused():
    """The plan summary of a running stack that `pulumi up` cannot take there: a cluster deployed at 1.34
    (two minors behind the config's 1.36) gets a REFUSED line; the same stack at main's 1.36 gets none."""
    values = values_of("dev")
    cfg = stack_config.load(values, "gpu-training", "dev")
    assert "REFUSED" not in infra_plan.summary(cfg, run_deployed("dev", values, main_state("dev")))
    state = main_state("dev")
    one(state, CLUSTER, "cluster-eks")["inputs"]["version"] = "1.34"
    text = infra_plan.summary(cfg, run_deployed("dev", values, state))
    (line,) = [x for x in text.splitlines() if x.startswith("REFUSED")]
    assert line.startswith(
        "REFUSED: cluster-eks (eks:index:Cluster): version 1.34 -> 1.36: EKS updates one minor version at a time: "
        "1.35 first [Amazon EKS User Guide, update-cluster.html"
    )


# ---------------------------------------------------------------------------------------------
# `infra diff`: each rule, broken once and kept once
# ---------------------------------------------------------------------------------------------


def rec(typ: str, name: str, inputs: dict[str, Any], **options: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "type": typ,
        "name": name,
        "id": f"{name}-0123456789",
        "parent": None,
        "dependsOn": [],
        "inputs": inputs,
    }
    if options:
        r["options"] = options
    return r


def refused(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    return [f"{r.key[1]}: {r.change}: {r.rule}" for r in of_records(old, new)]


def claim(storage: str, cls: str = "") -> dict[str, Any]:
    spec = {"storageClassName": cls, "resources": {"requests": {"storage": storage}}, "accessModes": ["ReadWriteMany"]}
    return rec(PVC, "c", {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c"}, "spec": spec})


def storage_class(expand: bool | None, reclaim: str = "Retain") -> dict[str, Any]:
    inputs: dict[str, Any] = {"metadata": {"name": "gp"}, "provisioner": "ebs.csi.aws.com", "reclaimPolicy": reclaim}
    if expand is not None:
        inputs["allowVolumeExpansion"] = expand
    return rec(SC, "gp", inputs)


def test_quantities():
    assert quantity("1200Gi") == 1200 * 2**30 and quantity("5Ti") == 5 * 2**40 and quantity("500M") == 5e8
    assert quantity("10") == 10 and quantity("big") is None and quantity(None) is None


def test_a_claim_grows_only_through_a_storage_class_that_allows_it_and_never_shrinks():
    assert refused([claim("1Ti")], [claim("2Ti")]) == [
        "c: spec.resources.requests.storage 1Ti -> 2Ti: only dynamically provisioned claims whose StorageClass "
        "allows expansion can grow (a static claim)"
    ]
    assert refused([claim("1Ti", "gp"), storage_class(None)], [claim("2Ti", "gp"), storage_class(None)])
    assert refused([claim("1Ti", "gp"), storage_class(True)], [claim("2Ti", "gp"), storage_class(True)]) == []
    assert refused([claim("2Ti", "gp")], [claim("1Ti", "gp")]) == [
        "c: spec.resources.requests.storage 2Ti -> 1Ti: a claim's request may not be less than its bound capacity"
    ]
    assert refused([claim("1024Gi")], [claim("1Ti")]) == []  # the same quantity written another way
    kept = claim("2Ti")
    kept["options"] = {"ignoreChanges": ["spec.resources.requests"]}
    assert refused([claim("1Ti")], [kept]) == []


def lustre(capacity: int, deployment: str = "SCRATCH_2", version: str = "2.15", **options: Any) -> dict[str, Any]:
    inputs = {
        "storageCapacity": capacity,
        "deploymentType": deployment,
        "storageType": "SSD",
        "fileSystemTypeVersion": version,
    }
    return rec(FSX, "fs", inputs, **options)


def test_fsx_grows_in_its_step_and_a_smaller_or_scratch_1_size_replaces_it():
    assert refused([lustre(2400)], [lustre(4800)]) == []
    assert refused([lustre(2400, "PERSISTENT_2")], [lustre(3600, "PERSISTENT_2")]) == [
        "fs: storageCapacity 2400 -> 3600 GiB: PERSISTENT_2: multiples of 2400 GiB"
    ]
    hdd = {"storageType": "HDD", "perUnitStorageThroughput": 40}
    old, new = lustre(1800, "PERSISTENT_1"), lustre(3600, "PERSISTENT_1")
    old["inputs"].update(hdd)
    new["inputs"].update(hdd)
    assert refused([old], [new]) == []  # HDD at 40 MB/s/TiB: steps of 1800 GiB
    for before, after in ((lustre(4800), lustre(2400)), (lustre(1200, "SCRATCH_1"), lustre(2400, "SCRATCH_1"))):
        diff = Diff(plan_of([before]), plan_of([after]))
        (change,) = diff.replaced
        assert change.forced_by == ["inputs.storageCapacity"] and of_diff(diff) == []


def test_a_lustre_upgrade_is_in_place_and_a_downgrade_replaces():
    up = Diff(plan_of([lustre(1200, version="2.12")]), plan_of([lustre(1200, version="2.15")]))
    assert up.replaced == [] and [c.paths for c in up.updated] == [["inputs.fileSystemTypeVersion"]]
    down = Diff(plan_of([lustre(1200, version="2.15")]), plan_of([lustre(1200, version="2.12")]))
    assert [c.forced_by for c in down.replaced] == [["inputs.fileSystemTypeVersion"]]


def test_a_protected_resource_that_would_be_replaced_is_refused():
    old, new = lustre(4800, "PERSISTENT_2", protect=True), lustre(2400, "PERSISTENT_2", protect=True)
    assert refused([old], [new]) == ["fs: replaced (inputs.storageCapacity): the resource is protected"]
    assert refused([old], [lustre(2400, "PERSISTENT_2")]) == []  # unprotected in the same change


def test_eks_moves_one_minor_up_and_node_groups_never_ahead_of_their_cluster():
    def cluster(v: str) -> dict[str, Any]:
        return rec(CLUSTER, "eks", {"version": v})

    def group(v: str, **options: Any) -> dict[str, Any]:
        return rec(NODE_GROUP, "ng", {"version": v, "clusterName": "c"}, **options)

    assert refused([cluster("1.35")], [cluster("1.36")]) == []
    assert refused([cluster("1.34")], [cluster("1.36")]) == [
        "eks: version 1.34 -> 1.36: EKS updates one minor version at a time: 1.35 first"
    ]
    assert refused([cluster("1.36")], [cluster("1.35")]) == [
        "eks: version 1.36 -> 1.35: EKS does not downgrade a cluster"
    ]
    assert refused([cluster("1.35"), group("1.35")], [cluster("1.36"), group("1.36")]) == []
    assert refused([cluster("1.35"), group("1.35")], [cluster("1.35"), group("1.36")]) == [
        "ng: version 1.35 -> 1.36: newer than its cluster's 1.35"
    ]
    assert refused([cluster("1.36"), group("1.36")], [cluster("1.36"), group("1.35")]) == [
        "ng: version 1.36 -> 1.35: a node group is not rolled back"
    ]
    held = group("1.36", ignoreChanges=["version"])  # a capacity block's window: the state's version is sent
    assert refused([cluster("1.35"), group("1.35")], [cluster("1.35"), held]) == []


def test_immutable_kubernetes_fields_that_pulumi_kubernetes_patches_are_refused():
    assert refused([storage_class(None)], [storage_class(None, reclaim="Delete")]) == [
        "gp: reclaimPolicy changed: a StorageClass's reclaimPolicy is immutable"
    ]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"completionMode": "NonIndexed"}}
    indexed = copy.deepcopy(job)
    indexed["spec"]["completionMode"] = "Indexed"
    assert refused([rec("kubernetes:batch/v1:Job", "j", job)], [rec("kubernetes:batch/v1:Job", "j", indexed)]) == [
        "j: spec.completionMode changed: a Job's completionMode is immutable"
    ]
    # A field pulumi-kubernetes replaces on change (the claim's storageClassName) is a replacement, not a refusal.
    diff = Diff(plan_of([claim("1Ti", "a")]), plan_of([claim("1Ti", "b")]))
    assert [c.action for c in diff.replaced] == [REPLACE] and of_diff(diff) == []


def test_ignored_inputs_are_no_change():
    """The engine sends the state's value for an ignoreChanges path: a desired size the autoscaler owns."""
    old = rec(
        NODE_GROUP,
        "ng",
        {"scalingConfig": {"desiredSize": 0, "maxSize": 2}},
        ignoreChanges=["scalingConfig.desiredSize"],
    )
    new = copy.deepcopy(old)
    new["inputs"]["scalingConfig"]["desiredSize"] = 1
    assert Diff(plan_of([old]), plan_of([new])).empty
    new["inputs"]["scalingConfig"]["maxSize"] = 4
    assert [c.paths for c in Diff(plan_of([old]), plan_of([new])).updated] == [["inputs.scalingConfig.maxSize"]]


def test_the_markdown_says_refused_first(tmp_path: Path):
    def write(folder: Path, recs: list[dict[str, Any]]) -> Path:
        folder.mkdir()
        (folder / "resources.json").write_text(json.dumps(recs))
        (folder / "outputs.json").write_text("{}")
        return folder

    base, head = write(tmp_path / "base", [claim("1200Gi")]), write(tmp_path / "head", [claim("2400Gi")])
    out = io.StringIO()
    assert plan_diff.main([str(base), str(head)], out=out) == 0
    md = out.getvalue()
    assert md.splitlines()[3] == (
        "**`pulumi up` of the deployed stack would FAIL: the API REFUSES 1 change** (on update; a new stack would "
        "take them):"
    )
    row = "| REFUSED | `kubernetes:core/v1:PersistentVolumeClaim` | `c` | `spec.resources.requests.storage 1200Gi"
    assert row + " -> 2400Gi` |" in md
    assert md.index("REFUSES") < md.index("Resources:")
    updated = "| ~ | `kubernetes:core/v1:PersistentVolumeClaim` | `c` | `inputs.spec.resources.requests.storage`"
    assert updated + " (**REFUSED**: see above) |" in md
    new_stack = io.StringIO()
    assert plan_diff.main([str(base), str(head), "--base-absent"], out=new_stack) == 0
    assert "REFUSE" not in new_stack.getvalue()  # nothing deployed, nothing to refuse
