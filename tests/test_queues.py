"""The queues (Kueue): what the plan registers, the quotas derived from the node groups, the jobs'
labels, the config checks that use the same numbers, teams and the ProvisioningRequest check.

Every Kueue object the stack emits is validated against Kueue's CRDs as vendored in the project
(``tests/kueue_crds.py``: schema, CEL rules, the ClusterQueue webhook's rules)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from components import queues as component
from facts import allocatable, catalog, operators, versions
from facts.kube import EFA_HUGEPAGES_2MI_PAGES, NODE_GROUP_LABEL
from jobs.base import PRIORITIES, GpuJob
from jobs.pod import POD_PRIORITY_LABEL, POD_QUEUE_LABEL, PRIORITY_CLASS_LABEL, QUEUE_LABEL
from stacks import queues
from stacks.config import ConfigError, load
from stacks.config.stackfile import read_stack_config
from tests import kueue_crds
from tests.helpers import NS, ROOT, TEAMS, dev_values, minimal_values, render_agent, run_stack, team_values
from tests.helpers import TEAM_ROLE_ARN as ROLE_ARN
from tests.helpers import elastic_queue_job as elastic
from tests.helpers import nccl_job as job

RELEASE = "kubernetes:helm.sh/v3:Release"
ACCESS_ENTRY = "aws:eks/accessEntry:AccessEntry"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"


def objects_of(plan, kind: str) -> list[dict[str, Any]]:
    return [o for o in plan.kubernetes_objects() if o["kind"] == kind]


def one(plan, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objects_of(plan, kind) if o["metadata"]["name"] == name]
    return found


def problems_of(values: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load(values, "gpu-training", "test")
    return [str(p) for p in err.value.problems]


def prod_values() -> dict[str, Any]:
    return read_stack_config("prod", ROOT)[1]


@pytest.fixture(scope="module")
def team_plan():
    return run_stack(team_values())


# ---------------------------------------------------------------------------------------------
# Kueue and the queue objects in the plans
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_dev_and_prod_carry_kueue_and_the_queue_objects(stack, dev_plan, prod_plan):
    plan = dev_plan if stack == "dev" else prod_plan
    values = dev_values() if stack == "dev" else prod_values()
    cfg = load(values, "gpu-training", stack)
    (kueue,) = [r for r in plan.of_type(RELEASE) if r.inputs["name"] == "kueue"]
    assert kueue.inputs["chart"] == versions.KUEUE_CHART.file and kueue.inputs["namespace"] == queues.KUEUE_NAMESPACE
    image = kueue.inputs["values"]["controllerManager"]["manager"]["image"]
    assert image == {
        "repository": "registry.k8s.io/kueue/kueue",
        "tag": versions.KUEUE_VERSION,
        "pullPolicy": "IfNotPresent",
    }
    assert kueue.inputs["values"]["controllerManager"]["nodeSelector"] == {NODE_GROUP_LABEL: "system"}
    flavors = objects_of(plan, "ResourceFlavor")
    assert sorted(f["metadata"]["name"] for f in flavors) == sorted(g.name for g in cfg.gpu_node_groups)
    (cq,) = objects_of(plan, "ClusterQueue")
    assert cq["metadata"]["name"] == queues.SHARED_QUEUE and cq["spec"]["cohortName"] == queues.COHORT
    (lq,) = objects_of(plan, "LocalQueue")
    assert (
        lq["metadata"]["namespace"] == cfg.services.training_namespace
        and lq["spec"]["clusterQueue"] == queues.SHARED_QUEUE
    )
    assert {o["metadata"]["name"]: o["value"] for o in objects_of(plan, "WorkloadPriorityClass")} == dict(PRIORITIES)
    for o in plan.kubernetes_objects():
        if o["kind"] in ("MPIJob", "PyTorchJob", "PaddleJob"):
            assert o["metadata"]["labels"][QUEUE_LABEL] == lq["metadata"]["name"], o["metadata"]["name"]
            assert o["metadata"]["labels"][PRIORITY_CLASS_LABEL] in PRIORITIES
    assert plan.outputs["clusterQueues"] == [queues.SHARED_QUEUE]


def test_every_kueue_object_validates_against_the_vendored_crds(dev_plan, prod_plan, team_plan):
    kinds = set()
    for plan in (dev_plan, prod_plan, team_plan):
        for o in kueue_crds.kueue_objects(plan.kubernetes_objects()):
            assert kueue_crds.errors(o) == [], f"{o['kind']}/{o['metadata']['name']}"
            kinds.add(o["kind"])
    assert kinds == {
        "WorkloadPriorityClass",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "AdmissionCheck",
        "ProvisioningRequestConfig",
        "Topology",
    }


def test_the_crd_validation_is_not_vacuous(team_plan):
    cq = copy.deepcopy(one(team_plan, "ClusterQueue", "vision"))
    typo = copy.deepcopy(cq)
    typo["spec"]["cohort"] = typo["spec"].pop("cohortName")  # the v1beta1 spelling
    assert any("cohort" in e for e in kueue_crds.errors(typo))
    order = copy.deepcopy(cq)
    resources = order["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    resources[0], resources[1] = resources[1], resources[0]
    assert any("coveredResources" in e for e in kueue_crds.errors(order))
    lending = copy.deepcopy(cq)
    r = lending["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    r["lendingLimit"] = str(int(r["nominalQuota"]) + 1)
    assert any("lendingLimit" in e for e in kueue_crds.errors(lending))
    lone = copy.deepcopy(cq)
    del lone["spec"]["cohortName"]
    assert any("cohort" in e for e in kueue_crds.errors(lone))
    flavor = copy.deepcopy(objects_of(team_plan, "ResourceFlavor")[0])
    flavor["spec"]["tolerations"][0]["value"] = "true"  # with operator Exists
    assert kueue_crds.errors(flavor)
    wpc = copy.deepcopy(objects_of(team_plan, "WorkloadPriorityClass")[0])
    wpc["value"] = "high"
    assert kueue_crds.errors(wpc)


def test_the_vendored_crds_are_the_ones_the_chart_installs(dev_plan):
    """The schemas the tests validate against are the ones `pulumi up` installs: the chart's CRDs,
    rendered by helm, carry the same v1beta2 schema as each vendored file."""
    from infra import releases

    rendered = releases.render(dev_plan, versions.KUBERNETES_DEFAULT)
    assert rendered.note is None
    installed = {
        o["spec"]["names"]["kind"]: o
        for o in rendered.objects
        if o["kind"] == "CustomResourceDefinition" and o["spec"]["group"] == "kueue.x-k8s.io"
    }
    for kind, crd in kueue_crds.crds().items():
        mine = {v["name"]: v["schema"] for v in crd["spec"]["versions"]}
        theirs = {v["name"]: v["schema"] for v in installed[kind]["spec"]["versions"]}
        assert mine == theirs, kind


def test_the_vendored_files_have_their_pinned_checksums():
    import hashlib

    sources = (ROOT / "manifests/vendor/SOURCES.md").read_text()
    files = [versions.KUEUE_CHART.file, versions.PROVISIONING_REQUEST_CRD.file] + [
        str(p.relative_to(ROOT)) for p in sorted(kueue_crds.CRD_DIR.glob("*.yaml"))
    ]
    assert len(files) == 11  # the chart, the ProvisioningRequest CRD, 9 Kueue CRDs
    for f in files:
        digest = hashlib.sha256((ROOT / f).read_bytes()).hexdigest()
        assert digest in sources, f
    assert hashlib.sha256((ROOT / versions.KUEUE_CHART.file).read_bytes()).hexdigest() == versions.KUEUE_CHART.sha256
    assert (
        hashlib.sha256((ROOT / versions.PROVISIONING_REQUEST_CRD.file).read_bytes()).hexdigest()
        == versions.PROVISIONING_REQUEST_CRD.sha256
    )


# ---------------------------------------------------------------------------------------------
# Quotas: derived from the node groups
# ---------------------------------------------------------------------------------------------


def quota(cq: dict[str, Any], flavor: str) -> dict[str, dict[str, Any]]:
    (group,) = cq["spec"]["resourceGroups"]
    (f,) = [f for f in group["flavors"] if f["name"] == flavor]
    return {r["name"]: r for r in f["resources"]}


def test_quotas_are_the_groups_nodes_times_what_one_node_offers(dev_plan):
    cq = one(dev_plan, "ClusterQueue", queues.SHARED_QUEUE)
    cfg = load(dev_values(), "gpu-training", "dev")
    for g in cfg.gpu_node_groups:
        q = quota(cq, g.name)
        it = g.instance
        assert q["nvidia.com/gpu"]["nominalQuota"] == str(g.max_size * it.gpus)
        assert q["vpc.amazonaws.com/efa"]["nominalQuota"] == str(g.max_size * it.efa_interfaces)
        assert q["hugepages-2Mi"]["nominalQuota"] == f"{g.max_size * EFA_HUGEPAGES_2MI_PAGES * 2}Mi"
        cpu = queues.parse_quantity("cpu", q["cpu"]["nominalQuota"])
        memory = queues.parse_quantity("memory", q["memory"]["nominalQuota"])
        # Below the instance's own figures (kubelet, eviction, huge pages, DaemonSets), but most of it.
        assert 0.95 * g.max_size * it.vcpus * 1000 < cpu < g.max_size * it.vcpus * 1000
        assert 0.9 * g.max_size * it.memory_mib < memory < g.max_size * (it.memory_mib - EFA_HUGEPAGES_2MI_PAGES * 2)
    assert "borrowingLimit" not in str(cq) and "lendingLimit" not in str(cq)


def test_node_allocatable_follows_nodeadm_and_the_daemonsets():
    assert allocatable.kube_reserved_cpu_m(96) == 60 + 10 + 10 + 230
    assert allocatable.kube_reserved_cpu_m(8) == 60 + 10 + 10 + 10
    assert allocatable.kube_reserved_cpu_m(1) == 60
    assert allocatable.max_pods(96) == 250 and allocatable.max_pods(8) == 110
    cfg = load(dev_values(), "gpu-training", "dev")
    p4d = cfg.gpu_group("p4d")
    full = queues.node_allocatable(p4d, queues.NodeServices())
    bare = queues.node_allocatable(p4d, queues.NodeServices(fsx=False, efa_device_plugin=False, monitoring=False))
    # Each service's DaemonSet takes its requests from every node.
    assert full["cpu"] == bare["cpu"] - 30 - 10 - 250 - 50 - 250
    assert full["memory"] == bare["memory"] - 104 - 20 - 128 - 25 - 128
    assert bare["cpu"] == 96_000 - 310 - 25 - 100 - 10
    mem = int(p4d.instance.memory_mib * (1 - allocatable.KERNEL_MEMORY_SHARE))
    assert bare["memory"] == mem - (11 * 250 + 255 + 100) - EFA_HUGEPAGES_2MI_PAGES * 2 - 30


def test_the_daemonset_requests_match_the_vendored_charts(dev_plan):
    """The device plugins' and the node monitoring agent's requests in facts/allocatable.py are the
    ones their vendored charts render with the stack's values."""
    from infra import releases

    rendered = releases.render(dev_plan, versions.KUBERNETES_DEFAULT)

    def requests(objs: list[dict[str, Any]], name: str) -> tuple[int, int]:
        (ds,) = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == name]
        pod = queues.pod_requests(ds["spec"]["template"]["spec"])
        return pod["cpu"], pod["memory"]

    assert requests(rendered.objects, "aws-efa-k8s-device-plugin") == (
        allocatable.EFA_DEVICE_PLUGIN.cpu_m,
        allocatable.EFA_DEVICE_PLUGIN.memory_mib,
    )
    assert requests(rendered.objects, "nvidia-device-plugin") == (0, 0)
    (agent,) = [d for d in allocatable.ALWAYS if d.name == "eks-node-monitoring-agent"]
    for k8s in versions.KUBERNETES_SUPPORTED:
        objs = render_agent(versions.NODE_MONITORING_AGENT_CHART[k8s].file, k8s, None)
        assert requests(objs, "eks-node-monitoring-agent") == (agent.cpu_m, agent.memory_mib), k8s
        assert requests(objs, "dcgm-server") == (0, 0), k8s


