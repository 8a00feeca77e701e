"""`python -m infra diff BASE HEAD` (infra/diff/): the difference of two offline plans for a
reviewer and the pull-request comment: what `pulumi up` would replace (-/+), update in place (~),
add and remove, the GPU AZ move first."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import plan as infra_plan
from infra.__main__ import main as infra_main
from infra.diff import cli as plan_diff
from infra.diff.compare import changed_paths, touches
from infra.diff.markdown import MARKER
from infra.diff.plans import load_plan, manifest_key
from infra.diff.replace_fields import RULES, STATEFUL, rule_for
from tests.helpers import NS, dev_values, run_stack, yaml_objects


def _resource(typ: str, name: str, inputs: dict, parent: dict | None = None, deps: list | None = None) -> dict:
    return {"type": typ, "name": name, "id": f"{name}-id", "parent": parent, "dependsOn": deps or [], "inputs": inputs}


def object_record(manifest: dict) -> dict:
    """The record of a registered Kubernetes object, as resources.json holds it: its manifest is its inputs."""
    group, _, version = manifest["apiVersion"].rpartition("/")
    typ = f"kubernetes:{group or 'core'}/{version}:{manifest['kind']}"
    return _resource(typ, f"{manifest['kind'].lower()}-{manifest['metadata']['name']}", manifest)


def write_plan(folder: Path, resources: list[dict], manifests: list[dict], outputs: dict[str, Any]) -> Path:
    """A plan folder as the plan command writes it: the objects in manifests.yaml are registered resources too."""
    folder.mkdir(parents=True)
    (folder / "resources.json").write_text(json.dumps([*resources, *map(object_record, manifests)]))
    (folder / "manifests.yaml").write_text(yaml.safe_dump_all(manifests, explicit_start=True) if manifests else "")
    (folder / "outputs.json").write_text(json.dumps(outputs))
    return folder


def run(argv: list[Any]) -> str:
    out = io.StringIO()
    assert plan_diff.main([str(a) for a in argv], out=out) == 0
    return out.getvalue()


def section(md: str, title: str) -> str:
    """The text of one ``#### title`` section of the markdown ('' when absent)."""
    for part in md.split("#### ")[1:]:
        head, _, body = part.partition("\n")
        if head == title:
            return body
    return ""


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
    assert md.startswith(MARKER + "\n### Offline plan: dev\n")
    assert "Resources: **2 to replace, 1 to update in place, 2 to add, 2 to remove** (8 → 8)" in md
    # (pulumi-kubernetes replaces a ConfigMap whose data changes: infra/diff/replace_fields.py)
    assert "Kubernetes objects: **1 added, 1 removed, 1 replaced, 0 changed in place** (3 → 3)" in md
    # A subnet's CIDR block is replace-on-change; its tags are not, but ride along.
    assert "| -/+ | `aws:ec2/subnet:Subnet` | `network-private-a` | forced by `inputs.cidrBlock` |" in section(
        md, "Replaced (`-/+`)"
    )
    updated = section(md, "Updated in place (`~`)")
    assert (
        "| ~ | `aws:eks/nodeGroup:NodeGroup` | `gpu` | `inputs.labels[1]`, `inputs.scalingConfig.maxSize`, "
        "`dependsOn` |"
    ) in updated
    assert "| + | `aws:ec2/natGateway:NatGateway` | `network-nat-a` |" in section(md, "Added (`+`)")
    assert "| - | `aws:ec2/eip:Eip` | `network-nat-b` |" in section(md, "Removed (`-`)")
    assert "network-vpc" not in md.split("#### Added")[0] and "minSize" not in md  # unchanged things stay out
    assert "| `Deployment (apps/v1)` | `training/new` |" in section(md, "Kubernetes objects added")
    assert "| `Service (v1)` | `training/old` |" in section(md, "Kubernetes objects removed")
    assert "| -/+ | `ConfigMap (v1)` | `training/cfg` | `data.k` |" in section(md, "Kubernetes objects changed")
    assert "Namespace" not in md
    outputs = section(md, "Stack outputs changed")
    assert "`gpuAvailabilityZone`" in outputs and "vpcId" not in outputs
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
    # Replacements, then updates, additions, removals.
    order = [
        md.index(f"#### {t}") for t in ("Replaced (`-/+`)", "Updated in place (`~`)", "Added (`+`)", "Removed (`-`)")
    ]
    assert order == sorted(order)


