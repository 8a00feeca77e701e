"""BurnIn: new GPU nodes prove themselves before they take work.

Every GPU group with burn-in joins its nodes with ``facts.kube.BURN_IN_TAINT`` (an EKS node-group
taint, so the kubelet registers the node with it and no training pod ever lands before the check).
This component runs the check: a DaemonSet in kube-system on those groups' nodes, tolerating every
taint, whose init containers

1. ``gate`` (``scripts/burn_in.py``): checks only a node that carries the taint, and releases unchecked
   one that has served work (a verdict label of one, or pods of its own): EKS puts a group's new taint
   on its running nodes too (UpdateNodegroupConfig: "the taints to be applied to the nodes in the node
   group after the update"); a node older than a new one can be at its first check is judged on its
   present state only, not on its past jobs' ECC counts and Xids;
2. ``loopback`` (optional, off by default): nccl-tests' ``all_reduce_perf`` over the node's own GPUs;
3. ``check``: nvidia-smi (every GPU of the type's model, no uncorrectable ECC error, none lost),
   the kernel log (no Xid but the application ones), /sys/class/infiniband (every EFA interface of
   the group), decided by ``scripts/burn_in_decisions.py``; passed: the taint is removed and the node
   labelled ``gputraining/burn-in=passed``; failed: the taint stays, the node is labelled
   ``gputraining/burn-in=failed-<reasons>`` and gets a Warning event ``BurnInFailed``;
4. ``replace``: after a failure, while fewer than ``MAX_REPLACEMENTS`` nodes of the group were replaced
   in the last ``REPLACEMENT_WINDOW_SECONDS`` (the ConfigMap ``REPLACEMENTS``, shared by every node's
   check), ``aws autoscaling set-instance-health --health-status Unhealthy
   --no-should-respect-grace-period`` on the node's instance; EC2 Auto Scaling then terminates it and
   launches a replacement in the node group's ASG (EKS makes one per managed node group, with the
   tags ``eks:cluster-name`` and ``eks:nodegroup-name`` this role's policy is scoped by). Past the bound
   the node stays tainted and labelled, with a Warning event ``BurnInReplacementHeld``.

The main container, ``watch``, reads its node every ``WATCH_SECONDS`` for the pod's life: a node in
service that gets the taint after the gate ran (the node group's update reaches running nodes in its
own time) is released at once, so none is left tainted for good. The DaemonSet is also ordered after
the node groups (``BurnInArgs.node_groups``), so the ``up`` that turns burn-in on updates them first.

Why not EKS node auto repair: it acts on the conditions the node monitoring agent sets (and on
NodeReady), never on a taint of ours, and this check does not write the agent's conditions (that would
fool it).

GPU access without holding GPUs: no container requests ``nvidia.com/gpu``; the EKS AL2023 NVIDIA AMI
makes the NVIDIA container runtime containerd's default, and it mounts every GPU, nvidia-smi and NVML
into a container whose environment says NVIDIA_VISIBLE_DEVICES=all (see facts/versions.py,
BURN_IN_IMAGE). The check container is privileged to read the kernel log (/dev/kmsg).

What the pod holds of its node for its whole life is its effective request: the larger of its largest
init container's and the sum of its containers' (Kubernetes, "Init Containers", resource sharing
within containers); ``facts/allocatable.py`` (BURN_IN, BURN_IN_LOOPBACK) has the figures the queues'
quotas subtract, and tests/test_burn_in.py holds them to this pod.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.iam import pod_identity_association, pod_identity_role, policy_document
from facts.kube import (
    BURN_IN_LABEL,
    BURN_IN_MAX_REPLACEMENTS,
    BURN_IN_REPLACEMENT_WINDOW_SECONDS,
    BURN_IN_TAINT,
    NODE_GROUP_LABEL,
    PART_OF,
)
from jobs.nccl_test import NCCL_ALL_REDUCE_PERF

NAMESPACE = "kube-system"
NAME = "gputraining-burn-in"
SCRIPT = Path(__file__).parent / "scripts" / "burn_in.py"
DECISIONS = SCRIPT.with_name("burn_in_decisions.py")
# The fabric rule of the jobs' checks, which the decisions apply to the loopback test's NCCL lines.
FABRIC_RULE = Path(__file__).parent.parent / "jobs" / "scripts" / "fabric_rule.py"
SCRIPT_DIR = "/opt/burn-in"
STATE_DIR = "/run/burn-in"
TOLERATE_ALL = [{"operator": "Exists"}]
# The ConfigMap counting each group's replacements (group -> JSON list of epoch seconds), and the bound:
# at most MAX_REPLACEMENTS of a group's nodes marked Unhealthy in any REPLACEMENT_WINDOW_SECONDS.
REPLACEMENTS = f"{NAME}-replacements"
MAX_REPLACEMENTS = BURN_IN_MAX_REPLACEMENTS
REPLACEMENT_WINDOW_SECONDS = BURN_IN_REPLACEMENT_WINDOW_SECONDS
# How often the watch container reads its node.
WATCH_SECONDS = 15
# The loopback test: 8 B to 256 MiB, doubling, over every GPU of the node in one process, with a
# result check per size (-c 1); a few seconds on A100/H100.
LOOPBACK_ARGS = "-b 8 -e 256M -f 2 -c 1"
# NCCL's init and network lines in the test's log, for the fabric rule (burn_in_decisions.loopback_result).
LOOPBACK_NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


@dataclass(frozen=True)
class GroupExpectation:
    """What every node of one GPU group must show."""

    group: str  # the node-group label value
    node_group_name: str  # the EKS node group (its ASG's eks:nodegroup-name tag)
    instance_type: str
    gpus: int
    gpu_model: str  # the catalog's model ("A100")
    efa: int  # EFA interfaces the group's launch template attaches
    loopback: bool = False  # the group's nodes also run the NCCL loopback test


@dataclass
class BurnInArgs:
    cluster_name: str  # the EKS cluster (the Pod Identity association, the IAM condition)
    region: str  # AWS region of the cluster (the AWS CLI's region: Pod Identity gives credentials only)
    groups: Sequence[GroupExpectation]  # the GPU groups whose nodes join with the burn-in taint
    image: str  # python3 image of the check
    replace_image: str  # AWS CLI v2 image that marks a failed instance Unhealthy
    loopback_image: str | None = None  # nccl-tests image of the loopback test; None: no group has it
    depends_on: list[pulumi.Resource] = field(default_factory=list)  # what must exist first (Pod Identity agent)
    node_groups: list[pulumi.Resource] = field(default_factory=list)  # the burn-in groups: the DaemonSet comes after
    tags: dict[str, str] = field(default_factory=dict)  # tags on the IAM role and the association


def replace_policy(cluster_name: str, node_group_names: Sequence[str]) -> list[dict[str, Any]]:
    """SetInstanceHealth, only on the ASGs of this cluster's burn-in groups (EKS tags each managed node
    group's ASG with eks:cluster-name and eks:nodegroup-name; SetInstanceHealth takes the group's
    autoscaling:ResourceTag condition keys)."""
    return [
        {
            "Sid": "ReplaceFailedBurnIn",
            "Effect": "Allow",
            "Action": ["autoscaling:SetInstanceHealth"],
            "Resource": "*",
            "Condition": {
                "StringEquals": {
                    "autoscaling:ResourceTag/eks:cluster-name": cluster_name,
                    "autoscaling:ResourceTag/eks:nodegroup-name": sorted(node_group_names),
                }
            },
        }
    ]


def expectations(groups: Sequence[GroupExpectation]) -> dict[str, dict[str, Any]]:
    """The check's table: node-group label -> what its nodes must have."""
    return {
        g.group: {
            "instanceType": g.instance_type,
            "gpus": g.gpus,
            "gpuModel": g.gpu_model,
            "efa": g.efa,
            "loopback": g.loopback,
        }
        for g in sorted(groups, key=lambda g: g.group)
    }


