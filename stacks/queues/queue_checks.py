"""The queues' config checks: the queue section on its own and against the GPU node groups (names,
namespaces, the teams' quotas within the groups, what needs queues or the autoscaler), the jobs'
teams, and a job that can never be admitted (or a pod no node can hold).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from facts import catalog, durations, topology
from facts.aws_names import role_arn_problem
from facts.kube import ACCELERATOR_LABEL, NODE_GROUP_LABEL, RESERVED_NAMESPACES
from facts.problems import Problem, entry_keys
from jobs.base import JobBase
from stacks.queues.admission import reach
from stacks.queues.cluster_queues import RESERVED_TEAM_NAMES, team_namespace
from stacks.queues.plan import QueuePlan, pods_ready_budget
from stacks.queues.resources import RESOURCES, burn_in_services, group_supply, human

# Sizes Kueue v0.19.2's CRDs refuse (manifests/vendor/kueue-v0.19.2-crds; tests/test_api_checks.py reads
# each from the CRD). A ResourceFlavor holds at most 8 tolerations (spec.tolerations maxItems): the GPU
# taint's and the group's own taints; at most 8 node labels (spec.nodeLabels maxProperties): the
# node-group label, the accelerator label and the group's own labels.
MAX_FLAVOR_TOLERATIONS = 8
MAX_FLAVOR_NODE_LABELS = 8
# A ClusterQueue's resource group holds at most 64 flavors (spec.resourceGroups[].flavors maxItems);
# every ClusterQueue of the stack holds one flavor per GPU group in its one resource group.
MAX_FLAVORS_PER_RESOURCE_GROUP = 64


def check_jobs(plan: QueuePlan, problems: list[Problem], key_prefix: str) -> None:
    """A job that can never be admitted is a problem: naming the job, the resource and both
    numbers (what it asks for, the most its queue can ever hold); so is a pod no node can hold."""
    by_name = {q.name: q for q in plan.cluster_queues}
    flavors = {f.name: f for f in plan.flavors}
    for d in plan.demands:
        flavor = d.flavor
        if flavor is None or flavor not in flavors:
            continue
        cq = by_name[d.queue]
        f = flavors[flavor]
        field = "maxNodes" if d.elastic_max is not None else "nodes"
        for p in d.pod_sets:
            for r in RESOURCES:
                if p.per_pod.get(r, 0) > f.per_node[r]:
                    problems.append(
                        Problem(
                            f"{key_prefix}{d.key}",
                            f"job {d.job!r}: a {p.name} pod asks for {human(r, p.per_pod[r])} {r}, more than one "
                            f"{f.instance_type} node of group {flavor!r} offers ({human(r, f.per_node[r])})",
                        )
                    )
        total = d.total
        for r in RESOURCES:
            most = reach(cq, plan.cluster_queues, flavor, r)
            if total[r] > most:
                lim = cq.limits[flavor][r]
                borrow = most - lim.nominal
                whose = f"the queue of team {cq.team!r}" if cq.team else f"the shared queue {cq.name!r}"
                elastic = f" (an elastic job reserves maxNodes {d.elastic_max})" if d.elastic_max is not None else ""
                problems.append(
                    Problem(
                        f"{key_prefix}{d.key}.{field}",
                        f"job {d.job!r} can never be admitted: it asks for {human(r, total[r])} {r} of node group "
                        f"{flavor!r} at once{elastic}, and {whose} can never hold more than {human(r, most)} (nominal "
                        f"{human(r, lim.nominal)} + borrowing {human(r, borrow)}, from the group's {f.sizing})",
                    )
                )
                break


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def check_config(
    queues: Any,
    groups: Sequence[Any],
    autoscaling: Any,
    training_namespace: str | None,
    admin_principals: Sequence[str],
    problems: list[Problem],
    ns: str,
    burn_in: Any = None,
) -> None:
    """The queue section on its own and against the GPU groups: names, namespaces, the teams'
    quotas within the groups, the pods-ready budget of burn-in groups (``burn_in``: the burnIn section),
    and what needs queues or the autoscaler. ``ns`` is the config namespace."""
    k = f"{ns}:queues"
    _check_pods_ready_timeout(queues, k, problems)
    if queues.enabled and burn_in is not None and autoscaling is not None:
        _check_pods_ready_budget(queues, groups, autoscaling, burn_in, k, problems)
    if queues.teams and not queues.enabled:
        problems.append(Problem(f"{k}.teams", "teams need queues: set queues.enabled to true (or remove the teams)"))
    _check_provisioning_requests(queues, autoscaling, ns, problems)
    _check_topology_admission(queues, groups, autoscaling, ns, problems)
    if queues.enabled:
        _check_flavor_count(groups, ns, problems)
        _check_flavor_tolerations(groups, ns, problems)
        _check_flavor_node_labels(groups, ns, problems)
    by_group = {g.name: g for g in groups if g is not None}
    names: dict[str, str] = {}
    spaces: dict[str, str] = {}
    taken: dict[str, int] = {}
    team_keys = entry_keys(f"{k}.teams", [t.name for t in queues.teams])
    for tk, t in zip(team_keys, queues.teams, strict=True):
        _check_team_name(t, tk, names, problems)
        _check_team_namespace(t, tk, training_namespace, spaces, problems)
        _check_team_role(t, tk, admin_principals, problems)
        _check_team_quotas(t, tk, by_group, taken, problems)
    if autoscaling is None:
        return
    _check_team_supply(taken, by_group, autoscaling, k, problems)


def _check_pods_ready_timeout(queues: Any, k: str, problems: list[Problem]) -> None:
    why = durations.go_duration_problem(queues.pods_ready_timeout)
    if why or durations.parse_go_duration(queues.pods_ready_timeout) <= 0:
        problems.append(
            Problem(
                f"{k}.podsReadyTimeout",
                f"{queues.pods_ready_timeout!r} is not a positive Go duration (Kueue reads it so), like 20m, 1200s or "
                "1h30m",
            )
        )


def _starts_after_admission(g: Any, autoscaling: Any) -> bool:
    """Whether a job can be admitted on group ``g``'s quota before the nodes it runs on exist: the quota
    counts an autoscaled group's maxSize above its minSize, or a capacity block's before its window."""
    supply = group_supply(g, autoscaling.enabled)
    return (supply.autoscaled and supply.nodes > g.min_size) or supply.windowed


def _check_pods_ready_budget(
    queues: Any, groups: Sequence[Any], autoscaling: Any, burn_in: Any, k: str, problems: list[Problem]
) -> None:
    """A burn-in group's jobs admitted before their nodes exist wait for node start, burn-in (and its
    loopback test) and the image pull: a shorter podsReadyTimeout evicts them before they can run, and
    they queue again forever."""
    try:
        have = durations.parse_go_duration(queues.pods_ready_timeout) / 60e9
    except durations.DurationError:
        return  # reported by _check_pods_ready_timeout
    ours = burn_in_services(groups, burn_in)
    for g in groups:
        if g is None or g.name not in ours["burn_in"] or not _starts_after_admission(g, autoscaling):
            continue
        parts = pods_ready_budget(True, g.name in ours["burn_in_loopback"])
        need = sum(m for _, m in parts)
        if have < need:
            spelled = " + ".join(f"{what} {m}m" for what, m in parts)
            problems.append(
                Problem(
                    f"{k}.podsReadyTimeout",
                    f"{queues.pods_ready_timeout!r} is shorter than a job on group {g.name!r} needs: it is admitted "
                    f"before its nodes exist ({group_supply(g, autoscaling.enabled).text}), then waits for "
                    f"{spelled} = {need}m; set at least {need}m",
                )
            )
            return


def _check_provisioning_requests(queues: Any, autoscaling: Any, ns: str, problems: list[Problem]) -> None:
    if autoscaling is not None and autoscaling.provisioning_requests:
        if not queues.enabled:
            problems.append(
                Problem(
                    f"{ns}:autoscaling.provisioningRequests",
                    "true needs queues.enabled: Kueue's admission check makes the requests",
                )
            )
        if not autoscaling.enabled:
            problems.append(
                Problem(
                    f"{ns}:autoscaling.provisioningRequests",
                    "true needs autoscaling.enabled: the Cluster Autoscaler serves the requests",
                )
            )


def _check_topology_admission(
    queues: Any, groups: Sequence[Any], autoscaling: Any, ns: str, problems: list[Problem]
) -> None:
    """`autoscaling.provisioningRequests: false` with an autoscaled group that has a Topology: Kueue
    places by Topology only on nodes that are there and Ready, and no pod asks the autoscaler for
    one before its job is admitted, so a job needing more nodes than the group has would wait forever."""
    if not (queues.enabled and autoscaling is not None and autoscaling.enabled):
        return
    if autoscaling.provisioning_requests is not False:
        return
    for g in groups:
        if g is None or getattr(g, "awaiting_capacity_block", False):
            continue
        if g.autoscaled and topology.group_layers(g.instance, g.efa_interfaces):
            problems.append(
                Problem(
                    f"{ns}:autoscaling.provisioningRequests",
                    f"false is not allowed with node group {g.name!r}: it is autoscaled and has a network topology, "
                    "and Kueue places its jobs by Topology only on nodes that are there and Ready; no pod asks the "
                    "autoscaler for a node before its job is admitted, so a job needing more nodes than are running "
                    f"(the group may be down to minSize {g.min_size}) would wait forever. Leave the key out (the "
                    "ProvisioningRequest check then runs on such groups) or set it true",
                )
            )


def _group_keys(groups: Sequence[Any], ns: str) -> list[str]:
    """Each GPU group's key (by its name, facts.problems.entry_keys)."""
    return entry_keys(f"{ns}:gpuNodeGroups", [g.name if g is not None else None for g in groups])