def test_a_group_that_is_not_autoscaled_contributes_its_fixed_size(team_plan):
    cq = one(team_plan, "ClusterQueue", queues.SHARED_QUEUE)
    assert quota(cq, "fixed")["nvidia.com/gpu"]["nominalQuota"] == "8"  # desiredSize 1 x 8, not maxSize 3
    off = run_stack(minimal_values(autoscaling={"enabled": False}))
    assert (
        quota(one(off, "ClusterQueue", queues.SHARED_QUEUE), "p4d")["nvidia.com/gpu"]["nominalQuota"] == "8"
    )  # desiredSize 1


# A capacity-block group that follows its block's window: the scheduled action scales it to maxSize
# when the block starts, so that is what its flavor supplies (issue 24, item 1).
WINDOWED_BLOCK = {
    "name": "h100",
    "instanceType": "p5.48xlarge",
    "maxSize": 2,
    "capacityType": "capacity-block",
    "capacityReservationId": "cr-0123456789abcdef0",
    "capacity": {"start": "2030-01-01T11:30:00Z", "end": "2030-01-02T11:30:00Z"},
}


def test_a_capacity_block_with_a_window_supplies_its_max_size_to_every_queue():
    team = {"name": "vision", "quotas": [{"nodeGroup": "h100", "nodes": 1}]}
    values = minimal_values(
        gpuAvailabilityZone="us-west-2b",
        gpuNodeGroups=[WINDOWED_BLOCK],
        queues={"teams": [team]},
        jobs=[job("block-nccl", 2, group="h100"), job("team-nccl", 1, group="h100", team="vision")],
    )
    plan = run_stack(values)
    shared = quota(one(plan, "ClusterQueue", queues.SHARED_QUEUE), "h100")
    team_cq = one(plan, "ClusterQueue", "vision")  # a team's ClusterQueue is named after it
    assert quota(team_cq, "h100")["nvidia.com/gpu"]["nominalQuota"] == "8"  # the team's 1 node
    assert shared["nvidia.com/gpu"]["nominalQuota"] == "8"  # maxSize 2 less the team's node, not 0
    # Without the window the group is sized by desiredSize (0 here): a two-node job is refused.
    unwindowed = {**WINDOWED_BLOCK, "capacity": None}
    (problem,) = problems_of(
        minimal_values(
            gpuAvailabilityZone="us-west-2b",
            gpuNodeGroups=[unwindowed],
            queues={},
            jobs=[job("block-nccl", 2, group="h100")],
        )
    )
    assert "can never be admitted" in problem and "fixed size 0" in problem


