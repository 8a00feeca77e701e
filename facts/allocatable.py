"""What a GPU node of an EKS managed node group leaves for training pods: its capacity minus what
kubelet reserves (the AL2023 AMI's nodeadm) and what the DaemonSets the stack installs request on
every GPU node. The queues' quotas (``stacks/queues/``) are built from it, so that Kueue never
admits more CPU or memory than the nodes can hold.

Each number has its source. Where a value is an estimate it errs on the small side: a quota a
little below what a node holds only makes Kueue wait a bit early; one above it admits a job whose
pods then cannot be placed.
"""

from __future__ import annotations

from dataclasses import dataclass

# kubelet's kube-reserved CPU, as nodeadm computes it (awslabs/amazon-eks-ami,
# nodeadm/internal/kubelet/config.go, getCPUMillicoresToReserve, at 81fec2e8 of 2026-07-23): 6% of
# the first core, 1% of the second, 0.5% of the third and fourth, 0.25% of every core above four.
# nodeadm sets no systemReserved.
_CPU_RESERVE_STEPS = ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, None, 25))  # (from, to, 1/10000ths)

# kube-reserved memory: 11 MiB per pod kubelet admits plus 255 MiB (getMemoryMebibytesToReserve), and
# the hard eviction threshold memory.available 100Mi (nodeadm's kubelet defaults).
MEMORY_RESERVED_PER_POD_MIB = 11
MEMORY_RESERVED_BASE_MIB = 255
EVICTION_HARD_MEMORY_MIB = 100

# maxPods of a node in a managed node group without a custom AMI (the stack's groups): EKS caps it
# in the node's user data at 110 below 30 vCPUs and 250 above (EKS User Guide, "Choose an optimal
# Amazon EC2 node instance type", "How maxPods is determined"). The ENI-based value can be lower on
# small types; using the cap reserves at most 11 MiB x the difference too much.
MAX_PODS_SMALL, MAX_PODS_LARGE, MAX_PODS_VCPU_THRESHOLD = 110, 250, 30

# The instance's memory as EC2 lists it is more than the node's memory capacity (MemTotal): the
# kernel keeps its page tables (a 64-byte struct page per 4 KiB page is 1.6%), firmware and crash
# kernel areas. An estimate on the safe side; `kubectl get node -o jsonpath='{.status.capacity.memory}'`
# shows the real figure.
KERNEL_MEMORY_SHARE = 0.03


@dataclass(frozen=True)
class DaemonRequests:
    """The CPU (millicores) and memory (MiB) requests of one DaemonSet's pod, summed over its
    containers, with where the numbers come from."""

    name: str
    cpu_m: int
    memory_mib: int
    source: str


# The DaemonSets with a pod on every GPU node, by the service that installs them (the stack's
# pinned builds). A DaemonSet without requests (eks-pod-identity-agent, the EFS CSI node plugin, the
# NVIDIA device plugin, dcgm-server) requests nothing and is left out.
ALWAYS = (
    DaemonRequests(
        "aws-node", 25, 0, "amazon-vpc-cni-k8s charts/aws-vpc-cni values.yaml at v1.22.4: resources.requests.cpu 25m"
    ),
    DaemonRequests("kube-proxy", 100, 0, "the kube-proxy DaemonSet as EKS installs it (add-on): requests cpu 100m"),
    DaemonRequests(
        "eks-node-monitoring-agent",
        10,
        30,
        "aws/eks-node-monitoring-agent chart v1.6.4/v1.6.6 values.yaml (vendored): nodeAgent resources.requests "
        "10m/30Mi",
    ),
)
FSX_CSI_NODE = DaemonRequests(
    "fsx-csi-node",
    30,
    104,
    "aws-fsx-csi-driver chart at v1.9.0: node 10m/40Mi, node-driver-registrar 10m/32Mi, liveness-probe 10m/32Mi",
)
EFA_DEVICE_PLUGIN = DaemonRequests(
    "aws-efa-k8s-device-plugin",
    10,
    20,
    "aws/eks-charts aws-efa-k8s-device-plugin v0.5.30 values.yaml (vendored): resources.requests 10m/20Mi",
)
CLOUDWATCH = (
    DaemonRequests(
        "cloudwatch-agent",
        250,
        128,
        "aws-observability/helm-charts amazon-cloudwatch-observability 6.3.0 values.yaml: agent 250m/128Mi",
    ),
    DaemonRequests("fluent-bit", 50, 25, "same chart: containerLogs.fluentBit 50m/25Mi"),
    DaemonRequests("dcgm-exporter", 250, 128, "same chart: dcgmExporter 250m/128Mi (NVIDIA nodes)"),
)

# The burn-in DaemonSet's pod (components/burn_in.py) on the nodes of a group with burn-in: it lives as
# long as the node, and holds its effective request all that time: the larger of its largest init
# container's request and the sum of its containers' (Kubernetes docs, "Init Containers", "Resource
# sharing within containers"), per resource. tests/test_burn_in.py computes it from the planned pod.
BURN_IN = DaemonRequests(
    "gputraining-burn-in",
    50,
    64,
    "components/burn_in.py: init containers gate, check, replace 50m/64Mi each (the largest), watch 10m/32Mi",
)
BURN_IN_LOOPBACK = DaemonRequests(
    "gputraining-burn-in",
    100,
    512,
    "components/burn_in.py with the loopback test: its init container's 100m/512Mi is the largest request",
)


# Deployments of the stack's own on the system nodes, beside the add-ons' (one replica each).
QUEUE_REPORTER = DaemonRequests(
    "gputraining-queue-reporter",
    10,
    32,
    "components/queue_reporter.py: its one container's requests 10m/32Mi (with alerts and queues on)",
)


def kube_reserved_cpu_m(vcpus: int) -> int:
    """nodeadm's kube-reserved CPU for a node of ``vcpus``, in millicores."""
    total = vcpus * 1000
    reserved = 0
    for start, end, share in _CPU_RESERVE_STEPS:
        if total > start:
            top = total if end is None else min(total, end)
            reserved += (top - start) * share // 10000  # integer division per range, as nodeadm does
    return reserved


def max_pods(vcpus: int) -> int:
    """The most pods kubelet admits on a managed-node-group node of ``vcpus`` (the EKS cap)."""
    return MAX_PODS_LARGE if vcpus > MAX_PODS_VCPU_THRESHOLD else MAX_PODS_SMALL


def kube_reserved_memory_mib(vcpus: int) -> int:
    """nodeadm's kube-reserved memory plus the hard eviction threshold, in MiB."""
    return MEMORY_RESERVED_PER_POD_MIB * max_pods(vcpus) + MEMORY_RESERVED_BASE_MIB + EVICTION_HARD_MEMORY_MIB
