"""The markdown a pull-request comment (and a terminal) shows of a Diff."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from infra.diff.compare import REPLACE, UPDATE, Change, Diff
from infra.diff.impact import lines as impact_lines
from infra.diff.impact import rolls
from infra.diff.refusals import Refusal
from infra.diff.refusals import of_diff as refusals_of
from infra.diff.replace_fields import rule_for
from infra.diff.values import change as value_change

MARKER = "<!-- gpu-training offline plan diff -->"
CAPACITY_BLOCK = "aws:ec2/capacityBlockReservation:CapacityBlockReservation"
GPU_AZ = "gpuAvailabilityZone"


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
        f"**This change MOVES the GPU AZ** from {_code(move[0])} to {_code(move[1])} (stack output `{GPU_AZ}`). On a "
        "deployed stack, `pulumi up` replaces every GPU node group (their nodes, and the jobs running on them), FSx "
        "for Lustre (a new, empty file system) and the training jobs, and moves the GPU subnet. With "
        "`gpuAvailabilityZone: auto` a deployed stack keeps its AZ instead, and `pulumi preview` refuses the GPU "
        "types that AZ does not offer (the offline plan is the plan of a new stack); to move on purpose, set "
        "`gpuAvailabilityZone` to the new AZ.",
        "",
    ]


def _refused_lines(found: list[Refusal], max_rows: int) -> list[str]:
    """What the API refuses of `pulumi up` on the stack deployed from the base: said first, after a GPU AZ
    move (infra/diff/refusals.py)."""
    if not found:
        return []
    head = (
        f"**`pulumi up` of the deployed stack would FAIL: the API REFUSES {len(found)} change"
        f"{'s' if len(found) != 1 else ''}** (on update; a new stack would take them):"
    )
    return [head, ""] + _table(
        ["", "type", "name", "change", "rule (source)"],
        (["REFUSED", _code(r.key[0]), _code(r.key[1]), _code(r.change), f"{r.rule} ({r.source})"] for r in found),
        max_rows,
    )


def _why_replaced(c: Change) -> str:
    parts = []
    if c.forced_by:
        parts.append("forced by " + _keys(c.forced_by, limit=4))
    if c.follows:
        parts.append("new id of " + ", ".join(_code(f"{n} ({t})") for t, n in c.follows[:3]))
    if c.stateful:
        parts.append(f"**{c.stateful}**")
    if c.delete_first:
        parts.append("deleted before its replacement is created")
    return "; ".join(parts)


def _why_updated(c: Change, refused: set[tuple[str, str]]) -> str:
    shown = _keys(c.paths) + (" (**REFUSED**: see above)" if c.key in refused else "")
    if c.follows:
        shown += "; new id of " + ", ".join(_code(f"{n} ({t})") for t, n in c.follows[:3])
    rule = rule_for(c.key[0])
    if not c.known:
        shown += " (no replace-on-change rule recorded for this type: `pulumi preview` decides)"
    elif (
        rule is not None
        and rule.note
        and any(p == f"inputs.{f}" or p.startswith(f"inputs.{f}") for p in c.paths for f in rule.note_fields)
    ):
        shown += f" (note: {rule.note})"
    return shown


def _status_lines(base_status: str, head_status: str, head_log: str) -> list[str]:
    if head_status != "ok":
        lines = [
            "**The offline plan of this pull request failed**, so there is nothing to compare. Its output:",
            "",
            "```",
        ]
        lines += head_log.rstrip().splitlines()[-40:] or ["(no output)"]
        return lines + ["```", ""]
    if base_status == "absent":
        return ["The base branch has no plan for this stack (new stack): everything below is added.", ""]
    if base_status == "failed":
        return ["The offline plan of the base branch failed: everything below is compared with an empty plan.", ""]
    return []


def _rolled(diff: Diff) -> dict[tuple[str, str], str]:
    """The note on the row of each node group that rolls, and of each launch template that makes it roll."""
    out: dict[tuple[str, str], list[str]] = {}
    for r in rolls(diff):
        out.setdefault(r.key, []).append(f"rolls the nodes of `{r.group}`")
        for t in r.templates:
            out.setdefault(t, []).append(f"a new version: node group `{r.group}` rolls")
    return {k: " (**" + "; ".join(v) + "**, see above)" for k, v in out.items()}


def _resource_sections(diff: Diff, max_rows: int, refused: set[tuple[str, str]]) -> list[str]:
    lines: list[str] = []
    rolled = _rolled(diff)
    if diff.replaced:
        lines += ["#### Replaced (`-/+`)", ""] + _table(
            ["", "type", "name", "why"],
            ([REPLACE, _code(c.key[0]), _code(c.key[1]), _why_replaced(c)] for c in diff.replaced),
            max_rows,
        )
    if diff.updated:
        lines += ["#### Updated in place (`~`)", ""] + _table(
            ["", "type", "name", "changed"],
            (
                [UPDATE, _code(c.key[0]), _code(c.key[1]), _why_updated(c, refused) + rolled.get(c.key, "")]
                for c in diff.updated
            ),
            max_rows,
        )
    if diff.state_only:
        lines += ["#### Recorded in the state only (nothing changes in the cloud)", ""] + _table(
            ["type", "name", "changed"],
            ([_code(c.key[0]), _code(c.key[1]), _keys(c.paths)] for c in diff.state_only),
            max_rows,
        )
    if diff.resources_added:
        lines += ["#### Added (`+`)", ""] + _table(
            ["", "type", "name"], (["+", _code(t), _code(n)] for t, n in diff.resources_added), max_rows
        )
    if diff.resources_removed:
        lines += ["#### Removed (`-`)", ""] + _table(
            ["", "type", "name"], (["-", _code(t), _code(n)] for t, n in diff.resources_removed), max_rows
        )
    return lines


def _manifest_sections(diff: Diff, max_rows: int) -> list[str]:
    lines: list[str] = []

    def kind(k: tuple[str, str, str, str]) -> str:
        return _code(f"{k[1]} ({k[0]})")

    if diff.manifests_added:
        lines += ["#### Kubernetes objects added", ""] + _table(
            ["kind", "name"], ([kind(k), _code(_manifest_name(k))] for k in diff.manifests_added), max_rows
        )
    if diff.manifests_removed:
        lines += ["#### Kubernetes objects removed", ""] + _table(
            ["kind", "name"], ([kind(k), _code(_manifest_name(k))] for k in diff.manifests_removed), max_rows
        )
    changed = dict(diff.manifests_changed)
    marked = sorted(set(changed) | set(diff.manifests_replaced))
    if marked:

        def why(k: tuple[str, str, str, str]) -> str:
            if k in changed:
                return _keys(changed[k])
            c = diff.manifests_replaced[k]
            return f"its resource {_code(c.key[1])} is replaced ({_why_replaced(c)})"

        lines += ["#### Kubernetes objects changed", ""] + _table(
            ["", "kind", "name", "changed"],
            (
                [REPLACE if k in diff.manifests_replaced else UPDATE, kind(k), _code(_manifest_name(k)), why(k)]
                for k in marked
            ),
            max_rows,
        )
    return lines


def _value_rows(diff: Diff) -> list[list[str]]:
    """One row per changed input (resources) and field (Kubernetes objects): old and new value."""
    rows = []
    for c in diff.replaced + diff.updated:
        old, new = diff.base.resources[c.key].get("inputs"), diff.head.resources[c.key].get("inputs")
        secret = c.key[0] == "kubernetes:core/v1:Secret"
        for path in [p for p in c.paths + c.forced_by if p.startswith("inputs.")][:8]:
            cells = _value_cells(old, new, path[len("inputs.") :], secret, path)
            if cells[1] == cells[2] and c.follows:  # the plan shows the old id: the new one is known after the up
                cells[2] = "(known after `pulumi up`: new id of " + ", ".join(_code(n) for _, n in c.follows[:3]) + ")"
            rows.append([_code(c.key[1]), *cells])
    for k, paths in diff.manifests_changed:
        secret = k[1] == "Secret"
        for path in paths[:8]:
            rows.append(
                [
                    _code(f"{k[1]} {_manifest_name(k)}"),
                    *_value_cells(diff.base.manifests[k], diff.head.manifests[k], path, secret, path),
                ]
            )
    unique: dict[str, list[str]] = {}
    for r in rows:
        unique.setdefault("|".join(r), r)
    return list(unique.values())


def _value_cells(old: Any, new: Any, path: str, secret: bool, shown: str) -> list[str]:
    was, now, where = value_change(old, new, path, secret_data=secret)
    return [_code(shown), _code(was), _code(now) + (f" (first difference: {_code(where)})" if where else "")]


def _value_lines(diff: Diff, max_rows: int) -> list[str]:
    rows = _value_rows(diff)
    if not rows:
        return []
    return ["#### Values (old → new)", ""] + _table(["resource or object", "path", "old", "new"], rows, max_rows)


def _count_lines(diff: Diff) -> list[str]:
    """What changes, counted as `pulumi up` does it: a resource whose only change is what Pulumi records of it
    (dependsOn, options) is counted apart; a Kubernetes object whose resource is replaced is replaced."""
    b, h = diff.base, diff.head
    state = (
        f"; {len(diff.state_only)} with only dependsOn or options changed (recorded in the state, nothing changes "
        "in the cloud)"
        if diff.state_only
        else ""
    )
    return [
        f"Resources: **{len(diff.replaced)} to replace, {len(diff.updated)} to update in place, "
        f"{len(diff.resources_added)} to add, {len(diff.resources_removed)} to remove** ({len(b.resources)} → "
        f"{len(h.resources)}){state}. Kubernetes objects: **{len(diff.manifests_added)} added, "
        f"{len(diff.manifests_removed)} removed, {len(diff.manifests_replaced)} replaced, "
        f"{len(diff.objects_updated)} changed in place** ({len(b.manifests)} → {len(h.manifests)}).",
        "",
    ]


def _release_lines(diff: Diff) -> list[str]:
    """A plan with Helm releases but without what they install (planned without helm) compares less than a local
    plan does: said, naming the side."""
    sides = [name for name, plan in (("base", diff.base), ("head", diff.head)) if plan.present and not plan.releases]
    if not sides:
        return []
    return [
        f"**The Helm releases' objects are missing from the {' and '.join(sides)} plan{'s' if len(sides) > 1 else ''}"
        "** (no releases.yaml: it was "
        "planned without helm). Their objects are left out of this comparison; run `.venv/bin/python "
        "scripts/k8s_tools.py` before `python -m infra plan` (the pull-request workflow does).",
        "",
    ]


def render(
    diff: Diff, title: str, base_status: str = "ok", head_status: str = "ok", head_log: str = "", max_rows: int = 50
) -> str:
    """The comment: the GPU AZ move in words first, the changes the API refuses, the counts, cost, Capacity
    Blocks bought, then the resources replaced (stateful first), updated in place, added and removed,
    Kubernetes objects and stack outputs."""
    lines = [MARKER, f"### {title}", ""]
    lines += _status_lines(base_status, head_status, head_log)
    if head_status != "ok":
        return "\n".join(lines) + "\n"
    lines += _gpu_az_move_lines(diff)
    found = refusals_of(diff) if diff.base.present else []
    lines += _refused_lines(found, max_rows)
    lines += impact_lines(diff) + _release_lines(diff) + _count_lines(diff)
    lines += _cost_lines(diff.base.cost, diff.head.cost)
    for name, offering in purchases(diff):
        lines += [
            f"**This change BUYS a Capacity Block:** `pulumi up` purchases offering {_code(offering)} (resource "
            f"{_code(name)}). The purchase is irreversible: its upfront fee is charged at once and never refunded "
            "(`python -m infra preflight` shows the fee).",
            "",
        ]
    if diff.empty:
        return "\n".join(lines + ["No difference in resources, Kubernetes objects or stack outputs.", ""]) + "\n"
    lines += _resource_sections(diff, max_rows, {r.key for r in found}) + _manifest_sections(diff, max_rows)
    lines += _value_lines(diff, max_rows)
    if diff.outputs_changed:
        lines += ["#### Stack outputs changed", "", _keys(diff.outputs_changed, limit=max_rows), ""]
    lines += [
        "<sub>Offline plan: the stack's program run against recorded AWS data, no credentials. `-/+` and `~` follow "
        "the providers' replace-on-change fields (infra/diff/replace_fields.py); `pulumi preview` has the real "
        "diff.</sub>",
        "",
    ]
    return "\n".join(lines) + "\n"
