"""The Pulumi program: read the stack config, validate it, build the environment, export outputs."""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from stacks import config as stack_config
from stacks import environment, queues
from stacks.placement import AwsRegionFacts, PlacementError, resolve_placement


def raw_config() -> dict[str, Any]:
    """Every config value the engine handed this program, decoded (``{"ns:key": value}``)."""
    flat: dict[str, Any] = dict(runtime_config.get_config_env())
    flat.update(runtime_config.CONFIG.get())
    return stack_config.decode_config_values(flat)


def load_config(aws_facts: AwsRegionFacts | None = None) -> stack_config.StackConfig:
    """The validated config; with ``aws_facts``, the GPU AZ is checked with the rest against what
    AWS offers in the region (one run reports every problem)."""
    try:
        return stack_config.load(
            raw_config(),
            pulumi.get_project(),
            pulumi.get_stack(),
            placement_check=aws_facts.check if aws_facts is not None else None,
        )
    except stack_config.ConfigError as err:
        # RunError: the engine prints the message without a Python traceback.
        raise pulumi.RunError(str(err)) from None


def main() -> dict[str, Any]:
    aws_facts = AwsRegionFacts()
    cfg = load_config(aws_facts)
    try:
        with queues.plans_kept():  # (the services, alerts and autoscaler read the one queue plan)
            outputs = environment.build(cfg, resolve_placement(cfg, aws_facts))
    except PlacementError as err:
        raise pulumi.RunError(str(err)) from None
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs
