"""The private IPv4 addresses nodes take from their subnet: what a subnet holds, each instance type's
network interfaces and addresses per interface, and the VPC CNI's warm pool as the stack configures
it. ``stacks/config/address_checks.py`` adds them up for the private subnets.
"""

from __future__ import annotations

# AWS reserves the first four addresses and the last one of every subnet (Amazon VPC User Guide,
# "Subnet CIDR blocks"): a /19 holds 8,192 - 5 = 8,187.
SUBNET_RESERVED = 5

# Network interfaces an instance takes and private IPv4 addresses per interface: EC2
# DescribeInstanceTypes NetworkInfo.MaximumNetworkInterfaces and Ipv4AddressesPerInterface, as
# moto 5.2.5 records them (tests/test_aws_refusals.py compares). The p3 types are no longer in that
# data: the EC2 instance types guide's P3 network specifications, 4 x 15 (p3.2xlarge) and 8 x 30
# (p3.8xlarge, p3.16xlarge), which the EKS AMI's eni-max-pods.txt agrees with (58 and 234 pods:
# interfaces x (addresses - 1) + 2).
INTERFACES: dict[str, tuple[int, int]] = {
    "p3.2xlarge": (4, 15),
    "p3.8xlarge": (8, 30),
    "p3.16xlarge": (8, 30),
    "p3dn.24xlarge": (15, 50),
    "p4d.24xlarge": (60, 50),
    "p4de.24xlarge": (60, 50),
    "p5.4xlarge": (4, 30),
    "p5.48xlarge": (64, 50),
    "p5e.48xlarge": (64, 50),
    "p5en.48xlarge": (64, 50),
    "p6-b200.48xlarge": (32, 50),
    "p6-b300.48xlarge": (68, 50),
    "c5.xlarge": (4, 15),
    "c5.2xlarge": (4, 15),
    "c5.4xlarge": (8, 30),
    "m5.xlarge": (4, 15),
    "m5.2xlarge": (4, 15),
    "m5.4xlarge": (8, 30),
    "m6i.xlarge": (4, 15),
    "m6i.2xlarge": (4, 15),
    "m6i.4xlarge": (8, 30),
}

# The VPC CNI as the stack runs it: components/cluster.py gives pulumi-eks only the add-on's version
# (VpcCniOptionsArgs(addon_version=...)), so pulumi-eks' VpcCniAddon writes WARM_ENI_TARGET=1 and no
# WARM_IP_TARGET, MINIMUM_IP_TARGET or ENABLE_PREFIX_DELEGATION (nodejs/eks/addons/cni-addon.ts,
# computeEnv: `${val ?? 1}`; tests/test_aws_refusals.py holds the plan's vpcCniOptions to that). With
# it ipamd keeps "a full ENI" of free addresses on network card 0 (amazon-vpc-cni-k8s,
# docs/eni-and-ip-target.md): each interface it attaches comes with all its addresses, and a node
# with a pod on the pod network holds its primary interface and one more (the document's
# p3dn.24xlarge with 3 pods: 2 interfaces, 98 secondary addresses), a third once pods fill the first.
VPC_CNI_WARM_ENI_TARGET = 1


def training_node_addresses(instance_type: str, further_ena_interfaces: int) -> int:
    """The addresses a GPU node takes: its primary interface and the VPC CNI's warm one, each with all
    its addresses (its pods, one training worker and the DaemonSets that tolerate the GPU taint, stay
    within the first interface's), plus the primary address of each further interface of its launch
    template that carries ENA (an ``efa`` one on another card). ``efa-only`` interfaces take none:
    "You can't assign an IP address to an EFA-only network interface" (EC2 User Guide, "Create and
    attach an Elastic Fabric Adapter"); and the interfaces the VPC CNI adds go on the type's default
    network card, 0 (DefaultNetworkCardIndex, amazon-vpc-cni-k8s pkg/vpc/vpc_ip_resource_limit.go)."""
    per_interface = INTERFACES[instance_type][1]
    return (1 + VPC_CNI_WARM_ENI_TARGET) * per_interface + further_ena_interfaces


def system_node_addresses(instance_type: str) -> int:
    """The most addresses a system node takes: every interface it can have, each with all its
    addresses (any pod lands there, up to the EKS AMI's max pods, interfaces x (addresses - 1) + 2)."""
    interfaces, per_interface = INTERFACES[instance_type]
    return interfaces * per_interface


def subnet_addresses(prefix: int) -> int:
    """The addresses a subnet of ``/prefix`` gives its nodes."""
    return 2 ** (32 - prefix) - SUBNET_RESERVED
