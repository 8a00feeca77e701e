"""The newest GPU types end to end, against AWS's recorded DescribeInstanceTypes data (moto 5.2.5).

A stack with p5.4xlarge, p6-b200 and p6-b300 groups (and one with every other EFA type of the
catalog) is planned offline, and what it registers is compared with the recorded data, card by
card: the launch templates' network interfaces, the autoscaler's node-template tags, the job
requests and the NCCL gate's default bandwidth. The same pieces are then built for every EFA GPU
type of the recorded data, the catalog's or not (the G families), from the recorded item alone.
p6e-gb200 is refused with its reasons.
"""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pytest

import jobs as J
from components.launch_template import efa_network_interfaces
from components.node_group import NODE_TEMPLATE, autoscaler_template_tags
from facts import catalog, instance_types
from facts.kube import ACCELERATOR_LABEL, EFA_HUGEPAGES_2MI_PAGES, NODE_GROUP_LABEL
from jobs.nccl_test import DEFAULT_MIN_BUSBW_SHARE
from stacks.environment import extended_resources
from tests.helpers import NS, RECORDED_EFA_GPU_TYPES, minimal_values, recorded, run_stack

LT = "aws:ec2/launchTemplate:LaunchTemplate"
MNG = "aws:eks/nodeGroup:NodeGroup"
TAG = "aws:autoscaling/tag:Tag"
MPIJOB = "kubernetes:kubeflow.org/v2beta1:MPIJob"
V100_NCCL_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:sm70-2.16.9"

# Two plans cover every EFA type of the catalog: us-west-2b offers all but p5e and p5en (2c).
STACKS = {
    "us-west-2b": [
        "p5.4xlarge",
        "p6-b200.48xlarge",
        "p6-b300.48xlarge",
        "p3dn.24xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
    ],
    "us-west-2c": ["p5e.48xlarge", "p5en.48xlarge"],
}


def _group_name(instance_type: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", instance_type)


def _recorded_expectations(instance_type: str) -> dict[str, Any]:
    """What a node of ``instance_type`` must get, from the recorded item alone."""
    item = recorded()[instance_type]
    cards = {c["NetworkCardIndex"]: c for c in item["NetworkInfo"]["NetworkCards"]}
    efa_max = item["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"]
    gpus = sum(g["Count"] for g in item["GpuInfo"]["Gpus"])
    return {"cards": cards, "efa": efa_max, "gpus": gpus}


def _plan(az: str, types: list[str]):
    groups = [{"name": _group_name(t), "instanceType": t, "maxSize": 2} for t in types]
    jobs = []
    for t in types:
        job: dict[str, Any] = {
            "name": f"nccl-{_group_name(t)}",
            "kind": "nccl-test",
            "nodeGroup": _group_name(t),
            "nodes": 2,
        }
        if catalog.BUILTIN[t].gpu_model == "V100":
            job["image"] = V100_NCCL_IMAGE
        jobs.append(job)
    return run_stack(minimal_values(gpuAvailabilityZone=az, gpuNodeGroups=groups, jobs=jobs))


@pytest.fixture(scope="module", params=sorted(STACKS))
def planned(request):
    az = request.param
    return STACKS[az], _plan(az, STACKS[az])


def test_every_efa_type_of_the_catalog_is_planned():
    planned_types = {t for types in STACKS.values() for t in types}
    assert planned_types == {t for t in catalog.GPU_TYPES if catalog.BUILTIN[t].efa_supported}
    assert {"p5.4xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge"} <= set(STACKS["us-west-2b"])


def test_launch_templates_match_the_recorded_cards(planned):
    types, plan = planned
    for t in types:
        want = _recorded_expectations(t)
        nics = plan.named(LT, f"gpu-{_group_name(t)}-lt").inputs["networkInterfaces"]
        for n in nics:
            # Never an interface type on a card that does not list it.
            assert n["interfaceType"] in want["cards"][n["networkCardIndex"]]["InterfaceTypes"], (t, n)
        assert (nics[0]["networkCardIndex"], nics[0]["deviceIndex"]) == (0, 0)
        assert nics[0]["interfaceType"] in ("interface", "efa") and nics[0]["associatePublicIpAddress"] == "false"
        assert sum(n["interfaceType"] in ("efa", "efa-only") for n in nics) == want["efa"], t
        efa_cards = {
            i for i, c in want["cards"].items() if "efa-only" in c["InterfaceTypes"] or "efa" in c["InterfaceTypes"]
        }
        assert {n["networkCardIndex"] for n in nics if n["interfaceType"] != "interface"} <= efa_cards
        assert len({(n["networkCardIndex"], n["deviceIndex"]) for n in nics}) == len(nics)
        description = plan.named(LT, f"gpu-{_group_name(t)}-lt").inputs["description"]
        assert description.endswith(f", {want['efa']} EFA")


@pytest.fixture(scope="module")
def planned_2b():
    """The us-west-2b stack, which holds p5.4xlarge, p6-b200 and p6-b300."""
    return _plan("us-west-2b", STACKS["us-west-2b"])


def test_p6_b300_primary_is_plain_ena_and_its_efa_sits_on_cards_1_to_16(planned_2b):
    plan = planned_2b
    nics = plan.named(LT, "gpu-p6-b300-48xlarge-lt").inputs["networkInterfaces"]
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics] == [(0, 0, "interface")] + [
        (c, 1, "efa-only") for c in range(1, 17)
    ]
    assert recorded()["p6-b300.48xlarge"]["NetworkInfo"]["NetworkCards"][0]["InterfaceTypes"] == ["interface"]
    p5 = plan.named(LT, "gpu-p5-4xlarge-lt").inputs["networkInterfaces"]
    assert [(n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in p5] == [(0, 0, "efa")]


def test_node_template_tags_match_the_recorded_data(planned):
    types, plan = planned
    for t in types:
        want = _recorded_expectations(t)
        group = _group_name(t)
        tags = {
            r.inputs["tag"]["key"]: r.inputs["tag"]["value"]
            for r in plan.of_type(TAG)
            if r.name.startswith(f"gpu-{group}-asg-")
        }
        assert tags[f"{NODE_TEMPLATE}/resources/nvidia.com/gpu"] == str(want["gpus"]), t
        assert tags[f"{NODE_TEMPLATE}/resources/vpc.amazonaws.com/efa"] == str(want["efa"]), t
        assert tags[f"{NODE_TEMPLATE}/resources/hugepages-2Mi"] == f"{EFA_HUGEPAGES_2MI_PAGES * 2}Mi"
        assert tags[f"{NODE_TEMPLATE}/label/{ACCELERATOR_LABEL}"] == catalog.BUILTIN[t].accelerator
        mng = plan.named(MNG, f"gpu-{group}-mng").inputs
        assert mng["labels"][ACCELERATOR_LABEL] == catalog.BUILTIN[t].accelerator
        assert mng["instanceTypes"] == [t]


def test_job_requests_and_the_nccl_gate_match_the_recorded_data(planned):
    types, plan = planned
    for t in types:
        want = _recorded_expectations(t)
        group = _group_name(t)
        job = plan.named(MPIJOB, f"jobs-nccl-{group}-mpijob").inputs
        worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        (container,) = worker["containers"]
        for side in ("limits", "requests"):
            assert container["resources"][side]["nvidia.com/gpu"] == want["gpus"], t
            assert container["resources"][side]["vpc.amazonaws.com/efa"] == want["efa"], t
        assert worker["nodeSelector"][NODE_GROUP_LABEL] == group
        # The gate's default minimum: 35% of the peak bandwidth of the recorded cards that carry EFA.
        efa_cards = {
            s.card for s in instance_types.efa_layout(catalog.from_describe_instance_types(recorded()[t])) if s.is_efa
        }
        gbps = sum(c["PeakBandwidthInGbps"] for i, c in want["cards"].items() if i in efa_cards)
        launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        command = launcher["command"]
        assert command[4:7] == ["run", "1", f"{round(gbps / 8 * DEFAULT_MIN_BUSBW_SHARE, 2):g}"], (t, command[:8])


def test_the_nccl_gate_default_per_type():
    """The defaults as the docs list them: p6-b300 counts only cards 1-16 (6400 Gbit/s), p6-b200
    its 8 cards of 200 Gbit/s as DescribeInstanceTypes reports them."""
    from jobs.nccl_test import default_min_bus_bandwidth

    got = {
        n: default_min_bus_bandwidth(2, catalog.BUILTIN[n].efa_interfaces, catalog.BUILTIN[n].efa_gbps)
        for n in catalog.GPU_TYPES
    }
    assert got["p6-b300.48xlarge"] == 280.0
    assert got["p6-b200.48xlarge"] == 70.0
    assert got["p5.4xlarge"] == 4.38
    assert got["p5.48xlarge"] == got["p5en.48xlarge"] == 140.0 and got["p4d.24xlarge"] == 17.5
    assert got["p3.16xlarge"] == 0.0


def test_device_plugin_covers_the_new_types(planned):
    types, plan = planned
    release = next(r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.name.endswith("-efa"))
    assert sorted(types) == release.inputs["values"]["supportedInstanceLabels"]["values"]


# ---------------------------------------------------------------------------------------------
# Every EFA GPU type of the recorded data, from the recorded item alone
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RECORDED_EFA_GPU_TYPES)
def test_every_recorded_efa_gpu_type_gets_its_cards_tags_and_requests(name):
    item = recorded()[name]
    it = catalog.from_describe_instance_types(item)
    want = _recorded_expectations(name)
    # The launch template's interfaces, as the node group builds them.
    interfaces = efa_network_interfaces(instance_types.efa_layout(it), ["sg-cluster", "sg-efa"])
    for args in interfaces:
        card = pulumi.get(args, "network_card_index")
        assert pulumi.get(args, "interface_type") in want["cards"][card]["InterfaceTypes"], (name, card)
        assert pulumi.get(args, "security_groups") == ["sg-cluster", "sg-efa"]
    assert sum(pulumi.get(a, "interface_type") in ("efa", "efa-only") for a in interfaces) == want["efa"]
    # The autoscaler's node-template tags.
    tags = autoscaler_template_tags({}, [], extended_resources(it, it.efa_interfaces), "gputraining/autoscale")
    assert tags[f"{NODE_TEMPLATE}/resources/nvidia.com/gpu"] == str(want["gpus"])
    assert tags[f"{NODE_TEMPLATE}/resources/vpc.amazonaws.com/efa"] == str(want["efa"])
    # A worker's requests, as the job builders make them for a group of the type.
    target = J.JobTarget.from_instance(
        "g", it, efa_interfaces=it.efa_interfaces, max_nodes=2, availability_zone="us-west-2b"
    )
    ctx = J.JobsContext(
        namespace="training",
        targets={"g": target},
        claims={},
        etcd_endpoint=None,
        system_node_selector={NODE_GROUP_LABEL: "system"},
        cluster_name="c",
    )
    spec = J.JOB_KINDS["nccl-test"].model_validate({"name": "nccl", "kind": "nccl-test", "nodeGroup": "g", "nodes": 2})
    (mpijob,) = [m for m in J.build_manifests(spec, ctx) if m["kind"] == "MPIJob"]
    (worker,) = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == want["gpus"]
    assert worker["resources"]["limits"]["vpc.amazonaws.com/efa"] == want["efa"]


