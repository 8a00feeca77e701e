"""Hang detection and auto-resume (jobs/resilience.py, jobs/scripts/progress_guard.py; docs/jobs.md, "Hangs and
resume"): the guard's decisions, the config refusals, and what the kinds render with them. The guard run for
real, under torchrun, is tests/integration/test_hang_and_resume.py."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from jobs import resilience
from tests import crd_validation
from tests.crd_validation import CRD_FILES
from tests.helpers import JOBS_KEY as KEY
from tests.helpers import ROOT, built, replicas
from tests.helpers import elastic_job as elastic
from tests.helpers import one_job_problem as one
from tests.helpers import parse_job_list as parse

GUARD_FILE = ROOT / "jobs" / "scripts" / "progress_guard.py"
_spec = importlib.util.spec_from_file_location("progress_guard", GUARD_FILE)
assert _spec is not None and _spec.loader is not None
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)

PROGRESS = {"logPattern": r"step \d+", "startupSeconds": 900, "intervalSeconds": 300}
CHECKPOINTS = {"volume": "fsx"}


# ---------------------------------------------------------------------------------------------
# The guard's decisions
# ---------------------------------------------------------------------------------------------


def test_the_rendered_config_map_carries_the_guard_file_as_it_is():
    assert GUARD_FILE.read_text() == resilience.GUARD_SCRIPT
    assert (resilience.HANG_EXIT, resilience.COMPLETE_MARKER) == (guard.HANG_EXIT, guard.MARKER)


def test_checkpoint_names_sort_naturally():
    names = ["step-100", "step-99", "step-1000", "epoch-2-step-10", "epoch-10-step-1", "epoch-2-step-9"]
    assert sorted(names, key=guard.natural_key) == [
        "epoch-2-step-9",
        "epoch-2-step-10",
        "epoch-10-step-1",
        "step-99",
        "step-100",
        "step-1000",
    ]


def _checkpoint(root: Path, name: str, complete: bool) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "state.pt").write_bytes(b"x")
    if complete:
        (root / name / guard.MARKER).write_text("")


def test_the_newest_complete_checkpoint_is_offered_and_a_cut_off_one_never(tmp_path):
    _checkpoint(tmp_path, "step-9", True)
    _checkpoint(tmp_path, "step-10", True)
    _checkpoint(tmp_path, "step-11", False)  # cut off before its marker
    _checkpoint(tmp_path, ".tmp-step-12", True)  # a save in progress under a hidden name
    (tmp_path / "step-13").write_text("a file, not a checkpoint folder")
    assert guard.newest_complete(str(tmp_path)) == (str(tmp_path / "step-10"), ["step-11"])


def test_no_checkpoint_yet(tmp_path):
    assert guard.newest_complete(str(tmp_path)) == (None, [])
    assert guard.newest_complete(str(tmp_path / "missing")) == (None, [])
    _checkpoint(tmp_path, "step-1", False)
    assert guard.newest_complete(str(tmp_path)) == (None, ["step-1"])


@pytest.mark.parametrize(
    "env, first",
    [
        ({}, True),
        ({"RANK": "0"}, True),
        ({"RANK": "3"}, False),
        ({"OMPI_COMM_WORLD_RANK": "0"}, True),
        ({"OMPI_COMM_WORLD_RANK": "7"}, False),
        ({"PMI_RANK": "1"}, False),
        ({"PADDLE_TRAINER_ID": "0"}, True),
        ({"RANK": "", "PADDLE_TRAINER_ID": "2"}, False),
    ],
)
def test_only_the_first_rank_is_watched(env, first):
    assert guard.watched(env) is first


def test_overdue_before_and_after_the_first_sign():
    start = 1000.0
    assert guard.overdue(start + 899, start, None, 900, 300) is None
    assert "within 900s of the start" in guard.overdue(start + 901, start, None, 900, 300)
    # After a sign the interval counts, from the last sign, however long ago the start was.
    assert guard.overdue(start + 5000, start, start + 4800, 900, 300) is None
    assert "since the last sign (intervalSeconds 300)" in guard.overdue(start + 5101, start, start + 4800, 900, 300)


def test_the_guard_command_line():
    args = guard.parse(["--log-pattern", "x", "--", "-m", "pkg.train", "--lr", "1"])
    assert args.command == ["-m", "pkg.train", "--lr", "1"] and args.log_pattern == "x"
    with pytest.raises(SystemExit):
        guard.parse(["--log-pattern", "x", "--heartbeat-file", "/tmp/h", "--", "train.py"])
    with pytest.raises(SystemExit):
        guard.parse(["--log-pattern", "x", "--"])


def test_a_heartbeat_counts_only_when_newer_than_the_start_and_the_last_one(tmp_path):
    beat = tmp_path / "heartbeat"
    g = guard.Guard(guard.parse(["--heartbeat-file", str(beat), "--", "true"]), {})
    beat.write_text("")
    os.utime(beat, (g.started_wall - 60, g.started_wall - 60))  # left by an earlier attempt
    g.heartbeat()
    assert g.last_sign is None
    os.utime(beat, (g.started_wall + 5, g.started_wall + 5))
    g.heartbeat()
    first = g.last_sign
    assert first is not None
    g.last_sign = None
    g.heartbeat()  # the same touch again is no new sign
    assert g.last_sign is None


def test_the_child_gets_resume_from_and_its_exit_code_passes_through(tmp_path, capfd):
    _checkpoint(tmp_path, "step-4", True)
    _checkpoint(tmp_path, "step-5", False)
    out = tmp_path / "env.txt"
    code = (
        "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('RESUME_FROM', '-') + ' ' + "
        "os.environ['PYTHONUNBUFFERED']); sys.exit(3)"
    )
    argv = ["--checkpoint-dir", str(tmp_path), "--", sys.executable, "-c", code, str(out)]
    assert guard.main(argv) == 3
    assert out.read_text() == f"{tmp_path / 'step-4'} 1"
    assert "passed over (no COMPLETE file): step-5" in capfd.readouterr().err


def test_a_stale_resume_from_is_not_passed_on(tmp_path):
    out = tmp_path / "env.txt"
    code = "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('RESUME_FROM', '-'))"
    g = guard.Guard(
        guard.parse(["--checkpoint-dir", str(tmp_path / "ckpt"), "--", sys.executable, "-c", code, str(out)]),
        {**os.environ, "RESUME_FROM": "/somewhere/old"},
    )
    assert g.run() == 0 and out.read_text() == "-"
    assert (tmp_path / "ckpt").is_dir()


ROUND = {"TORCHELASTIC_RUN_ID": "job-1-abc", "MASTER_ADDR": "job-worker-1", "MASTER_PORT": "41234", "WORLD_SIZE": "16"}


def _resume_of(tmp_path: Path, env: dict[str, str]) -> str | None:
    g = guard.Guard(guard.parse(["--checkpoint-dir", str(tmp_path), "--", "true"]), env)
    return g.resume_from()


def test_the_first_ranks_choice_wins_over_what_another_rank_sees(tmp_path, monkeypatch):
    """Issue 37: on EFS a rank may see a newer (or an older) checkpoint than the first rank; all take the first's."""
    _checkpoint(tmp_path, "step-4", True)
    assert _resume_of(tmp_path, {**ROUND, "RANK": "0"}) == str(tmp_path / "step-4")
    _checkpoint(tmp_path, "step-6", True)  # seen by rank 5 only (its listing is newer than the first rank's)
    monkeypatch.setattr(guard, "CHOICE_WAIT", 0.5)
    assert _resume_of(tmp_path, {**ROUND, "RANK": "5"}) == str(tmp_path / "step-4")
    # A start without the first rank's choice: rank 5 waits CHOICE_WAIT, says so and looks itself.
    assert _resume_of(tmp_path, {**ROUND, "MASTER_PORT": "41235", "RANK": "5"}) == str(tmp_path / "step-6")
    # Outside torchrun (no round) every rank looks itself, as before.
    assert _resume_of(tmp_path, {"OMPI_COMM_WORLD_RANK": "3"}) == str(tmp_path / "step-6")


