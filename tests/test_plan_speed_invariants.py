"""What keeps the offline plan fast, and that the fast paths give what the slow ones gave.

- JSON files: ``plan_text.json_text`` writes what ``json.dumps(indent=2, ensure_ascii=False)``
  writes (compared on generated values), and leaves anything else to it.
- manifests.yaml and releases.yaml: libyaml's emitter writes them, with its representer made
  quicker, when it writes the objects byte for byte as PyYAML's pure-Python emitter does; an
  object whose only odd parts are values (the Kueue Workload CRD's descriptions with tabs) is
  written by libyaml with the Python emitter's form of each odd value put in; anything else goes
  through the Python emitter. Compared on generated objects, and on the plans' own files.
- Helm renders start as soon as their release is registered, each piped into a reader process
  that hands back the objects and their text: the same objects as reading helm's output here.
- The recording monitor reads registrations with a direct walk of the protobuf Struct, which must
  give what ``json_format.MessageToDict`` gives; a Kubernetes object reaches the mocks as its
  identity, and the program still reads back every input it set.
- The vendored MPI operator manifest is parsed once per process, with libyaml's loader, and every
  caller gets objects of its own.
- The garbage collector is paused during a run and restored after it.
"""

from __future__ import annotations

import gc
import json
import math
import random
import subprocess

import pytest
import yaml
from google.protobuf import json_format, struct_pb2

from components import operators
from facts import versions
from facts.paths import PROJECT_ROOT
from infra import offline, plan_text, releases
from infra import plan as plan_module
from tests.conftest import dev_values

LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))


def _python_emitter(objects: list) -> str:
    return plan_text.manifests_yaml(objects, dumper=plan_text.PythonDumper)


def _libyaml(objects: list) -> str:
    return yaml.dump_all(objects, Dumper=plan_text.FAST_DUMPER, sort_keys=False, default_flow_style=False, explicit_start=True)


_PIECES = [
    "a", "word", " ", "  ", "\n", "\n\n", "#", " #", ":", ": ", "- ", "-", "?", "'", '"', "\\", ",", "[", "]", "{", "}",
    "&", "*", "!", "|", ">", "%", "@", "`", "yes", "no", "null", "~", "1", "0x1F", "1.5", "1e3", "---", "...", "=",
    "echo $HOME && exit 1", "x" * 90, "word " * 25, "set -euo pipefail\n", "  indented\n",
]  # fmt: skip
_ODD_PIECES = ["\t", "caf\u00e9", "\u0440", " \n", "\r\n", "\x85", "\u2028", "\ufeff", "\x00", "\U0001f600"]


def _generated(rng: random.Random, odd: float = 0.0, depth: int = 0):
    """A value of what manifests are made of; with ``odd`` > 0, some texts hold characters that
    send them (double-quoted, folded) through the Python emitter's form."""

    def text() -> str:
        pieces = [rng.choice(_PIECES) for _ in range(rng.randint(0, 6))]
        if odd and rng.random() < odd:
            pieces.insert(rng.randint(0, len(pieces)), rng.choice(_ODD_PIECES))
            pieces.append(rng.choice(["", " ", "word " * 20, "x" * 100]))
        return "".join(pieces)

    roll = rng.random()
    if depth < 5 and roll < 0.25:
        return {text().replace("\n", "") or "k": _generated(rng, odd, depth + 1) for _ in range(rng.randint(0, 4))}
    if depth < 5 and roll < 0.4:
        return [_generated(rng, odd, depth + 1) for _ in range(rng.randint(0, 4))]
    if roll < 0.45:
        return rng.choice([None, True, False, 0, 7, -3, 2.5, 1e20])
    return text()


# ----------------------------------------------------------------------------------------------
# manifests.yaml
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prod_objects(prod_plan) -> list[dict]:
    return prod_plan.kubernetes_objects()


def test_the_stacks_manifests_are_written_by_libyaml_and_identical_to_the_python_emitter(dev_plan, prod_objects):
    for objects in (dev_plan.kubernetes_objects(), prod_objects):
        assert objects
        if LIBYAML:
            assert plan_text.libyaml_writes_it_alike(objects), "the plan's manifests now hold text that sends them through the slow Python emitter"
        assert plan_text.manifests_yaml(objects) == _python_emitter(objects)


@pytest.mark.skipif(not LIBYAML, reason="PyYAML without libyaml")
def test_both_emitters_agree_on_the_text_the_guard_lets_through():
    """Generated objects (multi-line scripts, long lines, indicators, quotes, YAML-looking words):
    whenever the guard sends them to libyaml, libyaml writes what the Python emitter writes."""
    rng = random.Random(20240611)
    fast = 0
    for _ in range(400):
        objects = [{"kind": "ConfigMap", "data": _generated(rng)} for _ in range(rng.randint(1, 3))]
        if plan_text.libyaml_writes_it_alike(objects):
            fast += 1
            assert _libyaml(objects) == _python_emitter(objects), objects
    assert fast > 200  # the guard lets most through: the comparison is not vacuous