def test_the_plan_says_a_windowed_group_supplies_max_size_during_its_window():
    values = minimal_values(
        gpuAvailabilityZone="us-west-2b",
        gpuNodeGroups=[WINDOWED_BLOCK],
        queues={},
        jobs=[job("block-nccl", 2, group="h100")],
    )
    plan = queues.plan_for(load(values, "gpu-training", "test"))
    assert plan is not None
    text = queues.describe(plan, "v0")
    assert "flavor h100 (p5.48xlarge, 2 of the group's maxSize 2 (capacity block, during its window))" in text, text


def test_flavors_carry_the_groups_labels_and_taints_as_tolerations(team_plan):
    p4d = one(team_plan, "ResourceFlavor", "p4d")["spec"]
    assert p4d["nodeLabels"][NODE_GROUP_LABEL] == "p4d"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in p4d["tolerations"]
    assert {"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"} in p4d["tolerations"]
    # The flavor's labels are labels the group's nodes have.
    ng = next(
        r
        for r in team_plan.records
        if r.type == "aws:eks/nodeGroup:NodeGroup" and r.inputs["labels"].get(NODE_GROUP_LABEL) == "p4d"
    )
    assert p4d["nodeLabels"].items() <= ng.inputs["labels"].items()


# ---------------------------------------------------------------------------------------------
# Gangs: the dev stack's two p4d jobs
# ---------------------------------------------------------------------------------------------