def test_a_fresh_start_chosen_by_the_first_rank_is_a_choice_too(tmp_path):
    assert _resume_of(tmp_path, {**ROUND, "RANK": "0"}) is None
    _checkpoint(tmp_path, "step-1", True)
    assert _resume_of(tmp_path, {**ROUND, "RANK": "1"}) is None


def test_an_earlier_rounds_choice_is_not_taken(tmp_path, monkeypatch):
    _checkpoint(tmp_path, "step-2", True)
    guard.write_choice(str(tmp_path), "/".join(ROUND.values()), None)
    monkeypatch.setattr(guard, "CHOICE_WAIT", 0.3)
    g = guard.Guard(guard.parse(["--checkpoint-dir", str(tmp_path), "--", "true"]), {**ROUND, "RANK": "1"})
    g.started_wall += guard.CHOICE_FRESH + 1  # the same store address, but long after: an earlier round's
    assert g.resume_from() == str(tmp_path / "step-2")
    # A choice whose checkpoint this pod does not yet see whole is waited for, not taken.
    guard.write_choice(str(tmp_path), "/".join(ROUND.values()), str(tmp_path / "step-9"))
    assert guard.read_choice(str(tmp_path), "/".join(ROUND.values()), 0.0) == (False, None)
    _checkpoint(tmp_path, "step-9", True)
    assert guard.read_choice(str(tmp_path), "/".join(ROUND.values()), 0.0) == (True, str(tmp_path / "step-9"))
    assert guard.newest_complete(str(tmp_path))[0] == str(tmp_path / "step-9"), "a choice file is no checkpoint"


