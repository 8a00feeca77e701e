"""The fleet's lines of the plan's text (docs/fleet.md): on a manager its workers, what each supplies
and the quota of each ClusterQueue summed per fleet flavor (the stack outputs ``fleetWorkers`` and
``fleetQueues`` of stacks/fleet_wiring.py); on a worker its manager and what its credential allows
(components/multikueue.py). Nothing for a stack outside a fleet. Lines about jobs are not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components import multikueue as mk
from stacks import config as stack_config
from stacks import queues
from stacks.fleet_wiring import FLEET_OUTPUT

_SHORT = queues.RESOURCE_SHORT


def lines(cfg: stack_config.StackConfig, outputs: Mapping[str, Any]) -> list[str]:
    if cfg.fleet.workers:
        return manager_lines(cfg, outputs)
    if cfg.fleet.manager:
        return worker_lines(cfg)
    return []


def _flavor(f: Mapping[str, Any]) -> str:
    window = f", capacity block {f['window'][0]} to {f['window'][1]}" if f.get("window") else ""
    return f"{f['group']} {f['nodes']} x {f['instanceType']}{window}"


def _amounts(resources: Mapping[str, int]) -> str:
    return ", ".join(f"{queues.human(r, int(resources[r]))} {_SHORT[r]}" for r in _SHORT if r in resources)


def manager_lines(cfg: stack_config.StackConfig, outputs: Mapping[str, Any]) -> list[str]:
    workers = outputs.get("fleetWorkers") or []
    out = [
        "",
        f"Fleet manager (MultiKueue, dispatcher {cfg.fleet.dispatcher}): {len(cfg.fleet.workers)} worker(s), read "
        f"through stack references (output {FLEET_OUTPUT})",
    ]
    for w in workers:
        flavors = "; ".join(_flavor(f) for f in w["flavors"]) or "no GPU node group"
        out.append(f"  {w['cluster']} ({w['availabilityZone']}): {flavors}")
    for queue, flavors in sorted((outputs.get("fleetQueues") or {}).items()):
        for flavor, resources in sorted(flavors.items()):
            out.append(f"  ClusterQueue {queue}, {flavor} (summed): {_amounts(resources)}")
    return out


def credential_scope() -> list[str]:
    """What the worker's ClusterRole allows, one phrase per set of verbs."""
    by_verbs: dict[tuple[str, ...], list[str]] = {}
    for rule in mk.worker_rules():
        by_verbs.setdefault(tuple(rule["verbs"]), []).extend(rule["resources"])
    return [f"{', '.join(resources)}: {' '.join(verbs)}" for verbs, resources in by_verbs.items()]


def worker_lines(cfg: stack_config.StackConfig) -> list[str]:
    token = mk.token_secret(cfg.fleet.token_generation)
    return [
        "",
        f"Fleet worker of {cfg.fleet.manager}: MultiKueue acts as kueue-system/{mk.WORKER_ACCOUNT}, ClusterRole "
        f"{mk.WORKER_ROLE}",
        f"  token Secret {token} (generation {cfg.fleet.token_generation}) in the kubeconfig of the secret output "
        f"{FLEET_OUTPUT}",
        *(f"  may {scope}" for scope in credential_scope()),
    ]
