"""The foundation stack under the offline engine: VPC, cluster, node groups, EFA wiring."""

from __future__ import annotations

import ipaddress

import pytest

from facts import catalog, instance_types, versions
from infra import offline
from tests.helpers import minimal_values, run_stack
from tests.scheduling import MNG, NODE_GROUP

VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
EKS = "eks:index:Cluster"
SG = "aws:ec2/securityGroup:SecurityGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"


def _gpu_groups(values, *groups):
    return minimal_values(gpuNodeGroups=list(groups))


# ----------------------------------------------------------------------------------------------
# Network
# ----------------------------------------------------------------------------------------------


def test_private_subnets_span_two_azs_including_the_gpu_az(dev_plan):
    private = [r for r in dev_plan.of_type(SUBNET) if "private" in r.name]
    azs = {r.inputs["availabilityZone"] for r in private}
    assert len(azs) >= 2
    assert dev_plan.outputs["gpuAvailabilityZone"] in azs
    gpu_subnet = [r for r in private if r.inputs["availabilityZone"] == dev_plan.outputs["gpuAvailabilityZone"]]
    assert [r.id for r in gpu_subnet] == [dev_plan.outputs["gpuSubnetId"]]


def test_no_subnet_gives_public_ips_and_subnets_carry_eks_lb_tags(dev_plan):
    subnets = dev_plan.of_type(SUBNET)
    assert subnets and all(r.inputs.get("mapPublicIpOnLaunch") is False for r in subnets)
    for r in subnets:
        role = "kubernetes.io/role/internal-elb" if "private" in r.name else "kubernetes.io/role/elb"
        assert r.inputs["tags"][role] == "1", r.name


def test_subnets_fit_in_the_vpc_and_do_not_overlap(dev_plan):
    vpc = ipaddress.ip_network(dev_plan.of_type(VPC)[0].inputs["cidrBlock"])
    nets = [ipaddress.ip_network(r.inputs["cidrBlock"]) for r in dev_plan.of_type(SUBNET)]
    assert all(n.subnet_of(vpc) for n in nets)
    for i, a in enumerate(nets):
        for b in nets[i + 1 :]:
            assert not a.overlaps(b), (a, b)
    private = [ipaddress.ip_network(r.inputs["cidrBlock"]) for r in dev_plan.of_type(SUBNET) if "private" in r.name]
    assert all(n.num_addresses >= 8192 for n in private), "node subnets must hold many pod IPs"


def test_private_route_tables_egress_through_nat_and_s3_gateway_endpoint(dev_plan):
    rts = [r for r in dev_plan.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name]
    assert rts and all(r.inputs["routes"][0].get("natGatewayId", "").startswith("nat-") for r in rts)
    (endpoint,) = dev_plan.of_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    assert endpoint.inputs["vpcEndpointType"] == "Gateway"
    assert endpoint.inputs["serviceName"] == "com.amazonaws.us-west-2.s3"
    assert sorted(endpoint.inputs["routeTableIds"]) == sorted(r.id for r in rts)


def test_nat_per_az_gives_each_private_subnet_its_own_nat():
    plan = run_stack(minimal_values(network={"natGateways": "perAz", "availabilityZoneCount": 3}))
    nats = plan.of_type("aws:ec2/natGateway:NatGateway")
    assert len(nats) == 3
    rts = [r for r in plan.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name]
    assert len({r.inputs["routes"][0]["natGatewayId"] for r in rts}) == 3


# ----------------------------------------------------------------------------------------------
# Cluster
# ----------------------------------------------------------------------------------------------


def test_cluster_inputs(dev_plan):
    (cluster,) = dev_plan.of_type(EKS)
    i = cluster.inputs
    assert i["authenticationMode"] == "API"
    assert i["skipDefaultNodeGroup"] is True
    # cluster_security_group_id must be the EKS-created group the nodes carry (see components/cluster.py).
    assert i["skipDefaultSecurityGroups"] is True
    assert i["createOidcProvider"] is True
    assert i["nodeAssociatePublicIpAddress"] is False
    assert set(i["enabledClusterLogTypes"]) == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
    key = dev_plan.named("aws:kms/key:Key", "cluster-secrets")
    assert key.inputs["enableKeyRotation"] is True
    assert i["encryptionConfigKeyArn"].startswith("arn:aws:kms:us-west-2:")
    assert {"type": "aws:kms/key:Key", "name": key.name} in cluster.depends_on
    assert i["version"] == versions.KUBERNETES_DEFAULT
    assert sorted(i["privateSubnetIds"]) == sorted(dev_plan.outputs["privateSubnetIds"])