# ---------------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------------


def _mpi(**over: Any) -> dict[str, Any]:
    return {
        "name": "hvd",
        "kind": "mpi",
        "nodeGroup": "p4d",
        "image": elastic()["image"],
        "command": ["python3", "t.py"],
        **over,
    }


def test_the_three_training_kinds_take_both():
    paddle = {
        "name": "ctr",
        "kind": "paddle",
        "nodeGroup": "p4d",
        "image": elastic()["image"],
        "command": ["python", "t.py"],
    }
    jobs, problems = parse(
        [
            elastic(progress=PROGRESS, checkpoints=CHECKPOINTS),
            _mpi(progress={"heartbeatFile": "/tmp/beat"}, checkpoints={"volume": "efs"}),
            {**paddle, "progress": PROGRESS, "checkpoints": CHECKPOINTS},
        ]
    )
    assert problems == []
    assert [j.progress is not None and j.checkpoints is not None for j in jobs] == [True, True, True]


@pytest.mark.parametrize(
    "progress, key, text",
    [
        ({"startupSeconds": 60}, "progress", "exactly one of logPattern and heartbeatFile"),
        ({"logPattern": "a", "heartbeatFile": "/tmp/h"}, "progress", "exactly one of logPattern and heartbeatFile"),
        ({"logPattern": "step (\\d+"}, "progress.logPattern", "is not a valid Python regular expression"),
        ({"logPattern": ".*"}, "progress.logPattern", "matches an empty line"),
        ({"heartbeatFile": "tmp/beat"}, "progress.heartbeatFile", "an absolute file path"),
        ({"heartbeatFile": "/tmp/../beat"}, "progress.heartbeatFile", "without '..'"),
        ({"logPattern": "s", "startupSeconds": 4}, "progress.startupSeconds", "4 is out of range: 5 to 604800 seconds"),
        ({"logPattern": "s", "intervalSeconds": 604801}, "progress.intervalSeconds", "604801 is out of range"),
    ],
)
def test_bad_progress_is_refused(progress, key, text):
    p = one([elastic(progress=progress)])
    assert p.key == f"{KEY}[imagenet].{key}" and text in p.message, str(p)


@pytest.mark.parametrize(
    "checkpoints, key, text",
    [
        ({"volume": "s3"}, "checkpoints.volume", "'s3' is not a shared volume: use one of fsx, efs"),
        ({"volume": "fsx", "path": "/abs"}, "checkpoints.path", "relative to the volume's root without '..'"),
        ({"volume": "fsx", "path": "a/../../b"}, "checkpoints.path", "without '..'"),
        ({"volume": "fsx", "path": "/"}, "checkpoints.path", "is not allowed"),
        ({"volume": "fsx", "mountPath": "ckpt"}, "checkpoints.mountPath", "an absolute path"),
        ({"volume": "fsx", "mountPath": "/opt/gputraining"}, "checkpoints.mountPath", "is not allowed"),
        ({"volume": "fsx", "mountPath": "/fsx"}, "checkpoints.mountPath", "is used by volumes[0] already"),
        (
            {"volume": "fsx", "gracePeriodSeconds": 10},
            "checkpoints.gracePeriodSeconds",
            "10 is out of range: 30 to 3600",
        ),
    ],
)
def test_bad_checkpoints_are_refused(checkpoints, key, text):
    p = one([elastic(checkpoints=checkpoints, volumes=[{"name": "fsx", "mountPath": "/fsx"}])])
    assert p.key == f"{KEY}[imagenet].{key}" and text in p.message, str(p)


