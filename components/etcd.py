"""Etcd: an etcd cluster for PyTorch's etcd rendezvous, in the training namespace, on system nodes.

PyTorch's etcd rendezvous backends speak the etcd v2 API, so the image is etcd 3.5 with
``--enable-v2`` (3.6 removed the v2 API). With more than one member, members spread over nodes and a
PodDisruptionBudget keeps a quorum.

Members keep their data in an emptyDir and heal by themselves from any loss: the ``member`` container
(a sidecar: an init container with ``restartPolicy: Always``) runs ``scripts/etcd_member.py``, which
writes etcd's config file before etcd starts and then watches. A replaced member (a drained or repaired
node, a rolling update) rejoins through a healthy peer and gets the data back. When a majority is lost
at once (a node held two of three members: anti-affinity is only preferred, and the budget limits only
voluntary evictions), the survivors keep their data but have no leader; just enough of the empty
members start under their old entries to make the quorum again, the survivors elect a leader and the
keys they had are kept. When all are lost, the empty members start a new cluster (a new token, so no
member of an old one can mix with it). A member cut off while the others started anew, or on the
losing side of two clusters, stops its etcd (the pod shares its process namespace), wipes its data and
rejoins. The decisions and their limits: the docstring of ``scripts/etcd_member_decisions.py``, which
the script imports (both ship in the same ConfigMap).

Chosen over persistent volumes: EBS volumes are zonal (a member would be pinned to one AZ of the
system nodes and wait when that AZ has no node with room), they need the EBS CSI driver and its IAM
role, and volume claims of a StatefulSet outlive ``pulumi destroy`` as orphaned volumes. Nor would
volumes heal a lost majority by themselves: a member whose node failed comes back with its data only
when its volume is attached again, after the failed node's detach timeout and only on a node of the
same AZ. The quorum recovery is needed anyway, and with it volumes add nothing rendezvous state needs:
it is short-lived, a loss of the majority keeps what the survivors had, a loss of all loses it and jobs
rendezvous again (docs/day-two.md).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from facts.kube import PART_OF

CLIENT_PORT = 2379
PEER_PORT = 2380
MEMBER_PORT = (
    2390  # the member script's own port: its state (GET /member) for the peers, /started for the startup probe
)
# How the member script decides (seconds; docs/day-two.md): members that do not answer are waited for this
# long before a decision without them; a member without a leader while a peer is healthy starts again after
# STUCK_AFTER; without a leader anywhere (or etcd not running while a peer is healthy), after LOST_AFTER.
WAIT_FOR_PEERS = 10
STUCK_AFTER = 20
LOST_AFTER = 300
# The script of every member (its member sidecar: start-up and watch) and the module of its decisions, which
# it imports from its own directory: both shipped in one ConfigMap, mounted together at SCRIPT_DIR.
MEMBER_SCRIPT = Path(__file__).parent / "scripts" / "etcd_member.py"
MEMBER_DECISIONS = MEMBER_SCRIPT.with_name("etcd_member_decisions.py")
MEMBER_FILES = (MEMBER_SCRIPT, MEMBER_DECISIONS)
SCRIPT_DIR = "/opt/etcd-member"
DATA_DIR = "/var/lib/etcd"
CONFIG_FILE = "/run/etcd/etcd.json"


@dataclass
class EtcdArgs:
    namespace: pulumi.Input[str]  # namespace of the objects (the training namespace's output, so they wait for it)
    namespace_name: (
        str  # the same namespace as plain text, for the members' DNS names, the cluster token and the endpoint
    )
    image: str  # etcd image, 3.5 (3.6 removed the v2 API, --enable-v2, that PyTorch's etcd rendezvous needs)
    member_image: str  # image with python3 that runs the members' start-up script (the etcd image has no shell)
    replicas: int = 1  # members: 1, 3 or 5; above 1 they spread over nodes and a PodDisruptionBudget keeps a quorum
    cpu: str = "250m"  # CPU request per member
    memory: str = "512Mi"  # memory request and limit per member
    node_selector: dict[str, str] = field(
        default_factory=dict
    )  # node labels the members must run on (the system group); empty: any node
    name: str = "etcd"  # name of the StatefulSet and client Service (peers: <name>-peers), and the instance label


def initial_cluster(name: str, namespace: str, replicas: int, port: int = PEER_PORT) -> str:
    """``<member>=http://<member>.<name>-peers.<namespace>.svc:<port>,...`` of every member."""
    peers = f"{name}-peers.{namespace}.svc"
    return ",".join(f"{name}-{i}=http://{name}-{i}.{peers}:{port}" for i in range(replicas))


