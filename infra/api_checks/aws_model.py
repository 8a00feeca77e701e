"""The plan's AWS inputs against botocore's service models (issue 37).

For each recorded resource whose type ``aws_table.TABLE`` knows: its inputs are translated onto the
request of each API call that takes them (``translate.translate``), then each request is walked against the
operation's input shape (``shapes.walk``). Each resource is walked once, and the models, shapes and
compiled patterns are read once per process: the cost is linear in the stack's size.

Coverage per type (``translate.Coverage``): inputs, mapped onto API members, checked, provider-only.

Limits well known but absent from the models, so not checked here: EC2's tags (no length or count in
the EC2 model: AWS documents 50 tags, keys 128, values 256), EKS managed node groups' tags count (the
EKS model's 50 is on the API's map only), IAM's trust-policy size (2,048 characters by default, a
quota: the model says 131,072), CloudWatch dashboard bodies (the model sets no size; AWS documents
1 MB), KMS's deletion window of 7-30 days (the model says 1-365 for PendingWindowInDays).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import infra.api_checks.shapes as shapes
from infra.api_checks.aws_table import AUTONAME_SUFFIX, TABLE, Api
from infra.api_checks.translate import Coverage, translate

shapes.need(
    {
        service: tuple(sorted({op for api in TABLE.values() if api.service == service for op in api.operations}))
        for service in {api.service for api in TABLE.values()}
    }
)


@dataclass(frozen=True)
class Failure:
    resource: str
    type: str
    finding: shapes.Finding
    service: str
    operation: str

    def __str__(self) -> str:
        f = self.finding
        value = f"{f.value!r}" if not isinstance(f.value, str) or len(f.value) <= 80 else f"{f.value[:77]!r}..."
        return (
            f"{self.resource}: {f.field} = {value}: {f.rule} ({self.service} {self.operation} shape {f.shape}, "
            f"botocore {shapes.BOTOCORE_VERSION})"
        )


@dataclass
class Report:
    failures: list[Failure] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)
    uncompiled: dict[str, str] = field(default_factory=dict)  # shape -> why its pattern was not checked

    def total(self) -> Coverage:
        out = Coverage()
        for c in self.coverage.values():
            out.resources += c.resources
            out.inputs += c.inputs
            out.mapped += c.mapped
            out.checked += c.checked
            out.provider_only += c.provider_only
        return out

    def line(self) -> str:
        t = self.total()
        verdict = "all accepted" if not self.failures else f"{len(self.failures)} refused"
        return (
            f"AWS API model (botocore {shapes.BOTOCORE_VERSION}): {t.resources} resources, {t.checked} inputs checked "
            f"({t.share():.0%} of {t.inputs} mapped) — {verdict}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "botocore": shapes.BOTOCORE_VERSION,
            "types": {typ: c.as_json() for typ, c in sorted(self.coverage.items())},
            "failures": [str(f) for f in self.failures],
            # The patterns met that Python's re could not compile (so not checked): shape -> why.
            "patternsNotCompiled": dict(sorted(self.uncompiled.items())),
        }


# ---------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------


def check_records(records: Iterable[tuple[str, str, dict[str, Any]]]) -> Report:
    """(type, name, inputs) of every recorded resource -> the report (types the table does not know
    are not AWS resources: Kubernetes objects, components, the stack)."""
    report = Report()
    shapes.UNCOMPILED.clear()
    for typ, name, inputs in records:
        api = TABLE.get(typ)
        if api is None:
            continue
        coverage = report.coverage.setdefault(typ, Coverage())
        coverage.resources += 1
        report.failures += _failures(typ, name, api, inputs, coverage)
    report.uncompiled = dict(shapes.UNCOMPILED)
    return report


def _failures(typ: str, name: str, api: Api, inputs: dict[str, Any], coverage: Coverage) -> Iterator[Failure]:
    for operation, request, create in translate(api, inputs, coverage):
        if create and api.autoname and api.autoname not in request:
            request[api.autoname] = auto_name(api.autoname, name)
        optional = frozenset(api.provider_fills) if create else _all_top_required(api, operation)
        for finding in shapes.walk(api.service, shapes.input_shape(api.service, operation), request, "", optional):
            yield Failure(name, typ, finding, api.service, operation)


def auto_name(member: str, name: str) -> shapes.Given:
    """The name Pulumi's auto-naming gives resource ``name``, with a stand-in for its random part."""
    return shapes.Given(
        f"{name}-{'0' * (AUTONAME_SUFFIX - 1)}", f"{member} (Pulumi's auto-name: {name!r}, '-', 7 random)"
    )


def _all_top_required(api: Api, operation: str) -> frozenset[str]:
    """A later call's required members at its top: the ids of what the create call made, the provider's."""
    return frozenset(shapes.shape(api.service, shapes.input_shape(api.service, operation)).get("required", []))


def check(records: Iterable[Any]) -> Report:
    """The report of a plan's records (``offline.Record``: ``type``, ``name``, ``inputs``)."""
    return check_records((r.type, r.name, r.inputs) for r in records)


def report_to(report: Report, stdout: TextIO, stderr: TextIO, out: Path | None) -> int:
    """The plan's part: one error line per refused input, the summary line, ``aws-model.json`` (the
    coverage per type) into the plan's folder; the number refused."""
    for failure in report.failures:
        print(f"error: {failure}", file=stderr)
    stdout.write(report.line() + "\n")
    if out is not None:
        (out / "aws-model.json").write_text(json.dumps(report.as_json(), indent=2, sort_keys=True) + "\n")
    return len(report.failures)
