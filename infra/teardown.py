"""What `pulumi destroy` would do to a planned stack, from the plan's own records: every custom
resource is deleted except those the plan marks. A protected resource (``protect``) makes destroy's
preview fail ("unable to delete resource ... as it is currently marked for protection"), so nothing is
deleted until it is unprotected; a resource with ``deletionProtection: true`` among its inputs is
refused by AWS when destroy reaches it; a retained one (``retainOnDelete``) leaves the stack but stays
in AWS. The plan's summary prints this (README, "Tearing down")."""

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
    t = teardown(records)
    if not _kept(t):
        return (
            f"Tear-down (`pulumi destroy`): deletes all {len(t.deleted)} cloud/Kubernetes resources; none protected or "
            "retained\n"
        )
    lines = [
        f"Tear-down (`pulumi destroy`): deletes {len(t.deleted)} cloud/Kubernetes resources; it stops at or leaves:"
    ]
    if t.protected:
        lines.append(
            f"  protected ({len(t.protected)}; destroy's preview fails naming each, nothing is deleted until they are "
            f"unprotected): {_names(t.protected)}"
        )
    if t.refused:
        lines.append(
            f"  deletion protection on at AWS ({len(t.refused)}; AWS refuses the delete when destroy reaches it): "
            f"{_names(t.refused)}"
        )
    if t.retained:
        lines.append(f"  retained ({len(t.retained)}; removed from the stack, left in AWS): {_names(t.retained)}")
    return "\n".join(lines) + "\n"
