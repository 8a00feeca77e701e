"""Issue 20, items 4-8 and 10: the limits of the services the stack talks to (the one table,
facts/aws_names.py, checked against the services' own models where they state them), the values
that must not be coerced (a boolean is no number), the values that must be taken (Go durations), one
resource name per ASG tag, the offline engine refusing a duplicate URN as Pulumi's engine does, and
the examples' placeholders (a warning in the plan, a FAIL in preflight)."""

from __future__ import annotations

import gzip
import io
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import botocore.session
import moto
import pulumi
import pulumi_aws as aws
import pytest

import jobs as J
from facts import aws_names, catalog, durations
from infra import offline, preflight
from infra import plan as plan_mod
from stacks import config as C
from stacks.config import models, reference, stack_config
from stacks.config.placeholders import placeholders
from tests.helpers import JOBS_KEY, NS, ROOT, minimal_values, run_stack
from tests.helpers import job_problems as problems_of
from tests.helpers import sagemaker_elastic as elastic
from tests.helpers import sagemaker_mpi as mpi
from tests.helpers import sagemaker_settings as sm
from tests.helpers import the_job_problem as the_problem

TESTS = Path(__file__).parent


def _problems(values: dict[str, Any]) -> list[C.Problem]:
    with pytest.raises(C.ConfigError) as info:
        C.load(values, "gpu-training", "t")
    return info.value.problems


def _only(values: dict[str, Any], key: str) -> str:
    problems = _problems(values)
    assert [p.key for p in problems] == [key], problems
    return problems[0].message


def _loads(values: dict[str, Any]) -> C.StackConfig:
    return C.load(values, "gpu-training", "t")


# ---------------------------------------------------------------------------------------------
# The table against the services' models
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def botocore_models():
    session = botocore.session.get_session()
    return {name: session.get_service_model(name) for name in ("sagemaker", "eks")}


def test_the_sagemaker_limits_are_the_service_models(botocore_models):
    sagemaker = botocore_models["sagemaker"]
    assert sagemaker.shape_for("InputDataConfig").metadata["max"] == aws_names.SAGEMAKER_INPUT_CHANNELS_MAX
    uris = [
        sagemaker.shape_for("OutputDataConfig").members["S3OutputPath"],
        sagemaker.shape_for("S3DataSource").members["S3Uri"],
        sagemaker.shape_for("CheckpointConfig").members["S3Uri"],
        sagemaker.shape_for("TensorBoardOutputConfig").members["S3OutputPath"],
    ]
    assert {u.metadata["max"] for u in uris} == {aws_names.SAGEMAKER_S3_URI_MAX}


def test_the_eks_limits_are_the_service_models(botocore_models):
    request = botocore_models["eks"].shape_for("CreateNodegroupRequest")
    assert request.members["tags"].metadata["max"] == aws_names.TAGS_PER_RESOURCE
    assert request.members["tags"].key.metadata["max"] == aws_names.TAG_KEY_MAX
    assert request.members["tags"].value.metadata["max"] == aws_names.TAG_VALUE_MAX
    # What the service model leaves to the documentation: 50 taints, 40 public CIDRs.
    assert "max" not in request.members["taints"].metadata
    assert (aws_names.EKS_NODEGROUP_TAINTS_MAX, aws_names.EKS_PUBLIC_ACCESS_CIDRS_MAX) == (50, 40)


def _recorded_instance_types() -> dict[str, Any]:
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    return json.loads(gzip.decompress(path.read_bytes()))


def test_the_nvme_storage_is_ec2s_recorded_instance_storage():
    recorded = _recorded_instance_types()
    for ml_name in catalog.SAGEMAKER_TYPES:
        ec2 = ml_name.removeprefix(catalog.ML_PREFIX)
        info = (recorded.get(ec2) or {}).get("InstanceStorageInfo")
        if ec2 in recorded:
            assert aws_names.INSTANCE_NVME_STORAGE_GB.get(ec2) == (info["TotalSizeInGB"] if info else None), ec2
        else:  # the p3 sizes, no longer described: EBS only (EC2 accelerated computing instances page)
            assert ec2 not in aws_names.INSTANCE_NVME_STORAGE_GB, ec2
    for ec2, size in aws_names.INSTANCE_NVME_STORAGE_GB.items():
        assert recorded[ec2]["InstanceStorageInfo"]["TotalSizeInGB"] == size
        assert recorded[ec2]["InstanceStorageInfo"]["NvmeSupport"] == "required"


# ---------------------------------------------------------------------------------------------
# Item 4: one spelling; a volume larger than the type's NVMe
# ---------------------------------------------------------------------------------------------


def test_volume_size_is_spelled_as_documented():
    assert J.SageMakerOptions.model_fields["volume_size_gib"].alias == "volumeSizeGiB"
    assert problems_of(mpi(sagemaker=sm(volumeSizeGiB=500))) == []
    problem = the_problem(mpi(sagemaker=sm(volumeSizeGib=500)))
    assert problem.key == f"{JOBS_KEY}[maskrcnn].sagemaker.volumeSizeGib" and "volumeSizeGiB" in problem.message


