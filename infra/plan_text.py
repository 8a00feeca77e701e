"""The text of the offline plan's files, written by the standard emitters.

- JSON (resources.json, outputs.json, cost.json): ``json.dumps`` indented by two spaces, text as it
  is (no ``\\u`` escapes), and a final line break.
- YAML (manifests.yaml, releases.yaml): the Kubernetes objects as one multi-document text, each
  document started with ``---``, by PyYAML's safe dumper over LibYAML (``CSafeDumper``; the
  pure-Python ``SafeDumper`` where PyYAML was built without LibYAML): keys in the objects' own
  order, block style, multi-line text as a literal block (``|``) where YAML allows one.

The same objects give the same bytes: both emitters are deterministic and keys keep their order.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

_STR = "tag:yaml.org,2002:str"


def json_text(value: Any) -> str:
    """``value`` as the plan's JSON files hold it."""
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


if getattr(yaml, "__with_libyaml__", False):

    class PlanDumper(yaml.CSafeDumper):
        """The safe dumper the YAML files are written with (LibYAML's emitter)."""

else:  # PyYAML built without LibYAML

    class PlanDumper(yaml.SafeDumper):  # type: ignore[no-redef]
        """The safe dumper the YAML files are written with (the pure-Python emitter)."""


def _str_presenter(dumper: yaml.representer.SafeRepresenter, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(_STR, data, style="|" if "\n" in data else None)


PlanDumper.add_representer(str, _str_presenter)


def manifests_yaml(objects: list[Any]) -> str:
    """The Kubernetes objects as one multi-document YAML text ("" for none)."""
    return yaml.dump_all(objects, Dumper=PlanDumper, sort_keys=False, default_flow_style=False, explicit_start=True)
