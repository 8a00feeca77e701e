"""Integration test: the SageMaker runtime's hyperparameters, read by SageMaker's own training toolkit.

``jobs/sagemaker/training_job.py`` claims that an ``mpi``/``pytorch-elastic`` spec with ``runtime: sagemaker`` runs
the same script with the same arguments as on EKS: the script's ``--name value`` arguments become
JSON-encoded hyperparameters, which the framework container passes back as the same ``--name value``
arguments. Here the container's side is the real code of the SageMaker training toolkit
(``sagemaker-training``, the package in every ``-sagemaker`` Deep Learning Container), from its sdist:

- ``environment.Environment()``, run as at container start: it reads the ``hyperparameters.json``,
  ``inputdataconfig.json`` and ``resourceconfig.json`` SageMaker writes from the CreateTrainingJob
  request (``read_hyperparameters`` json-decodes each value), splits off the ``sagemaker_*`` ones and
  gives the user's back through ``to_cmd_args`` (``mapping.py``);
- ``process.ProcessRunner._create_command``: the script's argv (it validates ``sagemaker_program``);
- ``mpi._parse_custom_mpi_options``: how ``sagemaker_mpi_custom_mpi_options`` reaches mpirun. ``mpi.py``
  imports paramiko, psutil and the toolkit's C extension, so this one function is taken out of the
  real file with ``ast`` and run on its own (it needs only ``argparse``);
- ``SM_EFA_NCCL_INSTANCES`` / ``SM_EFA_RDMA_INSTANCES`` (``sagemaker_training/__init__.py``): the ml.
  types on which the toolkit's mpirun turns on EFA and GPUDirect RDMA.

The package builds a C extension, so it is not installed: ``bash scripts/test_integration.sh``
downloads the sdist (``pip download --no-binary :all:``) and unpacks it into ``.tools/sagemaker-training``;
``$SAGEMAKER_TRAINING_SRC`` may name another unpacked copy. Without it the module is skipped. The
toolkit's pure-Python modules are imported from ``src/`` with ``SAGEMAKER_BASE_DIR`` (its stand-in for
``/opt/ml``) set to a temp dir; the toolkit needs ``boto3`` and ``six``, which ``.venv`` has.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import re
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from facts import catalog
from facts.paths import TOOLS_BIN
from facts.problems import Problem
from jobs.registry import JOB_KINDS
from jobs.sagemaker import FileSystemTarget, PortableJob, SageMakerJob

TOOLKIT_PACKAGE = "sagemaker-training"
TOOLKIT_VERSION = "5.1.4"  # the version scripts/test_integration.sh downloads
SOURCE_VAR = "SAGEMAKER_TRAINING_SRC"
DEFAULT_SOURCE = TOOLS_BIN.parent / "sagemaker-training" / f"sagemaker_training-{TOOLKIT_VERSION}"
BASE_DIR_VAR = "SAGEMAKER_BASE_DIR"  # environment.BASE_PATH_ENV: read when environment.py is imported

IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
REGION = "us-west-2"
STACK_ID = "organization/gpu-training/dev"
CODE_DIR = "/opt/ml/input/data/efs/code/train"
VOLUMES = [
    {"name": "fsx", "mountPath": "/opt/ml/input/data/fsx", "readOnly": True},
    {"name": "efs", "mountPath": "/opt/ml/input/data/efs"},
]
# What the stack's resources are once they exist (create_request needs them; the values do not matter here).
ROLE_ARN = "arn:aws:iam::123456789012:role/toolkit-test"
FILE_SYSTEMS = {
    "fsx": FileSystemTarget("FSxLustre", "fs-0123456789abcdef0", "abcdefgh"),
    "efs": FileSystemTarget("EFS", "fs-0fedcba9876543210"),
}


# ---------------------------------------------------------------------------------------------
# The toolkit
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolkit:
    """The toolkit's modules and facts this test uses."""

    root: Path  # the unpacked sdist
    package: ModuleType  # sagemaker_training
    params: ModuleType
    mapping: ModuleType
    environment: ModuleType
    process: ModuleType
    parse_custom_mpi_options: Callable[[str], tuple[argparse.Namespace, list[str]]]  # mpi._parse_custom_mpi_options

    @property
    def src(self) -> Path:
        return self.root / "src" / "sagemaker_training"

    def hyperparameter_names(self) -> set[str]:
        """The ``sagemaker_*`` hyperparameters the toolkit reads: the constants of ``params.py``, plus
        the distribution switches ``Environment`` reads by literal name (``sagemaker_torch_distributed_enabled``...)."""
        prefix = self.params.SAGEMAKER_PREFIX
        names = {v for k, v in vars(self.params).items() if k.isupper() and isinstance(v, str) and v.startswith(prefix)}
        tree = ast.parse((self.src / "environment.py").read_text())
        (switch,) = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and n.name == "get_distribution_instance_groups_from_resource_config"
        ]
        names |= {
            n.value
            for n in ast.walk(switch)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(prefix)
        }
        return names


