"""Network: a VPC with private node subnets (one per AZ, the GPU AZ among them), public subnets
with NAT for egress, an S3 gateway endpoint and the subnet tags EKS load balancers expect.

Nodes never get public IPs: node subnets are private and no subnet maps public IPs on launch.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

# The tag (value "true") that marks the GPU AZ's private subnet, there since the first version: with
# the stack's own tags it is how a later run finds the GPU AZ the stack is deployed in (stacks/placement.py).
GPU_SUBNET_TAG = "gputraining/gpu-az"


@dataclass
class NetworkArgs:
    cluster_name: str  # EKS cluster name: the Name tags and the kubernetes.io/cluster/<name> subnet tag
    region: str  # AWS region (the S3 gateway endpoint's service name)
    vpc_cidr: str  # the VPC's IPv4 range, carved into the private and public subnets
    # Private subnets go to these AZs, in this order. The GPU AZ must be one of them.
    availability_zones: list[str]
    gpu_availability_zone: str  # the GPU nodes' AZ; its private subnet becomes gpu_subnet_id (tag gputraining/gpu-az)
    private_subnet_prefix: int = 19  # prefix length of each private subnet (public subnets are 4 bits longer)
    nat_per_az: bool = False  # a NAT gateway per AZ; False: one, shared by every private subnet
    tags: dict[str, str] = field(default_factory=dict)  # tags on every AWS resource of the component


def subnet_plan(vpc_cidr: str, azs: list[str], private_prefix: int) -> tuple[list[str], list[str]]:
    """CIDRs for the private subnets (one /private_prefix block per AZ) and the public subnets
    (one /private_prefix+4 each, carved from the next free block)."""
    vpc = ipaddress.IPv4Network(vpc_cidr)
    blocks = list(vpc.subnets(new_prefix=private_prefix))
    private = [str(b) for b in blocks[: len(azs)]]
    public_pool = list(blocks[len(azs)].subnets(new_prefix=private_prefix + 4))
    public = [str(b) for b in public_pool[: len(azs)]]
    return private, public


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: list[pulumi.Output[str]]
    public_subnet_ids: list[pulumi.Output[str]]
    gpu_subnet_id: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:Network", name, None, opts)
        if args.gpu_availability_zone not in args.availability_zones:
            raise ValueError(
                f"GPU AZ {args.gpu_availability_zone} is not among the subnet AZs {args.availability_zones}"
            )
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        cluster_tag = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{args.cluster_name}-vpc"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": f"{args.cluster_name}-igw"}, opts=child
        )

        private_cidrs, public_cidrs = subnet_plan(args.vpc_cidr, args.availability_zones, args.private_subnet_prefix)

        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags={**tags, "Name": f"{args.cluster_name}-public"},
            opts=child,
        )

        public_subnets: list[aws.ec2.Subnet] = []
        nat_gateways: list[aws.ec2.NatGateway] = []
        for az, cidr in zip(args.availability_zones, public_cidrs, strict=True):
            subnet = aws.ec2.Subnet(
                f"{name}-public-{az}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=az,
                map_public_ip_on_launch=False,
                tags={**tags, **cluster_tag, "Name": f"{args.cluster_name}-public-{az}", "kubernetes.io/role/elb": "1"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{az}", subnet_id=subnet.id, route_table_id=public_rt.id, opts=child
            )
            public_subnets.append(subnet)
            if args.nat_per_az or not nat_gateways:
                eip = aws.ec2.Eip(
                    f"{name}-nat-{az}", domain="vpc", tags={**tags, "Name": f"{args.cluster_name}-nat-{az}"}, opts=child
                )
                nat_gateways.append(
                    aws.ec2.NatGateway(
                        f"{name}-nat-{az}",
                        allocation_id=eip.id,
                        subnet_id=subnet.id,
                        tags={**tags, "Name": f"{args.cluster_name}-nat-{az}"},
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
                    )
                )

        private_subnets: list[aws.ec2.Subnet] = []
        private_rts: list[aws.ec2.RouteTable] = []
        for i, (az, cidr) in enumerate(zip(args.availability_zones, private_cidrs, strict=True)):
            nat = nat_gateways[i] if args.nat_per_az else nat_gateways[0]
            subnet = aws.ec2.Subnet(
                f"{name}-private-{az}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=az,
                map_public_ip_on_launch=False,
                tags={
                    **tags,
                    **cluster_tag,
                    "Name": f"{args.cluster_name}-private-{az}",
                    "kubernetes.io/role/internal-elb": "1",
                    **({GPU_SUBNET_TAG: "true"} if az == args.gpu_availability_zone else {}),
                },
                opts=child,
            )
            rt = aws.ec2.RouteTable(
                f"{name}-private-{az}",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
                tags={**tags, "Name": f"{args.cluster_name}-private-{az}"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(f"{name}-private-{az}", subnet_id=subnet.id, route_table_id=rt.id, opts=child)
            private_subnets.append(subnet)
            private_rts.append(rt)

        # Training data mostly comes from S3: keep that traffic off the NAT gateways.
        aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[rt.id for rt in private_rts],
            tags={**tags, "Name": f"{args.cluster_name}-s3"},
            opts=child,
        )

        self.vpc_id = vpc.id
        self.vpc_cidr = args.vpc_cidr
        self.availability_zones = list(args.availability_zones)
        self.private_subnet_ids = [s.id for s in private_subnets]
        self.public_subnet_ids = [s.id for s in public_subnets]
        self.private_subnets_by_az = dict(zip(args.availability_zones, self.private_subnet_ids, strict=True))
        self.gpu_subnet_id = self.private_subnets_by_az[args.gpu_availability_zone]
        self.register_outputs(
            {
                "vpcId": self.vpc_id,
                "privateSubnetIds": self.private_subnet_ids,
                "publicSubnetIds": self.public_subnet_ids,
                "gpuSubnetId": self.gpu_subnet_id,
            }
        )