def test_identical_plans_say_so(synthetic):
    base, _ = synthetic
    md = run([base, base])
    assert "Resources: **0 to replace, 0 to update in place, 0 to add, 0 to remove** (8 → 8)" in md
    assert "No difference in resources, Kubernetes objects or stack outputs." in md
    assert "####" not in md and "MOVES" not in md


def test_new_stack_says_so_explicitly(synthetic, tmp_path):
    _, head = synthetic
    md = run([tmp_path / "missing", head, "--base-absent"])
    assert "The base branch has no plan for this stack (new stack)" in md
    assert "Resources: **0 to replace, 0 to update in place, 8 to add, 0 to remove** (0 → 8)" in md
    assert "MOVES" not in md  # a new stack has no AZ to move from


@pytest.mark.parametrize("side", ["base", "head"])
def test_a_folder_without_a_plan_is_an_error(synthetic, tmp_path, side):
    base, head = synthetic
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [empty, head] if side == "base" else [base, empty]
    out, err = io.StringIO(), io.StringIO()
    assert plan_diff.main([str(a) for a in args], out=out, err=err) == 1  # an error, as terraform says it
    assert out.getvalue() == ""
    message = err.getvalue()
    assert f"{side.upper()} {empty} holds no plan (no resources.json or outputs.json)" in message
    assert "python -m infra plan --stack STACK --out DIR" in message and "manifests.yaml" in message
    assert ("--base-absent" in message) == (side == "base")


def test_failed_base_plan_is_noted(synthetic, tmp_path):
    _, head = synthetic
    md = run([tmp_path / "no-plan", head, "--base-failed"])
    assert "The offline plan of the base branch failed" in md and "**0 to replace, 0 to update in place, 8 to add" in md


def test_failed_head_plan_shows_its_output(synthetic, tmp_path):
    base, _ = synthetic
    log = tmp_path / "head.log"
    log.write_text(
        "error: stack 'dev': invalid stack config (1 problem(s)):\n"
        "  - gpu-training:gpuNodeGroups[0].maxSize: 0 is not allowed\n"
    )
    md = run([base, tmp_path / "no-plan", "--head-failed", "--head-log", log])
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
    assert changed_paths({"a": {"b": 1, "c": [1, 2]}}, {"a": {"b": 1, "c": [1, 3]}}) == ["a.c[1]"]
    assert changed_paths({"a": [1]}, {"a": [1, 2]}) == ["a"]
    assert changed_paths({"a": 1}, {"b": 1}) == ["a", "b"]
    assert changed_paths(1, 1) == []


def test_a_change_touches_a_field_at_under_or_above_it():
    assert touches("subnetIds[0]", "subnetIds") and touches("subnetIds", "subnetIds")
    assert touches("scalingConfig.maxSize", "scalingConfig") and not touches("scalingConfig.maxSize", "subnetIds")
    assert touches("launchTemplate", "launchTemplate.id")  # the whole block added or removed
    assert not touches("launchTemplate.version", "launchTemplate.id")
    assert not touches("subnetIdsExtra", "subnetIds") and not touches("spec.templates", "spec.template")
    assert touches("spec.containers[3].image", "spec.containers[*].image")
    assert not touches("spec.containers[3].name", "spec.containers[*].image")
    assert touches("anything.at.all", "*")


