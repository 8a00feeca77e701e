"""The Pulumi program: read the stack config, validate it, build the environment, export outputs."""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from stacks import config as stack_config
from stacks import environment
from stacks.placement import PlacementError


def raw_config() -> dict[str, Any]:
    """Every config value the engine handed this program, decoded (``{"ns:key": value}``)."""
    flat: dict[str, Any] = dict(runtime_config.get_config_env())
    flat.update(runtime_config.CONFIG.get())
    return stack_config.decode_config_values(flat)


def load_config() -> stack_config.StackConfig:
    try:
        return stack_config.load(raw_config(), pulumi.get_project(), pulumi.get_stack())
    except stack_config.ConfigError as err:
        # RunError: the engine prints the message without a Python traceback.
        raise pulumi.RunError(str(err)) from None


def main() -> dict[str, Any]:
    cfg = load_config()
    try:
        outputs = environment.build(cfg)
    except PlacementError as err:
        raise pulumi.RunError(str(err)) from None
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs
