"""What `pulumi destroy` would do to a planned stack, from the plan's own records: every custom
resource is deleted except those the plan marks. A protected resource (``protect``) makes destroy's
preview fail ("unable to delete resource ... as it is currently marked for protection"), so nothing is
deleted until it is unprotected; a resource with ``deletionProtection: true`` among its inputs is
refused by AWS when destroy reaches it; a retained one (``retainOnDelete``) leaves the stack but stays
in AWS. The plan's summary prints this (docs/tearing-down.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.offline import Record


@dataclass(frozen=True)
class Teardown:
    deleted: list[Record]  # what destroy deletes once nothing blocks it
    protected: list[Record]  # protect: destroy's preview fails naming each
    refused: list[Record]  # deletionProtection at the provider: AWS refuses the delete
    retained: list[Record]  # retainOnDelete: removed from the stack, kept in AWS


def teardown(records: Sequence[Record]) -> Teardown:
    custom = [r for r in records if r.custom]
    protected = [r for r in custom if r.options.get("protect")]
    # (pulumi-eks' Cluster is a component whose EKS cluster the plan does not see: its input counts)
    refused = [r for r in records if r.inputs.get("deletionProtection") is True]
    retained = [r for r in custom if r.options.get("retainOnDelete")]
    kept = {r.urn for r in protected + refused + retained}
    return Teardown([r for r in custom if r.urn not in kept], protected, refused, retained)


def _kept(t: Teardown) -> int:
    return len({r.urn for r in t.protected + t.refused + t.retained})


def _names(records: Sequence[Record]) -> str:
    return ", ".join(f"{r.name} ({r.type.split(':')[-1]})" for r in records)


def describe(records: Sequence[Record]) -> str:
    """What `pulumi destroy` does, in order: while anything is protected it deletes nothing (the
    engine refuses before the first delete); else, or once unprotected, it deletes every resource but
    the retained ones, and stops where AWS refuses a delete (deletion protection)."""
    t = teardown(records)
    total = sum(1 for r in records if r.custom)
    if not _kept(t):
        return (
            f"Tear-down (`pulumi destroy`): deletes all {total} cloud/Kubernetes resources; none protected or "
            "retained\n"
        )
    deletes = total - len(t.retained)
    if t.protected:
        lines = [
            f"Tear-down (`pulumi destroy`): deletes nothing while {len(t.protected)} "
            f"{'resource is' if len(t.protected) == 1 else 'resources are'} protected (its preview fails naming "
            f"each): {_names(t.protected)}",
            f"  once they are unprotected it deletes {deletes} of the {total} cloud/Kubernetes resources; it stops at "
            "or leaves:",
        ]
    else:
        lines = [
            f"Tear-down (`pulumi destroy`): deletes {deletes} of the {total} cloud/Kubernetes resources; it stops at "
            "or leaves:"
        ]
    if t.refused:
        lines.append(
            f"  deletion protection on at AWS ({len(t.refused)}; AWS refuses the delete when destroy reaches it): "
            f"{_names(t.refused)}"
        )
    if t.retained:
        lines.append(f"  retained ({len(t.retained)}; removed from the stack, left in AWS): {_names(t.retained)}")
    return "\n".join(lines) + "\n"
