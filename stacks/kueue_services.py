"""Kueue and the queues of one environment (``add_queues``): the vendored chart and the queue objects
``stacks/queues`` derives from the config; split out of stacks/cluster_services.py, which calls it
after the autoscaler (whose ProvisioningRequest API Kueue looks for at start).
"""

from __future__ import annotations

from components.queues import (
    ClusterQueueArgs,
    FlavorArgs,
    LocalQueueArgs,
    ProvisioningArgs,
    Queues,
    QueuesArgs,
    ResourceQuota,
    TeamArgs,
)
from facts import versions
from facts.kube import NODE_GROUP_LABEL, SYSTEM_GROUP
from facts.multikueue import multikueue_config
from facts.operators import installed as installed_operators
from facts.paths import PROJECT_ROOT
from jobs.base import PRIORITIES
from stacks import queues
from stacks.config import StackConfig
from stacks.config.fleet import DISPATCHERS
from stacks.fleet_wiring import add_manager, add_worker
from stacks.queues.plan import BATCH_JOB, QueuePlan
from stacks.services import Services


def add_queues(s: Services) -> None:
    """Kueue and the queues of the GPU jobs (``stacks/queues`` derives every quota)."""
    cfg = s.cfg
    plan = queues.plan_for(cfg)
    if plan is None and not cfg.fleet.workers:
        return
    # A fleet's manager runs Kueue even without GPU groups of its own: its queues hand the jobs on.
    plan = plan or manager_plan(cfg)
    covered = list(queues.RESOURCES)

    def amount(r: str, value: int | None) -> str | None:
        return None if value is None else queues.quantity(r, value)

    def quotas(cq: queues.ClusterQueue) -> dict[str, list[ResourceQuota]]:
        return {
            flavor: [
                ResourceQuota(
                    r, queues.quantity(r, lim[r].nominal), amount(r, lim[r].borrowing), amount(r, lim[r].lending)
                )
                for r in covered
            ]
            for flavor, lim in cq.limits.items()
        }

    component = Queues(
        "queues",
        QueuesArgs(
            chart=versions.KUEUE_CHART,
            image_repository=versions.KUEUE_IMAGE_REPOSITORY,
            image_tag=versions.KUEUE_VERSION,
            node_selector={NODE_GROUP_LABEL: SYSTEM_GROUP},
            managed_namespaces=plan.managed_namespaces,
            integrations=fleet_integrations(cfg, plan.integrations),
            pods_ready_timeout=plan.pods_ready_timeout,
            requeue_limit=plan.requeue_limit,
            backoff_base_seconds=queues.REQUEUE_BACKOFF_BASE_SECONDS,
            backoff_max_seconds=queues.REQUEUE_BACKOFF_MAX_SECONDS,
            fair_sharing=plan.fair_sharing,
            cohort=queues.COHORT,
            covered_resources=covered,
            flavors=[FlavorArgs(f.name, f.node_labels, f.tolerations, f.topology) for f in plan.flavors],
            topologies=plan.topologies,
            cluster_queues=[
                ClusterQueueArgs(
                    cq.name,
                    cq.namespaces,
                    quotas(cq),
                    None if cq.fair_share_weight is None else f"{cq.fair_share_weight:g}",
                    plan.provisioning_flavors,
                )
                for cq in plan.cluster_queues
            ],
            local_queues=[LocalQueueArgs(q.namespace, q.name, q.cluster_queue) for q in plan.local_queues],
            priorities=dict(PRIORITIES),
            cluster_name=cfg.cluster_name,
            namespace=queues.KUEUE_NAMESPACE,
            teams=[TeamArgs(t.name, t.namespace, t.role_arn, t.kubernetes_group) for t in plan.teams],
            provisioning=ProvisioningArgs(queues.PROVISIONING_CHECK, queues.PROVISIONING_CLASS, [queues.GPU])
            if plan.provisioning
            else None,
            apis_at_start=[queues.PROVISIONING_REQUEST_API] if s.provisioning_request_crd is not None else [],
            project_root=PROJECT_ROOT,
            depends_on=[
                s.cluster.eks,
                s.namespace,
                *([s.provisioning_request_crd] if s.provisioning_request_crd is not None else []),
            ],
            tags=s.tags,
            multi_kueue=multikueue_config(cfg.cluster_name, DISPATCHERS[cfg.fleet.dispatcher])
            if cfg.fleet.workers
            else None,
        ),
        opts=s.k8s_component,
    )
    s.job_queues = queues.job_queues(cfg.queues.teams)
    s.outputs["clusterQueues"] = [cq.name for cq in plan.cluster_queues]
    # Before a job: its LocalQueue, priority class and Kueue's webhooks (the release, not the whole component).
    s.job_needs.kueue, s.job_needs.queue_objects = [component.release], dict(component.named)
    s.job_needs.namespaces.update(component.namespaces)


def manager_plan(cfg: StackConfig) -> QueuePlan:
    """The queues of a fleet's manager without GPU groups: none of its own (the fleet's come from its
    workers, stacks/fleet_wiring.py), Kueue watching the training namespace."""
    return QueuePlan(
        flavors=(),
        cluster_queues=(),
        local_queues=(),
        teams=(),
        managed_namespaces=(cfg.services.training_namespace,),
        integrations=(),
        pods_ready_timeout=cfg.queues.pods_ready_timeout,
        requeue_limit=cfg.queues.requeue_limit,
        provisioning_flavors=(),
        demands=(),
    )


def fleet_integrations(cfg: StackConfig, own: tuple[str, ...]) -> tuple[str, ...]:
    """Kueue's integrations: a manager's add batch/job and every installed operator's kinds (Kueue v0.19.2
    sets up the MultiKueue adapter of each enabled integration only: cmd/kueue/main.go,
    jobframework.GetMultiKueueAdapters(cfg.Integrations.Frameworks)). The operators themselves run on
    the manager too: Kueue sets managedBy to kueue.x-k8s.io/multikueue on the manager's MPIJobs (MPI
    operator v0.6.0 and later), Kubeflow v1 jobs (Trainer v1.9) and TrainJobs, so those operators leave the
    manager's copy alone (site/content/en/docs/tasks/run/multikueue/mpijob.md, kubeflow.md, trainjob.md)."""
    if not cfg.fleet.workers:
        return own
    kinds = [k.integration for op in installed_operators(cfg.services) for k in op.kinds]
    return tuple(dict.fromkeys([*own, BATCH_JOB, *kinds]))


def add_fleet(s: Services) -> None:
    """The fleet's side of this stack: a worker's account and output, or a manager's MultiKueue objects."""
    add_worker(s)
    add_manager(s, s.outputs.get("clusterQueues", []))
