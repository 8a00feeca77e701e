"""The node monitoring agent's DCGM host engine runs on every GPU node.

The `eks-node-monitoring-agent` add-on's `dcgm-server` DaemonSet takes its tolerations only from
the chart value `dcgmAgent.tolerations` (default none). GPU nodes carry the GPU taint and their
group's own taints: without matching tolerations the DaemonSet never runs there, the agent reports
DCGMError (AcceleratedHardwareReady) and node auto repair reboots or replaces every GPU node.

Here the upstream chart of the build the plan pins (vendored, manifests/vendor/SOURCES.md) is
rendered by the real `helm template` with exactly the configuration values the plan registers on
the aws:eks/addon:Addon, once per supported Kubernetes minor (each has its own build and chart),
and the rendered DaemonSet is scheduled on paper against every node group of the plan; the values
are also validated against the build's configuration schema (what DescribeAddonConfiguration
returns).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from components.charts import verified
from facts import versions
from facts.kube import BURN_IN_TAINT, INSTANCE_TYPE_LABEL
from infra.invariants import tolerates
from stacks.addons import addon_pins
from stacks.config import load
from tests.helpers import AGENT, AGENT_NAMESPACE, HELM, ROOT, minimal_values, render_agent, run_stack
from tests.scheduling import kubernetes_taints, node_groups, schedulable

ADDON = "aws:eks/addon:Addon"
DCGM = "dcgm-server"  # the chart's DaemonSet of the DCGM host engine (templates/dcgm-daemonset.yaml)

pytestmark = pytest.mark.skipif(
    not HELM.exists(), reason="no helm: run `.venv/bin/python scripts/k8s_tools.py` (scripts/test.sh does)"
)

# A GPU group with taints of its own next to the GPU taint (one NoSchedule with a value, one
# NoExecute without), and one with the GPU taint only.
GROUPS = [
    {
        "name": "p4d",
        "instanceType": "p4d.24xlarge",
        "maxSize": 2,
        "taints": [
            {"key": "team", "value": "vision", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "", "effect": "NoExecute"},
        ],
    },
    {"name": "p5", "instanceType": "p5.48xlarge", "maxSize": 2},
]


@pytest.fixture(scope="module", params=versions.KUBERNETES_SUPPORTED)
def k8s(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def plan(k8s):
    return run_stack(minimal_values(cluster={"kubernetesVersion": k8s}, gpuNodeGroups=GROUPS))


@pytest.fixture(scope="module")
def addon(plan) -> dict[str, Any]:
    """The add-on's inputs as the plan registers them."""
    (record,) = [r for r in plan.of_type(ADDON) if r.inputs["addonName"] == AGENT]
    return record.inputs


@pytest.fixture(scope="module")
def sent(addon) -> dict[str, Any]:
    """The configuration values the plan sends to EKS, parsed."""
    return json.loads(addon["configurationValues"])


@pytest.fixture(scope="module")
def chart(k8s, addon) -> str:
    """The vendored chart of the build the plan pins, checksum checked."""
    assert addon["addonVersion"] == versions.NODE_MONITORING_AGENT_ADDON[k8s]
    assert versions.NODE_MONITORING_AGENT_CHART[k8s].version == _chart_version(k8s)
    return verified(versions.NODE_MONITORING_AGENT_CHART[k8s], ROOT)


@pytest.fixture(scope="module")
def schema(k8s) -> dict[str, Any]:
    path = ROOT / versions.NODE_MONITORING_AGENT_SCHEMA[k8s].file
    assert hashlib.sha256(path.read_bytes()).hexdigest() == versions.NODE_MONITORING_AGENT_SCHEMA[k8s].sha256
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _chart_version(k8s: str) -> str:
    """The chart version of a minor's build: the upstream tag behind v1.6.x-eksbuild.N is v1.6.x."""
    return versions.NODE_MONITORING_AGENT_ADDON[k8s].split("-")[0].lstrip("v")


@pytest.fixture(scope="module")
def rendered(chart, k8s, sent) -> dict[str, list[dict[str, Any]]]:
    """The chart rendered with the values the plan sends, and with none (EKS's defaults)."""
    return {"sent": render_agent(chart, k8s, sent), "none": render_agent(chart, k8s, None)}


def daemonset(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == name]
    return ds


def pod_spec(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    spec: dict[str, Any] = daemonset(objects, name)["spec"]["template"]["spec"]
    return spec


def nodes(plan) -> list[dict[str, Any]]:
    """Each node group as its nodes look: the group's labels plus those the kubelet sets (instance
    type, OS, architecture from the AMI type), and its taints."""
    out = []
    for r in node_groups(plan):
        labels = {
            **(r.inputs.get("labels") or {}),
            INSTANCE_TYPE_LABEL: r.inputs["instanceTypes"][0],
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "arm64" if "ARM" in r.inputs["amiType"] else "amd64",
        }
        out.append(
            {
                "name": r.name,
                "labels": labels,
                "taints": kubernetes_taints(r),
                "gpu": r.inputs["amiType"] == versions.GPU_AMI_TYPE,
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# The vendored files
# ---------------------------------------------------------------------------------------------


def test_each_minor_has_its_chart_and_schema_listed_in_sources():
    sources = (ROOT / "manifests" / "vendor" / "SOURCES.md").read_text()
    for k8s in versions.KUBERNETES_SUPPORTED:
        for pinned in (versions.NODE_MONITORING_AGENT_CHART[k8s], versions.NODE_MONITORING_AGENT_SCHEMA[k8s]):
            (row,) = [
                line
                for line in sources.splitlines()
                if line.startswith(f"| {pinned.file.removeprefix('manifests/vendor/')} ")
            ]
            assert pinned.sha256 in row and f"tag v{_chart_version(k8s)} " in row
        # The package holds the chart of the build's tag.
        with tarfile.open(ROOT / versions.NODE_MONITORING_AGENT_CHART[k8s].file) as tar:
            member = tar.extractfile(f"{AGENT}/Chart.yaml")
            assert member is not None
            assert yaml.safe_load(io.TextIOWrapper(member))["version"] == _chart_version(k8s)


# ---------------------------------------------------------------------------------------------
# The values the plan sends
# ---------------------------------------------------------------------------------------------


def test_the_plan_sends_one_toleration_per_gpu_taint(sent):
    assert sent == {
        "dcgmAgent": {
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                {"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"},
                # Kubernetes refuses a value with Exists: a taint without a value is tolerated by key.
                {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
                # Burn-in: the DCGM host engine runs while a new node is checked.
                {"key": BURN_IN_TAINT["key"], "operator": "Equal", "value": "pending", "effect": "NoSchedule"},
            ]
        }
    }


def test_the_values_fit_the_builds_configuration_schema(sent, schema):
    jsonschema.validate(sent, schema)
    # The schema would refuse the values under any other key: this check can fail.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"dcgmAgent": {"toleration": sent["dcgmAgent"]["tolerations"]}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"dcgm": sent["dcgmAgent"]}, schema)


def test_shared_taints_are_tolerated_once_in_config_order():
    shared = {"key": "team", "value": "vision", "effect": "NoSchedule"}
    groups = [
        {
            "name": "a",
            "instanceType": "p4d.24xlarge",
            "maxSize": 1,
            "taints": [shared, {"key": "x", "value": "1", "effect": "PreferNoSchedule"}],
        },
        {
            "name": "b",
            "instanceType": "p5.48xlarge",
            "maxSize": 1,
            "taints": [{"key": "org", "value": "nlp", "effect": "NoSchedule"}, shared],
        },
    ]
    cfg = load(minimal_values(gpuNodeGroups=groups), "gpu-training", "t")
    (pin,) = [p for p in addon_pins(cfg) if p.name == AGENT]
    assert pin.configuration_values is not None
    assert [(t["key"], t.get("value")) for t in pin.configuration_values["dcgmAgent"]["tolerations"]] == [
        ("nvidia.com/gpu", "true"),
        ("team", "vision"),
        ("x", "1"),
        ("org", "nlp"),
        (BURN_IN_TAINT["key"], "pending"),
    ]


# ---------------------------------------------------------------------------------------------
# The chart rendered with them
# ---------------------------------------------------------------------------------------------


def test_the_rendered_daemonsets_are_valid_for_the_cluster_version(rendered, k8s):
    for name in (DCGM, AGENT):
        ds = daemonset(rendered["sent"], name)
        assert ds["metadata"]["namespace"] == AGENT_NAMESPACE
        kubernetes_validate.validate(ds, k8s, True)


def test_dcgm_server_lands_on_every_gpu_group_whatever_its_taints_and_not_on_system_nodes(plan, rendered, sent):
    pod = pod_spec(rendered["sent"], DCGM)
    assert pod["tolerations"] == sent["dcgmAgent"]["tolerations"]
    groups = nodes(plan)
    assert sum(n["gpu"] for n in groups) == len(GROUPS)
    for node in groups:
        if node["gpu"]:
            for taint in node["taints"]:
                assert tolerates(pod["tolerations"], taint), (node["name"], taint)
        # Its node affinity keeps it to GPU instance types; the system nodes are not.
        assert schedulable(pod, node) == node["gpu"], node["name"]


def test_without_the_values_dcgm_server_lands_on_no_gpu_node(plan, rendered):
    pod = pod_spec(rendered["none"], DCGM)
    assert not pod.get("tolerations")
    for node in nodes(plan):
        if node["gpu"]:
            assert not schedulable(pod, node), node["name"]
            # Only the taints keep it off: the same pod without them would be scheduled.
            assert schedulable(pod, {**node, "taints": []}), node["name"]


def test_the_node_agent_itself_lands_everywhere_with_or_without_the_values(plan, rendered):
    for objects in rendered.values():
        pod = pod_spec(objects, AGENT)
        for node in nodes(plan):
            assert schedulable(pod, node), node["name"]
