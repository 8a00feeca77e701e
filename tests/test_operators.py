"""Each operator of facts/operators.py, as every layer reads it: its switch is a key of the services
section, its manifest is its pinned file and installs its namespace and the CRDs of its kinds at the
versions the jobs write, the plan installs it (and only it) when its switch is on, the queues turn on
Kueue's integrations of exactly the installed operators' kinds, the team policy covers its kinds, a
job whose operator is off is refused naming it, and its namespace is reserved. A new operator is
checked by all of these without a test of its own."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from components import operators as components
from components import team_policy
from facts import operators as ops
from facts.kube import RESERVED_NAMESPACES
from facts.paths import PROJECT_ROOT
from jobs.registry import JOB_KINDS
from stacks.config import ConfigError, ServicesConfig, load
from stacks.queues.admission import REPLICA_SPECS
from tests.helpers import ROOT, minimal_values, run_stack

CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
RELEASE = "kubernetes:helm.sh/v3:Release"
BY_NAME = {op.name: op for op in ops.OPERATORS}


def _id(op: ops.Operator) -> str:
    return op.name


def test_the_operators_are_named_once_and_their_kinds_once():
    assert len(BY_NAME) == len(ops.OPERATORS)
    assert len({op.switch for op in ops.OPERATORS}) == len({op.component for op in ops.OPERATORS}) == len(ops.OPERATORS)
    assert (
        len({op.namespace for op in ops.OPERATORS}) == len({op.resource for op in ops.OPERATORS}) == len(ops.OPERATORS)
    )
    kinds = [k.kind for k in ops.KINDS]
    assert len(kinds) == len(set(kinds)) and ops.REPLICA_SPECS == REPLICA_SPECS == team_policy.JOB_REPLICA_SPECS
    assert len({k.integration for k in ops.KINDS}) == len(kinds)


def test_the_two_operators_as_the_stack_has_always_known_them():
    """Their identities are in every stack's state (component type and name) and Kueue's names."""
    mpi, training = ops.MPI_OPERATOR, ops.TRAINING_OPERATOR
    assert (mpi.name, mpi.switch, mpi.component, mpi.resource, mpi.namespace) == (
        "mpi",
        "mpiOperator",
        "MpiOperator",
        "mpi-operator",
        "mpi-operator",
    )
    assert (training.name, training.switch, training.component, training.resource, training.namespace) == (
        "training",
        "trainingOperator",
        "TrainingOperator",
        "training-operator",
        "kubeflow",
    )
    assert [(k.kind, k.replica_specs, k.integration) for k in mpi.kinds + training.kinds] == [
        ("MPIJob", "mpiReplicaSpecs", "kubeflow.org/mpijob"),
        ("PyTorchJob", "pytorchReplicaSpecs", "kubeflow.org/pytorchjob"),
        ("PaddleJob", "paddleReplicaSpecs", "kubeflow.org/paddlejob"),
    ]


def test_every_switch_of_an_operator_is_a_services_key_and_every_operator_key_an_operator():
    fields = ServicesConfig.model_fields
    for op in ops.OPERATORS:
        field = fields[op.switch_field]
        assert field.alias == op.switch and field.annotation is bool and field.default is op.on_by_default, op.name
        assert field.description == f"install {op.title}"
    assert {name for name in fields if name.endswith("_operator")} <= {op.switch_field for op in ops.OPERATORS}


@pytest.mark.parametrize("op", ops.OPERATORS, ids=_id)
def test_the_manifest_is_the_pinned_file_and_serves_the_kinds_the_jobs_write(op: ops.Operator):
    data = (ROOT / op.manifest.file).read_bytes()
    assert hashlib.sha256(data).hexdigest() == op.manifest.sha256
    assert op.manifest.file.startswith("manifests/vendor/") and op.version in op.manifest.file
    (row,) = [
        line
        for line in (ROOT / "manifests/vendor/SOURCES.md").read_text().splitlines()
        if line.startswith(f"| {op.manifest.file.removeprefix('manifests/vendor/')} ")
    ]
    assert op.manifest.sha256 in row
    docs = components.load_manifest(PROJECT_ROOT / op.manifest.file, op.manifest.sha256)
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"} == {op.namespace}
    crds = {d["spec"]["names"]["kind"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    for k in op.kinds:
        crd = crds[k.kind]
        assert crd["metadata"]["name"] == f"{k.plural}.{k.group}" and crd["spec"]["group"] == k.group
        served = [v["name"] for v in crd["spec"]["versions"] if v["served"]]
        assert k.api_version.split("/")[1] in served, (k.kind, served)
        assert (
            k.replica_specs is None  # a TrainJob's pod templates are its runtime's
            or k.replica_specs
            in crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        )


def test_every_job_kind_names_one_of_the_operators():
    """(An operator needs no job kind of the stack's: teams submit their own jobs of its kinds.)"""
    assert all(cls.OPERATOR is None or cls.OPERATOR in ops.OPERATORS for cls in JOB_KINDS.values())
    assert {cls.OPERATOR.name for cls in JOB_KINDS.values() if cls.OPERATOR is not None} == {"mpi", "training"}


@pytest.fixture(scope="module")
def without() -> dict[str, object]:
    """A plan per operator, with that one switched off."""
    return {op.name: run_stack(minimal_values(services=_all_but(op))) for op in ops.OPERATORS}


def _all_but(op: ops.Operator) -> dict[str, bool]:
    """Every operator's switch on but ``op``'s."""
    return {o.switch: o is not op for o in ops.OPERATORS}


def _frameworks(plan) -> list[str]:
    (kueue,) = [r for r in plan.of_type(RELEASE) if r.inputs["name"] == "kueue"]
    return yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])["integrations"][
        "frameworks"
    ]


