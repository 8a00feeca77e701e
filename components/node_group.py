"""NodeGroup: one EKS managed node group (pulumi-eks ``ManagedNodeGroup``) with a launch template of
our own, used for the system group and for every GPU group.

Why our own launch template rather than ``enable_efa_support``: pulumi-eks' EFA template leaves the
root volume unencrypted, always creates a placement group and cannot target a capacity
reservation or block. This one adds, on top of the same EFA layout:
- an encrypted gp3 root volume and IMDSv2 required;
- every EFA interface the type has, card by card from each card's own interface types
  (``facts.instance_types.efa_layout``): the primary interface on card 0 device 0 carries ENA (``efa`` where
  card 0 takes EFA, else a plain ``interface``, as on p6-b300), and every further card that takes
  EFA gets one at device 1, ``efa-only`` where it lists it (VPC CNI >= 1.18.5);
- a security group allowing all traffic to and from itself (EFA's requirement), next to the
  cluster security group;
- a cluster placement group created in the node group's AZ, an existing one, or none;
- a capacity reservation or capacity block target: an existing one, or a Capacity Block bought
  at ``pulumi up`` from an offering (an irreversible purchase, only when the stack asks for it);
- for a capacity block with a known window, scheduled actions on the group's Auto Scaling group:
  to the group's maxSize when the block starts and to zero ``CAPACITY_BLOCK_DRAIN`` before it
  ends (EC2 starts terminating a block's instances 30 minutes before its end); inside the window
  the program sets the desired size itself, so any `up` leaves the group at its block's size, and
  holds back the changes EKS would apply by upgrading or replacing the group
  (``components.node_scaling.BlockPlan``).
No subnet is set on the interfaces: EKS picks it from the node group's subnets. The Cluster
Autoscaler's tags and a capacity block's schedule are worked out in ``components/node_scaling.py``, the
launch template in ``components/launch_template.py``.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from components.launch_template import LaunchTemplateNodes, launch_template
from components.node_scaling import NODE_TEMPLATE as NODE_TEMPLATE  # re-exported: the tests read it here
from components.node_scaling import (
    BlockPlan,
    ScheduledSize,
    _config_order,
    _utc_text,
    autoscaler_template_tags,
    capacity_block_plan,
    held_back_text,
    tag_resource_parts,
)
from facts.instance_types import InterfaceSlot
from facts.kube import AUTOSCALE_TAG, EFA_PRESENT_LABEL, GPU_PRESENT_LABEL, GPU_TAINT, NODE_GROUP_LABEL

EKS_TAINT_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}
EKS_CAPACITY_TYPE = {"on-demand": "ON_DEMAND", "spot": "SPOT", "capacity-block": "CAPACITY_BLOCK"}


@dataclass
class NodeGroupArgs:
    cluster: eks.Cluster  # the pulumi-eks cluster the group joins
    cluster_name: str  # EKS cluster name; the node group is named <cluster_name>-<component name>
    cluster_security_group_id: pulumi.Input[
        str
    ]  # the cluster security group EKS created, on every node (and EFA interface)
    node_role: aws.iam.Role  # IAM role of the nodes
    vpc_id: pulumi.Input[str]  # VPC of the EFA security group
    subnet_ids: Sequence[
        pulumi.Input[str]
    ]  # subnets EKS launches the nodes in (a GPU group: the GPU AZ's private subnet)
    instance_type: str  # EC2 instance type of every node
    ami_type: str  # EKS AMI type, e.g. AL2023_x86_64_NVIDIA
    min_size: int  # fewest nodes
    desired_size: int  # nodes to start with
    max_size: int  # most nodes
    disk_size_gib: int  # size of the encrypted gp3 root volume, GiB
    kubernetes_version: str | None = None  # kubelet version of the nodes; None: the cluster's
    capacity_type: Literal["on-demand", "spot", "capacity-block"] = (
        "on-demand"  # how instances are bought; capacity-block also sets the market type
    )
    capacity_reservation_id: str | None = (
        None  # capacity reservation or block (cr-...) the launch template targets; None: none
    )
    # A Capacity Block offering (cb-...) to buy at `pulumi up` (irreversible, paid upfront) and target
    # instead of capacity_reservation_id; None: buy nothing.
    capacity_block_offering_id: str | None = None
    # The capacity block's (start, end), timezone-aware: the group scales to max_size at the start and
    # to zero CAPACITY_BLOCK_DRAIN before the end (scheduled actions, and inside the window the
    # program itself), and desired_size is then computed from the window; None: no scheduled scaling.
    capacity_block_window: tuple[datetime.datetime, datetime.datetime] | None = None
    # The launch template's network interfaces, card by card (facts.instance_types.efa_layout of the type);
    # empty: no EFA, the primary interface as EKS makes it.
    network_interfaces: Sequence[InterfaceSlot] = ()
    # Placement: "create" a cluster placement group in `availability_zone`, use an "existing" one
    # by name, or "none".
    placement_group: Literal["create", "existing", "none"] = "none"
    placement_group_name: str | None = None  # the placement group's name, with placement_group "existing"
    availability_zone: str | None = None  # the group's one AZ; required with EFA and with placement_group "create"
    gpu: bool = False  # a GPU group: adds the GPU node label and the GPU taint
    # The name jobs and operators use for this group (label gputraining/node-group); defaults to
    # the component's name.
    group_name: str | None = None
    labels: dict[str, str] = field(
        default_factory=dict
    )  # extra node labels (the node-group, GPU and EFA labels are added)
    taints: list[dict[str, str]] = field(
        default_factory=list
    )  # extra node taints {key, value, effect} (a GPU group also gets the GPU taint)
    # Taints a node joins with and loses once it is ready for work (the burn-in taint): on the EKS node
    # group, never among the Cluster Autoscaler's template tags (it drops startup taints from every
    # template node anyway, facts.kube.STARTUP_TAINT_PREFIX).
    startup_taints: list[dict[str, str]] = field(default_factory=list)
    hugepages_2mi: int = (
        0  # 2 MiB huge pages each node reserves at boot, before kubelet starts (0: none; EFA groups need them)
    )
    # IMDSv2 hops: 1 keeps pods without host networking away from the node role's credentials; 2 lets
    # them read instance metadata (the EFS/FSx CSI controllers on system nodes do at start-up).
    imds_hop_limit: int = 2
    # Only GPU groups (aws.eks.NodeGroup): EKS's update strategy (MINIMAL: replace nodes without
    # launching extra ones first, which a full placement group or reservation cannot take) and node
    # auto repair (the node monitoring agent add-on reports GPU faults it acts on).
    update_strategy: Literal["DEFAULT", "MINIMAL"] = "MINIMAL"
    node_repair: bool = True  # EKS node auto repair (GPU groups)
    # With the Cluster Autoscaler (GPU groups): the extended resources one node offers, e.g.
    # {"nvidia.com/gpu": "8"}; the group's ASG gets the tags the autoscaler builds a node of a group at
    # zero from, and Pulumi leaves the desired size to the autoscaler. None: not autoscaled.
    autoscale_resources: dict[str, str] | None = None
    autoscale_tag: str = AUTOSCALE_TAG  # the ASG tag the autoscaler discovers groups by
    ready: Sequence[pulumi.Resource] = field(
        default_factory=list
    )  # what the nodes need first (the node role's policy attachments)
    tags: dict[str, str] = field(
        default_factory=dict
    )  # tags on the AWS resources, instances and volumes (plus gputraining/node-group)


def _asg_name(resources: Any) -> str:
    """The name of the Auto Scaling group EKS made for a node group (one per group)."""
    groups = resources[0].autoscaling_groups or []
    return str(groups[0].name)


def _ignored(autoscaled: bool, block: BlockPlan | None) -> list[str] | None:
    """The GPU node group's ``ignoreChanges``: the desired size of an autoscaled group, and what a
    capacity block's plan keeps from the state; None when nothing."""
    ignored = block.ignored() if block is not None else []
    if autoscaled and "scalingConfig.desiredSize" not in ignored:
        ignored.insert(0, "scalingConfig.desiredSize")
    return ignored or None


