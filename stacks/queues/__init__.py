"""The queues' numbers, derived from the stack config and never typed: one Kueue ResourceFlavor per
GPU node group, the quota of each ClusterQueue per flavor (the group's nodes times what one node
offers), what each enabled job asks for, and which jobs fit at once. The config checks (a job that
can never be admitted, a team beyond the groups) and the offline plan's queue table both use it.

Units: ``cpu`` in millicores, ``memory`` and ``hugepages-2Mi`` in MiB, GPUs and EFA interfaces as
counts. A node's CPU and memory are what the node leaves for pods (``facts/allocatable.py``: the
instance's, less kubelet's reservations, the eviction threshold, the huge pages and the requests of
the DaemonSets that run on every GPU node).

Kueue admits a job when every pod set of it fits its ClusterQueue's quota at once, on the flavor
its pods select (the job's node group). In a cohort (teams) a queue may borrow idle quota of the
others, up to its borrowing limit and what they lend (their lending limit, else all their nominal
quota); ``reach`` is the most a queue can ever hold.

The package, from the bottom up: ``resources`` (the covered resources, quantities, what a node
leaves for pods, the flavors), ``cluster_queues`` (the queue objects and their names),
``admission`` (what jobs ask for, admission on paper), ``plan`` (``QueuePlan`` of a stack, the
plan's queue table) and ``checks`` (the config checks). Import it as ``from stacks import queues``:
every name is here.
"""

from __future__ import annotations

from facts.kube import KUEUE_NAMESPACE
from stacks.queues.admission import (
    Admission,
    Demand,
    PodSet,
    Usage,
    admit_in_order,
    demands,
    pod_requests,
    pod_sets,
    reach,
)
from stacks.queues.cluster_queues import (
    COHORT,
    PROVISIONING_CHECK,
    PROVISIONING_CLASS,
    PROVISIONING_REQUEST_API,
    RESERVED_TEAM_NAMES,
    SHARED_QUEUE,
    TEAM_LOCAL_QUEUE,
    ClusterQueue,
    Limits,
    LocalQueue,
    Team,
    cluster_queues,
    job_queues,
    local_queues,
    team_namespace,
)
from stacks.queues.plan import (
    BATCH_JOB,
    REQUEUE_BACKOFF_BASE_SECONDS,
    REQUEUE_BACKOFF_MAX_SECONDS,
    RESOURCE_SHORT,
    QueuePlan,
    build_plan,
    describe,
    node_services,
    plan_context,
    plan_for,
    plans_kept,
)
from stacks.queues.queue_checks import MAX_FLAVOR_TOLERATIONS, check_config, check_job_teams, check_jobs
from stacks.queues.resources import (
    CPU,
    EFA,
    GPU,
    HUGEPAGES,
    MEMORY,
    RESOURCES,
    UNIT,
    Flavor,
    GroupSupply,
    NodeServices,
    burn_in_services,
    daemon_requests,
    flavor_of,
    group_supply,
    human,
    node_allocatable,
    parse_quantity,
    quantity,
)

__all__ = [
    "Admission",
    "BATCH_JOB",
    "COHORT",
    "CPU",
    "ClusterQueue",
    "Demand",
    "EFA",
    "Flavor",
    "GPU",
    "HUGEPAGES",
    "KUEUE_NAMESPACE",
    "Limits",
    "LocalQueue",
    "MAX_FLAVOR_TOLERATIONS",
    "MEMORY",
    "NodeServices",
    "PROVISIONING_CHECK",
    "PROVISIONING_CLASS",
    "PROVISIONING_REQUEST_API",
    "PodSet",
    "QueuePlan",
    "REQUEUE_BACKOFF_BASE_SECONDS",
    "REQUEUE_BACKOFF_MAX_SECONDS",
    "RESERVED_TEAM_NAMES",
    "RESOURCES",
    "SHARED_QUEUE",
    "TEAM_LOCAL_QUEUE",
    "Team",
    "UNIT",
    "Usage",
    "admit_in_order",
    "build_plan",
    "check_config",
    "check_job_teams",
    "check_jobs",
    "cluster_queues",
    "burn_in_services",
    "daemon_requests",
    "demands",
    "describe",
    "flavor_of",
    "GroupSupply",
    "group_supply",
    "human",
    "RESOURCE_SHORT",
    "job_queues",
    "local_queues",
    "node_allocatable",
    "parse_quantity",
    "node_services",
    "plan_context",
    "plan_for",
    "plans_kept",
    "pod_requests",
    "pod_sets",
    "quantity",
    "reach",
    "team_namespace",
]