def _installed(plan) -> list[str]:
    types = {f"gputraining:components:{op.component}": op.name for op in ops.OPERATORS}
    return [types[r.type] for r in plan.records if r.type in types]


def test_the_plan_installs_every_operator_named_as_in_the_state_with_its_integrations(dev_plan):
    assert _installed(dev_plan) == [op.name for op in ops.OPERATORS]
    for op in ops.OPERATORS:
        (component,) = [r for r in dev_plan.records if r.type == f"gputraining:components:{op.component}"]
        assert component.name == op.resource
        crds = {
            r.inputs["spec"]["names"]["kind"]
            for r in dev_plan.of_type(CRD)
            if r.parent == {"type": component.type, "name": op.resource}
        }
        assert {k.kind for k in op.kinds} <= crds
    assert _frameworks(dev_plan) == [k.integration for k in ops.KINDS]


@pytest.mark.parametrize("op", ops.OPERATORS, ids=_id)
def test_its_switch_removes_the_operator_its_crds_and_its_integrations(op: ops.Operator, without):
    plan = without[op.name]
    assert _installed(plan) == [o.name for o in ops.OPERATORS if o is not op]
    kinds = {r.inputs["spec"]["names"]["kind"] for r in plan.of_type(CRD)}
    assert not kinds & {k.kind for k in op.kinds}
    assert _frameworks(plan) == [k.integration for o in ops.OPERATORS if o is not op for k in o.kinds]
    assert not [
        o for o in plan.kubernetes_objects() if o["kind"] == "Namespace" and o["metadata"]["name"] == op.namespace
    ]


@pytest.mark.parametrize(
    "op", [op for op in ops.OPERATORS if any(cls.OPERATOR is op for cls in JOB_KINDS.values())], ids=_id
)
def test_a_job_whose_operator_is_off_is_refused_naming_it(op: ops.Operator):
    kind = next(kind for kind, cls in JOB_KINDS.items() if cls.OPERATOR is op)
    job = {"kind": kind, "name": "j", "image": "repo/image:1", "nodeGroup": "p4d", "command": ["torchrun", "train.py"]}
    values = minimal_values(services=_all_but(op), jobs=[job])
    with pytest.raises(ConfigError) as info:
        load(values, "gpu-training", "test")
    messages = [p.message for p in info.value.problems if p.key.endswith("jobs[j].kind")]
    assert messages == [
        f"{kind!r} jobs need {op.title} ({op.name!r}), which is not enabled in this stack (enabled operators: "
        f"{', '.join(sorted(o.name for o in ops.OPERATORS if o is not op))})"
    ]


def test_no_namespace_of_an_operator_can_be_a_team_or_training_namespace():
    assert {op.namespace for op in ops.OPERATORS} <= set(RESERVED_NAMESPACES)
    for op in ops.OPERATORS:
        with pytest.raises(ConfigError) as info:
            load(minimal_values(services={"trainingNamespace": op.namespace}), "gpu-training", "test")
        assert any(p.key.endswith("services.trainingNamespace") for p in info.value.problems)


def test_the_team_policy_covers_every_kind_of_every_operator():
    rules = team_policy.policy_manifest(team_policy.TeamPodPolicyArgs())["spec"]["matchConstraints"]["resourceRules"]
    covered = {(group, resource) for rule in rules for group in rule["apiGroups"] for resource in rule["resources"]}
    # (A TrainJob's pod templates are its runtime's: its pods are checked as pods.)
    assert {(k.group, k.plural) for k in ops.KINDS if k.replica_specs is not None} <= covered


def test_the_component_of_an_operator_is_its_own_class_only_with_a_history():
    assert {c.COMPONENT for c in components.VendoredOperator.__subclasses__()} <= {op.component for op in ops.OPERATORS}
