"""`python -m infra diff BASE HEAD`: the markdown difference of two offline plan folders."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from infra.diff.compare import Diff
from infra.diff.markdown import render
from infra.diff.plans import NotAPlan, Plan, check_plan_folder, load_plan

DESCRIPTION = (
    "Compare two offline plans (`python -m infra plan --stack S --out DIR`) and print markdown: a move of the GPU AZ "
    "first, in words; the change in hourly cost; Capacity Blocks bought; resources replaced (-/+, stateful ones "
    "first), updated in place (~), added (+) and removed (-); Kubernetes objects and stack outputs. "
    "Exit 0 whatever the difference; 2 when a folder holds no plan or on bad arguments."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", type=Path, help="plan folder of the base (e.g. main); ignored with --base-absent")
    p.add_argument("head", type=Path, help="plan folder of the change")
    p.add_argument("--title", default="Offline plan diff", help="heading of the markdown")
    side = p.add_mutually_exclusive_group()
    side.add_argument(
        "--base-absent",
        action="store_true",
        help="the base has no such stack (it is new in the change): everything in HEAD is added",
    )
    side.add_argument(
        "--base-failed",
        action="store_true",
        help="the base's plan failed: compare with an empty plan, and say so",
    )
    p.add_argument(
        "--head-failed",
        action="store_true",
        help="the change's plan failed: print that, with the end of --head-log, instead of a comparison",
    )
    p.add_argument("--head-log", type=Path, help="output of the head's plan, shown with --head-failed")
    p.add_argument("--max-rows", type=int, default=50, help="rows per table at most")
    p.add_argument("--base-root", type=Path, help="project folder the base was planned from (read as <project>)")
    p.add_argument("--head-root", type=Path, help="project folder the head was planned from (read as <project>)")


def run(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    base_status = "absent" if args.base_absent else "failed" if args.base_failed else "ok"
    head_status = "failed" if args.head_failed else "ok"
    try:
        if base_status == "ok":
            check_plan_folder(args.base, "BASE")
        if head_status == "ok":
            check_plan_folder(args.head, "HEAD")
    except NotAPlan as e:
        print(f"error: {e}", file=err)
        return 2
    base = load_plan(args.base, args.base_root) if base_status == "ok" else Plan.empty()
    head = load_plan(args.head, args.head_root) if head_status == "ok" else Plan.empty()
    log = args.head_log.read_text(errors="replace") if args.head_log and args.head_log.exists() else ""
    out.write(render(Diff(base, head), args.title, base_status, head_status, log, args.max_rows))
    return 0


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra diff", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv), out, err)
