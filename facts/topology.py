"""Network topology: the node labels EKS puts on the supported GPU types, the Kueue ``Topology``
built from them, and Kueue's pod-set annotations that ask for a placement.

EKS labels every node of a type EC2 describes the topology of (``facts.catalog.NETWORK_LAYERS``)
with its network node at each layer, coarse to fine: ``topology.k8s.aws/network-node-layer-1``
(the top), ``-2``, ``-3`` (the bottom on three-layer types) and ``-4`` (the bottom on four-layer
types) (EKS user guide, ml-workload-topology). A Kueue Topology lists those levels, coarse to
fine, with ``kubernetes.io/hostname`` last (Kueue v0.19.2, concepts/topology_aware_scheduling:
levels from the highest to the lowest; the hostname label only at the lowest level).
"""

from __future__ import annotations

from facts.instance_types import InstanceType

# EKS's network layer labels: layer n of the EC2 network (1 = the top, the coarsest).
NETWORK_LAYER_LABEL = "topology.k8s.aws/network-node-layer-{n}"
# Kubernetes' well-known hostname label: the finest Topology level (one node).
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Kueue's pod-set annotations (kueue v0.19.2 apis/kueue/v1beta2/topology_types.go), set on a pod
# template: all the pod set's pods in one domain of the level (required), in the smallest domain
# from that level up that holds them (preferred), anywhere but counted per node (unconstrained),
# and pod sets placed as one (a group: exactly two pod sets, one of them of one pod, the same
# required or preferred level; jobframework/tas_validation.go).
REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
LEVEL_ANNOTATIONS = {"required": REQUIRED_ANNOTATION, "preferred": PREFERRED_ANNOTATION}

# What a job may ask for (``placement``), and what it gets on a group with a topology when it asks
# for nothing: preferred, at the finest network layer of the group's type.
PLACEMENTS = ("required", "preferred", "none")
DEFAULT_PLACEMENT = "preferred"


def layer_label(n: int) -> str:
    """The node label of network layer ``n`` (1 = the top)."""
    return NETWORK_LAYER_LABEL.format(n=n)


def layer_labels(layers: int) -> tuple[str, ...]:
    """The network layer labels of a type with ``layers`` layers, coarse to fine."""
    return tuple(layer_label(n) for n in range(1, layers + 1))


def levels(layers: int) -> tuple[str, ...]:
    """The levels of the Kueue Topology of a type with ``layers`` network layers: the layers coarse
    to fine, then the node. Empty for a type without topology."""
    return (*layer_labels(layers), HOSTNAME_LABEL) if layers else ()


def topology_name(layers: int) -> str:
    """The name of the Kueue Topology of the types with ``layers`` network layers (one Topology per
    distinct level list: the levels of a Topology cannot change, and its name says which they are)."""
    return f"aws-network-{layers}-layers"


def group_layers(instance: InstanceType, efa_interfaces: int) -> int:
    """The network layers a GPU group of ``instance`` is placed by: the type's, on a group that can
    run multi-node jobs over EFA (``efa_interfaces`` attached); 0 (no Topology, no placement) on a
    group without EFA or of a type EKS labels with no layers."""
    return instance.network_layers if efa_interfaces > 0 else 0
