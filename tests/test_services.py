"""Cluster services under the offline engine: device plugins, EFS and FSx with their CSI add-ons and
static PV/PVCs, the MPI and training operators, etcd, CloudWatch monitoring, the one Kubernetes
provider, Kubernetes schemas of every emitted object, and the config checks of these sections."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components import etcd, operators
from facts import versions
from facts.operators import KINDS, OPERATORS
from facts.paths import PROJECT_ROOT
from infra.invariants import StackView, tolerates
from stacks import config as stack_config
from stacks.config import ConfigError, load
from tests.helpers import NS, ROOT, dev_values, minimal_values, run_stack
from tests.scheduling import MNG, kubernetes_taints, node_groups

RELEASE = "kubernetes:helm.sh/v3:Release"
ADDON = "aws:eks/addon:Addon"
ROLE = "aws:iam/role:Role"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
INLINE_POLICY = "aws:iam/rolePolicy:RolePolicy"
KMS_KEY = "aws:kms/key:Key"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SUBNET = "aws:ec2/subnet:Subnet"


EKS = "eks:index:Cluster"
EFS_FS = "aws:efs/fileSystem:FileSystem"
EFS_MT = "aws:efs/mountTarget:MountTarget"
FSX_FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
LOG_GROUP = "aws:cloudwatch/logGroup:LogGroup"
DASHBOARD = "aws:cloudwatch/dashboard:Dashboard"
K8S_PROVIDER = "pulumi:providers:kubernetes"
NAMESPACE = "kubernetes:core/v1:Namespace"
PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
SERVICE = "kubernetes:core/v1:Service"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
DIRECTORY = "kubernetes:kustomize/v2:Directory"
WEBHOOK = "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration"

COMPONENT = "gputraining:components:"
EFS_STORE = COMPONENT + "EfsStore"
FSX_STORE = COMPONENT + "FsxStore"
MPI_OPERATOR = COMPONENT + "MpiOperator"
TRAINING_OPERATOR = COMPONENT + "TrainingOperator"
ETCD = COMPONENT + "Etcd"
MONITORING = COMPONENT + "Monitoring"
DEVICE_PLUGINS = COMPONENT + "DevicePlugins"

GPU_PRESENT = {"nvidia.com/gpu.present": "true"}
EFA_PRESENT = {"vpc.amazonaws.com/efa.present": "true"}
KUSTOMIZATION = PROJECT_ROOT / "manifests" / "training-operator" / "kustomization.yaml"
# The CRDs the training operator v1.9 standalone overlay installs upstream (kubeflow/training-operator
# manifests/base/crds): any of them the plan installs itself must be deleted from the overlay.
TRAINING_OPERATOR_UPSTREAM_CRDS = {
    f"{kind}.kubeflow.org" for kind in ("tfjobs", "pytorchjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs")
}

# ----------------------------------------------------------------------------------------------
# Variant stacks (module-scoped: each full run costs ~0.6 s)
# ----------------------------------------------------------------------------------------------

PROD_CLUSTER = "prod-gpu"
PROD_BUCKET = "gpu-training-datasets"
SCRATCH_BUCKET = "gpu-training-scratch"


def _prod_values():
    """Protected stores (the default), PERSISTENT_2 FSx with an S3 association, a GPU AZ set
    explicitly to one that is not the first subnet AZ, 3 etcd members, a custom namespace, and the
    EFA plugin switched off although the group has EFA."""
    return minimal_values(
        gpuAvailabilityZone="us-west-2c",
        cluster={"name": PROD_CLUSTER},
        storage={
            "fsx": {
                "deploymentType": "PERSISTENT_2",
                "storageCapacityGiB": 2400,
                "perUnitStorageThroughput": 250,
                "s3": {"bucket": PROD_BUCKET, "prefix": "imagenet", "export": True},
            }
        },
        etcd={"replicas": 3, "cpu": "500m", "memory": "1Gi"},
        services={"trainingNamespace": "ml", "efaDevicePlugin": False},
        monitoring={"logRetentionDays": 90},
    )


def _lean_values():
    """No EFA group, no EFS, scratch FSx linked to S3 on the file system, no etcd, no monitoring."""
    return minimal_values(
        gpuNodeGroups=[{"name": "p4d", "instanceType": "p4d.24xlarge", "efa": False, "maxSize": 2}],
        storage={
            "efs": {"enabled": False},
            "fsx": {"deploymentType": "SCRATCH_2", "storageCapacityGiB": 2400, "s3": {"bucket": SCRATCH_BUCKET}},
        },
        etcd={"enabled": False},
        monitoring={"enabled": False},
    )


def _off_values():
    """Optional services off (the EFA plugin stays), no FSx, no dashboard."""
    return minimal_values(
        services={"nvidiaDevicePlugin": False, **{op.switch: False for op in OPERATORS}},
        storage={"fsx": {"enabled": False}},
        monitoring={"dashboard": False},
    )


@pytest.fixture(scope="module")
def prodlike_plan():
    return run_stack(_prod_values())


@pytest.fixture(scope="module")
def lean_plan():
    return run_stack(_lean_values())


@pytest.fixture(scope="module")
def off_plan():
    return run_stack(_off_values())


@pytest.fixture(scope="module")
def plans(dev_plan, prodlike_plan, lean_plan, off_plan):
    return {"dev": dev_plan, "prod": prodlike_plan, "lean": lean_plan, "off": off_plan}


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.lstrip("v").split("-")[0].split("."))


def _child(plan, component: str, typ: str, name_part: str = ""):
    found = [r for r in plan.of_type(typ) if r.parent and r.parent["type"] == component and name_part in r.name]
    assert len(found) == 1, (component, typ, name_part, [r.name for r in found])
    return found[0]


def _children(plan, component: str, typ: str):
    return [r for r in plan.of_type(typ) if r.parent and r.parent["type"] == component]


def _release(plan, release: str):
    found = [r for r in plan.of_type(RELEASE) if r.inputs["name"] == release]
    assert len(found) <= 1
    return found[0] if found else None


def _addon(plan, addon_name: str):
    found = [r for r in plan.of_type(ADDON) if r.inputs["addonName"] == addon_name]
    assert len(found) <= 1
    return found[0] if found else None


def _cluster_sg(plan) -> str:
    """The EKS cluster security group every node carries (from the system launch template)."""
    (sg,) = plan.named("aws:ec2/launchTemplate:LaunchTemplate", "system-lt").inputs["vpcSecurityGroupIds"]
    return sg


def _gpu_taints(plan) -> list[dict]:
    """The taints every GPU node group puts on its nodes, in Kubernetes form."""
    taints = []
    for r in node_groups(plan):
        if r.inputs.get("labels", {}).get("nvidia.com/gpu.present") == "true":
            taints += kubernetes_taints(r)
    assert taints, "GPU node groups must carry the GPU taint"
    return taints


def _requires_labels(affinity: dict, labels: dict[str, str]) -> bool:
    """Every required node-selector term (terms are ORed) demands all ``labels``."""
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    if not terms:
        return False
    for term in terms:
        exprs = term.get("matchExpressions") or []
        for k, v in labels.items():
            if not any(e["key"] == k and e["operator"] == "In" and e["values"] == [v] for e in exprs):
                return False
    return True


def _role_of_addon(plan, addon):
    """The IAM role an add-on's (single) pod identity association hands out, checked to be
    trusted by EKS Pod Identity; returns (role record, service account, managed policy ARNs)."""
    (assoc,) = addon.inputs["podIdentityAssociations"]
    roles = [d for d in addon.depends_on if d["type"] == ROLE]
    assert len(roles) == 1, roles
    role = plan.named(ROLE, roles[0]["name"])
    attachments = [a for a in plan.of_type(ATTACHMENT) if {"type": ROLE, "name": role.name} in a.depends_on]
    assert attachments, f"role {role.name} has no policy"
    assert {a.inputs["role"] for a in attachments} == {assoc["roleArn"].split(":role/")[-1]}, (
        "association must use this role"
    )
    trust = json.loads(role.inputs["assumeRolePolicy"])
    statements = trust["Statement"]
    assert statements
    for st in statements:
        assert st["Effect"] == "Allow"
        assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        actions = {st["Action"]} if isinstance(st["Action"], str) else set(st["Action"])
        assert {"sts:AssumeRole", "sts:TagSession"} <= actions
    return role, assoc["serviceAccount"], {a.inputs["policyArn"] for a in attachments}


def _obj(plan, typ: str, component: str):
    return _child(plan, component, typ).inputs


def _problems(values) -> list:
    with pytest.raises(ConfigError) as info:
        load(values, "gpu-training", "test")
    return info.value.problems


def _only_problem(values, key: str) -> str:
    problems = _problems(values)
    assert [p.key for p in problems] == [key], problems
    return problems[0].message


def _assert_mentions(message: str, *parts: str) -> None:
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"


# ----------------------------------------------------------------------------------------------
# Device plugins
# ----------------------------------------------------------------------------------------------


def test_nvidia_device_plugin_release_is_pinned_and_runs_only_on_gpu_nodes(dev_plan):
    assert len(dev_plan.of_type(RELEASE)) == len(
        versions.CHARTS
    )  # the device plugins, the Cluster Autoscaler and Kueue
    nv = _release(dev_plan, "nvidia-device-plugin")
    assert nv is not None and nv.parent["type"] == DEVICE_PLUGINS
    assert _version(versions.NVIDIA_DEVICE_PLUGIN_CHART.version) >= (0, 19, 3), (
        "0.19.0-0.19.2 clash with the EFA plugin"
    )
    # Installed from the vendored package (no chart repository at `pulumi up`), named after its version.
    assert (
        nv.inputs["chart"] == versions.NVIDIA_DEVICE_PLUGIN_CHART.file
        and versions.NVIDIA_DEVICE_PLUGIN_CHART.version in nv.inputs["chart"]
    )
    assert "repositoryOpts" not in nv.inputs and (ROOT / nv.inputs["chart"]).is_file()
    values = nv.inputs["values"]
    assert _requires_labels(values["affinity"], GPU_PRESENT)
    for taint in _gpu_taints(dev_plan):
        assert tolerates(values["tolerations"], taint), taint
    assert values["mofedEnabled"] is False
    # The label the plugin waits for is one every GPU node group sets.
    gpu_groups = [r for r in node_groups(dev_plan) if r.name.startswith("gpu-")]
    assert gpu_groups and all(r.inputs["labels"].items() >= GPU_PRESENT.items() for r in gpu_groups)


def test_efa_device_plugin_release_is_pinned_tolerates_gpu_taint_and_targets_efa_types(dev_plan):
    efa = _release(dev_plan, "aws-efa-k8s-device-plugin")
    assert efa is not None and efa.parent["type"] == DEVICE_PLUGINS
    assert _version(versions.EFA_DEVICE_PLUGIN_CHART.version) >= (0, 5, 10)
    assert (
        efa.inputs["chart"] == versions.EFA_DEVICE_PLUGIN_CHART.file
        and versions.EFA_DEVICE_PLUGIN_CHART.version in efa.inputs["chart"]
    )
    assert "repositoryOpts" not in efa.inputs and (ROOT / efa.inputs["chart"]).is_file()
    values = efa.inputs["values"]
    for taint in _gpu_taints(dev_plan):
        assert tolerates(values["tolerations"], taint), taint
    assert values["nodeSelector"] == EFA_PRESENT
    cfg = load(dev_values(), "gpu-training", "dev")
    efa_types = sorted({g.instance_type for g in cfg.gpu_node_groups if g.efa_enabled})
    assert efa_types == ["p3dn.24xlarge", "p4d.24xlarge"]
    assert values["supportedInstanceLabels"]["keys"] == ["node.kubernetes.io/instance-type"]
    assert values["supportedInstanceLabels"]["values"] == efa_types
    # Every EFA group labels its nodes with what the plugin selects on.
    efa_groups = [
        r
        for r in node_groups(dev_plan)
        if r.name in {f"gpu-{g.name}-mng" for g in cfg.gpu_node_groups if g.efa_enabled}
    ]
    assert len(efa_groups) == 2 and all(r.inputs["labels"].items() >= EFA_PRESENT.items() for r in efa_groups)


def test_no_efa_release_when_no_group_has_efa(lean_plan):
    assert _release(lean_plan, "aws-efa-k8s-device-plugin") is None
    assert _release(lean_plan, "nvidia-device-plugin") is not None


def test_device_plugin_toggles_remove_each_release_independently(prodlike_plan, off_plan):
    # prod: efaDevicePlugin false although its p4d group has EFA.
    assert _release(prodlike_plan, "aws-efa-k8s-device-plugin") is None
    assert _release(prodlike_plan, "nvidia-device-plugin") is not None
    # off: nvidiaDevicePlugin false.
    assert _release(off_plan, "nvidia-device-plugin") is None
    assert _release(off_plan, "aws-efa-k8s-device-plugin") is not None


# ----------------------------------------------------------------------------------------------
# EFS
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["dev", "prod"])
def test_efs_is_encrypted_with_a_key_of_its_own(plans, variant):
    plan = plans[variant]
    fs = _child(plan, EFS_STORE, EFS_FS)
    assert fs.inputs["encrypted"] is True
    assert fs.inputs["kmsKeyId"].startswith("arn:aws:kms:")
    key = _child(plan, EFS_STORE, KMS_KEY)
    assert {"type": KMS_KEY, "name": key.name} in fs.depends_on
    assert key.inputs["enableKeyRotation"] is True
    (cluster,) = plan.of_type(EKS)
    assert fs.inputs["kmsKeyId"] != cluster.inputs["encryptionConfigKeyArn"]
    assert plan.outputs["efsFileSystemId"] == fs.id


@pytest.mark.parametrize("variant", ["dev", "prod"])
def test_efs_has_a_mount_target_in_each_private_subnet(plans, variant):
    plan = plans[variant]
    fs = _child(plan, EFS_STORE, EFS_FS)
    sg = _child(plan, EFS_STORE, SG)
    mts = plan.of_type(EFS_MT)
    assert sorted(m.inputs["subnetId"] for m in mts) == sorted(plan.outputs["privateSubnetIds"])
    assert not set(m.inputs["subnetId"] for m in mts) & set(plan.outputs["publicSubnetIds"])
    for m in mts:
        assert m.inputs["fileSystemId"] == fs.id
        assert m.inputs["securityGroups"] == [sg.id]


def test_efs_security_group_allows_only_nfs_from_the_cluster_security_group(dev_plan):
    sg = _child(dev_plan, EFS_STORE, SG)
    assert "ingress" not in sg.inputs and "egress" not in sg.inputs
    rules = [r for r in dev_plan.of_type(INGRESS) if r.inputs["securityGroupId"] == sg.id]
    assert len(rules) == 1
    (rule,) = rules
    assert (rule.inputs["ipProtocol"], rule.inputs["fromPort"], rule.inputs["toPort"]) == ("tcp", 2049, 2049)
    assert rule.inputs["referencedSecurityGroupId"] == _cluster_sg(dev_plan)
    assert not {"cidrIpv4", "cidrIpv6", "prefixListId"} & set(rule.inputs)


def test_efs_csi_addon_is_pinned_with_its_own_pod_identity_role(dev_plan):
    addon = _addon(dev_plan, "aws-efs-csi-driver")
    assert addon is not None and addon.parent["type"] == EFS_STORE
    assert addon.inputs["addonVersion"] == versions.EFS_CSI_ADDON
    role, sa, policies = _role_of_addon(dev_plan, addon)
    assert sa == "efs-csi-controller-sa"
    assert policies == {"arn:aws:iam::aws:policy/service-role/AmazonEFSCSIDriverPolicy"}
    # The driver's node DaemonSet tolerates every taint by default; nothing is sent that the
    # add-on's configuration schema could reject.
    assert "configurationValues" not in addon.inputs


@pytest.mark.parametrize("variant", ["dev", "prod"])
def test_efs_storage_class_static_pv_and_claim(plans, variant):
    plan = plans[variant]
    fs = _child(plan, EFS_STORE, EFS_FS)
    sc = _obj(plan, STORAGE_CLASS, EFS_STORE)
    assert sc["provisioner"] == "efs.csi.aws.com"
    assert sc["parameters"]["fileSystemId"] == fs.id
    pv = _obj(plan, PV, EFS_STORE)
    spec = pv["spec"]
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["csi"]["driver"] == "efs.csi.aws.com"
    assert spec["csi"]["volumeHandle"] == fs.id
    assert spec["storageClassName"] == sc["metadata"]["name"]
    pvc = _obj(plan, PVC, EFS_STORE)
    assert pvc["metadata"]["namespace"] == plan.outputs["trainingNamespace"]
    assert pvc["metadata"]["name"] == plan.outputs["efsClaim"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["storageClassName"] == spec["storageClassName"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == spec["capacity"]["storage"]


def test_prod_claims_live_in_the_configured_namespace(prodlike_plan):
    assert prodlike_plan.outputs["trainingNamespace"] == "ml"
    for comp in (EFS_STORE, FSX_STORE):
        assert _obj(prodlike_plan, PVC, comp)["metadata"]["namespace"] == "ml"
    (ns,) = [r for r in prodlike_plan.of_type(NAMESPACE) if r.parent is None]
    assert ns.inputs["metadata"]["name"] == "ml"


def test_node_role_gets_no_storage_or_agent_policies(dev_plan):
    (node_role,) = [r for r in dev_plan.of_type(ROLE) if "ec2.amazonaws.com" in r.inputs["assumeRolePolicy"]]
    ref = {"type": ROLE, "name": node_role.name}
    arns = [a.inputs["policyArn"] for a in dev_plan.of_type(ATTACHMENT) if ref in a.depends_on]
    assert arns
    for arn in arns:
        assert not re.search(r"EFS|FSx|CloudWatch", arn), arn
    inline = [p for p in dev_plan.of_type(INLINE_POLICY) if ref in p.depends_on]
    for p in inline:
        assert not re.search(r"elasticfilesystem:|fsx:", json.dumps(p.inputs)), p.name


def test_each_driver_and_agent_has_a_role_of_its_own(dev_plan):
    roles = {}
    for name in ("aws-efs-csi-driver", "aws-fsx-csi-driver", "amazon-cloudwatch-observability"):
        roles[name] = _role_of_addon(dev_plan, _addon(dev_plan, name))[0].name
    assert len(set(roles.values())) == 3, roles


# ----------------------------------------------------------------------------------------------
# FSx for Lustre
# ----------------------------------------------------------------------------------------------


def _fsx_subnet(fs) -> str:
    subnets = fs.inputs["subnetIds"]
    if isinstance(subnets, list):
        assert len(subnets) == 1, subnets
        return subnets[0]
    return subnets


@pytest.mark.parametrize("variant", ["dev", "prod", "lean"])
def test_fsx_is_in_the_gpu_az_subnet(plans, variant):
    plan = plans[variant]
    fs = _child(plan, FSX_STORE, FSX_FS)
    subnet_id = _fsx_subnet(fs)
    assert subnet_id == plan.outputs["gpuSubnetId"]
    (subnet,) = [s for s in plan.of_type(SUBNET) if s.id == subnet_id]
    assert subnet.inputs["availabilityZone"] == plan.outputs["gpuAvailabilityZone"]


def test_fsx_follows_an_explicit_gpu_az_that_is_not_the_first_az(prodlike_plan):
    assert prodlike_plan.outputs["gpuAvailabilityZone"] == "us-west-2c"
    first = prodlike_plan.outputs["privateSubnetIds"][0]
    assert prodlike_plan.outputs["gpuSubnetId"] != first, "the case under test: GPU AZ is not the first subnet"
    assert _fsx_subnet(_child(prodlike_plan, FSX_STORE, FSX_FS)) == prodlike_plan.outputs["gpuSubnetId"]


@pytest.mark.parametrize("variant", ["dev", "prod"])
def test_fsx_security_group_lustre_ports_from_nodes_and_itself_before_the_file_system(plans, variant):
    plan = plans[variant]
    sg = _child(plan, FSX_STORE, SG)
    fs = _child(plan, FSX_STORE, FSX_FS)
    assert fs.inputs["securityGroupIds"] == [sg.id]
    assert "ingress" not in sg.inputs
    cluster_sg = _cluster_sg(plan)
    ingress = [r for r in plan.of_type(INGRESS) if r.inputs["securityGroupId"] == sg.id]
    got = {
        (r.inputs["ipProtocol"], r.inputs["fromPort"], r.inputs["toPort"], r.inputs["referencedSecurityGroupId"])
        for r in ingress
    }
    assert got == {
        ("tcp", 988, 988, cluster_sg),
        ("tcp", 988, 988, sg.id),
        ("tcp", 1018, 1023, cluster_sg),
        ("tcp", 1018, 1023, sg.id),
    }
    assert len(ingress) == 4
    assert all(not {"cidrIpv4", "cidrIpv6"} & set(r.inputs) for r in ingress)
    # The file system waits only for its own group's rules (among its servers, and out), not for
    # those referencing the cluster's security group: it is created beside the cluster. The PV
    # waits for the rules between the nodes and the file servers.
    rules = _children(plan, FSX_STORE, INGRESS) + _children(plan, FSX_STORE, EGRESS)
    assert len(rules) == 7
    pv = _child(plan, FSX_STORE, PV)
    for r in rules:
        touches_nodes = cluster_sg in (r.inputs.get("referencedSecurityGroupId"), r.inputs.get("securityGroupId"))
        assert ({"type": r.type, "name": r.name} in fs.depends_on) != touches_nodes, r.name
        if touches_nodes:
            assert {"type": r.type, "name": r.name} in pv.depends_on, r.name
    assert not any(d["type"].startswith("eks:") for d in fs.depends_on)


def test_fsx_scratch_deployment_from_config_without_throughput_or_key(dev_plan):
    fs = _child(dev_plan, FSX_STORE, FSX_FS)
    assert fs.inputs["deploymentType"] == "SCRATCH_2"
    assert fs.inputs["storageCapacity"] == 1200
    assert "perUnitStorageThroughput" not in fs.inputs
    assert "kmsKeyId" not in fs.inputs
    assert _children(dev_plan, FSX_STORE, KMS_KEY) == []


def test_fsx_persistent_deployment_from_config_with_throughput_and_key(prodlike_plan):
    fs = _child(prodlike_plan, FSX_STORE, FSX_FS)
    assert fs.inputs["deploymentType"] == "PERSISTENT_2"
    assert fs.inputs["storageCapacity"] == 2400
    assert fs.inputs["perUnitStorageThroughput"] == 250
    key = _child(prodlike_plan, FSX_STORE, KMS_KEY)
    assert fs.inputs["kmsKeyId"].startswith("arn:aws:kms:")
    assert {"type": KMS_KEY, "name": key.name} in fs.depends_on
    efs = _child(prodlike_plan, EFS_STORE, EFS_FS)
    assert fs.inputs["kmsKeyId"] != efs.inputs["kmsKeyId"]


def test_fsx_persistent_2_links_s3_through_a_data_repository_association(prodlike_plan):
    fs = _child(prodlike_plan, FSX_STORE, FSX_FS)
    assert not {"importPath", "exportPath", "autoImportPolicy"} & set(fs.inputs)
    dra = _child(prodlike_plan, FSX_STORE, DRA)
    assert dra.inputs["fileSystemId"] == fs.id
    assert dra.inputs["dataRepositoryPath"] == f"s3://{PROD_BUCKET}/imagenet"
    assert dra.inputs["fileSystemPath"] == "/s3"
    assert set(dra.inputs["s3"]["autoImportPolicy"]["events"]) == {"NEW", "CHANGED", "DELETED"}
    assert set(dra.inputs["s3"]["autoExportPolicy"]["events"]) == {"NEW", "CHANGED", "DELETED"}


def test_fsx_scratch_2_links_s3_through_a_data_repository_association(lean_plan):
    fs = _child(lean_plan, FSX_STORE, FSX_FS)
    assert fs.inputs["deploymentType"] == "SCRATCH_2"
    assert fs.inputs["storageCapacity"] == 2400
    # Lustre 2.15 links S3 with data repository associations, not the file system's import path.
    assert not {"importPath", "exportPath", "autoImportPolicy"} & set(fs.inputs)
    (dra,) = lean_plan.of_type(DRA)
    assert dra.inputs["dataRepositoryPath"] == f"s3://{SCRATCH_BUCKET}"
    assert "autoExportPolicy" not in dra.inputs["s3"], "export was not asked for"


def test_fsx_without_s3_has_no_link(dev_plan):
    fs = _child(dev_plan, FSX_STORE, FSX_FS)
    assert not {"importPath", "exportPath"} & set(fs.inputs)
    assert dev_plan.of_type(DRA) == []


def test_fsx_csi_addon_is_pinned_with_its_own_role_and_sends_no_values_that_restate_defaults(dev_plan):
    addon = _addon(dev_plan, "aws-fsx-csi-driver")
    assert addon is not None and addon.parent["type"] == FSX_STORE
    assert addon.inputs["addonVersion"] == versions.FSX_CSI_ADDON
    _, sa, policies = _role_of_addon(dev_plan, addon)
    assert sa == "fsx-csi-controller-sa"
    assert policies == {"arn:aws:iam::aws:policy/AmazonFSxFullAccess"}
    # node.tolerateAllTaints is true by default in the driver's chart (1.17.0): nothing to send.
    assert "configurationValues" not in addon.inputs


@pytest.mark.parametrize("variant,capacity", [("dev", 1200), ("prod", 2400), ("lean", 2400)])
def test_fsx_static_pv_and_claim(plans, variant, capacity):
    plan = plans[variant]
    fs = _child(plan, FSX_STORE, FSX_FS)
    pv = _obj(plan, PV, FSX_STORE)
    spec = pv["spec"]
    csi = spec["csi"]
    assert csi["driver"] == "fsx.csi.aws.com"
    assert csi["volumeHandle"] == fs.id == plan.outputs["fsxFileSystemId"]
    assert csi["volumeAttributes"]["dnsname"] == plan.outputs["fsxDnsName"]
    assert csi["volumeAttributes"]["dnsname"].startswith(fs.id)
    mountname = csi["volumeAttributes"]["mountname"]
    assert isinstance(mountname, str) and mountname and mountname != "[unknown]"
    assert spec["capacity"]["storage"] == f"{capacity}Gi"
    assert "flock" in spec["mountOptions"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["storageClassName"] == ""
    assert spec["accessModes"] == ["ReadWriteMany"]
    pvc = _obj(plan, PVC, FSX_STORE)
    assert pvc["metadata"]["namespace"] == plan.outputs["trainingNamespace"]
    assert pvc["metadata"]["name"] == plan.outputs["fsxClaim"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["storageClassName"] == ""
    assert pvc["spec"]["resources"]["requests"]["storage"] == f"{capacity}Gi"


@pytest.mark.parametrize(
    "fsx,expect",
    [
        (
            {
                "deploymentType": "PERSISTENT_1",
                "storageCapacityGiB": 4800,
                "perUnitStorageThroughput": 100,
                "s3": {"bucket": "p1-data"},
            },
            "dra",
        ),
        ({"deploymentType": "SCRATCH_1", "storageCapacityGiB": 3600}, None),
    ],
)
def test_fsx_other_deployment_types(fsx, expect):
    plan = run_stack(minimal_values(storage={"efs": {"enabled": False}, "fsx": fsx}))
    fs = _child(plan, FSX_STORE, FSX_FS)
    assert fs.inputs["deploymentType"] == fsx["deploymentType"]
    assert fs.inputs["storageCapacity"] == fsx["storageCapacityGiB"]
    persistent = fsx["deploymentType"].startswith("PERSISTENT")
    assert fs.inputs.get("perUnitStorageThroughput") == fsx.get("perUnitStorageThroughput")
    assert ("kmsKeyId" in fs.inputs) is persistent
    assert len(_children(plan, FSX_STORE, KMS_KEY)) == (1 if persistent else 0)
    if expect == "dra":
        assert "importPath" not in fs.inputs
        assert [d.inputs["dataRepositoryPath"] for d in plan.of_type(DRA)] == ["s3://p1-data"]
    assert _obj(plan, PV, FSX_STORE)["spec"]["capacity"]["storage"] == f"{fsx['storageCapacityGiB']}Gi"


def test_disabling_fsx_removes_every_fsx_resource(off_plan):
    assert off_plan.of_type(FSX_FS) == [] and off_plan.of_type(DRA) == []
    assert [r for r in off_plan.records if r.type == FSX_STORE or (r.parent or {}).get("type") == FSX_STORE] == []
    assert _addon(off_plan, "aws-fsx-csi-driver") is None
    assert not [
        o
        for o in off_plan.kubernetes_objects()
        if o["kind"] == "PersistentVolume" and o["spec"]["csi"]["driver"] == "fsx.csi.aws.com"
    ]
    assert not {"fsxFileSystemId", "fsxDnsName", "fsxClaim"} & set(off_plan.outputs)
    # EFS is still there.
    assert len(off_plan.of_type(EFS_FS)) == 1


def test_disabling_efs_removes_every_efs_resource(lean_plan):
    assert lean_plan.of_type(EFS_FS) == [] and lean_plan.of_type(EFS_MT) == []
    assert [r for r in lean_plan.records if r.type == EFS_STORE or (r.parent or {}).get("type") == EFS_STORE] == []
    assert _addon(lean_plan, "aws-efs-csi-driver") is None
    assert lean_plan.of_type(STORAGE_CLASS) == []
    assert not {"efsFileSystemId", "efsClaim"} & set(lean_plan.outputs)
    assert len(lean_plan.of_type(FSX_FS)) == 1


# ----------------------------------------------------------------------------------------------
# Deletion protection
# ----------------------------------------------------------------------------------------------


def _protected(plan) -> set[tuple[str, str]]:
    return {(r.type, r.name) for r in plan.records if r.options.get("protect")}


def test_default_deletion_protection_protects_file_systems_and_their_keys(prodlike_plan, lean_plan, off_plan):
    efs_key = _child(prodlike_plan, EFS_STORE, KMS_KEY).name
    fsx_key = _child(prodlike_plan, FSX_STORE, KMS_KEY).name
    assert _protected(prodlike_plan) == {(EFS_FS, "efs-fs"), (KMS_KEY, efs_key), (FSX_FS, "fsx-fs"), (KMS_KEY, fsx_key)}
    # Scratch FSx has no key of its own; EFS off.
    assert _protected(lean_plan) == {(FSX_FS, "fsx-fs")}
    assert _protected(off_plan) == {(EFS_FS, "efs-fs"), (KMS_KEY, _child(off_plan, EFS_STORE, KMS_KEY).name)}


def test_dev_turns_deletion_protection_off(dev_plan):
    assert load(dev_values(), "gpu-training", "dev").storage.deletion_protection is False
    assert _protected(dev_plan) == set()


# ----------------------------------------------------------------------------------------------
# MPI operator
# ----------------------------------------------------------------------------------------------


def _mpi_manifest():
    return operators.load_manifest(
        PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file, versions.MPI_OPERATOR_MANIFEST.sha256
    )


def test_mpi_operator_manifest_objects_are_registered_as_typed_resources(dev_plan):
    children = dev_plan.children_of(MPI_OPERATOR, "mpi-operator")
    assert len(children) == 9
    assert all(r.type.startswith("kubernetes:") and r.custom for r in children)
    assert Counter(r.inputs["kind"] for r in children) == Counter(
        {
            "Namespace": 1,
            "CustomResourceDefinition": 1,
            "ServiceAccount": 1,
            "ClusterRole": 4,
            "ClusterRoleBinding": 1,
            "Deployment": 1,
        }
    )
    # Registered unchanged: each object equals its document in the vendored manifest.
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _mpi_manifest()}
    got = {(r.inputs["kind"], r.inputs["metadata"]["name"]): r.inputs for r in children}
    assert got == docs
    for r in children:
        assert r.type.endswith(":" + r.inputs["kind"])


def test_mpi_operator_crd_serves_only_v2beta1(dev_plan):
    crd = _obj(dev_plan, CRD, MPI_OPERATOR)
    assert crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    assert crd["spec"]["group"] == "kubeflow.org"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v2beta1"]
    assert [v["name"] for v in crd["spec"]["versions"] if v["served"]] == ["v2beta1"]


def test_mpi_operator_deployment_image_and_ordering(dev_plan):
    children = dev_plan.children_of(MPI_OPERATOR, "mpi-operator")
    (dep,) = [r for r in children if r.inputs["kind"] == "Deployment"]
    (container,) = dep.inputs["spec"]["template"]["spec"]["containers"]
    assert container["image"] == versions.MPI_OPERATOR_IMAGE == "mpioperator/mpi-operator:0.8.2"
    assert container["image"] == f"mpioperator/mpi-operator:{versions.MPI_OPERATOR_VERSION.lstrip('v')}"
    (ns,) = [r for r in children if r.inputs["kind"] == "Namespace"]
    assert dep.inputs["metadata"]["namespace"] == ns.inputs["metadata"]["name"]
    foundation = [
        r
        for r in children
        if r.inputs["kind"]
        in ("Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
    ]
    assert len(foundation) == 8
    for r in foundation:
        assert {"type": r.type, "name": r.name} in dep.depends_on, r.name


def test_mpi_operator_manifest_pin_matches_the_file_and_sources(tmp_path):
    path = PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file
    assert hashlib.sha256(path.read_bytes()).hexdigest() == versions.MPI_OPERATOR_MANIFEST.sha256
    sources = (PROJECT_ROOT / "manifests" / "vendor" / "SOURCES.md").read_text()
    (row,) = [line for line in sources.splitlines() if line.startswith(f"| {path.name} ")]
    assert versions.MPI_OPERATOR_MANIFEST.sha256 in row
    assert f"/{versions.MPI_OPERATOR_VERSION}/" in row
    assert len(_mpi_manifest()) == 9


def test_a_manifest_whose_checksum_differs_is_refused(tmp_path):
    original = (PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file).read_bytes()
    tampered = tmp_path / "mpi-operator.yaml"
    tampered.write_bytes(original.replace(versions.MPI_OPERATOR_IMAGE.encode(), b"mpioperator/mpi-operator:latest", 1))
    assert tampered.read_bytes() != original
    with pytest.raises(operators.ManifestChecksumError) as info:
        operators.load_manifest(tampered, versions.MPI_OPERATOR_MANIFEST.sha256)
    message = str(info.value)
    assert versions.MPI_OPERATOR_MANIFEST.sha256 in message
    assert hashlib.sha256(tampered.read_bytes()).hexdigest() in message


# ----------------------------------------------------------------------------------------------
# Training operator
# ----------------------------------------------------------------------------------------------


def _kustomization() -> dict:
    return yaml.safe_load(KUSTOMIZATION.read_text())


def _patch(target_kind: str, target_name: str):
    found = [
        p
        for p in _kustomization()["patches"]
        if p["target"].get("kind") == target_kind and p["target"].get("name") == target_name
    ]
    assert len(found) == 1, found
    return yaml.safe_load(found[0]["patch"])


def _training_manifest():
    return operators.load_manifest(
        PROJECT_ROOT / versions.TRAINING_OPERATOR_MANIFEST.file, versions.TRAINING_OPERATOR_MANIFEST.sha256
    )


def _training_children(plan):
    return plan.children_of(TRAINING_OPERATOR, "training-operator")


def test_training_operator_manifest_objects_are_registered_as_typed_resources(dev_plan):
    children = _training_children(dev_plan)
    assert len(children) == 10
    assert all(r.type.startswith("kubernetes:") and r.custom for r in children)
    assert Counter(r.inputs["kind"] for r in children) == Counter(
        {
            "Namespace": 1,
            "CustomResourceDefinition": 2,
            "ServiceAccount": 1,
            "ClusterRole": 1,
            "ClusterRoleBinding": 1,
            "Secret": 1,
            "Service": 1,
            "Deployment": 1,
            "ValidatingWebhookConfiguration": 1,
        }
    )
    # Registered as rendered: each object equals its document in the vendored manifest, but the
    # Secret's empty `data`, which the SDK would make a secret output.
    docs = {(d["kind"], d["metadata"]["name"]): d for d in _training_manifest()}
    (secret_doc,) = [d for d in docs.values() if d["kind"] == "Secret"]
    assert secret_doc.pop("data") == {}
    got = {(r.inputs["kind"], r.inputs["metadata"]["name"]): r.inputs for r in children}
    assert got == docs
    for r in children:
        assert r.type.endswith(":" + r.inputs["kind"])
        assert r.name == f"training-operator-{r.inputs['kind'].lower()}-{r.inputs['metadata']['name']}"
    # Nothing is left for kustomize (or git) at `pulumi up`.
    assert dev_plan.of_type(DIRECTORY) == []
    assert not [r for r in dev_plan.records if r.type.startswith("kubernetes:kustomize/")]


def test_training_operator_deployment_runs_the_release_image_in_its_namespace(dev_plan):
    children = _training_children(dev_plan)
    (dep,) = [r.inputs for r in children if r.inputs["kind"] == "Deployment"]
    (ns,) = [r.inputs for r in children if r.inputs["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == "kubeflow"
    assert dep["metadata"]["namespace"] == "kubeflow"
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    # The v1.9.4 overlay's image: the build of the commit before the release tag.
    assert container["image"] == "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"
    assert container["args"] == [f"--enable-scheme={s}" for s in versions.TRAINING_OPERATOR_SCHEMES]
    namespaced = [r.inputs for r in children if "namespace" in r.inputs["metadata"]]
    assert {o["kind"] for o in namespaced} == {"ServiceAccount", "Secret", "Service", "Deployment"}
    assert {o["metadata"]["namespace"] for o in namespaced} == {"kubeflow"}


def test_training_operator_objects_are_ordered(dev_plan):
    """Namespace, CRDs, RBAC and the certificate Secret first; then the Service and the webhook
    configuration; the Deployment last, so its readiness means the webhook has its CA."""
    children = _training_children(dev_plan)
    ref = {r.inputs["kind"]: {"type": r.type, "name": r.name} for r in children}
    roots = [r for r in children if r.inputs["kind"] in operators.ROOT_KINDS]
    assert {r.inputs["kind"] for r in roots} == {"Namespace", "CustomResourceDefinition"}
    root_refs = sorted(({"type": r.type, "name": r.name} for r in roots), key=lambda d: (d["type"], d["name"]))
    foundation = [r for r in children if r.inputs["kind"] in operators.ROOT_KINDS + operators.FOUNDATION_KINDS]
    assert {r.inputs["kind"] for r in foundation} == {
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Secret",
    }
    assert len(foundation) == 7
    foundation_refs = sorted(
        ({"type": r.type, "name": r.name} for r in foundation), key=lambda d: (d["type"], d["name"])
    )
    by_kind = {r.inputs["kind"]: r for r in children}
    for r in roots:
        assert r.depends_on == [], r.name
    for r in foundation:
        if r not in roots:
            # The ServiceAccount and the Secret live in the operator's namespace: created after it.
            assert r.depends_on == root_refs, r.name
    for kind in ("Service", "ValidatingWebhookConfiguration"):
        assert by_kind[kind].depends_on == foundation_refs, kind
    dep = by_kind["Deployment"]
    assert ref["Service"] in dep.depends_on
    assert ref["ValidatingWebhookConfiguration"] in dep.depends_on
    assert all(f in dep.depends_on for f in foundation_refs)
    assert ref["Deployment"] not in by_kind["ValidatingWebhookConfiguration"].depends_on
    # Registration order follows the same stages.
    kinds = [r.inputs["kind"] for r in children]
    assert kinds.index("Deployment") == len(kinds) - 1
    assert max(kinds.index(k) for k in ("Namespace", "Secret", "ClusterRoleBinding")) < kinds.index("Service")


def test_the_jobs_wait_for_every_training_operator_object(dev_plan):
    """Through the operator's Deployment (after every other object of it), not each object directly."""
    children = _training_children(dev_plan)
    (job,) = dev_plan.of_type("kubernetes:kubeflow.org/v1:PyTorchJob")
    direct = {(d["type"], d["name"]) for d in job.depends_on}
    every = {(r.type, r.name) for r in children}
    assert direct & every == {(r.type, r.name) for r in children if r.inputs["kind"] == "Deployment"}
    assert every <= direct | StackView(list(dev_plan.records), None).needs(job)


