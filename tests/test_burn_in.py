"""Burn-in of new GPU nodes: the decisions on the tools' outputs (tests/data/burn_in/, each with its
source), and the stack's side of it read together from a plan: the node groups' startup taint, the
Cluster Autoscaler's view of a group at zero, the burn-in DaemonSet, its RBAC and IAM, and who
tolerates the taint (the DaemonSets a GPU node needs) and who does not (jobs, Kueue flavors)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from components import burn_in
from facts.kube import (
    BURN_IN_LABEL,
    BURN_IN_TAINT,
    GPU_TAINT,
    NODE_GROUP_LABEL,
    STARTUP_TAINT_PREFIX,
)
from infra.invariants import tolerates
from stacks.config import load
from tests.helpers import dev_values, minimal_values, run_stack

DATA = Path(__file__).parent / "data" / "burn_in"
NCCL = Path(__file__).parent / "data" / "nccl"


def _load() -> ModuleType:
    sys.path.insert(0, str(burn_in.FABRIC_RULE.parent))  # the decisions import the fabric rule, shipped beside them
    spec = importlib.util.spec_from_file_location("burn_in_decisions", burn_in.DECISIONS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bd = _load()
P4D = bd.Expected(gpus=8, gpu_model="A100", efa=4)
P5 = bd.Expected(gpus=8, gpu_model="H100", efa=32)


def data(name: str) -> str:
    return (DATA / name).read_text()


def sysfs(name: str) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in data(name).splitlines() if line.strip()]  # type: ignore[misc]


def test_every_recording_is_the_one_its_source_names():
    rows = re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", (DATA / "SOURCES.md").read_text(), re.M)
    assert {name for name, _ in rows} == {p.name for p in DATA.iterdir() if p.name != "SOURCES.md"}
    for name, digest in rows:
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name


# -- the decisions ------------------------------------------------------------------------------


def test_a_healthy_p4d_passes():
    verdict = bd.decide(
        P4D,
        data("p4d-nvidia-smi-query.csv"),
        data("p4d-kmsg-clean.txt").splitlines(),
        sysfs("p4d-sysfs-infiniband.txt"),
    )
    assert verdict.passed and verdict.label == "passed", verdict.message
    assert verdict.message == "burn-in passed: 8 x A100; 4 EFA"


def test_a_healthy_p5_passes():
    verdict = bd.decide(P5, data("p5-nvidia-smi-query.csv"), (), sysfs("p5-sysfs-infiniband.txt"))
    assert verdict.passed, verdict.message


def test_a_missing_efa_interface_fails_the_node():
    verdict = bd.decide(P4D, data("p4d-nvidia-smi-query.csv"), (), sysfs("p4d-sysfs-infiniband-missing-one.txt"))
    assert verdict.label == "failed-efa-count"
    assert "3 EFA interface(s) present (rdmap160s27, rdmap16s27, rdmap32s27), expected 4" in verdict.message


def test_a_p5_short_of_its_32_efa_interfaces_fails():
    assert bd.decide(P5, data("p5-nvidia-smi-query.csv"), (), sysfs("p4d-sysfs-infiniband.txt")).label == (
        "failed-efa-count"
    )


def test_an_uncorrectable_ecc_error_fails_the_node():
    verdict = bd.decide(P4D, data("p4d-nvidia-smi-query-ecc.csv"), (), sysfs("p4d-sysfs-infiniband.txt"))
    assert verdict.label == "failed-ecc"
    assert "GPU 3 (00000000:20:1D.0): 2 uncorrectable ECC error(s)" in verdict.message


def test_a_gpu_fallen_off_the_bus_fails_the_node():
    smi = data("p4d-nvidia-smi-query-gpu-lost.txt")
    verdict = bd.decide(P4D, smi, data("p4d-kmsg-xid79.txt").splitlines(), sysfs("p4d-sysfs-infiniband.txt"))
    assert [f.code for f in verdict.findings] == ["gpu-lost", "gpu-count", "xid-79"]
    assert verdict.label == "failed-gpu-lost.gpu-count.xid-79"
    assert "GPU 0000:90:1D.0 cannot be reached (GPU is lost.  Reboot the system to recover this GPU)" in verdict.message
    assert "7 GPU(s) answer, the instance type has 8" in verdict.message


def test_an_xid_fails_the_node_but_an_application_xid_does_not():
    smi, efa = data("p4d-nvidia-smi-query.csv"), sysfs("p4d-sysfs-infiniband.txt")
    assert bd.decide(P4D, smi, data("p4d-kmsg-xid79.txt").splitlines(), efa).label == "failed-xid-79"
    assert bd.xids(data("p4d-kmsg-clean.txt").splitlines()) == [
        ("0000:10:1c", 13, "pid=4211, name=python3, Graphics Exception: ESR 0x404600=0x80000001")
    ]
    assert bd.decide(P4D, smi, data("p4d-kmsg-clean.txt").splitlines(), efa).passed


def test_another_gpu_model_fails_the_node():
    verdict = bd.decide(P5, data("p4d-nvidia-smi-query.csv"), (), sysfs("p5-sysfs-infiniband.txt"))
    assert verdict.label == "failed-gpu-model"
    assert "GPU model NVIDIA A100-SXM4-40GB, expected H100" in verdict.message


@pytest.mark.parametrize(
    "name, model, matches",
    [
        ("NVIDIA A100-SXM4-40GB", "A100", True),
        ("NVIDIA H100 80GB HBM3", "H100", True),
        ("Tesla V100-SXM2-32GB", "V100", True),
        ("NVIDIA L40S", "L4", False),  # a word of the name, not a part of one
        ("NVIDIA H200", "H100", False),
    ],
)
def test_the_model_is_a_word_of_the_product_name(name, model, matches):
    assert bd.gpu_findings(bd.Expected(1, model, 0), f"0, {name}, 00000000:10:1C.0, 0\n") == (
        [] if matches else [bd.Finding("gpu-model", f"GPU model {name}, expected {model}")]
    )


def test_the_check_runs_only_tools_its_containers_have():
    """fi_info (libfabric) and dcgmi (DCGM) are not in the check's image nor mounted by the NVIDIA runtime:
    the script must not call them, and the decisions must not claim them."""
    script = burn_in.SCRIPT.read_text()
    assert "fi_info" not in script and "dcgmi" not in script
    assert not hasattr(bd, "fi_info_domains") and not hasattr(bd, "dcgmi_failures")


def test_a_node_in_service_before_is_judged_on_its_present_state_not_its_history():
    """A node that served jobs for weeks carries their ECC counts and Xids since boot: without history
    they do not count; what it shows now (GPUs, model, EFA) still does."""
    ecc, efa = data("p4d-nvidia-smi-query-ecc.csv"), sysfs("p4d-sysfs-infiniband.txt")
    xid79 = data("p4d-kmsg-xid79.txt").splitlines()
    assert bd.decide(P4D, ecc, xid79, efa).label == "failed-ecc.xid-79"  # a new node: all of it counts
    old = bd.decide(P4D, ecc, xid79, efa, history=False)
    assert old.passed and "ECC counts and Xids since boot not judged" in old.message
    lost = bd.decide(P4D, data("p4d-nvidia-smi-query-gpu-lost.txt"), xid79, efa, history=False)
    assert lost.label == "failed-gpu-lost.gpu-count"


@pytest.mark.parametrize(
    "tainted, label, age, working, step",
    [
        (False, "", 10, [], "nothing"),
        (True, "", 60, [], "check"),  # a new node
        (True, "", 40 * 86400, [], "check-present"),  # in service for weeks, idle now
        (True, "", 60, ["training/job-0"], "release-in-use"),
        (True, "passed", 60, [], "release-in-service"),  # re-tainted by the group's update
        (True, "in-service", 40 * 86400, [], "release-in-service"),
        (True, "failed-ecc", 60, [], "check"),  # a failed node's pod restarted: judged again
    ],
)
def test_what_the_gate_does_with_a_node(tainted, label, age, working, step):
    assert bd.next_step(tainted, label, age, working) == step


def test_replacements_are_bounded_per_window():
    now = 10_000.0
    assert bd.may_replace([now - 10, now - 20], now, 3, 3600)
    assert not bd.may_replace([now - 10, now - 20, now - 30], now, 3, 3600)
    assert bd.may_replace([now - 10, now - 20, now - 3601], now, 3, 3600)  # one left the window
    assert bd.recent([now - 3601, now - 5, now - 9], now, 3600) == [now - 9, now - 5]


def test_the_loopback_test_passes_on_a_finished_run_and_fails_on_a_broken_one():
    log = (NCCL / "all_reduce_perf-2.16-efa.log").read_text()
    smi, efa = data("p4d-nvidia-smi-query.csv"), sysfs("p4d-sysfs-infiniband.txt")
    verdict = bd.decide(P4D, smi, (), efa, loopback_log=log)
    assert verdict.passed and "NCCL loopback all-reduce 10.5 GB/s average bus bandwidth" in verdict.message
    cut = log[: log.index("# Out of bounds")]
    assert bd.decide(P4D, smi, (), efa, loopback_log=cut).label == "failed-loopback"
    wrong = log.replace("Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED")
    assert "3 value(s) out of bounds" in bd.decide(P4D, smi, (), efa, loopback_log=wrong).message


@pytest.mark.parametrize(
    "text, value",
    [
        ("failed-ecc", "failed-ecc"),
        ("failed-" + ".".join(f"xid-{n}" for n in range(40)), None),
        ("failed-a/b c", "failed-a-b-c"),
        ("-.-", "failed"),
    ],
)
def test_label_values_follow_the_kubernetes_rules(text, value):
    got = bd.label_value(text)
    assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", got), got
    if value is not None:
        assert got == value


# -- the stack's side, read together from one plan ------------------------------------------------


@pytest.fixture(scope="module")
def burn_in_plan():
    values = minimal_values(
        gpuNodeGroups=[
            {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 2},
            {"name": "p3dn", "instanceType": "p3dn.24xlarge", "minSize": 0, "desiredSize": 0, "maxSize": 2},
            {"name": "plain", "instanceType": "p4d.24xlarge", "maxSize": 1, "burnIn": False},
            {
                "name": "block",
                "instanceType": "p5.48xlarge",
                "capacityType": "capacity-block",
                "capacityReservationId": "cr-0123456789abcdef0",
                "desiredSize": 1,
                "maxSize": 1,
            },
        ],
        burnIn={"loopbackTest": True},
        jobs=[{"name": "nccl", "kind": "nccl-test", "nodeGroup": "p4d", "nodes": 2}],
    )
    return run_stack(values), load(values, "gpu-training", "test")


def _records(plan, type_: str) -> list[Any]:
    return [r for r in plan.records if r.type == type_]


def _node_groups(plan) -> dict[str, Any]:
    return {r.inputs["labels"][NODE_GROUP_LABEL]: r for r in _records(plan, "aws:eks/nodeGroup:NodeGroup")}


def _daemon_set(plan) -> dict[str, Any]:
    return next(
        r.inputs
        for r in plan.records
        if r.inputs.get("kind") == "DaemonSet" and r.inputs["metadata"]["name"] == burn_in.NAME
    )


def test_every_burn_in_group_joins_with_the_startup_taint_and_only_those(burn_in_plan):
    plan, _ = burn_in_plan
    groups = _node_groups(plan)
    startup = {"key": BURN_IN_TAINT["key"], "value": "pending", "effect": "NO_SCHEDULE"}
    assert BURN_IN_TAINT["key"].startswith(STARTUP_TAINT_PREFIX)
    for name in ("p4d", "p3dn", "block"):  # autoscaled ones and the capacity block's
        assert startup in groups[name].inputs["taints"], name
    assert startup not in groups["plain"].inputs["taints"]


def test_every_planned_taint_key_is_within_the_eks_limit_botocore_models(burn_in_plan):
    """EKS refuses a node-group taint key over 63 characters (CreateNodegroup, UpdateNodegroupConfig): the
    bound is read from botocore's EKS model, not retyped; the burn-in key once had 66 and failed every group."""
    import botocore.session

    shape = botocore.session.get_session().get_service_model("eks").shape_for("taintKey")
    low, high = shape.metadata["min"], shape.metadata["max"]
    assert low <= len(BURN_IN_TAINT["key"]) <= high, BURN_IN_TAINT["key"]
    plan, _ = burn_in_plan
    keys = {t["key"] for r in _node_groups(plan).values() for t in r.inputs["taints"]}
    assert BURN_IN_TAINT["key"] in keys
    assert [k for k in keys if not low <= len(k) <= high] == []
    # The rule fires: the key the branch started with is refused.
    assert not len(STARTUP_TAINT_PREFIX + "gputraining-burn-in") <= high


