"""The plan's Kubernetes check: every object the stack emits (the program's Kubernetes resources and
the objects inside its Helm releases) as the API server would take it: its value rules
(kube_objects.py) and, for a custom object, its CRD (kube_crds.py). ``python -m infra plan`` runs it
on every plan; a refusal is an error and the plan exits 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from infra.api_checks.kube_crds import CrdIndex
from infra.api_checks.kube_objects import Refusal, refusals


@dataclass(frozen=True)
class Report:
    checked: int
    refusals: list[Refusal]

    def line(self) -> str:
        """The plan's summary line."""
        if not self.refusals:
            return f"Kubernetes API rules: {self.checked} objects checked — all accepted"
        objects = len({r.obj for r in self.refusals})
        return (
            f"Kubernetes API rules: {self.checked} objects checked — {objects} refused "
            f"({len(self.refusals)} problem{'s' if len(self.refusals) != 1 else ''})"
        )


def check(objects: Sequence[Mapping[str, Any]]) -> Report:
    """Every object against the API server's rules and, a custom one, its CRD (one pass each)."""
    crds = CrdIndex(objects)
    found: list[Refusal] = []
    for obj in objects:
        found += refusals(obj) + crds.refusals(obj)
    return Report(len(objects), found)
