"""``runtime: sagemaker``: one spec, two runtimes. The checks of a SageMaker job, the flip between
EKS and SageMaker through the real program (offline), the CreateTrainingJob request against
SageMaker's API model, and the job's network, file-system access and role."""

from __future__ import annotations

import argparse
import json
import posixpath
import re
from typing import Any

import botocore.session
import botocore.validate
import pytest

import jobs as J
from facts import catalog
from jobs.sagemaker import SAGEMAKER_DATA_ROOT, FileSystemTarget, PortableJob
from stacks import config as stack_config
from stacks.config import ConfigError
from stacks.config.stackfile import load_yaml
from tests.helpers import JOBS_KEY, ROOT, dev_values, minimal_values, run_stack
from tests.helpers import SAGEMAKER_EFS as EFS
from tests.helpers import SAGEMAKER_FSX as FSX
from tests.helpers import job_problems as problems_of
from tests.helpers import sagemaker_elastic as elastic
from tests.helpers import sagemaker_mpi as mpi
from tests.helpers import sagemaker_settings as sm
from tests.helpers import the_job_problem as the_problem

DYNAMIC = "pulumi-python:dynamic/gputraining:SageMakerTrainingJob"


# ---------------------------------------------------------------------------------------------
# Checks: each names the key, the value and what is allowed
# ---------------------------------------------------------------------------------------------


def test_valid_sagemaker_jobs_have_no_problems():
    assert problems_of(mpi()) == []
    assert problems_of(elastic()) == []
    # SageMaker needs none of the cluster's operators, etcd or node groups (with instanceType).
    assert problems_of(elastic(rendezvous="etcd"), etcd=False, operators=set()) == []
    assert (
        problems_of(
            mpi(nodeGroup=None, sagemaker={"outputPath": "s3://b-1/o", "instanceType": "ml.p5.48xlarge"}), groups={}
        )
        == []
    )