def test_a_checkpoint_volume_the_stack_does_not_have():
    p = one([elastic(checkpoints={"volume": "efs"})], volumes={"fsx"})
    assert p.key == f"{KEY}[imagenet].checkpoints.volume" and "'efs' is not available" in p.message


def test_the_names_the_stack_sets_are_refused_in_env():
    p = one([elastic(checkpoints=CHECKPOINTS, env={"RESUME_FROM": "/x"})])
    assert p.key == f"{KEY}[imagenet].env.RESUME_FROM" and "newest complete checkpoint" in p.message


@pytest.mark.parametrize("kind", ["nccl-test", "data-stage", "tensorboard"])
def test_kinds_without_workers_to_guard_refuse_progress(kind):
    raw = {
        "nccl-test": {"name": "n", "kind": "nccl-test", "nodeGroup": "p4d"},
        "data-stage": {"name": "d", "kind": "data-stage", "source": "s3://b/p/", "volume": "fsx", "path": "x"},
        "tensorboard": {"name": "t", "kind": "tensorboard", "volume": "efs", "logDir": "logs"},
    }[kind]
    _, problems = parse([{**raw, "progress": PROGRESS}])
    assert any(p.key == f"{KEY}[{raw['name']}].progress" for p in problems), problems


def test_sagemaker_runtime_refuses_both_and_says_what_to_use():
    job = elastic(
        runtime="sagemaker", progress=PROGRESS, checkpoints=CHECKPOINTS, command=["torchrun"], args=["main.py"]
    )
    job.pop("nodeGroup")
    job["sagemaker"] = {"instanceType": "ml.p4d.24xlarge", "outputPath": "s3://bucket/out/"}
    _, problems = parse([job])
    texts = {p.key: p.message for p in problems}
    assert "checkpointS3Uri" in texts[f"{KEY}[imagenet].checkpoints"]
    assert "activeDeadlineSeconds" in texts[f"{KEY}[imagenet].progress"]


# ---------------------------------------------------------------------------------------------
# What the kinds render
# ---------------------------------------------------------------------------------------------


def _worker(cr: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    role = "Worker"
    pod = replicas(cr)[role]["template"]["spec"]
    return pod, pod["containers"][0]


@pytest.mark.parametrize(
    "command, args, head, rest",
    [
        (
            ["torchrun", "/workspace/main.py"],
            ["--arch", "resnet50"],
            ["torchrun", resilience.GUARD_PATH],
            ["/workspace/main.py", "--arch", "resnet50"],
        ),
        (
            ["torchrun", "--monitor-interval", "1", "/workspace/main.py"],
            ["--lr", "1"],
            ["torchrun", "--monitor-interval", "1", resilience.GUARD_PATH],
            ["/workspace/main.py", "--lr", "1"],
        ),
        (
            ["python", "-m", "torch.distributed.run", "--no-python", "/usr/bin/trainer"],
            [],
            ["python", "-m", "torch.distributed.run", "--no-python", "python3", resilience.GUARD_PATH],
            ["/usr/bin/trainer"],
        ),
    ],
)
def test_torchrun_starts_the_guard_as_its_script(command, args, head, rest):
    manifests = built(
        "pytorch-elastic", progress=PROGRESS, checkpoints=CHECKPOINTS, command=command, args=args, volumes=[]
    )
    config_map, cr = manifests
    pod, container = _worker(cr)
    assert container["command"][: len(head)] == head
    assert container["command"][-1] == "--" and container["args"] == rest
    assert config_map["kind"] == "ConfigMap" and config_map["data"] == resilience.GUARD_FILES
    assert {"name": "progress-guard", "configMap": {"name": "imagenet-guard"}} in pod["volumes"]
    assert pod["terminationGracePeriodSeconds"] == resilience.DEFAULT_GRACE
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CHECKPOINT_DIR"] == "/checkpoints"
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(resilience.DEFAULT_GRACE - 10)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == "/checkpoints")
    assert mount == {"name": "fsx", "mountPath": "/checkpoints", "subPath": "checkpoints/imagenet/run-1"}


