"""A training script for the node-check integration runs (tests/integration/test_node_checks_torchrun.py): gloo on
the CPU, one all-reduce per step, and the slow-node contract of docs/performance.md: each step's own work (a sleep
here, ``--work`` seconds, times ``--slow-factor`` on the node named ``--slow-node``) appended to
GPUTRAINING_STEP_FILE before the all-reduce. With ``--nccl-log FILE``, the first local rank writes FILE's lines to
NCCL_DEBUG_FILE (its %h and %p expanded) as NCCL's init would on a GPU node: the fabric check reads them there.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--work", type=float, default=0.05)
    parser.add_argument("--slow-node", default="")
    parser.add_argument("--slow-factor", type=float, default=1.0)
    parser.add_argument("--nccl-log", default="")
    args = parser.parse_args()
    if args.nccl_log and os.environ.get("LOCAL_RANK") == "0" and os.environ.get("NCCL_DEBUG_FILE"):
        target = os.environ["NCCL_DEBUG_FILE"].replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
        with open(args.nccl_log) as source, open(target, "w") as out:
            out.write(source.read())
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    slow = os.environ.get("NODE_NAME") == args.slow_node
    step_file = os.environ.get("GPUTRAINING_STEP_FILE")
    tensor = torch.ones(4)
    for step in range(args.steps):
        started = time.monotonic()
        time.sleep(args.work * (args.slow_factor if slow else 1.0))
        if step_file:
            with open(step_file, "a") as out:
                out.write(f"{time.monotonic() - started:.6f}\n")
        dist.all_reduce(tensor)
        print(f"step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
