"""The training operator's vendored sources, its rendered manifest, and what the plan installs.

`pulumi up` installs manifests/vendor/training-operator-v1.9.4.yaml object by object: the output of
the real kustomize (the pinned kubectl, unpacked by scripts/k8s_tools.py) run on our overlay
manifests/training-operator, which builds on upstream's v1.9.4 standalone overlay vendored in
manifests/vendor/training-operator-v1.9.4. Checked here:

- rendering the overlay again gives the vendored file byte for byte, and its sha256 is the pinned one;
- the vendored upstream files are exactly those listed in manifests/vendor/SOURCES.md, unchanged;
- every rendered object, CRDs included, is valid for the cluster version's schema;
- the offline plan registers every rendered object, typed, under the TrainingOperator component,
  and nothing for kustomize; the training operator brings no mpijobs CRD;
- a manifest that is not the pinned file is refused;
- each object's resource is aliased to the child of the kustomize Directory that installed it
  before, so stacks made then keep their objects.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from components import operators
from facts import operators as ops
from facts import versions
from facts.paths import TOOLS_BIN
from tests.helpers import ROOT, dev_values, run_stack

KUBECTL = TOOLS_BIN / "kubectl"
MANIFEST = ROOT / versions.TRAINING_OPERATOR_MANIFEST.file
OVERLAY = ROOT / versions.TRAINING_OPERATOR_KUSTOMIZATION
UPSTREAM = ROOT / versions.TRAINING_OPERATOR_UPSTREAM
SOURCES = ROOT / "manifests" / "vendor" / "SOURCES.md"
TRAINING_OPERATOR = "gputraining:components:TrainingOperator"
UPSTREAM_COMMIT = "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7"  # kubeflow/training-operator tag v1.9.4

# What the v1.9.4 standalone overlay with our patches installs: (kind, name, namespace).
EXPECTED = {
    ("Namespace", "kubeflow", None),
    ("CustomResourceDefinition", "paddlejobs.kubeflow.org", None),
    ("CustomResourceDefinition", "pytorchjobs.kubeflow.org", None),
    ("ServiceAccount", "training-operator", "kubeflow"),
    ("ClusterRole", "training-operator", None),
    ("ClusterRoleBinding", "training-operator", None),
    ("Secret", "training-operator-webhook-cert", "kubeflow"),
    ("Service", "training-operator", "kubeflow"),
    ("Deployment", "training-operator", "kubeflow"),
    ("ValidatingWebhookConfiguration", "validator.training-operator.kubeflow.org", None),
}


def _identity(o: dict[str, Any]) -> tuple[str, str, str | None]:
    return (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))


# libyaml's loader when PyYAML has it: the CRDs make the manifest 3 MB.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _documents(data: bytes) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(data, Loader=_Loader) if d]


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    """The vendored rendered manifest, parsed on its own (not through the component's loader)."""
    return _documents(MANIFEST.read_bytes())


# ----------------------------------------------------------------------------------------------
# The rendered manifest is what kustomize makes of the overlay
# ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(
    not KUBECTL.exists(), reason="no kubectl: run `.venv/bin/python scripts/k8s_tools.py` (scripts/test.sh does)"
)
def test_rendering_the_overlay_again_gives_the_vendored_manifest():
    out = subprocess.run(
        [str(KUBECTL), "kustomize", str(OVERLAY)], capture_output=True, timeout=120, check=True, cwd=ROOT
    ).stdout
    assert len(out) > 1_000_000
    assert hashlib.sha256(out).hexdigest() == versions.TRAINING_OPERATOR_MANIFEST.sha256
    # Byte for byte (the digest says so already; a difference shows where).
    assert out == MANIFEST.read_bytes(), (
        "render again: .tools/bin/kubectl kustomize manifests/training-operator > "
        + versions.TRAINING_OPERATOR_MANIFEST.file
    )


