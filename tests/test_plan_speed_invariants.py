"""What keeps the offline plan fast, and that the fast paths give what the slow ones gave.

- manifests.yaml: libyaml's emitter writes it when it writes the objects byte for byte as PyYAML's
  pure-Python emitter does; the plan's own stacks take that path, and any text that could come
  out differently goes through the Python emitter (compared here on generated objects).
- The recording monitor reads registrations with a direct walk of the protobuf Struct, which must
  give what ``json_format.MessageToDict`` gives.
- The vendored MPI operator manifest is parsed once per process, with libyaml's loader, and every
  caller gets objects of its own.
- The garbage collector is paused during a run and restored after it.
"""

from __future__ import annotations

import gc
import random

import pytest
import yaml
from google.protobuf import json_format, struct_pb2

from components import operators
from facts import versions
from facts.paths import PROJECT_ROOT
from infra import offline
from infra import plan as plan_module
from tests.conftest import dev_values, run_stack

LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))


def _python_emitter(objects: list) -> str:
    return plan_module.manifests_yaml(objects, dumper=plan_module._ManifestDumper)


# ----------------------------------------------------------------------------------------------
# manifests.yaml
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prod_objects() -> list[dict]:
    _, values = plan_module.read_stack_config("prod")
    return run_stack(values, stack="prod").kubernetes_objects()


def test_the_stacks_manifests_are_written_by_libyaml_and_identical_to_the_python_emitter(dev_plan, prod_objects):
    for objects in (dev_plan.kubernetes_objects(), prod_objects):
        assert objects
        if LIBYAML:
            assert plan_module._libyaml_writes_it_alike(objects), "the plan's manifests now hold text that sends them through the slow Python emitter"
        assert plan_module.manifests_yaml(objects) == _python_emitter(objects)


@pytest.mark.skipif(not LIBYAML, reason="PyYAML without libyaml")
def test_both_emitters_agree_on_the_text_the_guard_lets_through():
    """Generated objects (multi-line scripts, long lines, indicators, quotes, YAML-looking words):
    whenever the guard sends them to libyaml, libyaml writes what the Python emitter writes."""
    rng = random.Random(20240611)
    pieces = [
        "a", "word", " ", "  ", "\n", "\n\n", "#", " #", ":", ": ", "- ", "-", "?", "'", '"', "\\", ",", "[", "]", "{", "}",
        "&", "*", "!", "|", ">", "%", "@", "`", "yes", "no", "null", "~", "1", "0x1F", "1.5", "1e3", "---", "...", "=",
        "echo $HOME && exit 1", "x" * 90, "word " * 25, "set -euo pipefail\n", "  indented\n",
    ]  # fmt: skip

    def text() -> str:
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))

    def value(depth: int):
        roll = rng.random()
        if depth < 5 and roll < 0.25:
            return {text().replace("\n", "") or "k": value(depth + 1) for _ in range(rng.randint(0, 4))}
        if depth < 5 and roll < 0.4:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        if roll < 0.45:
            return rng.choice([None, True, False, 0, 7, -3, 2.5, 1e20])
        return text()

    fast = 0
    for _ in range(400):
        objects = [{"kind": "ConfigMap", "data": value(0)} for _ in range(rng.randint(1, 3))]
        if plan_module._libyaml_writes_it_alike(objects):
            fast += 1
            assert yaml.dump_all(objects, Dumper=plan_module._FAST_DUMPER, sort_keys=False, default_flow_style=False, explicit_start=True) == _python_emitter(
                objects
            ), objects
    assert fast > 200  # the guard lets most through: the comparison is not vacuous


@pytest.mark.parametrize(
    "text",
    [
        "word " * 30 + "\nnext",  # a space before a line break: double-quoted, folded differently by libyaml
        "tab\tin " + "a long line " * 10,
        "caf\u00e9 " * 30,  # non-ASCII: escaped, double-quoted
        "line\r\n" * 3,
        "multi-line text\nending in a space ",
        "a script\nkeeping its trailing line breaks\n\n",  # "|+": libyaml ends the document with "..."
    ],
)
def test_text_that_libyaml_may_write_differently_goes_through_the_python_emitter(text):
    objects = [{"kind": "ConfigMap", "data": {"k": text, "nested": [{"v": text}]}}]
    assert not plan_module._libyaml_writes_it_alike(objects)
    assert plan_module.manifests_yaml(objects) == _python_emitter(objects)


