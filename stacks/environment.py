"""The environment blueprint: wires the components into one environment from a validated
``StackConfig``, one short function per concern: here the network, the cluster and the node
groups, then the cluster services (``stacks/cluster_services.py``). The GPU AZ is chosen once
(``stacks/placement.py``) and flows to everything that must agree on it: the GPU subnet, every GPU
node group and its placement group, FSx and the jobs.
"""

from __future__ import annotations

from typing import Any

import pulumi

from components.cluster import Cluster, ClusterArgs
from components.network import Network, NetworkArgs
from components.node_group import NodeGroup, NodeGroupArgs
from facts import instance_types, versions
from facts.kube import (
    ACCELERATOR_LABEL,
    BURN_IN_TAINT,
    EFA_HUGEPAGES_2MI_PAGES,
    EFA_HUGEPAGES_NODE_MIB,
    EFA_RESOURCE,
    GPU_RESOURCE,
    HUGEPAGES_2MI_RESOURCE,
    SYSTEM_GROUP,
)
from stacks.addons import addon_configuration, addon_version
from stacks.cluster_services import autoscaled, build_services
from stacks.config import GpuNodeGroupConfig, StackConfig
from stacks.placement import Placement, PlacementError, resolve_placement

__all__ = ["build", "Placement", "PlacementError"]


def build(cfg: StackConfig, placement: Placement | None = None) -> dict[str, Any]:
    """Register the environment's resources; returns the stack outputs."""
    placement = placement or resolve_placement(cfg)
    gpu_az = placement.gpu_availability_zone
    tags = {"gputraining/project": cfg.project, "gputraining/stack": cfg.stack, **cfg.tags}

    network = _network(cfg, placement, tags)
    cluster = _cluster(cfg, network, tags)
    system = _node_group(
        SYSTEM_GROUP,
        cfg,
        cluster,
        network,
        tags,
        subnet_ids=network.private_subnet_ids,
        instance_type=cfg.system_node_group.instance_type,
        ami_type=versions.SYSTEM_AMI_TYPE,
        min_size=cfg.system_node_group.min_size,
        desired_size=cfg.system_node_group.desired_size,
        max_size=cfg.system_node_group.max_size,
        disk_size_gib=cfg.system_node_group.disk_size_gib,
    )
    cluster.add_coredns(after=[system])
    # A capacity-block group with no block yet (an offering to look at with preflight) is not built.
    gpu_groups = {
        g.name: _gpu_node_group(g, gpu_az, cfg, cluster, network, tags)
        for g in cfg.gpu_node_groups
        if not g.awaiting_capacity_block
    }
    if gpu_groups:
        agent = "eks-node-monitoring-agent"
        cluster.add_node_monitoring_agent(addon_version(cfg, agent), addon_configuration(cfg, agent), after=[system])

    services = build_services(
        cfg,
        gpu_az,
        network,
        cluster,
        system,
        tags,
        {n: ng.node_group_name for n, ng in gpu_groups.items()},
        {n: ng.node_group for n, ng in gpu_groups.items()},
    )

    return {
        **services,
        "clusterName": cfg.cluster_name,
        "kubeconfig": cluster.kubeconfig,
        "gpuAvailabilityZone": gpu_az,
        "availabilityZones": placement.availability_zones,
        "vpcId": network.vpc_id,
        "privateSubnetIds": network.private_subnet_ids,
        "publicSubnetIds": network.public_subnet_ids,
        "gpuSubnetId": network.gpu_subnet_id,
        "nodeGroupNames": {
            SYSTEM_GROUP: system.node_group_name,
            **{n: ng.node_group_name for n, ng in gpu_groups.items()},
        },
    }


# ---------------------------------------------------------------------------------------------
# Network, cluster, node groups
# ---------------------------------------------------------------------------------------------


def _network(cfg: StackConfig, placement: Placement, tags: dict[str, str]) -> Network:
    return Network(
        "network",
        NetworkArgs(
            cluster_name=cfg.cluster_name,
            region=cfg.region,
            vpc_cidr=cfg.network.vpc_cidr,
            availability_zones=placement.availability_zones,
            gpu_availability_zone=placement.gpu_availability_zone,
            private_subnet_prefix=cfg.network.private_subnet_prefix,
            nat_per_az=cfg.network.nat_gateways == "perAz",
            tags=tags,
        ),
    )


