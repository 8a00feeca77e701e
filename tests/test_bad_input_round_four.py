"""Bad input, round four (issue 34, items 1-6): mistakes against Capacity Block windows, progress,
taints, launchers, env and flags that were accepted and break on a real cluster. Each is refused
naming the key, the value and what is allowed; through the plan command, with exit 2, nothing
planned and no traceback.
"""

from __future__ import annotations

import copy
import datetime
import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import plan as plan_mod
from stacks import config as stack_config
from tests.helpers import (
    CR_ID,
    END,
    NS,
    ROOT,
    START,
    TRAIN_IMAGE,
    block_group,
    block_values,
    elastic_job,
    minimal_values,
    zulu,
)
from tests.helpers import JOBS_KEY as KEY
from tests.helpers import load_values as load
from tests.helpers import parse_job_list as parse

GROUP = f"{NS}:gpuNodeGroups[h100]"  # block_group
P4D = f"{NS}:gpuNodeGroups[p4d]"  # minimal_values
PROGRESS = {"logPattern": "step \\d+"}


def problems_of(values: dict[str, Any]) -> list[stack_config.Problem]:
    with pytest.raises(stack_config.ConfigError) as err:
        load(values)
    return err.value.problems


def the_problem(values: dict[str, Any], key: str) -> str:
    """The message of the one problem of ``values`` at ``key``."""
    found = [p for p in problems_of(values) if p.key == key]
    assert len(found) == 1, problems_of(values)
    return found[0].message


def plan_refuses(values: dict[str, Any], tmp_path: Path, monkeypatch: Any) -> str:
    """The plan command's stderr for ``values``: it exits 2 without a traceback and writes nothing."""
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.bad.yaml").write_text(yaml.safe_dump({"config": values}, sort_keys=False))
    monkeypatch.setattr(plan_mod, "PROJECT_ROOT", tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = plan_mod.run_cli("bad", str(tmp_path / "plan"), stdout=out, stderr=err)
    assert code == 2, err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert not (tmp_path / "plan").exists() or not any((tmp_path / "plan").iterdir())
    return err.getvalue()


# ---------------------------------------------------------------------------------------------
# 1. Capacity Blocks
# ---------------------------------------------------------------------------------------------


def offering(**over: Any) -> dict[str, Any]:
    return {"durationHours": 48, "earliestStart": zulu(START), **over}


def test_a_search_range_shorter_than_the_block_is_refused():
    latest = START + datetime.timedelta(hours=30)
    values = block_values(block_group(capacity={"offering": offering(latestEnd=zulu(latest))}))
    message = the_problem(values, f"{GROUP}.capacity.offering.latestEnd")
    assert latest.isoformat() in message and "30 hours" in message and "durationHours 48" in message
    assert (START + datetime.timedelta(hours=48)).isoformat() in message
    # A range the block fits in is fine.
    load(block_values(block_group(capacity={"offering": offering(latestEnd=zulu(START + datetime.timedelta(days=3)))})))


def test_more_than_64_instances_on_a_block_given_by_reservation_id_is_refused():
    message = the_problem(block_values(block_group(maxSize=65)), f"{GROUP}.maxSize")
    assert "65" in message and "at most 64 instances" in message and "EC2 User Guide" in message
    load(block_values(block_group(maxSize=64)))


@pytest.mark.parametrize(
    "end, words",
    [
        ("2030-01-02T04:30:00Z", "is not a Capacity Block end time: every block ends at 11:30 UTC"),
        ("2030-01-02T00:00:00Z", "is not a Capacity Block end time"),
        ("2030-01-02T11:30:00-07:00", "is not in UTC; write it in UTC like"),
        ("2030-01-02", "a date without a time"),
    ],
)
def test_an_end_that_is_no_block_end_is_refused(end, words):
    values = block_values(block_group(capacity={"start": zulu(START), "end": end}))
    message = the_problem(values, f"{GROUP}.capacity.end")
    assert words in message
    assert "2030-01-02" in message  # the value


def test_a_date_without_a_time_is_refused_for_every_capacity_time():
    group = block_group(capacityReservationId=None, capacity={"offering": offering(earliestStart="2030-01-01")})
    assert "a date without a time" in the_problem(block_values(group), f"{GROUP}.capacity.offering.earliestStart")


def test_a_capacity_block_mistake_is_refused_by_the_plan(tmp_path, monkeypatch):
    values = block_values(block_group(capacity={"start": zulu(START), "end": "2030-01-02T13:30:00+02:00"}))
    stderr = plan_refuses(values, tmp_path, monkeypatch)
    assert f"{GROUP}.capacity.end: 2030-01-02T13:30:00+02:00 is not in UTC" in stderr


def test_the_documented_window_still_loads():
    g = load(block_values(block_group())).gpu_group("h100")
    assert g is not None and g.capacity_block_window == (START, END) and g.capacity_reservation_id == CR_ID


# ---------------------------------------------------------------------------------------------
# 2. Progress: a heartbeat the worker cannot write
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "over, where",
    [
        ({"progress": {"heartbeatFile": "/opt/gputraining/beat"}}, "the progress guard's folder"),
        ({"progress": {"heartbeatFile": "/opt/python-etcd/beat"}}, "the shipped python-etcd"),
        (
            {
                "progress": {"heartbeatFile": "/data/run/beat"},
                "volumes": [{"name": "fsx", "mountPath": "/data", "readOnly": True}],
            },
            "volumes[0] (fsx, mounted with readOnly: true)",
        ),
    ],
)
def test_a_heartbeat_on_a_read_only_mount_is_refused(over, where):
    specs, problems = parse([elastic_job(**over)])
    assert [p.key for p in problems] == [f"{KEY}[imagenet].progress.heartbeatFile"], problems
    assert where in problems[0].message and over["progress"]["heartbeatFile"] in problems[0].message
    assert "'/tmp/heartbeat'" in problems[0].message