def toolkit_root() -> Path:
    """The unpacked sdist: $SAGEMAKER_TRAINING_SRC, else the copy scripts/test_integration.sh unpacks."""
    override = os.environ.get(SOURCE_VAR)
    root = Path(override) if override else DEFAULT_SOURCE
    if not (root / "src" / "sagemaker_training" / "environment.py").is_file():
        if override:
            pytest.fail(
                f"{SOURCE_VAR}={override!r} is not an unpacked {TOOLKIT_PACKAGE} "
                "sdist (no src/sagemaker_training/environment.py)"
            )
        pytest.skip(
            f"{TOOLKIT_PACKAGE} {TOOLKIT_VERSION} source is not at {root}: run `bash "
            "scripts/test_integration.sh`, which downloads and unpacks it "
            f"(or set {SOURCE_VAR} to an unpacked sdist)"
        )
    info = (root / "PKG-INFO").read_text(errors="replace")
    version = re.search(r"^Version: (\S+)$", info, re.MULTILINE)
    if version is None or version.group(1) != TOOLKIT_VERSION:
        pytest.fail(
            f"{root} is {TOOLKIT_PACKAGE} {version.group(1) if version else '?'}, "
            f"this test is written against {TOOLKIT_VERSION}"
        )
    return root


@contextmanager
def restored_environ() -> Iterator[None]:
    """os.environ as it was, afterwards (the toolkit sets variables when it imports and reads its config)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def extract_function(path: Path, name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """Module-level function ``name`` of the file at ``path``, compiled on its own in ``namespace``."""
    tree = ast.parse(path.read_text(), str(path))
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


@pytest.fixture(scope="module")
def toolkit(tmp_path_factory: pytest.TempPathFactory) -> Toolkit:
    root = toolkit_root()
    src = root / "src"
    base = tmp_path_factory.mktemp("opt-ml")  # the container's /opt/ml
    (base / "input" / "config").mkdir(parents=True)
    for name in [m for m in sys.modules if m == "sagemaker_training" or m.startswith("sagemaker_training.")]:
        del sys.modules[name]  # this copy, not another one
    sys.path.insert(0, str(src))
    try:
        with restored_environ():
            os.environ[BASE_DIR_VAR] = str(base)
            modules = {
                m: importlib.import_module(f"sagemaker_training{m and '.' + m}")
                for m in ("", "params", "mapping", "environment", "process")
            }
    finally:
        sys.path.remove(str(src))
    for module in modules.values():
        assert Path(module.__file__ or "").is_relative_to(src), (
            f"{module.__name__} came from {module.__file__}, not {src}"
        )
    environment = modules["environment"]
    assert environment.base_dir == str(base), "the toolkit did not take SAGEMAKER_BASE_DIR as its /opt/ml"
    parse = extract_function(src / "sagemaker_training" / "mpi.py", "_parse_custom_mpi_options", {"argparse": argparse})
    return Toolkit(root, modules[""], modules["params"], modules["mapping"], environment, modules["process"], parse)


@dataclass
class Container:
    """What the toolkit makes of a training job's config on one host."""

    env: Any  # environment.Environment
    hyperparameters: dict[str, Any]  # environment.read_hyperparameters()
    hosts: list[str]
    environ: dict[str, str]  # os.environ after Environment() (it exports the region, host and job name)