def _cluster(cfg: StackConfig, network: Network, tags: dict[str, str]) -> Cluster:
    k8s_version = cfg.cluster.kubernetes_version
    return Cluster(
        "cluster",
        ClusterArgs(
            cluster_name=cfg.cluster_name,
            kubernetes_version=k8s_version,
            vpc_id=network.vpc_id,
            private_subnet_ids=network.private_subnet_ids,
            public_subnet_ids=network.public_subnet_ids,
            endpoint_public_access=cfg.cluster.endpoint_public_access,
            endpoint_public_access_cidrs=cfg.cluster.endpoint_public_access_cidrs,
            endpoint_private_access=cfg.cluster.endpoint_private_access,
            admin_principals=cfg.cluster.admin_principals,
            vpc_cni_version=addon_version(cfg, "vpc-cni"),
            coredns_version=addon_version(cfg, "coredns"),
            kube_proxy_version=addon_version(cfg, "kube-proxy"),
            pod_identity_agent_version=addon_version(cfg, "eks-pod-identity-agent"),
            log_retention_days=cfg.cluster.log_retention_days,
            deletion_protection=cfg.cluster.deletion_protection,
            tags=tags,
        ),
    )


def _node_group(
    name: str, cfg: StackConfig, cluster: Cluster, network: Network, tags: dict[str, str], **args: Any
) -> NodeGroup:
    """A node group with what every group shares (cluster, role, VPC, version, tags)."""
    return NodeGroup(
        name,
        NodeGroupArgs(
            cluster=cluster.eks,
            cluster_name=cfg.cluster_name,
            cluster_security_group_id=cluster.cluster_security_group_id,
            node_role=cluster.node_role,
            vpc_id=network.vpc_id,
            kubernetes_version=cfg.cluster.kubernetes_version,
            ready=cluster.node_role_attachments,
            tags=tags,
            **args,
        ),
        opts=pulumi.ResourceOptions(depends_on=cluster.node_role_attachments),
    )


def node_resources(g: GpuNodeGroupConfig) -> dict[str, str]:
    """The extended resources one node of ``g`` offers (what its jobs request)."""
    return extended_resources(g.instance, g.efa_interfaces)


def extended_resources(instance: instance_types.InstanceType, efa_interfaces: int) -> dict[str, str]:
    """The extended resources a node of ``instance`` with ``efa_interfaces`` EFA interfaces offers:
    its GPUs, and on EFA the interfaces and the huge pages the node reserves at boot."""
    resources = {GPU_RESOURCE: str(instance.gpus)}
    if efa_interfaces:
        resources[EFA_RESOURCE] = str(efa_interfaces)
        resources[HUGEPAGES_2MI_RESOURCE] = f"{EFA_HUGEPAGES_NODE_MIB}Mi"
    return resources


def _gpu_node_group(
    g: GpuNodeGroupConfig, gpu_az: str, cfg: StackConfig, cluster: Cluster, network: Network, tags: dict[str, str]
) -> NodeGroup:
    placement = g.placement
    return _node_group(
        f"gpu-{g.name}",
        cfg,
        cluster,
        network,
        tags,
        subnet_ids=[network.gpu_subnet_id],
        availability_zone=gpu_az,
        instance_type=g.instance_type,
        ami_type=versions.GPU_AMI_TYPE,
        min_size=g.min_size,
        desired_size=g.desired_size,
        max_size=g.max_size,
        disk_size_gib=g.disk_size_gib,
        capacity_type=g.capacity_type,
        capacity_reservation_id=g.capacity_reservation_id,
        # Bought at `pulumi up` only with capacity.offering.purchase: true (irreversible).
        capacity_block_offering_id=g.capacity_block_purchase,
        capacity_block_window=g.capacity_block_window,
        # Every EFA interface of the type, card by card from each card's interface types.
        network_interfaces=instance_types.efa_layout(g.instance) if g.efa_interfaces else (),
        hugepages_2mi=EFA_HUGEPAGES_2MI_PAGES if g.efa_interfaces else 0,
        # Training code runs here: pods cannot reach IMDS (one hop). What needs instance metadata on GPU
        # nodes runs with host networking (VPC CNI, kube-proxy, the EFS CSI node plugin, the CloudWatch
        # agent and Fluent Bit of the observability add-on, the Pod Identity agent); the FSx CSI node plugin
        # reads the node from the Kubernetes API instead.
        imds_hop_limit=1,
        placement_group=placement.mode,
        placement_group_name=placement.name,
        gpu=True,
        group_name=g.name,
        # The autoscaler's GPU label: it waits for the device plugin on a new node instead of adding more.
        # The value is the catalog's (the name the autoscaler's AWS provider knows the GPU by).
        labels={**g.labels, **({ACCELERATOR_LABEL: g.instance.accelerator} if g.instance.accelerator else {})},
        autoscale_resources=node_resources(g) if autoscaled(cfg, g) else None,
        taints=[t.model_dump() for t in g.taints],
        # Burn-in: the node joins with the startup taint; the burn-in check takes it off (components/burn_in.py).
        startup_taints=[dict(BURN_IN_TAINT)] if cfg.burn_in_on(g) else [],
    )
