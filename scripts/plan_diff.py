#!/usr/bin/env python3
"""Compare two offline plans (``python -m infra plan --stack S --out DIR``) and print a markdown
summary for a pull-request comment: a move of the GPU AZ (the stack output gpuAvailabilityZone)
first, in words; the change in hourly cost; a Capacity Block bought, in words; resources added,
removed and changed (by type and name, with the input keys that changed), Kubernetes objects (Helm
releases' objects included) added, removed and changed, and changed stack outputs.

    python scripts/plan_diff.py BASE_DIR HEAD_DIR [--title TEXT] [--base-status ok|absent|failed]
                                [--head-status ok|failed] [--head-log FILE] [--max-rows N]
                                [--base-root DIR] [--head-root DIR]

A plan folder that is missing (the stack is new in the pull request, or its plan failed) counts
as an empty plan. Should a plan record an absolute path of its checkout, --base-root and --head-root
make the folder each side was planned from read as ``<project>`` on both sides, so two checkouts in
different folders do not differ by their location. Needs only PyYAML. Exit code 0 whatever the
difference; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

MARKER = "<!-- gpu-training offline plan diff -->"
# libyaml's safe loader when PyYAML has it: the manifests hold large CRDs.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MISSING = object()


# ---------------------------------------------------------------------------------------------
# Reading plans
# ---------------------------------------------------------------------------------------------


class Plan:
    """One plan folder: resources by (type, name), manifests by (apiVersion, kind, namespace, name)."""

    def __init__(
        self,
        resources: dict[tuple[str, str], dict],
        manifests: dict[tuple[str, str, str, str], dict],
        outputs: dict[str, Any],
        present: bool,
        cost: dict[str, Any] | None = None,
    ):
        self.resources = resources
        self.manifests = manifests
        self.outputs = outputs
        self.present = present
        self.cost = cost  # cost.json: hourly cost at idle and at every group's maximum


def _resource_key(r: dict) -> tuple[str, str]:
    return (r["type"], r["name"])


def _manifest_key(m: dict) -> tuple[str, str, str, str]:
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


def load_plan(folder: Path | None, root: Path | None = None) -> Plan:
    """Read a plan folder; a missing one is an empty plan. ``root``: the project folder the plan
    was made from, written as ``<project>`` wherever a value holds it."""
    if folder is None or not (folder / "resources.json").exists():
        return Plan({}, {}, {}, present=False)
    prefix = str(Path(root).resolve()) if root else None

    def read(value: Any) -> Any:
        return _relocate(value, prefix) if prefix else value

    resources: dict[tuple[str, str], dict] = {}
    for r in read(json.loads((folder / "resources.json").read_text())):
        key = _resource_key(r)
        if key in resources:  # the same type and name under two parents: tell them apart by parent
            parent = (r.get("parent") or {}).get("name", "")
            key = (r["type"], f"{r['name']} (in {parent})")
        resources[key] = r
    manifests: dict[tuple[str, str, str, str], dict] = {}
    # manifests.yaml: the objects the stack registers; releases.yaml: what its Helm releases install.
    for path in (folder / "manifests.yaml", folder / "releases.yaml"):
        if path.exists():
            for doc in yaml.load_all(path.read_text(), Loader=_LOADER):
                if isinstance(doc, dict):
                    manifests[_manifest_key(doc)] = read(doc)
    outputs_path = folder / "outputs.json"
    outputs = read(json.loads(outputs_path.read_text())) if outputs_path.exists() else {}
    cost_path = folder / "cost.json"
    cost = json.loads(cost_path.read_text()) if cost_path.exists() else None
    return Plan(resources, manifests, outputs, present=True, cost=cost)


# ---------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------


def changed_paths(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths (``a.b[0].c``) whose values differ between ``old`` and ``new``."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{k}" if prefix else str(k)
            if k not in old or k not in new:
                out.append(path)
            else:
                out.extend(changed_paths(old[k], new[k], path))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out.extend(changed_paths(a, b, f"{prefix}[{i}]"))
        return out
    return [] if old == new else [prefix or "(value)"]


def resource_changes(old: dict, new: dict) -> list[str]:
    keys = changed_paths(old.get("inputs") or {}, new.get("inputs") or {})
    keys = [f"inputs.{k}" for k in keys]
    if (old.get("parent") or None) != (new.get("parent") or None):
        keys.append("parent")
    if sorted(map(json.dumps, old.get("dependsOn") or [])) != sorted(map(json.dumps, new.get("dependsOn") or [])):
        keys.append("dependsOn")
    # protect, retainOnDelete, ignoreChanges, deleteBeforeReplace, aliases: what up and destroy do with it.
    keys += [f"options.{k}" for k in changed_paths(old.get("options") or {}, new.get("options") or {})]
    return keys


def manifest_changes(old: dict, new: dict) -> list[str]:
    return changed_paths(old, new)


class Diff:
    def __init__(self, base: Plan, head: Plan):
        self.base, self.head = base, head
        self.resources_added = sorted(set(head.resources) - set(base.resources))
        self.resources_removed = sorted(set(base.resources) - set(head.resources))
        self.resources_changed = [
            (k, resource_changes(base.resources[k], head.resources[k]))
            for k in sorted(set(base.resources) & set(head.resources))
            if base.resources[k] != head.resources[k]
        ]
        self.resources_changed = [(k, c) for k, c in self.resources_changed if c]
        self.manifests_added = sorted(set(head.manifests) - set(base.manifests))
        self.manifests_removed = sorted(set(base.manifests) - set(head.manifests))
        self.manifests_changed = [
            (k, manifest_changes(base.manifests[k], head.manifests[k]))
            for k in sorted(set(base.manifests) & set(head.manifests))
            if base.manifests[k] != head.manifests[k]
        ]
        self.outputs_changed = sorted(
            k
            for k in set(base.outputs) | set(head.outputs)
            if base.outputs.get(k, _MISSING) != head.outputs.get(k, _MISSING)
        )

    @property
    def empty(self) -> bool:
        return not (
            self.resources_added
            or self.resources_removed
            or self.resources_changed
            or self.manifests_added
            or self.manifests_removed
            or self.manifests_changed
            or self.outputs_changed
        )


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------


def _code(text: str) -> str:
    return "`" + str(text).replace("`", "'").replace("|", "\\|") + "`"


def _keys(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(_code(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _table(header: list[str], rows: Iterable[list[str]], max_rows: int) -> list[str]:
    rows = list(rows)
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows[:max_rows]]
    if len(rows) > max_rows:
        out.append(f"\n_... and {len(rows) - max_rows} more_")
    return out + [""]


def _manifest_name(key: tuple[str, str, str, str]) -> str:
    _, _, ns, name = key
    return f"{ns}/{name}" if ns else name


def _cost_lines(base: dict[str, Any] | None, head: dict[str, Any] | None) -> list[str]:
    """What the pull request does to the stack's hourly cost (idle, and every group at its maximum)."""
    if not head:
        return []

    def money(v: float) -> str:
        return f"${v:,.2f}/h"

    def change(key: str) -> str:
        new = float(head[key])
        if not base:
            return money(new)
        old = float(base[key])
        delta = new - old
        return (
            money(new)
            if abs(delta) < 0.005
            else f"{money(old)} → {money(new)} (**{'+' if delta > 0 else '-'}${abs(delta):,.2f}/h**)"
        )

    where = f"on-demand, {head.get('region')} prices of {head.get('date')}"
    return [f"Cost ({where}): idle {change('idlePerHour')}; every group at its maximum {change('maximumPerHour')}.", ""]