def container(tk: Toolkit, job: SageMakerJob, current_host: str = "algo-1") -> Container:
    """Start the toolkit as SageMaker does: write /opt/ml/input/config/*.json from the job's
    CreateTrainingJob request, then ``Environment()`` reads them."""
    request = job.create_request(ROLE_ARN, ["sg-0123456789abcdef0"], ["subnet-0123456789abcdef0"], FILE_SYSTEMS)
    hosts = [f"algo-{i + 1}" for i in range(request["ResourceConfig"]["InstanceCount"])]
    instance_type = request["ResourceConfig"]["InstanceType"]
    channels = {
        c["ChannelName"]: {
            "TrainingInputMode": c["InputMode"],
            "S3DistributionType": "FullyReplicated",
            "RecordWrapperType": "None",
        }
        for c in request.get("InputDataConfig", [])
    }
    resources = {
        "current_host": current_host,
        "current_instance_type": instance_type,
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "instance_groups": [
            {"instance_group_name": "homogeneousCluster", "instance_type": instance_type, "hosts": hosts}
        ],
        "network_interface_name": "eth0",
    }
    e = tk.environment
    for path, content in (
        (e.hyperparameters_file_dir, request["HyperParameters"]),
        (e.input_data_config_file_dir, channels),
        (e.resource_config_file_dir, resources),
    ):
        Path(path).write_text(json.dumps(content))
    with restored_environ():
        env = e.Environment()
        environ = dict(os.environ)
    return Container(env, e.read_hyperparameters(), hosts, environ)


def script_argv(tk: Toolkit, c: Container) -> list[str]:
    """The arguments the toolkit starts the entry script with (after the script's name): what
    ``ProcessRunner`` builds, which the MPI and torchrun runners put after their own launchers."""
    program = c.env.user_entry_point
    cmd = tk.process.ProcessRunner(program, c.env.to_cmd_args(), {}, 1)._create_command()
    if cmd[:2] == ["/bin/sh", "-c"]:  # a .sh entry point: one shell string
        words = shlex.split(cmd[2])
        assert words[0] == f"./{program}", cmd
        return words[1:]
    assert cmd[1:3] == ["--", program], cmd
    return cmd[3:]


# ---------------------------------------------------------------------------------------------
# Specs, and the script's own argument parser
# ---------------------------------------------------------------------------------------------


def spec(kind: str, script: str, args: Sequence[str], **fields: Any) -> PortableJob:
    """A checked ``runtime: sagemaker`` spec of ``kind`` that runs ``script`` with ``args``
    (``mpi-sh``: an ``mpi`` job whose entry point is a shell script, run without a launcher)."""
    sagemaker = {"outputPath": "s3://my-training-output/toolkit/", **fields.pop("sagemaker", {})}
    base: dict[str, Any] = {
        "runtime": "sagemaker",
        "nodeGroup": "p4d",
        "nodes": 2,
        "image": IMAGE,
        "volumes": VOLUMES,
        "sagemaker": sagemaker,
    }
    if kind == "pytorch-elastic":
        data = {**base, "name": "toolkit-ddp", "kind": kind, "command": ["torchrun"], "args": [script, *args]}
    elif kind == "mpi":
        data = {**base, "name": "toolkit-mpi", "kind": kind, "command": ["python", script], "args": list(args)}
    else:
        assert kind == "mpi-sh", kind
        data = {**base, "name": "toolkit-mpi-sh", "kind": "mpi", "command": [script], "args": list(args)}
    job = JOB_KINDS[data["kind"]].model_validate({**data, **fields})
    assert isinstance(job, PortableJob)
    return job


def problems_of(job: PortableJob) -> list[Problem]:
    problems: list[Problem] = []
    job.check("jobs[0]", problems)
    return problems


