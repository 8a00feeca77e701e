"""A fleet at `pulumi up` (docs/fleet.md): what a worker stack registers and exports for its manager, and
what the manager reads of its workers and registers.

- A worker (``fleet.manager`` set) registers the account MultiKueue acts as (components/multikueue.py
  ``FleetWorker``) and exports ``fleetWorker``: what it supplies (stacks/fleet.py ``WorkerSupply.output``),
  the manager it names, and the manager's kubeconfig for it (a secret: server and CA of its EKS cluster,
  the token of the current generation).
- A manager (``fleet.workers``) reads each worker's ``fleetWorker`` through a stack reference
  (https://www.pulumi.com/docs/iac/concepts/stacks/#stackreferences), registers ``FleetManager`` (the
  kubeconfig Secrets, MultiKueueClusters, MultiKueueConfig, AdmissionCheck) and, once the workers' outputs
  are read, the fleet's flavors and ClusterQueues with the quotas summed (stacks/fleet.py
  ``manager_args``). Stack references are read in `pulumi preview` too, so those appear in the preview.

Deploy order: the workers first (each with ``fleet.manager``), then the manager; a worker with no
``fleetWorker`` output, or one naming another manager, stops the manager's run with what to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import pulumi

from components.multikueue import FleetManager, FleetManagerArgs, FleetWorker, FleetWorkerArgs
from facts.kube import KUEUE_NAMESPACE
from facts.problems import ConfigError
from jobs.base import PRIORITIES
from stacks.config import StackConfig
from stacks.config.fleet import cluster_name
from stacks.fleet import SUPPLY_KEYS, WorkerSupply, manager_args, summed_quotas, supply_from_output, supply_of
from stacks.fleet_jobs import refusals_from_outputs
from stacks.services import Services

FLEET_OUTPUT = "fleetWorker"  # the worker stack's output the manager reads


class FleetWiringError(pulumi.RunError):
    """A fleet that cannot be wired as configured (a worker's output missing or not for this manager): a
    RunError, which the Pulumi engine prints without a Python traceback."""


def stack_reference(cfg: StackConfig) -> str:
    """This stack's name as other stacks reference it: organization/project/stack."""
    return f"{pulumi.get_organization()}/{cfg.project}/{cfg.stack}"


def worker_output(supply: WorkerSupply, manager: str, kubeconfig: Any, token_secret: str) -> dict[str, Any]:
    """The worker's ``fleetWorker`` output: its supply, the manager it serves, and the kubeconfig."""
    return {**supply.output(), "manager": manager, "tokenSecret": token_secret, "kubeconfig": kubeconfig}


def checked_output(worker: str, manager: str, value: Any) -> dict[str, Any]:
    """Worker ``worker``'s ``fleetWorker`` output, refused when missing or made for another manager."""
    if not isinstance(value, Mapping) or any(k not in value for k in (*SUPPLY_KEYS, "manager", "kubeconfig")):
        raise FleetWiringError(
            f"gpu-training:fleet.workers: stack '{worker}' has no '{FLEET_OUTPUT}' output (not deployed yet, or "
            f"deployed without gpu-training:fleet.manager): set `manager: {manager}` in its fleet section and run "
            "`pulumi up` on it first, then on this stack"
        )
    if value["manager"] != manager:
        raise FleetWiringError(
            f"gpu-training:fleet.workers: stack '{worker}' serves the manager '{value['manager']}', not '{manager}': "
            f"a worker has one manager; set its fleet.manager to '{manager}' (or remove it from this stack's workers)"
        )
    if dict(value["priorities"]) != dict(PRIORITIES):
        raise FleetWiringError(
            f"gpu-training:fleet.workers: stack '{worker}' has the priority classes {dict(value['priorities'])}, this "
            f"stack {dict(PRIORITIES)}: a job keeps its priority class on the worker, so every stack of a fleet needs "
            "the same ones; run `pulumi up` on the worker with this release of gpu-training"
        )
    return dict(value)


# ---------------------------------------------------------------------------------------------
# Worker
# ---------------------------------------------------------------------------------------------


def server_and_ca(kubeconfig_json: str) -> list[str]:
    """The EKS endpoint and CA data of the cluster's kubeconfig (pulumi-eks's, one cluster)."""
    cluster = json.loads(kubeconfig_json)["clusters"][0]["cluster"]
    return [cluster["server"], cluster["certificate-authority-data"]]


def add_worker(s: Services) -> None:
    """A worker's account for its manager and its ``fleetWorker`` output (nothing without ``fleet.manager``)."""
    cfg = s.cfg
    if cfg.fleet.manager is None:
        return
    if not s.job_needs.kueue:
        raise FleetWiringError(
            "gpu-training:fleet.manager: a fleet's worker runs the jobs under its own Kueue, and this stack has "
            "none: give it GPU node groups (gpuNodeGroups) with queues.enabled"
        )
    me = stack_reference(cfg)
    endpoint = s.cluster.kubeconfig.apply(server_and_ca)
    worker = FleetWorker(
        "fleet-worker",
        FleetWorkerArgs(
            cluster=cluster_name(me),
            generation=cfg.fleet.token_generation,
            server=endpoint[0],
            certificate_authority=endpoint[1],
            depends_on=list(s.job_needs.kueue),
        ),
        opts=s.k8s_component,
    )
    supply = supply_of(me, cfg, s.gpu_az)
    s.outputs[FLEET_OUTPUT] = worker_output(supply, cfg.fleet.manager, worker.kubeconfig, worker.token_secret)


# ---------------------------------------------------------------------------------------------
# Manager
# ---------------------------------------------------------------------------------------------


def register_fleet_queues(
    manager: FleetManager, own_queues: Sequence[str], workers: Sequence[WorkerSupply]
) -> dict[tuple[str, str, str], pulumi.Resource]:
    """The fleet's flavors, ClusterQueues and LocalQueues for the workers as read, by what jobs name."""
    args = manager_args(workers)
    clash = sorted({q.name for q in args.cluster_queues} & set(own_queues))
    if clash:
        raise FleetWiringError(
            f"gpu-training:fleet.workers: the workers' ClusterQueue(s) {', '.join(clash)} have the names of this "
            "stack's own queues (its GPU node groups'): a manager's own GPU jobs need queue names no worker uses "
            "(queues.teams on one side)"
        )
    try:
        return manager.add_queues(args)
    except ValueError as err:
        raise FleetWiringError(
            f"gpu-training:fleet.workers: {err}: the manager has its services.trainingNamespace and, with GPU node "
            "groups, its queues.teams' namespaces; give the manager and its workers the same ones"
        ) from None


def check_jobs(cfg: StackConfig, outputs: Sequence[Mapping[str, Any]]) -> None:
    """The manager's jobs of the fleet against the workers as read (stacks/fleet_jobs.py), refused as a
    RunError naming each job and every worker's reason."""
    try:
        refusals_from_outputs(cfg, outputs)
    except ConfigError as err:
        raise FleetWiringError(str(err)) from None


def add_manager(s: Services, own_queues: Sequence[str]) -> None:
    """A manager's MultiKueue objects for its workers (nothing without ``fleet.workers``)."""
    cfg = s.cfg
    if not cfg.fleet.workers:
        return
    me = stack_reference(cfg)
    clusters = [cluster_name(w.stack) for w in cfg.fleet.workers]
    outputs = [
        pulumi.StackReference(f"fleet-{c}", stack_name=w.stack)
        .get_output(FLEET_OUTPUT)
        .apply(partial(checked_output, w.stack, me))
        for c, w in zip(clusters, cfg.fleet.workers, strict=True)
    ]
    manager = FleetManager(
        "fleet-manager",
        FleetManagerArgs(
            clusters=clusters,
            kubeconfigs={
                c: pulumi.Output.secret(o.apply(lambda v: str(v["kubeconfig"])))
                for c, o in zip(clusters, outputs, strict=True)
            },
            namespace=KUEUE_NAMESPACE,
            namespaces=dict(s.job_needs.namespaces),
            depends_on=list(s.job_needs.kueue),
        ),
        opts=s.k8s_component,
    )
    # What a worker supplies is no secret (only its kubeconfig is): the quotas are plain in the state.
    plain = [pulumi.Output.unsecret(o) for o in outputs]
    supplies = [o.apply(supply_from_output) for o in plain]
    checked = pulumi.Output.all(*plain).apply(partial(check_jobs, cfg))
    s.job_needs.fleet_queues = pulumi.Output.all(checked, *supplies).apply(
        lambda read: register_fleet_queues(manager, list(own_queues), read[1:])
    )
    s.outputs["fleetQueues"] = pulumi.Output.all(*supplies).apply(summed_quotas)
    s.outputs["fleetWorkers"] = pulumi.Output.all(*supplies).apply(lambda ws: [w.output() for w in ws])
