"""Queues: Kueue from its upstream Helm chart (vendored) and the queue objects of the stack, so that
a GPU job is admitted whole (every pod of it fits the quota at once) or waits, instead of
half-starting on the nodes there are.

- Kueue's webhooks only see the namespaces the stack queues jobs in (``managedJobsNamespaceSelector``),
  and only the job kinds the stack runs are integrations; the chart's defaults (every namespace but
  two, Pods, Deployments and StatefulSets included) would put a ``failurePolicy: Fail`` webhook in
  front of the system namespaces and the stack's own services.
- ``waitForPodsReady``: an admitted job whose pods do not all run in time gives its nodes back and
  queues again, with a growing backoff.
- One ResourceFlavor per GPU node group, ClusterQueues with quotas per flavor (in one cohort, so
  idle quota is lent), LocalQueues in the namespaces jobs are submitted to, WorkloadPriorityClasses,
  and optionally the Cluster Autoscaler's ProvisioningRequest admission check.
- Teams: a namespace each, an EKS access entry for the team's IAM role with a Kubernetes group, and
  that group bound in the namespace to Kueue's batch-user role (MPIJobs, PyTorchJobs, PaddleJobs and
  Jobs, which EKS's managed access policies do not cover: they are custom resources or need a queue)
  and to reading pods and their logs; an admission policy keeps their pods off the node
  (``components/team_policy.py``).

This component knows nothing of stack config: ``stacks/queues/`` derives every number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import yaml
from pulumi_kubernetes import _utilities as k8s_utilities

from components.charts import verified
from components.team_policy import TeamPodPolicy, TeamPodPolicyArgs
from facts.kube import PART_OF, TEAM_LABEL
from facts.versions import Chart

KUEUE_API = "kueue.x-k8s.io/v1beta2"
RELEASE = "kueue"  # the Helm release; the chart names its objects after it ("kueue-...")
# The ClusterRole the chart aggregates from every job kind's editor role and the queue viewers.
BATCH_USER_ROLE = f"{RELEASE}-batch-user-role"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
# On Kueue's pod template: the optional APIs served when it started. Kueue sets up its
# ProvisioningRequest controller only if the API is served at start (kueue v0.19.2 cmd/kueue/main.go,
# "Skipping provisioning controller setup"), so a change of them must restart it.
APIS_AT_START_ANNOTATION = "gputraining/kueue-apis-at-start"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Kueue's own settings the chart ships in its default configuration (charts/kueue values.yaml); the
# stack's settings are added to these.
_MANAGER_DEFAULTS: dict[str, Any] = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {
        "groupKindConcurrency": {
            "Job.batch": 5,
            "Pod": 5,
            "Workload.kueue.x-k8s.io": 10,
            "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }
    },
    "clientConnection": {"qps": 300, "burst": 500},
}


@dataclass(frozen=True)
class FlavorArgs:
    """A ResourceFlavor: one GPU node group."""

    name: str  # the flavor's name (the node group's)
    node_labels: Mapping[
        str, str
    ]  # labels every node of the group has (Kueue adds them to admitted pods' nodeSelector)
    tolerations: Sequence[Mapping[str, str]]  # tolerations of the group's taints (added to admitted pods)
    topology_name: str | None = None  # the Topology Kueue places the flavor's jobs by (None: by quota alone)


@dataclass(frozen=True)
class ResourceQuota:
    """One resource of one flavor in a ClusterQueue, as Kubernetes quantities."""

    name: str  # the resource, e.g. nvidia.com/gpu
    nominal: str  # nominal quota
    borrowing_limit: str | None = None  # most it may borrow from the cohort (None: no limit)
    lending_limit: str | None = None  # most of its nominal quota it lends (None: all)


@dataclass(frozen=True)
class ClusterQueueArgs:
    """A ClusterQueue."""

    name: str  # its name
    namespaces: Sequence[str]  # the namespaces whose LocalQueues may point at it
    quotas: Mapping[str, Sequence[ResourceQuota]]  # flavor -> its resources, in covered-resources order
    fair_share_weight: str | None = None  # its weight in fair sharing (teams), a quantity
    admission_check_flavors: Sequence[str] = ()  # flavors on which the ProvisioningRequest check runs


@dataclass(frozen=True)
class LocalQueueArgs:
    """A LocalQueue: where jobs of a namespace are submitted."""

    namespace: str  # its namespace
    name: str  # its name (what jobs' kueue.x-k8s.io/queue-name label names)
    cluster_queue: str  # the ClusterQueue it feeds


@dataclass(frozen=True)
class TeamArgs:
    """A team's namespace and access."""

    name: str  # the team
    namespace: str  # its namespace (created here)
    role_arn: str | None  # the IAM role given an access entry (None: no access entry)
    kubernetes_group: str  # the Kubernetes group of the access entry, bound in the namespace


