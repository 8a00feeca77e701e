"""Kubeflow Trainer v2 (with JobSet): the vendored chart, the manifest rendered from it, and what turning
``services.trainer`` on does to a running stack.

Checked here:

- the chart package and the rendered manifest are the pinned files, and rendering the package again
  with our values (manifests/trainer/values.yaml) gives the manifest byte for byte;
- the CRDs it installs are upstream's at the tags (git blob ids from manifests/vendor/SOURCES.md), and
  it installs no built-in runtime (the stack owns its runtimes; turning upstream's on would show);
- the offline plan registers every object under the Trainer component, typed, and Kueue's TrainJob
  integration is on exactly when Trainer is;
- a running stack's next `up` with Trainer turned on replaces and deletes nothing: it creates Trainer's
  objects and changes one input of one existing resource, Kueue's configuration (its integration list).
  The Kueue chart's manager Deployment carries the configuration's checksum
  (charts/kueue/templates/manager/manager.yaml at v0.19.2: ``charts.kueue.x-k8s.io/config-checksum``), so
  the manager restarts with the new list; queued and admitted jobs are Workload objects (their admission
  in ``status.admission``), which the restarted manager reads back, and the queue objects are unchanged.
  Kueue sets an integration up once its CRD is served (pkg/controller/jobframework/setup.go at v0.19.2,
  ``WaitForAPI``), so the order of Trainer's CRDs and Kueue's restart does not matter.
"""

from __future__ import annotations

import hashlib
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from facts import operators as ops
from facts import versions
from facts.paths import TOOLS_BIN
from infra.diff.compare import changed_paths
from tests.helpers import ROOT, dev_values, run_stack

HELM = TOOLS_BIN / "helm"
CHART = ROOT / versions.TRAINER_CHART.file
MANIFEST = ROOT / versions.TRAINER_MANIFEST.file
TRAINER = "gputraining:components:Trainer"
RELEASE = "kubernetes:helm.sh/v3:Release"
TRAINJOB_INTEGRATION = "trainer.kubeflow.org/trainjob"
# The CRDs' git blob ids at the tags (kubeflow/trainer v2.2.1 charts/kubeflow-trainer/crds, kubernetes-sigs/jobset
# v0.11.0 charts/jobset/crds), as manifests/vendor/SOURCES.md lists them.
CRD_BLOBS = {
    "kubeflow-trainer/crds/trainer.kubeflow.org_trainjobs.yaml": "a4418a0b52da8ff9f6cc8dc734eab2acb6d1d69d",
    "kubeflow-trainer/crds/trainer.kubeflow.org_trainingruntimes.yaml": "cf2d0654ff60eb117f2814dc1ab9156d05d136b2",
    "kubeflow-trainer/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml": (
        "e947075b5b30ec52b718889dccb169e56dc4c797"
    ),
    "jobset/crds/jobset.x-k8s.io_jobsets.yaml": "e68591e8f4c69bbbd6eba74fbb1a0da9eb3d56a3",
}
DEPENDENCIES = ("jobset", "lws")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _render(*extra: str) -> bytes:
    if not HELM.exists():
        pytest.skip("helm is not unpacked (scripts/k8s_tools.py)")
    out = subprocess.run(
        [
            str(HELM),
            "template",
            "kubeflow-trainer",
            str(CHART),
            "--namespace",
            ops.TRAINER.namespace,
            "--include-crds",
            "-f",
            str(ROOT / versions.TRAINER_VALUES),
            *extra,
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    ).stdout
    return (ROOT / versions.TRAINER_NAMESPACE_DOC).read_bytes() + out


def _docs(data: bytes) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(data, Loader=_Loader) if d]


# ----------------------------------------------------------------------------------------------
# The vendored files
# ----------------------------------------------------------------------------------------------


def test_the_chart_and_the_manifest_are_the_pinned_files():
    assert _sha256(CHART) == versions.TRAINER_CHART.sha256
    assert _sha256(MANIFEST) == versions.TRAINER_MANIFEST.sha256
    assert ops.TRAINER.manifest == versions.TRAINER_MANIFEST


def test_rendering_the_chart_again_gives_the_manifest():
    assert _render() == MANIFEST.read_bytes()


def _chart_yaml(tar: tarfile.TarFile, path: str) -> dict[str, Any]:
    return yaml.safe_load(tar.extractfile(path).read())  # type: ignore[union-attr]


def test_the_packaged_dependencies_are_jobset_0_11_0_and_lws_0_8_0():
    """What Trainer's Chart.yaml asks for (jobset 0.11.0; lws 0.8.0, never rendered), inside the package."""
    with tarfile.open(CHART) as tar:
        chart = _chart_yaml(tar, "kubeflow-trainer/Chart.yaml")
        packaged = {n: _chart_yaml(tar, f"kubeflow-trainer/charts/{n}/Chart.yaml")["version"] for n in DEPENDENCIES}
    assert {d["name"]: d["version"] for d in chart["dependencies"]} == packaged == {"jobset": "0.11.0", "lws": "0.8.0"}
    assert chart["version"] == versions.TRAINER_CHART.version == versions.TRAINER_VERSION.removeprefix("v")


