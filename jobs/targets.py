"""What a job is built for and checked against: the GPU node group it runs on (``JobTarget``, from
the catalog facts of the group's instance type), what the builders get from the stack
(``JobsContext``) and what the checks see of it (``JobEnvironment``, ``GroupFacts``). Everything
that depends on the hardware comes from the target node group's ``JobTarget``, never typed twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from facts import topology
from facts.instance_types import InstanceType
from facts.kube import ACCELERATOR_LABEL, GPU_TAINT, INSTANCE_TYPE_LABEL, NODE_GROUP_LABEL, ZONE_LABEL
from facts.multikueue import CONTROLLER_NAME as MULTIKUEUE_CONTROLLER

GPU_TOLERATION = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}


def toleration(taint: Mapping[str, str]) -> dict[str, str]:
    """The toleration that matches ``taint`` (``Equal`` when it has a value, else ``Exists``)."""
    if taint.get("value"):
        return {
            "key": taint["key"],
            "operator": "Equal",
            "value": taint["value"],
            "effect": taint.get("effect", "NoSchedule"),
        }
    return {"key": taint["key"], "operator": "Exists", "effect": taint.get("effect", "NoSchedule")}


@dataclass(frozen=True)
class JobTarget:
    """One GPU node group as jobs see it. GPU and EFA numbers come from the instance catalog."""

    group: str
    instance_type: str
    gpus: int
    efa_interfaces: int  # 0 = no EFA (type without EFA, or EFA switched off on the group)
    efa_rdma: bool
    max_nodes: int
    availability_zone: str
    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]
    gpu_model: str | None = None
    network_gbps: float = 0  # the instance type's network bandwidth, Gbit/s
    efa_gbps: float = (
        0  # the bandwidth of the network cards carrying the group's EFA interfaces, Gbit/s (0 without EFA)
    )
    network_layers: int = 0  # the network layers Kueue places the group's jobs by (0: no topology)
    # A fleet target's: the controller the queued job object names as its manager (runPolicy.managedBy).
    managed_by: str | None = None

    @classmethod
    def from_instance(
        cls,
        group: str,
        instance: InstanceType,
        *,
        efa_interfaces: int,
        max_nodes: int,
        availability_zone: str,
        extra_taints: Sequence[Mapping[str, str]] = (),
    ) -> JobTarget:
        """The target for a node group of ``instance`` built by ``NodeGroup``: its group label and
        AZ as node selector, the GPU taint and the group's own taints tolerated."""
        if not instance.is_gpu:
            raise ValueError(f"{instance.name} has no GPU: jobs target GPU node groups only")
        if not 0 <= efa_interfaces <= instance.efa_interfaces:
            raise ValueError(f"{instance.name} has {instance.efa_interfaces} EFA interfaces, not {efa_interfaces}")
        return cls(
            group=group,
            instance_type=instance.name,
            gpus=instance.gpus,
            efa_interfaces=efa_interfaces,
            efa_rdma=instance.efa_rdma and efa_interfaces > 0,
            max_nodes=max_nodes,
            availability_zone=availability_zone,
            node_selector={NODE_GROUP_LABEL: group, ZONE_LABEL: availability_zone},
            tolerations=[dict(GPU_TOLERATION)] + [toleration(t) for t in extra_taints],
            gpu_model=instance.gpu_model,
            network_gbps=instance.network_gbps,
            efa_gbps=instance.efa_gbps if efa_interfaces else 0.0,
            network_layers=topology.group_layers(instance, efa_interfaces),
        )


class ConfiguredGroup(Protocol):
    """A GPU node group as the stack config declares it (``stacks.config.GpuNodeGroupConfig``)."""

    @property
    def name(self) -> str: ...
    @property
    def instance(self) -> InstanceType: ...
    @property
    def efa_interfaces(self) -> int: ...  # what the group attaches (0 with EFA off)
    @property
    def max_size(self) -> int: ...
    @property
    def taints(self) -> Sequence[Any]: ...  # the group's own taints (models with key, value, effect)


def job_targets(groups: Iterable[ConfiguredGroup], availability_zone: str) -> dict[str, JobTarget]:
    """One ``JobTarget`` per GPU node group, from the catalog facts of its instance type, the EFA
    interfaces the group attaches, its maxSize, the GPU AZ and the group's own taints."""
    return {
        g.name: JobTarget.from_instance(
            g.name,
            g.instance,
            efa_interfaces=g.efa_interfaces,
            max_nodes=g.max_size,
            availability_zone=availability_zone,
            extra_taints=[t.model_dump() for t in g.taints],
        )
        for g in groups
    }


def fleet_flavor(instance_type: str) -> str:
    """The fleet's name of a GPU instance type: the manager's ResourceFlavor, and what a job of a fleet's
    manager names as its ``nodeGroup`` (a DNS label: '.' as '-', ``p5.48xlarge`` -> ``p5-48xlarge``)."""
    return instance_type.replace(".", "-")


