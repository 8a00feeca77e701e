"""The fleet section (`gpu-training:fleet`, stacks/config/fleet.py): each rule broken once, and the
roles a valid section gives."""

from __future__ import annotations

from typing import Any

import pytest

from stacks import config as stack_config
from stacks.config.fleet import MAX_WORKERS, cluster_name


def load(fleet: Any) -> stack_config.StackConfig:
    return stack_config.load({"aws:region": "us-west-2", "gpu-training:fleet": fleet}, "gpu-training", "dev")


def refusal(fleet: Any) -> str:
    with pytest.raises(stack_config.ConfigError) as e:
        load(fleet)
    (problem,) = e.value.problems
    return f"{problem.key}: {problem.message}"


def test_roles() -> None:
    assert stack_config.load({"aws:region": "us-west-2"}, "gpu-training", "dev").fleet.role == "none"
    manager = load({"workers": [{"stack": "acme/gpu-training/west-a"}, {"stack": "acme/gpu-training/east_b"}]})
    assert manager.fleet.role == "manager"
    assert [cluster_name(w.stack) for w in manager.fleet.workers] == ["west-a", "east-b"]
    assert manager.fleet.dispatcher == "AllAtOnce"  # Kueue's default dispatcher
    assert load({"manager": "acme/gpu-training/fleet"}).fleet.role == "worker"


@pytest.mark.parametrize(
    ("fleet", "expected"),
    [
        ({"workers": [{"stack": "west-a"}]}, "gpu-training:fleet.workers[0].stack: 'west-a' is not allowed: not a"),
        ({"manager": "acme/fleet"}, "gpu-training:fleet.manager: 'acme/fleet' is not allowed: not a stack reference"),
        ({"workers": [{"stack": "a/p/w"}], "manager": "a/p/m"}, "manager (workers) or a worker (manager), not both"),
        ({"workers": [{"stack": "a/p/w"}, {"stack": "a/q/w"}]}, "workers 'a/p/w' and 'a/q/w' share the cluster"),
        ({"dispatcher": "Incremental"}, "dispatcher 'Incremental' is set but the stack lists no workers"),
        ({"workers": [{"stack": "a/p/w"}], "dispatcher": "Nearest"}, "Nearest"),
        ({"workers": [{"stack": f"a/p/w{i}"} for i in range(MAX_WORKERS + 1)]}, "21 workers: a MultiKueueConfig"),
        ({"workers": [{"stack": "a/p/w", "region": "us-east-1"}]}, "gpu-training:fleet.workers[0].region"),
    ],
)
def test_refused(fleet: Any, expected: str) -> None:
    assert expected in refusal(fleet)


def test_most_workers_allowed() -> None:
    assert len(load({"workers": [{"stack": f"a/p/w{i}"} for i in range(MAX_WORKERS)]}).fleet.workers) == MAX_WORKERS


def test_a_worker_keeps_its_public_endpoint() -> None:
    """The manager's Kueue connects from its own VPC: a worker serving its API on a private endpoint only
    would never be reached (nothing here peers the VPCs)."""
    base = {"aws:region": "us-west-2", "gpu-training:fleet": {"manager": "acme/gpu-training/fleet"}}
    private = {"endpointPublicAccess": False, "endpointPrivateAccess": True}
    narrowed = {"endpointPublicAccessCidrs": ["203.0.113.7/32"]}
    assert stack_config.load({**base, "gpu-training:cluster": narrowed}, "gpu-training", "w").fleet.role == "worker"
    # A stack outside a fleet may keep its API private.
    assert not stack_config.load(
        {"aws:region": "us-west-2", "gpu-training:cluster": private}, "gpu-training", "w"
    ).cluster.endpoint_public_access
    with pytest.raises(stack_config.ConfigError) as e:
        stack_config.load({**base, "gpu-training:cluster": private}, "gpu-training", "w")
    (problem,) = e.value.problems
    assert problem.key == "gpu-training:cluster.endpointPublicAccess"
    assert "fleet worker" in problem.message and "endpointPublicAccessCidrs" in problem.message