def test_training_operator_overlay_builds_on_the_vendored_release():
    (resource,) = _kustomization()["resources"]
    assert "://" not in resource and "?" not in resource, "the overlay must not fetch anything"
    target = (KUSTOMIZATION.parent / resource).resolve()
    upstream = PROJECT_ROOT / versions.TRAINING_OPERATOR_UPSTREAM
    assert target == (upstream / "manifests" / "overlays" / "standalone").resolve()
    assert (target / "kustomization.yaml").is_file()
    assert upstream.name == f"training-operator-{versions.TRAINING_OPERATOR_REF}"
    assert (
        Path(versions.TRAINING_OPERATOR_MANIFEST.file).name
        == f"training-operator-{versions.TRAINING_OPERATOR_REF}.yaml"
    )
    assert (PROJECT_ROOT / versions.TRAINING_OPERATOR_KUSTOMIZATION).resolve() == KUSTOMIZATION.parent.resolve()
    assert _version(versions.TRAINING_OPERATOR_REF)[:2] == (1, 9)


def test_training_operator_runs_only_the_pinned_schemes_and_never_mpijob():
    ops = _patch("Deployment", "training-operator")
    arg_ops = [op for op in ops if op["path"].startswith("/spec/template/spec/containers/0/args")]
    assert [op["op"] for op in arg_ops] == ["add"]
    assert arg_ops[0]["path"] == "/spec/template/spec/containers/0/args"
    args = arg_ops[0]["value"]
    assert args == [f"--enable-scheme={s}" for s in versions.TRAINING_OPERATOR_SCHEMES]
    schemes = {a.split("=", 1)[1].lower() for a in args}
    assert {"pytorchjob", "paddlejob"} <= schemes
    assert "mpijob" not in schemes