CAPACITY_BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"


def purchases(diff: Diff) -> list[tuple[str, str]]:
    """(resource name, offering id) of each Capacity Block the head plan buys and the base plan did
    not: `pulumi up` pays for it at once, irreversibly, so the comment says it in words."""
    bought = {
        (r.get("inputs") or {}).get("capacityBlockOfferingId")
        for k, r in diff.base.resources.items()
        if k[0] == CAPACITY_BLOCK
    }
    new = [
        (k[1], str((r.get("inputs") or {}).get("capacityBlockOfferingId")))
        for k, r in diff.head.resources.items()
        if k[0] == CAPACITY_BLOCK
    ]
    return sorted((name, offering) for name, offering in new if offering not in bought)


GPU_AZ = "gpuAvailabilityZone"


def gpu_az_move(diff: Diff) -> tuple[str, str] | None:
    """(from, to) when the head plan puts the GPU nodes in another AZ than the base plan (the stack
    output gpuAvailabilityZone): on a deployed stack that replaces the GPU node groups and FSx, so the
    comment says it in words, first."""
    old, new = diff.base.outputs.get(GPU_AZ), diff.head.outputs.get(GPU_AZ)
    if not diff.base.present or not old or not new or old == new:
        return None
    return str(old), str(new)


def _gpu_az_move_lines(diff: Diff) -> list[str]:
    move = gpu_az_move(diff)
    if move is None:
        return []
    return [
        f"**This change MOVES the GPU AZ** from {_code(move[0])} to "
        f"{_code(move[1])} (stack output `{GPU_AZ}`). On a deployed stack, "
        "`pulumi up` replaces every GPU node group (their nodes, and the jobs running "
        "on them), FSx for Lustre (a new, empty file system) "
        "and the training jobs, and moves the GPU subnet. With "
        "`gpuAvailabilityZone: auto` a deployed stack keeps its AZ instead, and "
        "`pulumi preview` refuses the GPU types that AZ does not offer (the offline plan is the plan of a new stack); "
        "to move on purpose, set `gpuAvailabilityZone` to the new AZ.",
        "",
    ]


