"""The vendored MPI operator manifest: upstream's release file with the image pinned to the exact
release tag (the one documented edit, manifests/vendor/SOURCES.md), and the MPIJob CRD the emitted
jobs are validated against is the one it installs."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import yaml

from components import operators
from facts import versions
from facts.paths import PROJECT_ROOT
from tests import crd_validation

# What the release branch's manifest says, one line, and what the vendored file says instead.
UPSTREAM_IMAGE_LINE = b"        image: mpioperator/mpi-operator:0.8\n"


def _sources_row() -> str:
    sources = (PROJECT_ROOT / "manifests" / "vendor" / "SOURCES.md").read_text()
    name = Path(versions.MPI_OPERATOR_MANIFEST.file).name
    (row,) = [line for line in sources.splitlines() if line.startswith(f"| {name} ")]
    return row


def _vendored() -> bytes:
    return (PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file).read_bytes()


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_vendored_manifest_is_upstreams_with_only_the_image_tag_pinned():
    ours = _vendored()
    assert hashlib.sha256(ours).hexdigest() == versions.MPI_OPERATOR_MANIFEST.sha256
    pinned_line = f"        image: {versions.MPI_OPERATOR_IMAGE}\n".encode()
    assert ours.count(pinned_line) == 1
    upstream = ours.replace(pinned_line, UPSTREAM_IMAGE_LINE)
    # Exactly one line differs.
    diff = [(a, b) for a, b in zip(ours.splitlines(), upstream.splitlines()) if a != b]
    assert len(ours.splitlines()) == len(upstream.splitlines())
    assert diff == [(pinned_line.rstrip(b"\n"), UPSTREAM_IMAGE_LINE.rstrip(b"\n"))]
    # ... and undoing it gives upstream's file, by the checksum and git blob SOURCES.md records.
    row = _sources_row()
    (upstream_sha,) = re.findall(r"upstream sha256 ([0-9a-f]{64})", row)
    (blob,) = re.findall(r"git blob ([0-9a-f]{40})", row)
    assert hashlib.sha256(upstream).hexdigest() == upstream_sha
    assert _git_blob_id(upstream) == blob
    assert f"{versions.MPI_OPERATOR_MANIFEST.sha256} (ours)" in row


def test_the_operator_image_is_the_exact_release_not_a_floating_tag():
    (deployment,) = [
        d
        for d in operators.load_manifest(
            PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file, versions.MPI_OPERATOR_MANIFEST.sha256
        )
        if d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == versions.MPI_OPERATOR_IMAGE
    repo, tag = container["image"].rsplit(":", 1)
    assert repo == "mpioperator/mpi-operator"
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag), f"{tag} is not an exact release tag"
    assert f"v{tag}" == versions.MPI_OPERATOR_VERSION
    assert Path(versions.MPI_OPERATOR_MANIFEST.file).name == f"mpi-operator-{versions.MPI_OPERATOR_VERSION}.yaml"


def _vendored_crd() -> dict:
    docs = operators.load_manifest(
        PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file, versions.MPI_OPERATOR_MANIFEST.sha256
    )
    (crd,) = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    return crd


def test_the_installed_mpijob_crd_is_the_one_the_job_tests_validate_against():
    path = crd_validation.CRD_FILES[("kubeflow.org/v2beta1", "MPIJob")]
    assert path == PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file
    assert crd_validation.crd_in(path, "MPIJob") == _vendored_crd()


def test_the_stacks_mpijobs_validate_against_the_installed_crd(dev_plan):
    crd = _vendored_crd()
    assert crd["metadata"]["name"] == "mpijobs.kubeflow.org"
    mpijobs = [
        o for o in dev_plan.kubernetes_objects() if o["apiVersion"] == "kubeflow.org/v2beta1" and o["kind"] == "MPIJob"
    ]
    assert mpijobs, "the dev stack emits an MPIJob (its nccl-test job)"
    for job in mpijobs:
        assert crd_validation.errors(job, crd) == [], job["metadata"]["name"]
    # Not vacuous: a Worker without replicas fails against the same CRD.
    broken = yaml.safe_load(yaml.safe_dump(mpijobs[0]))
    del broken["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert any("[Worker].replicas" in e for e in crd_validation.errors(broken, crd))


def test_the_bump_keeps_every_resource_name_so_up_updates_in_place(dev_plan):
    """The resources of v0.8.0's objects, by the names the component gives them: the same in v0.8.2,
    so `pulumi up` updates the Deployment's image instead of replacing anything (no aliases needed)."""
    v080 = {
        "mpi-operator-clusterrole-kubeflow-mpijobs-admin",
        "mpi-operator-clusterrole-kubeflow-mpijobs-edit",
        "mpi-operator-clusterrole-kubeflow-mpijobs-view",
        "mpi-operator-clusterrole-mpi-operator",
        "mpi-operator-clusterrolebinding-mpi-operator",
        "mpi-operator-customresourcedefinition-mpijobs.kubeflow.org",
        "mpi-operator-deployment-mpi-operator",
        "mpi-operator-namespace-mpi-operator",
        "mpi-operator-serviceaccount-mpi-operator",
    }
    children = dev_plan.children_of("gputraining:components:MpiOperator", "mpi-operator")
    assert {r.name for r in children} == v080
    # ... and their types (the kinds' apiVersions did not move either).
    assert {(r.name, r.type) for r in children} == {(n, f"kubernetes:{KIND_TYPES[n.split('-')[2]]}") for n in v080}


KIND_TYPES = {
    "clusterrole": "rbac.authorization.k8s.io/v1:ClusterRole",
    "clusterrolebinding": "rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    "customresourcedefinition": "apiextensions.k8s.io/v1:CustomResourceDefinition",
    "deployment": "apps/v1:Deployment",
    "namespace": "core/v1:Namespace",
    "serviceaccount": "core/v1:ServiceAccount",
}