@pytest.mark.parametrize("ml_type", ["ml.p4d.24xlarge", "ml.p3dn.24xlarge", "ml.p4de.24xlarge"])
def test_a_volume_above_the_types_nvme_is_refused(ml_type):
    nvme = aws_names.INSTANCE_NVME_STORAGE_GB[ml_type.removeprefix("ml.")]
    # ml.p5's 30400 GB are more than SageMaker's 16384 for any volume: the field's own bound refuses first.
    assert problems_of(mpi(nodeGroup="p3", nodes=1, sagemaker=sm(instanceType=ml_type, volumeSizeGiB=nvme))) == []
    problem = the_problem(mpi(nodeGroup="p3", nodes=1, sagemaker=sm(instanceType=ml_type, volumeSizeGiB=nvme + 1)))
    assert problem.key == f"{JOBS_KEY}[maskrcnn].sagemaker.volumeSizeGiB"
    for part in (str(nvme + 1), f"{nvme} GB", ml_type, f"at most {nvme}"):
        assert part in problem.message, problem.message


def test_the_nvme_limit_follows_the_ml_type_not_the_node_group():
    # The p3 group's ml.p3.16xlarge has no instance storage: EBS of any size up to SageMaker's 16384.
    assert problems_of(mpi(nodeGroup="p3", nodes=1, sagemaker=sm(volumeSizeGiB=16384))) == []
    problem = the_problem(
        mpi(nodeGroup="p3", nodes=1, sagemaker=sm(volumeSizeGiB=9000, instanceType="ml.p4d.24xlarge"))
    )
    assert problem.key == f"{JOBS_KEY}[maskrcnn].sagemaker.volumeSizeGiB" and "ml.p4d.24xlarge" in problem.message
    # On EKS the SageMaker settings are not read.
    assert problems_of(mpi(runtime="eks", volumes=[], sagemaker=sm(volumeSizeGiB=9000))) == []


# ---------------------------------------------------------------------------------------------
# Item 5: limits the plan did not know
# ---------------------------------------------------------------------------------------------


def _inputs(n: int) -> list[dict[str, str]]:
    return [{"channel": f"c{i}", "s3Uri": f"s3://my-training-data/part-{i}/"} for i in range(n)]


def test_sagemaker_input_channels_count_volumes_and_inputs():
    # mpi() mounts two volumes: 18 S3 inputs make 20 channels, 19 make 21.
    assert problems_of(mpi(sagemaker=sm(inputs=_inputs(18)))) == []
    problem = the_problem(mpi(sagemaker=sm(inputs=_inputs(19))))
    assert problem.key == f"{JOBS_KEY}[maskrcnn].sagemaker.inputs"
    for part in ("19 S3 inputs", "2 volumes", "21 input channels", "at most 20"):
        assert part in problem.message
    problem = the_problem(elastic(volumes=[], sagemaker=sm(inputs=_inputs(21))))
    assert problem.key == f"{JOBS_KEY}[resnet].sagemaker.inputs"


@pytest.mark.parametrize("field", ["outputPath", "checkpointS3Uri", "tensorboardS3Uri"])
def test_sagemaker_s3_uris_are_at_most_1024_characters(field):
    def uri(length: int) -> str:
        head = "s3://my-training-output/"
        return head + "k" * (length - len(head))

    extra = {"spot": True} if field == "checkpointS3Uri" else {}
    fields = {"checkpointS3Uri": uri(1024)} if extra else {}
    assert problems_of(mpi(sagemaker=sm(**{**fields, field: uri(1024)}, **extra))) == []
    problem = the_problem(mpi(sagemaker=sm(**{field: uri(1025)}, **({"spot": True} if extra else {}))))
    assert problem.key == f"{JOBS_KEY}[maskrcnn].sagemaker.{field}"
    assert "1025 characters" in problem.message and "at most 1024" in problem.message


def test_an_input_uri_over_1024_characters_is_refused():
    long = "s3://my-training-data/" + "p" * 1010
    problem = the_problem(mpi(sagemaker=sm(inputs=[{"channel": "train", "s3Uri": long}])))
    assert problem.key == f"{JOBS_KEY}[maskrcnn].sagemaker.inputs[0].s3Uri" and "1032 characters" in problem.message


def test_at_most_40_public_endpoint_cidrs():
    cidrs = [f"8.8.{i}.0/24" for i in range(41)]
    assert (
        _loads(minimal_values(cluster={"endpointPublicAccessCidrs": cidrs[:40]})).cluster.endpoint_public_access_cidrs
        == cidrs[:40]
    )
    message = _only(
        minimal_values(cluster={"endpointPublicAccessCidrs": cidrs}), f"{NS}:cluster.endpointPublicAccessCidrs"
    )
    assert "41 blocks" in message and "at most 40" in message and "cannot be raised" in message