def _requests(pod: dict[str, Any]) -> dict[str, int]:
    """The pod's requests, summed over its containers, by this test's own reading of quantities."""
    units = {"Mi": 1, "Gi": 1024, "m": 1}
    out: dict[str, int] = {}
    for c in pod["containers"]:
        for r, v in (c.get("resources") or {}).get("requests", {}).items():
            text = str(v)
            m = re.fullmatch(r"(\d+)(Mi|Gi|m)?", text)
            assert m, text
            amount = int(m.group(1)) * units.get(m.group(2) or "", 1)
            if r == "cpu" and not m.group(2):
                amount *= 1000
            out[r] = out.get(r, 0) + amount
    return out


def _job_demand(obj: dict[str, Any]) -> dict[str, int]:
    replicas = obj["spec"].get("mpiReplicaSpecs") or obj["spec"].get("pytorchReplicaSpecs")
    total: dict[str, int] = {}
    for rs in replicas.values():
        for r, v in _requests(rs["template"]["spec"]).items():
            total[r] = total.get(r, 0) + v * rs["replicas"]
    return total


def test_the_dev_p4d_jobs_each_fit_alone_but_are_never_admitted_together(dev_plan):
    """From the emitted objects alone: the ClusterQueue's nominal quota on the p4d flavor, and what
    the NCCL MPIJob (2 workers and its launcher) and the elastic PyTorchJob (maxNodes 2) ask for, as
    Kueue sizes pod sets (replicas x pod requests). Each fits; both never do, so Kueue admits one
    and the other waits whole, instead of both half-starting on the 2-node group."""
    cq = one(dev_plan, "ClusterQueue", queues.SHARED_QUEUE)
    nominal = {r: queues.parse_quantity(r, q["nominalQuota"]) for r, q in quota(cq, "p4d").items()}
    mpi, torch = one(dev_plan, "MPIJob", "nccl-p4d"), one(dev_plan, "PyTorchJob", "resnet50-elastic")
    demands = []
    for obj in (mpi, torch):
        d = _job_demand(obj)
        assert set(d) <= set(queue_resources := [r for r in nominal]), (
            f"every requested resource is covered: {set(d) - set(queue_resources)}"
        )
        assert all(v <= nominal[r] for r, v in d.items()), (obj["metadata"]["name"], d, nominal)
        demands.append(d)
    assert demands[0]["cpu"] == 500  # the launcher, counted
    assert demands[1]["nvidia.com/gpu"] == 16  # maxNodes 2 x 8: Kueue reserves the elastic job's maximum
    assert demands[0]["nvidia.com/gpu"] + demands[1]["nvidia.com/gpu"] > nominal["nvidia.com/gpu"] == 16
    # The plan's own arithmetic says the same: one admitted at once, the other waits on the GPUs.
    plan = queues.plan_for(load(dev_values(), "gpu-training", "dev"))
    assert plan is not None
    verdicts = {a.demand.job: a for a in plan.admissions()}
    assert verdicts["nccl-p4d"].at_once and not verdicts["resnet50-elastic"].at_once
    assert verdicts["resnet50-elastic"].short == ("nvidia.com/gpu", 32, 16)
    for d in plan.demands:
        alone = queues.admit_in_order([d], plan.cluster_queues)
        assert alone[0].at_once, d.job