def test_training_operator_overlay_deletes_its_mpijob_crd():
    patch = _patch("CustomResourceDefinition", "mpijobs.kubeflow.org")
    assert patch["$patch"] == "delete"
    assert patch["kind"] == "CustomResourceDefinition"
    assert patch["apiVersion"] == "apiextensions.k8s.io/v1"
    assert patch["metadata"]["name"] == "mpijobs.kubeflow.org"


def _deleted_crds() -> set[str]:
    out = set()
    for p in _kustomization()["patches"]:
        doc = yaml.safe_load(p["patch"])
        if isinstance(doc, dict) and doc.get("$patch") == "delete" and doc.get("kind") == "CustomResourceDefinition":
            out.add(doc["metadata"]["name"])
    return out


def test_training_operator_installs_upstreams_crds_but_the_deleted_ones(dev_plan):
    crds = {r.inputs["metadata"]["name"] for r in _children(dev_plan, TRAINING_OPERATOR, CRD)}
    # mpijobs belongs to the MPI operator; tf/jax/xgboost are schemes the operator does not run.
    assert _deleted_crds() == {
        "mpijobs.kubeflow.org",
        "tfjobs.kubeflow.org",
        "jaxjobs.kubeflow.org",
        "xgboostjobs.kubeflow.org",
    }
    assert crds == TRAINING_OPERATOR_UPSTREAM_CRDS - _deleted_crds()
    (mpijobs,) = [
        o
        for o in dev_plan.kubernetes_objects()
        if o["kind"] == "CustomResourceDefinition" and o["metadata"]["name"] == "mpijobs.kubeflow.org"
    ]
    assert [v["name"] for v in mpijobs["spec"]["versions"]] == ["v2beta1"], (
        "mpijobs.kubeflow.org must be the MPI operator's"
    )


