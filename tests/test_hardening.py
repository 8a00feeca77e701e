"""Prod data and access: FSx backups, IMDS hops, the EKS upgrade policy."""

from __future__ import annotations

import pytest

from stacks.config import ConfigError
from tests.helpers import NS, minimal_values, run_stack

FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


@pytest.fixture(scope="module")
def prod(prod_plan):
    return prod_plan  # (shared: read only)


def test_prod_fsx_keeps_daily_backups_and_a_final_one(prod):
    (fs,) = prod.of_type(FSX)
    assert fs.inputs["automaticBackupRetentionDays"] == 14
    assert fs.inputs["skipFinalBackup"] is False
    assert fs.inputs["dailyAutomaticBackupStartTime"] == "03:00"
    # copyTagsToBackups cannot change on an existing file system (it would be replaced): never sent.
    assert "copyTagsToBackups" not in fs.inputs


def test_scratch_fsx_has_no_backup_settings(dev_plan):
    (fs,) = dev_plan.of_type(FSX)
    assert not {"automaticBackupRetentionDays", "skipFinalBackup", "copyTagsToBackups"} & set(fs.inputs)


@pytest.mark.parametrize(
    "fsx,key",
    [
        ({"deploymentType": "SCRATCH_2", "backupRetentionDays": 7}, "backupRetentionDays"),
        ({"deploymentType": "SCRATCH_2", "finalBackup": True}, "finalBackup"),
        (
            {"deploymentType": "PERSISTENT_2", "perUnitStorageThroughput": 125, "backupRetentionDays": 91},
            "backupRetentionDays",
        ),
        (
            {"deploymentType": "PERSISTENT_2", "perUnitStorageThroughput": 125, "backupStartTime": "25:00"},
            "backupStartTime",
        ),
    ],
)
def test_backup_settings_aws_refuses_are_refused_first(fsx, key):
    with pytest.raises(ConfigError) as info:
        run_stack(minimal_values(storage={"fsx": fsx}))
    assert [p.key for p in info.value.problems] == [f"{NS}:storage.fsx.{key}"]


def test_gpu_nodes_keep_pods_away_from_imds_and_system_nodes_allow_two_hops(prod):
    hops = {r.name: r.inputs["metadataOptions"]["httpPutResponseHopLimit"] for r in prod.of_type(LT)}
    assert hops.pop("system-lt") == 2
    assert hops and set(hops.values()) == {1}, hops
    assert all(r.inputs["metadataOptions"]["httpTokens"] == "required" for r in prod.of_type(LT))


def test_the_cluster_upgrades_instead_of_paying_for_extended_support(prod):
    (cluster,) = prod.of_type("eks:index:Cluster")
    assert cluster.inputs["upgradePolicy"] == {"supportType": "STANDARD"}


def test_cluster_names_eks_allows_work_and_name_volumes_in_lower_case():
    plan = run_stack(minimal_values(cluster={"name": "ML_Platform-Dev"}))
    pvs = sorted(r.inputs["metadata"]["name"] for r in plan.of_type("kubernetes:core/v1:PersistentVolume"))
    assert pvs == ["ml-platform-dev-efs", "ml-platform-dev-fsx"]
    (cluster,) = plan.of_type("eks:index:Cluster")
    assert cluster.inputs["name"] == "ML_Platform-Dev"
