"""Instance catalog: the facts about EC2 instance types that everything downstream derives from.

GPU counts, EFA interface counts and network cards are typed once, in an ``InstanceType``
(``facts/instance_types.py``), and given here per type. The EFA wiring of node
groups, the GPU/EFA requests of training jobs, the autoscaler's node-template tags and the NCCL
gate's default bandwidth read them from an ``InstanceType``; they never repeat a number.

Two sources give the same ``InstanceType`` shape:
- ``BUILTIN``: a table that works offline (no AWS account needed);
- ``from_describe_instance_types``: turns one item of ``ec2.describe_instance_types`` into the
  same shape (``infra/aws_catalog.py`` makes that call with boto3).
The built-in table is checked against AWS's recorded data in the tests (moto ships it), card by
card: each network card's own interface types decide where the EFA interfaces go
(``facts.instance_types.efa_layout``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from facts.instance_types import EFA_CARD, ENA, ENA_ONLY_CARD, InstanceType, NetworkCard

__all__ = [
    "BUILTIN",
    "GPU_TYPES",
    "SYSTEM_TYPES",
    "CAPACITY_BLOCK_TYPES",
    "CAPACITY_BLOCK_DRAIN",
    "NETWORK_LAYERS",
    "SAGEMAKER",
    "SAGEMAKER_TYPES",
    "SAGEMAKER_EFA_TYPES",
    "get",
    "get_sagemaker",
    "sagemaker_type_for",
    "refusal",
    "from_describe_instance_types",
]


_GIB = 1024


def _cards(count: int, gbps: float, types: tuple[str, ...] = EFA_CARD, first: int = 0) -> tuple[NetworkCard, ...]:
    return tuple(NetworkCard(first + i, types, gbps) for i in range(count))


def _gpu(
    name: str,
    vcpus: int,
    mem_gib: int,
    gpus: int,
    model: str,
    gpu_mem_mib: int,
    efa: int,
    cards: tuple[NetworkCard, ...],
    nvme: tuple[int, int] = (0, 0),
    capacity_blocks: bool = False,
    rdma: bool = False,
    accelerator: str | None = None,
) -> InstanceType:
    return InstanceType(
        name=name,
        vcpus=vcpus,
        memory_mib=mem_gib * _GIB,
        gpus=gpus,
        gpu_model=model,
        gpu_memory_mib=gpu_mem_mib,
        efa_interfaces=efa,
        cards=cards,
        nvme_disks=nvme[0],
        nvme_disk_gb=nvme[1],
        capacity_blocks=capacity_blocks,
        efa_rdma=rdma,
        accelerator=accelerator,
    )


def _cpu(name: str, vcpus: int, mem_gib: int, gbps: float) -> InstanceType:
    return InstanceType(name=name, vcpus=vcpus, memory_mib=mem_gib * _GIB, cards=_cards(1, gbps, (ENA,)))


# Source: EC2 DescribeInstanceTypes as recorded by moto 5.2.5 (moto/ec2/resources/instance_types.json.gz:
# vCPUs, memory, GPUs, EFA maximum, every network card's interface types and peak bandwidth, the
# NVMe instance store, the capacity-block usage class) and the EC2 accelerated computing instance
# pages. p3.2xlarge/8xlarge/16xlarge are no longer listed by DescribeInstanceTypes, so their row
# comes from the EC2 documentation. See ../shared/REFERENCE.md. tests/test_catalog.py compares every
# described row with the recorded data, field by field and card by card.
#
# The EFA GPU types of the recorded data left out: the G families (g4dn, g5, g6, g6e, g7, g7e, gr6:
# graphics/inference GPUs with 1-4 EFA interfaces). Their layout follows the same rule and is
# tested, but the facts this table adds (GPUDirect RDMA, the nccl-tests image's GPU builds, pinned
# prices) are not established for them. p6e-gb200 is refused (``refusal``).
_H100, _H200, _B200, _B300 = 81920, 144384, 183359, 275040
_GPU_ROWS = [
    #    name             vCPU  GiB  GPUs model  GPU MiB EFA  network cards (count, Gbit/s each)
    _gpu("p3.2xlarge", 8, 61, 1, "V100", 16384, 0, _cards(1, 10, ENA_ONLY_CARD), accelerator="nvidia-tesla-v100"),
    _gpu("p3.8xlarge", 32, 244, 4, "V100", 16384, 0, _cards(1, 10, ENA_ONLY_CARD), accelerator="nvidia-tesla-v100"),
    _gpu("p3.16xlarge", 64, 488, 8, "V100", 16384, 0, _cards(1, 25, ENA_ONLY_CARD), accelerator="nvidia-tesla-v100"),
    _gpu("p3dn.24xlarge", 96, 768, 8, "V100", 32768, 1, _cards(1, 100), nvme=(2, 900), accelerator="nvidia-tesla-v100"),
    _gpu(
        "p4d.24xlarge",
        96,
        1152,
        8,
        "A100",
        40960,
        4,
        _cards(4, 100),
        nvme=(8, 1000),
        capacity_blocks=True,
        rdma=True,
        accelerator="nvidia-tesla-a100",
    ),
    _gpu(
        "p4de.24xlarge",
        96,
        1152,
        8,
        "A100",
        81920,
        4,
        _cards(4, 100),
        nvme=(8, 1000),
        capacity_blocks=True,
        rdma=True,
        accelerator="nvidia-tesla-a100",
    ),
    _gpu(
        "p5.4xlarge",
        16,
        256,
        1,
        "H100",
        _H100,
        1,
        _cards(1, 100),
        nvme=(1, 3800),
        capacity_blocks=True,
        rdma=True,
        accelerator="nvidia-h100",
    ),
    _gpu(
        "p5.48xlarge",
        192,
        2048,
        8,
        "H100",
        _H100,
        32,
        _cards(32, 100),
        nvme=(8, 3800),
        capacity_blocks=True,
        rdma=True,
        accelerator="nvidia-h100",
    ),
    _gpu(
        "p5e.48xlarge",
        192,
        2048,
        8,
        "H200",
        _H200,
        32,
        _cards(32, 100),
        nvme=(8, 3800),
        capacity_blocks=True,
        rdma=True,
        accelerator="nvidia-h200",
    ),
    _gpu(
        "p5en.48xlarge",
        192,
        2048,
        8,
        "H200",
        _H200,
        16,
        _cards(16, 200),
        nvme=(8, 3800),
        capacity_blocks=True,
        rdma=True,
        accelerator="nvidia-h200",
    ),
    # p6-b200: 8 cards of 200 Gbit/s peak each as DescribeInstanceTypes reports them (its
    # NetworkPerformance text says "3200 Gigabit"; the per-card figures are what the catalog uses).
    _gpu(
        "p6-b200.48xlarge",
        192,
        2048,
        8,
        "B200",
        _B200,
        8,
        _cards(8, 200),
        nvme=(8, 3800),
        capacity_blocks=True,
        rdma=True,
        accelerator="nvidia-b200",
    ),
    # p6-b300: card 0 takes only an ENA interface (350 Gbit/s), cards 1-16 one EFA each (400 Gbit/s).
    _gpu(
        "p6-b300.48xlarge",
        192,
        4096,
        8,
        "B300",
        _B300,
        16,
        _cards(1, 350, ENA_ONLY_CARD) + _cards(16, 400, first=1),
        nvme=(8, 3800),
        capacity_blocks=True,
        rdma=True,
        accelerator="nvidia-b300",
    ),
]

# System node group types: general purpose, no GPU. c5.2xlarge is the reference setups' choice.
_SYSTEM_ROWS = [
    _cpu("c5.xlarge", 4, 8, 10),
    _cpu("c5.2xlarge", 8, 16, 10),
    _cpu("c5.4xlarge", 16, 32, 10),
    _cpu("m5.xlarge", 4, 16, 10),
    _cpu("m5.2xlarge", 8, 32, 10),
    _cpu("m5.4xlarge", 16, 64, 10),
    _cpu("m6i.xlarge", 4, 16, 12.5),
    _cpu("m6i.2xlarge", 8, 32, 12.5),
    _cpu("m6i.4xlarge", 16, 64, 12.5),
]

# The network layers per type, with where that comes from. EC2 user guide, "Prerequisites for Amazon
# EC2 topology" (ec2-instance-topology-prerequisites), "Instance types": 3 network nodes for
# p3dn.24xlarge, p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5e.48xlarge, p5en.48xlarge,
# p6e-gb200.36xlarge, g6e.*, g7e.*, hpc*, trn1/trn1n/trn2/trn2u; 4 for p6-b200.48xlarge and
# p6-b300.48xlarge. EKS user guide, "Place distributed AI/ML workloads with network topology
# labels" (ml-workload-topology): every node of such a type gets topology.k8s.aws/network-node-layer-1
# to -3, and -4 only on the four-layer types. Where sources disagree the EC2 list wins, per size:
# - p5.4xlarge: the family is "p5" in summaries (../shared/REFERENCE.md), but EC2 lists only
#   p5.48xlarge, so p5.4xlarge gets no topology (its nodes may carry no layer labels);
# - p6e-gb200.36xlarge: EC2 lists 3 layers, AWS's Containers blog on P6e-GB200 with EKS describes
#   labels layer-1 to layer-4 on its nodes; the type is refused here (``refusal``), so neither is used;
# - p3.2xlarge/8xlarge/16xlarge: not listed (no topology).
# tests/test_catalog.py holds the same as a table with the source of each row.
TOPOLOGY_SOURCE_EC2 = "EC2 user guide, ec2-instance-topology-prerequisites (Instance types)"
NETWORK_LAYERS: Mapping[str, tuple[int, str]] = {
    "p3.2xlarge": (0, TOPOLOGY_SOURCE_EC2 + ": not listed"),
    "p3.8xlarge": (0, TOPOLOGY_SOURCE_EC2 + ": not listed"),
    "p3.16xlarge": (0, TOPOLOGY_SOURCE_EC2 + ": not listed"),
    "p3dn.24xlarge": (3, TOPOLOGY_SOURCE_EC2 + ": 3 network nodes"),
    "p4d.24xlarge": (3, TOPOLOGY_SOURCE_EC2 + ": 3 network nodes"),
    "p4de.24xlarge": (3, TOPOLOGY_SOURCE_EC2 + ": 3 network nodes"),
    "p5.4xlarge": (0, TOPOLOGY_SOURCE_EC2 + ": not listed (only p5.48xlarge of the family)"),
    "p5.48xlarge": (3, TOPOLOGY_SOURCE_EC2 + ": 3 network nodes"),
    "p5e.48xlarge": (3, TOPOLOGY_SOURCE_EC2 + ": 3 network nodes"),
    "p5en.48xlarge": (3, TOPOLOGY_SOURCE_EC2 + ": 3 network nodes"),
    "p6-b200.48xlarge": (4, TOPOLOGY_SOURCE_EC2 + ": 4 network nodes"),
    "p6-b300.48xlarge": (4, TOPOLOGY_SOURCE_EC2 + ": 4 network nodes"),
}
_GPU_ROWS = [replace(t, network_layers=NETWORK_LAYERS[t.name][0]) for t in _GPU_ROWS]

BUILTIN: Mapping[str, InstanceType] = {t.name: t for t in _GPU_ROWS + _SYSTEM_ROWS}
GPU_TYPES = tuple(t.name for t in _GPU_ROWS)
SYSTEM_TYPES = tuple(t.name for t in _SYSTEM_ROWS)
# The GPU types EC2 sells Capacity Blocks for ML of (not p3/p3dn).
CAPACITY_BLOCK_TYPES = tuple(t.name for t in _GPU_ROWS if t.capacity_blocks)
# A capacity block's group goes to zero this long before the block ends: EC2 warns 40 minutes
# before the end and starts terminating the block's instances 30 minutes before it (EC2 user guide,
# "Monitor Capacity Blocks using EventBridge"), and EKS suggests scaling to zero more than 30
# minutes before the end (EKS user guide, "Create self-managed nodes with Capacity Blocks for ML").
# An hour leaves the drain 30 minutes.
CAPACITY_BLOCK_DRAIN = timedelta(minutes=60)
CAPACITY_BLOCK_DRAIN_TEXT = "an hour"


# Types the stack refuses, by family, and why: what it would take is in the message itself.
_REFUSED_FAMILIES: Mapping[str, str] = {
    "p6e-gb200": (
        "{name} is not supported: it is sold only as part of an EC2 UltraServer (u-p6e-gb200x36: 9 instances, "
        "u-p6e-gb200x72: 18, of 4 GB200 GPUs each) and only through Capacity Blocks for ML; its CPUs are NVIDIA Grace "
        "(arm64), so its nodes need the AL2023 ARM NVIDIA AMI (AL2023_ARM_64_NVIDIA) and arm64 builds of every image "
        "that runs on them, where this stack's GPU groups use the x86_64 AL2023 NVIDIA AMI; and NCCL across the "
        "UltraServer's NVLink domain needs NVIDIA's DRA driver for GPUs with IMEX channels (ComputeDomain resource "
        "claims, Kubernetes dynamic resource allocation), which this stack does not install. It would take an arm64 "
        "GPU node group, the UltraServer's capacity block, the NVIDIA DRA driver with jobs that claim a ComputeDomain "
        "instead of requesting nvidia.com/gpu, and arm64 job images. Use p6-b200.48xlarge or p6-b300.48xlarge (8 "
        "GPUs, x86_64, EFA) instead"
    ),
}


def refusal(name: str) -> str | None:
    """Why ``name`` (an EC2 type, or its ``ml.`` SageMaker form) is refused, or None."""
    family = name.removeprefix(ML_PREFIX).split(".", 1)[0]
    text = _REFUSED_FAMILIES.get(family)
    return text.format(name=name) if text else None


# SageMaker training instance types: the ml. equivalents of the GPU types above, with the same
# hardware facts (GPUs, EFA interfaces, GPUDirect RDMA), for every type SageMaker's CreateTrainingJob
# accepts (the TrainingInstanceType enum of botocore's sagemaker model; tests/test_catalog.py checks
# both ways). SageMaker attaches the EFA interfaces itself on the EFA types.
ML_PREFIX = "ml."
_SAGEMAKER_BASES = (
    "p3.2xlarge",
    "p3.8xlarge",
    "p3.16xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.4xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
)
SAGEMAKER: Mapping[str, InstanceType] = {
    ML_PREFIX + n: replace(BUILTIN[n], name=ML_PREFIX + n) for n in _SAGEMAKER_BASES
}
SAGEMAKER_TYPES = tuple(SAGEMAKER)
SAGEMAKER_EFA_TYPES = tuple(n for n, t in SAGEMAKER.items() if t.efa_supported)


def get(name: str) -> InstanceType | None:
    """The built-in facts for ``name``, or None when the type is not in the catalog."""
    return BUILTIN.get(name)


def get_sagemaker(name: str) -> InstanceType | None:
    """The facts of SageMaker training type ``name`` (``ml.p4d.24xlarge``), or None."""
    return SAGEMAKER.get(name)


def sagemaker_type_for(ec2_name: str) -> str | None:
    """The SageMaker training type with the hardware of EC2 type ``ec2_name``, or None."""
    name = ML_PREFIX + ec2_name
    return name if name in SAGEMAKER else None


def from_describe_instance_types(item: Mapping[str, Any]) -> InstanceType:
    """Build an ``InstanceType`` from one item of ``ec2.describe_instance_types()['InstanceTypes']``."""
    name = item["InstanceType"]
    gpu_info = item.get("GpuInfo") or {}
    gpus = gpu_info.get("Gpus") or []
    gpu_count = sum(int(g.get("Count", 0)) for g in gpus)
    network = item.get("NetworkInfo") or {}
    efa = 0
    if network.get("EfaSupported"):
        efa = int((network.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0))
    listed = network.get("NetworkCards") or []
    cards = tuple(
        NetworkCard(
            int(c.get("NetworkCardIndex", i)),
            tuple(c.get("InterfaceTypes") or (ENA,)),
            float(c.get("PeakBandwidthInGbps", 0)),
        )
        for i, c in enumerate(listed)
    ) or _cards(int(network.get("MaximumNetworkCards", 1)), 0.0, (ENA,))
    disks = (item.get("InstanceStorageInfo") or {}).get("Disks") or []
    nvme = (sum(int(d.get("Count", 0)) for d in disks), int(disks[0].get("SizeInGB", 0)) if disks else 0)
    archs = (item.get("ProcessorInfo") or {}).get("SupportedArchitectures") or ["x86_64"]
    known = BUILTIN.get(name)
    return InstanceType(
        name=name,
        vcpus=int(item["VCpuInfo"]["DefaultVCpus"]),
        memory_mib=int(item["MemoryInfo"]["SizeInMiB"]),
        gpus=gpu_count,
        gpu_model=gpus[0].get("Name") if gpus else None,
        gpu_memory_mib=int((gpus[0].get("MemoryInfo") or {}).get("SizeInMiB", 0)) if gpus else 0,
        efa_interfaces=efa,
        cards=tuple(sorted(cards, key=lambda c: c.index)),
        nvme_disks=nvme[0],
        nvme_disk_gb=nvme[1],
        capacity_blocks="capacity-block" in (item.get("SupportedUsageClasses") or []),
        architecture=str(archs[0]),
        efa_rdma=known.efa_rdma if known else False,
        accelerator=known.accelerator if known else None,
        network_layers=known.network_layers if known else 0,
    )
