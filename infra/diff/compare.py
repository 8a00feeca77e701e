"""Comparing two plans: what each changed resource's change does on `pulumi up`, terraform-style:
``-/+`` replace (delete and create, or create and delete), ``~`` update in place, ``+`` add, ``-`` remove.

An input under one of the new program's ``ignoreChanges`` paths is no change: the Pulumi engine sends the
value in the state instead (and pulumi-kubernetes drops those paths from its own diff too,
provider/pkg/provider/provider.go ``req.IgnoreChanges``, read at 94977969).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from infra.diff.plans import Plan, manifest_key
from infra.diff.replace_fields import STATEFUL, rule_for

REPLACE, UPDATE = "-/+", "~"
_MISSING = object()
Key = tuple[str, str]


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


def ignored(record: dict) -> tuple[str, ...]:
    """The record's ``ignoreChanges`` paths."""
    return tuple((record.get("options") or {}).get("ignoreChanges") or ())


def is_ignored(path: str, ignore: tuple[str, ...]) -> bool:
    """Whether a change at input ``path`` is at or under one of the ``ignore`` paths."""
    return any(_pattern(f).match(path) for f in ignore)


def effective_inputs(old: dict, new: dict) -> dict[str, Any]:
    """The inputs `pulumi up` sends for ``new``: its own, with each (dotted) ``ignoreChanges`` path
    taken from ``old`` (the state), or left out where ``old`` has none."""
    out = copy.deepcopy(new.get("inputs") or {})
    for path in ignored(new):
        if "[" in path:
            continue  # a path into lists: not used by this stack's ignoreChanges
        *parents, leaf = path.split(".")
        src: Any = old.get("inputs") or {}
        dst: Any = out
        for part in parents:
            src = src.get(part) if isinstance(src, dict) else None
            if not isinstance(dst.get(part), dict):
                dst[part] = {}
            dst = dst[part]
        if isinstance(src, dict) and leaf in src:
            dst[leaf] = copy.deepcopy(src[leaf])
        else:
            dst.pop(leaf, None)
    return out


def _deps(record: dict) -> list[str]:
    """A record's dependsOn, in no order (of the list or of each entry's keys)."""
    return sorted(json.dumps(d, sort_keys=True) for d in record.get("dependsOn") or [])


def resource_changes(old: dict, new: dict) -> list[str]:
    """What differs between two records of one resource: ``inputs.<path>`` (but those the new record's
    ``ignoreChanges`` covers), ``parent``, ``dependsOn``, ``options.<key>``."""
    ignore = ignored(new)
    keys = [
        f"inputs.{k}"
        for k in changed_paths(old.get("inputs") or {}, new.get("inputs") or {})
        if not is_ignored(k, ignore)
    ]
    if (old.get("parent") or None) != (new.get("parent") or None):
        keys.append("parent")
    if _deps(old) != _deps(new):
        keys.append("dependsOn")
    # protect, retainOnDelete, ignoreChanges, replaceOnChanges, deleteBeforeReplace, aliases.
    keys += [f"options.{k}" for k in changed_paths(old.get("options") or {}, new.get("options") or {})]
    return keys


@lru_cache(maxsize=1024)
def _pattern(field_path: str) -> re.Pattern[str]:
    # "a.b[*].c" -> a path at or under it; "[*]" is any index.
    body = re.escape(field_path).replace(re.escape("[*]"), r"\[\d+\]")
    return re.compile(rf"{body}(?:$|[.\[])")


def touches(path: str, field_path: str) -> bool:
    """Whether a change at input ``path`` changes the input ``field_path``: at it, under it, or
    above it (a whole block added or removed)."""
    if field_path == "*":
        return True
    if _pattern(field_path).match(path):
        return True
    return field_path.startswith(path) and field_path[len(path) : len(path) + 1] in (".", "[")