@pytest.mark.parametrize(
    "raw,key,words",
    [
        (
            mpi(sagemaker=sm(instanceType="ml.p9.48xlarge")),
            "sagemaker.instanceType",
            ["'ml.p9.48xlarge'", "ml.p4d.24xlarge"],
        ),
        (
            mpi(sagemaker=sm(instanceType="p4d.24xlarge")),
            "sagemaker.instanceType",
            ["'p4d.24xlarge'", "not a SageMaker GPU training type"],
        ),
        (mpi(volumes=[{**FSX, "subPath": "../etc"}]), "volumes[0].subPath", ["'../etc'", "mount name"]),
        (mpi(volumes=[{**FSX, "subPath": "/coco"}]), "volumes[0].subPath", ["'/coco'", "relative"]),
        (
            mpi(sagemaker={"outputPath": "my-training-output/x"}),
            "sagemaker.outputPath",
            ["'my-training-output/x'", "s3://"],
        ),
        (mpi(sagemaker={"outputPath": "s3://My_Bucket/x"}), "sagemaker.outputPath", ["'s3://My_Bucket/x'", "bucket"]),
        (mpi(sagemaker=sm(checkpointS3Uri="https://x/y")), "sagemaker.checkpointS3Uri", ["'https://x/y'"]),
        (
            mpi(sagemaker=sm(inputs=[{"channel": "train", "s3Uri": "s3:/broken"}])),
            "sagemaker.inputs[0].s3Uri",
            ["'s3:/broken'"],
        ),
        (
            mpi(sagemaker=sm(inputs=[{"channel": "fsx", "s3Uri": "s3://b-1/x"}])),
            "sagemaker.inputs[0].channel",
            ["'fsx'", "volumes[0]"],
        ),
        (
            mpi(sagemaker=sm(inputs=[{"channel": "a b", "s3Uri": "s3://b-1/x"}])),
            "sagemaker.inputs[0].channel",
            ["'a b'", "1-64"],
        ),
        (mpi(activeDeadlineSeconds=3_000_000), "activeDeadlineSeconds", ["3000000", "28 days"]),
        (mpi(sagemaker={}), "sagemaker.outputPath", ["is required"]),
        (mpi(sagemaker=None), "sagemaker.outputPath", ["is required"]),
        (mpi(image="nvcr.io/nvidia/tensorflow:24.10-tf2-py3"), "image", ["not an ECR image"]),
        (mpi(args=["coco"]), "args", ["'coco'", "--name value"]),
        (mpi(args=["--amp"]), "args", ["'--amp'", "no value"]),
        (mpi(args=["--x", "1"]), "args", ["'--x'", "-x"]),
        (mpi(args=["--sagemaker_program", "a.py"]), "args", ["'sagemaker_'"]),
        (mpi(args=["--lr", "1", "--lr=2"]), "args", ["--lr", "twice"]),
        (mpi(secretEnv={"WANDB_API_KEY": {"secret": "wandb", "key": "k"}}), "secretEnv.WANDB_API_KEY", ["Secrets"]),
        (mpi(args=["--extra=--fp16"]), "args", ["'--fp16'", "negative number"]),
        (mpi(args=["--suffix", "-x"]), "args", ["'-x'", "option"]),
        (mpi(args=["--default_user_module_name", "x"]), "args", ["SageMaker's own"]),
        (
            mpi(command=["python", f"{SAGEMAKER_DATA_ROOT}/efs/code/my train.py"]),
            "command",
            ["'my train.py'", "refuses"],
        ),
        (
            mpi(sagemaker=sm(sourceDir="/opt/ml/input/data/efs/code", entryPoint="maskrcnn/./train.py")),
            "sagemaker.entryPoint",
            ["'maskrcnn/./train.py'"],
        ),
        (mpi(env={"NCCL_DEBUG": "INFO WARN"}), "env.NCCL_DEBUG", ["one word"]),
        (mpi(command=["python", f"{SAGEMAKER_DATA_ROOT}/efs/code/run.sh"], args=[]), "command", ["/bin/sh"]),
        (mpi(env={f"V{i}": "1" for i in range(98)}), "env", ["98 variables", "at most 97"]),
        (mpi(env={"CONFIG": "x" * 600}), "env.CONFIG", ["600 characters", "512"]),
        (
            mpi(command=["python", f"{SAGEMAKER_DATA_ROOT}/efs/train.py"]),
            "command",
            ["/opt/ml/input/data/efs", "root of a volume"],
        ),
        (
            mpi(sagemaker=sm(sourceDir=f"{SAGEMAKER_DATA_ROOT}/fsx", entryPoint="train.py")),
            "sagemaker.sourceDir",
            ["root of a volume"],
        ),
        (mpi(mpirunArgs=["-x", "A" * 2600]), "mpirunArgs", ["2500"]),
        (mpi(volumes=[{**FSX, "mountPath": "/fsx"}]), "volumes[0].mountPath", ["'/fsx'", "/opt/ml/input/data/fsx"]),
        (mpi(sagemaker=sm(spot=True)), "sagemaker.spot", ["checkpointS3Uri"]),
        (mpi(sagemaker=sm(maxWaitSeconds=100)), "sagemaker.maxWaitSeconds", ["spot"]),
        (
            mpi(activeDeadlineSeconds=7200, sagemaker=sm(spot=True, checkpointS3Uri="s3://b-1/c", maxWaitSeconds=3600)),
            "sagemaker.maxWaitSeconds",
            ["3600", "7200"],
        ),
        (mpi(command=["torchrun", "/opt/ml/code/train.py"]), "command", ['["torchrun"]', "python"]),
        (elastic(command=["python"]), "command", ['["python"]', "torchrun"]),
        (
            elastic(command=["torchrun", "--nproc-per-node=8"], args=["/opt/ml/code/main.py"]),
            "command",
            ["--nproc-per-node=8"],
        ),
        (mpi(command=["/opt/ml/code/run"], args=[]), "command", ["no .py/.sh entry script"]),
        (mpi(command=["python", "train.py"]), "sagemaker.sourceDir", ["relative", "train.py"]),
        (mpi(sagemaker=sm(sourceDir="s3://b-1/code.zip")), "sagemaker.sourceDir", ["'s3://b-1/code.zip'", ".tar.gz"]),
        (mpi(sagemaker=sm(sourceDir="/opt/ml/code")), "sagemaker.sourceDir", ["does not contain", "entryPoint"]),
        (mpi(sagemaker=sm(sourceDir="/code", entryPoint="../train.py")), "sagemaker.entryPoint", ["'../train.py'"]),
        (mpi(mpirunArgs=["-x NCCL_ALGO=Ring"]), "mpirunArgs[0]", ["whitespace"]),
        (mpi(nodeGroup="p3", efa=True), "efa", ["ml.p3.16xlarge has no EFA"]),
        (mpi(efa=False), "efa", ["ml.p4d.24xlarge", "attaches EFA"]),
        (mpi(name="m" * 54), "name", ["63", "at most 52"]),
        (mpi(nodeGroup=None), "sagemaker.instanceType", ["is required", "nodeGroup"]),
        (mpi(nodeGroup="h100"), "nodeGroup", ["'h100'", "sagemaker.instanceType"]),
        (
            mpi(runtime="eks", volumes=[], sagemaker=sm(inputs=[{"channel": "train", "s3Uri": "s3://b-1/x"}])),
            "sagemaker.inputs",
            ["runtime 'eks'", "data-stage"],
        ),
        (mpi(runtime="eks", nodeGroup=None, volumes=[]), "nodeGroup", ["required with runtime 'eks'"]),
        (mpi(runtime="lambda"), "runtime", ["'eks'", "'sagemaker'"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_bad_sagemaker_job_is_one_problem_naming_its_key(raw, key, words):
    problem = the_problem(raw)
    assert problem.key == f"{JOBS_KEY}[{raw['name']}].{key}", problem
    text = str(problem)
    for w in words:
        assert w in text, text


def test_negative_numbers_and_a_dot_slash_script_are_fine():
    assert problems_of(mpi(args=["--lr", "-0.5", "--shift=-3"])) == []
    spec = J.JOB_KINDS["pytorch-elastic"].model_validate(
        elastic(
            command=["torchrun", "./train.py"],
            args=[],
            volumes=[],
            sagemaker=sm(sourceDir="s3://code-b/x/sourcedir.tar.gz"),
        )
    )
    assert problems_of(spec.model_dump(by_alias=True, exclude_none=True)) == []
    job = spec.sagemaker_job(catalog.get_sagemaker("ml.p4d.24xlarge"), "us-west-2", "s")
    assert json.loads(job.hyperparameters["sagemaker_program"]) == "train.py"


def test_nccl_debug_goes_to_the_launchers_own_option():
    spec = J.JOB_KINDS["mpi"].model_validate(mpi(env={"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": 4}))
    job = spec.sagemaker_job(catalog.get_sagemaker("ml.p4d.24xlarge"), "us-west-2", "s")
    options = json.loads(job.hyperparameters["sagemaker_mpi_custom_mpi_options"]).split()
    assert "--NCCL_DEBUG" in options and options[options.index("--NCCL_DEBUG") + 1] == "WARN"
    assert "NCCL_DEBUG" not in [options[i + 1] for i, o in enumerate(options) if o == "-x"]
    assert options[options.index("OMP_NUM_THREADS") - 1 : options.index("OMP_NUM_THREADS") + 1] == [
        "-x",
        "OMP_NUM_THREADS",
    ]


def test_instance_count_is_checked_by_type():
    problem = the_problem(mpi(nodes=0))
    assert problem.key == f"{JOBS_KEY}[maskrcnn].nodes" and "greater than or equal to 1" in problem.message


def test_a_disabled_sagemaker_job_is_still_checked_on_its_own():
    problem = the_problem(mpi(enabled=False, args=["positional"]))
    assert problem.key == f"{JOBS_KEY}[maskrcnn].args"


def test_a_bad_job_stops_the_stack_before_anything_is_created():
    values = minimal_values(
        gpuNodeGroups=[{"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 2}],
        jobs=[mpi(sagemaker=sm(instanceType="ml.p9.48xlarge"))],
    )
    with pytest.raises(ConfigError) as err:
        run_stack(values)
    assert "gpu-training:jobs[maskrcnn].sagemaker.instanceType" in str(err.value) and "ml.p9.48xlarge" in str(err.value)


# ---------------------------------------------------------------------------------------------
# One spec, two runtimes: the flip through the real program
# ---------------------------------------------------------------------------------------------

PLAN_GROUPS = [
    {"name": "p4d", "instanceType": "p4d.24xlarge", "maxSize": 2},
    {"name": "p3dn", "instanceType": "p3dn.24xlarge", "maxSize": 2},
]
# p3.16xlarge (no EFA) is not offered in the offline region data: the no-EFA job names its ml. type.
NO_EFA = {"instanceType": "ml.p3.16xlarge", "outputPath": "s3://my-training-output/plain/"}


def plan_of(jobs: list[dict[str, Any]], stack: str = "test") -> Any:
    return run_stack(minimal_values(gpuNodeGroups=PLAN_GROUPS, jobs=jobs), stack=stack)


@pytest.fixture(scope="module")
def both_runtimes() -> tuple[Any, Any]:
    jobs = [mpi(), elastic(), mpi(name="plain", nodeGroup="p3dn", volumes=[EFS], sagemaker=NO_EFA)]
    # The fabric check (on by default on EFA, docs/performance.md) wraps the EKS workers in the guard: off here.
    on_eks = plan_of([{**j, "runtime": "eks", "fabric": "off"} for j in jobs])
    on_sagemaker = plan_of(jobs)
    return on_eks, on_sagemaker


def request_of(plan: Any, job: str) -> dict[str, Any]:
    found = [
        r.inputs["request"]
        for r in plan.of_type(DYNAMIC)
        if r.inputs["request"]["TrainingJobName"].startswith(f"{job}-1-")
    ]
    assert len(found) == 1, job
    return found[0]


def custom_resource(plan: Any, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in plan.kubernetes_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def decoded(request: dict[str, Any]) -> dict[str, Any]:
    return {k: json.loads(v) for k, v in request["HyperParameters"].items()}


def script_args(args: list[str]) -> dict[str, str]:
    """The --name value pairs of an argument list, as argparse reads them (all strings)."""
    parser = argparse.ArgumentParser(allow_abbrev=False)
    names = {a[2:].split("=", 1)[0] for a in args if a.startswith("--")}
    for n in names:
        parser.add_argument(f"--{n}")
    return {k: v for k, v in vars(parser.parse_args(args)).items()}


def test_the_flip_keeps_image_entry_point_arguments_data_and_gpus_of_mpi(both_runtimes):
    on_eks, on_sagemaker = both_runtimes
    spec = mpi()
    mpijob = custom_resource(on_eks, "MPIJob", "maskrcnn")
    request = request_of(on_sagemaker, "maskrcnn")
    hyper = decoded(request)
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]
    (container,) = worker["template"]["spec"]["containers"]
    (launcher,) = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]

    # Image.
    assert (
        launcher["image"] == container["image"] == request["AlgorithmSpecification"]["TrainingImage"] == spec["image"]
    )
    # Entry point: what mpirun runs on EKS ends with the script and its arguments; on SageMaker the
    # script is sagemaker_program inside sagemaker_submit_directory, the arguments hyperparameters.
    script = spec["command"][-1]
    at = launcher["command"].index(script)
    assert launcher["command"][at - 1] == "python" and launcher["command"][at + 1 :] == spec["args"]
    assert posixpath.join(hyper["sagemaker_submit_directory"], hyper["sagemaker_program"]) == script
    user = {k: v for k, v in hyper.items() if not k.startswith("sagemaker_")}
    assert (
        user
        == script_args(launcher["command"][at + 1 :])
        == {"data_dir": f"{SAGEMAKER_DATA_ROOT}/fsx", "images_per_gpu": "4", "lr": "0.01", "amp": "true"}
    )
    # MPI: one process per GPU, the same extra mpirun options and the env forwarded.
    assert hyper["sagemaker_mpi_enabled"] is True
    assert hyper["sagemaker_mpi_num_of_processes_per_host"] == mpijob["spec"]["slotsPerWorker"] == 8
    options = hyper["sagemaker_mpi_custom_mpi_options"].split()
    assert options[:2] == spec["mpirunArgs"] and "-x NCCL_ALGO=Ring" in " ".join(launcher["command"])
    for name in ("TF_CPP_MIN_LOG_LEVEL", "FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA"):
        assert name in options and name in launcher["command"]
    # Env: the same values (EFA settings from the type on both sides).
    eks_env = {e["name"]: e["value"] for e in container["env"]}
    assert request["Environment"] == eks_env
    # Data: each volume is a channel mounted where the pods mount the claim, with its directory.
    mounts = {m["name"]: m for m in container["volumeMounts"] if m["name"] in ("fsx", "efs")}
    channels = {c["ChannelName"]: c["DataSource"]["FileSystemDataSource"] for c in request["InputDataConfig"]}
    assert set(channels) == set(mounts) == {"fsx", "efs"}
    for name, mount in mounts.items():
        assert mount["mountPath"] == f"{SAGEMAKER_DATA_ROOT}/{name}"
        assert (channels[name]["FileSystemAccessMode"] == "ro") == bool(mount.get("readOnly"))
    assert mounts["fsx"]["subPath"] == "coco" and channels["fsx"]["DirectoryPath"].endswith("/coco")
    assert channels["fsx"]["FileSystemType"] == "FSxLustre" and channels["efs"] == {
        **channels["efs"],
        "FileSystemType": "EFS",
        "DirectoryPath": "/",
    }
    # Total GPUs.
    eks_gpus = worker["replicas"] * container["resources"]["limits"]["nvidia.com/gpu"]
    rc = request["ResourceConfig"]
    assert rc["InstanceType"] == "ml.p4d.24xlarge"
    assert eks_gpus == rc["InstanceCount"] * catalog.get_sagemaker(rc["InstanceType"]).gpus == 16


def test_the_flip_keeps_image_entry_point_arguments_data_and_gpus_of_pytorch(both_runtimes):
    on_eks, on_sagemaker = both_runtimes
    spec = elastic()
    job = custom_resource(on_eks, "PyTorchJob", "resnet")
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    (container,) = worker["template"]["spec"]["containers"]
    request = request_of(on_sagemaker, "resnet")
    hyper = decoded(request)

    assert container["image"] == request["AlgorithmSpecification"]["TrainingImage"] == spec["image"]
    assert (
        container["command"] == spec["command"] == ["torchrun"] and hyper["sagemaker_torch_distributed_enabled"] is True
    )
    assert posixpath.join(hyper["sagemaker_submit_directory"], hyper["sagemaker_program"]) == container["args"][0]
    assert (
        {k: v for k, v in hyper.items() if not k.startswith("sagemaker_")}
        == script_args(container["args"][1:])
        == {"arch": "resnet50", "epochs": "90"}
    )
    assert [c["ChannelName"] for c in request["InputDataConfig"]] == [
        m["name"] for m in container["volumeMounts"] if m["name"] == "efs"
    ]
    # EKS starts maxNodes workers; SageMaker runs that many instances.
    assert (
        worker["replicas"] * int(job["spec"]["nprocPerNode"]) == request["ResourceConfig"]["InstanceCount"] * 8 == 2 * 8
    )


def test_sagemaker_jobs_are_no_kubernetes_objects_and_eks_jobs_start_no_training_job(both_runtimes):
    on_eks, on_sagemaker = both_runtimes
    assert on_eks.of_type(DYNAMIC) == [] and "sagemakerJobs" not in on_eks.outputs
    assert not [o for o in on_sagemaker.kubernetes_objects() if o["kind"] in ("MPIJob", "PyTorchJob")]
    assert sorted(on_sagemaker.outputs["sagemakerJobs"]) == ["maskrcnn", "plain", "resnet"]
    assert "jobs" not in on_sagemaker.outputs


def test_every_request_is_valid_for_sagemakers_api(both_runtimes):
    """CreateTrainingJob's request checked against SageMaker's own API model (botocore's)."""
    model = botocore.session.get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob")
    validator = botocore.validate.ParamValidator()
    _, on_sagemaker = both_runtimes
    requests = [r.inputs["request"] for r in on_sagemaker.of_type(DYNAMIC)]
    assert len(requests) == 3
    for request in requests:
        report = validator.validate(request, model.input_shape)
        assert not report.has_errors(), report.generate_report()
        assert len(request["TrainingJobName"]) <= 63


def test_the_training_job_name_is_per_stack_run_spec_and_type():
    spec = J.JOB_KINDS["mpi"].model_validate(mpi())
    assert isinstance(spec, PortableJob)
    p4d = "ml.p4d.24xlarge"
    name = spec.training_job_name("gpu-training-dev", p4d)
    assert name.startswith("maskrcnn-1-") and len(name) == len("maskrcnn-1-") + 8
    assert spec.training_job_name("gpu-training-dev", p4d) == name
    assert spec.training_job_name("gpu-training-prod", p4d) != name
    # The node group's type changed (same spec): a new job, under a new name.
    assert spec.training_job_name("gpu-training-dev", "ml.p5.48xlarge") != name
    assert (
        J.JOB_KINDS["mpi"]
        .model_validate(mpi(run=2))
        .training_job_name("gpu-training-dev", p4d)
        .startswith("maskrcnn-2-")
    )
    assert (
        J.JOB_KINDS["mpi"].model_validate(mpi(args=["--lr", "0.02"])).training_job_name("gpu-training-dev", p4d) != name
    )
    assert spec.sagemaker_job(catalog.get_sagemaker(p4d), "us-west-2", "gpu-training-dev").training_job_name == name


def test_the_sagemaker_fields_do_not_change_an_eks_jobs_rendezvous():
    plain = elastic(runtime="eks")
    plain.pop("sagemaker")
    a = J.JOB_KINDS["pytorch-elastic"].model_validate(plain)
    b = J.JOB_KINDS["pytorch-elastic"].model_validate(elastic(runtime="eks"))
    assert a.rendezvous_id == b.rendezvous_id


def test_fsx_paths_start_with_the_mount_name():
    spec = J.JOB_KINDS["mpi"].model_validate(mpi())
    job = spec.sagemaker_job(catalog.get_sagemaker("ml.p4d.24xlarge"), "us-west-2", "s")
    request = job.create_request(
        "arn:aws:iam::1:role/r",
        ["sg-1"],
        ["subnet-1"],
        {"fsx": FileSystemTarget("FSxLustre", "fs-1", "abcdefgh"), "efs": FileSystemTarget("EFS", "fs-2")},
    )
    paths = {
        c["ChannelName"]: c["DataSource"]["FileSystemDataSource"]["DirectoryPath"] for c in request["InputDataConfig"]
    }
    assert paths == {"fsx": "/abcdefgh/coco", "efs": "/"}


def test_spot_jobs_wait_at_least_their_runtime_and_keep_checkpoints():
    spec = J.JOB_KINDS["mpi"].model_validate(
        mpi(activeDeadlineSeconds=36000, sagemaker=sm(spot=True, checkpointS3Uri="s3://b-1/ckpt/"))
    )
    job = spec.sagemaker_job(catalog.get_sagemaker("ml.p4d.24xlarge"), "us-west-2", "s")
    request = job.create_request(
        "arn:aws:iam::1:role/r",
        ["sg-1"],
        ["subnet-1"],
        {"fsx": FileSystemTarget("FSxLustre", "fs-1", "m"), "efs": FileSystemTarget("EFS", "fs-2")},
    )
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 36000, "MaxWaitTimeInSeconds": 72000}
    assert request["CheckpointConfig"] == {"S3Uri": "s3://b-1/ckpt/", "LocalPath": "/opt/ml/checkpoints"}


# ---------------------------------------------------------------------------------------------
# Network, file systems and IAM
# ---------------------------------------------------------------------------------------------


def children(plan: Any, typ: str, job: str) -> list[Any]:
    return [r for r in plan.of_type(typ) if r.name.startswith(f"sagemaker-jobs-{job}-")]


def test_each_job_has_its_own_security_group_with_the_rules_it_needs(both_runtimes):
    _, plan = both_runtimes
    groups = {
        job: children(plan, "aws:ec2/securityGroup:SecurityGroup", job) for job in ("maskrcnn", "resnet", "plain")
    }
    assert all(len(g) == 1 for g in groups.values())
    ids = {job: g[0].id for job, g in groups.items()}
    assert len(set(ids.values())) == 3
    fsx_sg = plan.named("aws:ec2/securityGroup:SecurityGroup", "fsx-lustre").id
    efs_sg = plan.named("aws:ec2/securityGroup:SecurityGroup", "efs-nfs").id

    def rules(job: str, direction: str) -> list[dict[str, Any]]:
        return [
            r.inputs for r in children(plan, f"aws:vpc/securityGroup{direction}Rule:SecurityGroup{direction}Rule", job)
        ]

    for job, sg in ids.items():
        ingress, egress = rules(job, "Ingress"), rules(job, "Egress")
        assert {"securityGroupId": sg, "referencedSecurityGroupId": sg, "ipProtocol": "-1"}.items() <= next(
            r for r in ingress if r["securityGroupId"] == sg and r.get("referencedSecurityGroupId") == sg
        ).items()
        assert any(r.get("cidrIpv4") == "0.0.0.0/0" and r["ipProtocol"] == "-1" for r in egress)
        to_self = [r for r in egress if r.get("referencedSecurityGroupId") == sg]
        # EFA needs all traffic to itself too; the ml.p3.16xlarge job has no EFA.
        assert len(to_self) == (0 if job == "plain" else 1)
    lustre = [
        (r["fromPort"], r["toPort"], r["securityGroupId"], r["referencedSecurityGroupId"])
        for r in rules("maskrcnn", "Ingress")
        if r.get("fromPort")
    ]
    sg = ids["maskrcnn"]
    assert sorted(lustre) == sorted(
        [
            (988, 988, fsx_sg, sg),
            (1018, 1023, fsx_sg, sg),
            (988, 988, sg, fsx_sg),
            (1018, 1023, sg, fsx_sg),
            (2049, 2049, efs_sg, sg),
        ]
    )
    # The pytorch job reads EFS only: no Lustre rules.
    assert [(r["fromPort"], r["securityGroupId"]) for r in rules("resnet", "Ingress") if r.get("fromPort")] == [
        (2049, efs_sg)
    ]


def test_jobs_reading_fsx_run_in_the_gpu_subnet_others_in_the_private_subnets(both_runtimes):
    _, plan = both_runtimes
    assert request_of(plan, "maskrcnn")["VpcConfig"]["Subnets"] == [plan.outputs["gpuSubnetId"]]
    assert request_of(plan, "resnet")["VpcConfig"]["Subnets"] == plan.outputs["privateSubnetIds"]


def test_the_execution_role_is_sagemakers_with_least_privilege(both_runtimes):
    _, plan = both_runtimes
    (role,) = children(plan, "aws:iam/role:Role", "maskrcnn")
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "sagemaker.amazonaws.com"}]
    assert request_of(plan, "maskrcnn")["RoleArn"].rsplit("/", 1)[-1].startswith(role.name)
    (policy,) = children(plan, "aws:iam/rolePolicy:RolePolicy", "maskrcnn")
    doc = json.loads(policy.inputs["policy"])
    actions = {a for s in doc["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert not [a for a in actions if "*" in a]
    assert {
        "ec2:CreateNetworkInterface",
        "ec2:DeleteNetworkInterfacePermission",
        "logs:PutLogEvents",
        "cloudwatch:PutMetricData",
        "ecr:BatchGetImage",
        "s3:PutObject",
    } <= actions
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    assert by_sid["WriteOutputs"]["Resource"] == ["arn:aws:s3:::my-training-output/maskrcnn/*"]
    assert by_sid["PullImage"]["Resource"] == "arn:aws:ecr:us-west-2:763104351884:repository/tensorflow-training"
    assert by_sid["Metrics"]["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}
    assert "ReadInputs" not in by_sid  # no S3 inputs, code on EFS
    # No managed policies at all (so no *FullAccess).
    assert not [
        r
        for r in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        if r.name.startswith("sagemaker-jobs-")
    ]


def test_s3_inputs_and_sources_are_readable_and_nothing_else():
    spec = J.JOB_KINDS["pytorch-elastic"].model_validate(
        elastic(
            volumes=[],
            command=["torchrun", "train.py"],
            args=[],
            sagemaker=sm(
                sourceDir="s3://code-b/bert/sourcedir.tar.gz",
                inputs=[{"channel": "train", "s3Uri": "s3://data-b/wiki/", "mode": "FastFile"}],
            ),
        )
    )
    job = spec.sagemaker_job(catalog.get_sagemaker("ml.p4d.24xlarge"), "us-west-2", "s")
    doc = job.execution_policy("aws", "us-west-2", "123456789012")
    by_sid = {s["Sid"]: s for s in doc["Statement"]}
    assert sorted(by_sid["ReadInputs"]["Resource"]) == [
        "arn:aws:s3:::code-b/bert/sourcedir.tar.gz*",
        "arn:aws:s3:::data-b/wiki/*",
    ]
    listing = {
        s["Resource"]: s["Condition"]["StringLike"]["s3:prefix"]
        for s in doc["Statement"]
        if s["Sid"].startswith("ListBucket")
    }
    assert listing == {
        "arn:aws:s3:::code-b": ["bert/sourcedir.tar.gz*"],
        "arn:aws:s3:::data-b": ["wiki/*"],
        "arn:aws:s3:::my-training-output": ["x/*"],
    }
    hyper = {k: json.loads(v) for k, v in job.hyperparameters.items()}
    assert (
        hyper["sagemaker_program"] == "train.py"
        and hyper["sagemaker_submit_directory"] == "s3://code-b/bert/sourcedir.tar.gz"
    )


def test_the_job_waits_for_its_role_rules_and_mount_targets_and_is_replaced_delete_first(both_runtimes):
    _, plan = both_runtimes
    (job,) = [r for r in plan.of_type(DYNAMIC) if r.name == "sagemaker-jobs-maskrcnn"]
    deps = {(d["type"], d["name"]) for d in job.depends_on}
    assert ("aws:iam/rolePolicy:RolePolicy", "sagemaker-jobs-maskrcnn-execution") in deps
    assert (
        "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
        "sagemaker-jobs-maskrcnn-lustre-988-988-in-fsx",
    ) in deps
    assert any(t == "aws:efs/mountTarget:MountTarget" for t, _ in deps)
    assert job.options.get("deleteBeforeReplace") is True
    assert job.inputs["region"] == "us-west-2" and job.inputs["stopTimeoutSeconds"] >= 1800


def test_the_dev_stack_carries_disabled_sagemaker_examples(dev_plan):
    raw = load_yaml((ROOT / "Pulumi.dev.yaml").read_text())["config"]["gpu-training:jobs"]
    examples = [j for j in raw if j.get("runtime") == "sagemaker"]
    assert {j["kind"] for j in examples} == {"mpi", "pytorch-elastic"} and not any(
        j.get("enabled", True) for j in examples
    )
    assert dev_plan.of_type(DYNAMIC) == []
    # Switched on, they plan (the stack file's groups and stores).
    values = {**dev_values(), "gpu-training:jobs": [{**j, "enabled": True} for j in examples]}
    plan = run_stack(values, stack="dev")
    assert len(plan.of_type(DYNAMIC)) == 2


# The training-job names of the dev stack's two SageMaker examples as d996fa2 (the version before the
# queues) named them. A running SageMaker job whose name changes is replaced: a new full training run.
# A field added to the job spec must leave these names alone unless it changes what SageMaker runs.
DEV_EXAMPLE_NAMES = {
    "maskrcnn-sagemaker": "maskrcnn-sagemaker-1-1b50eaa0",
    "resnet50-hybrid": "resnet50-hybrid-1-a92d3d2a",
}


def _dev_example_names(change=None) -> dict[str, str]:
    from stacks.config.job_entries import sagemaker_jobs

    raw = load_yaml((ROOT / "Pulumi.dev.yaml").read_text())["config"]["gpu-training:jobs"]
    examples = [{**j, "enabled": True, **(change or {})} for j in raw if j.get("runtime") == "sagemaker"]
    cfg = stack_config.load({**dev_values(), "gpu-training:jobs": examples}, "gpu-training", "dev")
    return {
        d.job: d.training_job_name
        for d in sagemaker_jobs(cfg.jobs, cfg.gpu_node_groups, cfg.region, cfg.cluster_name, {})
    }


def test_new_spec_fields_do_not_rename_existing_sagemaker_jobs():
    assert _dev_example_names() == DEV_EXAMPLE_NAMES


def test_a_jobs_queue_priority_leaves_its_sagemaker_name_alone():
    """Queues and priorities are Kueue's, on EKS: they do not change a SageMaker run."""
    assert _dev_example_names({"priority": "high"}) == DEV_EXAMPLE_NAMES


def test_the_provider_pulumi_serializes_loads_where_pulumi_runs_it(tmp_path):
    """Pulumi pickles the dynamic provider by reference (module and class name); its provider host
    runs from the project directory with the program's virtualenv, so the module must import
    from there, with nothing else on the path."""
    import subprocess
    import sys

    from pulumi.dynamic.dynamic import serialize_provider

    from providers.sagemaker_training_job import TrainingJobProvider

    blob = tmp_path / "provider.b64"
    blob.write_text(serialize_provider(TrainingJobProvider()))
    code = (
        "import base64, sys, dill; p = dill.loads(base64.b64decode(open(sys.argv[1]).read())); "
        "d = p.diff('x', {'request': {'a': 1}, 'region': 'r'}, {'request': {'a': 2}, 'region': 'r'}); "
        "print(type(p).__module__, type(p).__name__, d.replaces, d.delete_before_replace)"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(blob)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["providers.sagemaker_training_job", "TrainingJobProvider", "['request']", "True"]


# EC2's rule for security group and rule descriptions (GroupDescription / Description): up to 255
# characters of a-z, A-Z, 0-9, spaces and ._-:/()#,@[]+=&;{}!$*
EC2_DESCRIPTION = re.compile(r"^[a-zA-Z0-9. _\-:/()#,@\[\]+=&;{}!$*]{0,255}$")
SG_TYPES = (
    "aws:ec2/securityGroup:SecurityGroup",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
    "aws:ec2/securityGroupRule:SecurityGroupRule",
)


def test_every_security_group_description_is_one_ec2_takes_and_role_prefixes_fit(dev_plan, both_runtimes):
    checked = 0
    for plan in (dev_plan, *both_runtimes):
        for typ in SG_TYPES:
            for r in plan.of_type(typ):
                text = r.inputs.get("description")
                if text is not None:
                    assert EC2_DESCRIPTION.match(text), f"{r.name}: {text!r}"
                    checked += 1
        for role in plan.of_type("aws:iam/role:Role"):
            # The provider adds 26 characters to a name prefix; role names are at most 64.
            assert len(role.inputs.get("namePrefix", "")) <= 38, role.name
    assert checked > 20


def test_a_long_job_name_still_gets_a_valid_role_name_prefix():
    job = mpi(name="a" * 40, nodes=1)
    plan = plan_of([job])
    (role,) = children(plan, "aws:iam/role:Role", "a" * 40)
    assert role.inputs["namePrefix"] == "a" * 27 + "-sagemaker-"