@pytest.mark.parametrize("variant", ["dev", "prod", "lean", "off"])
def test_no_crd_is_defined_twice(plans, variant):
    plan = plans[variant]
    names = [o["metadata"]["name"] for o in plan.kubernetes_objects() if o["kind"] == "CustomResourceDefinition"]
    assert len(names) == len(set(names)), names
    if _training_children(plan):
        # The overlay installs upstream's CRDs: any the plan installs otherwise must be deleted from it.
        others = {
            r.inputs["metadata"]["name"]
            for r in plan.of_type(CRD)
            if r.parent != {"type": TRAINING_OPERATOR, "name": "training-operator"}
        }
        assert others & TRAINING_OPERATOR_UPSTREAM_CRDS <= _deleted_crds()


def test_disabling_the_operators_removes_them(off_plan):
    assert off_plan.of_type(DIRECTORY) == []
    assert [r for r in off_plan.records if r.type in {COMPONENT + op.component for op in OPERATORS}] == []
    # No CRD of an operator's group is left (the autoscaler's ProvisioningRequest CRD is Kueue's).
    groups = {k.group for k in KINDS}
    assert [r.name for r in off_plan.of_type(CRD) if r.inputs["spec"]["group"] in groups] == []
    assert off_plan.of_type(WEBHOOK) == []
    assert not [
        o
        for o in off_plan.kubernetes_objects()
        if o["metadata"].get("name") in {n for op in OPERATORS for n in (op.resource, op.namespace)}
    ]