def scripts_sha256(scripts: dict[str, str]) -> str:
    """One digest of every file of the member script's ConfigMap (names and contents, in name order)."""
    digest = hashlib.sha256()
    for name in sorted(scripts):
        digest.update(f"{name}\0{len(scripts[name])}\0{scripts[name]}".encode())
    return digest.hexdigest()


class Etcd(pulumi.ComponentResource):
    def __init__(self, name: str, args: EtcdArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:Etcd", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        app = args.name
        labels = {
            "app.kubernetes.io/name": "etcd",
            "app.kubernetes.io/instance": app,
            "app.kubernetes.io/part-of": PART_OF,
        }
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
                    k8s.core.v1.ServicePortArgs(name="member", port=MEMBER_PORT),
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
        scripts = {path.name: path.read_text() for path in MEMBER_FILES}
        script_map = k8s.core.v1.ConfigMap(
            f"{name}-member-script",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{app}-member", namespace=args.namespace, labels=labels),
            data=scripts,
            opts=child,
        )
        member_command = [
            "python3",
            f"{SCRIPT_DIR}/{MEMBER_SCRIPT.name}",
            f"--config-file={CONFIG_FILE}",
            f"--peer-client-urls={initial_cluster(app, args.namespace_name, args.replicas, CLIENT_PORT)}",
            f"--member-urls={initial_cluster(app, args.namespace_name, args.replicas, MEMBER_PORT)}",
            f"--listen-url=http://0.0.0.0:{MEMBER_PORT}",
            f"--wait-for-peers={WAIT_FOR_PEERS}",
            f"--stuck-after={STUCK_AFTER}",
            f"--lost-after={LOST_AFTER}",
            "--",
            *etcd_flags,
        ]
        command = ["/usr/local/bin/etcd", f"--config-file={CONFIG_FILE}"]
        pod_name_env = k8s.core.v1.EnvVarArgs(
            name="POD_NAME",
            value_from=k8s.core.v1.EnvVarSourceArgs(
                field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path="metadata.name")
            ),
        )
        mounts = [
            k8s.core.v1.VolumeMountArgs(name="data", mount_path=DATA_DIR),
            k8s.core.v1.VolumeMountArgs(name="run", mount_path=str(Path(CONFIG_FILE).parent)),
        ]
        # Ready: the member has a leader. Alive: etcd answers a local read, leader or not (since 3.5.3), so a
        # member without a leader is not restarted for it (a restart would not bring one); the member script decides.
        health = k8s.core.v1.HTTPGetActionArgs(path="/health", port=CLIENT_PORT)
        alive = k8s.core.v1.HTTPGetActionArgs(path="/health?serializable=true", port=CLIENT_PORT)
        self.stateful_set = k8s.apps.v1.StatefulSet(
            f"{name}-members",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=app, namespace=args.namespace, labels=labels),
            spec=k8s.apps.v1.StatefulSetSpecArgs(
                service_name=peers,
                replicas=args.replicas,
                pod_management_policy="Parallel",
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    # A new script (any of its files) rolls the members (each rejoins), so every member runs
                    # the same one.
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels=labels, annotations={"gputraining/member-script-sha256": scripts_sha256(scripts)}
                    ),
                    spec=k8s.core.v1.PodSpecArgs(
                        node_selector=args.node_selector or None,
                        # The member script stops etcd (SIGTERM) when the member must start again empty.
                        share_process_namespace=True,
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
                                # A sidecar: it runs as long as the pod; etcd starts once the config file is written.
                                restart_policy="Always",
                                startup_probe=k8s.core.v1.ProbeArgs(
                                    http_get=k8s.core.v1.HTTPGetActionArgs(path="/started", port=MEMBER_PORT),
                                    period_seconds=1,
                                    failure_threshold=900,
                                ),
                                ports=[k8s.core.v1.ContainerPortArgs(name="member", container_port=MEMBER_PORT)],
                                env=[pod_name_env],
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "50m", "memory": "64Mi"}, limits={"memory": "64Mi"}
                                ),
                                volume_mounts=[
                                    *mounts,
                                    k8s.core.v1.VolumeMountArgs(
                                        name="member-script", mount_path=SCRIPT_DIR, read_only=True
                                    ),
                                ],
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
                                readiness_probe=k8s.core.v1.ProbeArgs(
                                    http_get=health, period_seconds=5, failure_threshold=3
                                ),
                                liveness_probe=k8s.core.v1.ProbeArgs(
                                    http_get=alive, initial_delay_seconds=15, period_seconds=10, failure_threshold=6
                                ),
                                volume_mounts=mounts,
                            )
                        ],
                        volumes=[
                            k8s.core.v1.VolumeArgs(name="data", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs()),
                            k8s.core.v1.VolumeArgs(name="run", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs()),
                            k8s.core.v1.VolumeArgs(
                                name="member-script",
                                config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=script_map.metadata.name),
                            ),
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
