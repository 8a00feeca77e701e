"""Pulumi entry point (`pulumi up` runs this file). The program lives in infra/program.py."""

from infra.program import main

main()