# ----------------------------------------------------------------------------------------------
# etcd
# ----------------------------------------------------------------------------------------------


def _etcd(plan):
    sts = _obj(plan, STATEFUL_SET, ETCD)
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    return sts, container


def _flag(command: list[str], name: str) -> str:
    values = [c.split("=", 1)[1] for c in command if c.startswith(f"--{name}=")]
    assert len(values) == 1, (name, command)
    return values[0]


@pytest.mark.parametrize("variant,replicas,cpu,memory", [("dev", 1, "250m", "512Mi"), ("prod", 3, "500m", "1Gi")])
def test_etcd_statefulset(plans, variant, replicas, cpu, memory):
    plan = plans[variant]
    ns = plan.outputs["trainingNamespace"]
    sts, c = _etcd(plan)
    assert sts["metadata"]["namespace"] == ns
    assert sts["spec"]["replicas"] == replicas
    assert c["image"] == versions.ETCD_IMAGE
    assert re.fullmatch(r"v?3\.5\.\d+", c["image"].rsplit(":", 1)[1]), "PyTorch's rendezvous needs the v2 API: etcd 3.5"
    # etcd runs from the config file the member init container writes from the flags it is given.
    (init,) = sts["spec"]["template"]["spec"]["initContainers"]
    assert init["image"] == versions.ETCD_MEMBER_IMAGE
    config_file = _flag(c["command"], "config-file")
    assert _flag(init["command"], "config-file") == config_file
    assert any(config_file.startswith(m["mountPath"] + "/") for m in c["volumeMounts"])
    assert {m["name"] for m in c["volumeMounts"]} <= {m["name"] for m in init["volumeMounts"]}
    command = init["command"][init["command"].index("--") + 1 :]
    assert "--enable-v2=true" in command
    assert c["resources"]["requests"] == {"cpu": cpu, "memory": memory}
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe].get("httpGet") or c[probe].get("exec") or c[probe].get("grpc"), probe
    assert sts["spec"]["template"]["spec"]["nodeSelector"] == {"gputraining/node-group": "system"}
    system = plan.named(MNG, "system-mng")
    assert system.inputs["labels"]["gputraining/node-group"] == "system"
    # The initial cluster lists every member at its stable peer name.
    peers_svc = sts["spec"]["serviceName"]
    members = dict(m.split("=", 1) for m in _flag(command, "initial-cluster").split(","))
    assert members == {f"etcd-{i}": f"http://etcd-{i}.{peers_svc}.{ns}.svc:2380" for i in range(replicas)}
    assert sts["metadata"]["name"] == "etcd"
    peers = [o for o in plan.kubernetes_objects() if o["kind"] == "Service" and o["metadata"]["name"] == peers_svc]
    assert len(peers) == 1 and peers[0]["spec"]["clusterIP"] == "None"


