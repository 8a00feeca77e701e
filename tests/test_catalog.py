"""The built-in instance catalog checked against AWS's recorded DescribeInstanceTypes data (moto),
card by card, and the EFA layout walked over every EFA type of that data."""

from __future__ import annotations

from typing import Any

import boto3
import botocore.exceptions
import botocore.session
import pytest

from facts import catalog, instance_types, prices
from infra import aws_catalog
from tests.helpers import RECORDED_EFA_GPU_TYPES, RECORDED_EFA_TYPES, recorded

REGION = "us-west-2"
# No longer returned by DescribeInstanceTypes (and not in moto's recording); their rows come from
# the EC2 documentation.
NOT_DESCRIBED = {"p3.2xlarge", "p3.8xlarge", "p3.16xlarge"}
DESCRIBED = [n for n in catalog.BUILTIN if n not in NOT_DESCRIBED]

FIELDS = (
    "vcpus",
    "memory_mib",
    "gpus",
    "gpu_model",
    "gpu_memory_mib",
    "efa_interfaces",
    "network_cards",
    "network_gbps",
    "cards",
    "nvme_disks",
    "nvme_disk_gb",
    "capacity_blocks",
    "architecture",
)

# The EFA interface counts the node groups must attach (the table).
REQUIRED_EFA = {
    "p3.2xlarge": 0,
    "p3.8xlarge": 0,
    "p3.16xlarge": 0,
    "p3dn.24xlarge": 1,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.4xlarge": 1,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
    "p6-b200.48xlarge": 8,
    "p6-b300.48xlarge": 16,
}


@pytest.fixture(scope="module")
def aws(aws_module) -> boto3.session.Session:
    """A boto3 session in us-west-2 on the module's moto (the tests only read its recorded data)."""
    return boto3.session.Session(region_name=REGION)


@pytest.fixture(scope="module")
def described(aws) -> dict[str, instance_types.InstanceType]:
    return aws_catalog.describe(list(catalog.BUILTIN), session=aws)


def test_describe_returns_every_builtin_type_except_the_old_p3_sizes(described):
    assert set(described) == set(catalog.BUILTIN) - NOT_DESCRIBED
    assert all(isinstance(v, instance_types.InstanceType) and v.name == k for k, v in described.items())


@pytest.mark.parametrize("name", DESCRIBED)
def test_builtin_row_matches_aws(described, name):
    aws_row = described[name]
    builtin = catalog.BUILTIN[name]
    assert {f: getattr(aws_row, f) for f in FIELDS} == {f: getattr(builtin, f) for f in FIELDS}
    # The one fact AWS does not report comes from the table, so the rows are equal as a whole.
    assert aws_row == builtin


def test_every_gpu_type_but_the_old_p3_sizes_is_checked_against_aws():
    assert set(catalog.GPU_TYPES) - set(DESCRIBED) == NOT_DESCRIBED
    assert set(catalog.SYSTEM_TYPES) <= set(DESCRIBED)


def test_required_efa_interface_counts():
    assert {t: catalog.BUILTIN[t].efa_interfaces for t in REQUIRED_EFA} == REQUIRED_EFA
    assert set(REQUIRED_EFA) == set(catalog.GPU_TYPES)


def test_required_efa_interface_counts_are_what_aws_reports(described):
    for name, count in REQUIRED_EFA.items():
        if name in described:
            assert described[name].efa_interfaces == count, name
            assert described[name].efa_supported is (count > 0)


def test_efa_interfaces_fit_on_the_network_cards():
    for t in catalog.BUILTIN.values():
        assert t.efa_interfaces <= t.network_cards, t.name


def test_old_p3_sizes_are_in_the_table_without_efa():
    for name in sorted(NOT_DESCRIBED):
        t = catalog.get(name)
        assert t is not None and name in catalog.GPU_TYPES
        assert t.gpu_model == "V100" and t.gpu_memory_mib == 16 * 1024
        assert t.efa_interfaces == 0 and not t.efa_supported
    assert [catalog.BUILTIN[n].gpus for n in ("p3.2xlarge", "p3.8xlarge", "p3.16xlarge")] == [1, 4, 8]


def test_describe_returns_nothing_for_the_old_p3_sizes(aws):
    assert aws_catalog.describe(sorted(NOT_DESCRIBED), session=aws) == {}


def test_one_unknown_name_does_not_hide_the_others(aws):
    # DescribeInstanceTypes fails the whole call on an unknown name; describe() asks one by one.
    ec2 = aws.client("ec2")
    with pytest.raises(botocore.exceptions.ClientError, match="InvalidInstanceType"):
        ec2.describe_instance_types(InstanceTypes=["p3.2xlarge", "p4d.24xlarge"])
    found = aws_catalog.describe(["p3.2xlarge", "p4d.24xlarge", "p4d.24xlarge"], session=aws)
    assert list(found) == ["p4d.24xlarge"]
    assert found["p4d.24xlarge"] == catalog.BUILTIN["p4d.24xlarge"]


def test_describe_with_a_region_and_no_session(aws):
    found = aws_catalog.describe(["p5en.48xlarge"], region=REGION)
    assert found["p5en.48xlarge"].efa_interfaces == 16


def test_rdma_flag_comes_from_the_table():
    assert [t for t in catalog.GPU_TYPES if catalog.BUILTIN[t].efa_rdma] == [
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.4xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "p6-b300.48xlarge",
    ]


def test_from_describe_instance_types_without_gpu_or_efa():
    item = {
        "InstanceType": "x9.large",
        "VCpuInfo": {"DefaultVCpus": 2},
        "MemoryInfo": {"SizeInMiB": 4096},
        "NetworkInfo": {"EfaSupported": False, "EfaInfo": {"MaximumEfaInterfaces": 9}},
    }
    t = catalog.from_describe_instance_types(item)
    assert (t.name, t.vcpus, t.memory_mib) == ("x9.large", 2, 4096)
    assert (t.gpus, t.gpu_model, t.gpu_memory_mib) == (0, None, 0)
    assert (t.efa_interfaces, t.network_cards, t.efa_rdma) == (0, 1, False)
    assert not t.is_gpu and not t.efa_supported
    assert (t.nvme_gb, t.capacity_blocks, t.efa_gbps) == (0, False, 0.0)
    assert instance_types.efa_layout(t) == ()