def test_a_heartbeat_on_a_writable_volume_is_fine():
    over = {"progress": {"heartbeatFile": "/data/beat"}, "volumes": [{"name": "fsx", "mountPath": "/data"}]}
    assert parse([elastic_job(**over)])[1] == []
    assert parse([elastic_job(progress={"heartbeatFile": "/opt/python-etcd/beat"}, rendezvous="c10d")])[1] == []


# ---------------------------------------------------------------------------------------------
# 3. Taints: the stack's own count
# ---------------------------------------------------------------------------------------------


def taints(n: int) -> list[dict[str, str]]:
    return [{"key": f"example.com/t{i}", "effect": "NoSchedule"} for i in range(n)]


def test_the_taint_count_counts_the_burn_in_taint():
    values = minimal_values()
    values[f"{NS}:queues"] = {"enabled": False}  # (with queues, Kueue's flavor takes at most 7)
    values[f"{NS}:gpuNodeGroups"][0]["taints"] = taints(49)
    message = the_problem(values, f"{P4D}.taints")
    assert "49 taints are too many" in message and "the stack adds 2" in message and "at most 48" in message
    values[f"{NS}:gpuNodeGroups"][0]["taints"] = taints(48)
    load(values)


def test_without_burn_in_a_group_takes_49_taints():
    values = minimal_values()
    values[f"{NS}:queues"] = {"enabled": False}
    values[f"{NS}:gpuNodeGroups"][0].update(taints=taints(49), burnIn=False)
    load(values)
    values[f"{NS}:gpuNodeGroups"][0]["taints"] = taints(50)
    assert "at most 49" in the_problem(values, f"{P4D}.taints")


# ---------------------------------------------------------------------------------------------
# 5. Env: every name the stack derives for the job
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "over, name, value",
    [
        ({"checkpoints": {"volume": "fsx"}}, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "'100'"),
        ({"rendezvous": "c10d"}, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "'1'"),
        ({"checkpoints": {"volume": "fsx"}}, "CHECKPOINT_DIR", "checkpoint directory"),
    ],
)
def test_a_derived_env_name_is_refused(over, name, value):
    problems = parse([elastic_job(**over, env={name: "7"})])[1]
    assert [p.key for p in problems] == [f"{KEY}[imagenet].env.{name}"], problems
    assert value in problems[0].message and "remove it" in problems[0].message


