"""Reading a stack's config from its files, as the Pulumi engine assembles it: project-level
defaults from ``Pulumi.yaml``, overridden by ``Pulumi.<stack>.yaml``. Used by the offline plan,
preflight and the tests (``pulumi up`` gets the config from the engine instead)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from facts.paths import PROJECT_ROOT


class StackFileError(FileNotFoundError):
    """A stack file that is missing or cannot be read as a stack config."""


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """YAML's safe loader, refusing a key written twice in one map (YAML keeps the last one
    silently, and the first value would be lost without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is written twice in one map (lines {seen[key]} and {line}); keep one", key_node.start_mark
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse a stack or project file (duplicate keys refused)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a safe loader


def read_project(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    return load_yaml((root / "Pulumi.yaml").read_text())


def read_stack_config(stack: str, root: Path = PROJECT_ROOT) -> tuple[str, dict[str, Any]]:
    """The project name and the stack's config as the engine would assemble it: project-level
    defaults from Pulumi.yaml, overridden by Pulumi.<stack>.yaml. Keys without a namespace belong
    to the project."""
    project = read_project(root)
    name = project["name"]
    path = root / f"Pulumi.{stack}.yaml"
    if not path.exists():
        known = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
        raise FileNotFoundError(f"no stack file {path.name}; stacks here: {', '.join(known) or 'none'}")
    values: dict[str, Any] = {}
    for key, spec in (project.get("config") or {}).items():
        full = key if ":" in key else f"{name}:{key}"
        if isinstance(spec, dict) and ("default" in spec or "value" in spec):
            values[full] = spec.get("value", spec.get("default"))
        elif not isinstance(spec, dict):
            values[full] = spec
    try:
        stack_doc = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise StackFileError(f"{path.name} is not valid YAML: {err}") from None
    if not isinstance(stack_doc, dict) or not isinstance(stack_doc.get("config") or {}, dict):
        raise StackFileError(f"{path.name} must be a map with a 'config:' map inside")
    for key, value in (stack_doc.get("config") or {}).items():
        full = key if ":" in key else f"{name}:{key}"
        if isinstance(value, dict) and "secure" in value:
            value = "[secret]"
        values[full] = value
    return name, values