def test_from_describe_instance_types_sums_gpus_and_keeps_the_table_rdma_flag():
    item = {
        "InstanceType": "p4d.24xlarge",
        "VCpuInfo": {"DefaultVCpus": 96},
        "MemoryInfo": {"SizeInMiB": 1179648},
        "GpuInfo": {"Gpus": [{"Name": "A100", "Count": 8, "MemoryInfo": {"SizeInMiB": 40960}}]},
        "NetworkInfo": {
            "EfaSupported": True,
            "EfaInfo": {"MaximumEfaInterfaces": 4},
            "MaximumNetworkCards": 4,
            "NetworkCards": [
                {
                    "NetworkCardIndex": i,
                    "PeakBandwidthInGbps": 100.0,
                    "InterfaceTypes": ["interface", "efa", "efa-only"],
                }
                for i in range(4)
            ],
        },
        "InstanceStorageInfo": {"Disks": [{"Count": 8, "SizeInGB": 1000, "Type": "ssd"}]},
        "SupportedUsageClasses": ["capacity-block", "on-demand", "spot"],
        "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    }
    t = catalog.from_describe_instance_types(item)
    assert t == catalog.BUILTIN["p4d.24xlarge"]
    assert t.efa_rdma is True


def test_type_sets_match_what_the_config_checks_expect():
    assert all(catalog.BUILTIN[t].is_gpu for t in catalog.GPU_TYPES)
    assert not any(catalog.BUILTIN[t].is_gpu for t in catalog.SYSTEM_TYPES)
    assert set(catalog.GPU_TYPES) | set(catalog.SYSTEM_TYPES) == set(catalog.BUILTIN)
    assert catalog.get("p9.96xlarge") is None


def test_summary_text():
    assert catalog.BUILTIN["p5.48xlarge"].summary() == "8 x H100 80 GiB, 32 EFA, 192 vCPU, 2048 GiB"
    assert catalog.BUILTIN["c5.2xlarge"].summary() == "no GPU, no EFA, 8 vCPU, 16 GiB"
    assert catalog.BUILTIN["p6-b300.48xlarge"].summary() == "8 x B300 268 GiB, 16 EFA, 192 vCPU, 4096 GiB"
    assert catalog.BUILTIN["p5.4xlarge"].summary() == "1 x H100 80 GiB, 1 EFA, 16 vCPU, 256 GiB"


# ---------------------------------------------------------------------------------------------
# The newest types, card by card, against the recorded data
# ---------------------------------------------------------------------------------------------


def test_the_newest_types_are_the_recorded_ones():
    """The issue's figures: p6-b300 8 x B300, 17 cards, card 0 `interface` only, 6400 Gbit/s over
    its EFA cards; p6-b200 8 x B200, 8 EFA; p5.4xlarge 1 x H100, 1 EFA."""
    b300, b200, p5 = (catalog.BUILTIN[n] for n in ("p6-b300.48xlarge", "p6-b200.48xlarge", "p5.4xlarge"))
    assert (b300.gpus, b300.gpu_model, b300.efa_interfaces, b300.network_cards) == (8, "B300", 16, 17)
    assert b300.cards[0].interface_types == ("interface",) and not b300.cards[0].takes_efa
    assert all(c.interface_types == ("interface", "efa", "efa-only") for c in b300.cards[1:])
    assert b300.efa_gbps == 6400 and b300.network_gbps == 6750  # card 0 (ENA, 350) is no EFA bandwidth
    assert (b200.gpus, b200.gpu_model, b200.efa_interfaces, b200.network_cards) == (8, "B200", 8, 8)
    assert (p5.gpus, p5.gpu_model, p5.gpu_memory_mib, p5.efa_interfaces, p5.network_cards) == (1, "H100", 81920, 1, 1)
    assert (p5.nvme_disks, p5.nvme_disk_gb, b300.nvme_gb) == (1, 3800, 30400)
    for t in (b300, b200, p5):
        item = recorded()[t.name]
        assert t.memory_mib == item["MemoryInfo"]["SizeInMiB"]
        assert t.nvme_gb == item["InstanceStorageInfo"]["TotalSizeInGB"]
        assert t.capacity_blocks and "capacity-block" in item["SupportedUsageClasses"]


def test_p6_b300_layout_keeps_efa_off_card_0():
    layout = instance_types.efa_layout(catalog.BUILTIN["p6-b300.48xlarge"])
    assert [(s.card, s.device, s.interface_type) for s in layout] == [(0, 0, "interface")] + [
        (c, 1, "efa-only") for c in range(1, 17)
    ]


def test_p5_4xlarge_layout_is_one_efa_with_ena_on_card_0():
    assert [(s.card, s.device, s.interface_type) for s in instance_types.efa_layout(catalog.BUILTIN["p5.4xlarge"])] == [
        (0, 0, "efa")
    ]


def test_older_types_keep_their_layout():
    """p3dn to p5en: `efa` on card 0 device 0, `efa-only` at device 1 on every other card (no
    change to the launch templates of existing stacks)."""
    for name in (
        "p3dn.24xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
    ):
        it = catalog.BUILTIN[name]
        expected = [(0, 0, "efa")] + [(c, 1, "efa-only") for c in range(1, it.efa_interfaces)]
        assert [(s.card, s.device, s.interface_type) for s in instance_types.efa_layout(it)] == expected, name


def _check_layout_against_the_record(item: dict[str, Any]) -> None:
    """The layout of a recorded type puts no interface type on a card that does not list it, one
    interface per (card, device), the primary (card 0, device 0) with ENA, and exactly the type's
    maximum of EFA interfaces, on as many of the cards that take EFA as that maximum allows."""
    it = catalog.from_describe_instance_types(item)
    cards = {c["NetworkCardIndex"]: c for c in item["NetworkInfo"]["NetworkCards"]}
    layout = instance_types.efa_layout(it)
    assert layout, it.name
    for slot in layout:
        assert slot.interface_type in cards[slot.card]["InterfaceTypes"], (it.name, slot)
    assert len({(s.card, s.device) for s in layout}) == len(layout)
    assert (layout[0].card, layout[0].device) == (0, 0) and layout[0].interface_type in ("interface", "efa"), it.name
    efa_slots = [s for s in layout if s.is_efa]
    assert len(efa_slots) == item["NetworkInfo"]["EfaInfo"]["MaximumEfaInterfaces"], it.name
    efa_cards = [i for i, c in cards.items() if {"efa", "efa-only"} & set(c["InterfaceTypes"])]
    assert len({s.card for s in efa_slots}) == min(len(efa_cards), len(efa_slots)), it.name
    per_card = [sum(1 for s in layout if s.card == i) for i in cards]
    assert all(n <= cards[i]["MaximumNetworkInterfaces"] for i, n in zip(cards, per_card, strict=True)), it.name


@pytest.mark.parametrize("name", RECORDED_EFA_GPU_TYPES)
def test_layout_of_every_recorded_efa_gpu_type(name):
    _check_layout_against_the_record(recorded()[name])


def test_layout_of_every_recorded_efa_type():
    """The rule holds beyond GPUs: i7ie has two EFA-capable cards and a maximum of one."""
    assert len(RECORDED_EFA_TYPES) > 200
    for name in RECORDED_EFA_TYPES:
        _check_layout_against_the_record(recorded()[name])
    i7ie = catalog.from_describe_instance_types(recorded()["i7ie.48xlarge"])
    assert i7ie.network_cards == 2 and len(instance_types.efa_layout(i7ie)) == 1


def test_recorded_efa_gpu_types_include_the_newest():
    assert {"p5.4xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge"} <= set(RECORDED_EFA_GPU_TYPES)
    # Every EFA GPU type of the catalog is an EFA GPU type of the recording (and described truthfully).
    assert {n for n in catalog.GPU_TYPES if catalog.BUILTIN[n].efa_supported} <= set(RECORDED_EFA_GPU_TYPES)
    left_out = sorted(set(RECORDED_EFA_GPU_TYPES) - set(catalog.GPU_TYPES))
    assert left_out and all(n.startswith("g") for n in left_out), left_out


def test_a_layout_the_cards_cannot_hold_is_an_error():
    it = instance_types.InstanceType(
        "x.large", 2, 4096, efa_interfaces=2, cards=(instance_types.NetworkCard(0, ("interface", "efa"), 10.0),)
    )
    with pytest.raises(ValueError, match="take 1 EFA interfaces, not the 2"):
        instance_types.efa_layout(it)


def test_efa_only_on_card_0_when_the_primary_is_plain_ena():
    card0 = instance_types.NetworkCard(0, ("interface", "efa-only"), 10.0)
    it = instance_types.InstanceType(
        "x.large", 2, 4096, efa_interfaces=2, cards=(card0, instance_types.NetworkCard(1, ("interface", "efa"), 10.0))
    )
    assert [(s.card, s.device, s.interface_type) for s in instance_types.efa_layout(it)] == [
        (0, 0, "interface"),
        (0, 1, "efa-only"),
        (1, 1, "efa"),
    ]


# ---------------------------------------------------------------------------------------------
# Prices, SageMaker, refusals, Capacity Blocks
# ---------------------------------------------------------------------------------------------


def test_every_new_type_has_a_price():
    for name in ("p5.4xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge"):
        assert prices.INSTANCE_HOURLY[name] is not None and prices.INSTANCE_HOURLY[name] > 0
    # Per GPU, the newer the dearer: a sanity check on the pinned figures' order.
    per_gpu = {
        n: prices.INSTANCE_HOURLY[n] / catalog.BUILTIN[n].gpus
        for n in ("p5.4xlarge", "p6-b200.48xlarge", "p6-b300.48xlarge")
    }  # type: ignore[operator]
    assert per_gpu["p5.4xlarge"] < per_gpu["p6-b200.48xlarge"] < per_gpu["p6-b300.48xlarge"]


def _training_instance_types() -> list[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return list(model.shape_for("TrainingInstanceType").enum)


def test_sagemaker_types_are_what_create_training_job_accepts():
    accepted = set(_training_instance_types())
    assert set(catalog.SAGEMAKER_TYPES) <= accepted
    # Every catalog GPU type SageMaker trains on has its ml. equivalent here.
    wanted = {"ml." + n for n in catalog.GPU_TYPES} & accepted
    assert wanted == set(catalog.SAGEMAKER_TYPES)
    for name in ("ml.p5.4xlarge", "ml.p5e.48xlarge", "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge"):
        t = catalog.get_sagemaker(name)
        assert t is not None and t.efa_interfaces == catalog.BUILTIN[name.removeprefix("ml.")].efa_interfaces
        assert catalog.sagemaker_type_for(name.removeprefix("ml.")) == name


def test_p6e_gb200_is_refused_with_the_reasons():
    assert "p6e-gb200.36xlarge" not in recorded()  # not in the recorded data either
    text = catalog.refusal("p6e-gb200.36xlarge")
    assert text is not None
    for words in (
        "UltraServer",
        "Capacity Blocks",
        "arm64",
        "AL2023_ARM_64_NVIDIA",
        "DRA",
        "IMEX",
        "ComputeDomain",
        "p6-b200.48xlarge",
    ):
        assert words in text, words
    assert catalog.refusal("p6-b300.48xlarge") is None and catalog.refusal("p4d.24xlarge") is None
    assert catalog.get("p6e-gb200.36xlarge") is None


def test_capacity_block_types_are_the_recorded_usage_class():
    for name in catalog.GPU_TYPES:
        item = recorded().get(name)
        assert catalog.BUILTIN[name].capacity_blocks == bool(
            item and "capacity-block" in item["SupportedUsageClasses"]
        ), name
    assert "p3dn.24xlarge" not in catalog.CAPACITY_BLOCK_TYPES
    assert {"p4d.24xlarge", "p5.48xlarge", "p6-b300.48xlarge"} <= set(catalog.CAPACITY_BLOCK_TYPES)


def test_every_gpu_type_is_x86_64():
    """The GPU groups use the x86_64 AL2023 NVIDIA AMI (facts/versions.py)."""
    for name in catalog.GPU_TYPES:
        assert catalog.BUILTIN[name].architecture == "x86_64"
        item = recorded().get(name)
        assert item is None or item["ProcessorInfo"]["SupportedArchitectures"] == ["x86_64"]
