"""Reading a stack's config from its files exactly as the Pulumi CLI does, and handing it over as
the program receives it. Used by the offline plan, preflight and the tests (``pulumi up`` gets the
config from the engine instead).

The Pulumi CLI reads ``Pulumi.yaml`` and ``Pulumi.<stack>.yaml`` with gopkg.in/yaml.v3 (YAML 1.2
with quirks of its own, not PyYAML's YAML 1.1); ``yaml_reading`` reads them as it does, with
ruamel.yaml. Then what the CLI does with the decoded stack file (pulumi/pulumi
sdk/go/common/workspace/loaders.go LoadProjectStackBytes, sdk/go/common/resource/config/key.go
and object.go):

- every map key in the file must be text (SimplifyMarshalledProject: "expected only string keys");
- config keys without a namespace get the project's, ``ns:config:name`` means ``ns:name``, any
  other key with colons is refused;
- the file is written out and read again, and each config value becomes text: a string as it is,
  a number or boolean as its JSON (``0755`` is "493", a float like ``1e3`` "1000"), an empty
  value "" (with a warning), a timestamp Go's time.String() of it ("2024-05-01 00:00:00 +0000
  UTC"), a map or list its JSON (keys sorted; floats written without a point, like 1000, read
  back as ints); an infinity or NaN cannot be written as JSON, and the CLI refuses the stack.

The program gets that text (PULUMI_CONFIG) and ``decode_config_values`` turns JSON text back into
maps and lists, so ``read_stack_config`` gives exactly what ``pulumi up`` hands the program. Two
assumptions: the machine's local time zone is UTC (a timestamp's zone name comes from it), and
secrets, which the offline plan cannot decrypt, read as "[secret]".
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

from facts.paths import PROJECT_ROOT
from facts.problems import ConfigError, Problem
from stacks.config.loading import MAX_DEPTH, decode_config_values, too_deep_message
from stacks.config.yaml_reading import Found, GoTime, decode
from stacks.config.yaml_reading import Path as KeyPath


class StackFileError(FileNotFoundError):
    """A stack file that is missing or cannot be read as a stack config."""


SECRET = "[secret]"  # what the offline plan reads for a secret it cannot decrypt
# A config value is at level 3 of the stack file: the file's map, `config:`, then the value.
_CONFIG_LEVEL = 2


# ---------------------------------------------------------------------------------------------
# What the program receives (pulumi/pulumi config.Value, object.go)
# ---------------------------------------------------------------------------------------------


def go_json_float(value: float) -> str:
    """Go's encoding/json text of a finite float64: shortest digits, positional from 1e-6 up to
    1e21, else an exponent (e-7, not e-07)."""
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    if 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, exponent = repr(value).split("e")
    sign, digits = exponent[0], exponent[1:].lstrip("0") or "0"
    return f"{mantissa}e{sign}{digits.zfill(1 if sign == '-' else 2)}"


class _ReadAgainError(Exception):
    """A config value the CLI cannot read again after writing it out."""

    def __init__(self, path: KeyPath, message: str):
        super().__init__(message)
        self.path = path
        self.message = message


def _program_value(value: Any, path: KeyPath = ()) -> Any:
    """A value inside a config map or list, as the program gets it after the CLI's JSON: floats
    Go writes without a point or exponent read back as ints; timestamps are Go's text of them."""
    if isinstance(value, float):
        text = go_json_float(value)  # what JSON has, read as Python's json reads it
        return int(text) if text.lstrip("-").isdigit() else value
    if isinstance(value, GoTime):
        return value.go_string
    if isinstance(value, list):
        return [_program_value(v, (*path, i)) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if _is_secure(value):
            return SECRET
        if "<<" in value:
            value = _merged_when_read_again(value, path)
        return {k: _program_value(v, (*path, k)) for k, v in sorted(value.items())}
    return value


def _merged_when_read_again(value: dict[str, Any], path: KeyPath) -> dict[str, Any]:
    """A map with the text key "<<" (written quoted: not a merge key in the file). yaml.v3 writes
    that key unquoted (its resolver takes "<<" for text), so when the CLI reads the file again it
    is a merge key: the program gets the map merged."""
    merged = value["<<"]
    sources = merged if isinstance(merged, list) else [merged]
    if not isinstance(merged, (dict, list)) or not all(isinstance(source, dict) for source in sources):
        raise _ReadAgainError(
            (*path, "<<"),
            "the key '<<' is a merge key when the Pulumi CLI reads the stack "
            "file again (yaml.v3 writes it back unquoted), "
            "and then its value must be a map or a list of maps (the CLI stops "
            'with "map merge requires map or sequence of '
            'maps as the value"); rename the key',
        )
    out = {k: v for k, v in value.items() if k != "<<"}
    for source in sources:
        for k, v in (_merged_when_read_again(source, (*path, "<<")) if "<<" in source else source).items():
            out.setdefault(k, v)
    return out


def _program_text(value: Any) -> str:
    """A config value as the engine hands it to the program (PULUMI_CONFIG): text."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""  # the CLI warns "No value for configuration key", and passes ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        # Written out and read again first: -0.0 becomes the int 0.
        return "0" if value == 0 else go_json_float(value)
    if isinstance(value, GoTime):
        return value.go_string
    if isinstance(value, dict) and _is_secure(value):
        return SECRET
    return json.dumps(_program_value(value), ensure_ascii=False, separators=(",", ":"))


def _is_secure(value: dict[Any, Any]) -> bool:
    """config/object.go isSecureValue: a map of exactly one key, "secure", with a text value."""
    return len(value) == 1 and isinstance(value.get("secure"), str)


def _project_default_text(value: Any) -> str:
    """workspace/config.go createConfigValue: a project default as the program gets it (a string,
    an int or a bool as its text, anything else as JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int)):
        return _program_text(value)
    if isinstance(value, GoTime):
        return json.dumps(value.rfc3339)
    if isinstance(value, float) and math.isfinite(value):
        return go_json_float(value)
    return json.dumps(_program_value(value), ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def load_yaml(text: str | bytes, name: str = "the YAML text") -> Any:
    """A YAML text as the Pulumi CLI reads it (yaml.v3 into interface{}): timestamps are
    ``GoTime``. Raises StackFileError for what stops the CLI."""
    value, found = decode(text, _CONFIG_LEVEL + MAX_DEPTH)
    found = [f for f in found if f.kind != "nonfinite"]
    if found:
        raise _file_error(name, found)
    return value


def read_config_value(text: str) -> Any:
    """A YAML text written as the value of one config key in a stack file, as the program gets it
    (after ``decode_config_values``). Raises StackFileError or ConfigError where the CLI stops."""
    lines = text.strip("\n").split("\n")
    body = f" {text}" if len(lines) == 1 else "\n" + "\n".join(f"    {line}" for line in lines)
    _, values = _stack_values("project", f"config:\n  x:{body}\n", "the YAML text")
    return decode_config_values(values)["project:x"]


def _path_text(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _config_key(project: str, raw: str) -> str | None:
    """config/key.go ParseKey, after loaders.go gave keys without a namespace the project's:
    the engine's ``namespace:name``, or None for a key it refuses."""
    colons = raw.count(":")
    if colons == 0:
        return f"{project}:{raw}"
    if colons == 1:
        return raw
    namespace, middle, name = raw.split(":") if colons == 2 else ("", "", "")
    return f"{namespace}:{name}" if middle == "config" and namespace and name else None


def _in_config(path: KeyPath) -> bool:
    return len(path) > 1 and path[0] == "config" and isinstance(path[1], str)


def _problem_key(project: str, path: KeyPath) -> str:
    """The config key a problem at ``path`` (("config", raw key, ...)) is about."""
    head = str(path[1])
    return _path_text(((_config_key(project, head) or head), *path[2:]))


def _file_error(name: str, found: list[Found], project: str = "") -> StackFileError:
    parts = []
    for f in found:
        if f.kind == "syntax":
            where = _problem_key(project, f.path) if project and _in_config(f.path) else _path_text(f.path)
            parts.append(f"{name} is not valid YAML: {f.message}" + (f" (reading {where})" if where else ""))
        else:
            parts.append(f"{name}: " + (f"at {_path_text(f.path)}: " if f.path else "") + f.message)
    return StackFileError("; ".join(parts))


def _config_problem(found: Found) -> str:
    if found.kind == "depth":
        return too_deep_message()
    if found.kind == "nonfinite":
        return (
            f"{found.message}, which Pulumi cannot hand to a program: its CLI "
            "writes config values as JSON and stops with "
            '"json: unsupported value"; write a number, or quote it for text'
        )
    return found.message


def read_project(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    path = root / "Pulumi.yaml"
    doc = load_yaml(_bytes(path), path.name)
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str) or not doc["name"]:
        raise StackFileError(f"{path.name} must be a map with the project's 'name:'")
    if not isinstance(doc.get("config") or {}, dict):
        raise StackFileError(f"{path.name}: 'config:' must be a map of keys to values or to {{type, default}}")
    return doc


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as err:
        raise StackFileError(f"{path.name} cannot be read: {err.strerror or err}") from None


def _stack_values(project: str, data: str | bytes, file_name: str) -> tuple[Any, dict[str, str]]:
    """A stack file's config as the engine hands it to the program ({"ns:key": text}). Raises
    StackFileError for a file the CLI cannot read, ConfigError (naming the key) for a config
    value it refuses."""
    doc, found = decode(data, _CONFIG_LEVEL + MAX_DEPTH)
    found = [f for f in found if f.kind != "nonfinite" or _in_config(f.path)]
    in_config = [f for f in found if _in_config(f.path) and f.kind != "syntax"]
    if len(in_config) < len(found):
        raise _file_error(file_name, [f for f in found if f not in in_config], project)
    if in_config:
        raise ConfigError([Problem(_problem_key(project, f.path), _config_problem(f)) for f in in_config])
    if doc is None:
        doc = {}
    if not isinstance(doc, dict) or not isinstance(doc.get("config") or {}, dict):
        raise StackFileError(f"{file_name} must be a map with a 'config:' map inside")
    wire: dict[str, str] = {}
    written: dict[str, str] = {}
    problems: list[Problem] = []
    for raw, value in (doc.get("config") or {}).items():
        full = _config_key(project, raw)
        if full is None:
            problems.append(
                Problem(
                    raw,
                    "is not a config key: Pulumi takes `<namespace>:<name>`, or a "
                    "name of this project without a namespace",
                )
            )
        elif full in written:
            problems.append(
                Problem(
                    full,
                    f"is set twice in {file_name}, as {written[full]!r} and {raw!r}, "
                    "and Pulumi would take either; keep one",
                )
            )
        else:
            written[full] = raw
            try:
                wire[full] = _program_text(value)
            except _ReadAgainError as err:
                problems.append(Problem(_path_text((full, *err.path)), err.message))
    if problems:
        raise ConfigError(problems)
    return doc, wire


def engine_config(stack: str, root: Path = PROJECT_ROOT, stack_file: Path | None = None) -> tuple[str, dict[str, str]]:
    """The project name and the config the engine hands the program for ``stack``
    (``{"namespace:key": text}``): project-level defaults from Pulumi.yaml, overridden by
    Pulumi.<stack>.yaml, or by ``stack_file`` when given (the Pulumi CLI's ``--config-file``: a
    stack file anywhere, the project still the one in ``root``). Raises StackFileError for a file
    the Pulumi CLI cannot read, and ConfigError (naming the key) for a config value it refuses."""
    project = read_project(root)
    name = project["name"]
    if stack_file is not None:
        path = stack_file
        if not path.is_file():
            raise FileNotFoundError(f"no stack file {path}")
    else:
        path = root / f"Pulumi.{stack}.yaml"
        if not path.exists():
            known = sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))
            raise FileNotFoundError(f"no stack file {path.name}; stacks here: {', '.join(known) or 'none'}")
    wire: dict[str, str] = {}
    for key, spec in (project.get("config") or {}).items():
        full = key if ":" in key else f"{name}:{key}"
        if isinstance(spec, dict) and ("default" in spec or "value" in spec):
            wire[full] = _project_default_text(spec.get("value", spec.get("default")))
        elif not isinstance(spec, dict):
            wire[full] = _project_default_text(spec)
    wire.update(_stack_values(name, _bytes(path), path.name)[1])
    return name, wire


def read_stack_config(
    stack: str, root: Path = PROJECT_ROOT, stack_file: Path | None = None
) -> tuple[str, dict[str, Any]]:
    """The project name and the stack's config exactly as the program sees it under `pulumi up`:
    ``decode_config_values`` of what the engine hands it (see ``engine_config``)."""
    name, wire = engine_config(stack, root, stack_file)
    return name, decode_config_values(wire)
