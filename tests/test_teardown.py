"""`pulumi destroy` deletes in reverse dependency order: these are the edges that order relies on."""

from __future__ import annotations

import pytest

from tests.helpers import dev_values, run_stack

EKS = {"type": "eks:index:Cluster", "name": "cluster-eks"}
K8S_PROVIDER = {"type": "pulumi:providers:kubernetes", "name": "k8s"}


def _ancestors(plan, record):
    seen = []
    parent = record.parent
    while parent is not None:
        seen.append(parent)
        parent = plan.named(parent["type"], parent["name"]).parent
    return seen


def _depends_transitively(plan, record, target: dict) -> bool:
    """True when `record` (or a component above it) depends on `target`, directly or through
    other resources' dependencies."""
    by_key = {(r.type, r.name): r for r in plan.records}
    stack = [record] + [by_key[(a["type"], a["name"])] for a in _ancestors(plan, record)]
    seen = set()
    while stack:
        r = stack.pop()
        if (r.type, r.name) in seen:
            continue
        seen.add((r.type, r.name))
        deps = list(r.depends_on)
        if r.options.get("provider"):
            deps.append(r.options["provider"])
        if target in deps:
            return True
        stack.extend(by_key[(d["type"], d["name"])] for d in deps if (d["type"], d["name"]) in by_key)
    return False


def test_kubernetes_objects_go_through_one_provider_bound_to_the_cluster(dev_plan):
    providers = dev_plan.of_type("pulumi:providers:kubernetes")
    assert [p.name for p in providers] == ["k8s"]
    assert EKS in providers[0].depends_on, "the provider (and so every Kubernetes object) goes before the cluster"
    assert providers[0].inputs["kubeconfig"] == "[secret]"
    k8s_records = [r for r in dev_plan.records if r.custom and r.type.startswith("kubernetes:")]
    assert k8s_records
    for r in k8s_records:
        assert r.options.get("provider") == K8S_PROVIDER, f"{r.type} {r.name} does not use the cluster's provider"


def test_node_groups_and_addons_are_deleted_before_the_cluster(dev_plan):
    for r in [*dev_plan.of_type("eks:index:ManagedNodeGroup"), *dev_plan.of_type("aws:eks/nodeGroup:NodeGroup")]:
        assert _depends_transitively(dev_plan, r, EKS), r.name
    for r in dev_plan.of_type("aws:eks/addon:Addon"):
        assert _depends_transitively(dev_plan, r, EKS), r.inputs["addonName"]


def test_file_systems_go_before_their_security_groups_and_subnets(dev_plan):
    fsx = dev_plan.named("aws:fsx/lustreFileSystem:LustreFileSystem", "fsx-fs")
    gpu_subnet = next(r for r in dev_plan.of_type("aws:ec2/subnet:Subnet") if r.id == dev_plan.outputs["gpuSubnetId"])
    assert {"type": gpu_subnet.type, "name": gpu_subnet.name} in fsx.depends_on
    assert {"type": "aws:ec2/securityGroup:SecurityGroup", "name": "fsx-lustre"} in fsx.depends_on
    for mt in dev_plan.of_type("aws:efs/mountTarget:MountTarget"):
        subnet = next(r for r in dev_plan.of_type("aws:ec2/subnet:Subnet") if r.id == mt.inputs["subnetId"])
        assert {"type": subnet.type, "name": subnet.name} in mt.depends_on
        assert {"type": "aws:ec2/securityGroup:SecurityGroup", "name": "efs-nfs"} in mt.depends_on
        assert {"type": "aws:efs/fileSystem:FileSystem", "name": "efs-fs"} in mt.depends_on


def test_volumes_go_before_their_file_systems_and_csi_drivers(dev_plan):
    for store, fs_type in (
        ("efs", "aws:efs/fileSystem:FileSystem"),
        ("fsx", "aws:fsx/lustreFileSystem:LustreFileSystem"),
    ):
        pv = dev_plan.named("kubernetes:core/v1:PersistentVolume", f"{store}-pv")
        assert _depends_transitively(dev_plan, pv, {"type": fs_type, "name": f"{store}-fs"})
        assert _depends_transitively(dev_plan, pv, {"type": "aws:eks/addon:Addon", "name": f"{store}-csi"})
        assert pv.inputs["spec"]["persistentVolumeReclaimPolicy"] == "Retain"


def test_nat_gateways_go_before_the_internet_gateway(dev_plan):
    for nat in dev_plan.of_type("aws:ec2/natGateway:NatGateway"):
        assert {"type": "aws:ec2/internetGateway:InternetGateway", "name": "network-igw"} in nat.depends_on


def test_no_load_balancer_service_outside_the_graph(dev_plan):
    services = [o for o in dev_plan.kubernetes_objects() if o["kind"] == "Service"]
    assert services
    assert all(s["spec"].get("type", "ClusterIP") != "LoadBalancer" for s in services)


@pytest.fixture(scope="module")
def protected_plan():
    values = dev_values()
    values["gpu-training:storage"] = {**values["gpu-training:storage"], "deletionProtection": True}
    values["gpu-training:storage"]["fsx"] = {
        "enabled": True,
        "deploymentType": "PERSISTENT_2",
        "storageCapacityGiB": 2400,
        "perUnitStorageThroughput": 250,
    }
    return run_stack(values, stack="protected")


def test_data_stores_and_their_keys_are_protected_only_when_asked(dev_plan, protected_plan):
    def protected(plan):
        return sorted((r.type, r.name) for r in plan.records if r.options.get("protect"))

    assert protected(dev_plan) == []
    assert protected(protected_plan) == sorted(
        [
            ("aws:efs/fileSystem:FileSystem", "efs-fs"),
            ("aws:kms/key:Key", "efs-key"),
            ("aws:fsx/lustreFileSystem:LustreFileSystem", "fsx-fs"),
            ("aws:kms/key:Key", "fsx-key"),
        ]
    )