def test_a_name_the_stack_does_not_derive_for_the_job_is_the_jobs():
    assert parse([elastic_job(env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "20"})])[1] == []


def test_every_derived_name_of_the_built_job_is_refused():
    """The check reads the builder's own list: each name the job's worker env gets from the stack."""
    spec = parse([elastic_job(checkpoints={"volume": "fsx"}, rendezvous="c10d")])[0][0]
    derived = spec.derived_env()
    assert len(derived) >= 3
    for name in derived:
        raw = elastic_job(checkpoints={"volume": "fsx"}, rendezvous="c10d", env={name: "x"})
        assert [p.key for p in parse([raw])[1]] == [f"{KEY}[imagenet].env.{name}"]


# ---------------------------------------------------------------------------------------------
# 6. Flags: yes/no/on/off are text
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["yes", "no", "on", "off", "y", "1", "TRUE"])
def test_a_flag_written_as_other_text_is_refused(text):
    values = minimal_values()
    values[f"{NS}:burnIn"] = {"enabled": text}
    message = the_problem(values, f"{NS}:burnIn.enabled")
    assert repr(text) in message and "write true or false" in message


@pytest.mark.parametrize("text, flag", [("true", True), ("false", False), ("True", True), ("False", False)])
def test_a_flag_as_text_pulumi_reads_as_a_flag_is_read(text, flag):
    values = minimal_values()
    values[f"{NS}:burnIn"] = {"enabled": text}
    assert load(values).burn_in.enabled is flag


def test_a_job_flag_written_yes_is_refused(tmp_path, monkeypatch):
    values = copy.deepcopy(minimal_values())
    values[KEY] = [elastic_job(enabled="yes")]
    stderr = plan_refuses(values, tmp_path, monkeypatch)
    assert f"{KEY}[imagenet].enabled: 'yes' is not allowed" in stderr


# ---------------------------------------------------------------------------------------------
# 4. Launchers: every form of an option the stack derives
# ---------------------------------------------------------------------------------------------


def mpi_job(**over: Any) -> dict[str, Any]:
    return {
        "name": "maskrcnn",
        "kind": "mpi",
        "nodeGroup": "p4d",
        "nodes": 2,
        "image": TRAIN_IMAGE,
        "command": ["python", "train.py"],
        **over,
    }


@pytest.mark.parametrize(
    "args, shown, value",
    [
        (["--map-by", "ppr:4:node"], "'--map-by ppr:4:node'", "to 4"),
        (["--map-by=ppr:16:node"], "'--map-by=ppr:16:node'", "to 16"),
        (["-map-by", "ppr:2:socket"], "'-map-by ppr:2:socket'", "to ppr:2:socket"),
    ],
)
def test_a_ppr_mapping_in_mpirun_args_is_refused(args, shown, value):
    problems = parse([mpi_job(mpirunArgs=args)])[1]
    assert [p.key for p in problems] == [f"{KEY}[maskrcnn].mpirunArgs[0]"], problems
    assert shown in problems[0].message and value in problems[0].message
    assert "derives: 8 (slotsPerWorker" in problems[0].message


def test_other_mappings_are_the_jobs():
    assert parse([mpi_job(mpirunArgs=["--map-by", "slot:PE=4", "--bind-to", "core"])])[1] == []


@pytest.mark.parametrize(
    "command, at",
    [
        (["mpirun", "-np", "16", "python", "train.py"], 0),
        (["/opt/amazon/openmpi/bin/mpiexec", "python", "train.py"], 0),
        (["bash", "-c", "source /env.sh && mpirun python train.py"], 2),
        (["sh", "-ec", "FOO=1 exec orterun python train.py"], 2),
    ],
)
def test_mpirun_inside_an_mpi_jobs_command_is_refused(command, at):
    problems = parse([mpi_job(command=command)])[1]
    assert [p.key for p in problems] == [f"{KEY}[maskrcnn].command[{at}]"], problems
    assert "every rank would start another mpirun" in problems[0].message and "mpirunArgs" in problems[0].message