def sagemaker_job(job: PortableJob, instance_type: str = "ml.p4d.24xlarge") -> SageMakerJob:
    assert problems_of(job) == []
    instance = catalog.get_sagemaker(instance_type)
    assert instance is not None
    return job.sagemaker_job(instance, REGION, STACK_ID)


class ArgumentError(Exception):
    pass


class ScriptParser(argparse.ArgumentParser):
    """The training script's parser: raises instead of exiting."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        raise ArgumentError(message)


def option_names(args: Sequence[str]) -> list[str]:
    """The option names of ``--name value`` / ``--name=value`` arguments."""
    names, i = [], 0
    while i < len(args):
        assert args[i].startswith("--"), args
        name, eq, _ = args[i][2:].partition("=")
        names.append(name)
        i += 1 if eq else 2
    return names


def parse_script_args(names: Sequence[str], argv: Sequence[str]) -> dict[str, str | None]:
    """What a script whose argparse parser has a str option for each name gets from ``argv``."""
    parser = ScriptParser(prog="train.py", add_help=False, allow_abbrev=False)
    for name in names:
        parser.add_argument(f"--{name}", dest=name, type=str)
    return vars(parser.parse_args(list(argv)))


def assert_same_arguments(eks_args: Sequence[str], sagemaker_argv: Sequence[str]) -> None:
    names = option_names(eks_args)
    want = parse_script_args(names, eks_args)
    try:
        got = parse_script_args(names, sagemaker_argv)
    except ArgumentError as e:
        raise AssertionError(
            f"the script's parser rejects the container's arguments {list(sagemaker_argv)}: {e}"
        ) from None
    assert got == want, f"EKS args {list(eks_args)} -> SageMaker argv {list(sagemaker_argv)}"


# ---------------------------------------------------------------------------------------------
# 1. The script gets the same arguments
# ---------------------------------------------------------------------------------------------

SCRIPTS = {
    "mpi": f"{CODE_DIR}/train.py",
    "mpi-sh": f"{CODE_DIR}/train.sh",
    "pytorch-elastic": f"{CODE_DIR}/train.py",
}

ARGUMENTS = {
    "none": [],
    "paths-and-numbers": [
        "--data",
        "/opt/ml/input/data/fsx/imagenet",
        "--epochs",
        "90",
        "--lr",
        "0.1",
        "--seed",
        "007",
    ],
    "spaces": ["--note", "two words  here", "--padded", " x ", "--multiline", "a\nb"],
    "booleans-and-null": ["--amp", "true", "--resume", "false", "--ckpt", "null", "--none", "None"],
    "negative-numbers": ["--bias", "-0.5", "--offset", "-3", "--eps", "1e-8", "--scale", "-.5"],
    "equals-in-values": ["--opts", "a=1,b=2", "--query", "x==y"],
    "json-looking": [
        "--layers",
        "[1,2]",
        "--cfg",
        '{"a":1}',
        "--quoted",
        '"q"',
        "--big",
        "12345678901234567890",
        "--float",
        "1.0",
    ],
    "name=value-form": [
        "--lr=0.1",
        "--opts=a=1,b=2",
        "--empty=",
        "--note=two words",
        "--bias=-0.5",
        '--cfg={"a": [1, 2]}',
    ],
    "mixed-forms-and-names": [
        "--learning-rate",
        "3e-4",
        "--max_steps=1000",
        "--Mixed.Case",
        "v",
        "--unicode",
        "Zürich ✓",
    ],
    "shell-characters": ["--glob", "*.tfrecord", "--cmd", "$(echo hi); `x` | y > z", "--quote", 'it\'s "ok"'],
}


@pytest.mark.parametrize("case", list(ARGUMENTS))
@pytest.mark.parametrize("kind", list(SCRIPTS))
def test_script_gets_the_same_arguments(toolkit: Toolkit, kind: str, case: str) -> None:
    """The EKS job's arguments after the script, parsed by the script's argparse parser, give exactly
    what the arguments the toolkit starts the script with give (hyperparameters.json -> Environment ->
    to_cmd_args -> ProcessRunner)."""
    args = ARGUMENTS[case]
    job = sagemaker_job(spec(kind, SCRIPTS[kind], args))
    c = container(toolkit, job)
    prefix = toolkit.params.SAGEMAKER_PREFIX
    # Environment's user hyperparameters are the decoded ones without the sagemaker_* (and the other
    # SAGEMAKER_HYPERPARAMETERS) names: what to_cmd_args turns into --name value.
    user = {
        k: v
        for k, v in c.hyperparameters.items()
        if not k.startswith(prefix) and k not in toolkit.params.SAGEMAKER_HYPERPARAMETERS
    }
    assert c.env.hyperparameters == user
    assert set(user) == set(option_names(args))
    cmd_args = toolkit.mapping.to_cmd_args(user)
    assert cmd_args == c.env.to_cmd_args()
    assert all(isinstance(a, str) for a in cmd_args), cmd_args  # a decoded number or bool would reach argv as its str()
    argv = script_argv(toolkit, c)
    assert argv == cmd_args
    assert_same_arguments(args, argv)


# ---------------------------------------------------------------------------------------------
# 2. The sagemaker_* hyperparameters are the toolkit's, with the types it uses
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("instance_type", catalog.SAGEMAKER_TYPES)
@pytest.mark.parametrize("kind", ["mpi", "pytorch-elastic"])
def test_sagemaker_hyperparameters_are_the_toolkits(toolkit: Toolkit, kind: str, instance_type: str) -> None:
    p = toolkit.params
    job = sagemaker_job(
        spec(
            kind,
            SCRIPTS[kind],
            ["--epochs", "2"],
            env={"HOROVOD_CYCLE_TIME": "0.5"},
            sagemaker={"instanceType": instance_type},
        ),
        instance_type,
    )
    instance = catalog.get_sagemaker(instance_type)
    assert instance is not None
    c = container(toolkit, job)
    ours = {k: v for k, v in c.hyperparameters.items() if k.startswith(p.SAGEMAKER_PREFIX)}
    unknown = set(ours) - toolkit.hyperparameter_names()
    assert not unknown, f"sagemaker_* hyperparameters the toolkit does not read: {sorted(unknown)}"

    expected: dict[str, Any] = {
        p.USER_PROGRAM_PARAM: "train.py",
        p.SUBMIT_DIR_PARAM: CODE_DIR,
        p.REGION_NAME_PARAM: REGION,
    }
    if kind == "mpi":
        expected |= {
            p.MPI_ENABLED: True,
            p.MPI_PROCESSES_PER_HOST: instance.gpus,
            p.MPI_CUSTOM_OPTIONS: ours.get(p.MPI_CUSTOM_OPTIONS),
        }
        assert type(ours.get(p.MPI_CUSTOM_OPTIONS)) is str
    else:
        expected["sagemaker_torch_distributed_enabled"] = (
            True  # read by literal name (Environment and the PyTorch container)
        )
    assert ours == expected
    # Types exactly: the MPI runner multiplies and formats processes per host ("algo-1:8"), and tests
    # the switches for truth; a JSON string "8" or "false" would be a str there.
    assert {k: type(v) for k, v in ours.items()} == {k: type(v) for k, v in expected.items()}

    env = c.env
    assert env.user_entry_point == "train.py"
    assert env.module_dir == CODE_DIR
    assert c.environ[p.REGION_NAME_ENV] == REGION
    assert env.additional_framework_parameters == {
        k: v for k, v in ours.items() if k not in p.SAGEMAKER_HYPERPARAMETERS
    }
    # The distribution switch is one the toolkit acts on: every host takes part.
    assert env.distribution_hosts == c.hosts
    assert env.is_master
    # The volumes are the toolkit's channels, at the path the job mounts them on EKS too.
    assert {name: Path(path) for name, path in env.channel_input_dirs.items()} == {
        v["name"]: Path(toolkit.environment.base_dir) / Path(v["mountPath"]).relative_to("/opt/ml") for v in VOLUMES
    }


# ---------------------------------------------------------------------------------------------
# 3. sagemaker_mpi_custom_mpi_options reaches mpirun as intended
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "instance_type, mpirun_args",
    [
        ("ml.p4d.24xlarge", ["--mca", "pml", "ob1", "--mca", "btl", "^openib", "--report-bindings"]),
        ("ml.p3dn.24xlarge", ["-mca", "btl_tcp_if_exclude", "lo,docker0", "-x", "HOROVOD_TIMELINE=/tmp/timeline.json"]),
        ("ml.p3.8xlarge", []),
    ],
)
def test_custom_mpi_options(toolkit: Toolkit, instance_type: str, mpirun_args: list[str]) -> None:
    env_values = {
        "HOROVOD_CYCLE_TIME": "0.5",
        "HOROVOD_FUSION_THRESHOLD": 67108864,
        "TF_ENABLE_AUTO_MIXED_PRECISION": True,
    }
    job = sagemaker_job(
        spec(
            "mpi", SCRIPTS["mpi"], [], env=env_values, mpirunArgs=mpirun_args, sagemaker={"instanceType": instance_type}
        ),
        instance_type,
    )
    c = container(toolkit, job)
    options = c.env.additional_framework_parameters[toolkit.params.MPI_CUSTOM_OPTIONS]
    known, extra = toolkit.parse_custom_mpi_options(options)
    assert known.NCCL_DEBUG == "INFO", "the options override the toolkit's NCCL_DEBUG"
    forwarded = [a for name in job.environment for a in ("-x", name)]
    assert extra == [*mpirun_args, *forwarded]
    # Every variable of the job reaches the ranks, the EFA ones included where the type has EFA.
    efa = {
        "ml.p4d.24xlarge": {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE"},
        "ml.p3dn.24xlarge": {"FI_PROVIDER", "FI_EFA_FORK_SAFE"},
    }
    assert set(job.environment) == set(env_values) | efa.get(instance_type, set())


# ---------------------------------------------------------------------------------------------
# 4. The catalog's EFA facts agree with the toolkit's
# ---------------------------------------------------------------------------------------------


# EFA types of the catalog that toolkit 5.1.4's lists predate: its launcher does not turn EFA on for
# them, so the job's own environment does (FI_PROVIDER=efa, and FI_EFA_USE_DEVICE_RDMA=1 from the
# catalog). Listed here so that every type added to the catalog is looked at against the toolkit.
NEWER_THAN_THE_TOOLKIT = {"ml.p5.4xlarge", "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge"}


@pytest.mark.parametrize("instance_type", catalog.SAGEMAKER_TYPES)
def test_catalog_efa_facts_agree_with_the_toolkit(toolkit: Toolkit, instance_type: str) -> None:
    """The toolkit's mpirun adds ``-x FI_PROVIDER=efa`` on SM_EFA_NCCL_INSTANCES and
    ``-x FI_EFA_USE_DEVICE_RDMA=1`` on SM_EFA_RDMA_INSTANCES; the catalog, and the env a job gets
    from it, say the same of every ml. type the toolkit knows. On the EFA types newer than its lists
    the job's env turns EFA on by itself."""
    t = catalog.get_sagemaker(instance_type)
    assert t is not None
    nccl, rdma = toolkit.package.SM_EFA_NCCL_INSTANCES, toolkit.package.SM_EFA_RDMA_INSTANCES
    if instance_type in NEWER_THAN_THE_TOOLKIT:
        assert t.efa_supported and instance_type not in nccl and instance_type not in rdma
    else:
        assert t.efa_supported == (instance_type in nccl)
        assert t.efa_rdma == (instance_type in rdma)
    job = sagemaker_job(spec("mpi", SCRIPTS["mpi"], [], sagemaker={"instanceType": instance_type}), instance_type)
    assert job.efa == t.efa_supported
    assert (job.environment.get("FI_PROVIDER") == "efa") == t.efa_supported
    assert (job.environment.get("FI_EFA_USE_DEVICE_RDMA") == "1") == t.efa_rdma