@pytest.mark.parametrize(
    "cidr, words",
    [
        ("10.1.0.0/16", ["10.0.0.0/8", "private"]),
        ("172.16.5.0/24", ["172.16.0.0/12", "private"]),
        ("192.168.1.7/32", ["192.168.0.0/16"]),
        ("100.64.0.0/10", ["carrier-grade NAT"]),
        ("127.0.0.1/32", ["loopback"]),
        ("169.254.169.254/32", ["link-local"]),
        ("224.0.0.0/4", ["multicast"]),
        ("255.255.255.255/32", ["reserved"]),
        ("0.0.0.0/8", ["this network"]),
        ("::/0", ["IPv6"]),
        ("2001:db8::/32", ["IPv6"]),
        ("1.2.3.4/24", ["host bits"]),
        ("my-office", ["not a valid CIDR"]),
    ],
)
def test_a_public_endpoint_cidr_must_be_a_public_ipv4_block(cidr, words):
    message = _only(
        minimal_values(cluster={"endpointPublicAccessCidrs": ["0.0.0.0/0", cidr]}),
        f"{NS}:cluster.endpointPublicAccessCidrs[1]",
    )
    assert repr(cidr) in message
    for w in words:
        assert w in message, message


@pytest.mark.parametrize("cidr", ["0.0.0.0/0", "8.8.8.8/32", "10.0.0.0/7", "52.94.76.0/22", "203.0.113.0/24"])
def test_public_blocks_and_blocks_around_private_ones_are_taken(cidr):
    # 10.0.0.0/7 holds private and public addresses; the documentation range is a placeholder (below).
    assert aws_names.public_access_cidr_problem(cidr) is None
    assert _loads(
        minimal_values(cluster={"endpointPublicAccessCidrs": [cidr]})
    ).cluster.endpoint_public_access_cidrs == [cidr]


