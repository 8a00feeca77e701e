"""What keeps the offline plan fast, and that the fast paths give what the slow ones gave.

- manifests.yaml and releases.yaml: written by PyYAML's safe dumper over libyaml's emitter; what
  it writes reads back as the objects written (generated objects).
- Helm renders start as soon as their release is registered, each piped into a reader process
  that hands back the objects and their text: the same objects as reading helm's output here.
- The recording monitor reads registrations with a direct walk of the protobuf Struct, which must
  give what ``json_format.MessageToDict`` gives; a Kubernetes object reaches the mocks as its
  identity, and the program still reads back every input it set.
- The vendored MPI operator manifest is parsed once per process, with libyaml's loader, and every
  caller gets objects of its own.
- The garbage collector is paused during a run and restored after it; so is the SDK's stack walk per
  registration (source positions the offline engine does not record).
"""

from __future__ import annotations

import gc
import json
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
from infra.offline import monitor
from tests import plan_memo
from tests.helpers import dev_values

LIBYAML = bool(getattr(yaml, "__with_libyaml__", False))


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
# The YAML files
# ----------------------------------------------------------------------------------------------


@pytest.mark.skipif(not LIBYAML, reason="PyYAML without libyaml")
def test_the_yaml_files_are_written_by_libyaml():
    assert issubclass(plan_text.PlanDumper, yaml.CSafeDumper)


def test_the_yaml_files_read_back_as_the_objects_written():
    """Generated objects (multi-line scripts, long lines, indicators, quotes, YAML-looking words,
    tabs, non-ASCII text, line breaks of every kind, odd keys, shared parts): what
    manifests_yaml writes reads back as the same objects, in the same order."""
    rng = random.Random(20240611)
    for _ in range(300):
        objects = [
            {"kind": "ConfigMap", "k" * rng.randint(1, 120): _generated(rng, odd=0.3)} for _ in range(rng.randint(1, 3))
        ]
        if rng.random() < 0.2:
            objects = [
                {"a": [[o, [o.copy()]]], "": None, 3: "int key"} for o in objects
            ]  # shared values become aliases
        text = plan_text.manifests_yaml(objects)
        assert text.startswith("---")
        read = list(yaml.load_all(text, Loader=yaml.SafeLoader))
        assert read == objects and [list(o) for o in read] == [list(o) for o in objects], objects


def test_multi_line_text_is_a_literal_block():
    text = plan_text.manifests_yaml([{"kind": "ConfigMap", "data": {"script": "set -e\necho hi\n"}}])
    assert "script: |\n" in text


def test_no_objects_give_an_empty_file():
    assert plan_text.manifests_yaml([]) == ""


# ----------------------------------------------------------------------------------------------
# Helm renders
# ----------------------------------------------------------------------------------------------

needs_helm = pytest.mark.skipif(
    not releases.HELM.exists(), reason="no helm: run `.venv/bin/python scripts/k8s_tools.py` (scripts/test.sh does)"
)


@pytest.fixture(scope="module")
def dev_rendered(dev_plan) -> releases.Rendered:
    return releases.render(dev_plan, versions.KUBERNETES_DEFAULT, cache=None)  # the readers run, whatever is kept


@needs_helm
def test_the_readers_give_what_reading_helms_output_here_gives(dev_plan, dev_rendered):
    """Each release's objects, from its reader process, are what this process reads from the same
    `helm template` output; their text is manifests_yaml's and the Python emitter's."""
    objects = []
    for r in dev_plan.of_type(releases.RELEASE):
        inputs = r.inputs
        cmd = [
            str(releases.HELM),
            "template",
            inputs["name"],
            str(PROJECT_ROOT / inputs["chart"]),
            "--namespace",
            inputs.get("namespace") or "default",
        ]
        cmd += ["--kube-version", f"{versions.KUBERNETES_DEFAULT}.0", "--include-crds", "-f", "-"]
        text = subprocess.run(
            cmd, input=json.dumps(inputs.get("values") or {}), capture_output=True, text=True, check=True
        ).stdout
        objects += [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if isinstance(d, dict)]
    assert dev_rendered.note is None and len(dev_plan.of_type(releases.RELEASE)) >= 4
    assert dev_rendered.objects == objects
    assert dev_rendered.text is not None
    assert releases.releases_yaml(dev_rendered) == plan_text.manifests_yaml(objects)


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
        with plan_memo.fresh_plans():  # (the engine's own run, not a kept one handed out again)
            cfg, result = plan_module.plan("dev")
    finally:
        plan_module._on_record.reset(token)
    (renderer,) = renderers
    try:
        assert sorted(seen) == sorted(r.urn for r in result.records)
        assert (
            set(renderer._running) == {r.urn for r in result.of_type(releases.RELEASE)} != set()
        )  # started during the run
        collected = renderer.collect(result)
    finally:
        renderer.close()
    after = releases.render(result, cfg.cluster.kubernetes_version, cache=None)
    assert (collected.objects, collected.per_release, collected.text) == (after.objects, after.per_release, after.text)


# ----------------------------------------------------------------------------------------------
# The recording monitor's Struct walk
# ----------------------------------------------------------------------------------------------


def test_struct_walk_gives_what_message_to_dict_gives():
    ref = {monitor._SIG_KEY: monitor._SIG_RESOURCE, "urn": "urn:pulumi:dev::p::eks:index:Cluster::c", "id": "c"}
    secret = {monitor._SIG_KEY: monitor._SIG_SECRET, "value": "s"}
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
    walked = monitor._wire_dict(struct, refs)
    assert walked == json_format.MessageToDict(struct, preserving_proto_field_name=True)
    assert isinstance(walked["n"], float)  # numbers stay floats, as MessageToDict gives them
    assert refs == [ref]
    refs.clear()
    monitor._wire_dict(struct_pb2.Struct(), refs)
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
        cm = k8s.core.v1.ConfigMap(
            "cm", metadata={"name": "cm", "namespace": "x", "labels": {"a": "b"}}, data={"key": "value"}
        )
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
    return operators.load_manifest(
        PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file, versions.MPI_OPERATOR_MANIFEST.sha256
    )


@pytest.mark.skipif(not LIBYAML, reason="PyYAML without libyaml")
def test_the_mpi_manifest_is_read_with_libyaml():
    assert operators._Loader is yaml.CSafeLoader


def test_each_caller_gets_its_own_copy_of_the_parsed_manifest():
    first = _mpi()
    first[0]["metadata"]["name"] = "changed"
    first.append({"kind": "Extra"})
    second = _mpi()
    assert second[0]["metadata"]["name"] != "changed" and len(second) == 9
    assert second == operators._parse((PROJECT_ROOT / versions.MPI_OPERATOR_MANIFEST.file).read_bytes())


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


# ----------------------------------------------------------------------------------------------
# The SDK's source positions
# ----------------------------------------------------------------------------------------------


def test_a_run_skips_the_sdks_stack_walk_and_restores_it_after():
    """The SDK walks the Python stack for every registration (a source position for the CLI); the offline
    engine records none, so a run swaps the walk out, and puts the SDK's own back after the run."""
    from pulumi.runtime import resource as sdk_registration

    sdk_walk = sdk_registration._get_stack_trace
    seen = []

    def program():
        seen.append((sdk_registration._get_stack_trace is sdk_walk, sdk_registration._get_stack_trace().frames))
        return {}

    offline.run(program, dev_values(), project="gpu-training", stack="dev")
    assert seen == [(False, [])]
    assert sdk_registration._get_stack_trace is sdk_walk
