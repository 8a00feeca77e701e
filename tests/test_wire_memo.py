"""The offline engine's memory of wire forms (infra/offline/wire_memo.py): large plain inputs serialized
once per process, and the outputs of large Kubernetes objects made once, give what the SDK gives every time."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
from google.protobuf import struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _sync_await

from facts import versions
from infra.offline import engine, wire_memo
from tests import plan_memo
from tests.helpers import ROOT, dev_values, run_stack, yaml_objects


def _crd() -> dict[str, Any]:
    """The MPI operator's MPIJob CRD: hundreds of KB of schema."""
    docs = yaml_objects((ROOT / versions.MPI_OPERATOR_MANIFEST.file).read_text())
    return next(d for d in docs if d["kind"] == "CustomResourceDefinition")


def _plan() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    with plan_memo.fresh_plans():
        result = run_stack(dev_values(), "dev")
    return [r.as_json() for r in result.records], result.outputs


def test_a_plan_answered_from_memory_is_the_plan_without_it(monkeypatch):
    monkeypatch.setattr(engine, "memo_wire_forms", contextlib.nullcontext)
    without = _plan()
    monkeypatch.undo()
    monkeypatch.setattr(wire_memo, "_kept", {})
    monkeypatch.setattr(wire_memo, "_resolved", {})
    first = _plan()
    hits, resolve_hits = wire_memo.hits[0], wire_memo.resolve_hits[0]
    second = _plan()
    assert wire_memo.hits[0] - hits >= 8  # (the dev stack's CRDs, at least)
    assert wire_memo.resolve_hits[0] - resolve_hits >= 8
    assert first == without
    assert second == without


def _crd_program() -> dict[str, Any]:
    crd = _crd()
    res = k8s.apiextensions.v1.CustomResourceDefinition("mpijobs", metadata=crd["metadata"], spec=crd["spec"])
    return {"spec": res.spec, "name": res.metadata.name}


def _crd_outputs() -> dict[str, Any]:
    return engine.run(_crd_program, {"aws:region": "us-west-2"}, project="p", stack="s").outputs


def test_a_kubernetes_objects_outputs_from_memory_are_the_sdks(monkeypatch):
    with monkeypatch.context() as mp:
        mp.setattr(engine, "memo_wire_forms", contextlib.nullcontext)
        without = _crd_outputs()
    monkeypatch.setattr(wire_memo, "_resolved", {})
    first = _crd_outputs()
    hits = wire_memo.resolve_hits[0]
    second = _crd_outputs()
    assert wire_memo.resolve_hits[0] - hits == 1
    assert without["name"] == "mpijobs.kubeflow.org"
    assert without["spec"]["versions"][0]["schema"]["open_apiv3_schema"]["type"] == "object"
    assert first == without and second == without


def test_only_kubernetes_objects_with_large_inputs_are_kept():
    small, large = struct_pb2.Struct(), struct_pb2.Struct()
    small.update({"metadata": {"name": "x"}})
    large.update(_crd())

    class Res:
        def __init__(self, typ: str):
            self._type = typ

    flags = (True, True, True, False)
    assert wire_memo._resolve_key(
        Res("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"), large, small, flags
    )
    assert wire_memo._resolve_key(Res("kubernetes:core/v1:ConfigMap"), small, small, flags) is None
    assert wire_memo._resolve_key(Res("aws:cloudwatch/dashboard:Dashboard"), large, small, flags) is None
    assert wire_memo._resolve_key(Res("kubernetes:helm.sh/v3:Release"), large, small, flags) is None


def _serialize(inputs: dict[str, Any]) -> tuple[struct_pb2.Struct, dict[str, list[Any]]]:
    deps: dict[str, list[Any]] = {}
    return _sync_await(rpc.serialize_properties(inputs, deps)), deps


def test_serializing_from_memory_gives_what_the_sdk_gives():
    inputs = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "spec": _crd()["spec"]}
    sdk, sdk_deps = _serialize(copy.deepcopy(inputs))
    hits = wire_memo.hits[0]
    with wire_memo.memo_wire_forms():
        first, first_deps = _serialize(copy.deepcopy(inputs))
        second, second_deps = _serialize(copy.deepcopy(inputs))
    assert wire_memo.hits[0] - hits == 1
    assert first == sdk and second == sdk and first is not second
    assert first_deps == sdk_deps == second_deps == {"apiVersion": [], "kind": [], "spec": []}


BIG = ["x" * 64] * 400  # well over LARGE_OBJECT bytes of marshal form


@pytest.mark.parametrize(
    "one,other",
    [
        ({"a": 1, "big": BIG}, {"a": True, "big": BIG}),
        ({"a": 1, "big": BIG}, {"a": "1", "big": BIG}),
        ({"a": 1, "big": BIG}, {"a": 1.0, "big": BIG}),
        ({"a": [1], "big": BIG}, {"a": (1,), "big": BIG}),
        ({1: "a", "big": BIG}, {"1": "a", "big": BIG}),
    ],
)
def test_the_key_tells_apart_what_the_sdk_serializes_differently(one, other):
    key = wire_memo._key(one, None, None, (False, False))
    assert key is not None and key != wire_memo._key(other, None, None, (False, False))


def test_what_is_not_large_plain_data_is_left_to_the_sdk():
    flags = (False, False)
    assert wire_memo._key({"a": "small"}, None, None, flags) is None
    assert wire_memo._key({"a": pulumi.Output.from_input("x"), "big": BIG}, None, None, flags) is None
    assert wire_memo._key({"big": BIG}, str.upper, None, flags) is None  # a name translator
    assert wire_memo._key({"big": BIG}, None, None, flags) is not None


def test_a_processs_first_plan_keeps_nothing(monkeypatch):
    """The plan command plans once per process: its one plan pays nothing for a memory it would never read."""
    monkeypatch.setattr(engine, "_runs", [0])
    monkeypatch.setattr(wire_memo, "_kept", {})
    monkeypatch.setattr(wire_memo, "_resolved", {})
    _plan()
    assert wire_memo._kept == {} and wire_memo._resolved == {}
    _plan()
    assert len(wire_memo._kept) >= 8 and len(wire_memo._resolved) >= 8