def test_the_autoscaler_builds_a_group_at_zero_that_jobs_fit(burn_in_plan):
    """The autoscaler's template of a group at zero: its ASG template tags plus the node group's taints
    from eks:DescribeNodegroup, less the startup taints (cluster-autoscaler 1.36 SanitizeTaints). The
    job's pods must tolerate what is left; the ASG tags never carry the startup taint."""
    plan, _ = burn_in_plan
    tags = {
        r.inputs["tag"]["key"]: r.inputs["tag"]["value"]
        for r in _records(plan, "aws:autoscaling/tag:Tag")
        if r.parent and r.parent["name"] == "gpu-p4d"
    }
    assert tags["k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu"] == "true:NoSchedule"
    assert not any(BURN_IN_TAINT["key"] in k for k in tags)
    prefix = "k8s.io/cluster-autoscaler/node-template/taint/"
    from_tags = [{"key": k[len(prefix) :], "effect": v.split(":")[1]} for k, v in tags.items() if k.startswith(prefix)]
    effects = {"NO_SCHEDULE": "NoSchedule"}
    described = [{"key": t["key"], "effect": effects[t["effect"]]} for t in _node_groups(plan)["p4d"].inputs["taints"]]
    template = [t for t in from_tags + described if not t["key"].startswith(STARTUP_TAINT_PREFIX)]
    assert {t["key"] for t in template} == {GPU_TAINT["key"]}
    job = next(r.inputs for r in plan.records if r.inputs.get("kind") == "MPIJob")
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert all(tolerates(worker["tolerations"], t) for t in template)
    assert not tolerates(worker["tolerations"], BURN_IN_TAINT)


