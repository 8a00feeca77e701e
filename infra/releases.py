"""The objects the stack's Helm releases install, rendered for the offline plan.

A Helm release is one resource in the plan (the Kubernetes provider renders the chart at `pulumi
up`). So that the offline plan shows every object that gets installed, each release is rendered
here from its vendored chart package, with exactly the values, name and namespace the plan
registers, by the real `helm template` (scripts/k8s_tools.py unpacks it into .tools/bin).

The plan command starts each `helm template` the moment its release is registered
(``Renderer.start``, called by the offline engine), so the renders run beside the rest of the
program, each piped into a Python process of its own that reads the YAML (reading Kueue's CRDs
takes longer than rendering them) and hands the objects back pickled. They are collected
afterwards, in the plan's order (``Renderer.collect``).

What a render gives (the objects and their text) is kept on disk, in .cache/helm-renders/
(infra/plan_cache.py), one entry per render, keyed by everything the render depends on
(``render_key``): the chart file's sha256, the values, the release's name and namespace, the
Kubernetes version, helm's version and binary, the flags, and the reading end (its code,
infra/plan_text.py, PyYAML and libyaml, Python, the encoding). A plan whose release has an entry
reads it instead of running helm; any other starts helm as before and, once its render has been
read, writes the entry. An entry that is not whole, or does not hold what a reader gives, is
rendered again and written anew.
"""

from __future__ import annotations

import functools
import hashlib
import json
import locale
import pickle
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from facts.paths import PROJECT_ROOT, TOOLS_BIN
from infra import plan_cache
from infra.offline import PlanResult, Record
from infra.plan_text import manifests_yaml

RELEASE = "kubernetes:helm.sh/v3:Release"
HELM = TOOLS_BIN / "helm"

# The reading end of each render: helm's output on stdin, decoded as subprocess's text mode decodes
# it (the encoding is argv[1]; universal newlines); back, pickled: its documents that are mappings,
# and their text in releases.yaml (infra/plan_text.py, from the checkout at argv[2]).
_READER_CODE = """
import io, pickle, sys
import yaml
sys.path.append(sys.argv[2])
from infra.plan_text import manifests_yaml
text = io.TextIOWrapper(sys.stdin.buffer, encoding=sys.argv[1]).read()
loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
docs = [d for d in yaml.load_all(text, Loader=loader) if isinstance(d, dict)]
sys.stdout.buffer.write(pickle.dumps((docs, manifests_yaml(docs)), protocol=pickle.HIGHEST_PROTOCOL))
"""
_CODE_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class _Render:
    cmd: list[str]
    helm: subprocess.Popen[bytes]
    reader: subprocess.Popen[bytes]
    helm_stderr: Path
    key: str | None  # its cache entry's, once read (None: no cache)


# ---------------------------------------------------------------------------------------------
# The render cache
# ---------------------------------------------------------------------------------------------

# Bump when what an entry holds, or how it is made, changes in a way no key input shows.
_CACHE_FORMAT = 1


def cache_folder() -> Path | None:
    """The render cache's folder: .cache/helm-renders/ (infra/plan_cache.py), or None."""
    return plan_cache.folder("helm-renders")


@functools.cache
def _reader_fingerprint() -> str:
    """What turns helm's output into an entry: the reader's code, the modules it runs
    (infra/plan_text.py, imported through infra/__init__.py), PyYAML and libyaml, and the Python
    that runs it."""
    parts = [_READER_CODE, plan_cache.yaml_fingerprint()]
    parts += [plan_cache.file_sha256(_CODE_ROOT / module) for module in ("infra/__init__.py", "infra/plan_text.py")]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# helm's version by the identity of its file (path, inode, size, modification time): a different
# helm is a different file. Kept in the process and in the cache folder, so that a plan with every
# render in the cache runs no helm at all.
_helm_versions: dict[str, str] = {}


def helm_version(helm: Path, cache: Path | None) -> str:
    """``helm version`` with the identity of the binary (a new file is a new key, even when it says
    the same version)."""
    st = helm.stat()
    identity = f"{helm.resolve()}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
    if identity in _helm_versions:
        return _helm_versions[identity]
    memo = cache / f"helm-{hashlib.sha256(identity.encode()).hexdigest()[:32]}.version" if cache is not None else None
    version = ""
    if memo is not None:
        try:
            version = memo.read_text().strip()
        except (OSError, UnicodeDecodeError):
            version = ""
    if not version or "\n" in version:
        proc = subprocess.run(
            [str(helm), "version", "--template", "{{.Version}}"], capture_output=True, text=True, timeout=60
        )
        version = proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"
        if memo is not None and version != "unknown":
            plan_cache.write_atomically(memo, version.encode() + b"\n")
    _helm_versions[identity] = f"{version} {identity}"
    return _helm_versions[identity]


