"""The resources the queues cover, in the units of this package (``cpu`` in millicores, ``memory``
and ``hugepages-2Mi`` in MiB, GPUs and EFA interfaces as counts), Kubernetes quantities in and
out, what one node of a GPU group leaves for training pods, and the Kueue ResourceFlavor of each
GPU node group.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from facts import allocatable, topology
from facts.kube import (
    ACCELERATOR_LABEL,
    EFA_HUGEPAGES_NODE_MIB,
    EFA_RESOURCE,
    GPU_RESOURCE,
    HUGEPAGES_2MI_RESOURCE,
    NODE_GROUP_LABEL,
)
from jobs.nccl_test import NCCL_TESTS_IMAGE_GPU_MODELS
from jobs.targets import GPU_TOLERATION, toleration

CPU, MEMORY, GPU, EFA, HUGEPAGES = "cpu", "memory", GPU_RESOURCE, EFA_RESOURCE, HUGEPAGES_2MI_RESOURCE
# What the ClusterQueues cover, in this order (Kueue checks only these: quotaCheckStrategy
# IgnoreUndeclared, so a team's pod that also asks for ephemeral-storage is not blocked).
RESOURCES = (CPU, MEMORY, GPU, EFA, HUGEPAGES)
UNIT = {CPU: "m", MEMORY: "Mi", HUGEPAGES: "Mi", GPU: "", EFA: ""}


# ---------------------------------------------------------------------------------------------
# Quantities
# ---------------------------------------------------------------------------------------------

_BINARY = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024**2, "Pi": 1024**3}
_DECIMAL = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_quantity(resource: str, value: Any) -> int:
    """A Kubernetes quantity in this module's unit for ``resource`` (rounded up: a request counts whole)."""
    text = str(value)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", text)
    if m is None:
        raise ValueError(f"{resource}: {value!r} is not a quantity")
    number, suffix = float(m.group(1)), m.group(2)
    if resource == CPU:
        millis = number if suffix == "m" else number * 1000 if suffix == "" else None
        if millis is None:
            raise ValueError(f"cpu: {value!r} is not a CPU quantity")
        return int(-(-millis // 1))
    if UNIT[resource] == "Mi":
        if suffix in _BINARY:
            mib = number * _BINARY[suffix]
        elif suffix in _DECIMAL or suffix == "":
            mib = number * _DECIMAL.get(suffix, 1) / 2**20
        else:
            raise ValueError(f"{resource}: {value!r} is not a memory quantity")
        return int(-(-mib // 1))
    if suffix:
        raise ValueError(f"{resource}: {value!r} is not a count")
    return int(number)


def quantity(resource: str, amount: int) -> str:
    """``amount`` as the Kubernetes quantity Kueue reads (whole cores where it is whole)."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    return f"{amount}{UNIT[resource]}"


def human(resource: str, amount: int) -> str:
    """``amount`` for the plan's table: CPU in cores, memory in GiB."""
    if resource == CPU:
        return f"{amount / 1000:g}"
    if resource == MEMORY:
        return f"{amount / 1024:.1f}Gi"
    return quantity(resource, amount)


# ---------------------------------------------------------------------------------------------
# Nodes and flavors
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeServices:
    """The services whose DaemonSets request CPU and memory on every GPU node."""

    fsx: bool = True
    efa_device_plugin: bool = True
    monitoring: bool = True
    burn_in: frozenset[str] = frozenset()  # the GPU groups whose nodes run the burn-in pod
    burn_in_loopback: frozenset[str] = frozenset()  # those of them whose pod has the loopback test


def burn_in_services(groups: Sequence[Any], burn_in: Any) -> dict[str, frozenset[str]]:
    """``NodeServices``' burn-in fields from the GPU groups and the ``burnIn`` section: a group's own
    ``burnIn``, else the stack's; the loopback test on groups whose GPU the nccl-tests image runs on."""
    on = [g for g in groups if g is not None and (burn_in.enabled if g.burn_in is None else g.burn_in)]
    loopback = [g for g in on if burn_in.loopback_test and g.instance.gpu_model in NCCL_TESTS_IMAGE_GPU_MODELS]
    return {"burn_in": frozenset(g.name for g in on), "burn_in_loopback": frozenset(g.name for g in loopback)}


def daemon_requests(efa: bool, services: NodeServices, group: str = "") -> list[allocatable.DaemonRequests]:
    """The DaemonSets with a pod on a node of GPU group ``group`` (with EFA or without) of a stack with
    ``services``."""
    out = list(allocatable.ALWAYS)
    if group in services.burn_in_loopback:
        out.append(allocatable.BURN_IN_LOOPBACK)
    elif group in services.burn_in:
        out.append(allocatable.BURN_IN)
    if services.fsx:
        out.append(allocatable.FSX_CSI_NODE)
    if efa and services.efa_device_plugin:
        out.append(allocatable.EFA_DEVICE_PLUGIN)
    if services.monitoring:
        out += allocatable.CLOUDWATCH
    return out


def node_allocatable(g: Any, services: NodeServices) -> dict[str, int]:
    """What one node of GPU group ``g`` leaves for training pods, per covered resource."""
    it = g.instance
    hugepages = EFA_HUGEPAGES_NODE_MIB if g.efa_interfaces else 0
    daemons = daemon_requests(bool(g.efa_interfaces), services, g.name)
    memory_capacity = int(it.memory_mib * (1 - allocatable.KERNEL_MEMORY_SHARE))
    return {
        CPU: it.vcpus * 1000 - allocatable.kube_reserved_cpu_m(it.vcpus) - sum(d.cpu_m for d in daemons),
        MEMORY: memory_capacity
        - allocatable.kube_reserved_memory_mib(it.vcpus)
        - hugepages
        - sum(d.memory_mib for d in daemons),
        GPU: it.gpus,
        EFA: g.efa_interfaces,
        HUGEPAGES: hugepages,
    }


@dataclass(frozen=True)
class Flavor:
    """A Kueue ResourceFlavor: one GPU node group, its node labels and tolerations, and what all
    its nodes offer."""

    name: str
    instance_type: str
    nodes: int  # what the group supplies: see ``GroupSupply``
    autoscaled: bool
    per_node: Mapping[str, int]
    node_labels: Mapping[str, str]
    tolerations: Sequence[Mapping[str, str]]

    @property
    def capacity(self) -> dict[str, int]:
        return {r: self.nodes * self.per_node[r] for r in RESOURCES}

    sizing: str  # how the group comes to hold ``nodes`` (``GroupSupply.text``)
    # The network layers Kueue places the flavor's jobs by (facts/topology.py): 0 = no Topology.
    network_layers: int = 0
    windowed: bool = False  # a capacity-block group that follows its block's window

    @property
    def topology(self) -> str | None:
        """The name of the flavor's Kueue Topology, or None."""
        return topology.topology_name(self.network_layers) if self.network_layers else None

    @property
    def levels(self) -> tuple[str, ...]:
        """The levels of the flavor's Topology, coarse to fine (empty without one)."""
        return topology.levels(self.network_layers)

    first_nodes: int = 0  # the nodes the group starts with (``desiredSize``): fewer when the autoscaler adds them


@dataclass(frozen=True)
class GroupSupply:
    """How many nodes a GPU group holds when it runs, which is what its flavor's quota may count:
    an autoscaled group its ``maxSize`` (the autoscaler adds nodes for waiting pods); a capacity-block
    group with a window its ``maxSize`` too (the scheduled action scales it to that at the block's
    start, and preflight checks ``maxSize`` against the block's instance count); any other group its
    fixed ``desiredSize``."""

    nodes: int
    autoscaled: bool
    windowed: bool  # a capacity block whose window the group follows

    @property
    def text(self) -> str:
        if self.autoscaled:
            return f"maxSize {self.nodes}"
        if self.windowed:
            return f"maxSize {self.nodes} (capacity block, during its window)"
        return f"fixed size {self.nodes} (not autoscaled)"


def group_supply(g: Any, autoscaling_enabled: bool) -> GroupSupply:
    """What group ``g`` can supply (``GroupSupply``)."""
    scaled = autoscaling_enabled and g.autoscaled
    windowed = not scaled and g.capacity_block_window is not None
    return GroupSupply(g.max_size if scaled or windowed else g.desired_size, scaled, windowed)


def flavor_of(g: Any, autoscaling_enabled: bool, services: NodeServices) -> Flavor:
    supply = group_supply(g, autoscaling_enabled)
    nodes, scaled = supply.nodes, supply.autoscaled
    labels = {NODE_GROUP_LABEL: g.name, **g.labels}
    if g.instance.accelerator:
        labels[ACCELERATOR_LABEL] = g.instance.accelerator
    return Flavor(
        name=g.name,
        instance_type=g.instance_type,
        nodes=nodes,
        autoscaled=scaled,
        per_node=node_allocatable(g, services),
        node_labels=labels,
        tolerations=[dict(GPU_TOLERATION)] + [toleration(t.model_dump(by_alias=True)) for t in g.taints],
        sizing=supply.text,
        network_layers=topology.group_layers(g.instance, g.efa_interfaces),
        windowed=supply.windowed,
        first_nodes=g.desired_size,
    )
