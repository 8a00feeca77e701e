"""The built-in instance catalog checked against AWS's recorded DescribeInstanceTypes data (moto)."""

from __future__ import annotations

import boto3
import botocore.exceptions
import moto
import pytest

from facts import catalog
from infra import aws_catalog

REGION = "us-west-2"
# No longer returned by DescribeInstanceTypes (and not in moto's recording); their rows come from
# the EC2 documentation.
NOT_DESCRIBED = {"p3.2xlarge", "p3.8xlarge", "p3.16xlarge"}
DESCRIBED = [n for n in catalog.BUILTIN if n not in NOT_DESCRIBED]

FIELDS = ("vcpus", "memory_mib", "gpus", "gpu_model", "gpu_memory_mib", "efa_interfaces", "network_cards", "network_gbps")

# The EFA interface counts the node groups must attach (the table).
REQUIRED_EFA = {
    "p3.2xlarge": 0,
    "p3.8xlarge": 0,
    "p3.16xlarge": 0,
    "p3dn.24xlarge": 1,
    "p4d.24xlarge": 4,
    "p4de.24xlarge": 4,
    "p5.48xlarge": 32,
    "p5e.48xlarge": 32,
    "p5en.48xlarge": 16,
}


def _fake_aws_env(mp: pytest.MonkeyPatch, tmp) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_EC2"):
        mp.delenv(name, raising=False)
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    mp.setenv("AWS_SESSION_TOKEN", "testing")
    mp.setenv("AWS_SECURITY_TOKEN", "testing")
    mp.setenv("AWS_DEFAULT_REGION", REGION)
    mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
    # Never read a real ~/.aws.
    mp.setenv("AWS_CONFIG_FILE", str(tmp / "aws-config"))
    mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp / "aws-credentials"))


@pytest.fixture(scope="module")
def aws(tmp_path_factory):
    """A mocked AWS (moto) with fake credentials: a boto3 session in us-west-2."""
    with pytest.MonkeyPatch.context() as mp:
        _fake_aws_env(mp, tmp_path_factory.mktemp("aws"))
        with moto.mock_aws():
            yield boto3.session.Session(region_name=REGION)


@pytest.fixture(scope="module")
def described(aws) -> dict[str, catalog.InstanceType]:
    return aws_catalog.describe(list(catalog.BUILTIN), session=aws)


def test_describe_returns_every_builtin_type_except_the_old_p3_sizes(described):
    assert set(described) == set(catalog.BUILTIN) - NOT_DESCRIBED
    assert all(isinstance(v, catalog.InstanceType) and v.name == k for k, v in described.items())


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
        "p5.48xlarge",
        "p5e.48xlarge",
        "p5en.48xlarge",
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
            "NetworkCards": [{"PeakBandwidthInGbps": 100.0}] * 4,
        },
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
