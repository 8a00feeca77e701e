"""TrainingJobs: registers what the job kinds build (``jobs/``) as Kubernetes objects, plus an IAM
role bound through EKS Pod Identity for every job that asks for AWS access (data-stage jobs: read
one S3 prefix).

Custom resources go through ``apiextensions.CustomResource``, core objects through the typed
classes. This component knows nothing of stack config: the stack hands it validated job specs and
a ``JobsContext``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.iam import pod_identity_association, pod_identity_trust_policy
from jobs.base import JobBase
from jobs.pod import JOB_LABEL, PRIORITY_CLASS_LABEL, QUEUE_LABEL
from jobs.registry import build_manifests
from jobs.targets import JobsContext


@dataclass
class JobNeeds:
    """What the stack built that a job's objects may need, each found by what an object names: its
    namespace, its kind (the operator that runs it), the claims its pods mount, etcd's host, its queue
    and priority class. An object waits for what it names only, never for a whole component (which
    Pulumi expands to every child: every job would then wait for hundreds of resources)."""

    namespaces: dict[str, pulumi.Resource] = field(default_factory=dict)  # namespace name -> its Namespace
    # (apiVersion, kind) -> what shows its operator serving: the operator's workloads, created after its
    # CRDs and webhook configurations (components/operators.py, VendoredOperator.ready).
    operators: dict[tuple[str, str], list[pulumi.Resource]] = field(default_factory=dict)
    # claim name -> its PersistentVolumeClaim (after its volume, which is after the file system is mountable)
    claims: dict[str, pulumi.Resource] = field(default_factory=dict)
    etcd_host: str = ""  # an object with a string naming it waits for ``etcd``
    etcd: list[pulumi.Resource] = field(default_factory=list)  # the members (ready) and the client Service
    # Kueue's release: a queued job created before its webhooks would start unsuspended, outside the queues.
    kueue: list[pulumi.Resource] = field(default_factory=list)
    # (kind, namespace or "", name) -> a Kueue object a job names: its LocalQueue, its WorkloadPriorityClass.
    queue_objects: dict[tuple[str, str, str], pulumi.Resource] = field(default_factory=dict)
    pod_identity: list[pulumi.Resource] = field(default_factory=list)  # the Pod Identity agent (associations)
    # A fleet manager's queues, registered once its workers' outputs are read: (kind, namespace, name) -> object.
    fleet_queues: pulumi.Output[dict[tuple[str, str, str], pulumi.Resource]] | None = None


@dataclass
class TrainingJobsArgs:
    """Inputs of ``TrainingJobs``."""

    jobs: Sequence[JobBase]  # validated job specs; disabled ones emit nothing
    context: JobsContext  # namespace, node-group targets, claims, etcd, placement of system pods
    tags: dict[str, str] = field(default_factory=dict)  # tags on the jobs' AWS resources (IAM roles)
    # What each job object waits for, by what it names (``needs_of``); children do not inherit a
    # component's depends_on.
    needs: JobNeeds = field(default_factory=JobNeeds)
    depends_on: list[pulumi.Resource] = field(default_factory=list)  # what every job object waits for besides


def _named_strings(value: Any, found: list[str]) -> None:
    """Every string of a manifest (keys' values, at any depth), into ``found``."""
    if isinstance(value, dict):
        for v in value.values():
            _named_strings(v, found)
    elif isinstance(value, list):
        for v in value:
            _named_strings(v, found)
    elif isinstance(value, str):
        found.append(value)


def _claims_of(value: Any, found: set[str]) -> None:
    """The PersistentVolumeClaims a manifest's pods mount (``persistentVolumeClaim.claimName``)."""
    if isinstance(value, dict):
        claim = value.get("persistentVolumeClaim")
        if isinstance(claim, dict) and isinstance(claim.get("claimName"), str):
            found.add(claim["claimName"])
        for v in value.values():
            _claims_of(v, found)
    elif isinstance(value, list):
        for v in value:
            _claims_of(v, found)


def needs_of(manifest: dict[str, Any], needs: JobNeeds) -> list[pulumi.Input[pulumi.Resource]]:
    """What the object of ``manifest`` must be created after: its namespace; the operator of its kind;
    the claims it mounts; etcd, when it names etcd's host; its LocalQueue, priority class and Kueue,
    when queued (labels of ``jobs/pod.py``)."""
    meta = manifest.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    labels = meta.get("labels") or {}
    out: list[pulumi.Input[pulumi.Resource]] = []
    if namespace in needs.namespaces:
        out.append(needs.namespaces[namespace])
    out += needs.operators.get((manifest["apiVersion"], manifest["kind"]), [])
    claims: set[str] = set()
    _claims_of(manifest.get("spec"), claims)
    out += [needs.claims[c] for c in sorted(claims) if c in needs.claims]
    if needs.etcd_host:
        strings: list[str] = []
        _named_strings(manifest.get("spec"), strings)
        if any(needs.etcd_host in s for s in strings):
            out += needs.etcd
    if QUEUE_LABEL in labels:
        out += needs.kueue
        for key in (("LocalQueue", namespace, labels[QUEUE_LABEL]), _priority_key(labels)):
            if key is not None and key in needs.queue_objects:
                out.append(needs.queue_objects[key])
            elif key is not None and needs.fleet_queues is not None and needs.kueue:
                out.append(needs.fleet_queues.apply(partial(_fleet_queue, key, needs.kueue[0])))
    return list(dict.fromkeys(out))


def _fleet_queue(
    key: tuple[str, str, str], kueue: pulumi.Resource, made: dict[tuple[str, str, str], pulumi.Resource]
) -> pulumi.Resource:
    """The fleet's queue object ``key`` names, or Kueue's release when the fleet has none of that name
    (the manager's run refuses such a job first: stacks/fleet_jobs.py)."""
    return made.get(key, kueue)


def _priority_key(labels: dict[str, str]) -> tuple[str, str, str] | None:
    name = labels.get(PRIORITY_CLASS_LABEL)
    return None if name is None else ("WorkloadPriorityClass", "", name)


_CORE_CLASSES: dict[tuple[str, str], Any] = {
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("v1", "Service"): k8s.core.v1.Service,
}


class TrainingJobs(pulumi.ComponentResource):
    """Registers the jobs' Kubernetes objects. The Kubernetes provider comes through ``opts``
    (``providers=[k8s_provider]`` or ``provider=``) and is inherited by every child."""

    def __init__(self, name: str, args: TrainingJobsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:TrainingJobs", name, None, opts)
        ctx = args.context
        self.resources: dict[str, list[pulumi.Resource]] = {}
        self._partition: pulumi.Output[str] | None = None
        enabled = [j for j in args.jobs if j.enabled]
        for spec in enabled:
            # A pod that needs AWS access must start with its credentials in place: Pod Identity
            # injects them at pod admission only if the association (and the role's policy) exist.
            identity = self._pod_identity(name, spec, ctx, args)
            created: list[pulumi.Resource] = list(identity)
            accounts: list[pulumi.Resource] = []
            config_maps: list[pulumi.Resource] = []  # what the job's pods mount (the progress guard)
            for manifest in build_manifests(spec, ctx):
                waits_for = list(args.depends_on) + needs_of(manifest, args.needs) + config_maps
                if manifest["kind"] not in (
                    "ServiceAccount",
                    "ConfigMap",
                    "Role",
                    "RoleBinding",
                    "ClusterRole",
                    "ClusterRoleBinding",
                ):
                    waits_for += identity + accounts  # its pods start with their service account in place
                res = self._register(name, manifest, waits_for)
                created.append(res)
                if manifest["kind"] == "ServiceAccount":
                    accounts.append(res)
                if manifest["kind"] == "ConfigMap":
                    config_maps.append(res)
            self.resources[spec.name] = created

        self.job_names = [j.name for j in enabled]
        self.register_outputs(
            {
                "jobs": self.job_names,
                "disabledJobs": [j.name for j in args.jobs if not j.enabled],
                "namespace": ctx.namespace,
            }
        )

    def _register(
        self, prefix: str, manifest: dict[str, Any], depends_on: list[pulumi.Input[pulumi.Resource]]
    ) -> pulumi.Resource:
        api, kind = manifest["apiVersion"], manifest["kind"]
        meta = manifest["metadata"]
        rname = f"{prefix}-{meta['name']}-{kind.lower()}"
        opts = pulumi.ResourceOptions(parent=self, depends_on=depends_on)
        if (api, kind) == ("v1", "ServiceAccount"):
            return k8s.core.v1.ServiceAccount(rname, metadata=meta, opts=opts)
        if (api, kind) == ("v1", "ConfigMap"):
            return k8s.core.v1.ConfigMap(rname, metadata=meta, data=manifest["data"], opts=opts)
        if (api, kind) == ("rbac.authorization.k8s.io/v1", "Role"):  # the guard's (jobs/fabric.py)
            return k8s.rbac.v1.Role(rname, metadata=meta, rules=manifest["rules"], opts=opts)
        if (api, kind) == ("rbac.authorization.k8s.io/v1", "RoleBinding"):
            return k8s.rbac.v1.RoleBinding(
                rname, metadata=meta, role_ref=manifest["roleRef"], subjects=manifest["subjects"], opts=opts
            )
        if (api, kind) == ("rbac.authorization.k8s.io/v1", "ClusterRole"):  # the slow-node check's (nodes)
            return k8s.rbac.v1.ClusterRole(rname, metadata=meta, rules=manifest["rules"], opts=opts)
        if (api, kind) == ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"):
            return k8s.rbac.v1.ClusterRoleBinding(
                rname, metadata=meta, role_ref=manifest["roleRef"], subjects=manifest["subjects"], opts=opts
            )
        cls = _CORE_CLASSES.get((api, kind))
        if cls is not None:
            res: pulumi.Resource = cls(rname, metadata=meta, spec=manifest["spec"], opts=opts)
            return res
        # A training job is a run: the operators do not carry a changed spec over to pods that
        # already exist, so a changed job is replaced (deleted first: its name is fixed).
        job_opts = pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(replace_on_changes=["spec"], delete_before_replace=True)
        )
        return k8s.apiextensions.CustomResource(
            rname, api_version=api, kind=kind, metadata=meta, spec=manifest["spec"], opts=job_opts
        )

    def _pod_identity(
        self, prefix: str, spec: JobBase, ctx: JobsContext, args: TrainingJobsArgs
    ) -> list[pulumi.Resource]:
        """The role, policy and Pod Identity association of a job that asks for AWS access."""
        if spec.pod_identity_policy("aws") is None:
            return []
        child = pulumi.ResourceOptions(parent=self)
        if self._partition is None:
            self._partition = aws.get_partition_output(opts=pulumi.InvokeOutputOptions(parent=self)).partition
        tags = {**args.tags, JOB_LABEL: spec.name}
        base = f"{prefix}-{spec.name}"
        role = aws.iam.Role(
            f"{base}-s3-read",
            # IAM role names are at most 64 characters; a prefix (at most 38) plus AWS's suffix fits.
            name_prefix=f"{spec.name[:30]}-stage-",
            assume_role_policy=pod_identity_trust_policy(),
            description=spec.pod_identity_description(ctx.namespace),
            tags=tags,
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{base}-s3-read",
            role=role.id,
            policy=self._partition.apply(lambda p: json.dumps(spec.pod_identity_policy(p))),
            opts=child,
        )
        association = pod_identity_association(
            f"{base}-pod-identity",
            cluster_name=ctx.cluster_name,
            namespace=ctx.namespace,
            service_account=spec.name,
            role=role,
            tags=tags,
            parent=self,
            depends_on=list(args.depends_on) + args.needs.pod_identity,
        )
        return [role, policy, association]
