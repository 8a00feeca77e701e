"""What the test modules share besides fixtures (those are in conftest.py): the repository's configs
and the real program run offline, and the specs, configs and answers more than one module builds
on. A test module imports from here, never from another test module (pytest imports each test
module under its own name: imported again from another one, it would run twice, under two names).

Scheduling on paper is ``tests/scheduling.py``, AWS answers moto does not give ``tests/aws_stubs.py``,
CRD and Kueue validation ``tests/crd_validation.py`` and ``tests/kueue_crds.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import moto
import pytest
import yaml

import jobs as J
from facts import catalog, versions
from facts.kube import KUEUE_NAMESPACE, NODE_GROUP_LABEL
from facts.paths import TOOLS_BIN
from infra import offline, preflight
from jobs.sagemaker import SAGEMAKER_DATA_ROOT
from jobs.targets import job_targets
from stacks import config as stack_config
from stacks.config import GpuNodeGroupConfig, Problem
from stacks.config.job_entries import group_facts, parse_jobs
from stacks.config.stackfile import load_yaml, read_stack_config
from tests import aws_stubs

ROOT = Path(__file__).resolve().parent.parent
NS = stack_config.NAMESPACE

# ---------------------------------------------------------------------------------------------
# Stack configs and the real program, offline
# ---------------------------------------------------------------------------------------------


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: manifests run to megabytes of CRDs


def yaml_objects(text: str) -> list[dict[str, Any]]:
    """The maps among the documents of a YAML stream (a manifest, helm's or the plan's output)."""
    return [d for d in yaml.load_all(text, Loader=YAML_LOADER) if isinstance(d, dict)]


@cache
def program_modules() -> frozenset[str]:
    """The modules a fresh Python process has loaded after importing what `pulumi up` runs (``infra.program``),
    once per test process (the layer tests each read their part of it)."""
    code = "import sys; sys.path.insert(0, '.'); import infra.program; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    return frozenset(out.stdout.split())


def minimal_values(**sections: Any) -> dict[str, Any]:
    """A small valid config: us-west-2, one p4d group. Override sections by their key name."""
    values: dict[str, Any] = {
        "aws:region": "us-west-2",
        f"{NS}:gpuAvailabilityZone": "auto",
        f"{NS}:gpuNodeGroups": [
            {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "desiredSize": 1, "maxSize": 2},
        ],
    }
    for key, value in sections.items():
        full = key if ":" in key else f"{NS}:{key}"
        if value is None:
            values.pop(full, None)
        else:
            values[full] = copy.deepcopy(value)
    return values


@cache
def _committed_values(stack: str) -> dict[str, Any]:
    _, values = read_stack_config(stack, ROOT)
    return values


def dev_values() -> dict[str, Any]:
    """Pulumi.dev.yaml's config as the engine hands it over (read once per process; a copy of its own)."""
    return copy.deepcopy(_committed_values("dev"))


def load_values(values: dict[str, Any]) -> stack_config.StackConfig:
    """The config of a test stack (raises ConfigError)."""
    return stack_config.load(values, "gpu-training", "test")


def run_stack(values: dict[str, Any], stack: str = "test", stack_file: Path | None = None) -> offline.PlanResult:
    """Validate and run the real program offline; returns what it registered. ``stack_file``: where the
    values came from (a fleet's manager: its workers' stack files are found from there)."""
    from infra import program

    cfg = stack_config.load(values, "gpu-training", stack)  # raise ConfigError first, like the CLI
    fleet = offline.offline_fleet(cfg, stack_file) if stack_file is not None else None
    return offline.run(program.main, values, project="gpu-training", stack=stack, fleet=fleet)


class BrokenPlan:
    """A plan's records and outputs, as the whole-stack invariants read them (``broken_plan``)."""

    def __init__(self, records: list[Any], outputs: dict[str, Any]):
        self.records, self.outputs = records, outputs


def broken_plan(plan: Any, change: Callable[[list[Any]], None]) -> BrokenPlan:
    """A copy of ``plan`` whose records ``change`` edits in place (inputs and dependencies copied)."""
    records = [
        dataclasses.replace(r, inputs=copy.deepcopy(r.inputs), depends_on=list(r.depends_on)) for r in plan.records
    ]
    change(records)
    return BrokenPlan(records, plan.outputs)