@pytest.mark.parametrize(
    "command, at, shown",
    [
        (["python", "-u", "-m", "torch.distributed.run", "--nproc-per-node", "4", "t.py"], 4, "'--nproc-per-node 4'"),
        (
            ["python3", "-X", "faulthandler", "-OO", "-m", "torch.distributed.launch", "--nproc_per_node=16", "t.py"],
            6,
            "'--nproc_per_node=16'",
        ),
        (["python", "-uB", "-mtorch.distributed.run", "--nproc-per-node=4", "t.py"], 3, "'--nproc-per-node=4'"),
        (
            ["bash", "-c", "cd /w && NCCL_DEBUG=INFO exec torchrun --nproc-per-node 16 t.py --lr 1"],
            2,
            "'--nproc-per-node 16'",
        ),
        (["/bin/sh", "-lc", "torchrun --standalone t.py"], 2, "'--standalone'"),
    ],
)
def test_torchrun_behind_interpreter_flags_or_in_a_shell_is_found(command, at, shown):
    problems = parse([elastic_job(command=command)])[1]
    assert [p.key for p in problems] == [f"{KEY}[imagenet].command[{at}]"], problems
    assert shown in problems[0].message and "which the stack derives" in problems[0].message


@pytest.mark.parametrize(
    "command",
    [
        ["python", "-u", "train.py", "--nproc-per-node", "4"],  # the script's own argument
        ["bash", "-c", "torchrun t.py --nproc-per-node 4"],  # after the script: the script's
        ["bash", "-c", "echo 'unclosed"],
    ],
)
def test_a_scripts_own_arguments_are_not_torchruns(command):
    assert parse([elastic_job(command=command)])[1] == []


def test_the_guard_goes_after_torchrun_behind_interpreter_flags():
    spec = parse([elastic_job(command=["python", "-u", "-m", "torch.distributed.run", "t.py"], progress=PROGRESS)])[0][
        0
    ]
    command, args = spec.worker_line()
    assert command[:4] == ["python", "-u", "-m", "torch.distributed.run"] and command[4].endswith("progress_guard.py")
    assert args == ["t.py"]


# ---------------------------------------------------------------------------------------------
# Issue 35: entries named by their names, by position only while they have no valid one
# ---------------------------------------------------------------------------------------------


def test_problems_name_jobs_groups_and_teams_by_their_names():
    values = minimal_values()
    values[f"{NS}:gpuNodeGroups"][0]["maxSize"] = 0
    values[f"{NS}:queues"] = {"teams": [{"name": "vision", "quotas": [{"nodeGroup": "p4d", "nodes": "x"}]}]}
    values[KEY] = [elastic_job(name="bert-large", env={"A B": "1"}), elastic_job(name="gpt", nodeGroup="nope")]
    keys = {p.key for p in problems_of(values)}
    assert f"{NS}:gpuNodeGroups[p4d].maxSize" in keys
    assert f"{NS}:queues.teams[vision].quotas[0].nodes" in keys
    assert f"{KEY}[bert-large].env.A B" in keys and f"{KEY}[gpt].nodeGroup" in keys
    assert not [k for k in keys if "[0]." in k and "quotas" not in k], keys


def test_an_entry_without_a_valid_unique_name_is_named_by_position():
    values = minimal_values()
    values[KEY] = [
        {"kind": "mpi", "name": "Bad Name"},
        elastic_job(name="twin", image="x:latest"),
        elastic_job(name="twin", image="y:latest"),
        {"kind": "mpi"},
    ]
    keys = {p.key for p in problems_of(values)}
    assert {f"{KEY}[0].image", f"{KEY}[1].image", f"{KEY}[2].image", f"{KEY}[2].name", f"{KEY}[3].name"} <= keys
    assert not [k for k in keys if "twin" in k or "Bad Name" in k]


def test_the_plan_names_the_entry(tmp_path, monkeypatch):
    values = minimal_values()
    values[KEY] = [elastic_job(name="bert-large", env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}, rendezvous="c10d")]
    stderr = plan_refuses(values, tmp_path, monkeypatch)
    assert f"{KEY}[bert-large].env.TORCH_DISABLE_SHARE_RDZV_TCP_STORE: is set by the stack" in stderr
