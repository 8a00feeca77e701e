"""Command line: `python -m infra plan --stack dev [--out DIR] [--config-file PATH] [--verbose]`,
`python -m infra preflight --stack dev [--config-file PATH]`, `python -m infra diff BASE HEAD`."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["diff"]:
        # Its own parser: bad arguments exit 1, as its --detailed-exitcode reserves 2 for a difference.
        from infra.diff.cli import main as diff_main

        return diff_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m infra", description="Tooling around the gpu-training Pulumi stack."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_plan = sub.add_parser(
        "plan",
        help="run the stack offline (no AWS, no Pulumi CLI) and show what it would create",
        description="Run the stack's program offline (no AWS account, no Pulumi CLI) and print a one-screen "
        "summary: node groups, resources per component, Kubernetes objects, GPU jobs, cost, tear-down, warnings, "
        "invariants and the API checks. Exit 0: planned; 1: an invariant or API check failed; 2: invalid config.",
    )
    p_plan.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml (unless --config-file)")
    p_plan.add_argument(
        "--out",
        help="write the plan's six files to this folder: resources.json, manifests.yaml, outputs.json, "
        "releases.yaml (what the Helm releases install), cost.json and aws-model.json (the AWS inputs checked "
        "against botocore's models, per type)",
    )
    p_plan.add_argument(
        "--config-file",
        metavar="PATH",
        help=(
            "read the stack's config from this file instead of Pulumi.<stack>.yaml in the project root, as `pulumi "
            "preview --config-file` does (an example in place: --stack minimal --config-file "
            "examples/minimal/Pulumi.minimal.yaml)"
        ),
    )
    p_plan.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also print the detail: resources per type, Helm releases by kind, each GPU job's hang detection and "
        "checkpoints, the queue table and the cost's exclusions in full",
    )

    p_pre = sub.add_parser(
        "preflight",
        help=(
            "check the target AWS account and region (offerings, EFA, quotas, reservations, EKS version) before "
            "deploying"
        ),
        description="Check the stack's AWS account and region with boto3 (standard credential chain and AWS_* "
        "environment variables; region from the stack's aws:region). Exit 0: all checks passed or were skipped; "
        "1: a check failed or no credentials; 2: invalid config.",
    )
    p_pre.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml (unless --config-file)")
    p_pre.add_argument(
        "--config-file",
        metavar="PATH",
        help="read the stack's config from this file instead of Pulumi.<stack>.yaml in the project folder, as "
        "`plan --config-file` does",
    )
    p_pre.add_argument("--cwd", help="the project folder holding Pulumi.yaml (default: this project)")

    from infra.diff.cli import DESCRIPTION, add_arguments

    p_diff = sub.add_parser(
        "diff",
        help="compare two plan folders: what `pulumi up` would replace (-/+), update in place (~), add and remove",
        description=DESCRIPTION,
    )
    add_arguments(p_diff)

    args = parser.parse_args(argv)
    if args.command == "plan":
        from infra.plan import run_cli

        return run_cli(args.stack, args.out, stack_file=args.config_file, verbose=args.verbose)
    if args.command == "preflight":
        from infra.preflight import run_cli as run_preflight

        return run_preflight(args.stack, root=args.cwd, stack_file=args.config_file)
    if args.command == "diff":
        from infra.diff.cli import run as run_diff

        return run_diff(args)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
