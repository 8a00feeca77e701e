"""The plan cache (infra/plan_cache.py). Helm renders (infra/releases.py): a plan whose releases
were rendered before runs no helm, anything that changes a render's inputs renders it again, an
entry that is not whole is rendered again, and the files are the same bytes with the cache, without
it, cold or warm. Parsed operator manifests (components/operators.py): parsed once, then read.

helm is counted through a wrapper script that logs its first argument and runs the real helm; each
test has a cache folder of its own.
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import io
import os
import pickle
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from components import operators
from facts import versions
from facts.paths import PROJECT_ROOT
from infra import offline, plan_cache, releases
from infra import plan as plan_mod

NO_HELM = "no helm: run `.venv/bin/python scripts/k8s_tools.py` (scripts/test.sh does)"

K8S = versions.KUBERNETES_DEFAULT


@dataclasses.dataclass
class CountingHelm:
    path: Path
    log: Path

    def templates(self) -> int:
        """How many `helm template` have run so far."""
        return self.log.read_text().split().count("template") if self.log.exists() else 0


@pytest.fixture
def helm(tmp_path: Path) -> CountingHelm:
    if not releases.HELM.exists():
        pytest.skip(NO_HELM)
    log = tmp_path / "helm-calls.log"
    wrapper = tmp_path / "bin" / "helm"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\necho "$1" >> "{log}"\nexec "{releases.HELM}" "$@"\n')
    wrapper.chmod(0o755)
    return CountingHelm(wrapper, log)


def _only(plan: offline.PlanResult, *names: str) -> offline.PlanResult:
    """The plan's releases named ``names`` alone (a copy: the shared plan stays as it is)."""
    records = [copy.deepcopy(r) for r in plan.of_type(releases.RELEASE) if r.inputs["name"] in names]
    assert sorted(r.inputs["name"] for r in records) == sorted(names)
    return offline.PlanResult(records=records, outputs={})


def _with_values(plan: offline.PlanResult, name: str, change: Callable[[dict], None]) -> offline.PlanResult:
    records = []
    for r in plan.records:
        if r.type == releases.RELEASE and r.inputs["name"] == name:
            inputs = copy.deepcopy(r.inputs)
            change(inputs["values"])
            r = dataclasses.replace(r, inputs=inputs)
        records.append(r)
    return offline.PlanResult(records=records, outputs=plan.outputs)


def _same(a: releases.Rendered, b: releases.Rendered) -> None:
    assert a.note is None and b.note is None
    assert (a.objects, a.per_release) == (b.objects, b.per_release)
    assert releases.releases_yaml(a) == releases.releases_yaml(b)


@pytest.fixture(scope="module")
def uncached(dev_plan) -> releases.Rendered:
    """The dev plan's releases rendered by helm, no cache involved."""
    if not releases.HELM.exists():
        pytest.skip(NO_HELM)
    return releases.render(dev_plan, K8S, cache=None)


def test_a_second_plan_renders_nothing_and_gives_the_same(dev_plan, uncached, helm, tmp_path):
    cache = tmp_path / "cache"
    n = len(dev_plan.of_type(releases.RELEASE))
    assert n >= 4
    with releases.Renderer(K8S, helm=helm.path, cache=cache) as renderer:
        first = renderer.collect(dev_plan)
        assert renderer.helm_runs == n
    assert helm.templates() == n
    assert len(list(cache.glob("*.entry"))) == n
    with releases.Renderer(K8S, helm=helm.path, cache=cache) as renderer:
        second = renderer.collect(dev_plan)
        assert renderer.helm_runs == 0
    assert helm.templates() == n  # none more
    _same(first, uncached)
    _same(second, uncached)
    assert second.text == uncached.text  # releases.yaml written from the kept texts, as from the renders
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_the_plan_command_writes_the_same_bytes_without_cache_cold_and_warm(helm, tmp_path, monkeypatch):
    """`python -m infra plan --stack dev --out DIR` three times, each as a new process would (no
    manifest parsed yet): no cache, a cold cache, the same cache warm. The third runs no `helm
    template` and parses no manifest, and every file is the same bytes."""
    monkeypatch.setattr(releases, "HELM", helm.path)  # the command's default helm
    parses: list[int] = []
    parse = operators._parse
    monkeypatch.setattr(operators, "_parse", lambda data: parses.append(1) or parse(data))
    runs = {}
    for run, cache in (("none", ""), ("cold", str(tmp_path / "cache")), ("warm", str(tmp_path / "cache"))):
        monkeypatch.setenv(plan_cache.CACHE_ENV, cache)
        monkeypatch.setattr(operators, "_parsed", {})
        before, parses[:] = helm.templates(), []
        out = tmp_path / run
        assert plan_mod.run_cli("dev", str(out), stdout=io.StringIO(), stderr=io.StringIO()) == plan_mod.EXIT_OK
        runs[run] = (helm.templates() - before, len(parses), {p.name: p.read_bytes() for p in sorted(out.iterdir())})
        assert operators.snapshot_store is None  # only while the command plans
    n = runs["none"][0]
    assert n >= 4 and runs["cold"][0] == n and runs["warm"][0] == 0
    # the MPI and training operators' and Trainer's manifests and the ProvisioningRequest CRD (dev serves
    # ProvisioningRequests)
    assert runs["none"][1] == runs["cold"][1] == 4 and runs["warm"][1] == 0
    assert "releases.yaml" in runs["none"][2]
    assert runs["none"][2] == runs["cold"][2] == runs["warm"][2]
    kept = {p.name for p in (tmp_path / "cache").iterdir()}
    # cel/: cel-python's parser tables, made once per process by the first plan that checks a CEL rule
    assert {"helm-renders", "manifests"} <= kept <= {"cel", "helm-renders", "manifests"}