@pytest.mark.parametrize("variant", ["dev", "prod"])
def test_etcd_client_service_and_endpoint_output(plans, variant):
    plan = plans[variant]
    ns = plan.outputs["trainingNamespace"]
    sts, _ = _etcd(plan)
    clients = [
        r.inputs
        for r in _children(plan, ETCD, SERVICE)
        if any(p["port"] == 2379 for p in r.inputs["spec"]["ports"]) and r.inputs["spec"].get("clusterIP") != "None"
    ]
    assert len(clients) == 1
    (svc,) = clients
    assert svc["metadata"]["namespace"] == ns
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert plan.outputs["etcdEndpoint"] == f"{svc['metadata']['name']}.{ns}.svc:2379"
    assert plan.outputs["etcdEndpoint"] == f"etcd.{ns}.svc:2379"


def test_etcd_member_script_ships_with_every_module_it_imports(dev_plan):
    """The member script and the modules beside it that it imports are keys of one ConfigMap, mounted
    as one folder (``python3 DIR/script`` imports from DIR); the pod's checksum follows all of them."""
    sts, _ = _etcd(dev_plan)
    spec = sts["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (mount,) = [m for m in init["volumeMounts"] if "configMap" in volumes[m["name"]]]
    cm_name = volumes[mount["name"]]["configMap"]["name"]
    (cm,) = [o for o in dev_plan.kubernetes_objects() if o["kind"] == "ConfigMap" and o["metadata"]["name"] == cm_name]
    scripts = ROOT / "components" / "scripts"
    assert init["command"][:2] == ["python3", f"{mount['mountPath']}/etcd_member.py"]
    siblings = {f"{n}.py" for text in cm["data"].values() for n in _imports(text) if (scripts / f"{n}.py").is_file()}
    assert siblings == {"etcd_member_decisions.py"}
    assert cm["data"] == {f: (scripts / f).read_text() for f in {"etcd_member.py", *siblings}}
    assert sts["spec"]["template"]["metadata"]["annotations"][
        "gputraining/member-script-sha256"
    ] == etcd.scripts_sha256(cm["data"])


def _imports(source: str) -> list[str]:
    """The top-level modules a script imports (``import x`` and ``from x import ...``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return names


def test_three_etcd_members_get_a_disruption_budget_keeping_quorum(prodlike_plan):
    pdb = _obj(prodlike_plan, PDB, ETCD)
    sts, _ = _etcd(prodlike_plan)
    assert pdb["spec"]["minAvailable"] == 2
    assert pdb["metadata"]["namespace"] == "ml"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()


def test_one_etcd_member_gets_no_disruption_budget(dev_plan):
    assert dev_plan.of_type(PDB) == []


def test_disabling_etcd_removes_it_and_its_output(lean_plan):
    assert [r for r in lean_plan.records if r.type == ETCD or (r.parent or {}).get("type") == ETCD] == []
    assert lean_plan.of_type(STATEFUL_SET) == []
    assert "etcdEndpoint" not in lean_plan.outputs


# ----------------------------------------------------------------------------------------------
# Monitoring
# ----------------------------------------------------------------------------------------------


def test_cloudwatch_addon_is_pinned_with_its_agent_role_and_sends_no_values_that_restate_defaults(dev_plan):
    addon = _addon(dev_plan, "amazon-cloudwatch-observability")
    assert addon is not None and addon.parent["type"] == MONITORING
    assert addon.inputs["addonVersion"] == versions.CLOUDWATCH_OBSERVABILITY_ADDON
    _, sa, policies = _role_of_addon(dev_plan, addon)
    assert sa == "cloudwatch-agent"
    assert "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy" in policies
    # The chart's defaults (6.3.0) already tolerate every taint and keep Container Insights' metrics.
    assert "configurationValues" not in addon.inputs


@pytest.mark.parametrize("variant,cluster,retention", [("dev", "gpu-training-dev", 7), ("prod", PROD_CLUSTER, 90)])
def test_container_insights_log_groups_with_configured_retention(plans, variant, cluster, retention):
    plan = plans[variant]
    groups = _children(plan, MONITORING, LOG_GROUP)
    assert {g.inputs["name"] for g in groups} == {
        f"/aws/containerinsights/{cluster}/{k}" for k in ("application", "dataplane", "host", "performance")
    }
    assert all(g.inputs["retentionInDays"] == retention for g in groups)
    addon = _addon(plan, "amazon-cloudwatch-observability")
    for g in groups:
        assert {"type": LOG_GROUP, "name": g.name} in addon.depends_on, (
            "log groups must exist before the agent writes to them"
        )


@pytest.mark.parametrize("variant,cluster", [("dev", "gpu-training-dev"), ("prod", PROD_CLUSTER)])
def test_dashboard_shows_gpu_and_efa_metrics_of_the_cluster(plans, variant, cluster):
    plan = plans[variant]
    dash = _child(plan, MONITORING, DASHBOARD)
    assert plan.outputs["dashboardName"] == dash.inputs["dashboardName"]
    body = json.loads(dash.inputs["dashboardBody"])
    expressions = [
        m["expression"]
        for w in body["widgets"]
        for row in w["properties"]["metrics"]
        for m in row
        if isinstance(m, dict) and "expression" in m
    ]
    for metric in ("node_gpu_utilization", "node_gpu_memory_utilization", "node_efa_rx_bytes", "node_efa_tx_bytes"):
        hits = [e for e in expressions if f'MetricName="{metric}"' in e]
        assert hits, metric
        assert all(
            e.startswith("SEARCH(") and f'ClusterName="{cluster}"' in e and "ContainerInsights" in e for e in hits
        ), hits
    assert all(w["properties"]["region"] == "us-west-2" for w in body["widgets"])


def test_dashboard_can_be_turned_off_alone(off_plan):
    assert off_plan.of_type(DASHBOARD) == []
    assert "dashboardName" not in off_plan.outputs
    assert len(_children(off_plan, MONITORING, LOG_GROUP)) == 4
    assert _addon(off_plan, "amazon-cloudwatch-observability") is not None


def test_disabling_monitoring_removes_all_of_it(lean_plan):
    assert [r for r in lean_plan.records if r.type == MONITORING or (r.parent or {}).get("type") == MONITORING] == []
    assert _addon(lean_plan, "amazon-cloudwatch-observability") is None
    assert lean_plan.of_type(DASHBOARD) == []
    assert not [g for g in lean_plan.of_type(LOG_GROUP) if "containerinsights" in g.inputs["name"]]
    assert "dashboardName" not in lean_plan.outputs


# ----------------------------------------------------------------------------------------------
# One Kubernetes provider
# ----------------------------------------------------------------------------------------------


def test_one_kubernetes_provider_bound_to_the_cluster(dev_plan):
    (provider,) = dev_plan.of_type(K8S_PROVIDER)
    (cluster,) = dev_plan.of_type(EKS)
    assert {"type": EKS, "name": cluster.name} in provider.depends_on
    assert provider.inputs.get("kubeconfig"), "the provider must be given the cluster's kubeconfig"


def test_every_kubernetes_resource_goes_through_that_provider(dev_plan):
    (provider,) = dev_plan.of_type(K8S_PROVIDER)
    kube = [r for r in dev_plan.records if r.type.startswith("kubernetes:")]
    assert len(kube) > 20
    assert {r.type for r in kube} >= {RELEASE, WEBHOOK, CRD, STATEFUL_SET, PV, PVC, NAMESPACE}
    for r in kube:
        assert r.options.get("provider") == {"type": K8S_PROVIDER, "name": provider.name}, (r.type, r.name)


def test_every_kubernetes_resource_belongs_to_a_service_component(dev_plan):
    for r in dev_plan.records:
        if not r.type.startswith("kubernetes:"):
            continue
        if r.type == NAMESPACE and r.parent is None:
            assert r.inputs["metadata"]["name"] == dev_plan.outputs["trainingNamespace"]
            continue
        assert r.parent and r.parent["type"].startswith(COMPONENT), (r.type, r.name)


def test_no_two_kubernetes_objects_share_an_identity(plans):
    for variant, plan in plans.items():
        ids = Counter(
            (
                o["apiVersion"].split("/")[0] if "/" in o["apiVersion"] else "",
                o["kind"],
                o["metadata"].get("namespace", ""),
                o["metadata"]["name"],
            )
            for o in plan.kubernetes_objects()
        )
        assert [k for k, n in ids.items() if n > 1] == [], variant


def test_training_namespace_that_collides_with_an_operator_namespace_is_refused():
    values = minimal_values(services={"trainingNamespace": "mpi-operator"})
    try:
        load(values, "gpu-training", "test")
    except ConfigError as err:
        assert any(p.key == f"{NS}:services.trainingNamespace" for p in err.problems)
        return
    plan = run_stack(values)
    names = [o["metadata"]["name"] for o in plan.kubernetes_objects() if o["kind"] == "Namespace"]
    assert len(names) == len(set(names)), names


# ----------------------------------------------------------------------------------------------
# Kubernetes schemas
# ----------------------------------------------------------------------------------------------


def _is_builtin(api_version: str) -> bool:
    group = api_version.split("/")[0] if "/" in api_version else ""
    return group == "" or "." not in group or group.endswith(".k8s.io")


@pytest.mark.parametrize("variant", ["dev", "prod", "lean", "off"])
def test_every_core_object_validates_against_the_cluster_version_schema(plans, variant):
    plan = plans[variant]
    (cluster,) = plan.of_type(EKS)
    k8s_version = cluster.inputs["version"]
    assert k8s_version == versions.KUBERNETES_DEFAULT
    objects = [o for o in plan.kubernetes_objects() if _is_builtin(o["apiVersion"])]
    assert objects
    failures = []
    for o in objects:
        try:
            validated = kubernetes_validate.validate(o, k8s_version, True)
            assert validated == k8s_version, f"validated against {validated}, not {k8s_version}"
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as err:
            failures.append(f"{o['kind']}/{o['metadata'].get('name')}: {getattr(err, 'message', err)}")
    assert failures == []


def test_schema_coverage_includes_the_crd_and_the_disruption_budget(prodlike_plan):
    kinds = {o["kind"] for o in prodlike_plan.kubernetes_objects() if _is_builtin(o["apiVersion"])}
    assert {"CustomResourceDefinition", "PodDisruptionBudget", "StatefulSet", "PersistentVolume", "Deployment"} <= kinds


def test_strict_schema_validation_catches_a_wrong_field(dev_plan):
    """The schema check above is not vacuous: a misspelt field fails it."""
    pv = json.loads(json.dumps(_obj(dev_plan, PV, FSX_STORE)))
    pv["spec"]["reclaimPolicy"] = "Retain"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pv, versions.KUBERNETES_DEFAULT, True)


# ----------------------------------------------------------------------------------------------
# Config checks of these sections
# ----------------------------------------------------------------------------------------------

FSX_KEY = f"{NS}:storage.fsx"


@pytest.mark.parametrize(
    "deployment,capacity,step",
    [
        ("SCRATCH_1", 4800, "3600"),
        ("SCRATCH_1", 6000, "3600"),
        ("SCRATCH_2", 3600, "2400"),
        ("PERSISTENT_1", 3600, "2400"),
        ("PERSISTENT_2", 1800, "2400"),
        ("SCRATCH_2", 0, "2400"),
    ],
)
def test_fsx_capacity_off_the_step_is_rejected(deployment, capacity, step):
    fsx = {"deploymentType": deployment, "storageCapacityGiB": capacity}
    if deployment.startswith("PERSISTENT"):
        fsx["perUnitStorageThroughput"] = stack_config.FSX_THROUGHPUT[deployment][0]
    msg = _only_problem(minimal_values(storage={"fsx": fsx}), f"{FSX_KEY}.storageCapacityGiB")
    _assert_mentions(msg, str(capacity), deployment, "1200", "2400", step)


@pytest.mark.parametrize(
    "deployment,capacity,throughput",
    [
        ("SCRATCH_1", 1200, None),
        ("SCRATCH_1", 3600, None),
        ("SCRATCH_1", 7200, None),
        ("SCRATCH_2", 2400, None),
        ("SCRATCH_2", 4800, None),
        ("PERSISTENT_1", 4800, 50),
        ("PERSISTENT_2", 2400, 1000),
        ("PERSISTENT_2", 9600, 125),
    ],
)
def test_fsx_capacity_on_the_step_is_accepted(deployment, capacity, throughput):
    fsx = {"deploymentType": deployment, "storageCapacityGiB": capacity}
    if throughput is not None:
        fsx["perUnitStorageThroughput"] = throughput
    cfg = load(minimal_values(storage={"fsx": fsx}), "gpu-training", "test")
    assert cfg.storage.fsx.storage_capacity_gib == capacity


@pytest.mark.parametrize("deployment", ["PERSISTENT_1", "PERSISTENT_2"])
def test_fsx_persistent_without_throughput_lists_the_allowed_values(deployment):
    msg = _only_problem(
        minimal_values(storage={"fsx": {"deploymentType": deployment, "storageCapacityGiB": 2400}}),
        f"{FSX_KEY}.perUnitStorageThroughput",
    )
    _assert_mentions(msg, deployment, *map(str, stack_config.FSX_THROUGHPUT[deployment]))


@pytest.mark.parametrize("deployment,bad", [("PERSISTENT_1", 125), ("PERSISTENT_2", 200), ("PERSISTENT_2", 100)])
def test_fsx_persistent_with_a_wrong_throughput_names_it_and_the_allowed_values(deployment, bad):
    fsx = {"deploymentType": deployment, "storageCapacityGiB": 2400, "perUnitStorageThroughput": bad}
    msg = _only_problem(minimal_values(storage={"fsx": fsx}), f"{FSX_KEY}.perUnitStorageThroughput")
    _assert_mentions(msg, str(bad), deployment, *map(str, stack_config.FSX_THROUGHPUT[deployment]))


@pytest.mark.parametrize("deployment", ["SCRATCH_1", "SCRATCH_2"])
def test_fsx_scratch_with_a_throughput_is_rejected(deployment):
    fsx = {"deploymentType": deployment, "storageCapacityGiB": 1200, "perUnitStorageThroughput": 125}
    msg = _only_problem(minimal_values(storage={"fsx": fsx}), f"{FSX_KEY}.perUnitStorageThroughput")
    _assert_mentions(msg, "125", deployment, "PERSISTENT")


@pytest.mark.parametrize("bucket", ["s3://datasets", "My_Bucket", "datasets/imagenet", "ab", "bucket-"])
def test_fsx_bad_bucket_name(bucket):
    msg = _only_problem(minimal_values(storage={"fsx": {"s3": {"bucket": bucket}}}), f"{FSX_KEY}.s3.bucket")
    _assert_mentions(msg, repr(bucket), "bucket name")


def test_fsx_s3_paths_are_checked():
    problems = _problems(
        minimal_values(storage={"fsx": {"s3": {"bucket": "ok-bucket", "prefix": "/data", "fileSystemPath": "s3"}}})
    )
    assert {p.key for p in problems} == {f"{FSX_KEY}.s3.prefix", f"{FSX_KEY}.s3.fileSystemPath"}
    by_key = {p.key: p.message for p in problems}
    _assert_mentions(by_key[f"{FSX_KEY}.s3.prefix"], "'/data'")
    _assert_mentions(by_key[f"{FSX_KEY}.s3.fileSystemPath"], "'s3'", "/s3")


def test_fsx_checks_do_not_apply_when_fsx_is_off():
    cfg = load(minimal_values(storage={"fsx": {"enabled": False, "storageCapacityGiB": 1000}}), "gpu-training", "test")
    assert cfg.storage.fsx.enabled is False


def test_efs_max_io_with_elastic_throughput_is_rejected():
    msg = _only_problem(
        minimal_values(storage={"efs": {"performanceMode": "maxIO"}}), f"{NS}:storage.efs.performanceMode"
    )
    _assert_mentions(msg, "'maxIO'", "elastic")


@pytest.mark.parametrize("replicas", [2, 4, 0])
def test_etcd_replicas_must_keep_a_quorum(replicas):
    msg = _only_problem(minimal_values(etcd={"replicas": replicas}), f"{NS}:etcd.replicas")
    _assert_mentions(msg, str(replicas), "1", "3", "5")


@pytest.mark.parametrize("cpu", ["quarter", "250 m", "-1", "1.5cores"])
def test_etcd_bad_cpu_quantity(cpu):
    msg = _only_problem(minimal_values(etcd={"cpu": cpu}), f"{NS}:etcd.cpu")
    _assert_mentions(msg, repr(cpu), "250m")


@pytest.mark.parametrize("memory", ["512MB", "lots", "-1Gi", "1 Gi"])
def test_etcd_bad_memory_quantity(memory):
    msg = _only_problem(minimal_values(etcd={"memory": memory}), f"{NS}:etcd.memory")
    _assert_mentions(msg, repr(memory), "512Mi")


@pytest.mark.parametrize("memory", ["1G", "2Ti", "1.5Gi"])
def test_etcd_valid_kubernetes_memory_quantities_are_accepted(memory):
    assert load(minimal_values(etcd={"memory": memory}), "gpu-training", "test").etcd.memory == memory


def test_etcd_problems_are_reported_together():
    problems = _problems(minimal_values(etcd={"replicas": 2, "cpu": "x", "memory": "y"}))
    assert {p.key for p in problems} == {f"{NS}:etcd.replicas", f"{NS}:etcd.cpu", f"{NS}:etcd.memory"}


@pytest.mark.parametrize("namespace", ["Training", "ml_jobs", "-ml", "kube-system", "kube-training", "a" * 64])
def test_bad_training_namespace(namespace):
    msg = _only_problem(minimal_values(services={"trainingNamespace": namespace}), f"{NS}:services.trainingNamespace")
    _assert_mentions(msg, repr(namespace), "lower-case", "kube-")


@pytest.mark.parametrize(
    "section,raw,key,allowed",
    [
        (
            "storage",
            {"fsx": {"sizeGiB": 1200}},
            "storage.fsx.sizeGiB",
            ["deploymentType", "storageCapacityGiB", "perUnitStorageThroughput", "s3"],
        ),
        ("storage", {"efs": {"encrypted": False}}, "storage.efs.encrypted", ["throughputMode", "performanceMode"]),
        (
            "storage",
            {"fsx": {"s3": {"bucket": "ok-bucket", "path": "/x"}}},
            "storage.fsx.s3.path",
            ["bucket", "prefix", "fileSystemPath", "export"],
        ),
    ],
)
def test_unknown_keys_name_the_key_and_what_is_allowed(section, raw, key, allowed):
    bad = key.rsplit(".", 1)[1]
    msg = _only_problem(minimal_values(**{section: raw}), f"{NS}:{key}")
    _assert_mentions(msg, "unknown key", repr(bad), *allowed)


@pytest.mark.parametrize(
    "section,raw,key,meant",
    [
        ("storage", {"deletionProtecton": False}, "storage.deletionProtecton", "deletionProtection"),
        ("etcd", {"replica": 3}, "etcd.replica", "replicas"),
        ("services", {"mpiOperators": False}, "services.mpiOperators", "mpiOperator"),
        ("monitoring", {"dashbord": False}, "monitoring.dashbord", "dashboard"),
    ],
)
def test_unknown_keys_close_to_an_allowed_one_name_it(section, raw, key, meant):
    bad = key.rsplit(".", 1)[1]
    msg = _only_problem(minimal_values(**{section: raw}), f"{NS}:{key}")
    assert msg == f"unknown key {bad!r}; did you mean {meant!r}?"


def test_monitoring_log_retention_must_be_a_cloudwatch_value():
    msg = _only_problem(minimal_values(monitoring={"logRetentionDays": 10}), f"{NS}:monitoring.logRetentionDays")
    _assert_mentions(msg, "10", "7", "14", "30", "90")


def test_service_defaults_match_the_issue():
    cfg = load(minimal_values(), "gpu-training", "test")
    assert cfg.storage.deletion_protection is True
    assert cfg.etcd.replicas == 1 and cfg.etcd.enabled
    sv = cfg.services
    assert (sv.nvidia_device_plugin, sv.efa_device_plugin, sv.mpi_operator, sv.training_operator) == (
        True,
        True,
        True,
        True,
    )
    assert cfg.monitoring.enabled and cfg.monitoring.dashboard
