"""The add-on list preflight checks is the list the program installs (names, builds, values)."""

from __future__ import annotations

import json

import pytest

from stacks.addons import addon_pins
from stacks.config import load
from stacks.config.stackfile import read_stack_config
from tests.helpers import ROOT, minimal_values, run_stack


def _registered(plan) -> dict[str, tuple[str, object]]:
    """Add-on name -> (build, configuration values) as the plan registers them."""
    out: dict[str, tuple[str, object]] = {}
    for r in plan.of_type("aws:eks/addon:Addon"):
        values = r.inputs.get("configurationValues")
        out[r.inputs["addonName"]] = (r.inputs["addonVersion"], json.loads(values) if values else None)
    (cluster,) = plan.of_type("eks:index:Cluster")
    out["vpc-cni"] = (cluster.inputs["vpcCniOptions"]["addonVersion"], None)
    out["kube-proxy"] = (cluster.inputs["kubeProxyAddonOptions"]["version"], None)
    return out


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_pins_are_what_the_program_installs(stack, request):
    _, values = read_stack_config(stack, ROOT)
    cfg = load(values, "gpu-training", stack)
    plan = request.getfixturevalue(f"{stack}_plan")  # the stack's plan, shared (read only)
    assert _registered(plan) == {p.name: (p.version, p.configuration_values) for p in addon_pins(cfg)}


def test_switched_off_services_take_their_addons_out_of_both():
    values = minimal_values(
        storage={"efs": {"enabled": False}, "fsx": {"enabled": False}}, monitoring={"enabled": False}
    )
    cfg = load(values, "gpu-training", "t")
    pins = {p.name for p in addon_pins(cfg)}
    # The node monitoring agent stays: the stack has a GPU group (node auto repair acts on its reports).
    assert pins == {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "eks-node-monitoring-agent"}
    assert set(_registered(run_stack(values))) == pins


def test_without_gpu_groups_there_is_no_node_monitoring_agent():
    values = minimal_values(gpuNodeGroups=[], jobs=None)
    cfg = load(values, "gpu-training", "t")
    assert "eks-node-monitoring-agent" not in {p.name for p in addon_pins(cfg)}
    assert "eks-node-monitoring-agent" not in _registered(run_stack(values))