def render(
    diff: Diff, title: str, base_status: str = "ok", head_status: str = "ok", head_log: str = "", max_rows: int = 50
) -> str:
    lines = [MARKER, f"### {title}", ""]
    if head_status != "ok":
        lines += [
            "**The offline plan of this pull request failed**, so there is nothing to compare. Its output:",
            "",
            "```",
        ]
        lines += head_log.rstrip().splitlines()[-40:] or ["(no output)"]
        lines += ["```", ""]
        return "\n".join(lines) + "\n"
    if base_status == "absent" or (base_status == "ok" and not diff.base.present):
        lines += ["The base branch has no plan for this stack (new stack): everything below is added.", ""]
    elif base_status == "failed":
        lines += ["The offline plan of the base branch failed: everything below is compared with an empty plan.", ""]
    lines += _gpu_az_move_lines(diff)
    b, h = diff.base, diff.head
    lines.append(
        f"Resources: **{len(diff.resources_added)} added, {len(diff.resources_removed)} removed, "
        f"{len(diff.resources_changed)} changed** "
        f"({len(b.resources)} → {len(h.resources)}). Kubernetes objects: **{len(diff.manifests_added)} added, "
        f"{len(diff.manifests_removed)} removed, {len(diff.manifests_changed)} "
        f"changed** ({len(b.manifests)} → {len(h.manifests)})."
    )
    lines.append("")
    lines += _cost_lines(b.cost, h.cost)
    for name, offering in purchases(diff):
        lines += [
            "**This change BUYS a Capacity Block:** `pulumi up` purchases "
            f"offering {_code(offering)} (resource {_code(name)}). "
            "The purchase is irreversible: its upfront fee is charged at once and never "
            "refunded (`python -m infra preflight` shows the fee).",
            "",
        ]
    if diff.empty:
        lines += ["No difference in resources, Kubernetes objects or stack outputs.", ""]
        return "\n".join(lines) + "\n"
    if diff.resources_added:
        lines += ["#### Resources added", ""] + _table(
            ["type", "name"], ([_code(t), _code(n)] for t, n in diff.resources_added), max_rows
        )
    if diff.resources_removed:
        lines += ["#### Resources removed", ""] + _table(
            ["type", "name"], ([_code(t), _code(n)] for t, n in diff.resources_removed), max_rows
        )
    if diff.resources_changed:
        lines += ["#### Resources changed", ""] + _table(
            ["type", "name", "changed"],
            ([_code(t), _code(n), _keys(c)] for (t, n), c in diff.resources_changed),
            max_rows,
        )
    if diff.manifests_added:
        lines += ["#### Kubernetes objects added", ""] + _table(
            ["kind", "name"],
            ([_code(f"{k[1]} ({k[0]})"), _code(_manifest_name(k))] for k in diff.manifests_added),
            max_rows,
        )
    if diff.manifests_removed:
        lines += ["#### Kubernetes objects removed", ""] + _table(
            ["kind", "name"],
            ([_code(f"{k[1]} ({k[0]})"), _code(_manifest_name(k))] for k in diff.manifests_removed),
            max_rows,
        )
    if diff.manifests_changed:
        lines += ["#### Kubernetes objects changed", ""] + _table(
            ["kind", "name", "changed"],
            ([_code(f"{k[1]} ({k[0]})"), _code(_manifest_name(k)), _keys(c)] for k, c in diff.manifests_changed),
            max_rows,
        )
    if diff.outputs_changed:
        lines += ["#### Stack outputs changed", "", _keys(diff.outputs_changed, limit=max_rows), ""]
    lines += [
        "<sub>Offline plan: the stack's program run against recorded AWS data, no "
        "credentials. `pulumi preview` has the real diff.</sub>",
        "",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, out: Any = None) -> int:
    parser = argparse.ArgumentParser(description="Markdown summary of the difference between two offline plan folders.")
    parser.add_argument("base", type=Path, help="plan folder of the base branch (may be missing: empty plan)")
    parser.add_argument("head", type=Path, help="plan folder of the pull request")
    parser.add_argument("--title", default="Offline plan diff")
    parser.add_argument("--base-status", choices=["ok", "absent", "failed"], default="ok")
    parser.add_argument("--head-status", choices=["ok", "failed"], default="ok")
    parser.add_argument("--head-log", type=Path, help="output of the head's plan, shown when it failed")
    parser.add_argument("--max-rows", type=int, default=50, help="rows per table at most")
    parser.add_argument("--base-root", type=Path, help="project folder the base was planned from")
    parser.add_argument("--head-root", type=Path, help="project folder the head was planned from")
    args = parser.parse_args(argv)
    out = out or sys.stdout
    base = load_plan(args.base if args.base_status == "ok" else None, args.base_root)
    head = load_plan(args.head if args.head_status == "ok" else None, args.head_root)
    log = args.head_log.read_text(errors="replace") if args.head_log and args.head_log.exists() else ""
    out.write(render(Diff(base, head), args.title, args.base_status, args.head_status, log, args.max_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