def test_the_replace_table_names_its_sources_and_covers_the_stateful_types():
    # Each entry says where it was read; every stateful type has a rule of its own.
    for typ, rule in RULES.items():
        assert rule.fields and "/" in rule.source and (" at " in rule.source or "(this repository)" in rule.source), typ
        assert bool(rule.note) == bool(rule.note_fields), typ  # a note says which inputs make it worth showing
    for typ in STATEFUL:
        assert rule_for(typ) is not None, typ
    for typ in (
        "eks:index:Cluster",
        "aws:fsx/lustreFileSystem:LustreFileSystem",
        "aws:efs/fileSystem:FileSystem",
        "aws:eks/nodeGroup:NodeGroup",
        "aws:kms/key:Key",
    ):
        assert typ in STATEFUL
    # Every Kubernetes kind is replaced on a new name or namespace; some on more.
    assert rule_for("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue").fields == ("metadata.name", "metadata.namespace")
    assert "spec.template" in rule_for("kubernetes:batch/v1:Job").fields
    assert "spec.clusterIP" in rule_for("kubernetes:core/v1:Service").fields
    assert "parameters" in rule_for("kubernetes:storage.k8s.io/v1:StorageClass").fields
    assert rule_for("kubernetes:kustomize/v2:Directory") is None and rule_for("aws:ec2/vpc:Vpc") is None


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """``python -m infra ARGV`` in-process (``infra.__main__.main``, what the module's ``sys.exit`` returns;
    the process itself is tested in test_cli_help.py): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = infra_main(argv)
        except SystemExit as stop:  # argparse's --help
            code = stop.code if isinstance(stop.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_the_cli_lists_diff_and_refuses_a_base_without_a_plan(tmp_path):
    """Through the CLI's entry point: `python -m infra --help` lists the subcommand, and a base folder
    without a plan exits 1 naming it (the workflow passes --base-absent for a new stack)."""
    code, stdout, _ = _cli(["--help"])
    assert code == 0 and "diff" in stdout
    head = write_plan(tmp_path / "head", [_resource("aws:ec2/vpc:Vpc", "network-vpc", {})], [], {})
    missing = tmp_path / "base"
    code, stdout, stderr = _cli(["diff", str(missing), str(head)])
    assert code == 1 and stdout == ""
    assert f"BASE {missing} does not exist" in stderr and "resources.json" in stderr
    assert "Traceback" not in stderr
    code, stdout, stderr = _cli(["diff", str(missing), str(head), "--base-absent"])
    assert code == 0, stderr
    assert "**0 to replace, 0 to update in place, 1 to add, 0 to remove**" in stdout


# ---------------------------------------------------------------------------------------------
# Real plans: dev, and dev with one thing changed
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_base(dev_plan, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plans") / "base"
    infra_plan.write_files(dev_plan, folder)
    return folder


def plan_dev_with(change, folder: Path) -> Path:
    values = copy.deepcopy(dev_values())
    change(values)
    infra_plan.write_files(run_stack(values, stack="dev"), folder)
    return folder


def rows(md: str, title: str) -> list[str]:
    return [line for line in section(md, title).splitlines() if line.startswith("| ") and not line.startswith("|  |")]


def test_the_plan_records_replace_on_changes(dev_base):
    """The stack's own replace_on_changes (the jobs: a new spec is a new run) is in resources.json."""
    records = json.loads((dev_base / "resources.json").read_text())
    jobs = [r for r in records if r["type"] == "kubernetes:kubeflow.org/v1:PyTorchJob"]
    assert jobs and all(r["options"]["replaceOnChanges"] == ["spec"] for r in jobs)
    assert all(r["options"]["deleteBeforeReplace"] is True for r in jobs)


def test_real_plans_an_in_place_change(dev_plan, dev_base, tmp_path):
    """The p4d group's maxSize raised from 2 to 4: the node group and the queue's quota (which
    follows the group's maxSize, stacks/queues/) are updated in place, nothing is replaced."""
    assert next(g for g in dev_values()[f"{NS}:gpuNodeGroups"] if g["name"] == "p4d")["maxSize"] != 4

    def raise_max(values: dict[str, Any]) -> None:
        next(g for g in values[f"{NS}:gpuNodeGroups"] if g["name"] == "p4d")["maxSize"] = 4

    head = plan_dev_with(raise_max, tmp_path / "head")
    md = run([dev_base, head, "--title", "Offline plan: dev"])
    n = len(dev_plan.records)
    assert f"Resources: **0 to replace, 2 to update in place, 0 to add, 0 to remove** ({n} → {n})" in md
    updated = rows(md, "Updated in place (`~`)")
    assert len(updated) == 2
    assert updated[0] == "| ~ | `aws:eks/nodeGroup:NodeGroup` | `gpu-p4d-mng` | `inputs.scalingConfig.maxSize` |"
    assert updated[1].startswith("| ~ | `kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue` | `queues-clusterqueue-gpu` |")
    assert "Replaced" not in md and "Added" not in md and "MOVES" not in md
    assert "Kubernetes objects: **0 added, 0 removed, 0 replaced, 1 changed in place**" in md
    assert "`spec.resourceGroups[0].flavors[0].resources[2].nominalQuota`" in section(md, "Kubernetes objects changed")


