"""Cluster: the EKS control plane through pulumi-eks, with its KMS key, node IAM role, access
entries, OIDC provider, control-plane logs and the managed core add-ons (VPC CNI, CoreDNS,
kube-proxy, Pod Identity agent) at pinned versions.

No default node group: node groups are components of their own (``NodeGroup``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

CLUSTER_LOG_TYPES = ["api", "audit", "authenticator", "controllerManager", "scheduler"]
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
# What nodes need and no more; drivers and agents get roles of their own through Pod Identity.
NODE_MANAGED_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEC2ContainerRegistryReadOnly",
    # The VPC CNI (aws-node) runs with host networking before any pod identity can be served,
    # so it keeps the node role's CNI permissions, as in EKS's own managed node groups.
    "AmazonEKS_CNI_Policy",
)


@dataclass
class ClusterArgs:
    cluster_name: str  # EKS cluster name; also names the KMS alias and the control-plane log group
    kubernetes_version: str  # EKS control-plane Kubernetes version, e.g. "1.36"
    vpc_id: pulumi.Input[str]  # the VPC the cluster runs in
    private_subnet_ids: Sequence[
        pulumi.Input[str]
    ]  # private subnets of the control plane's network interfaces (the node subnets)
    public_subnet_ids: Sequence[
        pulumi.Input[str]
    ]  # public subnets, handed to EKS too (internet-facing load balancers); nodes never get public IPs
    endpoint_public_access: bool  # serve the Kubernetes API on a public endpoint
    endpoint_public_access_cidrs: list[str]  # CIDRs that may reach the public endpoint (ignored when it is off)
    endpoint_private_access: bool  # serve the Kubernetes API on a private endpoint inside the VPC
    admin_principals: list[str]  # IAM role/user ARNs given cluster-admin through access entries
    vpc_cni_version: str  # version of the VPC CNI managed add-on
    coredns_version: str  # version of the CoreDNS managed add-on, created later by add_coredns (after the system nodes)
    kube_proxy_version: str  # version of the kube-proxy managed add-on
    pod_identity_agent_version: str  # version of the EKS Pod Identity agent managed add-on
    log_retention_days: int = 30  # retention of the control-plane log group /aws/eks/<cluster_name>/cluster, in days
    deletion_protection: bool = False  # EKS deletion protection on the cluster
    upgrade_support_type: str = (
        "STANDARD"  # EKS upgrade policy: STANDARD (upgraded at end of standard support) or EXTENDED (paid)
    )
    tags: dict[str, str] = field(default_factory=dict)  # tags on every AWS resource of the component


def assume_role_policy(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )


class Cluster(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        partition = aws.get_partition_output(opts=pulumi.InvokeOutputOptions(parent=self)).partition

        # Secrets are envelope-encrypted with a customer managed key.
        key = aws.kms.Key(
            f"{name}-secrets",
            description=f"EKS secrets envelope encryption for {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=tags,
            opts=child,
        )
        aws.kms.Alias(
            f"{name}-secrets", name=f"alias/{args.cluster_name}-eks-secrets", target_key_id=key.key_id, opts=child
        )

        # EKS creates /aws/eks/<name>/cluster on its own with no retention; owning it here sets the
        # retention and lets `pulumi destroy` remove it.
        log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane",
            name=f"/aws/eks/{args.cluster_name}/cluster",
            retention_in_days=args.log_retention_days,
            tags=tags,
            opts=child,
        )

        node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=assume_role_policy("ec2.amazonaws.com"),
            description=f"EKS worker nodes of {args.cluster_name}",
            tags=tags,
            opts=child,
        )
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=node_role.name,
                policy_arn=pulumi.Output.format("arn:{0}:iam::aws:policy/{1}", partition, policy),
                opts=child,
            )
            for policy in NODE_MANAGED_POLICIES
        ]

        access_entries = {
            f"admin-{i}": eks.AccessEntryArgs(
                principal_arn=arn,
                access_policies={
                    "cluster-admin": eks.AccessPolicyAssociationArgs(
                        policy_arn=CLUSTER_ADMIN_POLICY,
                        access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                    )
                },
            )
            for i, arn in enumerate(args.admin_principals)
        }

        self.cluster_name = args.cluster_name
        self.eks = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=args.kubernetes_version,
            vpc_id=args.vpc_id,
            private_subnet_ids=args.private_subnet_ids,
            public_subnet_ids=args.public_subnet_ids,
            node_associate_public_ip_address=False,
            skip_default_node_group=True,
            # Use the security group EKS creates for the cluster (all traffic among its members, and
            # the control plane) for nodes, EFA interfaces and the FSx/EFS rules. Without this,
            # pulumi-eks adds groups of its own and cluster_security_group_id names one of those.
            skip_default_security_groups=True,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries=access_entries,
            create_oidc_provider=True,
            encryption_config_key_arn=key.arn,
            enabled_cluster_log_types=CLUSTER_LOG_TYPES,
            endpoint_public_access=args.endpoint_public_access,
            public_access_cidrs=args.endpoint_public_access_cidrs if args.endpoint_public_access else None,
            endpoint_private_access=args.endpoint_private_access,
            deletion_protection=args.deletion_protection,
            # STANDARD: when the version leaves standard support EKS upgrades the cluster instead of
            # moving it to paid extended support (EKS's default is EXTENDED).
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type=args.upgrade_support_type),
            vpc_cni_options=eks.VpcCniOptionsArgs(addon_version=args.vpc_cni_version),
            # CoreDNS is a Deployment: created here, before any node exists, the add-on stays
            # DEGRADED until the provider times out. It is created after the system nodes instead
            # (``coredns_addon`` below, called by the blueprint).
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(version=args.kube_proxy_version),
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[log_group]),
        )

        after_cluster = pulumi.ResourceOptions(parent=self, depends_on=[self.eks])
        self.pod_identity_agent = aws.eks.Addon(
            f"{name}-pod-identity-agent",
            cluster_name=args.cluster_name,
            addon_name="eks-pod-identity-agent",
            addon_version=args.pod_identity_agent_version,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=tags,
            opts=after_cluster,
        )

        self.coredns_version = args.coredns_version
        self._tags = tags
        self.node_role = node_role
        self.node_role_attachments = attachments
        self.kms_key_arn = key.arn
        self.cluster_security_group_id = self.eks.cluster_security_group_id
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(self.eks.kubeconfig_json)
        self.oidc_provider_arn = self.eks.oidc_provider_arn
        self.coredns: aws.eks.Addon | None = None
        self.register_outputs(
            {
                "clusterName": args.cluster_name,
                "kubeconfig": self.kubeconfig,
                "clusterSecurityGroupId": self.cluster_security_group_id,
                "nodeRoleArn": node_role.arn,
            }
        )

    def add_coredns(self, after: list[pulumi.Resource]) -> aws.eks.Addon:
        """The CoreDNS managed add-on, created once ``after`` (the system node group) exists."""
        self.coredns = aws.eks.Addon(
            "cluster-coredns",
            cluster_name=self.cluster_name,
            addon_name="coredns",
            addon_version=self.coredns_version,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=self._tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks, *after]),
        )
        return self.coredns

    def add_node_monitoring_agent(
        self, version: str, configuration_values: str | None, after: list[pulumi.Resource]
    ) -> aws.eks.Addon:
        """The EKS node monitoring agent add-on: it reports GPU (XID, NVLink, ...), kernel,
        network and storage faults as node conditions, which node auto repair acts on.

        ``configuration_values`` is the JSON text of the add-on's chart values (None: none sent);
        EKS validates it against DescribeAddonConfiguration. Its ``dcgm-server``
        DaemonSet tolerates only ``dcgmAgent.tolerations``: they must cover the GPU nodes' taints.
        A change is an in-place UpdateAddon, never a replacement."""
        return aws.eks.Addon(
            "cluster-node-monitoring-agent",
            cluster_name=self.cluster_name,
            addon_name="eks-node-monitoring-agent",
            addon_version=version,
            configuration_values=configuration_values,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=self._tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks, *after]),
        )
