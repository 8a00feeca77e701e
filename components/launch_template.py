"""The launch template of a node group (``components.node_group.NodeGroup``): an encrypted gp3 root
volume, IMDSv2 required, every EFA interface the type has card by card
(``facts.instance_types.efa_layout``), the placement group, the capacity reservation or block
target, and user data reserving huge pages.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_aws as aws

from facts.instance_types import InterfaceSlot

USER_DATA_BOUNDARY = "//gputraining"


@dataclass(frozen=True)
class LaunchTemplateNodes:
    """What the launch template says of the nodes (from ``NodeGroupArgs``)."""

    instance_type: str  # EC2 instance type of every node (set on the template for a capacity block)
    disk_size_gib: int  # size of the encrypted gp3 root volume, GiB
    capacity_type: Literal["on-demand", "spot", "capacity-block"]  # how instances are bought
    network_interfaces: Sequence[InterfaceSlot]  # the EFA interfaces, card by card; empty: EKS's primary
    hugepages_2mi: int  # 2 MiB huge pages the user data reserves; 0: no user data
    imds_hop_limit: int  # IMDSv2 response hop limit


def hugepages_user_data(pages: int) -> str:
    """Launch-template user data (MIME multi-part, which EKS merges with its own nodeadm config)
    whose shell part reserves ``pages`` 2 MiB huge pages. cloud-init runs it in cloud-final, and
    nodeadm starts kubelet only after cloud-final (nodeadm-run.service), so kubelet advertises the
    pages as hugepages-2Mi. A larger reservation already in place is kept; the sysctl.d file keeps
    the count across reboots."""
    script = "\n".join(
        [
            "#!/bin/bash",
            "set -euo pipefail",
            f"want={pages}",
            "have=$(cat /proc/sys/vm/nr_hugepages)",
            'if [ "$have" -lt "$want" ]; then sysctl -w vm.nr_hugepages="$want"; fi',
            'echo "vm.nr_hugepages = $(cat /proc/sys/vm/nr_hugepages)" > /etc/sysctl.d/90-gputraining-hugepages.conf',
            "grep -E 'HugePages_(Total|Free)' /proc/meminfo",
        ]
    )
    return "\n".join(
        [
            "MIME-Version: 1.0",
            f'Content-Type: multipart/mixed; boundary="{USER_DATA_BOUNDARY}"',
            "",
            f"--{USER_DATA_BOUNDARY}",
            'Content-Type: text/x-shellscript; charset="us-ascii"',
            "",
            script,
            "",
            f"--{USER_DATA_BOUNDARY}--",
            "",
        ]
    )


def efa_network_interfaces(
    slots: Sequence[InterfaceSlot], security_group_ids: list[pulumi.Input[str]]
) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """The launch-template interfaces of ``slots`` (``facts.instance_types.efa_layout``): each on its own
    card and device, of its own type, with the group's security groups. Only the primary (card 0,
    device 0) has an IP address of its own to say no public one to."""
    interfaces = []
    for slot in slots:
        primary = slot.card == 0 and slot.device == 0
        interfaces.append(
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                network_card_index=slot.card,
                device_index=slot.device,
                interface_type=slot.interface_type,
                security_groups=security_group_ids,
                delete_on_termination="true",
                associate_public_ip_address="false" if primary else None,
            )
        )
    return interfaces


def launch_template(
    name: str,
    nodes: LaunchTemplateNodes,
    tags: dict[str, str],
    node_group_name: str,
    efa_interfaces: int,
    security_group_ids: list[pulumi.Input[str]],
    placement_name: pulumi.Input[str] | None,
    reservation_id: pulumi.Input[str] | None,
    parent: pulumi.Resource,
) -> aws.ec2.LaunchTemplate:
    """The launch template: encrypted gp3 root, IMDSv2, the EFA interfaces, placement, capacity target, huge pages."""
    market_options = None
    reservation = None
    if nodes.capacity_type == "capacity-block":
        market_options = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
    if reservation_id:
        target = aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_id=reservation_id
        )
        reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(capacity_reservation_target=target)

    network_interfaces = (
        efa_network_interfaces(nodes.network_interfaces, security_group_ids) if nodes.network_interfaces else None
    )
    return aws.ec2.LaunchTemplate(
        f"{name}-lt",
        description=f"{node_group_name}: encrypted root, IMDSv2"
        + (f", {efa_interfaces} EFA" if efa_interfaces else ""),
        update_default_version=True,
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=nodes.disk_size_gib,
                    volume_type="gp3",
                    encrypted="true",
                    delete_on_termination="true",
                ),
            )
        ],
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_endpoint="enabled",
            http_tokens="required",
            http_put_response_hop_limit=nodes.imds_hop_limit,
        ),
        # With EFA the interfaces carry the security groups; otherwise the template does.
        vpc_security_group_ids=None if network_interfaces else security_group_ids,
        network_interfaces=network_interfaces,
        placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=placement_name) if placement_name else None,
        instance_market_options=market_options,
        capacity_reservation_specification=reservation,
        # Capacity blocks: EKS wants the instance type in the launch template, none on the group.
        instance_type=nodes.instance_type if nodes.capacity_type == "capacity-block" else None,
        user_data=base64.b64encode(hugepages_user_data(nodes.hugepages_2mi).encode()).decode()
        if nodes.hugepages_2mi
        else None,
        tag_specifications=[
            aws.ec2.LaunchTemplateTagSpecificationArgs(
                resource_type="instance", tags={**tags, "Name": node_group_name}
            ),
            aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type="volume", tags={**tags, "Name": node_group_name}),
        ],
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent),
    )
