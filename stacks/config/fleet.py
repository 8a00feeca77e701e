"""The fleet section (`gpu-training:fleet`): several stacks behind one Kueue queue (MultiKueue).

A stack is a fleet's manager when it lists ``workers`` (other stacks of the project, each one EKS
cluster, in any AZ or region), a worker when it names its ``manager``; never both. The manager hands
each job its ClusterQueues admit to a worker with room (Kueue's MultiKueue admission check, beta in
v0.19.2: kubernetes-sigs/kueue site/content/en/docs/concepts/multikueue.md at v0.19.2). Stacks are
named as Pulumi stack references name them: "organization/project/stack"
(https://www.pulumi.com/docs/iac/concepts/stacks/#stackreferences).

Limits from Kueue v0.19.2's CRDs (manifests/vendor/kueue-v0.19.2-crds): a MultiKueueConfig lists at
most 20 clusters, without repeats (kueue.x-k8s.io_multikueueconfigs.yaml, spec.clusters maxItems and
its "must be unique" rule); a MultiKueueCluster is named by a DNS subdomain.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from stacks.config.models import ConfigModel

MAX_WORKERS = 20  # MultiKueueConfig spec.clusters maxItems (kueue.x-k8s.io_multikueueconfigs.yaml, v0.19.2)
# Pulumi's names: organization, project and stack, each letters, digits, '-', '_' or '.', at most 100.
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
STACK_REFERENCE = re.compile(rf"^{_PART}/{_PART}/{_PART}$")
# Kueue's dispatcher names (apis/config/v1beta2/configuration_types.go at v0.19.2).
DISPATCHERS = {
    "AllAtOnce": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
    "Incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
}


def cluster_name(reference: str) -> str:
    """The MultiKueueCluster (and its kubeconfig Secret) of the worker stack ``reference``: its stack
    name, lower case, '_' and '.' as '-' (a DNS label)."""
    return re.sub(r"[._]", "-", reference.rsplit("/", 1)[-1].lower()).strip("-")[:63]


def _reference(value: str, what: str) -> str:
    if not STACK_REFERENCE.match(value):
        raise PydanticCustomError(
            "stack_reference",
            "not a stack reference: {what} is named 'organization/project/stack' (each part letters, "
            "digits, '-', '_' or '.'), as `pulumi stack ls --all` shows it",
            {"value": value, "what": what},
        )
    return value


class FleetWorkerConfig(ConfigModel):
    """One worker of the fleet."""

    stack: str = Field(
        description="the worker's stack, 'organization/project/stack' (a Pulumi stack reference); its cluster "
        "takes the jobs the manager dispatches to it"
    )

    @field_validator("stack")
    @classmethod
    def _stack_reference(cls, value: str) -> str:
        return _reference(value, "a worker")


class FleetConfig(ConfigModel):
    """Where the stack stands in a fleet (none, its manager, or one of its workers)."""

    workers: list[FleetWorkerConfig] = Field(
        default_factory=list,
        description=f"this stack is the fleet's manager: its queues hand each job to one of these worker stacks "
        f"(at most {MAX_WORKERS}; the Incremental dispatcher tries them in this order)",
    )
    manager: str | None = Field(
        None,
        description="this stack is a worker of the fleet managed by this stack ('organization/project/stack'): it "
        "gets the manager's queues and a credential scoped to what MultiKueue creates on it",
    )
    dispatcher: Literal["AllAtOnce", "Incremental"] = Field(
        "AllAtOnce",
        description="how the manager picks workers for a job (Kueue's multiKueue.dispatcherName): `AllAtOnce` "
        "offers it to every worker and keeps the first that admits it; `Incremental` offers it to 3 workers more "
        "every 5 minutes, in the order of `workers`",
    )

    token_generation: int = Field(
        1,
        ge=1,
        description="on a worker, the generation of the token the manager's kubeconfig carries: raising it by one "
        "adds a new token Secret and keeps the one before until the next raise (rotation without downtime; "
        "deploy the worker, then the manager)",
    )

    @property
    def role(self) -> Literal["manager", "worker", "none"]:
        return "manager" if self.workers else "worker" if self.manager else "none"

    @model_validator(mode="after")
    def _one_role(self) -> FleetConfig:
        if self.workers and self.manager is not None:
            raise PydanticCustomError(
                "fleet_two_roles",
                "a stack is a fleet's manager (workers) or a worker (manager), not both: Kueue's MultiKueue "
                "has one level of managers",
            )
        return self

    @field_validator("manager")
    @classmethod
    def _manager_reference(cls, value: str | None) -> str | None:
        return None if value is None else _reference(value, "the manager")

    @model_validator(mode="after")
    def _worker_count(self) -> FleetConfig:
        if len(self.workers) > MAX_WORKERS:
            raise PydanticCustomError(
                "fleet_too_many",
                "{count} workers: a MultiKueueConfig lists at most {most} clusters (Kueue v0.19.2)",
                {"count": len(self.workers), "most": MAX_WORKERS},
            )
        return self

    @model_validator(mode="after")
    def _distinct_workers(self) -> FleetConfig:
        seen: dict[str, str] = {}
        for w in self.workers:
            name = cluster_name(w.stack)
            if name in seen:
                raise PydanticCustomError(
                    "fleet_same_worker",
                    "workers '{a}' and '{b}' share the cluster name '{name}' (each worker's MultiKueueCluster is "
                    "named by its stack name): list a stack once, and give workers distinct stack names",
                    {"a": seen[name], "b": w.stack, "name": name},
                )
            seen[name] = w.stack
        return self

    @model_validator(mode="after")
    def _generation_on_worker(self) -> FleetConfig:
        if "token_generation" in self.model_fields_set and self.manager is None:
            raise PydanticCustomError(
                "fleet_token_generation",
                "tokenGeneration {value} is set but the stack names no manager: only a fleet's worker has a token",
                {"value": self.token_generation},
            )
        return self

    @model_validator(mode="after")
    def _dispatcher_on_manager(self) -> FleetConfig:
        if "dispatcher" in self.model_fields_set and not self.workers:
            raise PydanticCustomError(
                "fleet_dispatcher",
                "dispatcher '{value}' is set but the stack lists no workers: only a fleet's manager dispatches",
                {"value": self.dispatcher},
            )
        return self
