"""Etcd: an etcd cluster for PyTorch's etcd rendezvous, in the training namespace, on system nodes.

PyTorch's etcd rendezvous backends speak the etcd v2 API, so the image is etcd 3.5 with
``--enable-v2`` (3.6 removed the v2 API). Rendezvous state is short-lived, so members keep their
data in an emptyDir. With more than one member, members spread over nodes and a
PodDisruptionBudget keeps a quorum. Known limit: a member whose pod is replaced comes back empty
under the same name and cannot rejoin: restart all members together (README, "Cluster services");
persistent member volumes need the EBS CSI driver, which this stack does not install yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from facts.kube import PART_OF

CLIENT_PORT = 2379
PEER_PORT = 2380


@dataclass
class EtcdArgs:
    namespace: pulumi.Input[str]  # namespace of the objects (the training namespace's output, so they wait for it)
    namespace_name: str  # the same namespace as plain text, for the members' DNS names, the cluster token and the endpoint
    image: str  # etcd image, 3.5 (3.6 removed the v2 API, --enable-v2, that PyTorch's etcd rendezvous needs)
    replicas: int = 1  # members: 1, 3 or 5; above 1 they spread over nodes and a PodDisruptionBudget keeps a quorum
    cpu: str = "250m"  # CPU request per member
    memory: str = "512Mi"  # memory request and limit per member
    node_selector: dict[str, str] = field(default_factory=dict)  # node labels the members must run on (the system group); empty: any node
    name: str = "etcd"  # name of the StatefulSet and client Service (peers: <name>-peers), and the instance label


def initial_cluster(name: str, namespace: str, replicas: int) -> str:
    peers = f"{name}-peers.{namespace}.svc"
    return ",".join(f"{name}-{i}=http://{name}-{i}.{peers}:{PEER_PORT}" for i in range(replicas))


class Etcd(pulumi.ComponentResource):
    def __init__(self, name: str, args: EtcdArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gputraining:components:Etcd", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        app = args.name
        labels = {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": app, "app.kubernetes.io/part-of": PART_OF}
        peers = f"{app}-peers"
        peer_host = f"$(POD_NAME).{peers}.{args.namespace_name}.svc"

        k8s.core.v1.Service(
            f"{name}-peers",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=peers, namespace=args.namespace, labels=labels),
            spec=k8s.core.v1.ServiceSpecArgs(
                cluster_ip="None",
                publish_not_ready_addresses=True,  # members must find each other before they are ready
                selector=labels,
                ports=[
                    k8s.core.v1.ServicePortArgs(name="client", port=CLIENT_PORT),
                    k8s.core.v1.ServicePortArgs(name="peer", port=PEER_PORT),
                ],
            ),
            opts=child,
        )
        client = k8s.core.v1.Service(
            f"{name}-client",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=app, namespace=args.namespace, labels=labels),
            spec=k8s.core.v1.ServiceSpecArgs(
                type="ClusterIP",
                selector=labels,
                ports=[k8s.core.v1.ServicePortArgs(name="client", port=CLIENT_PORT, target_port=CLIENT_PORT)],
            ),
            opts=child,
        )
        command = [
            "/usr/local/bin/etcd",
            "--name=$(POD_NAME)",
            "--data-dir=/var/lib/etcd",
            "--enable-v2=true",
            f"--listen-client-urls=http://0.0.0.0:{CLIENT_PORT}",
            f"--advertise-client-urls=http://{peer_host}:{CLIENT_PORT}",
            f"--listen-peer-urls=http://0.0.0.0:{PEER_PORT}",
            f"--initial-advertise-peer-urls=http://{peer_host}:{PEER_PORT}",
            f"--initial-cluster={initial_cluster(app, args.namespace_name, args.replicas)}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={app}-{args.namespace_name}",
        ]
        health = k8s.core.v1.HTTPGetActionArgs(path="/health", port=CLIENT_PORT)
        self.stateful_set = k8s.apps.v1.StatefulSet(
            f"{name}-members",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=app, namespace=args.namespace, labels=labels),
            spec=k8s.apps.v1.StatefulSetSpecArgs(
                service_name=peers,
                replicas=args.replicas,
                pod_management_policy="Parallel",
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        node_selector=args.node_selector or None,
                        # One member per node where possible, so a node drain takes one member.
                        affinity=k8s.core.v1.AffinityArgs(
                            pod_anti_affinity=k8s.core.v1.PodAntiAffinityArgs(
                                preferred_during_scheduling_ignored_during_execution=[
                                    k8s.core.v1.WeightedPodAffinityTermArgs(
                                        weight=100,
                                        pod_affinity_term=k8s.core.v1.PodAffinityTermArgs(
                                            topology_key="kubernetes.io/hostname",
                                            label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                                        ),
                                    )
                                ]
                            )
                        )
                        if args.replicas > 1
                        else None,
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="etcd",
                                image=args.image,
                                command=command,
                                env=[
                                    k8s.core.v1.EnvVarArgs(
                                        name="POD_NAME",
                                        value_from=k8s.core.v1.EnvVarSourceArgs(field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path="metadata.name")),
                                    )
                                ],
                                ports=[
                                    k8s.core.v1.ContainerPortArgs(name="client", container_port=CLIENT_PORT),
                                    k8s.core.v1.ContainerPortArgs(name="peer", container_port=PEER_PORT),
                                ],
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": args.cpu, "memory": args.memory},
                                    limits={"memory": args.memory},
                                ),
                                readiness_probe=k8s.core.v1.ProbeArgs(http_get=health, period_seconds=5, failure_threshold=3),
                                liveness_probe=k8s.core.v1.ProbeArgs(http_get=health, initial_delay_seconds=15, period_seconds=10, failure_threshold=6),
                                volume_mounts=[k8s.core.v1.VolumeMountArgs(name="data", mount_path="/var/lib/etcd")],
                            )
                        ],
                        volumes=[k8s.core.v1.VolumeArgs(name="data", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs())],
                    ),
                ),
            ),
            opts=child,
        )
        if args.replicas > 1:
            k8s.policy.v1.PodDisruptionBudget(
                f"{name}-pdb",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=app, namespace=args.namespace, labels=labels),
                spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(
                    min_available=args.replicas // 2 + 1,
                    selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                ),
                opts=child,
            )
        self.host = f"{app}.{args.namespace_name}.svc"
        self.port = CLIENT_PORT
        self.endpoint = f"{self.host}:{CLIENT_PORT}"
        self.client_service = client
        self.register_outputs({"endpoint": self.endpoint})
