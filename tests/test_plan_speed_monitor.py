"""The recording monitor keeps the recorded inputs of large Kubernetes objects (CRDs) per process, by a
digest of their wire form (infra/offline/monitor.py, ``_object_inputs``): each record gets the inputs the
walk of its own Struct gives, in a copy of its own. Each rule is broken once: a changed object, a small
one, the bound."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import struct_pb2

from infra import offline
from infra.offline import monitor


@pytest.fixture(autouse=True)
def _empty_memory(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(monitor, "_recorded", {})
    monkeypatch.setattr(monitor, "_recorded_bytes", [0])
    walked: list[Any] = []  # the large Structs walked
    walk = monitor._wire_dict

    def counted(struct: Any, refs: list[Any]) -> dict[str, Any]:
        if struct.ByteSize() >= monitor.LARGE_OBJECT:
            walked.append(struct)
        return walk(struct, refs)

    monkeypatch.setattr(monitor, "_wire_dict", counted)
    return walked


def _config_map_program(text: str) -> Any:
    def program() -> dict[str, Any]:
        import pulumi_kubernetes as k8s

        k8s.core.v1.ConfigMap("cm", metadata={"name": "cm", "namespace": "x"}, data={"big": text, "n": "1"})
        return {}

    return program


def _inputs(text: str) -> dict[str, Any]:
    result = offline.run(_config_map_program(text), {"aws:region": "us-west-2"}, project="p", stack="s")
    return result.named("kubernetes:core/v1:ConfigMap", "cm").inputs


def test_a_large_object_is_recorded_alike_from_memory_in_a_copy_of_its_own(_empty_memory):
    big = "x" * 20_000
    first = _inputs(big)
    walks = len(_empty_memory)
    assert walks  # (the object's Struct and its data's)
    second = _inputs(big)
    assert second == first and second is not first
    assert len(_empty_memory) == walks  # (from memory: no walk of its Struct)
    first["data"]["n"] = "changed"
    assert _inputs(big)["data"]["n"] == "1"


def test_a_changed_large_object_is_recorded_anew():
    assert _inputs("x" * 20_000)["data"]["big"] == "x" * 20_000
    assert _inputs("y" * 20_000)["data"]["big"] == "y" * 20_000
    assert len(monitor._recorded) == 2


def test_a_small_object_is_not_kept():
    assert _inputs("small")["data"] == {"big": "small", "n": "1"}
    assert monitor._recorded == {}


def test_the_memory_is_bounded(monkeypatch):
    monkeypatch.setattr(monitor, "RECORDED_KEPT", 30_000)
    for letter in "abc":
        assert _inputs(letter * 20_000)["data"]["big"] == letter * 20_000
    assert len(monitor._recorded) == 1 and monitor._recorded_bytes[0] <= 30_000


def test_what_is_kept_is_what_the_walk_gives(prod_plan):
    for obj in prod_plan.kubernetes_objects():
        struct = struct_pb2.Struct()
        struct.update(obj)
        if struct.ByteSize() >= monitor.LARGE_OBJECT:
            expected = monitor._plain(monitor._wire_dict(struct, []))
            assert monitor._object_inputs(struct) == expected
            assert monitor._object_inputs(struct) == expected  # (from memory)
    assert monitor._recorded  # (the CRDs)