def test_a_changed_value_renders_that_release_again(dev_plan, helm, tmp_path):
    cache = tmp_path / "cache"
    releases.render(dev_plan, K8S, helm=helm.path, cache=cache)
    n = helm.templates()
    changed = _with_values(dev_plan, "cluster-autoscaler", lambda v: v["extraArgs"].update(expander="most-pods"))
    again = releases.render(changed, K8S, helm=helm.path, cache=cache)
    assert helm.templates() == n + 1
    _same(again, releases.render(changed, K8S, cache=None))
    assert "--expander=most-pods" in releases.releases_yaml(again)
    # A value the chart ignores changes the key all the same: the cache does not read charts.
    ignored = _with_values(dev_plan, "cluster-autoscaler", lambda v: v.update(notReadByTheChart=1))
    releases.render(ignored, K8S, helm=helm.path, cache=cache)
    assert helm.templates() == n + 2
    # The values back as they were: every release from the cache.
    releases.render(dev_plan, K8S, helm=helm.path, cache=cache)
    assert helm.templates() == n + 2


def test_the_order_of_the_values_keys_does_not_matter(dev_plan, helm, tmp_path):
    cache = tmp_path / "cache"
    plan = _only(dev_plan, "cluster-autoscaler")
    releases.render(plan, K8S, helm=helm.path, cache=cache)
    (record,) = plan.records
    record.inputs["values"] = dict(reversed(list(record.inputs["values"].items())))
    releases.render(plan, K8S, helm=helm.path, cache=cache)
    assert helm.templates() == 1