def _group(**fields: Any) -> dict[str, Any]:
    return {"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 2, **fields}


def test_at_most_48_extra_taints_on_a_gpu_group_with_burn_in():
    taints = [{"key": f"team-{i}", "value": "x"} for i in range(50)]

    def eks_limit(n: int) -> list[str]:
        # (other limits on taints, such as the queues', may apply as well: only EKS's is looked at)
        try:
            _loads(minimal_values(gpuNodeGroups=[_group(taints=taints[:n])]))
        except C.ConfigError as err:
            return [
                p.message for p in err.problems if p.key == f"{NS}:gpuNodeGroups[p4d].taints" and "EKS" in p.message
            ]
        return []

    assert eks_limit(48) == []
    (message,) = eks_limit(49)
    assert "49 taints" in message and "allows 50" in message and "GPU taint" in message and "at most 48" in message


def test_one_taint_per_key_and_effect():
    taints = [
        {"key": "team", "value": "a"},
        {"key": "team", "value": "b", "effect": "NoExecute"},
        {"key": "team", "value": "c"},
    ]
    message = _only(minimal_values(gpuNodeGroups=[_group(taints=taints)]), f"{NS}:gpuNodeGroups[p4d].taints[2]")
    assert "'team'" in message and "NoSchedule" in message and "taints[0]" in message


INT32_FIELDS = [
    ("mpi", "backoffLimit"),
    ("mpi", "nodes"),
    ("mpi", "ttlSecondsAfterFinished"),
    ("pytorch-elastic", "maxRestarts"),
    ("pytorch-elastic", "minNodes"),
    ("pytorch-elastic", "maxNodes"),
    ("paddle", "pservers"),
    ("nccl-test", "nodes"),
    ("data-stage", "backoffLimit"),
]
_BASE_JOBS = {
    "mpi": {"name": "m", "kind": "mpi", "nodeGroup": "p4d", "image": "nvcr.io/x/y:1", "command": ["a"]},
    "pytorch-elastic": {
        "name": "e",
        "kind": "pytorch-elastic",
        "nodeGroup": "p4d",
        "image": "nvcr.io/x/y:1",
        "command": ["a"],
    },
    "paddle": {
        "name": "pd",
        "kind": "paddle",
        "nodeGroup": "p4d",
        "image": "nvcr.io/x/y:1",
        "command": ["a"],
        "mode": "ps",
    },
    "nccl-test": {"name": "n", "kind": "nccl-test", "nodeGroup": "p4d"},
    "data-stage": {
        "name": "d",
        "kind": "data-stage",
        "source": "s3://my-datasets/coco",
        "volume": "fsx",
        "path": "coco",
    },
}


@pytest.mark.parametrize("kind, field", INT32_FIELDS)
def test_kubernetes_int32_fields_are_bounded(kind, field):
    job = {**_BASE_JOBS[kind], field: 2**31}
    problems = [p for p in _problems(minimal_values(jobs=[job])) if p.key == f"{JOBS_KEY}[{job['name']}].{field}"]
    assert problems, field
    assert (
        "2147483648" in problems[0].message
        and "at most 2147483647" in problems[0].message
        and "32-bit" in problems[0].message
    )


def test_every_integer_field_of_a_job_that_reaches_kubernetes_is_bounded():
    """Every int field of the job models is an Int32 or Int64, but those that reach no Kubernetes
    integer: a new int field has to choose."""
    # placement_layer reaches Kubernetes inside a label name (topology.k8s.aws/network-node-layer-<n>)
    not_kubernetes = {"run", "max_wait_seconds", "volume_size_gib", "placement_layer"}
    checked = 0
    for model in [*J.JOB_KINDS.values(), J.SageMakerOptions]:
        hints = typing.get_type_hints(model, include_extras=True)
        for name in model.model_fields:
            args = (
                [a for a in typing.get_args(hints[name]) if a is not type(None)]
                if typing.get_origin(hints[name]) in (typing.Union, types.UnionType)
                else [hints[name]]
            )
            plain_int = args == [int]
            bounded = (
                len(args) == 1 and typing.get_origin(args[0]) is typing.Annotated and typing.get_args(args[0])[0] is int
            )
            if name in not_kubernetes:
                continue
            assert not plain_int, f"{model.__name__}.{name} is an unbounded int"
            checked += bounded
    assert checked >= 10


def test_an_int64_deadline_is_bounded():
    job = {**_BASE_JOBS["mpi"], "activeDeadlineSeconds": 2**63}
    problem = [p for p in _problems(minimal_values(jobs=[job])) if p.key.endswith("activeDeadlineSeconds")][0]
    assert "at most 9223372036854775807" in problem.message


@pytest.mark.parametrize(
    "image, words",
    [
        ("\u201cnvcr.io/nvidia/pytorch:24.01-py3\u201d", ["U+201C", "position 1", "typographic quote"]),
        ("nvcr.io/nvidia/pytorch:24.01-py3\u2019", ["U+2019", "position 33"]),
        ("'nvcr.io/nvidia/pytorch:24.01-py3'", ["U+0027"]),
        ("nvcr.io/nvidia/pytorch:" + "t" * 129, ["129 characters", "at most 128"]),
        ("nvcr.io/nvidia/PyTorch:24.01-py3", ["lower-case"]),
        ("nvcr.io/nvidia//pytorch:24.01-py3", ["not of the form"]),
        ("nvcr.io/nvidia/pytorch:24.01:py3", ["not of the form"]),
        ("nvcr.io/" + "a" * 256 + ":1", ["256 characters", "at most 255"]),
        ("nvcr.io/nvidia/pytorch@sha256:" + "f" * 63, ["64 lower-case hex"]),
        ("nvcr.io/nvidia/pytorch@md5:" + "f" * 32, ["'md5'"]),
        ("nvcr.io/nvidia/pytorch:24.01-py3\u00a0", ["U+00A0"]),
    ],
)
def test_an_image_that_is_no_valid_reference_is_refused(image, words):
    problems = [
        p
        for p in _problems(minimal_values(jobs=[{**_BASE_JOBS["mpi"], "image": image}]))
        if p.key == f"{JOBS_KEY}[m].image"
    ]
    assert len(problems) == 1, problems
    assert "not a valid image reference" in problems[0].message or "not an image reference" in problems[0].message
    for w in words:
        assert w in problems[0].message, problems[0].message


@pytest.mark.parametrize(
    "image",
    [
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "localhost:5000/team/train:2026.11",
        "[2001:db8::1]:5000/repo:tag",
        "192.168.1.1:5000/repo:5050",
        "b.gcr.io/test.example.com/my-app:test.example.com",
        "xn--n3h.com/myimage:xn--n3h.com",
        "public.ecr.aws/hpc-cloud/nccl-tests@sha256:" + "0123456789abcdef" * 4,
        "a" * 2 + "/" + "/".join(["a"] * 126) + ":tag-puts-this-over-max",
        "nvcr.io/" + "a" * 255 + ":1",
        "registry.example.com/a__b/c--d/e.f_g:T_a.g-" + "x" * 100,
    ],
)
def test_valid_references_are_taken(image):
    assert aws_names.image_reference_problem(image) is None
    cfg = _loads(minimal_values(jobs=[{**_BASE_JOBS["mpi"], "image": image}]))
    assert cfg.jobs[0].image == image


# ---------------------------------------------------------------------------------------------
# Item 6: a boolean is no number, a number no flag, infinity no threshold
# ---------------------------------------------------------------------------------------------


def test_the_issues_examples():
    message = _only(
        minimal_values(jobs=[{**_BASE_JOBS["mpi"], "ttlSecondsAfterFinished": False}]),
        f"{JOBS_KEY}[m].ttlSecondsAfterFinished",
    )
    assert (
        message.startswith("false is not allowed")
        and "a boolean is not a number" in message
        and "leave the key out" in message
    )
    assert "true is not allowed" in _only(
        minimal_values(jobs=[{**_BASE_JOBS["mpi"], "nodes": True}]), f"{JOBS_KEY}[m].nodes"
    )
    for inf in (float("inf"), float("-inf"), float("nan")):
        message = _only(
            minimal_values(jobs=[{**_BASE_JOBS["nccl-test"], "minBusBandwidthGBps": inf}]),
            f"{JOBS_KEY}[n].minBusBandwidthGBps",
        )
        assert "finite number" in message


def _numeric_and_flag_fields(model: Any, prefix: str = "") -> typing.Iterator[tuple[str, str]]:
    """(dotted alias path, "number" | "flag") of every int/float/bool field of ``model`` and of the
    models inside it."""
    for name, f in model.model_fields.items():
        alias = prefix + (f.alias or name)
        ann = typing.get_type_hints(model)[name]
        args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
        if len(args) == 1 and args[0] is bool:
            yield alias, "flag"
        elif len(args) == 1 and args[0] in (int, float):
            yield alias, "number"
        inner = reference.model_in(f.annotation)
        if inner is not None and typing.get_origin(ann) is not list and name != "jobs":
            yield from _numeric_and_flag_fields(inner, alias + ".")


SECTION_FIELDS = [
    (section, path, kind)
    for section, name in stack_config.SECTIONS.items()
    if isinstance(model := stack_config.StackConfig.model_fields[name].annotation, type)
    and issubclass(model, models.ConfigModel)
    for path, kind in _numeric_and_flag_fields(model)
] + [("gpuNodeGroups", path, kind) for path, kind in _numeric_and_flag_fields(C.GpuNodeGroupConfig)]


def _set(values: dict[str, Any], section: str, path: str, value: Any) -> dict[str, Any]:
    if section == "gpuNodeGroups":
        group = _group()
        target = group
    else:
        target = values.setdefault(f"{NS}:{section}", {})
    parts = path.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = value
    if section == "gpuNodeGroups":
        values[f"{NS}:gpuNodeGroups"] = [group]
    return values


def test_every_numeric_and_flag_field_of_the_stack_config_is_found():
    paths = {f"{s}.{p}" for s, p, _ in SECTION_FIELDS}
    assert {
        "network.availabilityZoneCount",
        "storage.fsx.storageCapacityGiB",
        "gpuNodeGroups.maxSize",
        "monitoring.dashboard",
        "storage.efs.enabled",
    } <= paths


@pytest.mark.parametrize("section, path, kind", SECTION_FIELDS, ids=[f"{s}.{p}" for s, p, _ in SECTION_FIELDS])
def test_no_config_number_takes_a_boolean_and_no_flag_a_number(section, path, kind):
    wrong = True if kind == "number" else 1
    values = _set(minimal_values(), section, path, wrong)
    key = f"{NS}:{section}" + ("[p4d]" if section == "gpuNodeGroups" else "") + f".{path}"
    problems = [p for p in _problems(values) if p.key == key]
    assert len(problems) == 1, _problems(values)
    assert ("a boolean is not a number" if kind == "number" else "a number is not a flag") in problems[0].message


JOB_FIELDS = [(kind, path, k) for kind, model in J.JOB_KINDS.items() for path, k in _numeric_and_flag_fields(model)]


@pytest.mark.parametrize("kind, path, k", JOB_FIELDS, ids=[f"{kind}.{p}" for kind, p, _ in JOB_FIELDS])
def test_no_job_number_takes_a_boolean_and_no_flag_a_number(kind, path, k):
    base = _BASE_JOBS.get(kind) or {"name": "tb", "kind": "tensorboard", "volume": "efs", "logPath": "runs"}
    job: dict[str, Any] = {**base}
    target = job
    parts = path.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = True if k == "number" else 0
    problems = [p for p in _problems(minimal_values(jobs=[job])) if p.key == f"{JOBS_KEY}[{job['name']}].{path}"]
    assert len(problems) == 1, path
    assert ("a boolean is not a number" if k == "number" else "a number is not a flag") in problems[0].message


def test_text_from_pulumi_config_set_is_still_read():
    """`pulumi config set` writes scalars as text: "3" and "true" stay a number and a flag."""
    cfg = _loads(minimal_values(gpuNodeGroups=[_group(minSize="1", maxSize="3")], monitoring={"dashboard": "false"}))
    assert (cfg.gpu_node_groups[0].max_size, cfg.monitoring.dashboard) == (3, False)
    assert "finite number" in _only(
        minimal_values(jobs=[{**_BASE_JOBS["nccl-test"], "minBusBandwidthGBps": "inf"}]),
        f"{JOBS_KEY}[n].minBusBandwidthGBps",
    )


# ---------------------------------------------------------------------------------------------
# Item 7: Go durations
# ---------------------------------------------------------------------------------------------

_S, _MS, _US = 10**9, 10**6, 10**3
_M, _H = 60 * _S, 3600 * _S
# The documented rules (facts/durations.py) as a table: Go's own cases (Go's src/time/time_test.go,
# parseDurationTests and parseDurationErrorTests, compared line by line with Go 1.19.8's) and a few
# of ours. facts/durations.py was also run against Go 1.19.8's time.ParseDuration (Debian's
# golang-1.19, not a project dependency) on 163,141 generated strings (signs, fractions up to 120
# digits with leading zeros, every unit, the int64 bound, stray characters): the same value, or a
# refusal of the same kind (invalid, missing unit, unknown unit), for each.
GO_DURATIONS = [
    ("0", 0),
    ("5s", 5 * _S),
    ("30s", 30 * _S),
    ("1478s", 1478 * _S),
    ("-5s", -5 * _S),
    ("+5s", 5 * _S),
    ("-0", 0),
    ("+0", 0),
    ("5.0s", 5 * _S),
    ("5.6s", 5 * _S + 600 * _MS),
    ("5.s", 5 * _S),
    (".5s", 500 * _MS),
    ("1.0s", _S),
    ("1.00s", _S),
    ("1.004s", _S + 4 * _MS),
    ("1.0040s", _S + 4 * _MS),
    ("100.00100s", 100 * _S + _MS),
    ("10ns", 10),
    ("11us", 11 * _US),
    ("12\u00b5s", 12 * _US),
    ("12\u03bcs", 12 * _US),
    ("13ms", 13 * _MS),
    ("14s", 14 * _S),
    ("15m", 15 * _M),
    ("16h", 16 * _H),
    ("3h30m", 3 * _H + 30 * _M),
    ("10.5s4m", 4 * _M + 10 * _S + 500 * _MS),
    ("-2m3.4s", -(2 * _M + 3 * _S + 400 * _MS)),
    ("1h2m3s4ms5us6ns", _H + 2 * _M + 3 * _S + 4 * _MS + 5 * _US + 6),
    ("39h9m14.425s", 39 * _H + 9 * _M + 14 * _S + 425 * _MS),
    ("52763797000ns", 52763797000),
    ("0.3333333333333333333h", 20 * _M),
    ("9007199254740993ns", 2**53 + 1),
    ("9223372036854775807ns", 2**63 - 1),
    ("9223372036854775.807us", 2**63 - 1),
    ("9223372036s854ms775us807ns", 2**63 - 1),
    ("-9223372036854775808ns", -(2**63)),
    ("-9223372036854775.808us", -(2**63)),
    ("-9223372036s854ms775us808ns", -(2**63)),
    ("-2562047h47m16.854775808s", -(2**63)),  # the largest negative round trip (Go issue 48629)
    ("0.100000000000000000000h", 6 * _M),
    ("0.830103483285477580700h", 49 * _M + 48 * _S + 372539827),
]
GO_DURATION_ERRORS = [
    ("", "invalid duration"),
    ("3", "missing unit"),
    ("-", "invalid duration"),
    ("s", "invalid duration"),
    (".", "invalid duration"),
    ("-.", "invalid duration"),
    (".s", "invalid duration"),
    ("+.s", "invalid duration"),
    ("1d", "unknown unit 'd'"),
    ("\x85\x85", "invalid duration"),
    ("\xffff", "invalid duration"),
    ("hello \xffff world", "invalid duration"),
    ("\ufffd", "invalid duration"),
    ("\ufffd hello \ufffd world", "invalid duration"),
    ("9223372036854775810ns", "invalid duration"),
    ("9223372036854775808ns", "invalid duration"),
    ("-9223372036854775809ns", "invalid duration"),
    ("9223372036854776us", "invalid duration"),
    ("3000000h", "invalid duration"),
    ("9223372036854775.808us", "invalid duration"),
    ("9223372036854ms775us808ns", "invalid duration"),
    # and a few of our own: spaces, other scripts' digits, units in capitals
    ("1h 30m", "unknown unit 'h '"),
    ("\u0663s", "invalid duration"),
    ("10M", "unknown unit 'M'"),
    ("1.5.5s", "missing unit"),
]


@pytest.mark.parametrize("text, nanoseconds", GO_DURATIONS)
def test_go_durations_parse_as_go_parses_them(text, nanoseconds):
    assert durations.parse_go_duration(text) == nanoseconds


@pytest.mark.parametrize("text, words", GO_DURATION_ERRORS)
def test_what_go_refuses_is_refused(text, words):
    with pytest.raises(durations.DurationError) as err:
        durations.parse_go_duration(text)
    assert words in str(err.value)


def test_the_grammar_is_what_is_taken_short_of_the_int64_bound():
    """SYNTAX, the documented grammar, matches every duration taken; of those refused it matches
    only the ones beyond the int64 bound."""
    for text, _ in GO_DURATIONS:
        assert durations.SYNTAX.fullmatch(text), text
    beyond = {t for t, _ in GO_DURATION_ERRORS if durations.SYNTAX.fullmatch(t)}
    assert beyond == {
        "9223372036854775810ns",
        "9223372036854775808ns",
        "-9223372036854775809ns",
        "9223372036854776us",
        "3000000h",
        "9223372036854775.808us",
        "9223372036854ms775us808ns",
    }


def test_a_duration_too_long_for_pythons_int_conversion_is_refused_or_read():
    """Digits past Python's 4,300-digit conversion limit: a number beyond the bound is refused as
    Go refuses it, leading zeros and a fraction's digits are read as Go reads them."""
    with pytest.raises(durations.DurationError, match="invalid duration"):
        durations.parse_go_duration("1" * 5000 + "s")
    assert durations.parse_go_duration("0" * 5000 + "1s") == _S
    assert durations.parse_go_duration("1." + "0" * 5000 + "1s") == _S
    assert durations.parse_go_duration("1." + "1" * 5000 + "s") == _S + 111111111


@pytest.mark.parametrize("value", ["1h30m", "1.5h", "90s", "10m", "0", "2h0m0s", "600000ms"])
def test_the_autoscalers_durations_take_go_durations(value):
    cfg = _loads(minimal_values(autoscaling={"scaleDownUnneededTime": value, "scaleDownDelayAfterAdd": value}))
    assert cfg.autoscaling.scale_down_unneeded_time == value


@pytest.mark.parametrize(
    "value, words",
    [
        ("10", ["missing unit"]),
        ("1d", ["unknown unit 'd'"]),
        ("-5m", ["negative"]),
        ("ten minutes", ["not a Go duration"]),
    ],
)
def test_the_autoscalers_durations_refuse_the_rest(value, words):
    message = _only(
        minimal_values(autoscaling={"scaleDownUnneededTime": value}), f"{NS}:autoscaling.scaleDownUnneededTime"
    )
    for w in [repr(value), *words]:
        assert w in message, message


# ---------------------------------------------------------------------------------------------
# Item 8: one name per ASG tag; the offline engine refuses a duplicate URN
# ---------------------------------------------------------------------------------------------


def test_tag_resource_parts_are_injective_and_keep_the_plain_slug_first():
    from components.node_group import NODE_TEMPLATE, tag_resource_parts

    keys = [f"{NODE_TEMPLATE}/label/{k}" for k in ("team.name", "team-name", "team/name", "team_name", "other")]
    parts = tag_resource_parts(keys)
    assert len(set(parts.values())) == len(keys)
    assert parts[keys[0]] == "label-team-name" and parts[keys[4]] == "label-other"
    assert all(re.fullmatch(r"label-team-name-[0-9a-f]{8}", parts[k]) for k in keys[1:4])
    # A plain slug that equals another key's suffixed part still gets a name of its own.
    tricky = keys[:2] + [f"{NODE_TEMPLATE}/label/{parts[keys[1]].removeprefix('label-')}"]
    assert len(set(tag_resource_parts(tricky).values())) == 3


def _tag_resources(plan: offline.PlanResult) -> dict[str, str]:
    """name -> tag key of every ASG tag resource."""
    return {r.name: r.inputs["tag"]["key"] for r in plan.of_type("aws:autoscaling/tag:Tag")}


@pytest.fixture(scope="module")
def colliding_labels_plans():
    one = run_stack(minimal_values(gpuNodeGroups=[_group(labels={"team.name": "vision", "zone-tier": "a"})]))
    both = run_stack(
        minimal_values(
            gpuNodeGroups=[
                _group(labels={"team.name": "vision", "zone-tier": "a", "team-name": "vision", "zone.tier": "b"})
            ]
        )
    )
    return one, both


def test_labels_that_differ_in_punctuation_plan_with_a_tag_resource_each(colliding_labels_plans):
    one, both = colliding_labels_plans
    tags = _tag_resources(both)
    keys = sorted(tags.values())
    assert (
        len(keys) == len(set(keys))
        and any(k.endswith("/label/team-name") for k in keys)
        and any(k.endswith("/label/team.name") for k in keys)
    )
    # The resources of the existing labels keep their names: adding the colliding ones replaces nothing.
    assert _tag_resources(one).items() <= tags.items()


def test_the_offline_engine_refuses_a_duplicate_urn_in_the_engines_words():
    class Component(pulumi.ComponentResource):
        def __init__(self, name: str) -> None:
            super().__init__("test:index:Component", name)
            aws.s3.Bucket("bucket", opts=pulumi.ResourceOptions(parent=self))
            aws.s3.Bucket("bucket", opts=pulumi.ResourceOptions(parent=self))

    with pytest.raises(offline.DuplicateURNError) as err:
        offline.run(lambda: {"c": Component("c").urn}, {"aws:region": "us-west-2"}, project="p", stack="s")
    assert (
        str(err.value)
        == "Duplicate resource URN 'urn:pulumi:s::p::test:index:Component$aws:s3/bucket:Bucket::bucket'; try giving "
        "it a unique name"
    )

    def top_level() -> dict[str, Any]:
        aws.s3.Bucket("b")
        aws.s3.Bucket("b")
        return {}

    with pytest.raises(offline.DuplicateURNError, match=re.escape("'urn:pulumi:s::p::aws:s3/bucket:Bucket::b'")):
        offline.run(top_level, {"aws:region": "us-west-2"}, project="p", stack="s")

    def same_name_other_parent_or_type() -> dict[str, Any]:
        aws.s3.Bucket("b")
        aws.sqs.Queue("b")
        Component("c1")
        return {}

    with pytest.raises(offline.DuplicateURNError):  # the component's own two buckets, not "b"
        offline.run(same_name_other_parent_or_type, {"aws:region": "us-west-2"}, project="p", stack="s")


def test_a_duplicate_urn_is_an_error_line_not_a_traceback(monkeypatch):
    def duplicate(stack: str) -> Any:
        raise offline.DuplicateURNError(
            "Duplicate resource URN 'urn:pulumi:dev::gpu-training::x:y:Z::a'; try giving it a unique name"
        )

    monkeypatch.setattr(plan_mod, "plan", duplicate)
    out, err = io.StringIO(), io.StringIO()
    assert plan_mod.run_cli("dev", None, stdout=out, stderr=err) == plan_mod.EXIT_FAILED
    assert (
        err.getvalue()
        == "error: stack 'dev': Duplicate resource URN 'urn:pulumi:dev::gpu-training::x:y:Z::a'; try giving it a "
        "unique name\n"
    )
    assert out.getvalue() == ""


# ---------------------------------------------------------------------------------------------
# Item 10: placeholders copied from the examples
# ---------------------------------------------------------------------------------------------


def test_the_prod_examples_placeholders_are_found():
    cfg = plan_mod.load_config("prod")
    found = {p.key: p.message for p in placeholders(cfg)}
    assert set(found) == {f"{NS}:cluster.endpointPublicAccessCidrs[0]", f"{NS}:cluster.adminPrincipals[0]"}
    assert (
        "203.0.113.0/24" in found[f"{NS}:cluster.endpointPublicAccessCidrs[0]"]
        and "RFC 5737" in found[f"{NS}:cluster.endpointPublicAccessCidrs[0]"]
    )
    assert "111122223333" in found[f"{NS}:cluster.adminPrincipals[0]"]
    assert placeholders(plan_mod.load_config("dev")) == []


@pytest.mark.parametrize(
    "section, expected",
    [
        (
            {"cluster": {"endpointPublicAccessCidrs": ["8.8.8.8/32", "198.51.100.7/32"]}},
            "cluster.endpointPublicAccessCidrs[1]",
        ),
        ({"cluster": {"endpointPublicAccessCidrs": ["192.0.2.128/25"]}}, "cluster.endpointPublicAccessCidrs[0]"),
        ({"cluster": {"adminPrincipals": ["arn:aws:iam::123456789012:role/Admin"]}}, "cluster.adminPrincipals[0]"),
        ({"cluster": {"adminPrincipals": ["arn:aws:iam::111122223333:user/path/alice"]}}, "cluster.adminPrincipals[0]"),
        (
            {"jobs": [{**_BASE_JOBS["mpi"], "image": "111122223333.dkr.ecr.us-west-2.amazonaws.com/train:1"}]},
            "jobs[m].image",
        ),
        (
            {
                "queues": {
                    "teams": [{"name": "a"}, {"name": "vision", "roleArn": "arn:aws:iam::111122223333:role/VisionTeam"}]
                }
            },
            "queues.teams[vision].roleArn",
        ),
    ],
)
def test_each_kind_of_placeholder_is_found(section, expected):
    (problem,) = placeholders(_loads(minimal_values(**section)))
    assert problem.key == f"{NS}:{expected}"


@pytest.mark.parametrize(
    "section",
    [
        {"cluster": {"endpointPublicAccessCidrs": ["203.0.0.0/16"]}},  # holds the range, is not it
        {"cluster": {"endpointPublicAccessCidrs": ["203.0.113.0/24"], "endpointPublicAccess": False}},  # not used
        {"cluster": {"adminPrincipals": ["arn:aws:iam::123456789013:role/Admin"]}},
        {"queues": {"teams": [{"name": "vision", "roleArn": "arn:aws:iam::123456789013:role/VisionTeam"}]}},
        {
            "jobs": [
                {**_BASE_JOBS["mpi"], "image": "111122223333.dkr.ecr.us-west-2.amazonaws.com/train:1", "enabled": False}
            ]
        },
    ],
)
def test_what_is_no_placeholder_is_left_alone(section):
    assert placeholders(_loads(minimal_values(**section))) == []


def test_the_plan_warns_about_placeholders(monkeypatch):
    cfg = plan_mod.load_config("prod")
    monkeypatch.setattr(plan_mod, "plan", lambda stack: (cfg, offline.PlanResult(records=[], outputs={})))
    monkeypatch.setattr(plan_mod, "summary", lambda *a: "(summary)\n")
    monkeypatch.setattr(plan_mod.releases, "render", lambda *a: None)
    out = io.StringIO()
    assert plan_mod.run_cli("prod", None, stdout=out, stderr=io.StringIO()) == plan_mod.EXIT_OK
    lines = out.getvalue().splitlines()
    assert lines[0] == "(summary)"
    assert lines[1].startswith(f"warning: {NS}:cluster.endpointPublicAccessCidrs[0]: '203.0.113.0/24'")
    assert lines[2].startswith(
        f"warning: {NS}:cluster.adminPrincipals[0]: 'arn:aws:iam::111122223333:role/PlatformAdmin'"
    )


def test_preflight_fails_on_placeholders_before_asking_aws():
    results = preflight._check_placeholders(plan_mod.load_config("prod"), "Pulumi.prod.yaml")
    assert [r.status for r in results] == [preflight.FAIL, preflight.FAIL]
    assert all("-> replace it in Pulumi.prod.yaml" in r.line() for r in results)
    assert "203.0.113.0/24" in results[0].line() and "111122223333" in results[1].line()
    (ok,) = preflight._check_placeholders(plan_mod.load_config("dev"), "Pulumi.dev.yaml")
    assert ok.status == preflight.PASS


# ---------------------------------------------------------------------------------------------
# Item 11: the tests carry what they read
# ---------------------------------------------------------------------------------------------


def test_no_test_reads_outside_the_repository():
    outside = re.compile(r"""parents?\[?\d?\]?\s*/\s*["']shared["']|\.\./shared|["']shared["']\s*/""")
    checked = 0
    for path in sorted(TESTS.rglob("*.py")):
        if path == Path(__file__):  # (it names the pattern)
            continue
        assert not outside.search(path.read_text()), f"{path.relative_to(ROOT)} reads a folder beside the repository"
        checked += 1
    assert checked > 20