def test_real_plans_a_replacement(dev_base, tmp_path):
    """FSx from SCRATCH_2 to PERSISTENT_2: deploymentType is replace-on-change, so FSx is replaced
    (a new, empty file system: said in words), its PersistentVolume follows its new id, and the
    new KMS key of a persistent file system is added; the stateful replacement comes first."""

    def persistent(values: dict[str, Any]) -> None:
        values[f"{NS}:storage"]["fsx"].update(deploymentType="PERSISTENT_2", perUnitStorageThroughput=125)

    head = plan_dev_with(persistent, tmp_path / "head")
    md = run([dev_base, head])
    replaced = rows(md, "Replaced (`-/+`)")
    assert [r.split(" | ")[1:3] for r in replaced] == [
        ["`aws:fsx/lustreFileSystem:LustreFileSystem`", "`fsx-fs`"],
        ["`kubernetes:core/v1:PersistentVolume`", "`fsx-pv`"],
    ]
    assert replaced[0].startswith("| -/+ |") and "`inputs.deploymentType`" in replaced[0]
    assert "**a new, empty FSx for Lustre file system**" in replaced[0]
    assert "`inputs.spec.csi.volumeHandle`" in replaced[1] and "new id of `fsx-fs" in replaced[1]
    assert "| + | `aws:kms/key:Key` | `fsx-key` |" in section(md, "Added (`+`)")
    assert md.index("#### Replaced") < md.index("#### Added") and "MOVES" not in md


def test_real_plans_a_gpu_az_move(dev_base, tmp_path):
    """gpuAvailabilityZone pinned to us-west-2c (dev's auto picks us-west-2b): the move is said in
    words at the very top, then the replacements, stateful first: FSx and the GPU node groups
    (their subnet), then the rest; the subnets of the old AZ are removed and the new ones added."""

    def move(values: dict[str, Any]) -> None:
        values[f"{NS}:gpuAvailabilityZone"] = "us-west-2c"

    head = plan_dev_with(move, tmp_path / "head")
    md = run([dev_base, head, "--title", "Offline plan: dev"])
    lines = md.splitlines()
    assert lines[:3] == [MARKER, "### Offline plan: dev", ""]
    assert lines[3].startswith("**This change MOVES the GPU AZ** from `us-west-2b` to `us-west-2c`")
    replaced = [r.split(" | ")[1:3] for r in rows(md, "Replaced (`-/+`)")]
    stateful = [r for r in replaced if r[0].strip("`") in STATEFUL]
    assert replaced[: len(stateful)] == stateful  # stateful replacements first
    assert ["`aws:fsx/lustreFileSystem:LustreFileSystem`", "`fsx-fs`"] in stateful
    assert ["`aws:eks/nodeGroup:NodeGroup`", "`gpu-p4d-mng`"] in stateful
    assert ["`aws:eks/nodeGroup:NodeGroup`", "`gpu-p3dn-mng`"] in stateful
    assert ["`kubernetes:core/v1:PersistentVolume`", "`fsx-pv`"] in replaced[len(stateful) :]
    # The jobs pin the GPU AZ in their spec, and the stack replaces them on a spec change.
    assert ["`kubernetes:kubeflow.org/v1:PyTorchJob`", "`jobs-resnet50-elastic-pytorchjob`"] in replaced
    assert "deleted before its replacement is created" in section(md, "Replaced (`-/+`)")
    assert "| + | `aws:ec2/subnet:Subnet` | `network-private-us-west-2c` |" in section(md, "Added (`+`)")
    assert "| - | `aws:ec2/subnet:Subnet` | `network-private-us-west-2b` |" in section(md, "Removed (`-`)")
    order = [
        md.index(f"#### {t}") for t in ("Replaced (`-/+`)", "Updated in place (`~`)", "Added (`+`)", "Removed (`-`)")
    ]
    assert order == sorted(order) and md.index("MOVES") < order[0]