def test_the_queue_table_is_in_the_plan_output(dev_plan_verbose):
    assert dev_plan_verbose.code == 0, dev_plan_verbose.stderr
    text = dev_plan_verbose.stdout
    assert f"Queues (Kueue {versions.KUEUE_VERSION}" in text
    assert "ClusterQueue gpu (shared; LocalQueues training/gpu)" in text
    assert "nccl-p4d" in text and "admitted at once" in text
    assert "elastic: Kueue reserves maxNodes (2)" in text and "waits: 32 nvidia.com/gpu" in text


# ---------------------------------------------------------------------------------------------
# Config checks with the same numbers
# ---------------------------------------------------------------------------------------------


def test_a_job_that_can_never_be_admitted_names_the_job_the_resource_and_both_numbers():
    values = minimal_values(
        queues={"teams": [{"name": "vision", "quotas": [{"nodeGroup": "p4d", "nodes": 1, "borrowingLimit": 0}]}]}
    )
    values[f"{NS}:jobs"] = [job("big", 2, team="vision")]
    (p,) = problems_of(values)
    assert p.startswith(f"{NS}:jobs[big].nodes: job 'big' can never be admitted")
    assert "16 nvidia.com/gpu" in p and "never hold more than 8" in p and "the queue of team 'vision'" in p
    # With borrowing, the shared queue's idle node makes it fit.
    values[f"{NS}:queues"] = {"teams": [{"name": "vision", "quotas": [{"nodeGroup": "p4d", "nodes": 1}]}]}
    load(values, "gpu-training", "test")