@dataclass(frozen=True)
class ProvisioningArgs:
    """The Cluster Autoscaler's ProvisioningRequest admission check."""

    name: str  # the AdmissionCheck's and the ProvisioningRequestConfig's name
    provisioning_class: str  # e.g. best-effort-atomic-scale-up.autoscaling.x-k8s.io
    managed_resources: Sequence[str]  # pod sets asking for these get a ProvisioningRequest


@dataclass
class QueuesArgs:
    """Inputs of ``Queues``."""

    chart: Chart  # the vendored Kueue chart package
    image_repository: str  # the Kueue controller image (pinned in facts/versions.py)
    image_tag: str  # its tag
    node_selector: dict[str, str]  # where the controller runs (the system nodes)
    managed_namespaces: Sequence[str]  # the only namespaces Kueue's job webhooks and controllers look at
    integrations: Sequence[str]  # Kueue frameworks: exactly the job kinds the stack queues
    pods_ready_timeout: str  # waitForPodsReady.timeout (a Go duration)
    requeue_limit: int | None  # requeues after a timeout before a job is deactivated (None: no limit)
    backoff_base_seconds: int  # first wait before a timed-out job queues again (doubles each time)
    backoff_max_seconds: int  # the longest such wait
    fair_sharing: bool  # share idle quota between the cohort's queues by their weights
    cohort: str  # the cohort of every ClusterQueue
    covered_resources: Sequence[str]  # what the ClusterQueues count (and only that)
    flavors: Sequence[FlavorArgs]  # the ResourceFlavors
    cluster_queues: Sequence[ClusterQueueArgs]  # the ClusterQueues
    local_queues: Sequence[LocalQueueArgs]  # the LocalQueues
    priorities: Mapping[str, int]  # WorkloadPriorityClass name -> value
    cluster_name: str  # the EKS cluster (teams' access entries)
    namespace: str = "kueue-system"  # Kueue's own namespace
    teams: Sequence[TeamArgs] = ()  # teams: namespace, access entry, role bindings
    provisioning: ProvisioningArgs | None = None  # the ProvisioningRequest admission check, if any
    # The Topologies the flavors name: name -> node labels, coarse to fine.
    topologies: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # Optional APIs Kueue looks for once, when it starts (the ProvisioningRequest CRD): they must exist
    # before the release (``depends_on``), and a change of this list restarts Kueue (a pod annotation).
    apis_at_start: Sequence[str] = ()
    project_root: Path = Path(".")  # where the chart path is relative to
    depends_on: list[pulumi.Resource] = field(default_factory=list)  # what must exist first (the cluster, system nodes)
    tags: dict[str, str] = field(default_factory=dict)  # tags on the access entries
    # A fleet's manager: Kueue's Configuration `multiKueue` section (None: not a manager, Kueue's defaults).
    multi_kueue: Mapping[str, Any] | None = None


