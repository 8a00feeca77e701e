"""The cluster services of one environment, one short function each (device plugins, EFS and FSx,
operators, etcd, monitoring, autoscaler, Kueue and queues, jobs on EKS and SageMaker), registered in
that order by ``build_services`` through one provider bound to the cluster (stacks/environment.py).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import operators
from components.autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs
from components.burn_in import BurnIn, BurnInArgs
from components.burn_in import GroupExpectation as BurnInGroup
from components.cluster import Cluster
from components.device_plugins import DevicePlugins, DevicePluginsArgs
from components.etcd import Etcd, EtcdArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.network import Network
from components.node_group import NodeGroup
from components.sagemaker import SageMakerTrainingJobs, SageMakerTrainingJobsArgs, SharedFileSystem
from components.storage import EfsStore, EfsStoreArgs, FsxStore, FsxStoreArgs
from components.training_jobs import JobNeeds, TrainingJobs, TrainingJobsArgs
from facts import versions
from facts.kube import EFA_PRESENT_LABEL, GPU_PRESENT_LABEL, NODE_GROUP_LABEL, PART_OF, SYSTEM_GROUP
from facts.operators import installed as installed_operators
from facts.paths import PROJECT_ROOT
from jobs.nccl_test import NCCL_TESTS_IMAGE_GPU_MODELS
from jobs.targets import JobsContext, job_targets
from stacks import queues
from stacks.addons import addon_version
from stacks.alerts import build_alerts
from stacks.config import GpuNodeGroupConfig, StackConfig, fleet_job_queues, fleet_job_targets
from stacks.config.job_entries import runtime_of, sagemaker_jobs
from stacks.kueue_services import add_fleet, add_queues
from stacks.services import Services as _Services


def build_services(
    cfg: StackConfig,
    gpu_az: str,
    network: Network,
    cluster: Cluster,
    system: NodeGroup,
    tags: dict[str, str],
    gpu_node_group_names: dict[str, str] | None = None,
    gpu_node_groups: dict[str, pulumi.Resource] | None = None,
) -> dict[str, Any]:
    """Cluster services: device plugins, storage, operators, etcd, monitoring, jobs. Every
    Kubernetes object goes through one provider bound to the new cluster."""
    provider = k8s.Provider("k8s", kubeconfig=cluster.kubeconfig, opts=pulumi.ResourceOptions(depends_on=[cluster.eks]))
    assert cluster.coredns is not None, "build() adds CoreDNS before the services"
    # Pods of the services need a node to run on, and add-ons need the cluster.
    namespace = k8s.core.v1.Namespace(
        "training-namespace",
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=cfg.services.training_namespace, labels={"app.kubernetes.io/part-of": PART_OF}
        ),
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
        job_needs=JobNeeds(
            namespaces={cfg.services.training_namespace: namespace}, pod_identity=[cluster.pod_identity_agent]
        ),
        gpu_node_group_names=dict(gpu_node_group_names or {}),
        gpu_node_groups=dict(gpu_node_groups or {}),
    )
    for add in (
        _device_plugins,
        _burn_in,
        _efs,
        _fsx,
        _operators,
        _etcd,
        _monitoring,
        _autoscaler,
        add_queues,
        add_fleet,
    ):
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
            nvidia_chart=versions.NVIDIA_DEVICE_PLUGIN_CHART if sv.nvidia_device_plugin else None,
            efa_chart=versions.EFA_DEVICE_PLUGIN_CHART if sv.efa_device_plugin else None,
            gpu_node_label=dict(GPU_PRESENT_LABEL),
            efa_node_label=dict(EFA_PRESENT_LABEL),
            efa_instance_types=sorted({g.instance_type for g in s.cfg.gpu_node_groups if g.efa_enabled}),
            project_root=PROJECT_ROOT,
        ),
        opts=s.k8s_component,
    )


def _burn_in(s: _Services) -> None:
    cfg = s.cfg
    groups = [
        BurnInGroup(
            group=g.name,
            node_group_name=s.gpu_node_group_names[g.name],
            instance_type=g.instance_type,
            gpus=g.instance.gpus,
            gpu_model=g.instance.gpu_model or "",
            efa=g.efa_interfaces,
            # The nccl-tests image runs on sm_80 and newer: V100 groups skip the loopback test.
            loopback=cfg.burn_in.loopback_test and g.instance.gpu_model in NCCL_TESTS_IMAGE_GPU_MODELS,
        )
        for g in cfg.gpu_node_groups
        if cfg.burn_in_on(g) and g.name in s.gpu_node_group_names
    ]
    if not groups:
        return
    BurnIn(
        "burn-in",
        BurnInArgs(
            cluster_name=cfg.cluster_name,
            region=cfg.region,
            groups=groups,
            image=versions.BURN_IN_IMAGE,
            replace_image=versions.BURN_IN_REPLACE_IMAGE,
            loopback_image=versions.BURN_IN_LOOPBACK_IMAGE if any(g.loopback for g in groups) else None,
            depends_on=[s.cluster.pod_identity_agent],
            node_groups=[s.gpu_node_groups[g.group] for g in groups if g.group in s.gpu_node_groups],
            tags=s.tags,
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
    s.job_needs.claims[EfsStore.CLAIM] = efs.claim


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
        # The key `pulumi destroy` leaves behind for the final backup (docs/day-two.md, "Teardown").
        s.outputs["fsxBackupKmsKeyArn"] = fsx.kms_key_arn
    s.claims["fsx"] = FsxStore.CLAIM
    s.file_systems["fsx"] = SharedFileSystem("FSxLustre", fsx.file_system_id, fsx.security_group_id, fsx.mount_name)
    s.job_needs.claims[FsxStore.CLAIM] = fsx.claim


def _operators(s: _Services) -> None:
    """Every operator (facts/operators.py) whose switch is on, from its vendored manifest."""
    for op in installed_operators(s.cfg.services):
        component = operators.install(op, PROJECT_ROOT, s.k8s_component, job_targets(s.cfg.gpu_node_groups, s.gpu_az))
        for kind in op.kinds:  # a job of the kind waits for the operator to serve it
            s.job_needs.operators[(kind.api_version, kind.kind)] = component.ready


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
    s.job_needs.etcd_host, s.job_needs.etcd = etcd.host, [etcd.stateful_set, etcd.client_service]


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
    s.outputs.update(build_alerts(s.cfg, mon, s.tags, s.k8s_component))


def autoscaled(cfg: StackConfig, g: GpuNodeGroupConfig) -> bool:
    """Whether the Cluster Autoscaler sizes group ``g``."""
    return cfg.autoscaling.enabled and g.autoscaled


def _autoscaler(s: _Services) -> None:
    cfg = s.cfg
    if not any(autoscaled(cfg, g) for g in cfg.gpu_node_groups):
        return
    a = cfg.autoscaling
    plan = queues.plan_for(cfg)
    autoscaler = ClusterAutoscaler(
        "cluster-autoscaler",
        ClusterAutoscalerArgs(
            chart=versions.CLUSTER_AUTOSCALER_CHART,
            image_tag=versions.CLUSTER_AUTOSCALER_IMAGE_TAG[cfg.cluster.kubernetes_version],
            cluster_name=cfg.cluster_name,
            region=cfg.region,
            node_selector={NODE_GROUP_LABEL: SYSTEM_GROUP},
            scale_down_unneeded_time=a.scale_down_unneeded_time,
            scale_down_delay_after_add=a.scale_down_delay_after_add,
            expander=a.expander,
            # The API of Kueue's ProvisioningRequest admission check, installed whenever Kueue runs next
            # to the autoscaler, so that Kueue (which looks for it once, at start) has its controller
            # ready and turning `autoscaling.provisioningRequests` on or off needs no restart of Kueue.
            provisioning_request_crd=versions.PROVISIONING_REQUEST_CRD if plan is not None else None,
            serve_provisioning_requests=plan is not None and plan.provisioning,
            project_root=PROJECT_ROOT,
            depends_on=[s.cluster.pod_identity_agent],
            tags=s.tags,
        ),
        opts=s.k8s_component,
    )
    s.provisioning_request_crd = autoscaler.provisioning_request_crd


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
                targets={**fleet_job_targets(cfg.fleet), **job_targets(cfg.gpu_node_groups, s.gpu_az)},
                claims=s.claims,
                etcd_endpoint=s.etcd_endpoint,
                system_node_selector={NODE_GROUP_LABEL: SYSTEM_GROUP},
                cluster_name=cfg.cluster_name,
                region=cfg.region,
                queues=s.job_queues or fleet_job_queues(cfg),  # a fleet's manager: the workers' LocalQueues
            ),
            tags=s.tags,
            needs=s.job_needs,
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
