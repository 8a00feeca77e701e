"""Day two: what the stack does so that it keeps working after the first `pulumi up`.

- Pulumi.yaml refreshes before every preview, up and destroy (``options.refresh: always``), checked
  against Pulumi's own project-file schema (vendored, tests/data/pulumi): an `up` sends the node
  groups' live desired sizes, not the first ones kept by ``ignoreChanges``;
- the offline plan's resources.json records each resource's options (protect, retainOnDelete,
  ignoreChanges, replaceOnChanges, deleteBeforeReplace, aliases), so a pull request's plan diff shows them;
- the FSx KMS key outlives `pulumi destroy` when a final backup is taken (the backup needs it), and
  its ARN is a stack output; seen through resources.json;
- capacity-block groups are not autoscaled, and ``autoscale: true`` on one is refused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from infra import plan as plan_module
from stacks.config import ConfigError
from tests.helpers import ROOT, minimal_values, run_stack

PROJECT_SCHEMA = ROOT / "tests" / "data" / "pulumi" / "project.json"
KEY = "aws:kms/key:Key"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ASG_TAG = "aws:autoscaling/tag:Tag"


# ---------------------------------------------------------------------------------------------
# refresh: always
# ---------------------------------------------------------------------------------------------


def _project() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "Pulumi.yaml").read_text())


def _validate_project(doc: dict[str, Any]) -> None:
    schema = json.loads(PROJECT_SCHEMA.read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)


def test_the_project_refreshes_before_every_operation():
    doc = _project()
    _validate_project(doc)
    assert (doc.get("options") or {}).get("refresh") == "always"


@pytest.mark.parametrize("options", [{"refresh": True}, {"refresh": "yes"}, {"refrsh": "always"}])
def test_pulumis_schema_refuses_a_misspelt_refresh_option(options):
    """The schema check above could fail: Pulumi takes only the text ``always`` under ``options``."""
    doc = _project()
    doc["options"] = options
    with pytest.raises(jsonschema.ValidationError):
        _validate_project(doc)


def test_the_readme_no_longer_says_pulumi_leaves_the_desired_size_alone():
    """ignoreChanges keeps the first desired size in state; what keeps an `up` from sending it is the refresh."""
    readme = (ROOT / "README.md").read_text()
    assert "Pulumi leaves it to the autoscaler afterwards" not in readme
    assert "refresh: always" in readme


# ---------------------------------------------------------------------------------------------
# resources.json: resource options
# ---------------------------------------------------------------------------------------------


def _resources_json(values: dict[str, Any], out: Path, stack: str = "test") -> list[dict[str, Any]]:
    result = run_stack(values, stack=stack)
    plan_module.write_files(result, out)
    return json.loads((out / "resources.json").read_text())


def _one(resources: list[dict[str, Any]], typ: str, name: str) -> dict[str, Any]:
    found = [r for r in resources if r["type"] == typ and r["name"] == name]
    assert len(found) == 1, f"{typ} {name}: {len(found)} records"
    return found[0]


PERSISTENT_FSX = {
    "efs": {"enabled": True},
    "fsx": {
        "enabled": True,
        "deploymentType": "PERSISTENT_2",
        "storageCapacityGiB": 1200,
        "perUnitStorageThroughput": 125,
        "finalBackup": True,
    },
    "deletionProtection": False,
}


@pytest.fixture(scope="module")
def final_backup(tmp_path_factory) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    out = tmp_path_factory.mktemp("final-backup")
    resources = _resources_json(minimal_values(storage=PERSISTENT_FSX), out)
    return resources, json.loads((out / "outputs.json").read_text())


def test_the_fsx_key_stays_when_a_final_backup_is_taken(final_backup):
    resources, outputs = final_backup
    key = _one(resources, KEY, "fsx-key")
    assert key["options"].get("retainOnDelete") is True
    assert "fsxBackupKmsKeyArn" in outputs
    # The file system is encrypted with that key, and takes the final backup with it.
    fs = next(r for r in resources if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem")
    assert fs["inputs"]["skipFinalBackup"] is False
    assert fs["inputs"]["kmsKeyId"]
    # EFS has no final backup: its key goes with the stack.
    assert "retainOnDelete" not in _one(resources, KEY, "efs-key").get("options", {})


def test_without_a_final_backup_the_fsx_key_goes_with_the_stack(tmp_path):
    storage = copy.deepcopy(PERSISTENT_FSX)
    storage["fsx"]["finalBackup"] = False
    resources = _resources_json(minimal_values(storage=storage), tmp_path)
    assert "retainOnDelete" not in _one(resources, KEY, "fsx-key").get("options", {})
    assert "fsxBackupKmsKeyArn" not in json.loads((tmp_path / "outputs.json").read_text())


def test_resources_json_records_protect_ignore_changes_and_aliases(tmp_path):
    """What reviewers see of options in the plan diff, on the resources that have them."""
    storage = {**copy.deepcopy(PERSISTENT_FSX), "deletionProtection": True}
    resources = _resources_json(minimal_values(storage=storage), tmp_path)
    fs = next(r for r in resources if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem")
    assert fs["options"].get("protect") is True
    ng = _one(resources, NODE_GROUP, "gpu-p4d-mng")
    assert "scalingConfig.desiredSize" in ng["options"]["ignoreChanges"], ng.get("options")
    assert ng["options"]["aliases"], "the GPU node group is aliased to the pulumi-eks child it replaced"
    # Resources without options have no "options" key (the file stays as it was for them).
    assert any("options" not in r for r in resources)


# ---------------------------------------------------------------------------------------------
# Capacity blocks
# ---------------------------------------------------------------------------------------------

BLOCK = {
    "name": "p5",
    "instanceType": "p5.48xlarge",
    "capacityType": "capacity-block",
    "capacityReservationId": "cr-0123456789abcdef0",
    "maxSize": 2,
}


def test_capacity_block_groups_are_not_autoscaled_by_default():
    values = minimal_values(gpuNodeGroups=[BLOCK, {"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 2}])
    result = run_stack(values)
    block = result.named(NODE_GROUP, "gpu-p5-mng")
    tagged = {r.name.split("-asg-")[0] for r in result.of_type(ASG_TAG)}
    assert tagged == {"gpu-p4d"}, f"ASG tags for the autoscaler on {tagged}"
    assert "scalingConfig.desiredSize" not in block.options.get("ignoreChanges", [])
    # The on-demand group next to it still is.
    p4d = result.named(NODE_GROUP, "gpu-p4d-mng")
    assert "scalingConfig.desiredSize" in p4d.options.get("ignoreChanges", [])


def test_autoscale_true_on_a_capacity_block_group_is_refused():
    values = minimal_values(gpuNodeGroups=[{**BLOCK, "autoscale": True}])
    with pytest.raises(ConfigError) as err:
        run_stack(values)
    text = str(err.value)
    assert "gpuNodeGroups[p5].autoscale" in text and "capacity-block" in text and "desiredSize" in text
