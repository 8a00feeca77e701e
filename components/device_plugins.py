"""DevicePlugins: the NVIDIA and EFA Kubernetes device plugins, from their upstream Helm charts,
installed from the vendored chart packages (checked against their sha256 first).

The AL2023 NVIDIA AMI carries the driver and the EFA kernel module but neither device plugin; without
them no pod can request `nvidia.com/gpu` or `vpc.amazonaws.com/efa`. Both plugins tolerate every
taint: a GPU group may carry taints of its own (and its jobs tolerate them), and a plugin that does
not run there leaves those jobs Pending. Node affinity keeps each plugin on its own nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from components.charts import verified
from facts.kube import INSTANCE_TYPE_LABEL
from facts.versions import Chart

NVIDIA_RELEASE = "nvidia-device-plugin"  # the Helm releases
EFA_RELEASE = "aws-efa-k8s-device-plugin"
# Both plugins tolerate every taint; their node affinity keeps them on GPU / EFA nodes.
TOLERATE_ALL = [{"operator": "Exists"}]


@dataclass
class DevicePluginsArgs:
    nvidia_chart: Chart | None  # the vendored NVIDIA device plugin chart; None: do not install
    efa_chart: Chart | None  # the vendored EFA device plugin chart; None: do not install
    # Node label every GPU node carries / every EFA-enabled GPU node carries.
    gpu_node_label: dict[str, str] = field(default_factory=dict)  # the NVIDIA plugin's required node affinity
    efa_node_label: dict[str, str] = field(default_factory=dict)  # the EFA plugin's node selector
    # The EFA-capable instance types the stack runs (the EFA chart's node affinity lists types); empty: no EFA plugin.
    efa_instance_types: list[str] = field(default_factory=list)
    namespace: str = "kube-system"  # namespace of both Helm releases
    project_root: Path = Path(".")  # where the chart paths are relative to (the program's working directory)


def _require_labels(labels: dict[str, str]) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())
                        ]
                    }
                ]
            }
        }
    }


class DevicePlugins(pulumi.ComponentResource):
    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:DevicePlugins", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.nvidia: k8s.helm.v3.Release | None = None
        self.efa: k8s.helm.v3.Release | None = None

        if args.nvidia_chart:
            self.nvidia = k8s.helm.v3.Release(
                f"{name}-nvidia",
                name=NVIDIA_RELEASE,
                chart=verified(args.nvidia_chart, args.project_root),
                namespace=args.namespace,
                values={
                    # Only on GPU nodes, whatever their taints.
                    "affinity": _require_labels(args.gpu_node_label),
                    "tolerations": list(TOLERATE_ALL),
                    # MOFED mounts every uverbs device into GPU pods and clashes with the EFA plugin.
                    "mofedEnabled": False,
                    "gfd": {"enabled": False},
                    "nfd": {"enabled": False},
                },
                opts=child,
            )

        if args.efa_chart and args.efa_instance_types:
            self.efa = k8s.helm.v3.Release(
                f"{name}-efa",
                name=EFA_RELEASE,
                chart=verified(args.efa_chart, args.project_root),
                namespace=args.namespace,
                values={
                    # The chart's default tolerations leave out the GPU taint (and any other): without
                    # this it never runs on GPU nodes and no pod gets vpc.amazonaws.com/efa.
                    "tolerations": list(TOLERATE_ALL),
                    "nodeSelector": dict(args.efa_node_label),
                    "supportedInstanceLabels": {
                        "keys": [INSTANCE_TYPE_LABEL],
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