def test_the_module_form_runs_the_module_under_the_guard():
    (_, cr) = built(
        "pytorch-elastic", progress=PROGRESS, command=["torchrun", "-m", "pkg.train"], args=["--lr", "1"], volumes=[]
    )
    _, container = _worker(cr)
    assert container["command"] == [
        "torchrun",
        resilience.GUARD_PATH,
        *["--job", "imagenet", "--log-pattern", r"step \d+", "--startup-seconds", "900", "--interval-seconds", "300"],
        *["--same-python", "--", "-m"],
    ]
    assert container["args"] == ["pkg.train", "--lr", "1"]


def test_a_run_bump_gets_a_new_checkpoint_folder_and_the_same_run_the_same():
    def folder(run: int) -> str:
        (_, cr) = built("pytorch-elastic", checkpoints=CHECKPOINTS, run=run, volumes=[])
        _, container = _worker(cr)
        return next(m["subPath"] for m in container["volumeMounts"] if m["mountPath"] == "/checkpoints")

    assert folder(1) == folder(1) == "checkpoints/imagenet/run-1"
    assert folder(2) == "checkpoints/imagenet/run-2"


def test_mpi_ranks_and_paddle_trainers_run_under_the_guard():
    config_map, mpijob = built("mpi", progress=PROGRESS, checkpoints=CHECKPOINTS)
    launcher = replicas(mpijob)["Launcher"]["template"]["spec"]["containers"][0]
    at = launcher["command"].index("python3")
    assert launcher["command"][at : at + 2] == ["python3", resilience.GUARD_PATH]
    assert launcher["command"][-3:] == ["/workspace/train_maskrcnn.py", "--data", "/fsx/coco"]
    assert launcher["command"][launcher["command"].index("CHECKPOINT_DIR") - 1 :][:2] == ["-x", "CHECKPOINT_DIR"]
    pod, worker = _worker(mpijob)
    assert pod["terminationGracePeriodSeconds"] == resilience.DEFAULT_GRACE
    assert any(m["mountPath"] == resilience.GUARD_DIR for m in worker["volumeMounts"])
    assert "volumes" not in replicas(mpijob)["Launcher"]["template"]["spec"]
    config_map, paddle = built("paddle", progress=PROGRESS)
    pod, trainer = _worker(paddle)
    assert trainer["command"][:2] == ["python3", resilience.GUARD_PATH]
    assert trainer["command"][-4:] == ["python", "-m", "paddle.distributed.launch", "train.py"]
    assert trainer["terminationMessagePolicy"] == "FallbackToLogsOnError"
    pserver = replicas(paddle)["Master"]["template"]["spec"]["containers"][0]
    assert pserver["command"][0] == "python"


def test_without_either_nothing_changes():
    assert len(built("pytorch-elastic")) == 1
    (cr,) = built("pytorch-elastic")
    pod, container = _worker(cr)
    assert container["command"] == ["torchrun", "/workspace/main.py"] and "terminationGracePeriodSeconds" not in pod


@pytest.mark.parametrize("kind", ["pytorch-elastic", "mpi", "paddle"])
def test_guarded_jobs_validate_against_the_crds_and_the_kubernetes_schema(kind):
    config_map, cr = built(kind, progress=PROGRESS, checkpoints=CHECKPOINTS)
    crd = crd_validation.crd_in(CRD_FILES[(cr["apiVersion"], cr["kind"])], cr["kind"])
    assert crd_validation.errors(cr, crd) == []
    kubernetes_validate.validate(config_map, "1.33", strict=True)


def test_a_matching_line_is_a_sign_and_every_line_is_passed_on(capfd):
    code = "import sys; print('loading'); print('step 1 loss 0.5'); print('oops', file=sys.stderr)"
    g = guard.Guard(guard.parse(["--log-pattern", r"^step \d+", "--", sys.executable, "-c", code]), {})
    assert g.run() == 0
    assert g.last_sign is not None
    out = capfd.readouterr()
    assert out.out == "loading\nstep 1 loss 0.5\n" and out.err == "oops\n"
    quiet = guard.Guard(guard.parse(["--log-pattern", r"^step \d+", "--", sys.executable, "-c", "print('hi')"]), {})
    assert quiet.run() == 0 and quiet.last_sign is None


def test_a_rank_other_than_the_first_is_not_watched_and_its_output_not_piped():
    g = guard.Guard(guard.parse(["--log-pattern", "x", "--", sys.executable, "-c", "pass"]), {"RANK": "1"})
    assert g.watching is False
    assert g.run() == 0 and g.pumps == []
