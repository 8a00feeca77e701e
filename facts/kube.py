"""Well-known Kubernetes labels and taints the stack sets on nodes and that pods select on.

Node groups set them, device plugins, services and jobs select or tolerate them: one definition
each, so the two sides cannot drift apart.
"""

from __future__ import annotations

from facts.operators import OPERATORS

# The extended resources GPU nodes advertise and training pods request: the NVIDIA device plugin's
# GPUs, the EFA device plugin's interfaces, and kubelet's 2 MiB huge pages.
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
HUGEPAGES_2MI_RESOURCE = "hugepages-2Mi"
# Every GPU node carries this taint (keyed like the GPU resource, as the NVIDIA device plugin's
# docs do); only pods that tolerate it (jobs, device plugins, GPU agents) land on GPU nodes.
GPU_TAINT = {"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"}
# Set on every GPU node (the NVIDIA device plugin's chart selects on it).
GPU_PRESENT_LABEL = {"nvidia.com/gpu.present": "true"}
# Set on nodes with EFA interfaces (the EFA device plugin's chart selects on it).
EFA_PRESENT_LABEL = {"vpc.amazonaws.com/efa.present": "true"}
# The config name of a node group ("system" or a GPU group's name) on each of its nodes.
NODE_GROUP_LABEL = "gputraining/node-group"
# On every team namespace, the team's name (the team admission policy's binding selects on it).
TEAM_LABEL = "gputraining/team"
# The node-group label value of the system group (etcd, operators, data-stage jobs run there).
SYSTEM_GROUP = "system"
# Kubernetes' well-known zone label.
ZONE_LABEL = "topology.kubernetes.io/zone"
# Kubernetes' well-known instance-type label (the kubelet sets it from the cloud provider).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# app.kubernetes.io/part-of of everything the stack creates in Kubernetes.
PART_OF = "gpu-training"
# Kueue's own namespace (its Helm release and controller).
KUEUE_NAMESPACE = "kueue-system"
# Namespaces that exist already or that the stack's services create for themselves: neither the
# training namespace nor a team's may be one of them.
RESERVED_NAMESPACES = (
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    *(op.namespace for op in OPERATORS),
    "amazon-cloudwatch",
    KUEUE_NAMESPACE,
)

# 2 MiB huge pages every EFA node reserves at boot. The EFA driver (libfabric) needs them, and the
# EKS EFA guide states EFA nodes pre-allocate 5128 of them; the AL2023 AMIs install EFA with
# `efa_installer.sh --minimal` and nothing in the AMI sets vm.nr_hugepages, so the node groups'
# launch-template user data reserves them before kubelet starts (it then advertises them as
# hugepages-2Mi: 5128 x 2 MiB = 10256Mi).
EFA_HUGEPAGES_2MI_PAGES = 5128
# The same in MiB, as the node advertises it (10256Mi).
EFA_HUGEPAGES_NODE_MIB = EFA_HUGEPAGES_2MI_PAGES * 2
# What an EFA worker container requests (hugepages-2Mi), within what a node advertises.
EFA_HUGEPAGES_REQUEST = "5120Mi"

# The label the Cluster Autoscaler on AWS reads as "this node has a GPU": a node that carries it
# but has no allocatable nvidia.com/gpu yet (the device plugin is starting) counts as not ready, so
# the autoscaler waits instead of adding more nodes.
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# Our own ASG tag that makes a node group one the Cluster Autoscaler discovers (with EKS's
# k8s.io/cluster-autoscaler/<cluster> tag): only autoscaled GPU groups carry it.
AUTOSCALE_TAG = "gputraining/autoscale"

# Burn-in (components/burn_in.py): a new GPU node joins with this taint and keeps it until the burn-in
# check has verified it. The key's prefix is the Cluster Autoscaler's startup-taint prefix
# (utils/taints/taints.go StartupTaintPrefix, cluster-autoscaler 1.35/1.36; FAQ "How does Cluster
# Autoscaler treat nodes with status/startup/ignore taints?"): the autoscaler drops such taints from
# every template node, including the node of a group at zero it builds from the group's ASG tags and
# eks:DescribeNodegroup taints (simulator.SanitizedTemplateNodeInfoFromNodeGroup -> SanitizeTaints), so
# a pod that does not tolerate it still scales a group up from zero; and it counts a node that carries
# it as not yet ready (FilterOutNodesWithStartupTaints), so it waits for the node instead of adding more.
# EKS takes a node-group taint key of 1 to 63 characters whole, prefix included (EKS API reference,
# `Taint`; botocore's EKS model, shape `taintKey`: min 1, max 63; tests/test_burn_in.py reads the
# bound from botocore): the prefix is 47, so the name after it is at most 16 (`gpu-burn-in`: 58 in all).
STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
BURN_IN_TAINT = {"key": STARTUP_TAINT_PREFIX + "gpu-burn-in", "value": "pending", "effect": "NoSchedule"}
# The burn-in's verdict on each GPU node it checked: `passed`, or `failed-<reason>` (a label value:
# at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends).
BURN_IN_LABEL = "gputraining/burn-in"
# At most this many of a group's nodes that failed burn-in are replaced in any window of this length;
# past it a failed node stays tainted and labelled and a Warning event asks a person to look (a check
# that fails every node of a type would otherwise terminate and relaunch instances forever).
BURN_IN_MAX_REPLACEMENTS = 3
BURN_IN_REPLACEMENT_WINDOW_SECONDS = 3600


def is_kubernetes_object(typ: str, inputs: dict) -> bool:
    """Whether a registration of Pulumi type ``typ`` is a Kubernetes object whose inputs are its manifest (the
    plan's manifests.yaml): a ``kubernetes:`` resource with apiVersion and kind, not a Helm release (the
    provider's type, ``pulumi:providers:kubernetes``, is not a ``kubernetes:`` one)."""
    return (
        typ.startswith("kubernetes:")
        and not typ.startswith("kubernetes:helm.sh/")
        and "apiVersion" in inputs
        and "kind" in inputs
    )
