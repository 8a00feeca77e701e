"""`python -m infra diff BASE HEAD`: the markdown difference of two offline plan folders."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn, TextIO

from infra.diff.compare import Diff
from infra.diff.impact import disruptive
from infra.diff.markdown import render
from infra.diff.plans import NotAPlan, Plan, check_plan_folder, load_plan
from infra.diff.refusals import of_diff as refusals_of

DESCRIPTION = (
    "Compare two offline plans (`python -m infra plan --stack S --out DIR`) and print markdown: a move of the GPU AZ "
    "first, in words; what the API would refuse; stateful resources deleted or replaced and node groups whose nodes "
    "roll, in words; the change in hourly cost; Capacity Blocks bought; resources replaced (-/+, stateful ones "
    "first), updated in place (~), added (+) and removed (-); Kubernetes objects, stack outputs, and each changed "
    "value old -> new. Exit 1 on an error (a folder without a plan, bad arguments, with --detailed-exitcode a failed "
    "head plan); else 0, or with --detailed-exitcode: 0 no difference, 2 a difference, 3 a difference that deletes "
    "or replaces a stateful resource, rolls a node group's nodes, or that the API refuses."
)

# Exit codes, after terraform plan -detailed-exitcode (developer.hashicorp.com/terraform/cli/commands/plan:
# 0 succeeded with an empty diff, 1 error, 2 succeeded with a non-empty diff), plus 3 for what a reviewer must
# not wave through.
EXIT_SAME, EXIT_ERROR, EXIT_CHANGES, EXIT_DISRUPTIVE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """Bad arguments exit 1 (an error), not argparse's 2 (which --detailed-exitcode gives a difference)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


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
    p.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 0: no difference, 2: a difference, 3: a difference that deletes or replaces a stateful resource, "
        "rolls a node group's nodes or that the API refuses, 1: an error (as terraform plan -detailed-exitcode, "
        "plus 3)",
    )


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
        return EXIT_ERROR
    base = load_plan(args.base, args.base_root) if base_status == "ok" else Plan.empty()
    head = load_plan(args.head, args.head_root) if head_status == "ok" else Plan.empty()
    log = args.head_log.read_text(errors="replace") if args.head_log and args.head_log.exists() else ""
    diff = Diff(base, head)
    out.write(render(diff, args.title, base_status, head_status, log, args.max_rows))
    if not args.detailed_exitcode:
        return EXIT_SAME
    return EXIT_ERROR if head_status != "ok" else exit_code(diff)


def exit_code(diff: Diff) -> int:
    """3 when the diff deletes or replaces a stateful resource, rolls nodes or is refused; 2 for any other
    difference; 0 for none."""
    if diff.empty:
        return EXIT_SAME
    refused = refusals_of(diff) if diff.base.present else []
    return EXIT_DISRUPTIVE if refused or disruptive(diff) else EXIT_CHANGES


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    parser = _Parser(prog="python -m infra diff", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv), out, err)