def test_the_daemonset_runs_on_the_burn_in_groups_tolerating_their_taints(burn_in_plan):
    plan, _ = burn_in_plan
    spec = _daemon_set(plan)["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": NODE_GROUP_LABEL, "operator": "In", "values": ["block", "p3dn", "p4d"]}]}
    ]
    assert all(tolerates(spec["tolerations"], t) for t in (BURN_IN_TAINT, GPU_TAINT))
    assert [c["name"] for c in spec["initContainers"]] == ["gate", "loopback", "check", "replace"]
    assert [c["name"] for c in spec["containers"]] == ["watch"]
    assert spec["containers"][0]["command"][-1] == "watch"
    # No container holds a GPU: none requests one, the watch container sees none.
    for c in spec["initContainers"] + spec["containers"]:
        assert "nvidia.com/gpu" not in json.dumps(c.get("resources", {})), c["name"]
    env = {
        c["name"]: {e["name"]: e.get("value") for e in c["env"]} for c in spec["initContainers"] + spec["containers"]
    }
    assert env["check"]["NVIDIA_VISIBLE_DEVICES"] == "all" and env["watch"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["check"]["BURN_IN_TAINT_KEY"] == BURN_IN_TAINT["key"] and env["check"]["BURN_IN_LABEL"] == BURN_IN_LABEL
    assert env["replace"]["AWS_REGION"] == env["replace"]["AWS_DEFAULT_REGION"] == "us-west-2"
    replace = next(c for c in spec["initContainers"] if c["name"] == "replace")
    assert "aws autoscaling set-instance-health" in replace["command"][-1]
    assert "--health-status Unhealthy --no-should-respect-grace-period" in replace["command"][-1]


def test_the_expectations_come_from_the_catalog_and_v100_skips_the_loopback(burn_in_plan):
    plan, _ = burn_in_plan
    config = next(
        r.inputs
        for r in plan.records
        if r.inputs.get("kind") == "ConfigMap" and r.inputs["metadata"]["name"] == burn_in.NAME
    )
    assert json.loads(config["data"]["expected.json"]) == {
        "block": {"instanceType": "p5.48xlarge", "gpus": 8, "gpuModel": "H100", "efa": 32, "loopback": True},
        "p3dn": {"instanceType": "p3dn.24xlarge", "gpus": 8, "gpuModel": "V100", "efa": 1, "loopback": False},
        "p4d": {"instanceType": "p4d.24xlarge", "gpus": 8, "gpuModel": "A100", "efa": 4, "loopback": True},
    }
    assert config["data"]["burn_in_decisions.py"] == burn_in.DECISIONS.read_text()


def test_the_check_may_only_patch_nodes_list_pods_record_events_and_count_replacements(burn_in_plan):
    plan, cfg = burn_in_plan
    role = next(
        r.inputs
        for r in plan.records
        if r.inputs.get("kind") == "ClusterRole" and r.inputs["metadata"]["name"] == burn_in.NAME
    )
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    # The replacement count: one ConfigMap in kube-system, read and updated by name only.
    counter = next(
        r.inputs
        for r in plan.records
        if r.inputs.get("kind") == "Role" and r.inputs["metadata"]["name"] == burn_in.REPLACEMENTS
    )
    assert counter["metadata"]["namespace"] == burn_in.NAMESPACE
    assert counter["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [burn_in.REPLACEMENTS],
            "verbs": ["get", "update"],
        }
    ]
    config_map = next(
        r
        for r in plan.records
        if r.inputs.get("kind") == "ConfigMap" and r.inputs["metadata"]["name"] == burn_in.REPLACEMENTS
    )
    assert config_map.options.get("ignoreChanges") == ["data"]
    policy = json.loads(
        next(
            r.inputs["policy"]
            for r in _records(plan, "aws:iam/rolePolicy:RolePolicy")
            if r.name == "burn-in-role-inline"
        )
    )
    [statement] = policy["Statement"]
    assert statement["Action"] == ["autoscaling:SetInstanceHealth"]
    assert statement["Condition"]["StringEquals"] == {
        "autoscaling:ResourceTag/eks:cluster-name": cfg.cluster_name,
        "autoscaling:ResourceTag/eks:nodegroup-name": sorted(
            r.inputs["nodeGroupName"] for n, r in _node_groups(plan).items() if n != "plain"
        ),
    }
    association = next(
        r.inputs
        for r in _records(plan, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if r.name == "burn-in-pod-identity"
    )
    assert (association["namespace"], association["serviceAccount"]) == (burn_in.NAMESPACE, burn_in.NAME)


def test_the_dcgm_server_and_device_plugins_tolerate_the_taint_and_flavors_do_not(burn_in_plan):
    plan, _ = burn_in_plan
    addon = next(
        r.inputs for r in _records(plan, "aws:eks/addon:Addon") if r.inputs["addonName"] == "eks-node-monitoring-agent"
    )
    assert tolerates(json.loads(addon["configurationValues"])["dcgmAgent"]["tolerations"], BURN_IN_TAINT)
    for release in ("nvidia-device-plugin", "aws-efa-k8s-device-plugin"):
        values = next(
            r.inputs["values"] for r in _records(plan, "kubernetes:helm.sh/v3:Release") if r.inputs["name"] == release
        )
        assert tolerates(values["tolerations"], BURN_IN_TAINT), release
    for r in plan.records:
        if r.inputs.get("kind") == "ResourceFlavor":
            assert not tolerates(r.inputs["spec"].get("tolerations") or [], BURN_IN_TAINT)


def test_without_burn_in_nothing_of_it_is_built():
    values = minimal_values(burnIn={"enabled": False})
    plan = run_stack(values)
    assert not any(BURN_IN_TAINT["key"] in json.dumps(r.inputs) for r in plan.records)
    assert not any(r.type == "gputraining:components:BurnIn" for r in plan.records)


def test_a_group_can_take_burn_in_when_the_stack_has_it_off():
    cfg = load(
        minimal_values(
            burnIn={"enabled": False},
            gpuNodeGroups=[{"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 1, "burnIn": True}],
        ),
        "gpu-training",
        "test",
    )
    assert cfg.burn_in_on(cfg.gpu_node_groups[0])


def test_the_dev_stack_burns_in_its_groups(dev_plan):
    groups = _node_groups(dev_plan)
    cfg = load(dev_values(), "gpu-training", "dev")
    assert set(groups) == {g.name for g in cfg.gpu_node_groups} == {"p4d", "p3dn"}
    assert all(BURN_IN_TAINT["key"] in json.dumps(r.inputs["taints"]) for r in groups.values())


def _effective_request(spec: dict[str, Any]) -> tuple[int, int]:
    """The pod's effective CPU (m) and memory (Mi) request, as the scheduler counts it for the pod's life:
    per resource, the larger of the largest init container's and the sum of the containers'."""
    from stacks import queues

    def requests(c: dict[str, Any]) -> tuple[int, int]:
        r = c.get("resources", {}).get("requests", {})
        return queues.parse_quantity("cpu", r.get("cpu", "0")), queues.parse_quantity("memory", r.get("memory", "0"))

    init = [requests(c) for c in spec["initContainers"]]
    main = [requests(c) for c in spec["containers"]]
    return tuple(max(max(x[i] for x in init), sum(x[i] for x in main)) for i in (0, 1))  # type: ignore[return-value]


def test_the_burn_in_pods_lifetime_reservation_is_in_the_allocatable_model(burn_in_plan):
    """facts/allocatable.py's burn-in figures are the planned pod's effective request, and a burn-in
    group's nodes leave that much less for training pods than the same group without burn-in."""
    from facts import allocatable
    from stacks import queues

    plan, cfg = burn_in_plan
    spec = _daemon_set(plan)["spec"]["template"]["spec"]
    assert _effective_request(spec) == (allocatable.BURN_IN_LOOPBACK.cpu_m, allocatable.BURN_IN_LOOPBACK.memory_mib)
    without_loopback = burn_in.pod_spec(
        burn_in.BurnInArgs(
            "c", "us-west-2", [burn_in.GroupExpectation("p3dn", "ng", "p3dn.24xlarge", 8, "V100", 1)], "python", "aws"
        )
    )
    assert _effective_request(without_loopback) == (allocatable.BURN_IN.cpu_m, allocatable.BURN_IN.memory_mib)
    services = queues.node_services(cfg)
    assert services.burn_in == {"p4d", "p3dn", "block"} and services.burn_in_loopback == {"p4d", "block"}
    groups = {g.name: g for g in cfg.gpu_node_groups}
    bare = queues.NodeServices(
        fsx=services.fsx, efa_device_plugin=services.efa_device_plugin, monitoring=services.monitoring
    )
    for name, held in (("p4d", allocatable.BURN_IN_LOOPBACK), ("p3dn", allocatable.BURN_IN)):
        with_it, without = queues.node_allocatable(groups[name], services), queues.node_allocatable(groups[name], bare)
        assert (without["cpu"] - with_it["cpu"], without["memory"] - with_it["memory"]) == (held.cpu_m, held.memory_mib)
    assert queues.node_allocatable(groups["plain"], services) == queues.node_allocatable(groups["plain"], bare)


def test_the_daemonset_comes_after_every_burn_in_node_group(burn_in_plan):
    """The `up` that turns burn-in on updates the node groups (EKS then taints their running nodes)
    before the DaemonSet's pods look at them."""
    plan, _ = burn_in_plan
    ds = next(
        r for r in plan.records if r.inputs.get("kind") == "DaemonSet" and r.inputs["metadata"]["name"] == burn_in.NAME
    )
    after = {d["name"] for d in ds.depends_on}
    groups = {g: r.name for g, r in _node_groups(plan).items()}  # the aws.eks.NodeGroup of each group
    assert {groups[g] for g in ("p4d", "p3dn", "block")} <= after, after
    assert groups["plain"] not in after


# -- the pods-ready budget of jobs admitted before their burn-in nodes exist ----------------------


def _problems(values: dict[str, Any]) -> list[str]:
    from stacks.config import ConfigError

    try:
        load(values, "gpu-training", "test")
    except ConfigError as e:
        return [str(p) for p in e.problems]
    return []


def _budget(loopback: bool) -> int:
    from stacks.queues.plan import pods_ready_budget

    return sum(m for _, m in pods_ready_budget(burn_in=True, loopback=loopback))


def test_the_default_pods_ready_timeout_covers_boot_burn_in_loopback_and_image_pulls():
    from facts import durations

    cfg = load(minimal_values(burnIn={"loopbackTest": True}), "gpu-training", "test")
    minutes = durations.parse_go_duration(cfg.queues.pods_ready_timeout) / 60e9
    assert minutes >= _budget(loopback=True) > _budget(loopback=False)


@pytest.mark.parametrize("loopback", [False, True])
def test_a_pods_ready_timeout_shorter_than_a_burn_in_groups_budget_is_refused(loopback):
    need = _budget(loopback)
    short = minimal_values(burnIn={"loopbackTest": loopback}, queues={"podsReadyTimeout": f"{need - 1}m"})
    [problem] = [p for p in _problems(short) if "podsReadyTimeout" in p]
    assert f"'{need - 1}m' is shorter than a job on group 'p4d' needs" in problem
    assert "admitted before its nodes exist (maxSize 2)" in problem and "node start 8m + burn-in check 2m" in problem
    assert ("loopback" in problem) == loopback and problem.endswith(f"= {need}m; set at least {need}m")
    assert not [p for p in _problems({**short, "gpu-training:queues": {"podsReadyTimeout": f"{need}m"}}) if p]


def test_the_budget_applies_only_where_burn_in_nodes_start_after_admission():
    short = {"podsReadyTimeout": "15m"}
    assert not _problems(minimal_values(burnIn={"enabled": False}, queues=short))  # no burn-in
    fixed = [{"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 2, "desiredSize": 2, "maxSize": 2}]
    assert not _problems(minimal_values(gpuNodeGroups=fixed, queues=short))  # its nodes are there