@dataclass
class Change:
    """One resource in both plans that `pulumi up` would touch."""

    key: Key
    action: str  # REPLACE or UPDATE
    paths: list[str]  # what differs (resource_changes)
    forced_by: list[str] = field(default_factory=list)  # the changed paths that force the replacement
    follows: list[Key] = field(
        default_factory=list
    )  # replaced resources whose new id reaches a replace-on-change input
    known: bool = True  # False: no replace rule for the type (`pulumi preview` decides)
    delete_first: bool = False  # deleteBeforeReplace: the old one goes before the new one exists

    @property
    def state_only(self) -> bool:
        """Nothing `pulumi up` sends to a provider changes: only what Pulumi records of the resource
        (dependsOn, resource options, a parent an alias covers). Pulumi's engine diffs a resource on its
        provider and inputs only (pulumi/pulumi pkg/resource/deploy/step_generator.go, stepGenerator.diff):
        such a resource is no update in `pulumi preview`, and nothing happens to it in the cloud."""
        return self.action == UPDATE and not self.follows and not any(p.startswith("inputs.") for p in self.paths)

    @property
    def stateful(self) -> str | None:
        """What replacing it means, for the types whose replacement loses data or takes long."""
        return STATEFUL.get(self.key[0]) if self.action == REPLACE else None


def _fields(record: dict) -> tuple[str, ...]:
    rule = rule_for(record["type"])
    own = tuple((record.get("options") or {}).get("replaceOnChanges") or ())
    return (rule.fields if rule else ()) + own


def _forces(typ: str, path: str, fields: tuple[str, ...]) -> bool:
    """Whether a change at input ``path`` of a resource of type ``typ`` replaces it."""
    rule = rule_for(typ)
    if rule is not None and any(touches(path, f) and path.startswith(f) for f in rule.in_place):
        return False
    return any(touches(path, f) for f in fields)


def _leaves(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(path, string) for every string leaf of an input tree."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{prefix}[{i}]")
    elif isinstance(value, str):
        yield prefix, value


def _identities(key: Key, record: dict) -> list[str]:
    """The strings by which other resources' inputs name this one: its id, and the resource
    reference the SDK sends for a component handed over whole."""
    out = [f"resource:{key[0]}::{record['name']}"]
    rid = record.get("id")
    if isinstance(rid, str) and len(rid) >= 8:
        out.append(rid)
    return out


def classify(key: Key, old: dict, new: dict) -> Change | None:
    """The change of one resource present in both plans, or None when nothing differs."""
    paths = resource_changes(old, new)
    if not paths:
        return None
    fields = _fields(new)
    inputs = [p[len("inputs.") :] for p in paths if p.startswith("inputs.")]
    forced = [f"inputs.{p}" for p in inputs if _forces(key[0], p, fields)]
    rule = rule_for(key[0])
    if rule is not None and rule.replaces_when is not None:
        on_values = rule.replaces_when(old.get("inputs") or {}, effective_inputs(old, new))
        forced += [f"inputs.{f}" for f in on_values if f"inputs.{f}" not in forced]
    if "parent" in paths and not (new.get("options") or {}).get("aliases"):
        forced.append("parent")  # a new URN: created anew and the old one deleted, unless an alias names it
    known = rule is not None or bool(fields)
    return Change(
        key,
        REPLACE if forced else UPDATE,
        paths,
        forced_by=forced,
        known=known or bool(forced),
        delete_first=bool((new.get("options") or {}).get("deleteBeforeReplace")),
    )


def propagate(base: Plan, head: Plan, changes: dict[Key, Change]) -> None:
    """Resources that name a replaced resource (by id or reference) are touched too: its new id is
    unknown until `pulumi up` creates it, so an input holding it changes. In a replace-on-change
    input that replaces them as well (to a fixed point); elsewhere it updates them in place."""
    common = [k for k in base.resources if k in head.resources]
    leaves = {k: list(_leaves(base.resources[k].get("inputs") or {})) for k in common}
    done: set[Key] = set()
    while True:
        replaced = [k for k, c in changes.items() if c.action == REPLACE and k not in done]
        if not replaced:
            return
        done.update(replaced)
        idents = {i: k for k in replaced for i in _identities(k, base.resources[k])}
        for k in common:
            if k in replaced:
                continue
            hits = [(p, idents[i]) for p, v in leaves[k] for i in idents if i in v]
            if hits:
                _follow(k, base.resources[k], head.resources[k], hits, changes)


def _follow(key: Key, old: dict, new: dict, hits: list[tuple[str, Key]], changes: dict[Key, Change]) -> None:
    fields = _fields(new)
    change = changes.get(key) or Change(key, UPDATE, [], known=rule_for(key[0]) is not None or bool(fields))
    for path, source in hits:
        if source not in change.follows:
            change.follows.append(source)
        if _forces(key[0], path, fields):
            change.action = REPLACE
            if f"inputs.{path}" not in change.forced_by:
                change.forced_by.append(f"inputs.{path}")
        elif f"inputs.{path}" not in change.paths:
            change.paths.append(f"inputs.{path}")
    change.delete_first = bool((new.get("options") or {}).get("deleteBeforeReplace"))
    changes[key] = change


