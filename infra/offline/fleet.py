"""The offline answer to a fleet's stack references: what each worker stack of a manager would export
as ``fleetWorker``, computed from the worker's stack file (stacks/fleet.py ``worker_stack_file``: beside
the manager's, or in the sibling folder of an example) with the same function the worker's program
exports it with (stacks/fleet_wiring.py ``worker_output``); its kubeconfig a placeholder, as a secret
is. A worker whose stack file is not there has no outputs: a stack not deployed yet.

Only the offline engine knows this answer: what `pulumi up` runs reads the real stack outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.multikueue import manager_kubeconfig, token_secret
from facts.paths import PROJECT_ROOT
from stacks import config as stack_config
from stacks.config.fleet import cluster_name
from stacks.config.stackfile import read_stack_config
from stacks.fleet import supply_of, worker_stack_file
from stacks.fleet_wiring import FLEET_OUTPUT, worker_output

PLACEHOLDER_TOKEN = "offline-plan-placeholder-token"  # noqa: S105 (not a credential: the plan's stand-in)
PLACEHOLDER_CA = "TU9DSw=="  # base64 "MOCK", as the mocks' EKS kubeconfig has it
DEFAULT_ORGANIZATION = "organization"  # Pulumi's mocks' default


@dataclass(frozen=True)
class OfflineFleet:
    """The organization the offline run is in, and each referenced stack's outputs."""

    organization: str = DEFAULT_ORGANIZATION
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # stack reference -> its outputs
    secret_outputs: tuple[str, ...] = (FLEET_OUTPUT,)


def _worker_outputs(reference: str, manager_file: Path) -> dict[str, Any]:
    path = worker_stack_file(reference, manager_file)
    if not path.exists():
        return {}
    stack = reference.rsplit("/", 1)[-1]
    project, values = read_stack_config(stack, PROJECT_ROOT, path)
    worker = stack_config.load(values, project, stack)
    if worker.fleet.manager is None:
        return {}  # deployed without fleet.manager: no fleetWorker output
    cluster = cluster_name(reference)
    server = f"https://{cluster}.offline.{worker.region}.eks.amazonaws.com"
    kubeconfig = manager_kubeconfig(cluster, server, PLACEHOLDER_CA, PLACEHOLDER_TOKEN)
    supply = supply_of(reference, worker, worker.gpu_availability_zone)
    gen = token_secret(worker.fleet.token_generation)
    return {FLEET_OUTPUT: worker_output(supply, worker.fleet.manager, kubeconfig, gen)}


def offline_fleet(cfg: Any, stack_file: Path) -> OfflineFleet:
    """The answers for stack ``cfg`` (read from ``stack_file``): its workers' outputs when it is a
    manager; the organization from the fleet's stack names (one organization's stacks)."""
    names = [w.stack for w in cfg.fleet.workers] or ([cfg.fleet.manager] if cfg.fleet.manager else [])
    if not names:
        return OfflineFleet()
    return OfflineFleet(
        organization=names[0].split("/", 1)[0],
        outputs={w.stack: _worker_outputs(w.stack, stack_file) for w in cfg.fleet.workers},
    )