def clean_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the machine's AWS setup: no AWS_* variables, profile files or instance metadata."""
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# ---------------------------------------------------------------------------------------------
# The jobs section of a config, parsed and checked (tests/test_jobs_config.py)
# ---------------------------------------------------------------------------------------------

JOBS_KEY = "gpu-training:jobs"
TRAIN_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:2026.11"

JOB_GROUPS = {
    g.name: g
    for g in [
        GpuNodeGroupConfig(name="p4d", instanceType="p4d.24xlarge", maxSize=2),
        GpuNodeGroupConfig(name="p3", instanceType="p3.16xlarge", maxSize=4),
        GpuNodeGroupConfig(name="p3dn", instanceType="p3dn.24xlarge", maxSize=2, efa=False),
        GpuNodeGroupConfig(name="big", instanceType="p5.48xlarge", maxSize=16),
    ]
}


def parse_job_list(
    raw: Any,
    *,
    volumes: set[str] | None = None,
    operators: set[str] | None = None,
    etcd: bool = True,
    groups: dict[str, GpuNodeGroupConfig] | None = None,
) -> tuple[list[J.JobBase], list[Problem]]:
    """The specs and problems of a ``jobs`` list on JOB_GROUPS (or ``groups``), both volumes, both
    operators and etcd (or what is given)."""
    problems: list[Problem] = []
    env = J.JobEnvironment(
        groups={name: group_facts(g) for name, g in (JOB_GROUPS if groups is None else groups).items()},
        volumes=frozenset({"fsx", "efs"} if volumes is None else volumes),
        operators=frozenset({"mpi", "training"} if operators is None else operators),
        etcd_enabled=etcd,
    )
    specs = parse_jobs(raw, JOBS_KEY, problems, env)
    return specs, problems


def one_job_problem(raw: Any, **kw: Any) -> Problem:
    """The one problem of a ``jobs`` list."""
    _, problems = parse_job_list(raw, **kw)
    assert len(problems) == 1, problems
    return problems[0]


def elastic_job(**over: Any) -> dict[str, Any]:
    """A pytorch-elastic job on EKS, as the config gives it."""
    return {
        "name": "imagenet",
        "kind": "pytorch-elastic",
        "nodeGroup": "p4d",
        "image": TRAIN_IMAGE,
        "command": ["torchrun", "main.py"],
        **over,
    }


# ---------------------------------------------------------------------------------------------
# runtime: sagemaker (tests/test_sagemaker.py)
# ---------------------------------------------------------------------------------------------

DLC_REGISTRY = "763104351884.dkr.ecr.us-west-2.amazonaws.com"
TF_IMAGE = f"{DLC_REGISTRY}/tensorflow-training:2.18.0-gpu-py310-cu125-ubuntu22.04-sagemaker"
PT_IMAGE = f"{DLC_REGISTRY}/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
SAGEMAKER_FSX = {"name": "fsx", "mountPath": f"{SAGEMAKER_DATA_ROOT}/fsx", "readOnly": True, "subPath": "coco"}
SAGEMAKER_EFS = {"name": "efs", "mountPath": f"{SAGEMAKER_DATA_ROOT}/efs"}


def sagemaker_mpi(**over: Any) -> dict[str, Any]:
    """Mask R-CNN on COCO with Horovod on SageMaker: the script on EFS, COCO on FSx."""
    job = {
        "name": "maskrcnn",
        "kind": "mpi",
        "runtime": "sagemaker",
        "nodeGroup": "p4d",
        "nodes": 2,
        "image": TF_IMAGE,
        "command": ["python", f"{SAGEMAKER_DATA_ROOT}/efs/code/maskrcnn/train.py"],
        "args": ["--data_dir", f"{SAGEMAKER_DATA_ROOT}/fsx", "--images_per_gpu", "4", "--lr=0.01", "--amp", "true"],
        "mpirunArgs": ["-x", "NCCL_ALGO=Ring"],
        "env": {"TF_CPP_MIN_LOG_LEVEL": 2},
        "volumes": [SAGEMAKER_FSX, SAGEMAKER_EFS],
        "sagemaker": {"outputPath": "s3://my-training-output/maskrcnn/"},
    }
    job.update(over)
    return job