def test_core_addons_are_pinned_from_versions_module(dev_plan):
    (cluster,) = dev_plan.of_type(EKS)
    k8s = cluster.inputs["version"]
    assert cluster.inputs["vpcCniOptions"]["addonVersion"] == versions.VPC_CNI_ADDON
    # CoreDNS (a Deployment) is not created inside pulumi-eks' cluster, where no node exists yet and
    # the add-on would stay DEGRADED until a timeout; ours waits for the system node group.
    assert cluster.inputs["corednsAddonOptions"]["enabled"] is False
    (coredns,) = [r for r in dev_plan.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "coredns"]
    assert coredns.inputs["addonVersion"] == versions.COREDNS_ADDON[k8s]
    assert {"type": "eks:index:ManagedNodeGroup", "name": "system-mng"} in coredns.depends_on
    assert cluster.inputs["kubeProxyAddonOptions"]["version"] == versions.KUBE_PROXY_ADDON[k8s]
    (agent,) = [r for r in dev_plan.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "eks-pod-identity-agent"]
    assert agent.inputs["addonVersion"] == versions.POD_IDENTITY_AGENT_ADDON
    assert {"type": EKS, "name": cluster.name} in agent.depends_on


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.lstrip("v").split("-")[0].split("."))


def test_pinned_vpc_cni_handles_efa_only_interfaces():
    assert _version_tuple(versions.VPC_CNI_ADDON) >= versions.VPC_CNI_MIN_FOR_EFA_ONLY


def test_every_supported_kubernetes_version_has_matching_addon_builds():
    for k8s in versions.KUBERNETES_SUPPORTED:
        assert versions.KUBE_PROXY_ADDON[k8s].startswith(f"v{k8s}."), "kube-proxy must match the cluster minor"
        assert versions.COREDNS_ADDON[k8s].startswith("v1.")
    assert versions.KUBERNETES_DEFAULT in versions.KUBERNETES_SUPPORTED


def test_admin_principals_become_access_entries_with_cluster_admin():
    arn = "arn:aws:iam::123456789012:role/PlatformAdmin"
    plan = run_stack(minimal_values(cluster={"adminPrincipals": [arn]}))
    (cluster,) = plan.of_type(EKS)
    entries = cluster.inputs["accessEntries"]
    assert [e["principalArn"] for e in entries.values()] == [arn]
    (policy,) = [p for e in entries.values() for p in e["accessPolicies"].values()]
    assert policy["policyArn"].endswith("AmazonEKSClusterAdminPolicy")
    assert policy["accessScope"]["type"] == "cluster"