def test_toolkit_lists_are_read(toolkit: Toolkit) -> None:
    """The lists the test compares with are the ones in __init__.py (not emptied by a refactoring)."""
    tree = ast.parse((toolkit.src / "__init__.py").read_text())
    lists = {
        t.id: ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id.startswith("SM_EFA_")
    }
    assert lists == {
        "SM_EFA_NCCL_INSTANCES": toolkit.package.SM_EFA_NCCL_INSTANCES,
        "SM_EFA_RDMA_INSTANCES": toolkit.package.SM_EFA_RDMA_INSTANCES,
    }
    assert "ml.p4d.24xlarge" in lists["SM_EFA_RDMA_INSTANCES"]


# ---------------------------------------------------------------------------------------------
# Mismatches found: specs the checks accept whose script does not start, or not with its arguments
# ---------------------------------------------------------------------------------------------


def accepted_or_round_trips(toolkit: Toolkit, job: PortableJob, eks_args: Sequence[str]) -> None:
    """Either the spec is refused for runtime sagemaker, or its script gets the same arguments."""
    if problems_of(job):
        return
    c = container(toolkit, sagemaker_job(job))
    try:
        argv = script_argv(toolkit, c)
    except toolkit.package.errors.ClientError as e:
        raise AssertionError(f"the checks accept the spec, the toolkit refuses to start it: {e}") from None
    assert_same_arguments(eks_args, argv)


