"""Etcd: an etcd cluster for PyTorch's etcd rendezvous, in the training namespace, on system nodes.

PyTorch's etcd rendezvous backends speak the etcd v2 API, so the image is etcd 3.5 with
``--enable-v2`` (3.6 removed the v2 API). With more than one member, members spread over nodes and a
PodDisruptionBudget keeps a quorum.

Members keep their data in an emptyDir and rejoin by themselves when their pod is replaced (a
node-group update drains the node, node repair, a StatefulSet rolling update): an init container runs
``scripts/etcd_member.py``, which removes the member's stale entry through a healthy peer, adds it back
and starts etcd as ``existing``; the data comes back from the other members. Chosen over persistent
volumes: EBS volumes are zonal (a member would be pinned to one AZ of the system nodes and wait when
that AZ has no node with room), they need the EBS CSI driver and its IAM role, and volume claims of a
StatefulSet outlive ``pulumi destroy`` as orphaned volumes. Rendezvous state is short-lived and is kept
by the quorum; only a loss of the majority at once loses it (README, "Day two").
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from facts.kube import PART_OF

CLIENT_PORT = 2379
PEER_PORT = 2380
# The start-up script of every member (the init container), shipped in a ConfigMap.
MEMBER_SCRIPT = Path(__file__).parent / "scripts" / "etcd_member.py"
SCRIPT_DIR = "/opt/etcd-member"
DATA_DIR = "/var/lib/etcd"
CONFIG_FILE = "/run/etcd/etcd.json"


@dataclass
class EtcdArgs:
    namespace: pulumi.Input[str]  # namespace of the objects (the training namespace's output, so they wait for it)
    namespace_name: str  # the same namespace as plain text, for the members' DNS names, the cluster token and the endpoint
    image: str  # etcd image, 3.5 (3.6 removed the v2 API, --enable-v2, that PyTorch's etcd rendezvous needs)
    member_image: str  # image with python3 that runs the members' start-up script (the etcd image has no shell)
    replicas: int = 1  # members: 1, 3 or 5; above 1 they spread over nodes and a PodDisruptionBudget keeps a quorum
    cpu: str = "250m"  # CPU request per member
    memory: str = "512Mi"  # memory request and limit per member
    node_selector: dict[str, str] = field(default_factory=dict)  # node labels the members must run on (the system group); empty: any node
    name: str = "etcd"  # name of the StatefulSet and client Service (peers: <name>-peers), and the instance label


def initial_cluster(name: str, namespace: str, replicas: int, port: int = PEER_PORT) -> str:
    """``<member>=http://<member>.<name>-peers.<namespace>.svc:<port>,...`` of every member."""
    peers = f"{name}-peers.{namespace}.svc"
    return ",".join(f"{name}-{i}=http://{name}-{i}.{peers}:{port}" for i in range(replicas))


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
        # The etcd flags; the init container writes them, with the start state it chose, as etcd's config file.
        etcd_flags = [
            "--name=$(POD_NAME)",
            f"--data-dir={DATA_DIR}",
            "--enable-v2=true",
            f"--listen-client-urls=http://0.0.0.0:{CLIENT_PORT}",
            f"--advertise-client-urls=http://{peer_host}:{CLIENT_PORT}",
            f"--listen-peer-urls=http://0.0.0.0:{PEER_PORT}",
            f"--initial-advertise-peer-urls=http://{peer_host}:{PEER_PORT}",
            f"--initial-cluster={initial_cluster(app, args.namespace_name, args.replicas)}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token={app}-{args.namespace_name}",
        ]
        script = MEMBER_SCRIPT.read_text()
        script_map = k8s.core.v1.ConfigMap(
            f"{name}-member-script",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{app}-member", namespace=args.namespace, labels=labels),
            data={MEMBER_SCRIPT.name: script},
            opts=child,
        )
        member_command = [
            "python3",
            f"{SCRIPT_DIR}/{MEMBER_SCRIPT.name}",
            f"--config-file={CONFIG_FILE}",
            f"--peer-client-urls={initial_cluster(app, args.namespace_name, args.replicas, CLIENT_PORT)}",
            "--",
            *etcd_flags,
        ]
        command = ["/usr/local/bin/etcd", f"--config-file={CONFIG_FILE}"]
        pod_name_env = k8s.core.v1.EnvVarArgs(
            name="POD_NAME",
            value_from=k8s.core.v1.EnvVarSourceArgs(field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path="metadata.name")),
        )
        mounts = [
            k8s.core.v1.VolumeMountArgs(name="data", mount_path=DATA_DIR),
            k8s.core.v1.VolumeMountArgs(name="run", mount_path=str(Path(CONFIG_FILE).parent)),
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
                    # A new script rolls the members (each rejoins), so every member runs the same one.
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels=labels, annotations={"gputraining/member-script-sha256": hashlib.sha256(script.encode()).hexdigest()}
                    ),
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
                        init_containers=[
                            k8s.core.v1.ContainerArgs(
                                name="member",
                                image=args.member_image,
                                command=member_command,
                                env=[pod_name_env],
                                resources=k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "50m", "memory": "64Mi"}, limits={"memory": "64Mi"}),
                                volume_mounts=[*mounts, k8s.core.v1.VolumeMountArgs(name="member-script", mount_path=SCRIPT_DIR, read_only=True)],
                            )
                        ],
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="etcd",
                                image=args.image,
                                command=command,
                                env=[pod_name_env],
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
                                volume_mounts=mounts,
                            )
                        ],
                        volumes=[
                            k8s.core.v1.VolumeArgs(name="data", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs()),
                            k8s.core.v1.VolumeArgs(name="run", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs()),
                            k8s.core.v1.VolumeArgs(name="member-script", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=script_map.metadata.name)),
                        ],
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