def files(groups: Sequence[GroupExpectation]) -> dict[str, str]:
    """The ConfigMap's files: the script, its decisions, the fabric rule they use, the expectations."""
    return {
        SCRIPT.name: SCRIPT.read_text(),
        DECISIONS.name: DECISIONS.read_text(),
        FABRIC_RULE.name: FABRIC_RULE.read_text(),
        "expected.json": json.dumps(expectations(groups), indent=1, sort_keys=True) + "\n",
    }


def _env(extra: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "BURN_IN_STATE", "value": STATE_DIR},
        {"name": "BURN_IN_TAINT_KEY", "value": BURN_IN_TAINT["key"]},
        {"name": "BURN_IN_LABEL", "value": BURN_IN_LABEL},
        {"name": "NODE_GROUP_LABEL", "value": NODE_GROUP_LABEL},
        {"name": "BURN_IN_EXPECTED", "value": f"{SCRIPT_DIR}/expected.json"},
        {"name": "BURN_IN_REPLACEMENTS", "value": REPLACEMENTS},
        {"name": "BURN_IN_MAX_REPLACEMENTS", "value": str(MAX_REPLACEMENTS)},
        {"name": "BURN_IN_REPLACEMENT_WINDOW", "value": str(REPLACEMENT_WINDOW_SECONDS)},
        {"name": "BURN_IN_WATCH_SECONDS", "value": str(WATCH_SECONDS)},
    ]
    env += [{"name": k, "value": v} for k, v in (extra or {}).items()]
    return env