@pytest.mark.parametrize(
    "args", [["--extra=--fp16"], ["--suffix=-x"], ["--range=-a:b"]], ids=["double-dash", "dash-letter", "dash-word"]
)
def test_a_value_that_looks_like_an_option_is_refused(toolkit: Toolkit, args: list[str]) -> None:
    # The toolkit would pass it back as --name VALUE, which argparse reads as an option.
    job = spec("pytorch-elastic", SCRIPTS["pytorch-elastic"], args)
    assert [p.key for p in problems_of(job)] == ["jobs[0].args"]
    accepted_or_round_trips(toolkit, job, args)


@pytest.mark.parametrize("name", ["default_user_module_name", "_tuning_objective_metric"])
def test_the_toolkits_reserved_names_are_refused(toolkit: Toolkit, name: str) -> None:
    # The toolkit keeps these for itself: the script would never see them.
    assert name in toolkit.params.SAGEMAKER_HYPERPARAMETERS and not name.startswith(toolkit.params.SAGEMAKER_PREFIX)
    args = [f"--{name}", "value", "--epochs", "2"]
    job = spec("mpi", SCRIPTS["mpi"], args)
    assert [p.key for p in problems_of(job)] == ["jobs[0].args"]
    accepted_or_round_trips(toolkit, job, args)


def test_every_reserved_name_of_the_toolkit_is_refused(toolkit: Toolkit) -> None:
    for name in toolkit.params.SAGEMAKER_HYPERPARAMETERS:
        args = [f"--{name}", "value"]
        assert problems_of(spec("mpi", SCRIPTS["mpi"], args)), name


@pytest.mark.parametrize(
    "kind, script, sagemaker",
    [
        ("pytorch-elastic", "./train.py", {"sourceDir": "s3://my-training-code/bert/sourcedir.tar.gz"}),
        ("mpi", f"{CODE_DIR}/my train.py", {}),
        ("mpi", f"{CODE_DIR}/train.py", {"sourceDir": "/opt/ml/input/data/efs/code", "entryPoint": "train/./train.py"}),
    ],
    ids=["dot-segment", "space-in-name", "entryPoint-dot-segment"],
)
def test_an_entry_point_is_refused_or_the_toolkit_starts_it(
    toolkit: Toolkit, kind: str, script: str, sagemaker: dict[str, str]
) -> None:
    args = ["--epochs", "2"]
    accepted_or_round_trips(toolkit, spec(kind, script, args, sagemaker=sagemaker), args)