@pytest.mark.parametrize(
    "text",
    ["tab\tin " + "a long line " * 10, "word " * 30 + "\nnext", "a script\nkeeping its trailing line breaks\n\n", "caf\u00e9 " * 30],
)
def test_a_stream_with_some_odd_objects_is_the_python_emitters_stream(text):
    """Objects libyaml writes alike go through libyaml even when others in the stream do not (a
    chart's CRD with tabs in its descriptions); joined, the runs are the one stream of the Python
    emitter, also when an odd object leaves a document open ("|+", then "...")."""
    plain = {"kind": "ConfigMap", "data": {"k": "v", "script": "echo hi\nexit 0\n"}}
    odd = {"kind": "ConfigMap", "data": {"k": text}}
    for objects in ([plain, odd, plain], [odd, plain, plain, odd], [plain, plain, odd], [odd, odd, plain]):
        assert plan_module.manifests_yaml(objects) == _python_emitter(objects)


@pytest.mark.parametrize("key", ["", "k" * 101, "two\nlines", "tab\tkey", "caf\u00e9", 1.5, None])
def test_keys_that_libyaml_may_write_differently_go_through_the_python_emitter(key):
    objects = [{"kind": "ConfigMap", "data": {key: "v"}}]
    assert not plan_module._libyaml_writes_it_alike(objects)
    assert plan_module.manifests_yaml(objects) == _python_emitter(objects)


def test_no_objects_give_an_empty_file():
    assert plan_module.manifests_yaml([]) == ""


# ----------------------------------------------------------------------------------------------
# The recording monitor's Struct walk
# ----------------------------------------------------------------------------------------------


def test_struct_walk_gives_what_message_to_dict_gives():
    ref = {offline._SIG_KEY: offline._SIG_RESOURCE, "urn": "urn:pulumi:dev::p::eks:index:Cluster::c", "id": "c"}
    secret = {offline._SIG_KEY: offline._SIG_SECRET, "value": "s"}
    data = {
        "s": "text",
        "n": 3,
        "f": 2.5,
        "b": True,
        "z": None,
        "l": [1, "a", None, False, {"x": [[], {}]}],
        "d": {"deep": {"deeper": [ref, secret]}},
        "empty": {},
    }
    struct = struct_pb2.Struct()
    struct.update(data)
    refs: list = []
    walked = offline._wire_dict(struct, refs)
    assert walked == json_format.MessageToDict(struct, preserving_proto_field_name=True)
    assert isinstance(walked["n"], float)  # numbers stay floats, as MessageToDict gives them
    assert refs == [ref]
    refs.clear()
    offline._wire_dict(struct_pb2.Struct(), refs)
    assert refs == []


# ----------------------------------------------------------------------------------------------
# The MPI operator manifest
# ----------------------------------------------------------------------------------------------


def _mpi() -> list[dict]:
    return operators.load_manifest(PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST, versions.MPI_OPERATOR_MANIFEST_SHA256)


@pytest.mark.skipif(not LIBYAML, reason="PyYAML without libyaml")
def test_the_mpi_manifest_is_read_with_libyaml():
    assert operators._Loader is yaml.CSafeLoader


def test_each_caller_gets_its_own_copy_of_the_parsed_manifest():
    first = _mpi()
    first[0]["metadata"]["name"] = "changed"
    first.append({"kind": "Extra"})
    second = _mpi()
    assert second[0]["metadata"]["name"] != "changed" and len(second) == 9
    assert second == operators._parse((PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST).read_bytes())


# ----------------------------------------------------------------------------------------------
# The garbage collector
# ----------------------------------------------------------------------------------------------


def test_the_collector_is_paused_during_a_run_and_restored_after():
    seen = []

    def program():
        seen.append(gc.isenabled())
        return {}

    assert gc.isenabled()
    offline.run(program, dev_values(), project="gpu-training", stack="dev")
    assert seen == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        with offline.collector_paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
