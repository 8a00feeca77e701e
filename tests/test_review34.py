"""Review of issue 34: what a new user's realistic spellings still got past the rules, each refused
naming the key, the value and what is allowed (and the correct forms still accepted)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import JOBS_KEY as KEY
from tests.helpers import TRAIN_IMAGE, elastic_job
from tests.helpers import parse_job_list as parse

PROGRESS = {"logPattern": "step \\d+"}


def mpi_job(**over: Any) -> dict[str, Any]:
    base = {"name": "maskrcnn", "kind": "mpi", "nodeGroup": "p4d", "nodes": 2, "image": TRAIN_IMAGE}
    return {**base, "command": ["python", "train.py"], **over}


@pytest.mark.parametrize(
    "command, at, shown",
    [
        (["env", "FOO=1", "torchrun", "--nnodes", "2", "t.py"], 3, "'--nnodes 2'"),
        (["/usr/bin/env", "-u", "X", "NCCL_DEBUG=INFO", "torchrun", "--nproc-per-node=4", "t.py"], 5, "=4'"),
        (["env", "-i", "python3", "-u", "-m", "torch.distributed.run", "--standalone", "t.py"], 6, "'--standalone'"),
        (["bash", "-c", "A=1 env -u B C=2 torchrun --max-restarts 3 t.py"], 2, "'--max-restarts 3'"),
    ],
)
def test_torchrun_behind_env_is_found(command, at, shown):
    """``env FOO=1 torchrun ...`` (coreutils env(1)) runs torchrun like the bare line: its options count."""
    problems = parse([elastic_job(command=command)])[1]
    assert [p.key for p in problems] == [f"{KEY}[imagenet].command[{at}]"], problems
    assert shown in problems[0].message and "which the stack derives" in problems[0].message


@pytest.mark.parametrize(
    "command, at",
    [
        (["env", "A=1", "mpiexec", "python", "train.py"], 0),
        (["/usr/bin/env", "-C", "/work", "mpirun", "python", "train.py"], 0),
        (["bash", "-c", "env -i /opt/amazon/openmpi/bin/mpirun python train.py"], 2),
    ],
)
def test_mpirun_behind_env_in_an_mpi_jobs_command_is_refused(command, at):
    problems = parse([mpi_job(command=command)])[1]
    assert [p.key for p in problems] == [f"{KEY}[maskrcnn].command[{at}]"], problems
    assert "every rank would start another mpirun" in problems[0].message


@pytest.mark.parametrize(
    "command", [["env", "FOO=1", "python", "train.py"], ["env", "torchrun-helper", "--nnodes", "2"], ["env"]]
)
def test_env_without_a_launcher_is_accepted(command):
    assert parse([mpi_job(command=command)])[1] == []
    assert parse([elastic_job(command=command)])[1] == []


def test_the_guard_goes_after_torchrun_behind_env():
    """The progress guard is torchrun's training script (one per worker), not a wrapper of env."""
    spec = parse([elastic_job(command=["env", "FOO=1", "torchrun", "t.py"], progress=PROGRESS)])[0][0]
    command, args = spec.worker_line()
    assert command[:3] == ["env", "FOO=1", "torchrun"] and command[3].endswith("progress_guard.py")
    assert args == ["t.py"]


# ---------------------------------------------------------------------------------------------
# infra diff: values old -> new
# ---------------------------------------------------------------------------------------------


def _pod(env: list[dict[str, str]]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "pytorch", "env": env}]}}


@pytest.mark.parametrize("name", ["HF_TOKEN", "WANDB_API_KEY", "DB_PASSWORD"])
def test_a_containers_env_var_named_as_a_secret_is_masked(name):
    """SageMaker's Environment.HF_TOKEN was masked (a map key naming a secret), the same variable in a
    pod's env ({name: HF_TOKEN, value: ...}) was shown old -> new in the PR comment."""
    from infra.diff import values

    old = _pod([{"name": "A", "value": "1"}, {"name": name, "value": "hf_old_value"}])
    new = _pod([{"name": "A", "value": "1"}, {"name": name, "value": "hf_new_value"}])
    assert values.change(old, new, "spec.containers[0].env[1].value")[:2] == (values.MASK, values.MASK)
    whole = values.change(old, new, "spec.containers[0].env")
    assert "hf_" not in whole[0] + whole[1], whole
    assert values.change(old, _pod([{"name": "A", "value": "2"}]), "spec.containers[0].env[0].value")[:2] == ("1", "2")


@pytest.mark.parametrize("args, shown", [(["-npersocket", "4"], "'-npersocket 4'"), (["--npersocket=8"], "=8'")])
def test_npersocket_is_refused_like_its_ppr_socket_mapping(args, shown):
    """Open MPI's -npersocket N is --map-by ppr:N:socket in its deprecated spelling (orterun(1))."""
    problems = parse([mpi_job(mpirunArgs=args)])[1]
    assert [p.key for p in problems] == [f"{KEY}[maskrcnn].mpirunArgs[0]"], problems
    assert (
        shown in problems[0].message
        and "ppr:" in problems[0].message
        and "which the stack derives" in problems[0].message
    )


@pytest.mark.parametrize(
    "name", ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_RDZV_ENDPOINT", "PET_MAX_RESTARTS", "PET_STANDALONE"]
)
def test_torchruns_pet_variables_in_env_are_refused(name):
    """PET_<OPTION> is torchrun's option by another name: the family of the derived options and env names."""
    problems = parse([elastic_job(command=["torchrun", "t.py"], env={name: "1"})])[1]
    assert [p.key for p in problems] == [f"{KEY}[imagenet].env.{name}"], problems
    assert "which the stack derives" in problems[0].message and "remove it" in problems[0].message


def test_other_pet_like_names_are_accepted():
    assert parse([elastic_job(command=["torchrun", "t.py"], env={"PET_LOG_DIR": "/tmp/logs", "PETS": "1"})])[1] == []
