"""The EKS managed add-ons a stack installs, with their pinned builds and configuration values:
one list that preflight checks against EKS (``describe_addon_versions``,
``describe_addon_configuration``) before `pulumi up`, and that a test holds against what the program
registers, so the two cannot drift apart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from facts import versions
from facts.kube import BURN_IN_TAINT, GPU_TAINT
from jobs.targets import toleration
from stacks.config import StackConfig


@dataclass(frozen=True)
class AddonPin:
    """One managed add-on as the stack installs it."""

    name: str  # EKS add-on name
    version: str  # the pinned build (vX.Y.Z-eksbuild.N)
    configuration_values: dict[str, Any] | None = None  # what the stack sends as configurationValues (None: nothing)


def addon_pins(cfg: StackConfig) -> list[AddonPin]:
    """Every managed add-on ``cfg`` makes the program install."""
    k8s = cfg.cluster.kubernetes_version
    pins = [
        AddonPin("vpc-cni", versions.VPC_CNI_ADDON),
        AddonPin("kube-proxy", versions.KUBE_PROXY_ADDON[k8s]),
        AddonPin("coredns", versions.COREDNS_ADDON[k8s]),
        AddonPin("eks-pod-identity-agent", versions.POD_IDENTITY_AGENT_ADDON),
    ]
    if cfg.gpu_node_groups:
        pins.append(
            AddonPin(
                "eks-node-monitoring-agent",
                versions.NODE_MONITORING_AGENT_ADDON[k8s],
                node_monitoring_agent_values(cfg),
            )
        )
    if cfg.storage.efs.enabled:
        pins.append(AddonPin("aws-efs-csi-driver", versions.EFS_CSI_ADDON))
    if cfg.storage.fsx.enabled:
        pins.append(AddonPin("aws-fsx-csi-driver", versions.FSX_CSI_ADDON))
    if cfg.monitoring.enabled:
        pins.append(AddonPin("amazon-cloudwatch-observability", versions.CLOUDWATCH_OBSERVABILITY_ADDON))
    return pins


def node_monitoring_agent_values(cfg: StackConfig) -> dict[str, Any]:
    """The node monitoring agent's chart values: its ``dcgm-server`` DaemonSet (the DCGM host engine
    the agent's GPU checks talk to) takes tolerations only from ``dcgmAgent.tolerations`` (default
    none), so without them it never runs on GPU nodes, the agent reports DCGMError and node auto
    repair reboots or replaces every GPU node. One toleration per taint a GPU node carries: the GPU
    taint, then each group's own taints in config order, each once, then the burn-in taint when a group
    has burn-in (the DCGM host engine must run while the node is checked: without it the agent reports
    DCGMError and auto repair would act on a node that is only being burnt in)."""
    tolerations: list[dict[str, str]] = []
    burn_in = [BURN_IN_TAINT] if any(cfg.burn_in_on(g) for g in cfg.gpu_node_groups) else []
    for taint in [GPU_TAINT, *(t.model_dump() for g in cfg.gpu_node_groups for t in g.taints), *burn_in]:
        if (wanted := toleration(taint)) not in tolerations:
            tolerations.append(wanted)
    return {"dcgmAgent": {"tolerations": tolerations}}


def addon_version(cfg: StackConfig, name: str) -> str:
    """The build of add-on ``name`` the stack installs (the environment wiring reads it here, so the
    program and preflight pin the same builds)."""
    return next(p.version for p in addon_pins(cfg) if p.name == name)


def addon_configuration(cfg: StackConfig, name: str) -> str | None:
    """The configuration values of add-on ``name`` as the JSON text EKS takes (None: none sent);
    from the same pin preflight validates."""
    values = next(p.configuration_values for p in addon_pins(cfg) if p.name == name)
    return None if values is None else json.dumps(values, sort_keys=True)