def test_an_elastic_job_is_checked_at_its_max_nodes():
    values = minimal_values(
        gpuNodeGroups=[{"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 3}],
        queues={"teams": [{"name": "a", "quotas": [{"nodeGroup": "p4d", "nodes": 2, "borrowingLimit": 0}]}]},
        jobs=[elastic("grow", 3, team="a")],
    )
    (p,) = problems_of(values)
    assert p.startswith(f"{NS}:jobs[grow].maxNodes: job 'grow' can never be admitted") and "reserves maxNodes 3" in p


def test_team_checks():
    def with_teams(teams: list[dict[str, Any]], **over: Any) -> list[str]:
        return problems_of(minimal_values(queues={"teams": teams}, **over))

    assert any(
        "add up to 3, and the group has maxSize 2" in p
        for p in with_teams(
            [TEAMS[1], {**TEAMS[1], "name": "x", "namespace": "x", "quotas": [{"nodeGroup": "p4d", "nodes": 2}]}]
        )
    )
    assert any(
        "queues.teams[a].quotas[0].nodeGroup: 'p9'" in p
        for p in with_teams([{"name": "a", "quotas": [{"nodeGroup": "p9", "nodes": 1}]}])
    )
    assert any(
        "lendingLimit: 2 is more than" in p
        for p in with_teams([{"name": "a", "quotas": [{"nodeGroup": "p4d", "nodes": 1, "lendingLimit": 2}]}])
    )
    assert any("'gpu' is not allowed" in p for p in with_teams([{"name": "gpu"}]))
    assert any("is the training namespace" in p for p in with_teams([{"name": "a", "namespace": "training"}]))
    assert any("kube-system" in p for p in with_teams([{"name": "a", "namespace": "kube-system"}]))
    assert any(
        "STS session" in p
        for p in with_teams([{"name": "a", "roleArn": "arn:aws:sts::111122223333:assumed-role/Team/me"}])
    )
    assert any(
        "adminPrincipals too" in p
        for p in with_teams([{"name": "a", "roleArn": ROLE_ARN}], cluster={"adminPrincipals": [ROLE_ARN]})
    )
    assert any(
        "teams need queues" in p
        for p in problems_of(minimal_values(queues={"enabled": False, "teams": [{"name": "a"}]}))
    )
    unknown = minimal_values(jobs=[job("j", team="nobody")])
    assert any("jobs[j].team: 'nobody' is not a team of this stack" in p for p in problems_of(unknown))
    assert any("podsReadyTimeout" in p for p in problems_of(minimal_values(queues={"podsReadyTimeout": "soon"})))


def test_provisioning_requests_need_queues_and_the_autoscaler():
    ps = problems_of(
        minimal_values(queues={"enabled": False}, autoscaling={"provisioningRequests": True, "enabled": False})
    )
    assert any("needs queues.enabled" in p for p in ps) and any("needs autoscaling.enabled" in p for p in ps)


# ---------------------------------------------------------------------------------------------
# Teams, priorities, the ProvisioningRequest check
# ---------------------------------------------------------------------------------------------


def test_teams_get_their_queue_in_one_cohort_with_limits_and_weights(team_plan):
    vision, nlp, shared = (one(team_plan, "ClusterQueue", n) for n in ("vision", "nlp", queues.SHARED_QUEUE))
    for cq in (vision, nlp, shared):
        assert cq["spec"]["cohortName"] == queues.COHORT
        assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert vision["spec"]["fairSharing"] == {"weight": "2"} and nlp["spec"]["fairSharing"] == {"weight": "1"}
    gpu = quota(vision, "p4d")["nvidia.com/gpu"]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "16", "borrowingLimit": "8", "lendingLimit": "8"}
    assert quota(vision, "p5")["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": "8"}
    assert quota(nlp, "p4d")["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": "8", "borrowingLimit": "0"}
    # The shared queue keeps what the teams do not own: p4d 4 - 2 - 1 = 1 node, p5 2 - 1.
    assert quota(shared, "p4d")["nvidia.com/gpu"]["nominalQuota"] == "8"
    assert quota(shared, "p5")["nvidia.com/gpu"]["nominalQuota"] == "8"
    namespaces = {
        cq["metadata"]["name"]: cq["spec"]["namespaceSelector"]["matchExpressions"][0]["values"]
        for cq in (vision, nlp, shared)
    }
    assert namespaces == {"vision": ["vision", "training"], "nlp": ["team-nlp", "training"], "gpu": ["training"]}
    lqs = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
        for q in objects_of(team_plan, "LocalQueue")
    }
    assert lqs == {
        ("training", "gpu"): "gpu",
        ("training", "vision"): "vision",
        ("vision", "default"): "vision",
        ("training", "nlp"): "nlp",
        ("team-nlp", "default"): "nlp",
    }
    jobs = {o["metadata"]["name"]: o["metadata"]["labels"] for o in objects_of(team_plan, "MPIJob")}
    assert jobs["vision-nccl"][QUEUE_LABEL] == "vision" and jobs["vision-nccl"][PRIORITY_CLASS_LABEL] == "high"
    assert jobs["nlp-nccl"][QUEUE_LABEL] == "nlp" and jobs["shared-nccl"][QUEUE_LABEL] == "gpu"
    # The vision job (3 nodes) fits only by borrowing its one node: its reach is 2 + 1.
    plan = queues.plan_for(load(team_values(), "gpu-training", "test"))
    assert plan is not None and plan.fair_sharing
    cq = {q.name: q for q in plan.cluster_queues}["vision"]
    assert queues.reach(cq, plan.cluster_queues, "p4d", "nvidia.com/gpu") == 24


def test_team_access_entry_and_role_bindings(team_plan):
    (entry,) = team_plan.of_type(ACCESS_ENTRY)
    group = "gputraining:team:vision"
    assert (
        entry.inputs["principalArn"] == ROLE_ARN
        and entry.inputs["kubernetesGroups"] == [group]
        and entry.inputs["type"] == "STANDARD"
    )
    bindings = [r.inputs for r in team_plan.of_type(ROLE_BINDING) if r.inputs["metadata"]["namespace"] == "vision"]
    refs = {b["roleRef"]["name"] for b in bindings}
    assert refs == {component.BATCH_USER_ROLE, "gputraining-team-reader"}
    for b in bindings:
        assert b["subjects"] == [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}]
    assert not [
        r
        for r in team_plan.of_type(ROLE_BINDING)
        if r.inputs["metadata"]["namespace"] == "training" and "team" in r.inputs["metadata"]["name"]
    ]


