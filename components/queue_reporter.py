"""The queue reporter: a one-replica Deployment on the system nodes that prints, per Kueue
ClusterQueue, the queue signal lines (facts/job_signals.py) every minute (``scripts/queue_reporter.py``,
shipped in a ConfigMap, run by a stock python image). Its ServiceAccount may only list Kueue's
workloads, localqueues and clusterqueues.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

SCRIPT = Path(__file__).parent / "scripts" / "queue_reporter.py"
SCRIPT_DIR = "/opt/queue-reporter"
NAME = "gputraining-queue-reporter"
# The Kueue resources it reads, with the one verb it needs (no get/watch: it lists once a round).
RULES: Any = [
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues", "clusterqueues"], "verbs": ["list"]}
]
# Requests of its one container: a stdlib loop that lists three resources a minute.
# facts/allocatable.py QUEUE_REPORTER holds the same numbers (tests/test_alerts_queues.py compares them).
CPU_REQUEST, MEMORY_REQUEST = "10m", "32Mi"
MEMORY_LIMIT = "64Mi"


@dataclass
class QueueReporterArgs:
    image: str  # python3 image (standard library only)
    kueue_api: str  # group/version of Kueue's API, e.g. kueue.x-k8s.io/v1beta2
    signal_key: str  # the key of the signal lines
    node_selector: dict[str, str]  # the system nodes
    namespace: str = "kube-system"  # the namespace the reporter runs in


def script_digest() -> str:
    return hashlib.sha256(SCRIPT.read_bytes()).hexdigest()


def pod_spec(args: QueueReporterArgs) -> dict[str, Any]:
    env = {"QUEUE_REPORTER_KUEUE_API": args.kueue_api, "QUEUE_REPORTER_SIGNAL_KEY": args.signal_key}
    return {
        "serviceAccountName": NAME,
        "nodeSelector": args.node_selector,
        "containers": [
            {
                "name": "report",
                "image": args.image,
                "command": ["python3", f"{SCRIPT_DIR}/{SCRIPT.name}"],
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "resources": {
                    "requests": {"cpu": CPU_REQUEST, "memory": MEMORY_REQUEST},
                    "limits": {"memory": MEMORY_LIMIT},
                },
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65534,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True}],
            }
        ],
        "volumes": [{"name": "script", "configMap": {"name": NAME}}],
    }


class QueueReporter(pulumi.ComponentResource):
    def __init__(self, name: str, args: QueueReporterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:QueueReporter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        meta: Any = {"name": NAME, "namespace": args.namespace, "labels": {"app.kubernetes.io/name": NAME}}
        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=meta, opts=child)
        role = k8s.rbac.v1.ClusterRole(f"{name}-role", metadata={"name": NAME}, rules=RULES, opts=child)
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata={"name": NAME},
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=NAME),
            subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=NAME, namespace=args.namespace)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        script = k8s.core.v1.ConfigMap(
            f"{name}-script", metadata=meta, data={SCRIPT.name: SCRIPT.read_text()}, opts=child
        )
        labels = {"app.kubernetes.io/name": NAME}
        spec: Any = {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                # A new script rolls the pod (a mounted ConfigMap's change alone would not restart python).
                "metadata": {"labels": labels, "annotations": {"gputraining/script-sha256": script_digest()}},
                "spec": pod_spec(args),
            },
        }
        k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=meta,
            spec=spec,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[binding, script]),
        )
        self.register_outputs({})
