"""Instance catalog: the facts about EC2 instance types that everything downstream derives from.

GPU counts, EFA interface counts and network cards are typed here once. The EFA wiring of node
groups and (later) the GPU/EFA requests of training jobs read them from an ``InstanceType``;
they never repeat a number.

Two sources give the same ``InstanceType`` shape:
- ``BUILTIN``: a table that works offline (no AWS account needed);
- ``from_describe_instance_types``: turns one item of ``ec2.describe_instance_types`` into the
  same shape (``infra/aws_catalog.py`` makes that call with boto3).
The built-in table is checked against AWS's recorded data in the tests (moto ships it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

__all__ = [
    "InstanceType",
    "BUILTIN",
    "GPU_TYPES",
    "SYSTEM_TYPES",
    "SAGEMAKER",
    "SAGEMAKER_TYPES",
    "SAGEMAKER_EFA_TYPES",
    "get",
    "get_sagemaker",
    "sagemaker_type_for",
    "from_describe_instance_types",
]


@dataclass(frozen=True)
class InstanceType:
    """Facts about one EC2 instance type."""

    name: str
    vcpus: int
    memory_mib: int
    gpus: int = 0
    gpu_model: Optional[str] = None
    gpu_memory_mib: int = 0  # per GPU
    efa_interfaces: int = 0  # maximum EFA interfaces; 0 = no EFA
    network_cards: int = 1
    # Network bandwidth over all network cards, Gbit/s (EC2's peak figure; "up to" for burstable).
    network_gbps: float = 0
    # GPUDirect RDMA over EFA (FI_EFA_USE_DEVICE_RDMA=1): A100 (p4d) and newer. Not reported by
    # DescribeInstanceTypes, so it comes from this table.
    efa_rdma: bool = False
    # The node label value of `k8s.amazonaws.com/accelerator` (the Cluster Autoscaler's GPU label on
    # AWS) for this type's GPU: the name the autoscaler's AWS provider lists for it (its
    # availableGPUTypes, cluster-autoscaler/cloudprovider/aws/aws_cloud_provider.go at tag
    # cluster-autoscaler-1.36.1: nvidia-tesla-{k80,p100,v100,t4,a100}, nvidia-{a10g,l4,l40s}). A GPU
    # that list lacks (H100, H200) gets `nvidia-<model>` in the list's newer style: the autoscaler
    # treats any value alike for GPU readiness (it only checks the label is there) and reports the
    # type as "not-listed" in its metrics. Not reported by DescribeInstanceTypes.
    accelerator: Optional[str] = None

    @property
    def efa_supported(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def is_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    def summary(self) -> str:
        if self.is_gpu:
            gpu = f"{self.gpus} x {self.gpu_model} {self.gpu_memory_mib // 1024} GiB"
        else:
            gpu = "no GPU"
        efa = f"{self.efa_interfaces} EFA" if self.efa_supported else "no EFA"
        return f"{gpu}, {efa}, {self.vcpus} vCPU, {self.memory_mib // 1024} GiB"


_GIB = 1024


def _gpu(name, vcpus, mem_gib, gpus, model, gpu_mem_mib, efa, cards, gbps, rdma=False, accelerator=None) -> InstanceType:
    return InstanceType(
        name=name,
        vcpus=vcpus,
        memory_mib=mem_gib * _GIB,
        gpus=gpus,
        gpu_model=model,
        gpu_memory_mib=gpu_mem_mib,
        efa_interfaces=efa,
        network_cards=cards,
        network_gbps=gbps,
        efa_rdma=rdma,
        accelerator=accelerator,
    )


def _cpu(name, vcpus, mem_gib, gbps) -> InstanceType:
    return InstanceType(name=name, vcpus=vcpus, memory_mib=mem_gib * _GIB, network_gbps=gbps)


# Source: EC2 DescribeInstanceTypes (as recorded by moto 5.2.5) and the EC2 accelerated computing
# instance pages; p3.2xlarge/8xlarge/16xlarge are no longer listed by DescribeInstanceTypes in
# most regions, so their row comes from the EC2 documentation. See ../shared/REFERENCE.md.
_GPU_ROWS = [
    #    name             vCPU  GiB   GPUs model   GPU MiB  EFA cards Gbps RDMA       accelerator label
    _gpu("p3.2xlarge", 8, 61, 1, "V100", 16384, 0, 1, 10, accelerator="nvidia-tesla-v100"),
    _gpu("p3.8xlarge", 32, 244, 4, "V100", 16384, 0, 1, 10, accelerator="nvidia-tesla-v100"),
    _gpu("p3.16xlarge", 64, 488, 8, "V100", 16384, 0, 1, 25, accelerator="nvidia-tesla-v100"),
    _gpu("p3dn.24xlarge", 96, 768, 8, "V100", 32768, 1, 1, 100, accelerator="nvidia-tesla-v100"),
    _gpu("p4d.24xlarge", 96, 1152, 8, "A100", 40960, 4, 4, 400, rdma=True, accelerator="nvidia-tesla-a100"),
    _gpu("p4de.24xlarge", 96, 1152, 8, "A100", 81920, 4, 4, 400, rdma=True, accelerator="nvidia-tesla-a100"),
    _gpu("p5.48xlarge", 192, 2048, 8, "H100", 81920, 32, 32, 3200, rdma=True, accelerator="nvidia-h100"),
    _gpu("p5e.48xlarge", 192, 2048, 8, "H200", 144384, 32, 32, 3200, rdma=True, accelerator="nvidia-h200"),
    _gpu("p5en.48xlarge", 192, 2048, 8, "H200", 144384, 16, 16, 3200, rdma=True, accelerator="nvidia-h200"),
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

BUILTIN: Mapping[str, InstanceType] = {t.name: t for t in _GPU_ROWS + _SYSTEM_ROWS}
GPU_TYPES = tuple(t.name for t in _GPU_ROWS)
SYSTEM_TYPES = tuple(t.name for t in _SYSTEM_ROWS)


# SageMaker training instance types: the ml. equivalents of the GPU types above, with the same
# hardware facts (GPUs, EFA interfaces, GPUDirect RDMA). SageMaker attaches the EFA interfaces
# itself on the EFA types (ml.p3dn, ml.p4d, ml.p4de, ml.p5). Source: the SageMaker pricing page's
# training instance list and the EC2 rows above.
ML_PREFIX = "ml."
_SAGEMAKER_BASES = ("p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge")
SAGEMAKER: Mapping[str, InstanceType] = {ML_PREFIX + n: replace(BUILTIN[n], name=ML_PREFIX + n) for n in _SAGEMAKER_BASES}
SAGEMAKER_TYPES = tuple(SAGEMAKER)
SAGEMAKER_EFA_TYPES = tuple(n for n, t in SAGEMAKER.items() if t.efa_supported)


def get(name: str) -> Optional[InstanceType]:
    """The built-in facts for ``name``, or None when the type is not in the catalog."""
    return BUILTIN.get(name)


def get_sagemaker(name: str) -> Optional[InstanceType]:
    """The facts of SageMaker training type ``name`` (``ml.p4d.24xlarge``), or None."""
    return SAGEMAKER.get(name)


def sagemaker_type_for(ec2_name: str) -> Optional[str]:
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
    known = BUILTIN.get(name)
    return InstanceType(
        name=name,
        vcpus=int(item["VCpuInfo"]["DefaultVCpus"]),
        memory_mib=int(item["MemoryInfo"]["SizeInMiB"]),
        gpus=gpu_count,
        gpu_model=gpus[0].get("Name") if gpus else None,
        gpu_memory_mib=int((gpus[0].get("MemoryInfo") or {}).get("SizeInMiB", 0)) if gpus else 0,
        efa_interfaces=efa,
        network_cards=int(network.get("MaximumNetworkCards", 1)),
        network_gbps=float(sum(float(c.get("PeakBandwidthInGbps", 0)) for c in network.get("NetworkCards") or [])),
        efa_rdma=known.efa_rdma if known else False,
        accelerator=known.accelerator if known else None,
    )