@pytest.mark.skipif(not LIBYAML, reason="PyYAML without libyaml")
def test_stand_ins_give_the_python_emitters_text():
    """Objects with odd texts anywhere (mapping values, list items, lists of lists, deep or at the
    top, next to long keys, in parts met twice that become aliases): written with stand-ins, they
    are the Python emitter's text."""
    rng = random.Random(20251124)
    substituted = 0
    for _ in range(400):
        objects = [{"kind": "ConfigMap", "k" * rng.randint(1, 99): _generated(rng, odd=0.3)} for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.3:
            objects = [{"a": [[o, [o.copy()]]]} for o in objects]  # shallow copies share their values
        for o in objects:
            odd: list = []
            if plan_text._odd_values(o, [], odd) and odd and plan_text._with_stand_ins(o, odd) is not None:
                substituted += 1
        assert plan_text.manifests_yaml(objects) == _python_emitter(objects), objects
    assert substituted > 100  # the stand-ins are used, not only the Python emitter


@pytest.mark.skipif(not LIBYAML, reason="PyYAML without libyaml")
def test_the_quick_representer_makes_the_nodes_pyyamls_makes():
    """Shared dicts and lists (anchors and aliases), subclasses, numbers of every kind: libyaml with
    the quick representer writes what CSafeDumper with PyYAML's own representer writes."""

    class Reference(yaml.CSafeDumper):
        pass

    Reference.add_representer(str, plan_text._str_presenter)
    shared_map, shared_list = {"a": 1, "b": [1, 2]}, ["x", {"y": None}]
    rng = random.Random(7)
    values = [
        {"one": shared_map, "two": shared_map, "three": [shared_list, shared_list], "four": shared_list},
        {"n": [0, -1, 2**70, 1.5, -0.0, 1e-300, float("inf"), -float("inf"), float("nan"), True, False, None]},
        {"text": ["", "multi\nline\n", "yes", "0o17", "~", "2024-01-01", "1_000"], 3: "int key", True: "bool key", None: "null key"},
        *[{"kind": "ConfigMap", "data": _generated(rng)} for _ in range(100)],
    ]
    for value in values:
        assert _libyaml([value]) == yaml.dump_all([value], Dumper=Reference, sort_keys=False, default_flow_style=False, explicit_start=True)


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
def test_text_that_libyaml_may_write_differently_gets_the_python_emitters_form(text):
    objects = [{"kind": "ConfigMap", "data": {"k": text, "nested": [{"v": text}, [text]]}}]
    assert not plan_text.libyaml_writes_it_alike(objects)
    assert plan_text.manifests_yaml(objects) == _python_emitter(objects)


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
        assert plan_text.manifests_yaml(objects) == _python_emitter(objects)


@pytest.mark.parametrize("key", ["", "k" * 101, "two\nlines", "tab\tkey", "caf\u00e9", 1.5, None])
def test_keys_that_libyaml_may_write_differently_go_through_the_python_emitter(key):
    objects = [{"kind": "ConfigMap", "data": {key: "v"}}]
    assert not plan_text.libyaml_writes_it_alike(objects)
    assert plan_text._odd_values(objects[0], [], []) is False  # no stand-ins for keys
    assert plan_text.manifests_yaml(objects) == _python_emitter(objects)


def test_no_objects_give_an_empty_file():
    assert plan_text.manifests_yaml([]) == ""


# ----------------------------------------------------------------------------------------------
# JSON files
# ----------------------------------------------------------------------------------------------


def _reference_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def test_json_text_is_json_dumps_text(dev_plan):
    rng = random.Random(11)
    values = [
        [r.as_json() for r in dev_plan.records],
        dev_plan.outputs,
        {},
        [],
        "",
        None,
        {"e": {}, "l": [], "t": (1, "two", (3,)), "u": 'caf\u00e9 \u2028 \x00 "quoted" \\ \t\n \U0001f600'},
        [0, -1, 2**70, 1.5, -0.0, 1e-300, 1e20, float("inf"), -float("inf"), float("nan"), True, False, None],
        *[_generated(rng, odd=0.3) for _ in range(200)],
    ]
    for value in values:
        assert plan_text.json_text(value) == _reference_json(value)


@pytest.mark.parametrize("value", [{1: "a", 2.5: "b", False: "c", None: "d"}, {"nested": [{3: 4}]}])
def test_json_text_leaves_other_keys_to_json_dumps(value):
    assert plan_text.json_text(value) == _reference_json(value)


def test_json_text_refuses_what_json_dumps_refuses():
    cycle: list = []
    cycle.append(cycle)
    for value in (cycle, {"s": {1, 2}}, {"o": object()}):
        with pytest.raises((ValueError, TypeError)) as expected:
            json.dumps(value, indent=2)
        with pytest.raises(type(expected.value)):
            plan_text.json_text(value)
    assert math.isnan(json.loads(plan_text.json_text(float("nan"))))


# ----------------------------------------------------------------------------------------------
# Helm renders
# ----------------------------------------------------------------------------------------------

needs_helm = pytest.mark.skipif(not releases.HELM.exists(), reason="no helm: run `.venv/bin/python scripts/k8s_tools.py` (scripts/test.sh does)")


@pytest.fixture(scope="module")
def dev_rendered(dev_plan) -> releases.Rendered:
    return releases.render(dev_plan, versions.KUBERNETES_DEFAULT)


@needs_helm
def test_the_readers_give_what_reading_helms_output_here_gives(dev_plan, dev_rendered):
    """Each release's objects, from its reader process, are what this process reads from the same
    `helm template` output; their text is manifests_yaml's and the Python emitter's."""
    objects = []
    for r in dev_plan.of_type(releases.RELEASE):
        inputs = r.inputs
        cmd = [str(releases.HELM), "template", inputs["name"], str(PROJECT_ROOT / inputs["chart"]), "--namespace", inputs.get("namespace") or "default"]
        cmd += ["--kube-version", f"{versions.KUBERNETES_DEFAULT}.0", "--include-crds", "-f", "-"]
        text = subprocess.run(cmd, input=json.dumps(inputs.get("values") or {}), capture_output=True, text=True, check=True).stdout
        objects += [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if isinstance(d, dict)]
    assert dev_rendered.note is None and len(dev_plan.of_type(releases.RELEASE)) >= 4
    assert dev_rendered.objects == objects
    assert dev_rendered.text is not None
    assert releases.releases_yaml(dev_rendered) == plan_text.manifests_yaml(objects) == _python_emitter(objects)


@needs_helm
@pytest.mark.skipif(not LIBYAML, reason="PyYAML without libyaml")
def test_the_kueue_workload_crd_is_written_with_stand_ins_not_by_the_python_emitter(dev_rendered):
    """The Workload CRD (690 kB, tabs in three descriptions) was most of the time of releases.yaml
    when it went through the Python emitter."""
    (workload,) = [o for o in dev_rendered.objects if o["kind"] == "CustomResourceDefinition" and o["metadata"]["name"].startswith("workloads.")]
    odd: list = []
    assert plan_text._odd_values(workload, [], odd) and odd
    assert plan_text._with_stand_ins(workload, odd) == _python_emitter([workload])


@needs_helm
def test_releases_render_while_the_program_runs():
    """While the plan command plans, plan() hands every registration to its on_record as it is
    made; the command starts each release's helm there, so every render is under way before the
    run ends, and what is collected is what rendering after the run gives."""
    seen: list[str] = []
    renderers: list[releases.Renderer] = []

    def on_record(cfg):
        renderer = releases.Renderer(cfg.cluster.kubernetes_version, cache=None)  # every render runs helm
        renderers.append(renderer)

        def record(r: offline.Record) -> None:
            seen.append(r.urn)
            renderer.start(r)

        return record

    token = plan_module._on_record.set(on_record)
    try:
        cfg, result = plan_module.plan("dev")
    finally:
        plan_module._on_record.reset(token)
    (renderer,) = renderers
    try:
        assert sorted(seen) == sorted(r.urn for r in result.records)
        assert set(renderer._running) == {r.urn for r in result.of_type(releases.RELEASE)} != set()  # started during the run
        collected = renderer.collect(result)
    finally:
        renderer.close()
    after = releases.render(result, cfg.cluster.kubernetes_version, cache=None)
    assert (collected.objects, collected.per_release, collected.text) == (after.objects, after.per_release, after.text)


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


def test_a_kubernetes_object_reaches_the_mocks_as_its_identity_and_reads_back_its_inputs(monkeypatch):
    import pulumi_kubernetes as k8s

    seen: dict[str, dict] = {}
    original = offline.OfflineMocks.new_resource

    def new_resource(self, args):
        seen[args.name] = dict(args.inputs)
        return original(self, args)

    monkeypatch.setattr(offline.OfflineMocks, "new_resource", new_resource)

    def program():
        cm = k8s.core.v1.ConfigMap("cm", metadata={"name": "cm", "namespace": "x", "labels": {"a": "b"}}, data={"key": "value"})
        return {"data": cm.data, "name": cm.metadata.name, "labels": cm.metadata.labels}

    result = offline.run(program, {"aws:region": "us-west-2"}, project="p", stack="s")
    assert set(seen["cm"]) == {"apiVersion", "kind", "metadata"}
    assert result.outputs == {"data": {"key": "value"}, "name": "cm", "labels": {"a": "b"}}
    (record,) = result.of_type("kubernetes:core/v1:ConfigMap")
    assert record.inputs["data"] == {"key": "value"}


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