def _pulumi_eks_child_urn(name: str, parent: pulumi.Resource) -> pulumi.Output[str]:
    """The URN the node group had as the child of pulumi-eks' ManagedNodeGroup ``<name>-mng``."""
    component = pulumi.create_urn(f"{name}-mng", "eks:index:ManagedNodeGroup", parent=parent)
    return pulumi.create_urn(f"{name}-mng", "aws:eks/nodeGroup:NodeGroup", parent=component)


def _check_args(args: NodeGroupArgs, efa_interfaces: int) -> None:
    """What a node group's arguments cannot combine."""
    if efa_interfaces and not args.availability_zone:
        raise ValueError("an EFA node group must be pinned to one availability zone")
    if args.capacity_block_offering_id and args.capacity_reservation_id:
        raise ValueError("a node group targets an existing capacity reservation or buys a capacity block, not both")
    if args.placement_group == "create" and not args.availability_zone:
        raise ValueError("a cluster placement group needs the node group's availability zone")


def _labels_and_taints(
    name: str, args: NodeGroupArgs, efa_interfaces: int
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The nodes' labels (the node-group label, and the GPU and EFA ones) and taints (the GPU taint first)."""
    labels = {**args.labels, NODE_GROUP_LABEL: args.group_name or name}
    taints = list(args.taints)
    if args.gpu:
        labels.update(GPU_PRESENT_LABEL)
        taints = [GPU_TAINT] + taints
    if efa_interfaces:
        labels.update(EFA_PRESENT_LABEL)
    return labels, taints


class NodeGroup(pulumi.ComponentResource):
    def __init__(self, name: str, args: NodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:NodeGroup", name, None, opts)
        tags = {**args.tags, "gputraining/node-group": name}
        node_group_name = f"{args.cluster_name}-{name}"

        efa_interfaces = sum(1 for slot in args.network_interfaces if slot.is_efa)
        _check_args(args, efa_interfaces)

        self.efa_security_group_id: pulumi.Output[str] | None = None
        security_group_ids = self._security_groups(name, args, tags, node_group_name, efa_interfaces)
        placement_name = self._placement_group(name, args, tags)
        self.capacity_block: aws.ec2.CapacityBlockReservation | None = None
        reservation_id = self._capacity_reservation(name, args, tags, node_group_name)
        nodes = LaunchTemplateNodes(
            args.instance_type,
            args.disk_size_gib,
            args.capacity_type,
            args.network_interfaces,
            args.hugepages_2mi,
            args.imds_hop_limit,
        )
        template = launch_template(
            name, nodes, tags, node_group_name, efa_interfaces, security_group_ids, placement_name, reservation_id, self
        )

        labels, taints = _labels_and_taints(name, args, efa_interfaces)
        self.node_group_name = node_group_name
        block = self._block_plan(args, node_group_name)
        schedule = block.actions if block is not None else ()
        self.node_group: pulumi.Resource = self._node_group(
            name, args, tags, node_group_name, template, labels, taints + list(args.startup_taints), block
        )
        self.labels = labels
        self.taints = taints  # the taints of a node ready for work
        self.startup_taints = list(args.startup_taints)
        self.autoscaler_tags: dict[str, str] = self._autoscaler_tags(name, args, labels, taints)
        self.scheduled_sizes = schedule
        self.capacity_block_plan = block
        self._block_actions(name, node_group_name, schedule)
        self.register_outputs({"nodeGroupName": node_group_name})

    def _security_groups(
        self, name: str, args: NodeGroupArgs, tags: dict[str, str], node_group_name: str, efa_interfaces: int
    ) -> list[pulumi.Input[str]]:
        """The nodes' security groups: the cluster's, and with EFA one allowing all traffic to and from itself."""
        child = pulumi.ResourceOptions(parent=self)
        security_group_ids: list[pulumi.Input[str]] = [args.cluster_security_group_id]
        if efa_interfaces:
            efa_sg = aws.ec2.SecurityGroup(
                f"{name}-efa",
                vpc_id=args.vpc_id,
                description=f"EFA traffic among the {node_group_name} nodes (all traffic to and from itself)",
                tags={**tags, "Name": f"{node_group_name}-efa"},
                opts=child,
            )
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-efa-in-self",
                security_group_id=efa_sg.id,
                referenced_security_group_id=efa_sg.id,
                ip_protocol="-1",
                description="EFA: all inbound from members of this group",
                opts=child,
            )
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-efa-out-self",
                security_group_id=efa_sg.id,
                referenced_security_group_id=efa_sg.id,
                ip_protocol="-1",
                description="EFA: all outbound to members of this group",
                opts=child,
            )
            security_group_ids.append(efa_sg.id)
            self.efa_security_group_id = efa_sg.id
        return security_group_ids

    def _placement_group(self, name: str, args: NodeGroupArgs, tags: dict[str, str]) -> pulumi.Input[str] | None:
        """The placement group's name: one created in the group's AZ, an existing one, or None."""
        placement_name: pulumi.Input[str] | None = None
        if args.placement_group == "create":
            pg = aws.ec2.PlacementGroup(
                f"{name}-pg",
                strategy="cluster",
                tags={**tags, "gputraining/availability-zone": args.availability_zone or ""},
                opts=pulumi.ResourceOptions(parent=self),
            )
            placement_name = pg.name
        elif args.placement_group == "existing":
            placement_name = args.placement_group_name
        return placement_name

    def _capacity_reservation(
        self, name: str, args: NodeGroupArgs, tags: dict[str, str], node_group_name: str
    ) -> pulumi.Input[str] | None:
        """The capacity reservation the launch template targets: the given one, or the Capacity Block
        bought from the offering."""
        reservation_id: pulumi.Input[str] | None = args.capacity_reservation_id
        if args.capacity_block_offering_id:
            # The purchase: PurchaseCapacityBlock at `pulumi up`, paid upfront and irreversible. The
            # resource cannot be deleted (destroy only forgets it); the block ends on its own date.
            self.capacity_block = aws.ec2.CapacityBlockReservation(
                f"{name}-capacity-block",
                capacity_block_offering_id=args.capacity_block_offering_id,
                instance_platform="Linux/UNIX",
                tags={**tags, "gputraining/capacity-block-offering": args.capacity_block_offering_id},
                opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
            )
            reservation_id = self.capacity_block.id
            pulumi.log.warn(
                f"node group {node_group_name} targets the Capacity Block bought from offering "
                f"{args.capacity_block_offering_id}: the `pulumi up` that first creates it BUYS it, irreversibly (the "
                "upfront fee is charged at once and never refunded)",
                resource=self,
            )
        return reservation_id

    def _block_plan(self, args: NodeGroupArgs, node_group_name: str) -> BlockPlan | None:
        """A capacity block's window at the program's `now` (node_scaling.utc_now, the one clock); None
        without a window."""
        if args.capacity_block_window is None:
            return None
        block = capacity_block_plan(*args.capacity_block_window, args.max_size)
        if block.held:
            pulumi.log.warn(f"node group {node_group_name}: {held_back_text(block)}", resource=self)
        return block

    def _node_group(
        self,
        name: str,
        args: NodeGroupArgs,
        tags: dict[str, str],
        node_group_name: str,
        launch_template: aws.ec2.LaunchTemplate,
        labels: dict[str, str],
        taints: list[dict[str, str]],
        block: BlockPlan | None,
    ) -> pulumi.Resource:
        """The EKS node group: EKS's own for a GPU group, pulumi-eks' ManagedNodeGroup for the system group."""
        eks_taints = [
            aws.eks.NodeGroupTaintArgs(key=t["key"], value=t.get("value") or None, effect=EKS_TAINT_EFFECT[t["effect"]])
            for t in taints
        ]
        desired_size = block.desired if block is not None else args.desired_size
        scaling = aws.eks.NodeGroupScalingConfigArgs(
            min_size=args.min_size, desired_size=desired_size, max_size=args.max_size
        )
        lt_ref = aws.eks.NodeGroupLaunchTemplateArgs(
            id=launch_template.id, version=launch_template.latest_version.apply(str)
        )
        if args.gpu:
            # GPU groups use EKS's node group directly: pulumi-eks' ManagedNodeGroup (4.4) cannot set
            # the update strategy or node auto repair, and passes the instance type on the group,
            # which EKS refuses for capacity blocks.
            return aws.eks.NodeGroup(
                f"{name}-mng",
                cluster_name=args.cluster_name,
                node_group_name=node_group_name,
                node_role_arn=args.node_role.arn,
                instance_types=None if args.capacity_type == "capacity-block" else [args.instance_type],
                ami_type=args.ami_type,
                capacity_type=EKS_CAPACITY_TYPE[args.capacity_type],
                scaling_config=scaling,
                subnet_ids=list(args.subnet_ids),
                launch_template=lt_ref,
                version=args.kubernetes_version,
                labels=labels,
                taints=eks_taints,
                update_config=aws.eks.NodeGroupUpdateConfigArgs(
                    update_strategy=args.update_strategy, max_unavailable=1
                ),
                node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=args.node_repair),
                tags=tags,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[args.cluster, *args.ready],
                    # The autoscaler owns the desired size of an autoscaled group, the scheduled actions
                    # that of a capacity block's group outside its window: a refreshed `up` sends the
                    # size they set. Inside the window the program sets it, and holds back what EKS
                    # would apply by upgrading or replacing the group (node_scaling.BlockPlan).
                    ignore_changes=_ignored(args.autoscale_resources is not None, block),
                    # Stacks made before kept this group as pulumi-eks' ManagedNodeGroup, whose child
                    # aws.eks.NodeGroup had this name: take it over instead of replacing the nodes.
                    aliases=[_pulumi_eks_child_urn(name, self)],
                ),
            )
        return eks.ManagedNodeGroup(
            f"{name}-mng",
            cluster=args.cluster,
            node_group_name=node_group_name,
            node_role=args.node_role,
            instance_types=[args.instance_type],
            ami_type=args.ami_type,
            capacity_type=EKS_CAPACITY_TYPE[args.capacity_type],
            scaling_config=scaling,
            subnet_ids=args.subnet_ids,
            launch_template=lt_ref,
            version=args.kubernetes_version,
            labels=labels,
            taints=eks_taints,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _autoscaler_tags(
        self, name: str, args: NodeGroupArgs, labels: dict[str, str], taints: list[dict[str, str]]
    ) -> dict[str, str]:
        """An autoscaled GPU group's Cluster Autoscaler tags, each put on the group's Auto Scaling group;
        {} when not autoscaled."""
        if not (args.gpu and args.autoscale_resources is not None):
            return {}
        autoscaler_tags = autoscaler_template_tags(labels, taints, args.autoscale_resources, args.autoscale_tag)
        group = self.node_group
        assert isinstance(group, aws.eks.NodeGroup)
        asg_name = group.resources.apply(_asg_name)
        parts = tag_resource_parts(_config_order(autoscaler_tags, labels, taints, args.autoscale_resources))
        for key, value in autoscaler_tags.items():
            aws.autoscaling.Tag(
                f"{name}-asg-{parts[key]}",
                autoscaling_group_name=asg_name,
                # Read from the group's tags; instances need not carry them.
                tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
                opts=pulumi.ResourceOptions(parent=self),
            )
        return autoscaler_tags

    def _block_actions(self, name: str, node_group_name: str, schedule: Sequence[ScheduledSize]) -> None:
        """The capacity block's window: one-time actions on the group's Auto Scaling group (EKS makes
        one per node group). Only desired capacity changes (-1 leaves min and max alone), so a
        later `pulumi up` of minSize/maxSize and the actions never fight over the same value."""
        if not schedule:
            return
        group = self.node_group
        assert isinstance(group, aws.eks.NodeGroup), "capacity blocks are GPU groups"
        block_asg = group.resources.apply(_asg_name)
        for action in schedule:
            aws.autoscaling.Schedule(
                f"{name}-{action.suffix}",
                scheduled_action_name=f"{node_group_name}-{action.suffix}",
                autoscaling_group_name=block_asg,
                start_time=_utc_text(action.at),
                desired_capacity=action.size,
                min_size=-1,
                max_size=-1,
                opts=pulumi.ResourceOptions(parent=self),
            )