def test_the_manifest_pin_matches_the_file_and_sources():
    assert hashlib.sha256(MANIFEST.read_bytes()).hexdigest() == versions.TRAINING_OPERATOR_MANIFEST.sha256
    (row,) = [line for line in SOURCES.read_text().splitlines() if line.startswith(f"| {MANIFEST.name} ")]
    assert row.rstrip().endswith(f"| {versions.TRAINING_OPERATOR_MANIFEST.sha256} |")
    assert (
        f"kubectl kustomize {versions.TRAINING_OPERATOR_KUSTOMIZATION} > {versions.TRAINING_OPERATOR_MANIFEST.file}"
        in row
    )


def test_the_rendered_manifest_holds_the_expected_objects(rendered):
    assert len(rendered) == 10
    assert {_identity(o) for o in rendered} == EXPECTED
    (dep,) = [o for o in rendered if o["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["args"] == [f"--enable-scheme={s}" for s in versions.TRAINING_OPERATOR_SCHEMES]
    assert container["args"] == ["--enable-scheme=pytorchjob", "--enable-scheme=paddlejob"]
    assert not [o for o in rendered if "mpijob" in o["metadata"]["name"]]
    # The webhook calls the Service of the operator, in its namespace.
    (webhook,) = [o for o in rendered if o["kind"] == "ValidatingWebhookConfiguration"]
    services = {
        (w["clientConfig"]["service"]["namespace"], w["clientConfig"]["service"]["name"]) for w in webhook["webhooks"]
    }
    assert services == {("kubeflow", "training-operator")}


# ----------------------------------------------------------------------------------------------
# The vendored upstream files
# ----------------------------------------------------------------------------------------------


def _sources_table() -> dict[str, tuple[str, str]]:
    """manifests/vendor/SOURCES.md's per-file table of training-operator-v1.9.4/: path -> (git blob, sha256)."""
    text = SOURCES.read_text()
    section = text.split(f"## {UPSTREAM.name}/", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\S+) \| ([0-9a-f]{40}) \| ([0-9a-f]{64}) \|$", section, flags=re.M)
    return {path: (blob, sha256) for path, blob, sha256 in rows}


def _git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_vendored_upstream_files_are_the_listed_ones_unchanged():
    table = _sources_table()
    assert len(table) == 19
    on_disk = {p.relative_to(UPSTREAM).as_posix(): p for p in UPSTREAM.rglob("*") if p.is_file()}
    assert sorted(on_disk) == sorted(table), "the folder must hold exactly the files listed in SOURCES.md"
    changed = []
    for rel, (blob, sha256) in table.items():
        data = on_disk[rel].read_bytes()
        if hashlib.sha256(data).hexdigest() != sha256 or _git_blob(data) != blob:
            changed.append(rel)
    assert changed == []


def test_the_sources_row_names_the_upstream_tag_and_commit():
    (row,) = [line for line in SOURCES.read_text().splitlines() if line.startswith(f"| {UPSTREAM.name}/ ")]
    assert "kubeflow/training-operator" in row
    assert f"tag {versions.TRAINING_OPERATOR_REF} (commit {UPSTREAM_COMMIT})" in row


def test_the_vendored_overlay_is_upstreams_standalone_overlay():
    overlay = yaml.safe_load((UPSTREAM / "manifests" / "overlays" / "standalone" / "kustomization.yaml").read_text())
    assert overlay["namespace"] == "kubeflow"
    assert overlay["resources"] == ["../../base", "namespace.yaml"]
    assert overlay["images"] == [{"name": "ghcr.io/kubeflow/training-v1/training-operator", "newTag": "v1-93c5489"}]


def test_the_upstream_mpijob_crd_is_vendored_and_deleted_by_our_overlay():
    """kustomize reads upstream's v1 MPIJob CRD (its base lists it), and our patch deletes it."""
    (crd,) = _documents((UPSTREAM / "manifests" / "base" / "crds" / "kubeflow.org_mpijobs.yaml").read_bytes())
    assert crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    ours = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    deleted = [
        yaml.safe_load(p["patch"]) for p in ours["patches"] if p["target"].get("kind") == "CustomResourceDefinition"
    ]
    # mpijobs (the MPI operator owns it), and the CRDs of the schemes the operator does not run.
    names = [d["metadata"]["name"] for d in deleted if d.get("$patch") == "delete"]
    assert names == ["mpijobs.kubeflow.org", "tfjobs.kubeflow.org", "jaxjobs.kubeflow.org", "xgboostjobs.kubeflow.org"]


# ----------------------------------------------------------------------------------------------
# Kubernetes schema of every rendered object
# ----------------------------------------------------------------------------------------------


def test_every_rendered_object_is_valid_for_the_cluster_version(rendered):
    assert versions.KUBERNETES_DEFAULT == "1.36"
    failures = []
    for o in rendered:
        try:
            assert kubernetes_validate.validate(o, versions.KUBERNETES_DEFAULT, True) == versions.KUBERNETES_DEFAULT
        except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as err:
            failures.append(f"{o['kind']}/{o['metadata']['name']}: {getattr(err, 'message', err)}")
    assert failures == []
    assert Counter(o["kind"] for o in rendered)["CustomResourceDefinition"] == 2


def _misspelt(obj: dict[str, Any]) -> dict[str, Any]:
    broken = copy.deepcopy(obj)
    if broken["kind"] == "ValidatingWebhookConfiguration":
        broken["webhooks"][0]["failurePolicies"] = broken["webhooks"][0].pop("failurePolicy")
    elif broken["kind"] == "CustomResourceDefinition":
        broken["spec"]["versions"][0]["serve"] = broken["spec"]["versions"][0].pop("served")
    else:
        broken["spec"]["replica"] = broken["spec"].pop("replicas")
    return broken


@pytest.mark.parametrize("kind", ["CustomResourceDefinition", "ValidatingWebhookConfiguration", "Deployment"])
def test_the_schema_check_is_not_vacuous(rendered, kind):
    obj = next(o for o in rendered if o["kind"] == kind)
    kubernetes_validate.validate(obj, versions.KUBERNETES_DEFAULT, True)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(_misspelt(obj), versions.KUBERNETES_DEFAULT, True)


# ----------------------------------------------------------------------------------------------
# The offline plan installs every rendered object
# ----------------------------------------------------------------------------------------------


def test_the_plan_registers_every_rendered_object_under_the_component(dev_plan, rendered):
    (component,) = dev_plan.of_type(TRAINING_OPERATOR)
    children = dev_plan.children_of(TRAINING_OPERATOR, component.name)
    assert len(children) == len(rendered) == 10
    assert sorted(_identity(r.inputs) for r in children) == sorted(_identity(o) for o in rendered)
    assert all(
        r.custom and r.type.startswith("kubernetes:") and r.type.endswith(":" + r.inputs["kind"]) for r in children
    )
    by_identity = {_identity(o): o for o in rendered}
    for r in children:
        expected = dict(by_identity[_identity(r.inputs)])
        if expected["kind"] == "Secret":
            assert expected.pop("data") == {}  # left out: the SDK would make it a secret output
        assert r.inputs == expected, r.name
    # No other part of the plan registers any of them (a second `kubeflow` Namespace, say).
    assert len([o for o in dev_plan.kubernetes_objects() if _identity(o) in by_identity]) == 10


def test_the_plan_has_no_kustomize_resource(dev_plan):
    assert [r.type for r in dev_plan.records if "kustomize" in r.type] == []
    assert not [r for r in dev_plan.records if r.type.startswith("kubernetes:yaml/")]


def test_the_training_operator_brings_no_mpijob_crd(dev_plan):
    (component,) = dev_plan.of_type(TRAINING_OPERATOR)
    crds = [
        r.inputs["metadata"]["name"]
        for r in dev_plan.children_of(TRAINING_OPERATOR, component.name)
        if r.inputs["kind"] == "CustomResourceDefinition"
    ]
    # Only the CRDs of the schemes it runs (--enable-scheme=pytorchjob,paddlejob).
    assert sorted(crds) == ["paddlejobs.kubeflow.org", "pytorchjobs.kubeflow.org"]
    # The one mpijobs CRD of the plan is the MPI operator's v2beta1.
    mpijobs = [
        r
        for r in dev_plan.records
        if r.inputs.get("kind") == "CustomResourceDefinition" and r.inputs["metadata"]["name"] == "mpijobs.kubeflow.org"
    ]
    assert [r.parent["type"] for r in mpijobs] == ["gputraining:components:MpiOperator"]


# ----------------------------------------------------------------------------------------------
# A manifest that is not the pinned one
# ----------------------------------------------------------------------------------------------


def _tampered(tmp_path: Path) -> Path:
    original = MANIFEST.read_bytes()
    path = tmp_path / MANIFEST.name
    path.write_bytes(original.replace(b"--enable-scheme=paddlejob", b"--enable-scheme=mpijob", 1))
    assert path.read_bytes() != original
    return path


def test_a_tampered_manifest_is_refused(tmp_path):
    tampered = _tampered(tmp_path)
    with pytest.raises(operators.ManifestChecksumError) as info:
        operators.load_manifest(tampered, versions.TRAINING_OPERATOR_MANIFEST.sha256)
    assert versions.TRAINING_OPERATOR_MANIFEST.sha256 in str(info.value)
    assert hashlib.sha256(tampered.read_bytes()).hexdigest() in str(info.value)


def test_the_program_refuses_a_tampered_manifest(tmp_path, monkeypatch):
    manifest = dataclasses.replace(
        ops.TRAINING_OPERATOR.manifest, file=str(_tampered(tmp_path))
    )  # the pinned checksum, another file
    tampered = dataclasses.replace(ops.TRAINING_OPERATOR, manifest=manifest)
    monkeypatch.setattr(
        ops, "OPERATORS", tuple(tampered if op is ops.TRAINING_OPERATOR else op for op in ops.OPERATORS)
    )
    with pytest.raises(operators.ManifestChecksumError):
        run_stack(dev_values(), stack="dev")


# ----------------------------------------------------------------------------------------------
# Stacks made when the overlay was a kustomize Directory keep their objects
# ----------------------------------------------------------------------------------------------

# The names pulumi-kubernetes' kustomize.v2.Directory "training-operator-kustomize" gave the objects
# (`<directory>:[<namespace>/]<name>`), as earlier stacks hold them in their state.
DIRECTORY_CHILD_NAMES = {
    ("Namespace", "kubeflow"): "training-operator-kustomize:kubeflow",
    ("CustomResourceDefinition", "paddlejobs.kubeflow.org"): "training-operator-kustomize:paddlejobs.kubeflow.org",
    ("CustomResourceDefinition", "pytorchjobs.kubeflow.org"): "training-operator-kustomize:pytorchjobs.kubeflow.org",
    ("ServiceAccount", "training-operator"): "training-operator-kustomize:kubeflow/training-operator",
    ("ClusterRole", "training-operator"): "training-operator-kustomize:training-operator",
    ("ClusterRoleBinding", "training-operator"): "training-operator-kustomize:training-operator",
    ("Secret", "training-operator-webhook-cert"): "training-operator-kustomize:kubeflow/training-operator-webhook-cert",
    ("Service", "training-operator"): "training-operator-kustomize:kubeflow/training-operator",
    ("Deployment", "training-operator"): "training-operator-kustomize:kubeflow/training-operator",
    (
        "ValidatingWebhookConfiguration",
        "validator.training-operator.kubeflow.org",
    ): "training-operator-kustomize:validator.training-operator.kubeflow.org",
}


def test_every_object_is_aliased_to_its_kustomize_directory_child(monkeypatch, rendered):
    seen: dict[str, Any] = {}
    register = operators.register_objects

    def spy(name, objects, parent, aliases=None):
        seen[name] = aliases
        return register(name, objects, parent, aliases)

    monkeypatch.setattr(operators, "register_objects", spy)
    run_stack(dev_values(), stack="dev")
    assert seen["mpi-operator"] is None, "the MPI operator's resources had no other identity"
    aliases = seen["training-operator"]
    assert aliases is not None
    got = {}
    for o in rendered:
        (alias,) = aliases(o)
        assert alias.parent is not None, "the alias must name the Directory as the earlier parent"
        got[(o["kind"], o["metadata"]["name"])] = alias.name
    assert got == DIRECTORY_CHILD_NAMES
