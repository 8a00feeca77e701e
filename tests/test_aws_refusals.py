"""Issue 26, items 2-5: configs that planned, then failed or misbehaved on AWS, are refused by the
plan command (exit 2, one line per problem naming its key, the value and what is allowed, no
traceback, no files): Capacity Block lengths and sizes EC2 does not sell, launcher options that
fight the ones the stack derives, subnets too small for the addresses the nodes take, and
environment variable names Kubernetes refuses. The rules' sources are read where a service model
states them."""

from __future__ import annotations

import datetime
import io
from pathlib import Path
from typing import Any

import botocore.session
import pytest
import yaml

from facts import aws_names
from infra import plan as plan_mod
from tests.helpers import NS, ROOT, minimal_values

UTC = datetime.UTC
START = datetime.datetime(2030, 1, 1, 11, 30, tzinfo=UTC)


def plan_command(values: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    """`python -m infra plan --stack t --out DIR` on a stack file holding ``values``: (exit code, stderr, DIR)."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (root / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": values}, sort_keys=False))
    monkeypatch.setattr(plan_mod, "PROJECT_ROOT", root)
    out = tmp_path / "out"
    stdout, stderr = io.StringIO(), io.StringIO()
    code = plan_mod.run_cli("t", str(out), stdout=stdout, stderr=stderr)
    return code, stderr.getvalue(), out


def refused(values: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The problem lines of a config the plan command refuses (exit 2, no traceback, no files)."""
    code, err, out = plan_command(values, tmp_path, monkeypatch)
    assert code == plan_mod.EXIT_BAD_CONFIG, err
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())
    return [line[4:] for line in err.splitlines() if line.startswith("  - ")]


def the_line(values: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    lines = refused(values, tmp_path, monkeypatch)
    assert len(lines) == 1, lines
    return lines[0]


# ---------------------------------------------------------------------------------------------
# Item 2: Capacity Blocks EC2 sells
# ---------------------------------------------------------------------------------------------


def offering_group(hours: int, max_size: int = 2) -> dict[str, Any]:
    return {
        "name": "h100",
        "instanceType": "p5.48xlarge",
        "maxSize": max_size,
        "capacityType": "capacity-block",
        "capacity": {"offering": {"durationHours": hours, "earliestStart": START.strftime("%Y-%m-%dT%H:%M:%SZ")}},
    }


def test_the_durations_are_the_ones_ec2_states():
    doc = (
        botocore.session.get_session()
        .get_service_model("ec2")
        .operation_model("DescribeCapacityBlockOfferings")
        .input_shape.members
    )
    assert (
        "in 1-day increments up 14 days, and in 7-day increments up to 182 days"
        in doc["CapacityDurationHours"].documentation
    )
    assert (
        f"Each Capacity Block can have up to {aws_names.CAPACITY_BLOCK_INSTANCES_MAX} instances"
        in doc["InstanceCount"].documentation
    )
    days = aws_names.CAPACITY_BLOCK_DAYS
    assert days[:14] == tuple(range(1, 15)) and days[14:] == tuple(range(21, 183, 7)) and days[-1] == 182
    assert aws_names.CAPACITY_BLOCK_HOURS[0] == 24 and aws_names.CAPACITY_BLOCK_HOURS[-1] == 4368


@pytest.mark.parametrize("hours", [24, 48, 336, 504, 672, 4368])
def test_a_duration_ec2_sells_plans(hours):
    assert aws_names.capacity_block_duration_problem(hours) is None


@pytest.mark.parametrize(
    "hours, nearest",
    [
        (1, "24"),
        (12, "24"),
        (36, "24 or 48"),
        (360, "336 or 504"),
        (408, "336 or 504"),
        (505, "504 or 672"),
        (4369, "4368"),
        (8760, "4368"),
    ],
)
def test_a_duration_ec2_does_not_sell_is_refused_with_the_nearest(hours, nearest, tmp_path, monkeypatch):
    line = the_line(minimal_values(gpuNodeGroups=[offering_group(hours)]), tmp_path, monkeypatch)
    assert line.startswith(
        f"{NS}:gpuNodeGroups[h100].capacity.offering.durationHours: {hours} hours is not a length EC2 sells: "
    )
    assert (
        "1 to 14 days (24-336 hours in steps of 24)" in line
        and "up to 26 weeks (504-4368 hours in steps of 168)" in line
    )
    assert line.endswith(f"the nearest are {nearest}")


def test_a_block_of_more_than_64_instances_is_refused(tmp_path, monkeypatch):
    line = the_line(minimal_values(gpuNodeGroups=[offering_group(48, max_size=65)]), tmp_path, monkeypatch)
    assert line.startswith(
        f"{NS}:gpuNodeGroups[h100].maxSize: 65 is the instance count of the block capacity.offering looks for"
    )
    assert "at most 64 instances; use maxSize 64 or less" in line


# ---------------------------------------------------------------------------------------------
# Item 5: environment variable names
# ---------------------------------------------------------------------------------------------


def job_with(**fields: Any) -> dict[str, Any]:
    return {"name": "nccl", "kind": "nccl-test", "nodeGroup": "p4d", "nodes": 2, **fields}


def test_a_name_with_an_equals_sign_and_no_value_is_one_line_not_four(tmp_path, monkeypatch):
    # `env: {NCCL_DEBUG=INFO}` in YAML: the name NCCL_DEBUG=INFO with no value (null).
    line = the_line(minimal_values(jobs=[job_with(env={"NCCL_DEBUG=INFO": None})]), tmp_path, monkeypatch)
    assert line == (
        f"{NS}:jobs[nccl].env.NCCL_DEBUG=INFO: 'NCCL_DEBUG=INFO' is not an "
        "environment variable name: a name may not contain '=' "
        "(Kubernetes refuses it: its names are printable ASCII other than '='); give "
        "the value after the colon instead: NCCL_DEBUG: INFO"
    )


def test_the_stack_file_as_written_gives_that_line(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (root / "Pulumi.t.yaml").write_text(
        "config:\n  aws:region: us-west-2\n  gpu-training:gpuNodeGroups:\n    - "
        "{name: p4d, instanceType: p4d.24xlarge, maxSize: 2}\n"
        "  gpu-training:jobs:\n    - {name: nccl, kind: nccl-test, nodeGroup: p4d, nodes: 2, env: {NCCL_DEBUG=INFO}}\n"
    )
    monkeypatch.setattr(plan_mod, "PROJECT_ROOT", root)
    err = io.StringIO()
    assert plan_mod.run_cli("t", None, stdout=io.StringIO(), stderr=err) == plan_mod.EXIT_BAD_CONFIG
    lines = [line for line in err.getvalue().splitlines() if line.startswith("  - ")]
    assert len(lines) == 1 and "may not contain '='" in lines[0] and ".bool" not in err.getvalue(), err.getvalue()


def test_each_bad_name_is_one_problem_whatever_its_value(tmp_path, monkeypatch):
    env = {"A=1": "x", "my.var": 1, "": "z", "GOOD": "ok", "OPTS": "a=b c=d"}
    secret = {"T=1": {"secret": "s", "key": "k"}, "TOKEN": {"secret": "s", "key": "k"}}
    lines = refused(minimal_values(jobs=[job_with(env=env, secretEnv=secret)]), tmp_path, monkeypatch)
    keys = sorted(line.split(": ", 1)[0] for line in lines)
    assert keys == sorted(f"{NS}:jobs[nccl].{k}" for k in ("env.A=1", "env.my.var", "env.", "secretEnv.T=1")), lines
    assert all(line.count("is not an environment variable name") == 1 for line in lines)
    dotted = next(line for line in lines if "my.var" in line)
    assert (
        "letters, digits and '_', not starting with a digit" in dotted
        and "Kubernetes 1.35 and 1.36 would take" in dotted
    )


def test_a_name_without_a_value_is_one_problem(tmp_path, monkeypatch):
    lines = refused(
        minimal_values(jobs=[job_with(env={"WANDB_MODE": None}, secretEnv={"TOKEN": None})]), tmp_path, monkeypatch
    )
    assert sorted(lines) == [
        f"{NS}:jobs[nccl].env.WANDB_MODE: has no value (YAML reads `WANDB_MODE:` and `{{WANDB_MODE}}` "
        'as null): give one, like WANDB_MODE: "1" ("" for an empty value)',
        f"{NS}:jobs[nccl].secretEnv.TOKEN: has no value (YAML reads `TOKEN:` and `{{TOKEN}}` as "
        f"null): give the Secret and its key, {{secret: <name>, key: <key>}}",
    ]


def test_good_names_and_values_with_equals_signs_plan(tmp_path, monkeypatch):
    values = minimal_values(jobs=[job_with(env={"_X1": "a=b", "NCCL_ALGO": "Ring"})])
    code, err, out = plan_command(values, tmp_path, monkeypatch)
    assert code == plan_mod.EXIT_OK, err
    manifests = (out / "manifests.yaml").read_text()
    assert "name: _X1" in manifests and "value: a=b" in manifests


# ---------------------------------------------------------------------------------------------
# Item 3: launcher options the stack derives
# ---------------------------------------------------------------------------------------------

PYTORCH_IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
H100_1GPU = {"name": "h100", "instanceType": "p5.4xlarge", "maxSize": 2}


def elastic(command: list[str], args: list[str], group: str = "h100", **fields: Any) -> dict[str, Any]:
    return {
        "name": "ddp",
        "kind": "pytorch-elastic",
        "nodeGroup": group,
        "nodes": 2,
        "image": PYTORCH_IMAGE,
        "rendezvous": "c10d",
        "command": command,
        "args": args,
        **fields,
    }


def elastic_values(command: list[str], args: list[str], group: str = "h100", **fields: Any) -> dict[str, Any]:
    groups = [H100_1GPU, {"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 2}]
    return minimal_values(gpuNodeGroups=groups, jobs=[elastic(command, args, group, **fields)])


def test_torchrun_with_more_processes_than_gpus_is_refused(tmp_path, monkeypatch):
    line = the_line(elastic_values(["torchrun", "--nproc-per-node=8"], ["/code/train.py"]), tmp_path, monkeypatch)
    assert line.startswith(
        f"{NS}:jobs[ddp].command[1]: '--nproc-per-node=8' sets torchrun's "
        "--nproc-per-node to 8, which the stack derives: 1 "
    )
    assert "the GPUs of one p5.4xlarge node of group 'h100'" in line and "PET_NPROC_PER_NODE" in line
    assert "7 of 8 ranks would get no GPU" in line and "remove it" in line


def test_the_underscore_spelling_and_the_value_apart_are_found_in_args(tmp_path, monkeypatch):
    line = the_line(elastic_values(["torchrun"], ["--nproc_per_node", "8", "/code/train.py"]), tmp_path, monkeypatch)
    assert line.startswith(f"{NS}:jobs[ddp].args[0]: '--nproc_per_node 8' sets torchrun's --nproc-per-node to 8")


def test_a_value_equal_to_the_derived_one_is_refused_too(tmp_path, monkeypatch):
    line = the_line(
        elastic_values(["torchrun", "--nproc-per-node", "8"], ["/code/train.py"], group="p4d"), tmp_path, monkeypatch
    )
    assert "to 8, which the stack derives: 8 " in line and "A value equal to the derived one is refused too" in line
    assert "ranks would get no GPU" not in line


@pytest.mark.parametrize(
    "command, args, key, text",
    [
        (
            ["python3", "-m", "torch.distributed.run", "--nnodes=1:4"],
            ["/code/train.py"],
            "command[3]",
            "'--nnodes=1:4' sets torchrun's --nnodes to 1:4, which the stack derives: 2:2",
        ),
        (["torchrun"], ["--nnode", "2", "/code/train.py"], "args[0]", "'--nnode 2' sets torchrun's --nnodes to 2"),
        (["torchrun"], ["--rdzv-backend=static", "/code/train.py"], "args[0]", "which the stack derives: c10d"),
        (
            ["torchrun"],
            ["--rdzv_endpoint", "h:1", "/code/train.py"],
            "args[0]",
            "which the stack derives: ddp-worker-0:23456",
        ),
        (["torchrun"], ["--rdzv-id=x", "/code/train.py"], "args[0]", "which the stack derives: ddp-1-"),
        (["torchrun"], ["--max-restarts=0", "/code/train.py"], "args[0]", "which the stack derives: 3 (maxRestarts"),
        (
            ["torchrun"],
            ["--log-dir", "/tmp", "--standalone", "/code/train.py"],
            "args[2]",
            "'--standalone' sets torchrun's --standalone, which the stack derives",
        ),
    ],
)
def test_every_option_the_operator_sets_is_refused_however_written(command, args, key, text):
    from stacks import config as stack_config

    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(elastic_values(command, args), "gpu-training", "t")
    (problem,) = err.value.problems
    assert problem.key == f"{NS}:jobs[ddp].{key}" and text in problem.message, problem


def test_the_scripts_own_arguments_and_other_torchrun_options_plan(tmp_path, monkeypatch):
    values = elastic_values(
        ["torchrun", "--log-dir=/tmp/logs", "--rdzv-conf", "timeout=900"],
        ["/code/train.py", "--nnodes", "3", "--nproc-per-node=8"],
    )
    code, err, _ = plan_command(values, tmp_path, monkeypatch)
    assert code == plan_mod.EXIT_OK, err


def mpi_job(mpirun_args: list[str], **fields: Any) -> dict[str, Any]:
    return {
        "name": "hvd",
        "kind": "mpi",
        "nodeGroup": "p4d",
        "nodes": 2,
        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": ["python", "/t.py"],
        "mpirunArgs": mpirun_args,
        **fields,
    }


@pytest.mark.parametrize(
    "args, written, label",
    [
        (["-np", "8"], "-np 8", "process count (-np) to 8"),
        (["--np=16"], "--np=16", "process count (-np) to 16"),
        (["-n", "4"], "-n 4", "process count (-np)"),
        (["--n", "4"], "--n 4", "process count (-np)"),
        (["-c", "4"], "-c 4", "process count (-np)"),
        (["-H", "a,b"], "-H a,b", "hosts (--host, --hostfile) to a,b"),
        (["-host", "a"], "-host a", "hosts"),
        (["--host=a:8,b:8"], "--host=a:8,b:8", "hosts"),
        (["--hostfile", "/h"], "--hostfile /h", "hosts"),
        (["-hostfile", "/h"], "-hostfile /h", "hosts"),
        (["-machinefile", "/h"], "-machinefile /h", "hosts"),
        (["--default-hostfile", "/h"], "--default-hostfile /h", "hosts"),
        (["-N", "4"], "-N 4", "processes per node (--npernode) to 4"),
        (["-npernode", "4"], "-npernode 4", "processes per node"),
        (["--npernode", "4"], "--npernode 4", "processes per node"),
        (["--pernode"], "--pernode", "processes per node (--npernode), which"),
    ],
)
def test_every_mpirun_spelling_of_a_derived_option_is_refused(args, written, label):
    from stacks import config as stack_config

    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(minimal_values(jobs=[mpi_job(["--bind-to", "none", *args])]), "gpu-training", "t")
    (problem,) = err.value.problems
    assert problem.key == f"{NS}:jobs[hvd].mpirunArgs[2]", problem
    assert problem.message.startswith(f"{written!r} sets mpirun's {label}"), problem


def test_mpirun_np_is_refused_through_the_plan_command(tmp_path, monkeypatch):
    line = the_line(minimal_values(jobs=[mpi_job(["-x", "NCCL_ALGO", "-np", "8"])]), tmp_path, monkeypatch)
    assert line.startswith(
        f"{NS}:jobs[hvd].mpirunArgs[2]: '-np 8' sets mpirun's process count (-np) to 8, which the stack derives: 16 "
    )
    assert "2 nodes x 8 GPUs of p4d.24xlarge: one rank per GPU" in line


def test_on_sagemaker_the_same_rule_names_sagemakers_launcher():
    from stacks import config as stack_config

    job = mpi_job(
        ["--host", "algo-1"],
        runtime="sagemaker",
        image="763104351884.dkr.ecr.us-west-2.amazonaws.com/tensorflow-training:2.18.0-gpu-py310-cu125-ubuntu22.04-sagemaker",
        command=["python", "/opt/ml/input/data/efs/code/train.py"],
        volumes=[{"name": "efs", "mountPath": "/opt/ml/input/data/efs"}],
        sagemaker={"outputPath": "s3://my-output-1/x/"},
    )
    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(minimal_values(jobs=[job]), "gpu-training", "t")
    (problem,) = err.value.problems
    assert problem.key == f"{NS}:jobs[hvd].mpirunArgs[0]" and "'--host algo-1' sets mpirun's hosts" in problem.message
    assert (
        "SageMaker's MPI launcher passes mpirun --host and -np for the training job's 2 instances of ml.p4d.24xlarge"
        in problem.message
    )


def test_other_mpirun_options_plan(tmp_path, monkeypatch):
    values = minimal_values(
        jobs=[mpi_job(["--mca", "pml", "ob1", "-x", "NCCL_ALGO=Ring", "--bind-to", "none", "--report-bindings"])]
    )
    code, err, _ = plan_command(values, tmp_path, monkeypatch)
    assert code == plan_mod.EXIT_OK, err


# ---------------------------------------------------------------------------------------------
# Item 4: what the subnets and EKS hold
# ---------------------------------------------------------------------------------------------


def recorded_instance_types() -> dict[str, Any]:
    import gzip
    import json
    import os

    import moto

    path = os.path.join(os.path.dirname(moto.__file__), "ec2", "resources", "instance_types.json.gz")
    with gzip.open(path) as f:
        return json.load(f)


def test_the_address_table_is_ec2s():
    from facts import addresses, catalog

    recorded = recorded_instance_types()
    assert set(addresses.INTERFACES) == set(catalog.BUILTIN)
    for name, (interfaces, per_interface) in addresses.INTERFACES.items():
        if name not in recorded:  # the p3 types, from the EC2 documentation
            assert name.startswith("p3."), name
            continue
        network = recorded[name]["NetworkInfo"]
        assert (network["MaximumNetworkInterfaces"], network["Ipv4AddressesPerInterface"]) == (
            interfaces,
            per_interface,
        ), name
        # card 0 takes the primary interface and the VPC CNI's warm one
        assert network["NetworkCards"][0]["MaximumNetworkInterfaces"] >= 1 + addresses.VPC_CNI_WARM_ENI_TARGET, name


def test_the_stack_leaves_the_vpc_cnis_warm_settings_at_pulumi_eks_defaults(dev_plan):
    # facts/addresses.py counts WARM_ENI_TARGET=1: pulumi-eks' default when the stack sets none of
    # warmEniTarget, warmIpTarget, warmPrefixTarget, enablePrefixDelegation or configurationValues.
    (cluster,) = [r for r in dev_plan.records if r.type == "eks:index:Cluster"]
    assert set(cluster.inputs["vpcCniOptions"]) == {
        "addonVersion",
        "resolveConflictsOnCreate",
        "resolveConflictsOnUpdate",
    }


def test_a_subnet_too_small_for_the_nodes_is_refused_with_the_arithmetic(tmp_path, monkeypatch):
    line = the_line(
        minimal_values(network={"vpcCidr": "10.0.0.0/16", "privateSubnetPrefix": 24}), tmp_path, monkeypatch
    )
    assert line == (
        f"{NS}:network.privateSubnetPrefix: 24 gives each private subnet 251 addresses "
        "(2^8 = 256 minus the 5 AWS reserves), but the GPU AZ's "
        "subnet needs 320 with every group at maxSize: p4d 2 x 100 (p4d.24xlarge: 2 "
        "interfaces x 50 addresses: the primary and the VPC CNI's "
        "warm one; its 3 efa-only interfaces take none) + system 2 x 60 (ceil(4 nodes "
        "/ 2 AZs); all 4 interfaces x 15 addresses, the most "
        "the VPC CNI gives a c5.2xlarge); use privateSubnetPrefix 23 (507 "
        "addresses; vpcCidr must hold 3 such blocks) or lower maxSize"
    )


@pytest.mark.parametrize("max_size, fits", [(3, True), (4, False)])
def test_the_gpu_subnet_holds_exactly_what_fits(max_size, fits):
    # p5.4xlarge without EFA: 2 x 30 a node; the system group's share: ceil(2 / 2) x 60; /24: 251.
    from stacks import config as stack_config

    values = minimal_values(
        network={"vpcCidr": "10.0.0.0/20", "privateSubnetPrefix": 24},
        systemNodeGroup={"minSize": 1, "maxSize": 2},
        gpuNodeGroups=[{"name": "h100", "instanceType": "p5.4xlarge", "maxSize": max_size, "efa": False}],
    )
    try:
        stack_config.load(values, "gpu-training", "t")
        problems: list[str] = []
    except stack_config.ConfigError as err:
        problems = [str(p) for p in err.problems]
    assert problems == ([] if fits else [problems[0]]) and (fits or "needs 300" in problems[0]), problems


def test_a_group_no_prefix_can_hold_says_to_lower_maxsize():
    from stacks import config as stack_config

    values = minimal_values(gpuNodeGroups=[{"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 700}])
    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(values, "gpu-training", "t")
    (problem,) = [p for p in err.value.problems if p.key.endswith("privateSubnetPrefix")]
    assert (
        "needs 70,120" in problem.message
        and "no prefix the stack takes holds that much (/16: 65,531): lower maxSize" in problem.message
    )


@pytest.mark.parametrize("max_size, warned", [(450, False), (451, True)])
def test_a_group_above_eks_default_node_quota_plans_with_a_warning(max_size, warned, tmp_path, monkeypatch):
    # Adjustable: the account may have more, and preflight (which reads the same config) reads it.
    root = tmp_path / "repo"
    root.mkdir()
    (root / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    # (the system group: the GPU types the recorded offering data has take 60 or more addresses a
    # node, and 451 of them need a subnet no /16 VPC holds three of)
    values = minimal_values(
        systemNodeGroup={"instanceType": "c5.xlarge", "minSize": 2, "maxSize": max_size},
        network={"privateSubnetPrefix": 18},
    )
    (root / "Pulumi.t.yaml").write_text(yaml.safe_dump({"config": values}, sort_keys=False))
    monkeypatch.setattr(plan_mod, "PROJECT_ROOT", root)
    out, err = io.StringIO(), io.StringIO()
    assert plan_mod.run_cli("t", None, stdout=out, stderr=err) == plan_mod.EXIT_OK, err.getvalue()
    warnings = [line for line in out.getvalue().splitlines() if "L-BD136A63" in line]
    expected = (
        f"warning: {NS}:systemNodeGroup.maxSize: 451 is more than 450, EKS's "
        "default quota of nodes per managed node group "
        "('Nodes per managed node group', Service Quotas eks L-BD136A63, "
        "adjustable): EKS refuses the group unless the account's "
        "quota is raised; preflight reads it (aws service-quotas "
        "get-service-quota --service-code eks --quota-code L-BD136A63)"
    )
    assert warnings == ([expected] if warned else [])


def test_each_group_above_the_default_gets_its_warning():
    from stacks import config as stack_config
    from stacks.config.quota_warnings import quota_warnings

    groups = [
        {"name": "a", "instanceType": "p3.2xlarge", "maxSize": 500},
        {"name": "b", "instanceType": "p3.2xlarge", "maxSize": 2},
    ]
    cfg = stack_config.load(
        minimal_values(gpuNodeGroups=groups, network={"privateSubnetPrefix": 18}), "gpu-training", "t"
    )
    assert [p.key for p in quota_warnings(cfg)] == [f"{NS}:gpuNodeGroups[a].maxSize"]


def test_a_job_on_more_nodes_than_its_group_holds_is_refused(tmp_path, monkeypatch):
    # (there already: GpuJob.check_environment; the queue check names the same job again)
    lines = refused(minimal_values(jobs=[job_with(nodes=3)]), tmp_path, monkeypatch)
    assert f"{NS}:jobs[nccl].nodes: 3 is more than node group 'p4d' can hold (maxSize 2)" in lines