def _check_flavor_tolerations(groups: Sequence[Any], ns: str, problems: list[Problem]) -> None:
    for gk, g in zip(_group_keys(groups, ns), groups, strict=True):
        if g is not None and len(g.taints) + 1 > MAX_FLAVOR_TOLERATIONS:
            problems.append(
                Problem(
                    f"{gk}.taints",
                    f"{len(g.taints)} taints are too many with queues: its Kueue ResourceFlavor carries the GPU "
                    f"taint's toleration and one per taint, at most {MAX_FLAVOR_TOLERATIONS}; use at most "
                    f"{MAX_FLAVOR_TOLERATIONS - 1}",
                )
            )


def _check_flavor_count(groups: Sequence[Any], ns: str, problems: list[Problem]) -> None:
    if len(groups) > MAX_FLAVORS_PER_RESOURCE_GROUP:
        problems.append(
            Problem(
                f"{ns}:gpuNodeGroups",
                f"{len(groups)} GPU node groups are too many with queues: every Kueue ClusterQueue holds one flavor "
                f"per group in its resource group, and Kueue's CRD (clusterqueues.kueue.x-k8s.io, "
                f"spec.resourceGroups[].flavors) takes at most {MAX_FLAVORS_PER_RESOURCE_GROUP}; a group waiting for "
                f"its capacity block counts too (its flavor comes with the block). Use at most "
                f"{MAX_FLAVORS_PER_RESOURCE_GROUP} groups, or turn queues off",
            )
        )


