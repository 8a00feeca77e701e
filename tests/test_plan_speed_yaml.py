"""The plan's YAML text and Kubernetes check, made cheaper without changing what they give:
``manifests_yaml`` builds the nodes of plain documents itself and keeps each document's text per process
(infra/plan_text.py), and a plan's CRD index compiles each CRD version once (infra/api_checks/kube_crds.py).
Each shortcut is compared with what the dumper and the check give without it, and each rule of its
memory (an edited document, shared objects, a bound, another CRD) is broken once."""

from __future__ import annotations

import copy
import datetime
import random
from typing import Any

import pytest
import yaml

from infra import plan_text
from infra.api_checks import kube_crds
from infra.api_checks.kube_check import check

SCALARS: list[Any] = [None, True, False, 0, -7, 2**65, 1.5, -0.0, 1e17, float("inf"), "", "plain", "x: y", "null"]
TEXTS = ["two\nlines", "kept\n\n", "kept more\n\n\n", " lead\n", "tab\tin", "é\u2028", "...", "- dash", "'q'"]


def _reference(objects: list[Any]) -> str:
    """What the plan wrote before the shortcuts: PyYAML's own representer, one dump of every document."""
    return yaml.dump_all(
        objects, Dumper=plan_text.PlanDumper, sort_keys=False, default_flow_style=False, explicit_start=True
    )


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.45:
        return rng.choice([*SCALARS, *TEXTS, datetime.date(2026, 1, 2)])
    if roll < 0.7:
        items = [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return items if rng.random() < 0.85 else tuple(items)
    keys = ["a", "b c", "kind", "", 1, True] if rng.random() < 0.2 else ["a", "b c", "kind", "metadata"]
    return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.fixture(autouse=True)
def _empty_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_text, "_written", {})
    monkeypatch.setattr(plan_text, "_written_chars", [0])


def test_generated_documents_are_written_as_the_dumper_writes_them_and_again_from_memory():
    rng = random.Random(35)
    for _ in range(400):
        objects = [_value(rng) for _ in range(rng.randint(0, 4))]
        expected = _reference(objects)
        assert plan_text.manifests_yaml(objects) == expected, objects
        assert plan_text.manifests_yaml(objects) == expected, objects  # (from memory)


def test_a_documents_open_end_is_written_after_the_last_document_only():
    kept = {"script": "echo\n\n"}
    assert _reference([kept]).endswith("\n...\n")
    for objects in ([kept, kept], [kept, {"a": 1}], [{"a": 1}, kept], [kept, kept, kept]):
        assert plan_text.manifests_yaml(objects) == _reference(objects)


def test_the_plans_documents_are_written_as_the_dumper_writes_them(dev_plan, prod_plan):
    for plan in (dev_plan, prod_plan, dev_plan):
        objects = plan.kubernetes_objects()
        assert plan_text.manifests_yaml(objects) == _reference(objects)


def test_a_document_written_before_is_not_dumped_again(monkeypatch):
    dumped: list[Any] = []
    dump = plan_text._dump
    monkeypatch.setattr(plan_text, "_dump", lambda objects: dumped.append(objects) or dump(objects))
    doc = {"kind": "ConfigMap", "data": {"a": "b"}}
    plan_text.manifests_yaml([doc, copy.deepcopy(doc)])
    assert len(dumped) == 1


def test_an_edited_document_is_written_anew():
    doc: dict[str, Any] = {"kind": "ConfigMap", "data": {"a": "b"}}
    plan_text.manifests_yaml([doc])
    doc["data"] = {"1": "1"}
    assert plan_text.manifests_yaml([doc]) == _reference([doc])
    doc["data"] = {1: 1}  # {"1": "1"} without its quotes: another document
    assert plan_text.manifests_yaml([doc]) == _reference([doc])
    assert "  1: 1\n" in plan_text.manifests_yaml([doc])


def test_a_document_sharing_an_object_keeps_its_anchor_and_is_not_taken_for_one_without():
    labels = {"app": "x"}
    shared = {"metadata": {"labels": labels}, "spec": {"labels": labels}}
    apart = {"metadata": {"labels": dict(labels)}, "spec": {"labels": dict(labels)}}
    assert "&id001" in _reference([shared])
    for doc in (shared, apart, shared):
        assert plan_text.manifests_yaml([doc]) == _reference([doc])


def test_what_the_dumper_refuses_is_refused_and_not_kept():
    class Custom:
        pass

    with pytest.raises(yaml.representer.RepresenterError):
        plan_text.manifests_yaml([{"x": Custom()}])
    with pytest.raises(yaml.representer.RepresenterError):
        plan_text.manifests_yaml([{"x": lambda: 1}])  # (not picklable either)
    assert plan_text._written == {}


def test_the_memory_is_bounded(monkeypatch):
    docs = [{"n": i} for i in range(12)]  # each "---\nn: <i>\n": 9 or 10 characters
    monkeypatch.setattr(plan_text, "WRITTEN_KEPT", 50)
    assert plan_text.manifests_yaml(docs) == _reference(docs)
    assert plan_text._written_chars == [sum(map(len, plan_text._written.values()))]
    assert plan_text._written_chars[0] <= 50 and len(plan_text._written) == 5
    assert plan_text.manifests_yaml(docs[:1]) == _reference(docs[:1])  # the oldest went first: written anew
    assert len(plan_text._written) == 5


# ---------------------------------------------------------------------------------------------
# A plan's CRD versions, compiled once per check
# ---------------------------------------------------------------------------------------------


def _crd(required: list[str]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "spec": {"type": "object", "required": required, "properties": {"size": {"type": "integer"}}},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}],
        },
    }


def _widget(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": "x"},
        "spec": spec,
    }


def test_a_crd_version_is_compiled_once_per_check(monkeypatch):
    calls: list[str] = []
    compiled = kube_crds.compiled
    monkeypatch.setattr(
        kube_crds, "compiled", lambda crd, version: calls.append(version["name"]) or compiled(crd, version)
    )
    report = check([_crd([]), *(_widget(f"w{i}", {"size": i}) for i in range(5))])
    assert report.refusals == [] and calls == ["v1"]


def test_each_check_judges_by_its_own_crds():
    widgets = [_widget("w", {})]
    assert check([_crd([]), *widgets]).refusals == []
    refused = check([_crd(["size"]), *widgets]).refusals
    assert [r.rule for r in refused] == ["'size' is a required property"]
    assert check([_crd([]), *widgets]).refusals == []
