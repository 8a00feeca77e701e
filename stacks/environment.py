"""The environment blueprint: wires the components into one environment from a validated
``StackConfig``. The GPU AZ is chosen here once and flows to everything that must agree on it
(the GPU subnet, every GPU node group and its placement group; later FSx and the jobs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.cluster import Cluster, ClusterArgs
from components.device_plugins import DevicePlugins, DevicePluginsArgs
from components.etcd import Etcd, EtcdArgs
from components.jobs import JobsContext, TrainingJobs, TrainingJobsArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.network import Network, NetworkArgs
from components.node_group import EFA_PRESENT_LABEL, GPU_PRESENT_LABEL, GPU_TAINT, NODE_GROUP_LABEL, NodeGroup, NodeGroupArgs
from components.operators import MpiOperator, MpiOperatorArgs, TrainingOperator, TrainingOperatorArgs
from components.storage import EfsStore, EfsStoreArgs, FsxStore, FsxStoreArgs
from infra import versions
from infra.offline import PROJECT_ROOT
from stacks.config import NAMESPACE, StackConfig
from stacks.jobs_config import job_targets


class PlacementError(Exception):
    """The configured instance types cannot be placed in the requested AZ(s)."""


@dataclass(frozen=True)
class Placement:
    gpu_availability_zone: str
    availability_zones: list[str]  # the private-subnet AZs, sorted; the GPU AZ is one of them


def choose_gpu_az(requested: str, region_azs: list[str], offered: dict[str, set[str]], gpu_types: list[str]) -> str:
    """Pick the GPU AZ: the requested one after checking it offers every GPU type, or with
    ``auto`` the first AZ (by name) that offers all of them. ``offered`` maps type -> AZs."""
    key = f"{NAMESPACE}:gpuAvailabilityZone"
    if requested != "auto":
        if requested not in region_azs:
            raise PlacementError(f"{key}: {requested!r} is not an available AZ of the region; available: {', '.join(region_azs)}")
        missing = [t for t in gpu_types if requested not in offered.get(t, set())]
        if missing:
            where = "; ".join(f"{t} is offered in {', '.join(sorted(offered.get(t, ()))) or 'no AZ of the region'}" for t in missing)
            raise PlacementError(f"{key}: {requested!r} does not offer {', '.join(missing)} ({where})")
        return requested
    candidates = [az for az in sorted(region_azs) if all(az in offered.get(t, set()) for t in gpu_types)]
    if not candidates:
        where = "; ".join(f"{t}: {', '.join(sorted(offered.get(t, ()))) or 'none'}" for t in gpu_types)
        raise PlacementError(
            f"{key}: 'auto' found no single AZ that offers every GPU type ({where}); "
            "split the node groups across stacks or choose types offered together"
        )
    return candidates[0]


def choose_subnet_azs(gpu_az: str, region_azs: list[str], count: int) -> list[str]:
    """The GPU AZ plus the next AZs by name, ``count`` in all, sorted."""
    others = [az for az in sorted(region_azs) if az != gpu_az]
    if len(others) < count - 1:
        raise PlacementError(
            f"{NAMESPACE}:network.availabilityZoneCount: {count} AZs asked for but the region has {len(others) + 1}"
        )
    return sorted([gpu_az] + others[: count - 1])


def resolve_placement(cfg: StackConfig) -> Placement:
    """Ask AWS (through the provider's invokes, so credentials and region come from the stack)
    which AZs exist and which offer the GPU types, then choose."""
    zones = aws.get_availability_zones(state="available", filters=[{"name": "opt-in-status", "values": ["opt-in-not-required"]}])
    region_azs = sorted(zones.names)
    gpu_types = cfg.gpu_instance_types
    offered: dict[str, set[str]] = {t: set() for t in gpu_types}
    if gpu_types:
        result = aws.ec2.get_instance_type_offerings(
            location_type="availability-zone",
            filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=gpu_types)],
        )
        for t, loc in zip(result.instance_types, result.locations):
            offered.setdefault(t, set()).add(loc)
    if gpu_types:
        gpu_az = choose_gpu_az(cfg.gpu_availability_zone, region_azs, offered, gpu_types)
    elif cfg.gpu_availability_zone != "auto":
        gpu_az = choose_gpu_az(cfg.gpu_availability_zone, region_azs, offered, [])
    else:
        gpu_az = region_azs[0]
    return Placement(gpu_az, choose_subnet_azs(gpu_az, region_azs, cfg.network.availability_zone_count))


def build(cfg: StackConfig, placement: Placement | None = None) -> dict[str, Any]:
    """Register the environment's resources; returns the stack outputs."""
    placement = placement or resolve_placement(cfg)
    gpu_az = placement.gpu_availability_zone
    tags = {"gputraining/project": cfg.project, "gputraining/stack": cfg.stack, **cfg.tags}
    k8s_version = cfg.cluster.kubernetes_version

    network = Network(
        "network",
        NetworkArgs(
            cluster_name=cfg.cluster_name,
            region=cfg.region,
            vpc_cidr=cfg.network.vpc_cidr,
            availability_zones=placement.availability_zones,
            gpu_availability_zone=gpu_az,
            private_subnet_prefix=cfg.network.private_subnet_prefix,
            nat_per_az=cfg.network.nat_gateways == "perAz",
            tags=tags,
        ),
    )

    cluster = Cluster(
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
            vpc_cni_version=versions.VPC_CNI_ADDON,
            coredns_version=versions.COREDNS_ADDON[k8s_version],
            kube_proxy_version=versions.KUBE_PROXY_ADDON[k8s_version],
            pod_identity_agent_version=versions.POD_IDENTITY_AGENT_ADDON,
            log_retention_days=cfg.cluster.log_retention_days,
            deletion_protection=cfg.cluster.deletion_protection,
            tags=tags,
        ),
    )

    common = dict(
        cluster=cluster.eks,
        cluster_name=cfg.cluster_name,
        cluster_security_group_id=cluster.cluster_security_group_id,
        node_role=cluster.node_role,
        vpc_id=network.vpc_id,
        kubernetes_version=k8s_version,
        tags=tags,
    )
    s = cfg.system_node_group
    system = NodeGroup(
        "system",
        NodeGroupArgs(
            **common,
            subnet_ids=network.private_subnet_ids,
            instance_type=s.instance_type,
            ami_type=versions.SYSTEM_AMI_TYPE,
            min_size=s.min_size,
            desired_size=s.desired_size,
            max_size=s.max_size,
            disk_size_gib=s.disk_size_gib,
        ),
        opts=pulumi.ResourceOptions(depends_on=cluster.node_role_attachments),
    )

    cluster.add_coredns(after=[system])

    gpu_groups: dict[str, NodeGroup] = {}
    for g in cfg.gpu_node_groups:
        placement_cfg = g.placement
        gpu_groups[g.name] = NodeGroup(
            f"gpu-{g.name}",
            NodeGroupArgs(
                **common,
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
                efa_interfaces=g.efa_interfaces,
                placement_group=placement_cfg.mode,
                placement_group_name=placement_cfg.name,
                gpu=True,
                group_name=g.name,
                labels=dict(g.labels),
                taints=[t.model_dump() for t in g.taints],
            ),
            opts=pulumi.ResourceOptions(depends_on=cluster.node_role_attachments),
        )

    services = build_services(cfg, gpu_az, network, cluster, system, gpu_groups, tags)

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
        "nodeGroupNames": {"system": system.node_group_name, **{n: ng.node_group_name for n, ng in gpu_groups.items()}},
    }


