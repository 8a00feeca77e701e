"""A tiny training script that follows the stack's checkpoint contract (docs/jobs.md, "Hangs and resume"), for
tests/integration/test_hang_and_resume.py: gloo all-reduces on the CPU, one per step.

- At the start it resumes from ``RESUME_FROM`` (the newest complete checkpoint the progress guard offers) or
  starts at step 0.
- Every step all-reduces a tensor (so a rank that stops holds up the others), and the first rank prints
  ``step <n>`` (the job's progress.logPattern) and keeps ``value``, a number that depends on every step done.
- Every ``--save-every`` steps and on SIGTERM, the first rank saves ``<CHECKPOINT_DIR>/step-<n>/state.pt`` and
  then writes ``COMPLETE`` (last: a save cut off before it is never offered).
- ``RESUME_IT_HANG_AT=<step>`` makes the first rank stop making progress at that step (it sleeps) while
  the job has hung fewer than ``RESUME_IT_HANG_RESTARTS`` times (default 1: only the first attempt hangs). The
  hangs are counted in marker files beside the checkpoint folder, on the shared file system: a restart count
  is per node (torchrun's agent on a node whose workers restart for a membership change keeps its count), and
  the first rank may be on another node after a restart. With ``RESUME_IT_TEAR=1`` the first rank first writes
  half of that step's checkpoint, without ``COMPLETE`` (a save cut off), then stops.

Each event prints one line ``RESUME {json}`` for the test.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

PREFIX = "RESUME "
STOP = {"signal": False}


def report(phase: str, **fields: Any) -> None:
    record = {
        "phase": phase,
        "pid": os.getpid(),
        "rank": int(os.environ.get("RANK", "-1")),
        "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "time": time.time(),
        **fields,
    }
    print(PREFIX + json.dumps(record, sort_keys=True), flush=True)


def save(step: int, value: float) -> str:
    folder = os.path.join(os.environ["CHECKPOINT_DIR"], f"step-{step:06d}")
    os.makedirs(folder, exist_ok=True)
    torch.save({"step": step, "value": value}, os.path.join(folder, "state.pt"))
    with open(os.path.join(folder, "COMPLETE"), "w") as marker:  # last: the checkpoint is whole
        marker.write(f"{step}\n")
    return folder


def _hang_markers() -> str:
    return os.path.dirname(os.path.normpath(os.environ["CHECKPOINT_DIR"]))


def _hangs_so_far() -> int:
    return sum(1 for f in os.listdir(_hang_markers()) if f.startswith(".hang-"))


def _count_a_hang() -> None:
    with open(os.path.join(_hang_markers(), f".hang-{_hangs_so_far()}-{os.getpid()}"), "w"):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--step-seconds", type=float, default=0.3)
    parser.add_argument("--save-every", type=int, default=0)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: STOP.update(signal=True))

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    resume = os.environ.get("RESUME_FROM")
    step, value = 0, 0.0
    if resume:
        state = torch.load(os.path.join(resume, "state.pt"))
        step, value = state["step"] + 1, state["value"]
    report("start", resume_from=resume, start_step=step, world_size=world)

    hang_at = int(os.environ.get("RESUME_IT_HANG_AT", "-1"))
    hang_restarts = int(os.environ.get("RESUME_IT_HANG_RESTARTS", "1"))
    tear = os.environ.get("RESUME_IT_TEAR") == "1"
    while step < args.steps:
        if rank == 0 and step == hang_at and _hangs_so_far() < hang_restarts:
            _count_a_hang()
            if tear:  # a save cut off: the state half written, no COMPLETE marker, and the worker stuck
                folder = os.path.join(os.environ["CHECKPOINT_DIR"], f"step-{step:06d}")
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, "state.pt"), "wb") as half:
                    half.write(b"PK\x03\x04 cut off")
                report("torn", step=step, folder=folder)
            report("hanging", step=step)
            time.sleep(3600)
        t = torch.tensor([float(step + 1)])
        dist.all_reduce(t)
        value += t.item() / world
        if rank == 0:
            print(f"step {step}", flush=True)
            report("step", step=step, value=value)
            if args.save_every and step % args.save_every == args.save_every - 1:
                save(step, value)
        time.sleep(args.step_seconds)
        if STOP["signal"]:
            if rank == 0:
                report("saved", step=step, folder=save(step, value))
            return 143
        step += 1
    report("done", step=step, value=value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
