"""Instance types: the shape of an EC2 instance type's facts, and where its EFA interfaces go.

``InstanceType`` types GPU counts, EFA interface counts and network cards once (``facts.catalog``
holds the table of known types); ``efa_layout`` decides, card by card from each network card's own
interface types, where the EFA interfaces of a node's launch template go.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ENA",
    "EFA",
    "EFA_ONLY",
    "ENA_ONLY_CARD",
    "EFA_CARD",
    "NetworkCard",
    "InterfaceSlot",
    "InstanceType",
    "efa_layout",
]


# What a network card takes (EC2 NetworkCardInfo.InterfaceTypes): `interface` is an ENA interface,
# `efa` an EFA with ENA (it carries IP traffic too), `efa-only` an EFA device without ENA (no IP
# address; VPC CNI >= 1.18.5).
ENA = "interface"
EFA = "efa"
EFA_ONLY = "efa-only"
ENA_ONLY_CARD = (ENA,)
EFA_CARD = (ENA, EFA, EFA_ONLY)


@dataclass(frozen=True)
class NetworkCard:
    """One network card of an instance type, as DescribeInstanceTypes lists it (NetworkInfo.NetworkCards[])."""

    index: int  # NetworkCardIndex
    interface_types: tuple[str, ...]  # InterfaceTypes: the interface types this card takes
    peak_gbps: float  # PeakBandwidthInGbps

    @property
    def takes_efa(self) -> bool:
        return EFA in self.interface_types or EFA_ONLY in self.interface_types


@dataclass(frozen=True)
class InterfaceSlot:
    """One network interface of a node's launch template: card, device index and interface type."""

    card: int
    device: int
    interface_type: str  # `interface`, `efa` or `efa-only`

    @property
    def is_efa(self) -> bool:
        return self.interface_type in (EFA, EFA_ONLY)


@dataclass(frozen=True)
class InstanceType:
    """Facts about one EC2 instance type."""

    name: str
    vcpus: int
    memory_mib: int
    gpus: int = 0
    gpu_model: str | None = None
    gpu_memory_mib: int = 0  # per GPU
    efa_interfaces: int = 0  # maximum EFA interfaces (EfaInfo.MaximumEfaInterfaces); 0 = no EFA
    # Every network card with the interface types it takes and its peak bandwidth. The EFA layout
    # is computed from these (``efa_layout``): p6-b300's card 0 takes only an ENA interface, and its
    # 16 EFA interfaces go on cards 1-16.
    cards: tuple[NetworkCard, ...] = (NetworkCard(0, (ENA,), 0.0),)
    # Local NVMe instance store (InstanceStorageInfo): disks and the size of each, GB.
    nvme_disks: int = 0
    nvme_disk_gb: int = 0
    # Whether EC2 sells Capacity Blocks for ML of this type (SupportedUsageClasses has `capacity-block`).
    capacity_blocks: bool = False
    architecture: str = "x86_64"  # ProcessorInfo.SupportedArchitectures
    # GPUDirect RDMA over EFA (FI_EFA_USE_DEVICE_RDMA=1): A100 (p4d) and newer. Not reported by
    # DescribeInstanceTypes, so it comes from this table.
    efa_rdma: bool = False
    # The node label value of `k8s.amazonaws.com/accelerator` (the Cluster Autoscaler's GPU label on
    # AWS) for this type's GPU: the name the autoscaler's AWS provider lists for it (its
    # availableGPUTypes, cluster-autoscaler/cloudprovider/aws/aws_cloud_provider.go at tag
    # cluster-autoscaler-1.36.1: nvidia-tesla-{k80,p100,v100,t4,a100}, nvidia-{a10g,l4,l40s}). A GPU
    # that list lacks (H100, H200, B200, B300) gets `nvidia-<model>` in the list's newer style: the
    # autoscaler treats any value alike for GPU readiness (it only checks the label is there) and
    # reports the type as "not-listed" in its metrics. Not reported by DescribeInstanceTypes.
    accelerator: str | None = None
    # The layers of the EC2 network the type's instances report (DescribeInstanceTopology) and EKS
    # labels its nodes with (topology.k8s.aws/network-node-layer-1..N): 3, 4, or 0 where EC2 lists
    # no topology for the type (``NETWORK_LAYERS``). Not reported by DescribeInstanceTypes.
    network_layers: int = 0

    @property
    def efa_supported(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def network_cards(self) -> int:
        return len(self.cards)

    @property
    def network_gbps(self) -> float:
        """Network bandwidth over all network cards, Gbit/s (the sum of the cards' peak figures)."""
        return float(sum(c.peak_gbps for c in self.cards))

    @property
    def efa_gbps(self) -> float:
        """The bandwidth of the cards that carry the EFA interfaces (``efa_layout``), Gbit/s: what
        NCCL over EFA can use. On p6-b300 that leaves out card 0 (ENA only); 0 without EFA."""
        if not self.efa_supported:
            return 0.0
        efa_cards = {s.card for s in efa_layout(self) if s.is_efa}
        return float(sum(c.peak_gbps for c in self.cards if c.index in efa_cards))

    @property
    def nvme_gb(self) -> int:
        return self.nvme_disks * self.nvme_disk_gb

    def summary(self) -> str:
        gpu = f"{self.gpus} x {self.gpu_model} {self.gpu_memory_mib // 1024} GiB" if self.is_gpu else "no GPU"
        efa = f"{self.efa_interfaces} EFA" if self.efa_supported else "no EFA"
        return f"{gpu}, {efa}, {self.vcpus} vCPU, {self.memory_mib // 1024} GiB"


def efa_layout(it: InstanceType) -> tuple[InterfaceSlot, ...]:
    """The launch-template interfaces that wire every EFA interface ``it`` has, card by card, from
    each card's own interface types (AWS's EFA guide, "Maximize network bandwidth on instances with
    multiple network cards"):

    - the primary interface is card 0, device 0, and must carry ENA: ``efa`` (EFA with ENA) where
      card 0 takes EFA, else ``interface`` (plain ENA; p6-b300);
    - where card 0 takes ``efa-only`` but the primary is not an EFA, card 0 device 1 is ``efa-only``;
    - every further card that takes EFA gets one at device 1: ``efa-only`` where the card lists it
      (no IP address used), else ``efa``; a card that lists neither gets nothing;
    - until the type's maximum EFA count is reached (i7ie has two EFA-capable cards and a maximum
      of one).

    Empty for a type without EFA. Raises ValueError when the cards cannot hold the maximum (the
    catalog and AWS's data would disagree)."""
    if not it.efa_supported:
        return ()
    remaining = it.efa_interfaces
    first = it.cards[0]
    slots: list[InterfaceSlot] = []
    if EFA in first.interface_types:
        slots.append(InterfaceSlot(first.index, 0, EFA))
        remaining -= 1
    else:
        slots.append(InterfaceSlot(first.index, 0, ENA))
        if EFA_ONLY in first.interface_types:
            slots.append(InterfaceSlot(first.index, 1, EFA_ONLY))
            remaining -= 1
    for card in it.cards[1:]:
        if remaining <= 0:
            break
        if EFA_ONLY in card.interface_types:
            slots.append(InterfaceSlot(card.index, 1, EFA_ONLY))
        elif EFA in card.interface_types:
            slots.append(InterfaceSlot(card.index, 1, EFA))
        else:
            continue
        remaining -= 1
    if remaining > 0:
        raise ValueError(
            f"{it.name}: its network cards take {it.efa_interfaces - remaining} EFA interfaces, not the "
            f"{it.efa_interfaces} it lists"
        )
    return tuple(slots)