def sagemaker_elastic(**over: Any) -> dict[str, Any]:
    """ResNet-50 with torchrun on SageMaker: the script on EFS."""
    job = {
        "name": "resnet",
        "kind": "pytorch-elastic",
        "runtime": "sagemaker",
        "nodeGroup": "p4d",
        "minNodes": 1,
        "maxNodes": 2,
        "image": PT_IMAGE,
        "command": ["torchrun"],
        "args": [f"{SAGEMAKER_DATA_ROOT}/efs/code/main.py", "--arch", "resnet50", "--epochs", "90"],
        "rendezvous": "c10d",
        "volumes": [SAGEMAKER_EFS],
        "sagemaker": {"outputPath": "s3://my-training-output/resnet/"},
    }
    job.update(over)
    return job


def sagemaker_settings(**fields: Any) -> dict[str, Any]:
    """A job's ``sagemaker`` section: an output path and ``fields``."""
    return {"outputPath": "s3://my-training-output/x/", **fields}


def job_problems(raw: dict[str, Any], **kw: Any) -> list[Problem]:
    """The problems of one job (see parse_job_list)."""
    return parse_job_list([raw], **kw)[1]


def the_job_problem(raw: dict[str, Any], **kw: Any) -> Problem:
    """The one problem of one job."""
    problems = job_problems(raw, **kw)
    assert len(problems) == 1, problems
    return problems[0]


# ---------------------------------------------------------------------------------------------
# The kinds' builders on their own (tests/test_jobs.py)
# ---------------------------------------------------------------------------------------------

TARGET_AZ = "us-west-2b"
V100_NCCL_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/nccl-tests:sm70-2.16.9"
ETCD = "etcd.training.svc:2379"
CLAIMS = {"fsx": "fsx-claim", "efs": "efs-claim"}
SYSTEM_SELECTOR = {NODE_GROUP_LABEL: "system"}

TARGET_GROUPS = [
    GpuNodeGroupConfig(name="p4d", instanceType="p4d.24xlarge", maxSize=4, taints=[{"key": "team", "value": "vision"}]),
    GpuNodeGroupConfig(name="p3", instanceType="p3.16xlarge", maxSize=4),
    GpuNodeGroupConfig(name="p3dn", instanceType="p3dn.24xlarge", maxSize=4, efa=False),
    GpuNodeGroupConfig(name="p3dn-efa", instanceType="p3dn.24xlarge", maxSize=4),
]
GROUP_TYPE = {g.name: catalog.get(g.instance_type) for g in TARGET_GROUPS}


def make_ctx(**changes: Any) -> J.JobsContext:
    """The jobs' context on TARGET_GROUPS in TARGET_AZ, with ``changes``."""
    values: dict[str, Any] = dict(
        namespace="training",
        targets=job_targets(TARGET_GROUPS, TARGET_AZ),
        claims=dict(CLAIMS),
        etcd_endpoint=ETCD,
        system_node_selector=dict(SYSTEM_SELECTOR),
        cluster_name="gpu-training-test",
        region="us-west-2",
    )
    values.update(changes)
    return J.JobsContext(**values)


