"""The queue objects: the names the stack gives them, and the ClusterQueues (the shared queue and
one per team, in one cohort, with each flavor's nominal quota and borrowing and lending limits),
the LocalQueues that feed them, and the teams' namespaces and Kubernetes groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stacks.queues.resources import RESOURCES, Flavor

# Names of the queue objects (cluster-wide, except LocalQueues).
SHARED_QUEUE = "gpu"  # the ClusterQueue of jobs without a team, and its LocalQueue in the training namespace
# A team namespace's LocalQueue: Kueue puts every job of a queued kind that names no queue there
# (LocalQueue defaulting), so a team's jobs cannot bypass its queue. The training namespace has no
# queue of this name: its data-stage Jobs name no queue and are not queued.
TEAM_LOCAL_QUEUE = "default"
COHORT = "gpu-training"  # every ClusterQueue of the stack borrows and lends in this cohort
PROVISIONING_CHECK = "gpu-provisioning"  # the ProvisioningRequest admission check (and its config)
# The autoscaler's provisioning class for a gang: all its nodes or none, as far as the cloud provider
# can (AWS's cannot: it has no atomic resize, so the autoscaler makes one resize for the whole gang).
PROVISIONING_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
# The API the check's ProvisioningRequests are made in (the autoscaler's CRD, by its name).
PROVISIONING_REQUEST_API = "provisioningrequests.autoscaling.x-k8s.io"
# Names a team cannot take (its ClusterQueue and its LocalQueue in the training namespace are named
# after it): the shared queue's, and `default`, which in the training namespace would take in the
# data-stage Jobs that name no queue.
RESERVED_TEAM_NAMES = (SHARED_QUEUE, TEAM_LOCAL_QUEUE)


@dataclass(frozen=True)
class Limits:
    """One resource of one flavor in a ClusterQueue: nominal quota, borrowing and lending limits
    (None: no limit)."""

    nominal: int
    borrowing: int | None = None
    lending: int | None = None

    @property
    def lendable(self) -> int:
        return self.nominal if self.lending is None else self.lending

    @property
    def guaranteed(self) -> int:
        """The part of the nominal quota only this queue can use."""
        return self.nominal - self.lendable


@dataclass(frozen=True)
class ClusterQueue:
    """A Kueue ClusterQueue: its flavors' limits, the namespaces whose LocalQueues may use it, and
    (teams) its fair-share weight."""

    name: str
    team: str | None
    namespaces: tuple[str, ...]
    limits: Mapping[str, Mapping[str, Limits]]  # flavor -> resource -> limits
    fair_share_weight: float | None = None
    nodes: Mapping[str, tuple[int, int | None, int | None]] = field(
        default_factory=dict
    )  # flavor -> (nodes, borrowing, lending limit) in nodes


@dataclass(frozen=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str


@dataclass(frozen=True)
class Team:
    """A team's access: its namespace and the IAM role given its Kubernetes group there."""

    name: str
    namespace: str
    role_arn: str | None

    @property
    def kubernetes_group(self) -> str:
        return f"gputraining:team:{self.name}"


def team_namespace(team: Any) -> str:
    return team.namespace or team.name


def _nodes_limits(per_node: Mapping[str, int], nodes: int, borrow: int | None, lend: int | None) -> dict[str, Limits]:
    return {
        r: Limits(
            nodes * per_node[r],
            None if borrow is None else borrow * per_node[r],
            None if lend is None else lend * per_node[r],
        )
        for r in RESOURCES
    }


def cluster_queues(flavors: Sequence[Flavor], teams: Sequence[Any], training_namespace: str) -> list[ClusterQueue]:
    """The shared queue (what the teams' nominal quotas leave of every flavor) and one queue per
    team, all in one cohort. Team quotas beyond a group are a config problem (checked first);
    here the shared queue's quota is never below zero."""
    shared: dict[str, dict[str, Limits]] = {}
    shared_nodes: dict[str, tuple[int, int | None, int | None]] = {}
    out: list[ClusterQueue] = []
    for t in teams:
        by_group = {q.node_group: q for q in t.quotas}
        limits: dict[str, dict[str, Limits]] = {}
        configured: dict[str, tuple[int, int | None, int | None]] = {}
        for f in flavors:
            q = by_group.get(f.name)
            nodes, borrow, lend = (q.nodes, q.borrowing_limit, q.lending_limit) if q is not None else (0, None, None)
            limits[f.name] = _nodes_limits(f.per_node, nodes, borrow, lend)
            configured[f.name] = (nodes, borrow, lend)
        out.append(
            ClusterQueue(
                t.name, t.name, (team_namespace(t), training_namespace), limits, t.fair_share_weight, configured
            )
        )
    for f in flavors:
        left = max(0, f.nodes - sum(cq.nodes[f.name][0] for cq in out))
        shared[f.name] = _nodes_limits(f.per_node, left, None, None)
        shared_nodes[f.name] = (left, None, None)
    return [ClusterQueue(SHARED_QUEUE, None, (training_namespace,), shared, 1 if teams else None, shared_nodes)] + out


def local_queues(teams: Sequence[Any], training_namespace: str) -> list[LocalQueue]:
    """``gpu`` in the training namespace (the shared queue), and per team one named after it in
    the training namespace (the stack's own jobs of the team) and ``default`` in the team's
    namespace (the jobs its people submit)."""
    out = [LocalQueue(training_namespace, SHARED_QUEUE, SHARED_QUEUE)]
    for t in teams:
        out.append(LocalQueue(training_namespace, t.name, t.name))
        out.append(LocalQueue(team_namespace(t), TEAM_LOCAL_QUEUE, t.name))
    return out


def job_queues(teams: Sequence[Any]) -> dict[str, str]:
    """The LocalQueue (in the training namespace) of the stack's jobs, per team ("" = none)."""
    return {"": SHARED_QUEUE, **{t.name: t.name for t in teams}}