def _crd_files() -> dict[str, bytes]:
    """The CRD files of the package and of its jobset chart, by path below the charts folder."""
    with tarfile.open(CHART) as tar:
        return {
            m.name.removeprefix("kubeflow-trainer/charts/"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if "/crds/" in m.name and "/lws/" not in m.name
        }


def test_the_crds_are_upstreams_at_the_tags():
    files = _crd_files()
    assert {k: _git_blob(v) for k, v in files.items()} == CRD_BLOBS
    docs = _docs(MANIFEST.read_bytes())
    installed = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    for data in files.values():
        crd = yaml.load(data, Loader=_Loader)
        assert installed[crd["metadata"]["name"]] == crd


def test_a_changed_crd_would_not_match_its_blob():
    """The blob check above could fail: one byte more is another blob."""
    data = next(iter(_crd_files().values()))
    assert _git_blob(data + b"\n") not in CRD_BLOBS.values()


def _runtimes(data: bytes) -> list[str]:
    return [d["metadata"]["name"] for d in _docs(data) if d["kind"] in ("ClusterTrainingRuntime", "TrainingRuntime")]


def test_no_built_in_runtime_is_installed():
    assert _runtimes(MANIFEST.read_bytes()) == []


def test_upstreams_runtimes_would_show_if_turned_on():
    """The check above could fail: the chart's own switch installs upstream's runtimes (without EFA)."""
    assert "torch-distributed" in _runtimes(_render("--set", "runtimes.torchDistributed.enabled=true"))


# ----------------------------------------------------------------------------------------------
# The plan, and a running stack's next `up`
# ----------------------------------------------------------------------------------------------


def _values(trainer: bool) -> dict[str, Any]:
    """dev as main had it (no job on Trainer), with Trainer on or off."""
    values = dev_values()
    for job in values.get("gpu-training:jobs") or []:
        job.pop("operator", None)
    values["gpu-training:services"]["trainer"] = trainer
    return values


@pytest.fixture(scope="module")
def plans() -> tuple[Any, Any]:
    return run_stack(_values(False), "dev"), run_stack(_values(True), "dev")


def _frameworks(plan: Any) -> list[str]:
    release = plan.named(RELEASE, "queues-kueue")
    config = yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    return list(config["integrations"]["frameworks"])


def test_the_plan_installs_every_object_of_the_manifest_under_the_trainer_component(plans):
    _, on = plans
    # (and the stack's runtimes, one per GPU group and framework: tests/test_trainjob.py)
    children = [
        c for c in on.children_of(TRAINER, ops.TRAINER.resource) if c.inputs.get("kind") != "ClusterTrainingRuntime"
    ]
    objects = _docs(MANIFEST.read_bytes())
    assert len(children) == len(objects)
    assert {(c.inputs.get("kind"), c.inputs["metadata"]["name"]) for c in children} == {
        (o["kind"], o["metadata"]["name"]) for o in objects
    }


def test_kueues_trainjob_integration_is_on_exactly_with_trainer(plans):
    off, on = plans
    assert TRAINJOB_INTEGRATION not in _frameworks(off)
    assert _frameworks(on) == [*_frameworks(off), TRAINJOB_INTEGRATION]


def test_turning_trainer_on_replaces_nothing_and_changes_only_kueues_integration_list(plans):
    off, on = plans
    before = {r.urn: r for r in off.records}
    after = {r.urn: r for r in on.records}
    assert set(before) <= set(after), "the next up would delete these"
    changed = {
        urn: changed_paths(before[urn].inputs, after[urn].inputs)
        for urn in before
        if before[urn].inputs != after[urn].inputs or before[urn].options != after[urn].options
    }
    kueue = off.named(RELEASE, "queues-kueue").urn
    # The configuration is one YAML text: the change is that text, and only its integration list (above).
    assert changed == {kueue: ["values.managerConfig.controllerManagerConfigYaml"]}
    release_off, release_on = (p.named(RELEASE, "queues-kueue").inputs["values"]["managerConfig"] for p in (off, on))
    config_off, config_on = (yaml.safe_load(r["controllerManagerConfigYaml"]) for r in (release_off, release_on))
    assert changed_paths(config_off, config_on) == ["integrations.frameworks"]
    new = [after[u] for u in set(after) - set(before)]
    assert new and all(r.type == TRAINER or r.parent == {"type": TRAINER, "name": ops.TRAINER.resource} for r in new)