# ---------------------------------------------------------------------------------------------
# Refused: p6e-gb200, and Capacity Blocks of a type EC2 sells none of
# ---------------------------------------------------------------------------------------------


def _problems(values: dict[str, Any]) -> str:
    from stacks import config as stack_config

    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(values, "gpu-training", "test")
    return str(err.value)


def test_p6e_gb200_is_refused_and_says_why_and_what_it_would_take():
    text = _problems(
        minimal_values(gpuNodeGroups=[{"name": "gb200", "instanceType": "p6e-gb200.36xlarge", "maxSize": 9}])
    )
    assert f"{NS}:gpuNodeGroups[gb200].instanceType" in text
    for words in (
        "UltraServer",
        "only through Capacity Blocks for ML",
        "Grace (arm64)",
        "AL2023_ARM_64_NVIDIA",
        "IMEX",
        "DRA driver",
        "It would take",
    ):
        assert words in text, words


def test_capacity_blocks_of_p3dn_are_refused_offline():
    text = _problems(
        minimal_values(
            gpuNodeGroups=[
                {
                    "name": "v100",
                    "instanceType": "p3dn.24xlarge",
                    "maxSize": 2,
                    "capacityType": "capacity-block",
                    "capacityReservationId": "cr-0123456789abcdef0",
                }
            ]
        )
    )
    assert f"{NS}:gpuNodeGroups[v100].capacityType" in text
    assert "'capacity-block' is not offered for p3dn.24xlarge" in text and "p6-b300.48xlarge" in text


def test_a_sagemaker_job_on_a_p6_b300_group_is_not_refused():
    from stacks.config.job_entries import sagemaker_jobs

    values = minimal_values(
        gpuAvailabilityZone="us-west-2b",
        gpuNodeGroups=[{"name": "b300", "instanceType": "p6-b300.48xlarge", "maxSize": 2}],
        jobs=[
            {
                "name": "llm",
                "kind": "pytorch-elastic",
                "runtime": "sagemaker",
                "nodeGroup": "b300",
                "nodes": 2,
                "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:2026.11",
                "command": ["torchrun"],
                "args": ["/opt/ml/code/train.py"],
                "rendezvous": "c10d",
                "sagemaker": {"outputPath": "s3://my-training-output/llm/"},
            }
        ],
    )
    from stacks import config as stack_config

    cfg = stack_config.load(values, "gpu-training", "test")
    (job,) = sagemaker_jobs(cfg.jobs, cfg.gpu_node_groups, cfg.region, cfg.cluster_name, {})
    assert job.instance_type == "ml.p6-b300.48xlarge" and job.gpus_per_instance == 8
    assert job.efa and job.environment["FI_PROVIDER"] == "efa" and job.environment["FI_EFA_USE_DEVICE_RDMA"] == "1"