def _in_namespaces(names: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": list(names)}]}


def manager_config(args: QueuesArgs) -> dict[str, Any]:
    """Kueue's Configuration (the chart's ``managerConfig.controllerManagerConfigYaml``)."""
    requeue: dict[str, Any] = {
        "timestamp": "Eviction",
        "backoffBaseSeconds": args.backoff_base_seconds,
        "backoffMaxSeconds": args.backoff_max_seconds,
    }
    if args.requeue_limit is not None:
        requeue["backoffLimitCount"] = args.requeue_limit
    config: dict[str, Any] = {
        **_MANAGER_DEFAULTS,
        # Jobs name their queue: the stack's jobs by label, a team's by default (its namespace's
        # LocalQueue is named `default`). Jobs elsewhere are not Kueue's business.
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": _in_namespaces(args.managed_namespaces),
        "waitForPodsReady": {"timeout": args.pods_ready_timeout, "blockAdmission": False, "requeuingStrategy": requeue},
        "integrations": {"frameworks": list(args.integrations)},
        # Only what the ClusterQueues cover is counted; a pod asking for more (ephemeral-storage)
        # is not held back for it.
        "resources": {"quotaCheckStrategy": "IgnoreUndeclared"},
    }
    if args.multi_kueue is not None:
        config["multiKueue"] = dict(args.multi_kueue)
    if args.fair_sharing:
        config["fairSharing"] = {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
    return config


def chart_values(args: QueuesArgs) -> dict[str, Any]:
    """The Helm values of the Kueue release."""
    return {
        "controllerManager": {
            "manager": {
                "image": {"repository": args.image_repository, "tag": args.image_tag, "pullPolicy": "IfNotPresent"},
                "podAnnotations": {APIS_AT_START_ANNOTATION: ",".join(sorted(args.apis_at_start)) or "none"},
            },
            "nodeSelector": dict(args.node_selector),
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(args), sort_keys=False)},
    }


def _object(
    kind: str, name: str, spec: dict[str, Any] | None = None, namespace: str | None = None, **top: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/part-of": PART_OF}}
    if namespace is not None:
        meta["namespace"] = namespace
    out: dict[str, Any] = {"apiVersion": KUEUE_API, "kind": kind, "metadata": meta}
    if spec is not None:
        out["spec"] = spec
    out.update(top)
    return out


def queue_objects(args: QueuesArgs) -> list[dict[str, Any]]:
    """The Kueue objects of the stack, in the order they can be created: priority classes,
    topologies, flavors, the admission check, ClusterQueues, LocalQueues."""
    out = [
        _object("WorkloadPriorityClass", name, value=value, description=f"gpu-training priority {name!r}")
        for name, value in sorted(args.priorities.items(), key=lambda kv: kv[1])
    ]
    for name, levels in sorted(args.topologies.items()):
        out.append(_object("Topology", name, {"levels": [{"nodeLabel": label} for label in levels]}))
    for f in args.flavors:
        rf: dict[str, Any] = {"nodeLabels": dict(f.node_labels), "tolerations": [dict(t) for t in f.tolerations]}
        if f.topology_name is not None:
            rf["topologyName"] = f.topology_name
        out.append(_object("ResourceFlavor", f.name, rf))
    if args.provisioning is not None:
        p = args.provisioning
        out.append(
            _object(
                "ProvisioningRequestConfig",
                p.name,
                {"provisioningClassName": p.provisioning_class, "managedResources": list(p.managed_resources)},
            )
        )
        out.append(
            _object(
                "AdmissionCheck",
                p.name,
                {
                    "controllerName": PROVISIONING_CONTROLLER,
                    "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": p.name},
                },
            )
        )
    for cq in args.cluster_queues:
        flavors = []
        for flavor, quotas in cq.quotas.items():
            resources = []
            for q in quotas:
                r: dict[str, Any] = {"name": q.name, "nominalQuota": q.nominal}
                if q.borrowing_limit is not None:
                    r["borrowingLimit"] = q.borrowing_limit
                if q.lending_limit is not None:
                    r["lendingLimit"] = q.lending_limit
                resources.append(r)
            flavors.append({"name": flavor, "resources": resources})
        spec: dict[str, Any] = {
            "cohortName": args.cohort,
            "namespaceSelector": _in_namespaces(cq.namespaces),
            "queueingStrategy": "BestEffortFIFO",
            # A job preempts lower-priority jobs of its own queue; a queue takes back its nominal
            # quota from borrowers whatever their priority; nobody preempts to borrow.
            "preemption": {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "Never"},
            },
            "resourceGroups": [{"coveredResources": list(args.covered_resources), "flavors": flavors}],
        }
        if cq.fair_share_weight is not None:
            spec["fairSharing"] = {"weight": cq.fair_share_weight}
        if args.provisioning is not None and cq.admission_check_flavors:
            spec["admissionChecksStrategy"] = {
                "admissionChecks": [{"name": args.provisioning.name, "onFlavors": list(cq.admission_check_flavors)}]
            }
        out.append(_object("ClusterQueue", cq.name, spec))
    for lq in args.local_queues:
        out.append(_object("LocalQueue", lq.name, {"clusterQueue": lq.cluster_queue}, namespace=lq.namespace))
    return out


# A team's people read their pods, logs and events in their namespace (Kueue's batch-user role
# covers the jobs and queues, not pods).
TEAM_READER_RULES = [
    {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": ["get", "list", "watch"]},
]


class KueueObject(pulumi.CustomResource):
    """A Kueue object as its manifest says, top-level fields and all: ``apiextensions.CustomResource``
    of this SDK takes only ``spec``, and a WorkloadPriorityClass has ``value`` and ``description``
    instead. The type token is the one CustomResource registers (``kubernetes:<apiVersion>:<kind>``)."""

    def __init__(self, name: str, manifest: Mapping[str, Any], opts: pulumi.ResourceOptions):
        # The provider plugin version, as the SDK's own resources (CustomResource included) pin it.
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=k8s_utilities.get_version()))
        super().__init__(f"kubernetes:{manifest['apiVersion']}:{manifest['kind']}", name, dict(manifest), opts)


