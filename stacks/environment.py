"""The environment blueprint: wires the components into one environment from a validated
``StackConfig``, one short function per concern. The GPU AZ is chosen once (``stacks/placement.py``)
and flows to everything that must agree on it: the GPU subnet, every GPU node group and its
placement group, FSx and the jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from components.charts import ChartFile
from components.cluster import Cluster, ClusterArgs
from components.device_plugins import DevicePlugins, DevicePluginsArgs
from components.etcd import Etcd, EtcdArgs
from components.jobs import TrainingJobs, TrainingJobsArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.network import Network, NetworkArgs
from components.node_group import NodeGroup, NodeGroupArgs
from components.operators import MpiOperator, MpiOperatorArgs, TrainingOperator, TrainingOperatorArgs
from components.queues import ClusterQueueArgs, FlavorArgs, LocalQueueArgs, ProvisioningArgs, Queues, QueuesArgs, ResourceQuota, TeamArgs
from components.sagemaker import SageMakerTrainingJobs, SageMakerTrainingJobsArgs, SharedFileSystem
from components.storage import EfsStore, EfsStoreArgs, FsxStore, FsxStoreArgs
from facts import catalog, versions
from facts.kube import ACCELERATOR_LABEL, EFA_HUGEPAGES_2MI_PAGES, EFA_PRESENT_LABEL, GPU_PRESENT_LABEL, NODE_GROUP_LABEL, PART_OF, SYSTEM_GROUP
from facts.paths import PROJECT_ROOT
from jobs.base import PRIORITIES, JobsContext
from stacks import queues
from stacks.addons import addon_configuration, addon_version
from stacks.config import GpuNodeGroupConfig, StackConfig
from stacks.config.jobs import job_targets, runtime_of, sagemaker_jobs
from stacks.placement import Placement, PlacementError, resolve_placement

__all__ = ["build", "Placement", "PlacementError"]


def build(cfg: StackConfig, placement: Optional[Placement] = None) -> dict[str, Any]:
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
    gpu_groups = {g.name: _gpu_node_group(g, gpu_az, cfg, cluster, network, tags) for g in cfg.gpu_node_groups if not g.awaiting_capacity_block}
    if gpu_groups:
        agent = "eks-node-monitoring-agent"
        cluster.add_node_monitoring_agent(addon_version(cfg, agent), addon_configuration(cfg, agent), after=[system])

    services = build_services(cfg, gpu_az, network, cluster, system, tags)

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
        "nodeGroupNames": {SYSTEM_GROUP: system.node_group_name, **{n: ng.node_group_name for n, ng in gpu_groups.items()}},
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


def _node_group(name: str, cfg: StackConfig, cluster: Cluster, network: Network, tags: dict[str, str], **args: Any) -> NodeGroup:
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


def autoscaled(cfg: StackConfig, g: GpuNodeGroupConfig) -> bool:
    """Whether the Cluster Autoscaler sizes group ``g``."""
    return cfg.autoscaling.enabled and g.autoscaled


def node_resources(g: GpuNodeGroupConfig) -> dict[str, str]:
    """The extended resources one node of ``g`` offers (what its jobs request)."""
    return extended_resources(g.instance, g.efa_interfaces)


def extended_resources(instance: catalog.InstanceType, efa_interfaces: int) -> dict[str, str]:
    """The extended resources a node of ``instance`` with ``efa_interfaces`` EFA interfaces offers:
    its GPUs, and on EFA the interfaces and the huge pages the node reserves at boot."""
    resources = {"nvidia.com/gpu": str(instance.gpus)}
    if efa_interfaces:
        resources["vpc.amazonaws.com/efa"] = str(efa_interfaces)
        resources["hugepages-2Mi"] = f"{EFA_HUGEPAGES_2MI_PAGES * 2}Mi"
    return resources


def _gpu_node_group(g: GpuNodeGroupConfig, gpu_az: str, cfg: StackConfig, cluster: Cluster, network: Network, tags: dict[str, str]) -> NodeGroup:
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
        network_interfaces=catalog.efa_layout(g.instance) if g.efa_interfaces else (),
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
    )


# ---------------------------------------------------------------------------------------------
# Cluster services
# ---------------------------------------------------------------------------------------------


@dataclass
class _Services:
    """What the services build on, and what the jobs will need from them."""

    cfg: StackConfig
    gpu_az: str
    network: Network
    cluster: Cluster
    tags: dict[str, str]
    namespace: k8s.core.v1.Namespace
    k8s_component: pulumi.ResourceOptions  # a component whose children go through the k8s provider
    cluster_ready: list[pulumi.Resource]  # what add-ons wait for
    outputs: dict[str, Any]
    job_prerequisites: list[pulumi.Resource] = field(default_factory=list)
    claims: dict[str, str] = field(default_factory=dict)
    file_systems: dict[str, SharedFileSystem] = field(default_factory=dict)  # what SageMaker jobs read
    etcd_endpoint: Optional[str] = None
    job_queues: dict[str, str] = field(default_factory=dict)  # team ("" = none) -> LocalQueue of its jobs; empty without queues


def build_services(cfg: StackConfig, gpu_az: str, network: Network, cluster: Cluster, system: NodeGroup, tags: dict[str, str]) -> dict[str, Any]:
    """Cluster services: device plugins, storage, operators, etcd, monitoring, jobs. Every
    Kubernetes object goes through one provider bound to the new cluster."""
    provider = k8s.Provider("k8s", kubeconfig=cluster.kubeconfig, opts=pulumi.ResourceOptions(depends_on=[cluster.eks]))
    assert cluster.coredns is not None, "build() adds CoreDNS before the services"
    # Pods of the services need a node to run on, and add-ons need the cluster.
    namespace = k8s.core.v1.Namespace(
        "training-namespace",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=cfg.services.training_namespace, labels={"app.kubernetes.io/part-of": PART_OF}),
        opts=pulumi.ResourceOptions(provider=provider, depends_on=[system]),
    )
    s = _Services(
        cfg=cfg,
        gpu_az=gpu_az,
        network=network,
        cluster=cluster,
        tags=tags,
        namespace=namespace,
        k8s_component=pulumi.ResourceOptions(providers=[provider], depends_on=[system]),
        cluster_ready=[cluster.eks, cluster.pod_identity_agent, system, cluster.coredns],
        outputs={"trainingNamespace": cfg.services.training_namespace},
        job_prerequisites=[cluster.pod_identity_agent],
    )
    for add in (_device_plugins, _efs, _fsx, _operators, _etcd, _monitoring, _autoscaler, _queues):
        add(s)
    _jobs(s, provider)
    _sagemaker_jobs(s)
    return s.outputs


def _device_plugins(s: _Services) -> None:
    sv = s.cfg.services
    if not (sv.nvidia_device_plugin or sv.efa_device_plugin):
        return
    DevicePlugins(
        "device-plugins",
        DevicePluginsArgs(
            nvidia_chart=ChartFile(versions.NVIDIA_DEVICE_PLUGIN_CHART_FILE, versions.NVIDIA_DEVICE_PLUGIN_CHART_SHA256, versions.NVIDIA_DEVICE_PLUGIN_CHART)
            if sv.nvidia_device_plugin
            else None,
            efa_chart=ChartFile(versions.EFA_DEVICE_PLUGIN_CHART_FILE, versions.EFA_DEVICE_PLUGIN_CHART_SHA256, versions.EFA_DEVICE_PLUGIN_CHART)
            if sv.efa_device_plugin
            else None,
            gpu_node_label=dict(GPU_PRESENT_LABEL),
            efa_node_label=dict(EFA_PRESENT_LABEL),
            efa_instance_types=sorted({g.instance_type for g in s.cfg.gpu_node_groups if g.efa_enabled}),
            project_root=PROJECT_ROOT,
        ),
        opts=s.k8s_component,
    )


def _efs(s: _Services) -> None:
    st = s.cfg.storage
    if not st.efs.enabled:
        return
    efs = EfsStore(
        "efs",
        EfsStoreArgs(
            cluster_name=s.cfg.cluster_name,
            vpc_id=s.network.vpc_id,
            subnet_ids=s.network.private_subnet_ids,
            node_security_group_id=s.cluster.cluster_security_group_id,
            namespace=s.namespace.metadata.name,
            addon_version=addon_version(s.cfg, "aws-efs-csi-driver"),
            throughput_mode=st.efs.throughput_mode,
            performance_mode=st.efs.performance_mode,
            protect=st.deletion_protection,
            cluster_ready=s.cluster_ready,
            tags=s.tags,
        ),
        opts=s.k8s_component,
    )
    s.outputs.update(efsFileSystemId=efs.file_system_id, efsClaim=EfsStore.CLAIM)
    s.claims["efs"] = EfsStore.CLAIM
    s.file_systems["efs"] = SharedFileSystem("EFS", efs.file_system_id, efs.security_group_id, ready=efs.mount_targets)
    s.job_prerequisites.append(efs)


def _fsx(s: _Services) -> None:
    st = s.cfg.storage
    f = st.fsx
    if not f.enabled:
        return
    fsx = FsxStore(
        "fsx",
        FsxStoreArgs(
            cluster_name=s.cfg.cluster_name,
            vpc_id=s.network.vpc_id,
            subnet_id=s.network.gpu_subnet_id,
            availability_zone=s.gpu_az,
            node_security_group_id=s.cluster.cluster_security_group_id,
            namespace=s.namespace.metadata.name,
            addon_version=addon_version(s.cfg, "aws-fsx-csi-driver"),
            deployment_type=f.deployment_type,
            lustre_version=versions.FSX_LUSTRE_VERSION,
            storage_capacity_gib=f.storage_capacity_gib,
            per_unit_storage_throughput=f.per_unit_storage_throughput,
            s3_bucket=f.s3.bucket if f.s3 else None,
            s3_prefix=f.s3.prefix if f.s3 else "",
            s3_file_system_path=f.s3.file_system_path if f.s3 else "/s3",
            s3_export=f.s3.export if f.s3 else False,
            protect=st.deletion_protection,
            backup_retention_days=f.backup_retention_days,
            backup_start_time=f.backup_start_time,
            final_backup=f.final_backup,
            cluster_ready=s.cluster_ready,
            tags=s.tags,
        ),
        opts=s.k8s_component,
    )
    s.outputs.update(fsxFileSystemId=fsx.file_system_id, fsxDnsName=fsx.dns_name, fsxClaim=FsxStore.CLAIM)
    if fsx.kms_key_retained:
        # The key `pulumi destroy` leaves behind for the final backup (README, "Teardown").
        s.outputs["fsxBackupKmsKeyArn"] = fsx.kms_key_arn
    s.claims["fsx"] = FsxStore.CLAIM
    s.file_systems["fsx"] = SharedFileSystem("FSxLustre", fsx.file_system_id, fsx.security_group_id, fsx.mount_name)
    s.job_prerequisites.append(fsx)


def _operators(s: _Services) -> None:
    sv = s.cfg.services
    if sv.mpi_operator:
        mpi = MpiOperator(
            "mpi-operator",
            MpiOperatorArgs(
                manifest=PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST,
                manifest_sha256=versions.MPI_OPERATOR_MANIFEST_SHA256,
                version=versions.MPI_OPERATOR_VERSION,
            ),
            opts=s.k8s_component,
        )
        s.job_prerequisites.append(mpi)
    if sv.training_operator:
        training = TrainingOperator(
            "training-operator",
            TrainingOperatorArgs(
                manifest=PROJECT_ROOT / versions.TRAINING_OPERATOR_MANIFEST,
                manifest_sha256=versions.TRAINING_OPERATOR_MANIFEST_SHA256,
                version=versions.TRAINING_OPERATOR_REF,
            ),
            opts=s.k8s_component,
        )
        s.job_prerequisites.append(training)


def _etcd(s: _Services) -> None:
    e = s.cfg.etcd
    if not e.enabled:
        return
    etcd = Etcd(
        "etcd",
        EtcdArgs(
            namespace=s.namespace.metadata.name,
            namespace_name=s.cfg.services.training_namespace,
            image=versions.ETCD_IMAGE,
            member_image=versions.ETCD_MEMBER_IMAGE,
            replicas=e.replicas,
            cpu=e.cpu,
            memory=e.memory,
            node_selector={NODE_GROUP_LABEL: SYSTEM_GROUP},
        ),
        opts=s.k8s_component,
    )
    s.outputs["etcdEndpoint"] = etcd.endpoint
    s.etcd_endpoint = etcd.endpoint
    s.job_prerequisites.append(etcd)


def _monitoring(s: _Services) -> None:
    m = s.cfg.monitoring
    if not m.enabled:
        return
    mon = Monitoring(
        "monitoring",
        MonitoringArgs(
            cluster_name=s.cfg.cluster_name,
            region=s.cfg.region,
            addon_version=addon_version(s.cfg, "amazon-cloudwatch-observability"),
            log_retention_days=m.log_retention_days,
            dashboard=m.dashboard,
            cluster_ready=s.cluster_ready,
            tags=s.tags,
        ),
    )
    if mon.dashboard_name:
        s.outputs["dashboardName"] = mon.dashboard_name


def _autoscaler(s: _Services) -> None:
    cfg = s.cfg
    if not any(autoscaled(cfg, g) for g in cfg.gpu_node_groups):
        return
    a = cfg.autoscaling
    ClusterAutoscaler(
        "cluster-autoscaler",
        ClusterAutoscalerArgs(
            chart=ChartFile(versions.CLUSTER_AUTOSCALER_CHART_FILE, versions.CLUSTER_AUTOSCALER_CHART_SHA256, versions.CLUSTER_AUTOSCALER_CHART),
            image_tag=versions.CLUSTER_AUTOSCALER_IMAGE_TAG[cfg.cluster.kubernetes_version],
            cluster_name=cfg.cluster_name,
            region=cfg.region,
            node_selector={NODE_GROUP_LABEL: SYSTEM_GROUP},
            scale_down_unneeded_time=a.scale_down_unneeded_time,
            scale_down_delay_after_add=a.scale_down_delay_after_add,
            expander=a.expander,
            # Served only for Kueue's ProvisioningRequest admission check (stacks/queues.py).
            provisioning_request_crd=ChartFile(versions.PROVISIONING_REQUEST_CRD, versions.PROVISIONING_REQUEST_CRD_SHA256, "cluster-autoscaler-1.36.1")
            if a.provisioning_requests and cfg.queues.enabled
            else None,
            project_root=PROJECT_ROOT,
            depends_on=[s.cluster.pod_identity_agent],
            tags=s.tags,
        ),
        opts=s.k8s_component,
    )


def _queues(s: _Services) -> None:
    """Kueue and the queues of the GPU jobs (``stacks/queues.py`` derives every quota)."""
    cfg = s.cfg
    plan = queues.plan_for(cfg)
    if plan is None:
        return
    covered = list(queues.RESOURCES)

    def amount(r: str, value: Optional[int]) -> Optional[str]:
        return None if value is None else queues.quantity(r, value)

    def quotas(cq: queues.ClusterQueue) -> dict[str, list[ResourceQuota]]:
        return {
            flavor: [ResourceQuota(r, queues.quantity(r, lim[r].nominal), amount(r, lim[r].borrowing), amount(r, lim[r].lending)) for r in covered]
            for flavor, lim in cq.limits.items()
        }

    scaled = [f.name for f in plan.flavors if f.autoscaled]
    component = Queues(
        "queues",
        QueuesArgs(
            chart=ChartFile(versions.KUEUE_CHART_FILE, versions.KUEUE_CHART_SHA256, versions.KUEUE_CHART),
            image_repository=versions.KUEUE_IMAGE_REPOSITORY,
            image_tag=versions.KUEUE_VERSION,
            node_selector={NODE_GROUP_LABEL: SYSTEM_GROUP},
            managed_namespaces=plan.managed_namespaces,
            integrations=plan.integrations,
            pods_ready_timeout=plan.pods_ready_timeout,
            requeue_limit=plan.requeue_limit,
            backoff_base_seconds=queues.REQUEUE_BACKOFF_BASE_SECONDS,
            backoff_max_seconds=queues.REQUEUE_BACKOFF_MAX_SECONDS,
            fair_sharing=plan.fair_sharing,
            cohort=queues.COHORT,
            covered_resources=covered,
            flavors=[FlavorArgs(f.name, f.node_labels, f.tolerations) for f in plan.flavors],
            cluster_queues=[
                ClusterQueueArgs(
                    cq.name,
                    cq.namespaces,
                    quotas(cq),
                    None if cq.fair_share_weight is None else f"{cq.fair_share_weight:g}",
                    scaled if plan.provisioning else (),
                )
                for cq in plan.cluster_queues
            ],
            local_queues=[LocalQueueArgs(q.namespace, q.name, q.cluster_queue) for q in plan.local_queues],
            priorities=dict(PRIORITIES),
            cluster_name=cfg.cluster_name,
            namespace=queues.KUEUE_NAMESPACE,
            teams=[TeamArgs(t.name, t.namespace, t.role_arn, t.kubernetes_group) for t in plan.teams],
            provisioning=ProvisioningArgs(queues.PROVISIONING_CHECK, queues.PROVISIONING_CLASS, [queues.GPU]) if plan.provisioning else None,
            project_root=PROJECT_ROOT,
            depends_on=[s.cluster.eks, s.namespace],
            tags=s.tags,
        ),
        opts=s.k8s_component,
    )
    s.job_queues = queues.job_queues(cfg.queues.teams)
    s.outputs["clusterQueues"] = [cq.name for cq in plan.cluster_queues]
    # The jobs' LocalQueues and Kueue's job webhooks must be there before a job is created.
    s.job_prerequisites.append(component)


def _jobs(s: _Services, provider: k8s.Provider) -> None:
    cfg = s.cfg
    on_eks = [j for j in cfg.jobs if runtime_of(j) == "eks"]
    if not on_eks:
        return
    jobs = TrainingJobs(
        "jobs",
        TrainingJobsArgs(
            jobs=on_eks,
            context=JobsContext(
                namespace=cfg.services.training_namespace,
                targets=job_targets(cfg.gpu_node_groups, s.gpu_az),
                claims=s.claims,
                etcd_endpoint=s.etcd_endpoint,
                system_node_selector={NODE_GROUP_LABEL: SYSTEM_GROUP},
                cluster_name=cfg.cluster_name,
                region=cfg.region,
                queues=s.job_queues,
            ),
            tags=s.tags,
            depends_on=[s.namespace, *s.job_prerequisites],
        ),
        opts=pulumi.ResourceOptions(providers=[provider]),
    )
    s.outputs["jobs"] = jobs.job_names


def _sagemaker_jobs(s: _Services) -> None:
    """The jobs with ``runtime: sagemaker``: SageMaker training jobs in the stack's VPC, reading its
    FSx and EFS (they need nothing of the cluster)."""
    cfg = s.cfg
    described = sagemaker_jobs(cfg.jobs, cfg.gpu_node_groups, cfg.region, cfg.cluster_name, s.tags)
    if not described:
        return
    jobs = SageMakerTrainingJobs(
        "sagemaker-jobs",
        SageMakerTrainingJobsArgs(
            jobs=described,
            region=cfg.region,
            vpc_id=s.network.vpc_id,
            private_subnet_ids=s.network.private_subnet_ids,
            gpu_subnet_id=s.network.gpu_subnet_id,
            file_systems=s.file_systems,
            tags=s.tags,
        ),
    )
    s.outputs["sagemakerJobs"] = jobs.training_job_names
