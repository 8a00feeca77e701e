"""Reading an offline plan folder (``python -m infra plan --stack S --out DIR``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from facts.kube import is_kubernetes_object

# libyaml's safe loader when PyYAML has it: the manifests hold large CRDs.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# What `python -m infra plan --out DIR` writes; resources.json and outputs.json make a folder a plan.
PLAN_FILES = ("resources.json", "manifests.yaml", "outputs.json", "releases.yaml", "cost.json")
REQUIRED = ("resources.json", "outputs.json")
RELEASE = "kubernetes:helm.sh/v3:Release"


class NotAPlan(Exception):
    """A folder given as a plan holds none."""


class Plan:
    """One plan folder: resources by (type, name), manifests by (apiVersion, kind, namespace, name)."""

    def __init__(
        self,
        resources: dict[tuple[str, str], dict],
        manifests: dict[tuple[str, str, str, str], dict],
        outputs: dict[str, Any],
        present: bool,
        cost: dict[str, Any] | None = None,
        release_objects: frozenset[tuple[str, str, str, str]] | None = None,
    ):
        self.resources = resources
        self.manifests = manifests
        self.outputs = outputs
        self.present = present  # False: the empty plan a new (or unplannable) side is compared as
        self.cost = cost  # cost.json: hourly cost at idle and at every group's maximum
        # The keys of the objects read from releases.yaml; None: the plan has no releases.yaml.
        self.release_objects = release_objects

    @property
    def releases(self) -> bool:
        """Whether the plan holds what its Helm releases install: it has releases.yaml, or no release (a plan made
        without helm has neither releases.yaml nor those objects)."""
        return self.release_objects is not None or not any(t == RELEASE for t, _ in self.resources)

    @classmethod
    def empty(cls) -> Plan:
        return cls({}, {}, {}, present=False)


def manifest_key(m: dict) -> tuple[str, str, str, str]:
    meta = m.get("metadata") or {}
    return (
        str(m.get("apiVersion", "")),
        str(m.get("kind", "")),
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
    )


def _relocate(value: Any, root: str) -> Any:
    """``value`` with every string path under ``root`` written as ``<project>/...``."""
    if isinstance(value, dict):
        return {k: _relocate(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_relocate(v, root) for v in value]
    if isinstance(value, str) and root in value:
        return value.replace(root, "<project>")
    return value


def check_plan_folder(folder: Path, side: str) -> None:
    """Raise NotAPlan, naming the folder and what a plan folder holds, unless ``folder`` holds a plan."""
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
    else:
        missing = [f for f in REQUIRED if not (folder / f).is_file()]
        if not missing:
            return
        what = f"holds no plan (no {' or '.join(missing)})"
    raise NotAPlan(
        f"{side} {folder} {what}. A plan folder is what `python -m infra plan --stack STACK --out DIR` writes: "
        f"{', '.join(PLAN_FILES)}."
        + (" For a stack the base branch does not have, pass --base-absent." if side == "BASE" else "")
    )


def index(records: list[dict]) -> dict[tuple[str, str], dict]:
    """Resources by (type, name), as resources.json lists them; the same type and name under two
    parents are told apart by parent."""
    resources: dict[tuple[str, str], dict] = {}
    for r in records:
        key = (r["type"], r["name"])
        if key in resources:
            parent = (r.get("parent") or {}).get("name", "")
            key = (r["type"], f"{r['name']} (in {parent})")
        resources[key] = r
    return resources


def load_plan(folder: Path, root: Path | None = None) -> Plan:
    """Read a plan folder (check_plan_folder first). ``root``: the project folder the plan was made
    from, written as ``<project>`` wherever a value holds it."""
    prefix = str(Path(root).resolve()) if root else None

    def read(value: Any) -> Any:
        return _relocate(value, prefix) if prefix else value

    records = read(json.loads((folder / "resources.json").read_text()))
    resources = index(records)
    # The objects the stack registers: manifests.yaml lists them, and resources.json holds the same documents as
    # the inputs of their records (read from there: JSON reads several times faster than megabytes of YAML).
    objects = [r["inputs"] for r in records if is_kubernetes_object(r["type"], r["inputs"])]
    manifests = {manifest_key(m): m for m in objects}
    released: set[tuple[str, str, str, str]] = set()
    # releases.yaml: what its Helm releases install.
    path = folder / "releases.yaml"
    if path.exists():
        for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
            if isinstance(doc, dict):
                manifests[manifest_key(doc)] = read(doc)
                released.add(manifest_key(doc))
    outputs = read(json.loads((folder / "outputs.json").read_text()))
    cost_path = folder / "cost.json"
    cost = json.loads(cost_path.read_text()) if cost_path.exists() else None
    kept = frozenset(released) if (folder / "releases.yaml").exists() else None
    return Plan(resources, manifests, outputs, present=True, cost=cost, release_objects=kept)