def job_spec(kind: str, group: str = "p4d", **over: Any) -> J.JobBase:
    """A realistic job of ``kind`` on ``group`` (config-shaped, camelCase)."""
    common_env = dict(
        env={"EPOCHS": 2, "AMP": True}, secretEnv={"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}}
    )
    volumes = [{"name": "fsx", "mountPath": "/fsx"}, {"name": "efs", "mountPath": "/efs", "readOnly": True}]
    raw: dict[str, Any] = {
        "mpi": dict(
            name="maskrcnn",
            kind="mpi",
            nodeGroup=group,
            nodes=2,
            image=TRAIN_IMAGE,
            command=["python", "/workspace/train_maskrcnn.py"],
            args=["--data", "/fsx/coco"],
            mpirunArgs=["--mca", "pml", "^ucx"],
            volumes=volumes,
            **common_env,
        ),
        "nccl-test": dict(name="nccl", kind="nccl-test", nodeGroup=group),
        "pytorch-elastic": dict(
            name="imagenet",
            kind="pytorch-elastic",
            nodeGroup=group,
            nodes=2,
            minNodes=1,
            maxNodes=3,
            maxRestarts=10,
            image=TRAIN_IMAGE,
            command=["torchrun", "/workspace/main.py"],
            args=["--arch", "resnet50"],
            volumes=volumes,
            **common_env,
        ),
        "paddle": dict(
            name="ctr",
            kind="paddle",
            nodeGroup=group,
            nodes=2,
            mode="ps",
            pservers=2,
            image=TRAIN_IMAGE,
            command=["python", "-m", "paddle.distributed.launch", "train.py"],
            volumes=volumes[1:],
            **common_env,
        ),
        "data-stage": dict(
            name="stage-coco", kind="data-stage", source="s3://ml-datasets/coco/2017", volume="fsx", path="coco/2017"
        ),
        "tensorboard": dict(name="tb", kind="tensorboard", volume="efs", logPath="runs/maskrcnn"),
    }[kind]
    if kind == "nccl-test" and GROUP_TYPE[group].gpu_model not in J.NCCL_TESTS_IMAGE_GPU_MODELS:
        raw["image"] = V100_NCCL_IMAGE
    if kind in ("pytorch-elastic", "paddle", "mpi"):
        # The fabric check, on by default on EFA with 2+ nodes, wraps these workers (mpi: its launcher) in the guard and
        # adds its account (tests/test_fabric_check.py, test_mpi_fabric.py, with fabric=None: the default); the other
        # tests look at the kinds without it.
        raw["fabric"] = "off"
    raw.update(over)
    return J.JOB_KINDS[kind].model_validate(raw)


def built(kind: str, group: str = "p4d", ctx: J.JobsContext | None = None, **over: Any) -> list[dict[str, Any]]:
    """The manifests of ``job_spec(kind, group, **over)``, but the python-etcd ConfigMap a job on the stack's etcd
    ships (tests/test_elastic_images.py checks that one)."""
    manifests = J.build_manifests(job_spec(kind, group, **over), ctx or make_ctx())
    return [m for m in manifests if not (m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("-python-etcd"))]


REPLICA_KEY = {"MPIJob": "mpiReplicaSpecs", "PyTorchJob": "pytorchReplicaSpecs", "PaddleJob": "paddleReplicaSpecs"}


def replicas(cr: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The replica specs of an MPIJob, PyTorchJob or PaddleJob."""
    return cr["spec"][REPLICA_KEY[cr["kind"]]]


# ---------------------------------------------------------------------------------------------
# The job reference's examples (docs/jobs*.md and the pages after it; tests/test_docs.py)
# ---------------------------------------------------------------------------------------------

# The job reference's pages (mkdocs.yml's "Tasks"), read as one text: the examples and field tables may sit on any.
JOB_DOCS = [
    ROOT / "docs" / name
    for name in (
        "jobs.md",
        "jobs-training.md",
        "jobs-tools.md",
        "sagemaker.md",
        "queues.md",
        "topology.md",
        "hangs-and-resume.md",
        "watching-jobs.md",
    )
]
# ```yaml fences, also indented ones (inside list items); the closing fence has the same indent.
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```yaml[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
JOBS_MARKER = "- name:"
GROUPS_MARKER = "gpu-training:gpuNodeGroups:"


def yaml_blocks(text: str) -> list[str]:
    return [textwrap.dedent(m.group("body")) for m in _FENCE.finditer(text)]


DOC_TEXT = "\n".join(p.read_text() for p in JOB_DOCS)
JOB_BLOCKS: list[list[dict[str, Any]]] = [load_yaml(b) for b in yaml_blocks(DOC_TEXT) if b.startswith(JOBS_MARKER)]
ALL_JOBS: list[dict[str, Any]] = [job for block in JOB_BLOCKS for job in block]


def _doc_groups() -> list[dict[str, Any]]:
    found = [load_yaml(b)[GROUPS_MARKER[:-1]] for b in yaml_blocks(DOC_TEXT) if b.startswith(GROUPS_MARKER)]
    assert len(found) == 1, f"the job pages need exactly one ```yaml block starting with {GROUPS_MARKER!r}"
    return found[0]


DOC_GROUPS = _doc_groups()


def with_doc_jobs(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """A config with the docs' node groups and ``jobs``."""
    return minimal_values(gpuNodeGroups=DOC_GROUPS, jobs=jobs)


# ---------------------------------------------------------------------------------------------
# Teams and their queues (tests/test_queues.py)
# ---------------------------------------------------------------------------------------------

TEAM_ROLE_ARN = "arn:aws:iam::111122223333:role/VisionTeam"


def nccl_job(name: str, nodes: int = 1, group: str = "p4d", **extra: Any) -> dict[str, Any]:
    """An nccl-test job of ``nodes`` nodes."""
    return {"name": name, "kind": "nccl-test", "nodeGroup": group, "nodes": nodes, **extra}


def elastic_queue_job(name: str, max_nodes: int, group: str = "p4d", **extra: Any) -> dict[str, Any]:
    """A pytorch-elastic job of 1 to ``max_nodes`` nodes."""
    return {
        "name": name,
        "kind": "pytorch-elastic",
        "nodeGroup": group,
        "minNodes": 1,
        "maxNodes": max_nodes,
        "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1.0",
        "command": ["torchrun"],
        **extra,
    }


# Two teams in one cohort next to the shared queue, the ProvisioningRequest check, and jobs of
# every team (a data-stage and a tensorboard job too, for the webhook scope test).
TEAM_GROUPS = [
    {
        "name": "p4d",
        "instanceType": "p4d.24xlarge",
        "maxSize": 4,
        "taints": [{"key": "team", "value": "ml", "effect": "NoSchedule"}],
    },
    {"name": "p5", "instanceType": "p5.48xlarge", "maxSize": 2},
    {
        "name": "fixed",
        "instanceType": "p4de.24xlarge",
        "minSize": 1,
        "desiredSize": 1,
        "maxSize": 3,
        "autoscale": False,
    },
]
TEAMS = [
    {
        "name": "vision",
        "roleArn": TEAM_ROLE_ARN,
        "fairShareWeight": 2,
        "quotas": [
            {"nodeGroup": "p4d", "nodes": 2, "borrowingLimit": 1, "lendingLimit": 1},
            {"nodeGroup": "p5", "nodes": 1},
        ],
    },
    {"name": "nlp", "namespace": "team-nlp", "quotas": [{"nodeGroup": "p4d", "nodes": 1, "borrowingLimit": 0}]},
]
TEAM_JOBS = [
    nccl_job("vision-nccl", 3, team="vision", priority="high"),
    nccl_job("nlp-nccl", 1, team="nlp", priority="low"),
    nccl_job("shared-nccl", 1),
    elastic_queue_job("shared-elastic", 2, group="p5", rendezvous="c10d"),
    {"name": "stage", "kind": "data-stage", "source": "s3://my-bucket/data/", "volume": "fsx", "path": "data"},
    {"name": "board", "kind": "tensorboard", "volume": "efs", "logPath": "logs"},
]


def team_values(**over: Any) -> dict[str, Any]:
    """TEAMS with their jobs on TEAM_GROUPS, with the ProvisioningRequest check; sections ``over``."""
    values = minimal_values(
        gpuNodeGroups=TEAM_GROUPS, queues={"teams": TEAMS}, autoscaling={"provisioningRequests": True}, jobs=TEAM_JOBS
    )
    for key, value in over.items():
        values[f"{NS}:{key}"] = value
    return values


# ---------------------------------------------------------------------------------------------
# Capacity Blocks (tests/test_capacity_blocks.py)
# ---------------------------------------------------------------------------------------------

UTC = datetime.UTC
START = datetime.datetime(2030, 1, 1, 11, 30, tzinfo=UTC)
END = datetime.datetime(2030, 1, 2, 11, 30, tzinfo=UTC)
CR_ID = "cr-0123456789abcdef0"
BLOCK_ID = "cb-0a1b2c3d4e5f60718"
BLOCK_AZ = "us-west-2b"


def zulu(when: datetime.datetime) -> str:
    """A time as the config writes it: ISO 8601 in UTC, ``Z``."""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def block_group(**over: Any) -> dict[str, Any]:
    """A capacity-block group of 2 p5.48xlarge on CR_ID, from START to END."""
    group: dict[str, Any] = {
        "name": "h100",
        "instanceType": "p5.48xlarge",
        "maxSize": 2,
        "capacityType": "capacity-block",
        "capacityReservationId": CR_ID,
        "capacity": {"start": zulu(START), "end": zulu(END)},
    }
    group.update(over)
    return group


def block_values(*groups: dict[str, Any]) -> dict[str, Any]:
    """A config with ``groups`` in BLOCK_AZ."""
    return minimal_values(gpuAvailabilityZone=BLOCK_AZ, gpuNodeGroups=list(groups))


def answer_ec2(session: Any, operation: str, respond: Callable[[dict], dict[str, Any]]) -> list[dict]:
    """Answer EC2 ``operation`` with ``respond(request body)``; returns the request bodies seen."""
    bodies: list[dict] = []

    def respond_to(request: dict) -> dict[str, Any]:
        bodies.append(dict(request.get("body") or {}))
        return respond(bodies[-1])

    aws_stubs.answer(session, "ec2", operation, respond_to)
    return bodies


def block_reservation(**over: Any) -> dict[str, Any]:
    """DescribeCapacityReservations' item of the block's reservation (a None in ``over`` leaves a key out)."""
    cr = {
        "CapacityReservationId": CR_ID,
        "InstanceType": "p5.48xlarge",
        "AvailabilityZone": BLOCK_AZ,
        "State": "scheduled",
        "ReservationType": "capacity-block",
        "TotalInstanceCount": 2,
        "AvailableInstanceCount": 2,
        "StartDate": START,
        "EndDate": END,
        "CapacityBlockId": BLOCK_ID,
        "Tenancy": "default",
        "InstancePlatform": "Linux/UNIX",
    }
    cr.update(over)
    return {k: v for k, v in cr.items() if v is not None}


def capacity_block(**over: Any) -> dict[str, Any]:
    """DescribeCapacityBlocks' item of the block."""
    b = {
        "CapacityBlockId": BLOCK_ID,
        "AvailabilityZone": BLOCK_AZ,
        "CapacityReservationIds": [CR_ID],
        "StartDate": START,
        "EndDate": END,
        "CreateDate": START - datetime.timedelta(days=10),
        "State": "scheduled",
    }
    b.update(over)
    return b


# ---------------------------------------------------------------------------------------------
# AWS's recorded instance types (moto's DescribeInstanceTypes data; tests/test_catalog.py)
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def recorded() -> dict[str, dict[str, Any]]:
    """moto's recording of EC2 DescribeInstanceTypes: instance type -> its item."""
    with gzip.open(Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz") as f:
        data: dict[str, dict[str, Any]] = json.loads(f.read())
    return data


def _efa(item: dict[str, Any]) -> bool:
    return bool((item.get("NetworkInfo") or {}).get("EfaSupported"))


RECORDED_EFA_TYPES = sorted(n for n, item in recorded().items() if _efa(item))
RECORDED_EFA_GPU_TYPES = sorted(n for n in RECORDED_EFA_TYPES if (recorded()[n].get("GpuInfo") or {}).get("Gpus"))


# ---------------------------------------------------------------------------------------------
# The node monitoring agent's chart, rendered (tests/test_node_monitoring_agent.py)
# ---------------------------------------------------------------------------------------------

HELM = TOOLS_BIN / "helm"
AGENT = "eks-node-monitoring-agent"
AGENT_NAMESPACE = "kube-system"  # where EKS installs the add-on (the chart uses the release namespace)


def render_agent(chart: str, k8s: str, values: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The agent's ``chart`` rendered by the real helm for Kubernetes ``k8s`` with ``values``
    (None: the chart's own)."""
    cmd = [
        str(HELM),
        "template",
        AGENT,
        str(ROOT / chart),
        "--namespace",
        AGENT_NAMESPACE,
        "--kube-version",
        f"{k8s}.0",
        "--include-crds",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        if values is not None:
            path = Path(tmp) / "values.json"
            path.write_text(json.dumps(values))  # JSON is YAML
            cmd += ["-f", str(path)]
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return yaml_objects(text)


# Preflight tests


def cfg_of(values: dict[str, Any], stack: str = "dev") -> stack_config.StackConfig:
    return stack_config.load(values, "gpu-training", stack)


def dev_cfg(**sections: Any) -> stack_config.StackConfig:
    values = dev_values()
    for key, value in sections.items():
        values[f"{NS}:{key}"] = value
    return cfg_of(values)


def by_check(results: list[preflight.CheckResult], prefix: str) -> preflight.CheckResult:
    found = [r for r in results if r.check.startswith(prefix)]
    assert len(found) == 1, f"{len(found)} results for {prefix!r}: {[r.line() for r in results]}"
    return found[0]


def render_kueue(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    cmd = [str(HELM), "template", "kueue", str(ROOT / versions.KUEUE_CHART.file), "--namespace", KUEUE_NAMESPACE]
    cmd += ["--kube-version", f"{versions.KUBERNETES_DEFAULT}.0"]
    with tempfile.TemporaryDirectory() as tmp:
        if values is not None:
            path = Path(tmp) / "values.json"
            path.write_text(json.dumps(values))
            cmd += ["-f", str(path)]
        text = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return yaml_objects(text)  # (1.7 MB of CRDs)
