"""A tiny training script for the elastic-rendezvous integration test: gloo all-reduce on the CPU.

torchrun (``python -m torch.distributed.run``) starts it with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, GROUP_RANK, TORCHELASTIC_RUN_ID and TORCHELASTIC_RESTART_COUNT in the environment. It

1. joins the process group (``init_process_group("gloo")``),
2. all-reduces a tensor of ones and checks that the sum equals the world size,
3. all-gathers a number derived from ``--job`` and checks that every member of the world belongs to
   the same job (two jobs that share a rendezvous end up in one world),
4. optionally sleeps until ``--sleep-until`` (a wall-clock deadline, so that a node can be killed
   mid-run; workers restarted after the deadline do not sleep again),
5. all-reduces once more (a dead peer makes this fail) and prints its result.

Each step prints one line ``ALLREDUCE {json}`` that the test parses; the exit code is 0 only when
every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

PREFIX = "ALLREDUCE "


def job_number(job: str) -> int:
    """A small stable number for a job name (exactly representable in any tensor dtype)."""
    return zlib.crc32(job.encode()) & 0xFFFF


def report(phase: str, **fields: Any) -> None:
    """Print one machine-readable line for the test (stdout is unbuffered under the operator's env)."""
    record = {
        "phase": phase,
        "pid": os.getpid(),
        "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
        "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "group_rank": int(os.environ.get("GROUP_RANK", "-1")),
        **fields,
    }
    print(PREFIX + json.dumps(record, sort_keys=True), flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--job", required=True, help="the job this process belongs to")
    parser.add_argument("--run-marker", required=True, help="an opaque marker the test finds in the output")
    parser.add_argument(
        "--sleep-until",
        type=float,
        default=0.0,
        help="wall-clock time (epoch seconds) to sleep until between the two all-reduces",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="process-group timeout in seconds")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = job_number(args.job)

    ones = torch.ones(1)
    dist.all_reduce(ones)
    gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([mine], dtype=torch.int64))
    peers = sorted({int(t.item()) for t in gathered})
    first_ok = int(ones.item()) == world and peers == [mine]
    report(
        "ready",
        job=args.job,
        marker=args.run_marker,
        rank=rank,
        world_size=world,
        sum=ones.item(),
        peer_jobs=peers,
        ok=first_ok,
    )

    pause = args.sleep_until - time.time()
    if pause > 0:
        time.sleep(pause)

    final = torch.ones(1)
    dist.all_reduce(final)
    ok = first_ok and int(final.item()) == world
    report(
        "done",
        job=args.job,
        marker=args.run_marker,
        rank=rank,
        world_size=world,
        sum=final.item(),
        peer_jobs=peers,
        ok=ok,
    )
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