class Queues(pulumi.ComponentResource):
    """Kueue and the queue objects; the Kubernetes provider comes through ``opts``."""

    def __init__(self, name: str, args: QueuesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:Queues", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.release = k8s.helm.v3.Release(
            f"{name}-kueue",
            name=RELEASE,
            chart=verified(args.chart, args.project_root),
            namespace=args.namespace,
            create_namespace=True,
            values=chart_values(args),
            opts=child,
        )
        namespaces: dict[str, k8s.core.v1.Namespace] = {}
        # The admission policy on team pods is in force before a team namespace exists (team_policy.py).
        policy_args = TeamPodPolicyArgs(depends_on=list(args.depends_on))
        team_pods: list[pulumi.Resource] = (
            [TeamPodPolicy(f"{name}-team-pods", policy_args, opts=pulumi.ResourceOptions(parent=self))]
            if args.teams
            else []
        )
        for t in args.teams:
            namespaces[t.namespace] = k8s.core.v1.Namespace(
                f"{name}-team-{t.name}",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=t.namespace, labels={"app.kubernetes.io/part-of": PART_OF, TEAM_LABEL: t.name}
                ),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *team_pods]),
            )
        after_kueue = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self.objects: list[pulumi.Resource] = []
        self.namespaces: dict[str, pulumi.Resource] = dict(namespaces)  # the team namespaces, by name
        # Each queue object by (kind, namespace or "", name): what a job names (its LocalQueue, priority class).
        self.named: dict[tuple[str, str, str], pulumi.Resource] = {}
        for obj in queue_objects(args):
            meta = obj["metadata"]
            ns = meta.get("namespace")
            opts = (
                after_kueue
                if ns not in namespaces
                else pulumi.ResourceOptions(parent=self, depends_on=[self.release, namespaces[ns]])
            )
            self.objects.append(
                KueueObject(f"{name}-{obj['kind'].lower()}-{(ns + '-') if ns else ''}{meta['name']}", obj, opts)
            )
            self.named[(obj["kind"], ns or "", meta["name"])] = self.objects[-1]
        for t in args.teams:
            self._team(name, t, namespaces[t.namespace], args)
        self.register_outputs(
            {
                "release": self.release.name,
                "clusterQueues": [cq.name for cq in args.cluster_queues],
                "localQueues": [f"{lq.namespace}/{lq.name}" for lq in args.local_queues],
            }
        )

    def _team(self, name: str, t: TeamArgs, namespace: k8s.core.v1.Namespace, args: QueuesArgs) -> None:
        """The team's access: its group bound to Kueue's batch-user role and to reading pods in its
        namespace, and an access entry putting its IAM role in that group."""
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[namespace, self.release])
        group = k8s.rbac.v1.SubjectArgs(kind="Group", name=t.kubernetes_group, api_group="rbac.authorization.k8s.io")
        k8s.rbac.v1.RoleBinding(
            f"{name}-team-{t.name}-batch-user",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="gputraining-team-batch-user", namespace=t.namespace),
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=BATCH_USER_ROLE
            ),
            subjects=[group],
            opts=in_ns,
        )
        reader = k8s.rbac.v1.Role(
            f"{name}-team-{t.name}-reader",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="gputraining-team-reader", namespace=t.namespace),
            rules=[
                k8s.rbac.v1.PolicyRuleArgs(api_groups=r["apiGroups"], resources=r["resources"], verbs=r["verbs"])
                for r in TEAM_READER_RULES
            ],
            opts=in_ns,
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-team-{t.name}-reader",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="gputraining-team-reader", namespace=t.namespace),
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="Role", name="gputraining-team-reader"
            ),
            subjects=[group],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[reader]),
        )
        if t.role_arn is not None:
            aws.eks.AccessEntry(
                f"{name}-team-{t.name}-access",
                cluster_name=args.cluster_name,
                principal_arn=t.role_arn,
                kubernetes_groups=[t.kubernetes_group],
                type="STANDARD",
                tags={**args.tags, "gputraining/team": t.name},
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