# Every GPU, nvidia-smi and NVML from the node's driver, through the default NVIDIA runtime.
GPU_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility,compute"}
MOUNTS = [{"name": "scripts", "mountPath": SCRIPT_DIR, "readOnly": True}, {"name": "state", "mountPath": STATE_DIR}]
SMALL = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
# The loopback test's requests are held for the pod's life (an init container's requests count in the
# pod's effective request), so they are small: the node runs nothing else while it is burnt in, the
# test may use more CPU (no CPU limit) and up to its memory limit.
LOOPBACK_RESOURCES = {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "16Gi"}}
WATCH_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}


def pod_spec(args: BurnInArgs) -> dict[str, Any]:
    """The DaemonSet's pod: the init containers in order, then an idle container."""
    python = ["python3", f"{SCRIPT_DIR}/{SCRIPT.name}"]
    init: list[dict[str, Any]] = [
        {
            "name": "gate",
            "image": args.image,
            "command": [*python, "gate"],
            "env": _env(),
            "volumeMounts": MOUNTS,
            "resources": SMALL,
        }
    ]
    if args.loopback_image:
        run = (
            f"if [ -f {STATE_DIR}/loopback ]; then {NCCL_ALL_REDUCE_PERF} {LOOPBACK_ARGS} "
            '-g "$(nvidia-smi -L | wc -l)" '
            f"> {STATE_DIR}/loopback.log 2>&1; cat {STATE_DIR}/loopback.log; fi"
        )
        init.append(
            {
                "name": "loopback",
                "image": args.loopback_image,
                "command": ["/bin/bash", "-c", run],
                "env": _env({**GPU_ENV, **LOOPBACK_NCCL_ENV}),
                "volumeMounts": MOUNTS,
                "resources": LOOPBACK_RESOURCES,
            }
        )
    init.append(
        {
            "name": "check",
            "image": args.image,
            "command": [*python, "check"],
            "env": _env(GPU_ENV),
            "volumeMounts": MOUNTS,
            "resources": SMALL,
            # /dev/kmsg (the kernel log: Xids) and sysfs of the host's devices.
            "securityContext": {"privileged": True},
        }
    )
    replace = (
        f'if [ -s {STATE_DIR}/replace ]; then id="$(cat {STATE_DIR}/replace)"; '
        f'echo "marking $id Unhealthy in its Auto Scaling group"; '
        'aws autoscaling set-instance-health --instance-id "$id" --health-status Unhealthy '
        "--no-should-respect-grace-period; fi"
    )
    init.append(
        {
            "name": "replace",
            "image": args.replace_image,
            "command": ["/bin/sh", "-c", replace],
            "env": _env({"AWS_REGION": args.region, "AWS_DEFAULT_REGION": args.region}),
            "volumeMounts": MOUNTS,
            "resources": SMALL,
        }
    )
    groups = sorted(g.group for g in args.groups)
    return {
        "serviceAccountName": NAME,
        "priorityClassName": "system-node-critical",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": NODE_GROUP_LABEL, "operator": "In", "values": groups}]}
                    ]
                }
            }
        },
        "tolerations": list(TOLERATE_ALL),
        "initContainers": init,
        "containers": [
            {
                "name": "watch",
                "image": args.image,
                "command": [*python, "watch"],
                "env": _env({"NVIDIA_VISIBLE_DEVICES": "void"}),
                "volumeMounts": MOUNTS,
                "resources": WATCH_RESOURCES,
            }
        ],
        "volumes": [
            {"name": "scripts", "configMap": {"name": NAME}},
            {"name": "state", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        ],
    }