def _check_flavor_node_labels(groups: Sequence[Any], ns: str, problems: list[Problem]) -> None:
    for gk, g in zip(_group_keys(groups, ns), groups, strict=True):
        it = catalog.get(g.instance_type) if g is not None else None
        if g is None or it is None:  # a type the catalog does not have: its group's problem
            continue
        keys = {NODE_GROUP_LABEL, *g.labels} | ({ACCELERATOR_LABEL} if it.accelerator else set())
        if len(keys) > MAX_FLAVOR_NODE_LABELS:
            problems.append(
                Problem(
                    f"{gk}.labels",
                    f"{len(g.labels)} labels are too many with queues: the group's Kueue ResourceFlavor carries them "
                    f"with the stack's own ({len(keys - set(g.labels))}: the node-group label"
                    f"{' and the accelerator label' if it.accelerator else ''}), {len(keys)} node labels, and "
                    f"Kueue's CRD (resourceflavors.kueue.x-k8s.io, spec.nodeLabels) takes at most "
                    f"{MAX_FLAVOR_NODE_LABELS}; use at most {MAX_FLAVOR_NODE_LABELS - len(keys - set(g.labels))}",
                )
            )


def _check_team_name(t: Any, tk: str, names: dict[str, str], problems: list[Problem]) -> None:
    """A DNS label, not a shared queue's, unique (``names``: the names so far, each with its entry)."""
    if not _DNS_LABEL.match(t.name) or len(t.name) > 63:
        problems.append(
            Problem(
                f"{tk}.name", f"{t.name!r} is not allowed: a DNS label (lower-case letters, digits and '-', at most 63)"
            )
        )
    elif t.name in RESERVED_TEAM_NAMES:
        problems.append(
            Problem(f"{tk}.name", f"{t.name!r} is not allowed: {', '.join(RESERVED_TEAM_NAMES)} name the shared queues")
        )
    if t.name in names:
        problems.append(Problem(f"{tk}.name", f"{t.name!r} is used by {names[t.name]} too; team names must be unique"))
    names.setdefault(t.name, _entry(tk))


