"""Command line: `python -m infra plan --stack dev [--out DIR]`."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra", description="Tooling around the gpu-training Pulumi stack.")
    sub = parser.add_subparsers(dest="command", required=True)

    p_plan = sub.add_parser("plan", help="run the stack offline (no AWS, no Pulumi CLI) and show what it would create")
    p_plan.add_argument("--stack", required=True, help="stack name: reads Pulumi.<stack>.yaml")
    p_plan.add_argument("--out", help="write resources.json, manifests.yaml and outputs.json to this folder")

    args = parser.parse_args(argv)
    if args.command == "plan":
        from infra.plan import run_cli

        return run_cli(args.stack, args.out)
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