def render_key(
    *,
    chart_sha256: str,
    values: Any,
    name: str,
    namespace: str,
    kubernetes_version: str,
    helm: str,
    args: list[str],
    reader: str,
) -> str:
    """The cache key of one render: a sha256 over its inputs, the values as canonical JSON (keys
    sorted: helm reads them into maps, which have no order)."""
    return plan_cache.key(
        {
            "kind": "helm-render",
            "format": _CACHE_FORMAT,
            "chart_sha256": chart_sha256,
            "values": values,
            "name": name,
            "namespace": namespace,
            "kubernetes_version": kubernetes_version,
            "helm": helm,
            "args": args,
            "reader": reader,
        }
    )


def load_entry(cache: Path, key: str) -> tuple[list[dict[str, Any]], str] | None:
    """The render kept under ``key`` (its objects and their text), or None: no entry, one that is
    not whole (infra/plan_cache.py), or one that does not hold what a reader gives."""
    kept = plan_cache.unpickled(plan_cache.load(cache, key))
    if not isinstance(kept, tuple) or len(kept) != 2:
        return None
    docs, text = kept
    if not isinstance(docs, list) or not all(isinstance(d, dict) for d in docs) or not isinstance(text, str):
        return None
    return docs, text


@dataclass
class Rendered:
    objects: list[dict[str, Any]] = field(default_factory=list)  # every object of every release, in plan order
    per_release: dict[str, list[str]] = field(default_factory=dict)  # release name -> "Kind/name" of its objects
    note: str | None = None  # why nothing was rendered
    text: str | None = None  # the objects as releases.yaml holds them, when the renders wrote it


def releases_yaml(rendered: Rendered) -> str:
    """The text of releases.yaml: ``rendered.objects`` in infra/plan_text.py's form."""
    return rendered.text if rendered.text is not None else manifests_yaml(rendered.objects)