def _entry(key: str) -> str:
    """``teams[x]`` of a key ``gpu-training:queues.teams[x]``."""
    return key[key.rindex("teams[") :]


def _check_team_namespace(
    t: Any, tk: str, training_namespace: str | None, spaces: dict[str, str], problems: list[Problem]
) -> None:
    space = team_namespace(t)
    where = f"{tk}.namespace" if t.namespace else f"{tk}.name"
    if not _DNS_LABEL.match(space) or len(space) > 63 or space.startswith("kube-"):
        problems.append(
            Problem(
                where,
                f"{space!r} is not allowed as the team's namespace: a namespace name (lower-case letters, digits, "
                "'-'), not kube-*",
            )
        )
    elif space in RESERVED_NAMESPACES:
        problems.append(
            Problem(
                where,
                f"{space!r} is not allowed as the team's namespace: it belongs to Kubernetes or to a service of the "
                "stack",
            )
        )
    elif space == training_namespace:
        problems.append(
            Problem(
                where,
                f"{space!r} is the training namespace (the stack's own jobs, etcd, the volumes): give the team a "
                "namespace of its own",
            )
        )
    if space in spaces:
        problems.append(Problem(where, f"{space!r} is the namespace of {spaces[space]} too; every team has its own"))
    spaces.setdefault(space, _entry(tk))


def _check_team_role(t: Any, tk: str, admin_principals: Sequence[str], problems: list[Problem]) -> None:
    if t.role_arn is None:
        return
    why = role_arn_problem(t.role_arn)
    if why:
        problems.append(Problem(f"{tk}.roleArn", why))
    elif t.role_arn in admin_principals:
        problems.append(
            Problem(
                f"{tk}.roleArn",
                f"{t.role_arn!r} is in cluster.adminPrincipals too; EKS takes one access entry per principal (and it "
                "is admin already)",
            )
        )


def _check_team_quotas(
    t: Any, tk: str, by_group: dict[str, Any], taken: dict[str, int], problems: list[Problem]
) -> None:
    seen: set[str] = set()
    for j, q in enumerate(t.quotas):
        qk = f"{tk}.quotas[{j}]"
        g = by_group.get(q.node_group)
        if g is None:
            known = ", ".join(repr(n) for n in sorted(by_group)) or "none"
            problems.append(
                Problem(
                    f"{qk}.nodeGroup", f"{q.node_group!r} is not a GPU node group of this stack; known groups: {known}"
                )
            )
            continue
        if q.node_group in seen:
            problems.append(Problem(f"{qk}.nodeGroup", f"{q.node_group!r} is listed twice for team {t.name!r}"))
        seen.add(q.node_group)
        if q.lending_limit is not None and q.lending_limit > q.nodes:
            problems.append(
                Problem(
                    f"{qk}.lendingLimit",
                    f"{q.lending_limit} is more than the team's own nodes ({q.nodes}); a team lends only what it has",
                )
            )
        taken[q.node_group] = taken.get(q.node_group, 0) + q.nodes


def _check_team_supply(
    taken: dict[str, int], by_group: dict[str, Any], autoscaling: Any, k: str, problems: list[Problem]
) -> None:
    for name, wanted in taken.items():
        g = by_group[name]
        supply = group_supply(g, autoscaling.enabled)
        if wanted > supply.nodes:
            size = supply.text
            problems.append(
                Problem(
                    f"{k}.teams",
                    f"the teams' nodes of node group {name!r} add up to {wanted}, and the group has {size}; lower the "
                    "teams' nodes or raise the group",
                )
            )


def check_job_teams(jobs: Iterable[tuple[str, JobBase]], queues: Any, problems: list[Problem]) -> None:
    """A job's team must be one of the stack's, and needs queues."""
    teams = {t.name for t in queues.teams}
    for key, spec in jobs:
        team = getattr(spec, "team", None)
        if team is None or not spec.enabled:
            continue
        if not queues.enabled:
            problems.append(
                Problem(f"{key}.team", f"{team!r} needs queues: set queues.enabled to true (or remove the job's team)")
            )
        elif team not in teams:
            known = ", ".join(repr(n) for n in sorted(teams)) or "none (add them under queues.teams)"
            problems.append(Problem(f"{key}.team", f"{team!r} is not a team of this stack; teams: {known}"))
