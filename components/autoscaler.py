"""ClusterAutoscaler: the Kubernetes Cluster Autoscaler from its upstream Helm chart (vendored),
on the system nodes, with its own IAM role through EKS Pod Identity.

It discovers the node groups to scale by ASG tags (``gputraining/autoscale`` plus EKS's
``k8s.io/cluster-autoscaler/<cluster>``), so only the groups the stack marks are autoscaled; for a
group at zero nodes it builds the node it would get from the group's ASG tags (labels, taints,
extended resources: ``components/node_group.py`` writes them) and from the instance type.
The burn-in taint needs no flag: its key has the autoscaler's built-in startup-taint prefix
(``facts.kube.STARTUP_TAINT_PREFIX``), which it drops from every template node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.charts import verified
from components.iam import pod_identity_association, pod_identity_role, policy_document
from components.operators import load_manifest
from facts.kube import AUTOSCALE_TAG
from facts.versions import Chart, Vendored

SERVICE_ACCOUNT = "cluster-autoscaler"
NAMESPACE = "kube-system"
RELEASE = "cluster-autoscaler"  # the Helm release


# The value of the discovery tag on the groups the stack autoscales (``autoscaler_template_tags`` in
# components/node_group.py writes it; the autoscaler's auto-discovery matches the key alone).
DISCOVERY_TAG_VALUE = "true"


def scale_condition(cluster_name: str, discovery_tag: str) -> dict[str, dict[str, str]]:
    """The IAM condition on the write actions: the Auto Scaling group must carry both EKS's cluster
    tag and the stack's discovery tag. EKS tags the ASG of every managed node group of the cluster
    (the system group's too) with ``k8s.io/cluster-autoscaler/<cluster>: owned``; only the GPU groups
    the stack autoscales also carry the discovery tag. Two keys in one ``StringEquals`` block must
    both match (AND)."""
    return {
        "StringEquals": {
            f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned",
            f"aws:ResourceTag/{discovery_tag}": DISCOVERY_TAG_VALUE,
        }
    }


def autoscaler_policy(cluster_name: str, discovery_tag: str = AUTOSCALE_TAG) -> list[dict[str, Any]]:
    """The least privilege the autoscaler's AWS documentation lists: read the groups, instance types
    and launch templates everywhere; change desired capacity and terminate instances only in the
    groups it is meant to scale (the tag conditions of ``scale_condition``), never in the system
    group or another cluster's."""
    return [
        {
            "Sid": "Discover",
            "Effect": "Allow",
            "Action": [
                "autoscaling:DescribeAutoScalingGroups",
                "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeLaunchConfigurations",
                "autoscaling:DescribeScalingActivities",
                "ec2:DescribeImages",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplateVersions",
                "ec2:GetInstanceTypesFromInstanceRequirements",
                "eks:DescribeNodegroup",
            ],
            "Resource": "*",
        },
        {
            "Sid": "ScaleOwnGroups",
            "Effect": "Allow",
            "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
            "Resource": "*",
            "Condition": scale_condition(cluster_name, discovery_tag),
        },
    ]


def _crd(pinned: Vendored, root: Path) -> dict[str, Any]:
    """The one CustomResourceDefinition of a vendored CRD file (checked against its pin, parsed once)."""
    docs = load_manifest(root / pinned.file, pinned.sha256)
    if len(docs) != 1 or docs[0].get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{pinned.file}: expected one CustomResourceDefinition")
    return docs[0]


@dataclass
class ClusterAutoscalerArgs:
    """Inputs of ``ClusterAutoscaler``."""

    chart: Chart  # the vendored cluster-autoscaler chart package
    image_tag: str  # the autoscaler image tag, matching the cluster's Kubernetes minor
    cluster_name: str  # the EKS cluster (auto-discovery tag, IAM condition, Pod Identity)
    region: str  # AWS region the autoscaler calls
    node_selector: dict[str, str]  # where the autoscaler runs (the system nodes)
    scale_down_unneeded_time: str = "10m"  # how long a node must be unneeded before it is removed
    scale_down_delay_after_add: str = "10m"  # no scale-down this long after a scale-up
    expander: str = (
        "least-waste"  # which group to grow when several fit (not `priority`: no priorities ConfigMap is written)
    )
    # The vendored ProvisioningRequest CRD and its pinned sha256: given, the CRD is installed (Kueue
    # sets up its ProvisioningRequest controller only if the API is served when it starts); None: not.
    provisioning_request_crd: Vendored | None = None
    serve_provisioning_requests: bool = False  # the autoscaler acts on ProvisioningRequests (needs the CRD)
    discovery_tag: str = AUTOSCALE_TAG  # our ASG tag marking the groups to autoscale (NodeGroup writes it)
    project_root: Path = Path(".")  # where the chart path is relative to (the program's working directory)
    depends_on: list[pulumi.Resource] = field(
        default_factory=list
    )  # what must exist first (the Pod Identity agent, system nodes)
    tags: dict[str, str] = field(default_factory=dict)  # tags on the IAM role and the association


class ClusterAutoscaler(pulumi.ComponentResource):
    """The Cluster Autoscaler; the Kubernetes provider comes through ``opts``."""

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:ClusterAutoscaler", name, None, opts)
        if "priority" in args.expander.split(","):
            # The chart writes the cluster-autoscaler-priority-expander ConfigMap only from
            # `expanderPriorities`, which this component does not pass: without it the autoscaler
            # skips the priority expander and picks at random.
            raise ValueError(
                f"{name}: expander {args.expander!r}: the priority expander needs priorities this component does not "
                "write"
            )
        role = pod_identity_role(
            f"{name}-role",
            description=f"Cluster Autoscaler of {args.cluster_name}",
            inline_policy=policy_document(autoscaler_policy(args.cluster_name, args.discovery_tag)),
            tags=args.tags,
            parent=self,
        )
        association = pod_identity_association(
            f"{name}-pod-identity",
            cluster_name=args.cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            role=role,
            tags=args.tags,
            parent=self,
            depends_on=list(args.depends_on),
        )
        extra_args = {
            "scale-down-unneeded-time": args.scale_down_unneeded_time,
            "scale-down-delay-after-add": args.scale_down_delay_after_add,
            "expander": args.expander,
            # Training pods mount a memory-backed /dev/shm (emptyDir): that must not keep an
            # idle GPU node alive once the job is gone.
            "skip-nodes-with-local-storage": "false",
        }
        waits: list[pulumi.Resource] = [association, *args.depends_on]
        if args.serve_provisioning_requests and args.provisioning_request_crd is None:
            raise ValueError(f"{name}: serving ProvisioningRequests needs their CRD")
        # The ProvisioningRequest API, when given (the chart grants the autoscaler its RBAC but does not
        # ship the CRD; the autoscaler only watches the API when the CRD exists when it starts).
        self.provisioning_request_crd: pulumi.Resource | None = None
        if args.provisioning_request_crd is not None:
            crd = _crd(args.provisioning_request_crd, args.project_root)
            self.provisioning_request_crd = k8s.apiextensions.v1.CustomResourceDefinition(
                f"{name}-provisioningrequests-crd",
                metadata=crd["metadata"],
                spec=crd["spec"],
                opts=pulumi.ResourceOptions(parent=self),
            )
            waits.append(self.provisioning_request_crd)
        if args.serve_provisioning_requests:
            extra_args["enable-provisioning-requests"] = "true"
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE,
            chart=verified(args.chart, args.project_root),
            namespace=NAMESPACE,
            values={
                "cloudProvider": "aws",
                "awsRegion": args.region,
                # Only groups with both tags: the stack's autoscaled GPU groups of this cluster.
                "autoDiscovery": {
                    "clusterName": args.cluster_name,
                    "tags": [args.discovery_tag, f"k8s.io/cluster-autoscaler/{args.cluster_name}"],
                },
                "image": {"tag": args.image_tag},
                "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
                "nodeSelector": dict(args.node_selector),
                "extraArgs": extra_args,
            },
            # Its pod gets credentials at admission: the association must exist first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=waits),
        )
        self.register_outputs({"release": self.release.name})
