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
from facts.paths import PROJECT_ROOT
from jobs.base import PRIORITIES
from stacks import queues
from stacks.services import Services


def add_queues(s: Services) -> None:
    """Kueue and the queues of the GPU jobs (``stacks/queues`` derives every quota)."""
    cfg = s.cfg
    plan = queues.plan_for(cfg)
    if plan is None:
        return
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
            integrations=plan.integrations,
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
        ),
        opts=s.k8s_component,
    )
    s.job_queues = queues.job_queues(cfg.queues.teams)
    s.outputs["clusterQueues"] = [cq.name for cq in plan.cluster_queues]
    # Before a job: its LocalQueue, priority class and Kueue's webhooks (the release, not the whole component).
    s.job_needs.kueue, s.job_needs.queue_objects = [component.release], dict(component.named)
    s.job_needs.namespaces.update(component.namespaces)