def test_the_batch_user_role_lets_a_team_create_its_jobs_and_nothing_else(team_plan):
    """Resolve the chart's aggregated batch-user role as the API server does (every ClusterRole
    whose labels match its aggregationRule): the team may create MPIJobs, PyTorchJobs, PaddleJobs
    and Jobs (all queued: batch/job is an integration with teams) and read its queues, but not
    create pods, Deployments or queues."""
    from infra import releases

    rendered = releases.render(team_plan, versions.KUBERNETES_DEFAULT)
    roles = [o for o in rendered.objects if o["kind"] == "ClusterRole"]
    (user,) = [r for r in roles if r["metadata"]["name"] == component.BATCH_USER_ROLE]
    selectors = [s["matchLabels"] for s in user["aggregationRule"]["clusterRoleSelectors"]]
    rules = [
        rule
        for r in roles
        if any(sel.items() <= (r["metadata"].get("labels") or {}).items() for sel in selectors)
        for rule in r.get("rules", [])
    ]

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(
            group in rule.get("apiGroups", [])
            and resource in rule.get("resources", [])
            and verb in rule.get("verbs", [])
            for rule in rules
        )

    for group, resource in (
        ("kubeflow.org", "mpijobs"),
        ("kubeflow.org", "pytorchjobs"),
        ("kubeflow.org", "paddlejobs"),
        ("batch", "jobs"),
    ):
        assert allowed(group, resource, "create"), resource
    assert allowed("kueue.x-k8s.io", "localqueues", "list") and allowed("kueue.x-k8s.io", "workloads", "get")
    for group, resource in (
        ("", "pods"),
        ("apps", "deployments"),
        ("kueue.x-k8s.io", "localqueues"),
        ("kueue.x-k8s.io", "clusterqueues"),
    ):
        assert not allowed(group, resource, "create"), resource
    cfg = next(
        o for o in rendered.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kueue-manager-config"
    )
    frameworks = yaml.safe_load(cfg["data"]["controller_manager_config.yaml"])["integrations"]["frameworks"]
    assert "batch/job" in frameworks


def test_job_queue_and_priority_are_in_the_pod_templates_so_a_change_replaces_the_job():
    base = minimal_values(jobs=[job("j")])
    low = minimal_values(jobs=[job("j", priority="low")])
    objs = [one(run_stack(v), "MPIJob", "j") for v in (base, low)]
    labels = [o["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"] for o in objs]
    assert labels[0][POD_QUEUE_LABEL] == queues.SHARED_QUEUE and labels[0][POD_PRIORITY_LABEL] == "normal"
    assert labels[1][POD_PRIORITY_LABEL] == "low" and objs[0]["spec"] != objs[1]["spec"]
    assert QUEUE_LABEL not in labels[0]  # the Kueue label is on the job only (pods are no integration)
    assert set(GpuJob.model_fields["priority"].annotation.__args__) == set(PRIORITIES)


def test_without_queues_nothing_of_kueue_and_no_labels():
    plan = run_stack(minimal_values(queues={"enabled": False}, jobs=[job("j")]))
    assert not [r for r in plan.of_type(RELEASE) if r.inputs["name"] == "kueue"]
    assert not kueue_crds.kueue_objects(plan.kubernetes_objects())
    mpi = one(plan, "MPIJob", "j")
    assert QUEUE_LABEL not in mpi["metadata"]["labels"]
    assert POD_QUEUE_LABEL not in mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]