def test_endpoint_access_from_config():
    plan = run_stack(
        minimal_values(
            cluster={
                "endpointPublicAccess": True,
                "endpointPublicAccessCidrs": ["203.0.113.0/24"],
                "endpointPrivateAccess": True,
            }
        )
    )
    (cluster,) = plan.of_type(EKS)
    assert cluster.inputs["publicAccessCidrs"] == ["203.0.113.0/24"]
    assert cluster.inputs["endpointPrivateAccess"] is True
    private_only = run_stack(minimal_values(cluster={"endpointPublicAccess": False}))
    (c2,) = private_only.of_type(EKS)
    assert c2.inputs["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in c2.inputs


def test_node_role_has_only_node_policies(dev_plan):
    attached = sorted(
        r.inputs["policyArn"].split("/")[-1]
        for r in dev_plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.name.startswith("cluster-node-")
    )
    assert attached == sorted(
        ["AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonEKS_CNI_Policy"]
    )
    assert not any("FSx" in a or "EFS" in a or "CloudWatch" in a for a in attached)


# ----------------------------------------------------------------------------------------------
# Node groups
# ----------------------------------------------------------------------------------------------


def _lt_of(plan, group: str):
    return plan.named(LT, f"{group}-lt")


def _mng_of(plan, group: str):
    """The EKS node group of ``group``: pulumi-eks' ManagedNodeGroup (system) or aws.eks.NodeGroup (GPU)."""
    (found,) = [r for r in plan.records if r.type in (MNG, NODE_GROUP) and r.name == f"{group}-mng"]
    return found


def test_system_group_spans_private_subnets_with_standard_ami(dev_plan):
    mng = _mng_of(dev_plan, "system")
    assert sorted(mng.inputs["subnetIds"]) == sorted(dev_plan.outputs["privateSubnetIds"])
    assert mng.inputs["amiType"] == versions.SYSTEM_AMI_TYPE
    assert mng.inputs["instanceTypes"] == ["c5.2xlarge"]
    assert "taints" not in mng.inputs or mng.inputs["taints"] == []


@pytest.mark.parametrize("group", ["system", "gpu-p4d", "gpu-p3dn"])
def test_every_node_group_has_encrypted_root_and_imdsv2(dev_plan, group):
    lt = _lt_of(dev_plan, group)
    ebs = lt.inputs["blockDeviceMappings"][0]["ebs"]
    assert ebs["encrypted"] == "true"
    assert lt.inputs["metadataOptions"]["httpTokens"] == "required"
    mng = _mng_of(dev_plan, group)
    assert mng.inputs["launchTemplate"]["id"] == lt.id
    assert "diskSize" not in mng.inputs, "disk size lives in the launch template"


def test_gpu_groups_are_pinned_to_the_gpu_az_with_gpu_ami_label_and_taint(dev_plan):
    for group in ("gpu-p4d", "gpu-p3dn"):
        mng = _mng_of(dev_plan, group)
        assert mng.inputs["subnetIds"] == [dev_plan.outputs["gpuSubnetId"]]
        assert mng.inputs["amiType"] == versions.GPU_AMI_TYPE
        assert mng.inputs["labels"]["nvidia.com/gpu.present"] == "true"
        assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in mng.inputs["taints"]


@pytest.mark.parametrize("instance_type", [t for t in catalog.GPU_TYPES if catalog.BUILTIN[t].efa_supported])
def test_efa_types_get_every_efa_interface_the_catalog_lists(instance_type):
    # An AZ of us-west-2 that offers the type (p6-b300 is in 2a and 2b only, p5e in 2c only).
    az = min(offline.az_offerings("us-west-2")[instance_type])
    plan = run_stack(
        minimal_values(
            gpuAvailabilityZone=az, gpuNodeGroups=[{"name": "g", "instanceType": instance_type, "maxSize": 2}]
        )
    )
    it = catalog.BUILTIN[instance_type]
    lt = _lt_of(plan, "gpu-g")
    nics = lt.inputs["networkInterfaces"]
    # Card by card from each card's interface types (tests/test_catalog.py walks every EFA type of
    # AWS's data): the primary on card 0 device 0 carries ENA, one EFA per further card.
    layout = instance_types.efa_layout(it)
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics] == [
        (s.card, s.device, s.interface_type) for s in layout
    ]
    assert sum(n["interfaceType"] in ("efa", "efa-only") for n in nics) == it.efa_interfaces
    assert (
        nics[0]["deviceIndex"] == 0
        and nics[0]["networkCardIndex"] == 0
        and nics[0]["interfaceType"] in ("efa", "interface")
    )
    assert all(n["deviceIndex"] == 1 and n["interfaceType"] == "efa-only" for n in nics[1:])
    assert all("subnetId" not in n for n in nics), "EKS managed node groups reject SubnetId on interfaces"
    # The EFA security group allows everything to and from itself, and sits on every interface
    # next to the cluster security group.
    efa_sg = plan.named(SG, "gpu-g-efa")
    assert efa_sg.parent == {"type": "gputraining:components:NodeGroup", "name": "gpu-g"}
    ingress = plan.named("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "gpu-g-efa-in-self").inputs
    egress = plan.named("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "gpu-g-efa-out-self").inputs
    for rule in (ingress, egress):
        assert rule["ipProtocol"] == "-1"
        assert rule["securityGroupId"] == efa_sg.id == rule["referencedSecurityGroupId"]
    for n in nics:
        assert efa_sg.id in n["securityGroups"] and len(n["securityGroups"]) == 2
    assert {"type": EKS, "name": "cluster-eks"} in lt.depends_on  # the other group is the cluster SG
    assert "vpcSecurityGroupIds" not in lt.inputs
    # A cluster placement group in the GPU AZ.
    (pg,) = plan.of_type(PG)
    assert pg.inputs["strategy"] == "cluster"
    assert lt.inputs["placement"]["groupName"]
    assert {"type": PG, "name": pg.name} in lt.depends_on
    mng = _mng_of(plan, "gpu-g")
    assert mng.inputs["subnetIds"] == [plan.outputs["gpuSubnetId"]]
    assert plan.outputs["gpuAvailabilityZone"] == az
    assert mng.inputs["labels"]["vpc.amazonaws.com/efa.present"] == "true"


def test_non_efa_type_gets_no_efa_wiring():
    plan = run_stack(
        minimal_values(
            gpuAvailabilityZone="us-west-2b",
            gpuNodeGroups=[{"name": "v100", "instanceType": "p3dn.24xlarge", "efa": False, "maxSize": 1}],
        )
    )
    lt = _lt_of(plan, "gpu-v100")
    assert "networkInterfaces" not in lt.inputs
    assert "placement" not in lt.inputs
    assert not plan.of_type(PG)
    assert not [r for r in plan.of_type(SG) if r.name.endswith("-efa")]
    assert len(lt.inputs["vpcSecurityGroupIds"]) == 1
    assert "vpc.amazonaws.com/efa.present" not in _mng_of(plan, "gpu-v100").inputs["labels"]


def test_capacity_block_targets_the_reservation_without_a_new_placement_group():
    plan = run_stack(
        minimal_values(
            gpuAvailabilityZone="us-west-2a",
            gpuNodeGroups=[
                {
                    "name": "h100",
                    "instanceType": "p5.48xlarge",
                    "capacityType": "capacity-block",
                    "capacityReservationId": "cr-0123456789abcdef0",
                    "minSize": 2,
                    "desiredSize": 2,
                    "maxSize": 2,
                }
            ],
        )
    )
    lt = _lt_of(plan, "gpu-h100")
    assert lt.inputs["instanceMarketOptions"]["marketType"] == "capacity-block"
    target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target["capacityReservationId"] == "cr-0123456789abcdef0"
    assert not plan.of_type(PG)
    assert "placement" not in lt.inputs
    # EKS wants the instance type of a capacity block in the launch template and none on the group.
    assert lt.inputs["instanceType"] == "p5.48xlarge"
    ng = _mng_of(plan, "gpu-h100")
    assert ng.type == NODE_GROUP and "instanceTypes" not in ng.inputs and ng.inputs["capacityType"] == "CAPACITY_BLOCK"
    assert len(lt.inputs["networkInterfaces"]) == 32


def test_other_groups_keep_the_type_on_the_group_and_none_in_the_template(dev_plan):
    for group in ("gpu-p4d", "gpu-p3dn", "system"):
        assert "instanceType" not in _lt_of(dev_plan, group).inputs
        assert _mng_of(dev_plan, group).inputs["instanceTypes"]


def test_gpu_groups_update_without_extra_nodes_and_repair_faulty_ones(dev_plan):
    for group in ("gpu-p4d", "gpu-p3dn"):
        ng = _mng_of(dev_plan, group)
        assert ng.type == NODE_GROUP
        # MINIMAL: no node launched ahead of a replacement (a full placement group or reservation
        # would fail it); one node at a time.
        assert ng.inputs["updateConfig"] == {"updateStrategy": "MINIMAL", "maxUnavailable": 1}
        assert ng.inputs["nodeRepairConfig"] == {"enabled": True}
        # It joins the cluster after it exists and after the node role has its policies.
        deps = {(d["type"], d["name"]) for d in ng.depends_on}
        assert ("eks:index:Cluster", "cluster-eks") in deps
        assert {d for d in deps if d[0] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment"}
    (agent,) = [
        r for r in dev_plan.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "eks-node-monitoring-agent"
    ]
    assert agent.inputs["addonVersion"] == versions.NODE_MONITORING_AGENT_ADDON["1.36"]


def test_existing_placement_group_is_used_by_name():
    plan = run_stack(
        minimal_values(
            gpuNodeGroups=[
                {
                    "name": "p4d",
                    "instanceType": "p4d.24xlarge",
                    "placementGroup": {"mode": "existing", "name": "team-pg"},
                }
            ]
        )
    )
    assert not plan.of_type(PG)
    assert _lt_of(plan, "gpu-p4d").inputs["placement"]["groupName"] == "team-pg"


def test_extra_labels_and_taints_are_added_to_the_gpu_ones():
    plan = run_stack(
        minimal_values(
            gpuNodeGroups=[
                {
                    "name": "p4d",
                    "instanceType": "p4d.24xlarge",
                    "labels": {"team": "vision"},
                    "taints": [{"key": "dedicated", "value": "vision", "effect": "NoExecute"}],
                }
            ]
        )
    )
    mng = _mng_of(plan, "gpu-p4d")
    assert mng.inputs["labels"]["team"] == "vision"
    assert {"key": "dedicated", "value": "vision", "effect": "NO_EXECUTE"} in mng.inputs["taints"]
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in mng.inputs["taints"]


def test_every_taggable_resource_carries_the_stack_tags(dev_plan):
    untagged = [
        (r.type, r.name)
        for r in dev_plan.records
        if r.custom
        and r.type.startswith("aws:")
        and "tags" not in r.inputs
        and r.type
        not in {
            "aws:ec2/routeTableAssociation:RouteTableAssociation",
            "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
            "aws:kms/alias:Alias",
            "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
            "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
            # AWS has no tags for these:
            "aws:efs/mountTarget:MountTarget",
            "aws:cloudwatch/dashboard:Dashboard",
            "aws:cloudwatch/logMetricFilter:LogMetricFilter",
            "aws:iam/rolePolicy:RolePolicy",
            # A tag itself (on an Auto Scaling group):
            "aws:autoscaling/tag:Tag",
        }
    ]
    assert untagged == []
    for r in dev_plan.records:
        if "tags" in r.inputs and r.type.startswith(("aws:", "eks:")):
            assert r.inputs["tags"]["gputraining/stack"] == "dev", r.name


def test_stack_outputs(dev_plan):
    out = dev_plan.outputs
    assert out["clusterName"] == "gpu-training-dev"
    assert out["kubeconfig"] == "[secret]"
    assert out["vpcId"].startswith("vpc-")
    assert out["nodeGroupNames"] == {
        "system": "gpu-training-dev-system",
        "p4d": "gpu-training-dev-gpu-p4d",
        "p3dn": "gpu-training-dev-gpu-p3dn",
    }


def test_gpu_az_auto_picks_the_first_az_offering_every_gpu_type():
    # In AWS's recorded data for us-west-2: p3dn.24xlarge is offered in 2b and 2c only, p5e in 2c only.
    plan = run_stack(
        minimal_values(
            gpuNodeGroups=[
                {"name": "a", "instanceType": "p3dn.24xlarge"},
                {"name": "b", "instanceType": "p4d.24xlarge"},
            ]
        )
    )
    assert plan.outputs["gpuAvailabilityZone"] == "us-west-2b"
    plan2 = run_stack(
        minimal_values(
            gpuNodeGroups=[
                {"name": "a", "instanceType": "p3dn.24xlarge"},
                {"name": "b", "instanceType": "p5e.48xlarge"},
            ]
        )
    )
    assert plan2.outputs["gpuAvailabilityZone"] == "us-west-2c"


def test_explicit_gpu_az_that_does_not_offer_the_type_fails_before_anything_is_created():
    import pulumi

    with pytest.raises(pulumi.RunError, match=r"us-west-2a.*does not offer p3dn.24xlarge.*us-west-2b, us-west-2c"):
        run_stack(
            minimal_values(
                gpuAvailabilityZone="us-west-2a", gpuNodeGroups=[{"name": "a", "instanceType": "p3dn.24xlarge"}]
            )
        )


def test_auto_with_no_common_az_explains_where_each_type_is_offered():
    import pulumi

    with pytest.raises(pulumi.RunError, match=r"no single AZ.*p5e.48xlarge: us-west-2c"):
        run_stack(
            minimal_values(
                gpuNodeGroups=[
                    {"name": "a", "instanceType": "p5e.48xlarge"},
                    {"name": "b", "instanceType": "p3.2xlarge"},
                ]
            )
        )
