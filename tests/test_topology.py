"""Topology-aware placement: the network layers per instance type (with their sources), the Kueue
Topology and flavors the stack emits (against the vendored Kueue v0.19.2 CRDs, their CEL rules
evaluated with cel-python), the jobs' pod-set annotations (against Kueue's own rules for them),
the ProvisioningRequest check on autoscaled Topology groups with Capacity Blocks and teams, and the
Kueue chart rendered by helm with Topology Aware Scheduling on."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import celpy
import pytest
import yaml

from facts import catalog, topology
from facts.kube import NODE_GROUP_LABEL
from facts.operators import REPLICA_SPECS
from jobs.registry import build_manifests
from stacks import queues
from stacks.config import ConfigError, load
from stacks.config.job_entries import sagemaker_jobs
from tests import kueue_crds
from tests.helpers import (
    CR_ID,
    END,
    NS,
    START,
    dev_values,
    make_ctx,
    minimal_values,
    render_kueue,
    replicas,
    run_stack,
    zulu,
)
from tests.helpers import job_spec as spec_of

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1.0"
L = topology.layer_label

# ---------------------------------------------------------------------------------------------
# The layers per type, row by row with the source of each
# ---------------------------------------------------------------------------------------------

EC2 = "EC2 user guide, ec2-instance-topology-prerequisites"
# (type, layers the stack uses, source, what another source says where they disagree)
LAYERS = [
    ("p3.2xlarge", 0, f"{EC2}: not listed", None),
    ("p3.8xlarge", 0, f"{EC2}: not listed", None),
    ("p3.16xlarge", 0, f"{EC2}: not listed", None),
    ("p3dn.24xlarge", 3, f"{EC2}: 3 network nodes", None),
    ("p4d.24xlarge", 3, f"{EC2}: 3 network nodes", None),
    ("p4de.24xlarge", 3, f"{EC2}: 3 network nodes", None),
    ("p5.4xlarge", 0, f"{EC2}: only p5.48xlarge of the family listed", "REFERENCE.md: 3 for 'p5' (the family)"),
    ("p5.48xlarge", 3, f"{EC2}: 3 network nodes", None),
    ("p5e.48xlarge", 3, f"{EC2}: 3 network nodes", None),
    ("p5en.48xlarge", 3, f"{EC2}: 3 network nodes", None),
    ("p6-b200.48xlarge", 4, f"{EC2}: 4 network nodes; EKS ml-workload-topology: layer-4 on four-layer types", None),
    ("p6-b300.48xlarge", 4, f"{EC2}: 4 network nodes; EKS ml-workload-topology: layer-4 on four-layer types", None),
]


@pytest.mark.parametrize("name,layers,source,other", LAYERS, ids=[r[0] for r in LAYERS])
def test_each_gpu_type_has_the_layers_its_source_gives(name, layers, source, other):
    it = catalog.get(name)
    assert it is not None and it.network_layers == layers
    recorded, why = catalog.NETWORK_LAYERS[name]
    assert recorded == layers and why.startswith(EC2)
    if other is not None:  # a disagreement: the EC2 list (per size) wins, and the catalog says so
        assert "not listed" in why


def test_every_gpu_type_is_in_the_table_and_no_other():
    assert {r[0] for r in LAYERS} == set(catalog.GPU_TYPES) == set(catalog.NETWORK_LAYERS)
    assert all(catalog.get(n).network_layers == 0 for n in catalog.SYSTEM_TYPES)


def test_the_refused_gb200_is_not_given_layers_either_source_claims():
    # EC2 lists p6e-gb200.36xlarge with 3 layers, AWS's Containers blog shows layer-1..4 on its nodes.
    assert catalog.get("p6e-gb200.36xlarge") is None and catalog.refusal("p6e-gb200.36xlarge")


def test_levels_are_the_layers_coarse_to_fine_then_the_node():
    assert topology.levels(3) == (L(1), L(2), L(3), "kubernetes.io/hostname")
    assert topology.levels(4)[-2:] == (L(4), "kubernetes.io/hostname") and topology.levels(0) == ()


# ---------------------------------------------------------------------------------------------
# The Kueue objects, against the CRDs and their CEL rules
# ---------------------------------------------------------------------------------------------

_ENV = celpy.Environment()


@cache
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule))


def _rules_at(schema: dict[str, Any], path: tuple[str, ...]) -> list[dict[str, str]]:
    node = schema
    for key in path:
        node = node["properties"][key]
    return list(node.get("x-kubernetes-validations") or [])


def cel_failures(obj: dict[str, Any], path: tuple[str, ...], old: dict[str, Any] | None = None) -> list[str]:
    """The messages of the CRD's CEL rules at ``path`` of ``obj`` that fail (an update when ``old``
    is given: transition rules, with oldSelf, run only then, as the API server runs them)."""
    crd = kueue_crds.crds()[obj["kind"]]
    version = obj["apiVersion"].split("/")[1]
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"]["openAPIV3Schema"]
    value: Any = obj
    old_value: Any = old
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
        old_value = old_value.get(key) if isinstance(old_value, dict) else None
    failed = []
    for rule in _rules_at(schema, path):
        if "oldSelf" in rule["rule"] and old is None:
            continue
        activation = {"self": celpy.json_to_cel(value)}
        if old is not None:
            activation["oldSelf"] = celpy.json_to_cel(old_value)
        if not bool(_program(rule["rule"]).evaluate(activation)):
            failed.append(rule["message"])
    return failed


GROUPS = [
    {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "maxSize": 2},
    {"name": "b200", "instanceType": "p6-b200.48xlarge", "minSize": 0, "maxSize": 2},
    {"name": "p5small", "instanceType": "p5.4xlarge", "minSize": 0, "maxSize": 2},
    {"name": "noefa", "instanceType": "p5.48xlarge", "minSize": 0, "maxSize": 2, "efa": False},
    {"name": "fixed", "instanceType": "p5.48xlarge", "minSize": 2, "maxSize": 2, "autoscale": False},
]
JOBS = [
    {"name": "mpi-p4d", "kind": "mpi", "nodeGroup": "p4d", "nodes": 2, "image": IMAGE, "command": ["python", "t.py"]},
    {
        "name": "elastic-b200",
        "kind": "pytorch-elastic",
        "nodeGroup": "b200",
        "minNodes": 1,
        "maxNodes": 2,
        "image": IMAGE,
        "command": ["torchrun", "t.py"],
        "placement": "required",
        "placementLayer": 2,
    },
    {"name": "nccl-fixed", "kind": "nccl-test", "nodeGroup": "fixed", "nodes": 2, "placement": "none"},
    {"name": "nccl-v100", "kind": "nccl-test", "nodeGroup": "noefa", "nodes": 1},
    {
        "name": "ps",
        "kind": "paddle",
        "mode": "ps",
        "pservers": 2,
        "nodeGroup": "p4d",
        "nodes": 2,
        "image": IMAGE,
        "command": ["python", "t.py"],
    },
]


@pytest.fixture(scope="module")
def mixed():
    values = minimal_values(gpuAvailabilityZone="us-west-2b", gpuNodeGroups=GROUPS, jobs=JOBS)
    return run_stack(values), load(values, "gpu-training", "test")


def _objects(plan, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in plan.kubernetes_objects() if o["kind"] == kind}


def test_one_topology_per_level_list_and_only_on_efa_groups_of_labelled_types(mixed):
    plan, _ = mixed
    topologies = _objects(plan, "Topology")
    assert {n: [lv["nodeLabel"] for lv in t["spec"]["levels"]] for n, t in topologies.items()} == {
        "aws-network-3-layers": list(topology.levels(3)),
        "aws-network-4-layers": list(topology.levels(4)),
    }
    flavors = {n: f["spec"].get("topologyName") for n, f in _objects(plan, "ResourceFlavor").items()}
    assert flavors == {
        "p4d": "aws-network-3-layers",
        "b200": "aws-network-4-layers",
        "p5small": None,  # EC2 lists no topology for p5.4xlarge
        "noefa": None,  # EFA off: no multi-node group
        "fixed": "aws-network-3-layers",
    }


def test_every_kueue_object_passes_the_crds_and_their_cel_rules(mixed):
    plan, _ = mixed
    objs = kueue_crds.kueue_objects(plan.kubernetes_objects())
    assert {"Topology", "ResourceFlavor"} <= {o["kind"] for o in objs}
    for o in objs:
        assert kueue_crds.errors(o) == [], o["metadata"]["name"]
    for t in _objects(plan, "Topology").values():
        assert cel_failures(t, ("spec", "levels")) == []
        assert cel_failures(t, ("spec", "levels"), old=t) == []  # the next `up` sends the same levels
    for f in _objects(plan, "ResourceFlavor").values():
        assert cel_failures(f, ("spec",)) == []
        assert cel_failures(f, ("spec",), old=f) == []


def test_the_cel_rules_are_evaluated_and_can_fail():
    t = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "x"},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": L(1)}, {"nodeLabel": L(1)}]},
    }
    failed = cel_failures(t, ("spec", "levels"))
    assert "must be unique" in failed and any("lowest level" in m for m in failed)
    changed = copy.deepcopy(t)
    changed["spec"]["levels"] = changed["spec"]["levels"][1:]
    assert "field is immutable" in cel_failures(changed, ("spec", "levels"), old=t)


def test_a_topology_flavor_refuses_later_changes_of_its_labels_and_tolerations(mixed):
    """What the next `up` meets: once a flavor has a topologyName, its nodeLabels, tolerations and
    topologyName cannot change (the CRD's transition rules); a flavor gets its topology only by adding it."""
    plan, _ = mixed
    f = _objects(plan, "ResourceFlavor")["p4d"]
    plain = copy.deepcopy(f)
    plain["spec"].pop("topologyName")
    assert cel_failures(f, ("spec",), old=plain) == []  # an existing flavor gains its topology
    tainted = copy.deepcopy(f)
    tainted["spec"]["tolerations"].append({"key": "x", "operator": "Exists", "effect": "NoSchedule"})
    assert "tolerations are immutable when topologyName is set" in cel_failures(tainted, ("spec",), old=f)


# ---------------------------------------------------------------------------------------------
# The jobs' annotations, against Kueue's rules for them
# ---------------------------------------------------------------------------------------------


def kueue_annotation_errors(job: dict[str, Any]) -> list[str]:
    """Kueue v0.19.2's webhook rules for pod-set topology annotations, restated
    (pkg/controller/jobframework/tas_validation.go: ValidateTASPodSetRequest, ValidatePodSetGroupingTopology)."""
    out = []
    groups: dict[str, list[tuple[int, str | None, str | None]]] = {}
    for role, rs in replicas(job).items():
        notes = ((rs.get("template") or {}).get("metadata") or {}).get("annotations") or {}
        req, pref = notes.get(topology.REQUIRED_ANNOTATION), notes.get(topology.PREFERRED_ANNOTATION)
        unc = notes.get(topology.UNCONSTRAINED_ANNOTATION)
        if sum(x is not None for x in (req, pref, unc)) > 1:
            out.append(f"{role}: more than one topology annotation")
        if unc is not None and unc not in ("true", "false"):
            out.append(f"{role}: unconstrained must be a boolean")
        group = notes.get(topology.GROUP_ANNOTATION)
        if group is not None:
            if group.isdigit():
                out.append(f"{role}: group name must not be a number")
            if req is None and pref is None:
                out.append(f"{role}: group name without required or preferred")
            groups.setdefault(group, []).append((int(rs.get("replicas", 1)), req, pref))
    for name, members in groups.items():
        if len(members) != 2:
            out.append(f"group {name}: {len(members)} pod sets, not 2")
        elif members[0][0] != 1 and members[1][0] != 1:
            out.append(f"group {name}: neither pod set has 1 replica")
        elif members[0][1:] != members[1][1:]:
            out.append(f"group {name}: different topology requests")
    return out


def _job(plan, name: str) -> dict[str, Any]:
    return next(o for o in plan.kubernetes_objects() if o["metadata"].get("name") == name and "spec" in o)


def _notes(job: dict[str, Any], role: str) -> dict[str, str]:
    return replicas(job)[role]["template"].get("metadata", {}).get("annotations") or {}


def test_the_default_is_preferred_at_the_finest_layer_with_the_launcher_grouped(mixed):
    plan, _ = mixed
    job = _job(plan, "mpi-p4d")
    worker, launcher = _notes(job, "Worker"), _notes(job, "Launcher")
    assert worker == launcher == {topology.PREFERRED_ANNOTATION: L(3), topology.GROUP_ANNOTATION: "mpi-p4d-together"}
    assert kueue_annotation_errors(job) == []


def test_required_at_a_layer_on_a_four_layer_type(mixed):
    plan, _ = mixed
    job = _job(plan, "elastic-b200")
    assert _notes(job, "Worker") == {topology.REQUIRED_ANNOTATION: L(2)}
    assert kueue_annotation_errors(job) == []


def test_none_is_unconstrained_and_groups_without_topology_get_nothing(mixed):
    plan, _ = mixed
    fixed = _job(plan, "nccl-fixed")
    assert _notes(fixed, "Worker") == _notes(fixed, "Launcher") == {topology.UNCONSTRAINED_ANNOTATION: "true"}
    plain = _job(plan, "nccl-v100")
    assert _notes(plain, "Worker") == _notes(plain, "Launcher") == {}


def test_several_parameter_servers_ask_on_their_own(mixed):
    plan, _ = mixed
    job = _job(plan, "ps")
    assert _notes(job, "Master") == _notes(job, "Worker") == {topology.PREFERRED_ANNOTATION: L(3)}
    assert kueue_annotation_errors(job) == []


def test_the_annotation_rules_restated_can_fail():
    job = {"kind": "MPIJob", "spec": {"mpiReplicaSpecs": {}}}
    for role, n in (("Launcher", 2), ("Worker", 2)):
        job["spec"]["mpiReplicaSpecs"][role] = {
            "replicas": n,
            "template": {
                "metadata": {"annotations": {topology.PREFERRED_ANNOTATION: L(3), topology.GROUP_ANNOTATION: "7"}}
            },
        }
    errors = kueue_annotation_errors(job)
    assert any("number" in e for e in errors) and any("1 replica" in e for e in errors)


@pytest.mark.parametrize("kind", ["mpi", "nccl-test", "pytorch-elastic", "paddle"])
def test_every_kind_that_spans_nodes_is_annotated_when_queued(kind):
    ctx = make_ctx(queues={"": "gpu"})
    spec = spec_of(kind, "p3dn-efa")
    (job,) = [m for m in build_manifests(spec, ctx) if m["kind"] in REPLICA_SPECS]
    on_group = [
        rs
        for rs in replicas(job).values()
        if rs["template"]["spec"]["nodeSelector"].get(NODE_GROUP_LABEL) == "p3dn-efa"
    ]
    assert on_group and all(
        topology.PREFERRED_ANNOTATION in rs["template"]["metadata"]["annotations"] for rs in on_group
    )
    assert kueue_annotation_errors(job) == []
    unqueued = [m for m in build_manifests(spec, make_ctx()) if m["kind"] == job["kind"]]
    assert all("annotations" not in rs["template"].get("metadata", {}) for rs in replicas(unqueued[0]).values())


def test_a_spec_without_placement_keeps_its_digest():
    spec = spec_of("pytorch-elastic")
    dumped = spec.model_dump(mode="json", by_alias=True)
    assert dumped["placement"] is None and dumped["placementLayer"] is None
    # spec_digest leaves the two keys out while unset: the rendezvous id of an existing job is kept
    assert spec.spec_digest() == spec_of("pytorch-elastic").spec_digest()
    assert spec.spec_digest() != spec_of("pytorch-elastic", placement="none").spec_digest()


# ---------------------------------------------------------------------------------------------
# Config checks
# ---------------------------------------------------------------------------------------------


def problems_of(values: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load(values, "gpu-training", "test")
    return [str(p) for p in err.value.problems]


def _with_job(**job: Any) -> dict[str, Any]:
    base = {"name": "n", "kind": "nccl-test", "nodeGroup": "p4d", "nodes": 2}
    return minimal_values(gpuAvailabilityZone="us-west-2b", gpuNodeGroups=GROUPS, jobs=[{**base, **job}])


def test_a_layer_the_type_lacks_is_refused_with_the_layers_it_has():
    (p,) = problems_of(_with_job(placement="required", placementLayer=4))
    assert p == (
        f"{NS}:jobs[n].placementLayer: 4 is not a network layer of p4d.24xlarge (node group 'p4d'): its nodes carry "
        f"{L(1)} to -3; use 1 (the top, coarsest) to 3 (the finest)"
    )


@pytest.mark.parametrize("group,why", [("p5small", "p5.4xlarge nodes carry no network layer"), ("noefa", "EFA is off")])
def test_placement_on_a_group_without_topology_is_refused_saying_why(group, why):
    (p,) = problems_of(_with_job(nodeGroup=group, nodes=1, placement="required"))
    assert p.startswith(f"{NS}:jobs[n].placement: 'required' needs a node group with a network topology") and why in p


def test_placement_needs_queues_and_a_layer_needs_a_placement_other_than_none():
    (p,) = problems_of({**_with_job(placement="preferred"), f"{NS}:queues": {"enabled": False}})
    assert p.startswith(f"{NS}:jobs[n].placement: 'preferred' needs queues")
    (p,) = problems_of(_with_job(placement="none", placementLayer=2))
    assert p.startswith(f"{NS}:jobs[n].placementLayer: is not read with placement 'none'")


def test_none_on_a_group_without_topology_is_fine_and_sagemaker_ignores_placement():
    load(_with_job(nodeGroup="p5small", nodes=1, placement="none"), "gpu-training", "test")
    sm = {
        "name": "sm",
        "kind": "pytorch-elastic",
        "runtime": "sagemaker",
        "nodeGroup": "p4d",
        "nodes": 2,
        "image": IMAGE,
        "command": ["torchrun"],
        "args": ["/opt/ml/code/train.py"],
        "rendezvous": "c10d",
        "sagemaker": {"outputPath": "s3://my-training-output/sm/"},
    }
    without = load(minimal_values(jobs=[sm]), "gpu-training", "test")
    with_it = load(minimal_values(jobs=[{**sm, "placement": "required", "placementLayer": 1}]), "gpu-training", "test")

    def name(cfg):
        (job,) = sagemaker_jobs(cfg.jobs, cfg.gpu_node_groups, "us-west-2", "gpu-training-test", {})
        return job.training_job_name

    assert name(without) == name(with_it)  # EKS-only: the SageMaker job is not renamed (nor re-run)


# ---------------------------------------------------------------------------------------------
# ProvisioningRequests with autoscaling, Capacity Blocks and teams
# ---------------------------------------------------------------------------------------------


def test_the_check_runs_by_default_on_autoscaled_topology_flavors_only(mixed):
    _, cfg = mixed
    plan = queues.plan_for(cfg)
    assert plan.provisioning_flavors == ("p4d", "b200")  # not the fixed group, not the plain ones
    (cq,) = [o for o in _objects(mixed[0], "ClusterQueue").values()]
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [
        {"name": queues.PROVISIONING_CHECK, "onFlavors": ["p4d", "b200"]}
    ]


def test_false_with_an_autoscaled_topology_group_is_refused_with_the_reason():
    problems = problems_of(minimal_values(autoscaling={"provisioningRequests": False}))
    assert len(problems) == 1 and problems[0].startswith(
        f"{NS}:autoscaling.provisioningRequests: false is not allowed with node group 'p4d': it is autoscaled and has "
        "a network topology"
    )
    assert "wait forever" in problems[0]
    load(minimal_values(autoscaling={"provisioningRequests": False, "enabled": False}), "gpu-training", "test")


def test_a_windowed_capacity_block_group_has_a_topology_and_no_check():
    block = {
        "name": "block",
        "instanceType": "p5.48xlarge",
        "maxSize": 2,
        "capacityType": "capacity-block",
        "capacityReservationId": CR_ID,
        "capacity": {"start": zulu(START), "end": zulu(END)},
    }
    values = minimal_values(gpuAvailabilityZone="us-west-2b", gpuNodeGroups=[block])
    cfg = load(values, "gpu-training", "test")
    plan = queues.plan_for(cfg)
    (f,) = plan.flavors
    assert f.windowed and f.topology == "aws-network-3-layers" and plan.provisioning_flavors == ()


def test_every_team_queue_runs_the_check_on_the_topology_flavors():
    values = minimal_values(queues={"teams": [{"name": "vision", "quotas": [{"nodeGroup": "p4d", "nodes": 1}]}]})
    plan = run_stack(values)
    cqs = _objects(plan, "ClusterQueue")
    assert set(cqs) == {"gpu", "vision"}
    for cq in cqs.values():
        assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"] == ["p4d"]
    autoscaler = next(
        r for r in plan.records if r.type.endswith("Release") and r.inputs.get("name") == "cluster-autoscaler"
    )
    assert autoscaler.inputs["values"]["extraArgs"]["enable-provisioning-requests"] == "true"


# ---------------------------------------------------------------------------------------------
# The Kueue chart, rendered with the stack's values
# ---------------------------------------------------------------------------------------------


def test_the_rendered_chart_runs_tas_with_no_feature_gate_and_may_read_nodes_and_topologies():
    plan = run_stack(dev_values(), stack="dev")
    release = next(r for r in plan.records if r.type.endswith("Release") and r.inputs.get("name") == "kueue")
    docs = render_kueue(release.inputs["values"])
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("CustomResourceDefinition", "topologies.kueue.x-k8s.io") in kinds
    deploy = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kueue-controller-manager")
    args = [a for c in deploy["spec"]["template"]["spec"]["containers"] for a in c.get("args") or []]
    # TopologyAwareScheduling is beta and on by default in v0.19.2: nothing switches it (or hot swap) off
    assert not [a for a in args if a.startswith("--feature-gates")], args
    role = next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kueue-manager-role")

    def can(resource: str, verb: str) -> bool:
        return any(resource in r.get("resources", []) and verb in r.get("verbs", []) for r in role["rules"])

    assert can("nodes", "watch") and can("topologies", "watch") and can("pods", "list")
    config = yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert "featureGates" not in config