def test_a_sagemaker_job_changes_its_tags_in_place_and_anything_else_replaces_it(tmp_path):
    """This project's dynamic provider (TrainingJobProvider.diff): a training job cannot change."""
    typ = "pulumi-python:dynamic/gputraining:SageMakerTrainingJob"
    request = {"TrainingJobName": "bert-1", "HyperParameters": {"epochs": "3"}, "Tags": [{"Key": "team", "Value": "a"}]}

    def job(**changes: Any) -> dict:
        r = _resource(typ, "jobs-bert", {"region": "us-west-2", "request": {**request, **changes}})
        return {**r, "options": {"deleteBeforeReplace": True}}

    base = write_plan(tmp_path / "base", [job()], [], {})
    retagged = write_plan(tmp_path / "retagged", [job(Tags=[{"Key": "team", "Value": "b"}])], [], {})
    rerun = write_plan(tmp_path / "rerun", [job(HyperParameters={"epochs": "4"})], [], {})
    md = run([base, retagged])
    assert rows(md, "Updated in place (`~`)") == [f"| ~ | `{typ}` | `jobs-bert` | `inputs.request.Tags[0].Value` |"]
    assert "Replaced" not in md
    (replaced,) = rows(run([base, rerun]), "Replaced (`-/+`)")
    assert "forced by `inputs.request.HyperParameters.epochs`" in replaced
    assert "deleted before its replacement is created" in replaced


def test_conditional_replacements_are_noted_and_a_new_parent_is_a_new_resource(tmp_path):
    """EKS replaces a cluster whose encryption is removed (a rule on old and new values, not a
    field): the row says so when that input changes, not otherwise. A resource under another
    parent without an alias has a new URN: created anew, the old one deleted."""
    cluster = _resource("eks:index:Cluster", "cluster-eks", {"encryptionConfigKeyArn": "arn:k1", "version": "1.35"})
    role = _resource("aws:iam/role:Role", "node", {"path": "/"}, NET)
    base = write_plan(tmp_path / "base", [cluster, role], [], {})
    head_cluster = copy.deepcopy(cluster)
    head_cluster["inputs"].update(encryptionConfigKeyArn="arn:k2", version="1.36")
    moved = {**role, "parent": {"type": "gputraining:components:Cluster", "name": "cluster"}}
    md = run([base, write_plan(tmp_path / "head", [head_cluster, moved], [], {})])
    (updated,) = rows(md, "Updated in place (`~`)")
    assert updated.startswith("| ~ | `eks:index:Cluster` | `cluster-eks` | `inputs.encryptionConfigKeyArn`")
    assert "removing encryptionConfigKeyArn also replaces the cluster" in updated
    (replaced,) = rows(md, "Replaced (`-/+`)")
    assert replaced == "| -/+ | `aws:iam/role:Role` | `node` | forced by `parent` |"
    version_only = copy.deepcopy(cluster)
    version_only["inputs"]["version"] = "1.36"
    md = run([base, write_plan(tmp_path / "version", [version_only, role], [], {})])
    assert rows(md, "Updated in place (`~`)") == ["| ~ | `eks:index:Cluster` | `cluster-eks` | `inputs.version` |"]


def test_the_diff_reads_the_objects_manifests_yaml_lists(dev_plan_command):
    """The diff takes the stack's objects from resources.json (their records' inputs), not from parsing
    manifests.yaml: the plan writes the same documents to both, in the same order."""
    out = dev_plan_command.out
    plan = load_plan(out)
    listed = yaml_objects((out / "manifests.yaml").read_text())
    registered = {k: m for k, m in plan.manifests.items() if k not in (plan.release_objects or ())}
    assert len(listed) > 50
    assert [manifest_key(d) for d in listed] == list(registered)
    assert listed == list(registered.values())