class BurnIn(pulumi.ComponentResource):
    """The burn-in check of new GPU nodes; the Kubernetes provider comes through ``opts``."""

    def __init__(self, name: str, args: BurnInArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:BurnIn", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels: dict[str, str] = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": PART_OF}
        meta = k8s.meta.v1.ObjectMetaArgs(name=NAME, namespace=NAMESPACE, labels=labels)
        role = pod_identity_role(
            f"{name}-role",
            description=f"Burn-in of {args.cluster_name}'s GPU nodes: marks a failed node's instance Unhealthy",
            inline_policy=policy_document(replace_policy(args.cluster_name, [g.node_group_name for g in args.groups])),
            tags=args.tags,
            parent=self,
        )
        association = pod_identity_association(
            f"{name}-pod-identity",
            cluster_name=args.cluster_name,
            namespace=NAMESPACE,
            service_account=NAME,
            role=role,
            tags=args.tags,
            parent=self,
            depends_on=list(args.depends_on),
        )
        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=meta, opts=child)
        # Only what the check does: read its node, label it and take its taint off (patch), see whether
        # pods already run there (list), record events; and, in kube-system, read and update the one
        # ConfigMap that counts the groups' replacements (a Role limited to it by name).
        cluster_role = k8s.rbac.v1.ClusterRole(
            f"{name}-clusterrole",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=NAME, labels=labels),
            rules=[
                k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["nodes"], verbs=["get", "patch"]),
                k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["list"]),
                k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["events"], verbs=["create"]),
            ],
            opts=child,
        )
        k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=NAME, labels=labels),
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=NAME),
            subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=NAME, namespace=NAMESPACE)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster_role, account]),
        )
        counter = k8s.core.v1.ConfigMap(
            f"{name}-replacements",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=REPLACEMENTS, namespace=NAMESPACE, labels=labels),
            # The checks write its data; Pulumi only creates it.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["data"]),
        )
        counter_role = k8s.rbac.v1.Role(
            f"{name}-replacements-role",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=REPLACEMENTS, namespace=NAMESPACE, labels=labels),
            rules=[
                k8s.rbac.v1.PolicyRuleArgs(
                    api_groups=[""], resources=["configmaps"], resource_names=[REPLACEMENTS], verbs=["get", "update"]
                )
            ],
            opts=child,
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-replacements-binding",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=REPLACEMENTS, namespace=NAMESPACE, labels=labels),
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=REPLACEMENTS),
            subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=NAME, namespace=NAMESPACE)],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[counter_role, account]),
        )
        data = files(args.groups)
        config = k8s.core.v1.ConfigMap(f"{name}-scripts", metadata=meta, data=data, opts=child)
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
        # The pod spec is built as the Kubernetes API writes it (camelCase), which the provider takes as is.
        spec: Any = {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}},
            "template": {
                "metadata": {"labels": labels, "annotations": {"gputraining/burn-in-sha256": digest}},
                "spec": pod_spec(args),
            },
        }
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata=meta,
            spec=spec,
            # Its pods get AWS credentials at admission: the association must exist first. After the node
            # groups: the `up` that turns burn-in on puts the taint on running nodes before the new pods look.
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[association, config, account, counter, *args.node_groups]
            ),
        )
        self.register_outputs({"daemonSet": NAME})