def build_services(
    cfg: StackConfig,
    gpu_az: str,
    network: Network,
    cluster: Cluster,
    system: NodeGroup,
    gpu_groups: dict[str, NodeGroup],
    tags: dict[str, str],
) -> dict[str, Any]:
    """Cluster services: device plugins, storage, operators, etcd, monitoring. Every Kubernetes
    object goes through one provider bound to the new cluster."""
    sv = cfg.services
    provider = k8s.Provider("k8s", kubeconfig=cluster.kubeconfig, opts=pulumi.ResourceOptions(depends_on=[cluster.eks]))
    # Pods of the services need a node to run on, and add-ons need the cluster.
    on_cluster = pulumi.ResourceOptions(provider=provider, depends_on=[system])
    k8s_component = pulumi.ResourceOptions(providers=[provider], depends_on=[system])
    cluster_ready: list[pulumi.Resource] = [cluster.eks, cluster.pod_identity_agent, system, cluster.coredns]
    outputs: dict[str, Any] = {"trainingNamespace": sv.training_namespace}
    # What the jobs need in place first, and the claims of the stores that exist.
    job_prerequisites: list[pulumi.Resource] = [cluster.pod_identity_agent]
    claims: dict[str, str] = {}
    etcd_endpoint = None

    namespace = k8s.core.v1.Namespace(
        "training-namespace",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=sv.training_namespace, labels={"app.kubernetes.io/part-of": "gpu-training"}),
        opts=on_cluster,
    )

    efa_types = sorted({g.instance_type for g in cfg.gpu_node_groups if g.efa_enabled})
    if sv.nvidia_device_plugin or sv.efa_device_plugin:
        DevicePlugins(
            "device-plugins",
            DevicePluginsArgs(
                nvidia_chart_version=versions.NVIDIA_DEVICE_PLUGIN_CHART if sv.nvidia_device_plugin else None,
                nvidia_repo=versions.NVIDIA_DEVICE_PLUGIN_REPO,
                efa_chart_version=versions.EFA_DEVICE_PLUGIN_CHART if sv.efa_device_plugin else None,
                efa_repo=versions.EFA_DEVICE_PLUGIN_REPO,
                gpu_taint=dict(GPU_TAINT),
                gpu_node_label=dict(GPU_PRESENT_LABEL),
                efa_node_label=dict(EFA_PRESENT_LABEL),
                efa_instance_types=efa_types,
            ),
            opts=k8s_component,
        )

    st = cfg.storage
    if st.efs.enabled:
        efs = EfsStore(
            "efs",
            EfsStoreArgs(
                cluster_name=cfg.cluster_name,
                vpc_id=network.vpc_id,
                subnet_ids=network.private_subnet_ids,
                node_security_group_id=cluster.cluster_security_group_id,
                namespace=namespace.metadata.name,
                addon_version=versions.EFS_CSI_ADDON,
                throughput_mode=st.efs.throughput_mode,
                performance_mode=st.efs.performance_mode,
                protect=st.deletion_protection,
                cluster_ready=cluster_ready,
                tags=tags,
            ),
            opts=k8s_component,
        )
        outputs.update(efsFileSystemId=efs.file_system_id, efsClaim=EfsStore.CLAIM)
        claims["efs"] = EfsStore.CLAIM
        job_prerequisites.append(efs)
    if st.fsx.enabled:
        f = st.fsx
        fsx = FsxStore(
            "fsx",
            FsxStoreArgs(
                cluster_name=cfg.cluster_name,
                vpc_id=network.vpc_id,
                subnet_id=network.gpu_subnet_id,
                availability_zone=gpu_az,
                node_security_group_id=cluster.cluster_security_group_id,
                namespace=namespace.metadata.name,
                addon_version=versions.FSX_CSI_ADDON,
                deployment_type=f.deployment_type,
                lustre_version=versions.FSX_LUSTRE_VERSION,
                storage_capacity_gib=f.storage_capacity_gib,
                per_unit_storage_throughput=f.per_unit_storage_throughput,
                s3_bucket=f.s3.bucket if f.s3 else None,
                s3_prefix=f.s3.prefix if f.s3 else "",
                s3_file_system_path=f.s3.file_system_path if f.s3 else "/s3",
                s3_export=f.s3.export if f.s3 else False,
                protect=st.deletion_protection,
                cluster_ready=cluster_ready,
                tags=tags,
            ),
            opts=k8s_component,
        )
        outputs.update(fsxFileSystemId=fsx.file_system_id, fsxDnsName=fsx.dns_name, fsxClaim=FsxStore.CLAIM)
        claims["fsx"] = FsxStore.CLAIM
        job_prerequisites.append(fsx)

    if sv.mpi_operator:
        mpi = MpiOperator(
            "mpi-operator",
            MpiOperatorArgs(
                manifest=PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST,
                manifest_sha256=versions.MPI_OPERATOR_MANIFEST_SHA256,
                version=versions.MPI_OPERATOR_VERSION,
            ),
            opts=k8s_component,
        )
        job_prerequisites.append(mpi)
    if sv.training_operator:
        training = TrainingOperator(
            "training-operator",
            # Relative to the project folder, where Pulumi runs the program: an absolute path would
            # make every checkout's state differ.
            TrainingOperatorArgs(kustomization_dir=versions.TRAINING_OPERATOR_KUSTOMIZATION),
            opts=k8s_component,
        )
        job_prerequisites.append(training)

    if cfg.etcd.enabled:
        etcd = Etcd(
            "etcd",
            EtcdArgs(
                namespace=namespace.metadata.name,
                namespace_name=sv.training_namespace,
                image=versions.ETCD_IMAGE,
                replicas=cfg.etcd.replicas,
                cpu=cfg.etcd.cpu,
                memory=cfg.etcd.memory,
                node_selector={NODE_GROUP_LABEL: "system"},
            ),
            opts=k8s_component,
        )
        outputs["etcdEndpoint"] = etcd.endpoint
        etcd_endpoint = etcd.endpoint
        job_prerequisites.append(etcd)

    if cfg.monitoring.enabled:
        mon = Monitoring(
            "monitoring",
            MonitoringArgs(
                cluster_name=cfg.cluster_name,
                region=cfg.region,
                addon_version=versions.CLOUDWATCH_OBSERVABILITY_ADDON,
                log_retention_days=cfg.monitoring.log_retention_days,
                dashboard=cfg.monitoring.dashboard,
                cluster_ready=cluster_ready,
                tags=tags,
            ),
        )
        if mon.dashboard_name:
            outputs["dashboardName"] = mon.dashboard_name

    if cfg.jobs:
        jobs = TrainingJobs(
            "jobs",
            TrainingJobsArgs(
                jobs=cfg.jobs,
                context=JobsContext(
                    namespace=sv.training_namespace,
                    targets=job_targets(cfg.gpu_node_groups, gpu_az),
                    claims=claims,
                    etcd_endpoint=etcd_endpoint,
                    system_node_selector={NODE_GROUP_LABEL: "system"},
                    cluster_name=cfg.cluster_name,
                    region=cfg.region,
                ),
                tags=tags,
                depends_on=[namespace, *job_prerequisites],
            ),
            opts=pulumi.ResourceOptions(providers=[provider]),
        )
        outputs["jobs"] = jobs.job_names
    return outputs
