"""The offline engine's memory of wire forms (infra/offline/wire_memo.py): large plain inputs serialized
once and decoded once per process give what the SDK gives every time, each caller a copy of its own."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pulumi
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
    monkeypatch.setattr(wire_memo, "_decoded", {})
    first = _plan()
    hits, decode_hits = wire_memo.hits[0], wire_memo.decode_hits[0]
    second = _plan()
    assert wire_memo.hits[0] - hits >= 8  # (the dev stack's CRDs, at least)
    assert wire_memo.decode_hits[0] - decode_hits >= 8
    assert first == without
    assert second == without


def test_decoding_from_memory_gives_what_the_sdk_gives_a_copy_each():
    struct = struct_pb2.Struct()
    struct.update(_crd())
    sdk = rpc.deserialize_property(struct)
    hits = wire_memo.decode_hits[0]
    with wire_memo.memo_wire_forms():
        first, second = rpc.deserialize_property(struct), rpc.deserialize_property(struct)
    assert first == sdk and second == sdk
    assert wire_memo.decode_hits[0] - hits == 1
    assert first is not second and first["spec"] is not second["spec"]


def test_a_struct_holding_a_resource_reference_is_decoded_by_the_sdk_each_time():
    struct = struct_pb2.Struct()
    crd = _crd()
    crd["metadata"]["owner"] = {rpc._special_sig_key: rpc._special_resource_sig, "urn": "urn:pulumi:s::p::t::n"}
    struct.update(crd)
    assert wire_memo._decode_key(struct, None, True) is None


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


BIG = ["x" * 64] * 400  # well over LARGE_INPUTS of marshal form


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
