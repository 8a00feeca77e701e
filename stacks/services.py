"""What the cluster services of one environment share while they are registered (``Services``): the
config, the cluster and its network, the provider's options, the stack outputs so far, and what the
jobs will need from the services (stacks/cluster_services.py fills it in, one service at a time;
stacks/kueue_services.py adds Kueue and the queues).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.cluster import Cluster
from components.network import Network
from components.sagemaker import SharedFileSystem
from components.training_jobs import JobNeeds
from stacks.config import StackConfig


@dataclass
class Services:
    """What the services build on, and what the jobs will need from them."""

    cfg: StackConfig
    gpu_az: str
    network: Network
    cluster: Cluster
    tags: dict[str, str]
    namespace: k8s.core.v1.Namespace
    k8s_component: pulumi.ResourceOptions  # a component whose children go through the k8s provider
    cluster_ready: list[pulumi.Resource]  # what add-ons wait for
    outputs: dict[str, Any]
    job_needs: JobNeeds = field(default_factory=JobNeeds)  # what the jobs' objects may wait for, by name
    claims: dict[str, str] = field(default_factory=dict)
    file_systems: dict[str, SharedFileSystem] = field(default_factory=dict)  # what SageMaker jobs read
    etcd_endpoint: str | None = None
    job_queues: dict[str, str] = field(
        default_factory=dict
    )  # team ("" = none) -> LocalQueue of its jobs; empty without queues
    provisioning_request_crd: pulumi.Resource | None = None  # the ProvisioningRequest API, when installed
    gpu_node_group_names: dict[str, str] = field(default_factory=dict)  # GPU group -> its EKS node group (built ones)
    gpu_node_groups: dict[str, pulumi.Resource] = field(default_factory=dict)  # GPU group -> its node group resource