def test_provisioning_requests_on_the_autoscaled_flavors(team_plan):
    check = one(team_plan, "AdmissionCheck", queues.PROVISIONING_CHECK)
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"] == {
        "apiGroup": "kueue.x-k8s.io",
        "kind": "ProvisioningRequestConfig",
        "name": queues.PROVISIONING_CHECK,
    }
    config = one(team_plan, "ProvisioningRequestConfig", queues.PROVISIONING_CHECK)
    assert config["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    for cq in objects_of(team_plan, "ClusterQueue"):
        (ac,) = cq["spec"]["admissionChecksStrategy"]["admissionChecks"]
        assert ac == {"name": queues.PROVISIONING_CHECK, "onFlavors": ["p4d", "p5"]}  # not the fixed-size group
    (ca,) = [r for r in team_plan.of_type(RELEASE) if r.inputs["name"] == "cluster-autoscaler"]
    assert ca.inputs["values"]["extraArgs"]["enable-provisioning-requests"] == "true"
    (crd,) = [r for r in team_plan.of_type(CRD) if "provisioningrequests" in r.inputs["metadata"]["name"]]
    assert crd.inputs["metadata"]["name"] == "provisioningrequests.autoscaling.x-k8s.io"
    assert {v["name"] for v in crd.inputs["spec"]["versions"]} == {"v1", "v1beta1"}


def test_provisioning_requests_by_default_only_on_autoscaled_topology_groups(dev_plan):
    # dev's groups (p4d, p3dn) are autoscaled EFA groups of types with network layers: Kueue places
    # their jobs by Topology, on nodes that exist, so the check runs there (docs/jobs.md).
    (ca,) = [r for r in dev_plan.of_type(RELEASE) if r.inputs["name"] == "cluster-autoscaler"]
    assert ca.inputs["values"]["extraArgs"]["enable-provisioning-requests"] == "true"
    (cq,) = objects_of(dev_plan, "ClusterQueue")
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"] == ["p4d", "p3dn"]
    plain = run_stack(minimal_values(gpuNodeGroups=[{"name": "v", "instanceType": "p5.4xlarge", "maxSize": 2}]))
    assert not objects_of(plain, "AdmissionCheck")  # p5.4xlarge has no Topology: no check unless asked
    # The API is there all the same, for Kueue, which looks for it only at its start (test_provisioning_api.py).
    assert [r for r in dev_plan.of_type(CRD) if r.inputs["metadata"]["name"] == queues.PROVISIONING_REQUEST_API]


def test_waiting_for_pods_and_requeueing_in_the_kueue_config(dev_plan):
    (kueue,) = [r for r in dev_plan.of_type(RELEASE) if r.inputs["name"] == "kueue"]
    config = yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    wait = config["waitForPodsReady"]
    assert (
        wait["timeout"] == "30m"
        and wait["requeuingStrategy"]["backoffBaseSeconds"] == 60
        and wait["requeuingStrategy"]["backoffMaxSeconds"] == 3600
    )
    assert "backoffLimitCount" not in wait["requeuingStrategy"]
    assert config["integrations"]["frameworks"] == [
        k.integration for k in operators.KINDS
    ]  # every operator runs in the dev stack
    assert config["manageJobsWithoutQueueName"] is False and "fairSharing" not in config
    limited = run_stack(minimal_values(queues={"requeueLimit": 5, "podsReadyTimeout": "45m"}))
    (kueue,) = [r for r in limited.of_type(RELEASE) if r.inputs["name"] == "kueue"]
    wait = yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])["waitForPodsReady"]
    assert wait["timeout"] == "45m" and wait["requeuingStrategy"]["backoffLimitCount"] == 5


def test_the_gpu_catalog_fits_in_a_flavor():
    """Every GPU type of the catalog gives a positive CPU and memory quota."""
    from stacks.config.models import GpuNodeGroupConfig

    for name in catalog.GPU_TYPES:
        g = GpuNodeGroupConfig.model_validate({"name": "g", "instanceType": name})
        per = queues.node_allocatable(g, queues.NodeServices())
        assert per["cpu"] > 0 and per["memory"] > 0 and per["nvidia.com/gpu"] == g.instance.gpus, name


def test_the_documented_teams_example_is_valid_and_the_documented_error_is_the_real_one():
    doc = (ROOT / "docs/queues.md").read_text()
    blocks = re.findall(r"^```yaml\n(gpu-training:queues:\n.*?)^```", doc, re.M | re.S)
    assert len(blocks) == 1
    example = yaml.safe_load(blocks[0])["gpu-training:queues"]
    values = minimal_values(queues=example, jobs=[job("big", 2, team="vision")])
    values[f"{NS}:queues"]["teams"][0]["quotas"][0]["borrowingLimit"] = 0
    (problem,) = problems_of(values)
    assert f"    {problem}" in doc
    del values[f"{NS}:jobs"]
    load(values, "gpu-training", "test")


def test_the_commented_teams_example_of_the_dev_stack_is_valid():
    lines = (ROOT / "Pulumi.dev.yaml").read_text().splitlines()
    start = lines.index("  # gpu-training:queues:")
    block = []
    for line in lines[start:]:
        if not line.startswith("  # ") or (block and not line.startswith("  #   ")):
            break
        block.append("  " + line[len("  # ") :])
    example = yaml.safe_load("\n".join(block))["gpu-training:queues"]
    values = dev_values()
    values[f"{NS}:queues"] = example
    cfg = load(values, "gpu-training", "dev")
    assert [t.name for t in cfg.queues.teams] == ["vision"]