class Renderer:
    """Runs `helm template` for each release, every one at once (Kueue's chart alone takes about
    0.3 s): ``start`` a release as soon as it is registered, ``collect`` them all in the plan's
    order. Use it as a context manager: leaving it ends any helm still running."""

    def __init__(
        self,
        kubernetes_version: str,
        root: Path = PROJECT_ROOT,
        helm: Path | None = None,
        cache: Path | None | Literal["default"] = "default",
    ):
        """``helm``: the binary (default: HELM); ``cache``: the render cache's folder, None for
        none, "default" for ``cache_folder()``."""
        self.kubernetes_version = kubernetes_version
        self.root = root
        self.helm = helm if helm is not None else HELM
        self.cache = cache_folder() if cache == "default" else cache
        self._lock = threading.Lock()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._running: dict[str, _Render] = {}  # by release URN
        self._kept: dict[str, tuple[list[dict[str, Any]], str]] = {}  # by release URN: renders read from the cache
        self._helm_version: str | None = None
        self.helm_runs = 0  # `helm template` started (the others came from the cache)

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, record: Record) -> None:
        """Start rendering ``record`` if it is a Helm release (and helm is there). Thread-safe: the
        offline engine calls it from the threads that take registrations."""
        if record.type != RELEASE or not self.helm.exists():
            return
        with self._lock:
            if record.urn in self._running or record.urn in self._kept:
                return
            inputs = record.inputs
            chart = self.root / inputs["chart"]
            flags = ["--kube-version", f"{self.kubernetes_version}.0", "--include-crds"]
            encoding = locale.getpreferredencoding(False)  # how the reader decodes helm's output
            key = self._key(inputs, chart, [*flags, encoding]) if self.cache is not None else None
            if key is not None and self.cache is not None:
                kept = load_entry(self.cache, key)
                if kept is not None:
                    self._kept[record.urn] = kept
                    return
            if self._tmp is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="helm-values-")
            base = Path(self._tmp.name) / str(len(self._running))
            values, errors = base.with_suffix(".json"), base.with_suffix(".stderr")
            values.write_text(json.dumps(inputs.get("values") or {}))  # JSON is YAML
            cmd = [
                str(self.helm),
                "template",
                inputs["name"],
                str(chart),
                "--namespace",
                inputs.get("namespace") or "default",
                *flags,
                "-f",
                str(values),
            ]
            with errors.open("wb") as err:
                helm = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
            assert helm.stdout is not None
            try:
                reader = subprocess.Popen(
                    [sys.executable, "-I", "-c", _READER_CODE, encoding, str(_CODE_ROOT)],
                    stdin=helm.stdout,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            except BaseException:
                helm.kill()
                helm.wait()
                raise
            finally:
                helm.stdout.close()  # the reader holds it now: helm sees a closed pipe if the reader goes
            self.helm_runs += 1
            self._running[record.urn] = _Render(cmd, helm, reader, errors, key)

    def _key(self, inputs: dict[str, Any], chart: Path, args: list[str]) -> str:
        """``args``: helm's flags but the files, and the reader's encoding."""
        if self._helm_version is None:
            self._helm_version = helm_version(self.helm, self.cache)
        return render_key(
            chart_sha256=plan_cache.file_sha256(chart),
            values=inputs.get("values") or {},
            name=inputs["name"],
            namespace=inputs.get("namespace") or "default",
            kubernetes_version=self.kubernetes_version,
            helm=self._helm_version,
            args=args,
            reader=_reader_fingerprint(),
        )

    def collect(self, result: PlanResult) -> Rendered:
        """Every release of ``result`` rendered (those not started yet are started now), in the
        plan's order; a note instead when helm is not there."""
        releases = result.of_type(RELEASE)
        out = Rendered()
        if not releases:
            return out
        if not self.helm.exists():
            where = self.helm.relative_to(self.root) if self.helm.is_relative_to(self.root) else self.helm
            out.note = (
                f"{len(releases)} Helm release(s) not rendered: no helm at {where} (bash scripts/plan.sh installs it)"
            )
            return out
        for r in releases:
            self.start(r)
        texts = []
        for r in releases:
            if r.urn in self._kept:
                docs, text = self._kept[r.urn]
            else:
                docs, text = self._finish(self._running[r.urn])
            out.objects += docs
            out.per_release[r.inputs["name"]] = [
                f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}" for d in docs
            ]
            if text:
                texts.append(text)
        # Each text is a stream of its own, "---" before every document: joined, they are the text
        # of all the objects, unless one before the last ends open ("..."), which one stream writes
        # at its very end only (then releases_yaml writes all the objects again).
        if not any(t.endswith("...\n") for t in texts[:-1]):
            out.text = "".join(texts)
        return out

    def _finish(self, render: _Render) -> tuple[list[dict[str, Any]], str]:
        """A running render's objects and text, once helm and its reader are done (kept in the
        cache when there is one)."""
        data, reader_err = render.reader.communicate(timeout=120)
        if render.helm.wait(timeout=120):
            raise subprocess.CalledProcessError(
                render.helm.returncode, render.cmd, None, render.helm_stderr.read_text(errors="replace")
            )
        if render.reader.returncode:
            raise RuntimeError(
                f"reading the output of {' '.join(render.cmd)} failed:\n{reader_err.decode(errors='replace')}"
            )
        docs, text = pickle.loads(data)  # from our own reader process
        if render.key is not None and self.cache is not None:
            plan_cache.store(self.cache, render.key, data)
        return docs, text

    def close(self) -> None:
        """End every helm still running (after a failure) and remove the values files."""
        with self._lock:
            for render in self._running.values():
                for proc in (render.helm, render.reader):
                    if proc.poll() is None:
                        proc.kill()
                    proc.wait()
                    for stream in (proc.stdout, proc.stderr):
                        if stream is not None:
                            stream.close()
            self._running.clear()
            self._kept.clear()
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None


def render(
    result: PlanResult,
    kubernetes_version: str,
    root: Path = PROJECT_ROOT,
    helm: Path | None = None,
    cache: Path | None | Literal["default"] = "default",
) -> Rendered:
    """Render every Helm release of ``result`` (from the cache where it has them); a note instead
    when helm is not there."""
    with Renderer(kubernetes_version, root, helm, cache) as renderer:
        return renderer.collect(result)