def test_a_changed_chart_file_renders_again(dev_plan, helm, tmp_path):
    """The chart files in another checkout; one of them packed again (same contents, other bytes:
    another sha256) is rendered again, the others are not."""
    root, cache = tmp_path / "checkout", tmp_path / "cache"
    plan = _only(dev_plan, "aws-efa-k8s-device-plugin", "nvidia-device-plugin")
    for r in plan.records:
        (root / r.inputs["chart"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PROJECT_ROOT / r.inputs["chart"], root / r.inputs["chart"])
    first = releases.render(plan, K8S, root=root, helm=helm.path, cache=cache)
    assert helm.templates() == 2
    releases.render(plan, K8S, root=root, helm=helm.path, cache=cache)
    assert helm.templates() == 2
    chart = root / versions.EFA_DEVICE_PLUGIN_CHART.file
    before = chart.read_bytes()
    chart.write_bytes(gzip.compress(gzip.decompress(before), compresslevel=1, mtime=1))
    assert chart.read_bytes() != before
    again = releases.render(plan, K8S, root=root, helm=helm.path, cache=cache)
    assert helm.templates() == 3
    _same(again, first)


def test_another_kubernetes_version_or_helm_renders_again(dev_plan, helm, tmp_path):
    cache = tmp_path / "cache"
    plan = _only(dev_plan, "aws-efa-k8s-device-plugin")
    releases.render(plan, K8S, helm=helm.path, cache=cache)
    other = next(v for v in versions.KUBERNETES_SUPPORTED if v != K8S)
    releases.render(plan, other, helm=helm.path, cache=cache)
    assert helm.templates() == 2
    releases.render(plan, K8S, helm=helm.path, cache=cache)
    assert helm.templates() == 2
    # Another helm binary (here: the wrapper rewritten, same helm behind it) is another key.
    helm.path.write_text(helm.path.read_text() + "# changed\n")
    os.utime(helm.path, ns=(1, 1))
    releases.render(plan, K8S, helm=helm.path, cache=cache)
    assert helm.templates() == 3


def _corruptions() -> Iterator[tuple[str, Callable[[Path, Path], None]]]:
    def truncated(path: Path, cache: Path) -> None:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    def byte_flipped(path: Path, cache: Path) -> None:
        data = bytearray(path.read_bytes())
        data[-10] ^= 0x01
        path.write_bytes(bytes(data))

    def empty(path: Path, cache: Path) -> None:
        path.write_bytes(b"")

    def garbage(path: Path, cache: Path) -> None:
        path.write_bytes(os.urandom(4096))

    def another_key(path: Path, cache: Path) -> None:
        """A whole entry, of another key, under this name."""
        other = "0" * 64
        plan_cache.store(cache, other, pickle.dumps(([{"kind": "ConfigMap"}], "---\nkind: ConfigMap\n")))
        plan_cache.entry_path(cache, other).replace(path)

    def not_a_render(path: Path, cache: Path) -> None:
        """Whole (its sha256 is right) but not what a reader gives."""
        plan_cache.store(cache, path.stem, pickle.dumps("not a render"))

    def a_folder(path: Path, cache: Path) -> None:
        path.unlink()
        path.mkdir()

    yield from ((f.__name__, f) for f in (truncated, byte_flipped, empty, garbage, another_key, not_a_render, a_folder))


@pytest.mark.parametrize("corrupt", [f for _, f in _corruptions()], ids=[name for name, _ in _corruptions()])
def test_an_entry_that_is_not_whole_is_rendered_again(dev_plan, helm, tmp_path, corrupt):
    cache = tmp_path / "cache"
    plan = _only(dev_plan, "nvidia-device-plugin")
    first = releases.render(plan, K8S, helm=helm.path, cache=cache)
    (entry,) = cache.glob("*.entry")
    corrupt(entry, cache)
    again = releases.render(plan, K8S, helm=helm.path, cache=cache)
    assert helm.templates() == 2
    _same(again, first)
    if entry.is_file():  # written anew: the next plan reads it
        releases.render(plan, K8S, helm=helm.path, cache=cache)
        assert helm.templates() == 2


def test_a_cache_that_cannot_be_written_is_left_alone(dev_plan, helm, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    plan = _only(dev_plan, "aws-efa-k8s-device-plugin")
    first = releases.render(plan, K8S, helm=helm.path, cache=blocked)
    second = releases.render(plan, K8S, helm=helm.path, cache=blocked)
    assert helm.templates() == 2
    _same(first, second)


KEY = dict(
    chart_sha256="a" * 64,
    values={"a": 1, "b": [1, 2]},
    name="n",
    namespace="ns",
    kubernetes_version="1.36",
    helm="v4",
    args=["--include-crds"],
    reader="r",
)


@pytest.mark.parametrize(
    "field, other",
    [
        ("chart_sha256", "b" * 64),
        ("values", {"a": 1, "b": [2, 1]}),
        ("values", {"a": 1.5, "b": [1, 2]}),
        ("values", {"a": "1", "b": [1, 2]}),
        ("values", {"a": 1, "b": [1, 2], "c": None}),
        ("name", "m"),
        ("namespace", "other"),
        ("kubernetes_version", "1.35"),
        ("helm", "v4 other"),
        ("args", []),
        ("reader", "s"),
    ],
)
def test_every_input_is_in_the_key(field, other):
    assert releases.render_key(**{**KEY, field: other}) != releases.render_key(**KEY)
    assert releases.render_key(**{**KEY, "values": {"b": [1, 2], "a": 1}}) == releases.render_key(**KEY)


def test_the_reading_end_is_in_the_key(monkeypatch):
    before = releases._reader_fingerprint()
    releases._reader_fingerprint.cache_clear()
    monkeypatch.setattr(releases, "_READER_CODE", releases._READER_CODE + "\n")
    try:
        assert releases._reader_fingerprint() != before
    finally:
        releases._reader_fingerprint.cache_clear()


def test_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(plan_cache.CACHE_ENV, raising=False)
    assert releases.cache_folder() == PROJECT_ROOT / ".cache" / "helm-renders"
    assert plan_cache.folder("manifests") == PROJECT_ROOT / ".cache" / "manifests"
    assert "/.cache/" in (PROJECT_ROOT / ".gitignore").read_text().split()  # not in git
    monkeypatch.setenv(plan_cache.CACHE_ENV, str(tmp_path))
    assert releases.cache_folder() == tmp_path / "helm-renders"
    monkeypatch.setenv(plan_cache.CACHE_ENV, "")
    assert releases.cache_folder() is None and plan_cache.folder("manifests") is None


def test_the_suite_keeps_its_cache_in_a_folder_of_its_own():
    """tests/conftest.py: .cache/tests/, kept from one run to the next, not the folder of the
    checkout's plans (.cache/helm-renders/ and the others beside it); ignored by git with .cache/."""
    folder = releases.cache_folder()
    assert folder == PROJECT_ROOT / ".cache" / "tests" / "helm-renders"
    assert plan_cache.folder("cel") == PROJECT_ROOT / ".cache" / "tests" / "cel"


# ----------------------------------------------------------------------------------------------
# Parsed operator manifests
# ----------------------------------------------------------------------------------------------

MANIFESTS = [
    (versions.MPI_OPERATOR_MANIFEST.file, versions.MPI_OPERATOR_MANIFEST.sha256),
    (versions.TRAINING_OPERATOR_MANIFEST.file, versions.TRAINING_OPERATOR_MANIFEST.sha256),
]


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """Each manifest parsed, by its first line; no parse of this process remembered, no store."""
    seen: list[str] = []
    parse = operators._parse
    monkeypatch.setattr(operators, "_parse", lambda data: seen.append(data.split(b"\n", 1)[0].decode()) or parse(data))
    monkeypatch.setattr(operators, "_parsed", {})
    monkeypatch.setattr(operators, "snapshot_store", None)
    return seen


def _load_all() -> list[list[dict]]:
    return [operators.load_manifest(PROJECT_ROOT / path, sha) for path, sha in MANIFESTS]


def test_a_manifest_parsed_once_is_read_from_the_store_after(parses, monkeypatch, tmp_path):
    expected = _load_all()  # parsed, no store
    assert len(parses) == 2
    store = plan_cache.ManifestSnapshots(tmp_path)
    for run in range(2):  # each as a new process: nothing of the process remembered
        monkeypatch.setattr(operators, "_parsed", {})
        monkeypatch.setattr(operators, "snapshot_store", store)
        assert _load_all() == expected
        assert len(parses) == 4  # the first run parsed both, the second none
    first, second = (operators.load_manifest(PROJECT_ROOT / MANIFESTS[0][0], MANIFESTS[0][1]) for _ in range(2))
    assert first == second and first is not second  # every caller gets objects of its own
    first[0]["metadata"]["name"] = "changed"
    assert operators.load_manifest(PROJECT_ROOT / MANIFESTS[0][0], MANIFESTS[0][1]) == second


@pytest.mark.parametrize("corrupt", [f for _, f in _corruptions()], ids=[name for name, _ in _corruptions()])
def test_a_kept_manifest_that_is_not_whole_is_parsed_again(parses, monkeypatch, tmp_path, corrupt):
    store = plan_cache.ManifestSnapshots(tmp_path)
    monkeypatch.setattr(operators, "snapshot_store", store)
    path, sha = MANIFESTS[0]
    expected = operators.load_manifest(PROJECT_ROOT / path, sha)
    (entry,) = tmp_path.glob("*.entry")
    corrupt(entry, tmp_path)
    monkeypatch.setattr(operators, "_parsed", {})
    assert operators.load_manifest(PROJECT_ROOT / path, sha) == expected
    assert len(parses) == 2
    if entry.is_file():  # written anew
        monkeypatch.setattr(operators, "_parsed", {})
        assert operators.load_manifest(PROJECT_ROOT / path, sha) == expected
        assert len(parses) == 2


def test_the_manifest_key_holds_the_manifest_the_parser_and_yaml(tmp_path, monkeypatch):
    store = plan_cache.ManifestSnapshots(tmp_path)
    keys = {store._key("a" * 64), store._key("b" * 64)}
    monkeypatch.setattr(store, "_parser", store._parser + "changed")
    keys.add(store._key("a" * 64))
    assert len(keys) == 3
    assert plan_cache.yaml_fingerprint() in plan_cache.ManifestSnapshots(tmp_path)._parser
