"""DevicePlugins: the NVIDIA and EFA Kubernetes device plugins, from their upstream Helm charts.

The AL2023 NVIDIA AMI carries the driver and the EFA kernel module but neither device plugin; without
them no pod can request `nvidia.com/gpu` or `vpc.amazonaws.com/efa`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s


@dataclass
class DevicePluginsArgs:
    nvidia_chart_version: Optional[str]  # NVIDIA device plugin chart version; None: do not install
    nvidia_repo: str  # Helm repository URL of the NVIDIA device plugin chart
    efa_chart_version: Optional[str]  # EFA device plugin chart version; None: do not install
    efa_repo: str  # Helm repository URL of the EFA device plugin chart
    # The taint every GPU node carries ({key, value, effect}); both plugins tolerate it.
    gpu_taint: dict[str, str] = field(default_factory=dict)
    # Node label every GPU node carries / every EFA-enabled GPU node carries.
    gpu_node_label: dict[str, str] = field(default_factory=dict)  # the NVIDIA plugin's required node affinity
    efa_node_label: dict[str, str] = field(default_factory=dict)  # the EFA plugin's node selector
    # The EFA-capable instance types the stack runs (the EFA chart's node affinity lists types); empty: no EFA plugin.
    efa_instance_types: list[str] = field(default_factory=list)
    namespace: str = "kube-system"  # namespace of both Helm releases


def _require_labels(labels: dict[str, str]) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]}]
            }
        }
    }


class DevicePlugins(pulumi.ComponentResource):
    def __init__(self, name: str, args: DevicePluginsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gputraining:components:DevicePlugins", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        gpu_toleration = {"key": args.gpu_taint["key"], "operator": "Exists", "effect": args.gpu_taint["effect"]}
        self.nvidia: Optional[k8s.helm.v3.Release] = None
        self.efa: Optional[k8s.helm.v3.Release] = None

        if args.nvidia_chart_version:
            self.nvidia = k8s.helm.v3.Release(
                f"{name}-nvidia",
                name="nvidia-device-plugin",
                chart="nvidia-device-plugin",
                version=args.nvidia_chart_version,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=args.nvidia_repo),
                namespace=args.namespace,
                values={
                    # Only on GPU nodes, tolerating their taint.
                    "affinity": _require_labels(args.gpu_node_label),
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}, gpu_toleration],
                    # MOFED mounts every uverbs device into GPU pods and clashes with the EFA plugin.
                    "mofedEnabled": False,
                    "gfd": {"enabled": False},
                    "nfd": {"enabled": False},
                },
                opts=child,
            )

        if args.efa_chart_version and args.efa_instance_types:
            self.efa = k8s.helm.v3.Release(
                f"{name}-efa",
                name="aws-efa-k8s-device-plugin",
                chart="aws-efa-k8s-device-plugin",
                version=args.efa_chart_version,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=args.efa_repo),
                namespace=args.namespace,
                values={
                    # The chart's default tolerations leave out the GPU taint: without this it never
                    # runs on GPU nodes and no pod gets vpc.amazonaws.com/efa.
                    "tolerations": [gpu_toleration],
                    "nodeSelector": dict(args.efa_node_label),
                    "supportedInstanceLabels": {
                        "keys": ["node.kubernetes.io/instance-type"],
                        "values": sorted(args.efa_instance_types),
                    },
                },
                opts=child,
            )
        self.register_outputs(
            {
                "nvidiaRelease": self.nvidia.name if self.nvidia else None,
                "efaRelease": self.efa.name if self.efa else None,
            }
        )