def fleet_target(instance: InstanceType, max_nodes: int) -> JobTarget:
    """What a job of a fleet's manager is built for (docs/fleet.md, "Jobs of the fleet"): the instance type,
    not a node group, since the job runs on whichever worker admits it, in that worker's AZ, on its group
    of that type, whatever its name.

    Its pods select the type (``node.kubernetes.io/instance-type``, on every node) and its accelerator
    label (on every node of a GPU group, and in every worker ResourceFlavor's nodeLabels, so the worker's
    Kueue considers only flavors of that GPU: it matches a pod's nodeSelector against a flavor on the keys
    of that flavor's own nodeLabels, pkg/scheduler/flavorassigner/flavorassigner.go flavorSelector at
    v0.19.2; the instance type, no flavor's key, is the kube-scheduler's to match); never a group name or
    an AZ. The worker's Kueue adds its
    admitted flavor's nodeLabels (the group label) and tolerations (the group's taints) to the pod
    templates when it admits the copy (kubernetes-sigs/kueue v0.19.2 pkg/podset/podset.go FromAssignment:
    ``utilmaps.Copy(&info.NodeSelector, flv.Spec.NodeLabels)``, ``info.Tolerations = append(...,
    flv.Spec.Tolerations...)``; Merge refuses only a key already set to another value). So the object
    MultiKueue copies is the same on the manager and on every worker. GPUs, EFA interfaces and huge
    pages are those of the type (all its EFA interfaces: a worker group with EFA off cannot take the
    job, the dispatch model says so). No topology: the manager's flavors carry none, and Kueue refuses
    a topology request on a flavor without one (pkg/scheduler/flavorassigner/tas_flavorassigner.go).

    The queued job object names MultiKueue as its manager (``runPolicy.managedBy``, ``managed_by``):
    Kueue's webhook would default it only when the job's ClusterQueue is already in its cache
    (pkg/controller/jobframework/defaults.go ApplyDefaultForManagedBy), MultiKueue dispatches only a job
    that names it (jobs/mpijob/mpijob_multikueue_adapter.go IsJobManagedByKueue), and the field is
    immutable; on the worker's copy MultiKueue clears it (the adapters' ``ManagedBy = nil``), so the
    worker's operator runs it."""
    if not instance.is_gpu:
        raise ValueError(f"{instance.name} has no GPU: jobs target GPU types only")
    selector = {INSTANCE_TYPE_LABEL: instance.name}
    if instance.accelerator:
        selector[ACCELERATOR_LABEL] = instance.accelerator
    return JobTarget(
        group=fleet_flavor(instance.name),
        instance_type=instance.name,
        gpus=instance.gpus,
        efa_interfaces=instance.efa_interfaces,
        efa_rdma=instance.efa_rdma and instance.efa_interfaces > 0,
        max_nodes=max_nodes,
        availability_zone="",
        node_selector=selector,
        tolerations=[dict(GPU_TOLERATION)],
        gpu_model=instance.gpu_model,
        network_gbps=instance.network_gbps,
        efa_gbps=instance.efa_gbps if instance.efa_interfaces else 0.0,
        network_layers=0,
        managed_by=MULTIKUEUE_CONTROLLER,
    )


def fleet_targets(instances: Iterable[InstanceType], max_nodes: int) -> dict[str, JobTarget]:
    """A ``fleet_target`` per GPU type of ``instances``, keyed by its fleet flavor."""
    return {fleet_flavor(i.name): fleet_target(i, max_nodes) for i in instances if i.is_gpu}


@dataclass
class JobsContext:
    """What the builders need from the stack."""

    namespace: str  # the jobs' namespace
    targets: dict[str, JobTarget]  # GPU node group name -> its target
    claims: dict[str, str]  # volume name ("fsx"/"efs") -> PVC name; only stores that exist
    etcd_endpoint: str | None  # host:port of the stack's etcd (v2 API), None when etcd is off
    system_node_selector: dict[str, str]  # where system jobs (data-stage, tensorboard) run
    cluster_name: str  # the EKS cluster (Pod Identity associations)
    system_tolerations: list[dict[str, str]] = field(default_factory=list)  # tolerations of system pods
    region: str | None = None  # AWS region for the AWS CLI of data-stage jobs (sourceRegion wins)
    # The Kueue LocalQueue (in ``namespace``) of each team's GPU jobs, "" for jobs without a team;
    # empty when the stack runs no queues (GPU jobs then go straight to the scheduler).
    queues: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupFacts:
    """A GPU node group as the job checks see it (before the AZ is known)."""

    name: str
    instance: InstanceType
    efa_interfaces: int  # what the group attaches (0 with EFA off)
    max_size: int


@dataclass(frozen=True)
class JobEnvironment:
    """What the rest of the stack offers a job: checked for every enabled job."""

    groups: Mapping[str, GroupFacts]  # GPU node group name -> facts
    volumes: frozenset[str]  # shared stores that exist ("fsx", "efs")
    operators: frozenset[str]  # the names of the operators installed (facts/operators.py: "mpi", "training")
    etcd_enabled: bool  # the stack runs etcd for PyTorch rendezvous
    queues: bool = True  # the stack runs Kueue (queues.enabled): it places jobs by topology


class JobBuildError(ValueError):
    """A spec the context cannot serve (the config checks report these as problems first)."""