def _manifest_ignores(head: Plan) -> dict[tuple[str, str, str, str], tuple[str, ...]]:
    """The ``ignoreChanges`` of each registered Kubernetes object, by its manifest's key: a change there is
    none (the object keeps the value in the state)."""
    out = {}
    for r in head.resources.values():
        inputs = r.get("inputs") or {}
        if r["type"].startswith("kubernetes:") and ignored(r) and "kind" in inputs:
            out[manifest_key(inputs)] = ignored(r)
    return out


def _object_key(record: dict) -> tuple[str, str, str, str] | None:
    """The manifest key of a Kubernetes resource's object (None for any other resource)."""
    inputs = record.get("inputs") or {}
    return manifest_key(inputs) if record["type"].startswith("kubernetes:") and "kind" in inputs else None


def _comparable(base: Plan, head: Plan) -> tuple[dict, dict]:
    """The objects of both plans to compare: all of them, but what the Helm releases install when only one side
    holds it (a plan made without helm): those would read as added or removed."""
    if not (base.present and head.present) or base.releases == head.releases:
        return base.manifests, head.manifests
    drop = (base.release_objects or frozenset()) | (head.release_objects or frozenset())
    return (
        {k: v for k, v in base.manifests.items() if k not in drop},
        {k: v for k, v in head.manifests.items() if k not in drop},
    )


def _replace_order(change: Change) -> tuple[int, int, Key]:
    order = list(STATEFUL)
    typ = change.key[0]
    return (0, order.index(typ), change.key) if typ in STATEFUL else (1, 0, change.key)


class Diff:
    """What `pulumi up` would do going from ``base`` to ``head``, in the order a reviewer reads it:
    replacements (stateful and slow ones first), in-place updates, additions, removals."""

    def __init__(self, base: Plan, head: Plan):
        self.base, self.head = base, head
        self.resources_added = sorted(set(head.resources) - set(base.resources))
        self.resources_removed = sorted(set(base.resources) - set(head.resources))
        changes: dict[Key, Change] = {}
        for k in sorted(set(base.resources) & set(head.resources)):
            c = classify(k, base.resources[k], head.resources[k])
            if c is not None:
                changes[k] = c
        propagate(base, head, changes)
        self.replaced = sorted((c for c in changes.values() if c.action == REPLACE), key=_replace_order)
        updates = sorted((c for c in changes.values() if c.action == UPDATE), key=lambda c: c.key)
        self.updated = [c for c in updates if not c.state_only]
        self.state_only = [c for c in updates if c.state_only]
        base_objects, head_objects = _comparable(base, head)
        self.manifests_added = sorted(set(head_objects) - set(base_objects))
        self.manifests_removed = sorted(set(base_objects) - set(head_objects))
        ignore = _manifest_ignores(head)
        # Objects whose resource is replaced: deleted and created again, whatever their manifest says.
        self.manifests_replaced = {
            key: c for c in self.replaced if (key := _object_key(head.resources[c.key])) in head.manifests
        }
        self.manifests_changed = [
            (k, paths)
            for k in sorted(set(base_objects) & set(head_objects))
            if base_objects[k] != head_objects[k]
            and (
                paths := [
                    p for p in changed_paths(base_objects[k], head_objects[k]) if not is_ignored(p, ignore.get(k, ()))
                ]
            )
        ]
        self.outputs_changed = sorted(
            k
            for k in set(base.outputs) | set(head.outputs)
            if base.outputs.get(k, _MISSING) != head.outputs.get(k, _MISSING)
        )

    @property
    def resources_changed(self) -> list[Change]:
        return self.replaced + self.updated

    @property
    def objects_updated(self) -> list[tuple[tuple[str, str, str, str], list[str]]]:
        """Kubernetes objects changed in place: changed, and not replaced."""
        return [(k, p) for k, p in self.manifests_changed if k not in self.manifests_replaced]

    @property
    def empty(self) -> bool:
        return not (
            self.resources_added
            or self.resources_removed
            or self.replaced
            or self.updated
            or self.state_only
            or self.manifests_added
            or self.manifests_removed
            or self.manifests_changed
            or self.outputs_changed
        )
