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
"""

from __future__ import annotations

import json
import locale
import pickle
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from facts.paths import PROJECT_ROOT, TOOLS_BIN
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

    def __init__(self, kubernetes_version: str, root: Path = PROJECT_ROOT, helm: Path = HELM):
        self.kubernetes_version = kubernetes_version
        self.root = root
        self.helm = helm
        self._lock = threading.Lock()
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._running: dict[str, _Render] = {}  # by release URN

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
            if record.urn in self._running:
                return
            if self._tmp is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="helm-values-")
            inputs = record.inputs
            base = Path(self._tmp.name) / str(len(self._running))
            values, errors = base.with_suffix(".json"), base.with_suffix(".stderr")
            values.write_text(json.dumps(inputs.get("values") or {}))  # JSON is YAML
            cmd = [
                str(self.helm),
                "template",
                inputs["name"],
                str(self.root / inputs["chart"]),
                "--namespace",
                inputs.get("namespace") or "default",
                "--kube-version",
                f"{self.kubernetes_version}.0",
                "--include-crds",
                "-f",
                str(values),
            ]
            with errors.open("wb") as err:
                helm = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
            assert helm.stdout is not None
            try:
                reader = subprocess.Popen(
                    [sys.executable, "-I", "-c", _READER_CODE, locale.getpreferredencoding(False), str(_CODE_ROOT)],
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
            self._running[record.urn] = _Render(cmd, helm, reader, errors)

    def collect(self, result: PlanResult) -> Rendered:
        """Every release of ``result`` rendered (those not started yet are started now), in the
        plan's order; a note instead when helm is not there."""
        releases = result.of_type(RELEASE)
        out = Rendered()
        if not releases:
            return out
        if not self.helm.exists():
            where = self.helm.relative_to(self.root) if self.helm.is_relative_to(self.root) else self.helm
            out.note = f"{len(releases)} Helm release(s) not rendered: no helm at {where} (bash scripts/plan.sh installs it)"
            return out
        for r in releases:
            self.start(r)
        texts = []
        for r in releases:
            render = self._running[r.urn]
            data, reader_err = render.reader.communicate(timeout=120)
            if render.helm.wait(timeout=120):
                raise subprocess.CalledProcessError(render.helm.returncode, render.cmd, None, render.helm_stderr.read_text(errors="replace"))
            if render.reader.returncode:
                raise RuntimeError(f"reading the output of {' '.join(render.cmd)} failed:\n{reader_err.decode(errors='replace')}")
            docs, text = pickle.loads(data)  # from our own reader process
            out.objects += docs
            out.per_release[r.inputs["name"]] = [f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}" for d in docs]
            if text:
                texts.append(text)
        # Each text is a stream of its own, "---" before every document: joined, they are the text
        # of all the objects, unless one before the last ends open ("..."), which one stream writes
        # at its very end only (then releases_yaml writes all the objects again).
        if not any(t.endswith("...\n") for t in texts[:-1]):
            out.text = "".join(texts)
        return out

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
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None


def render(result: PlanResult, kubernetes_version: str, root: Path = PROJECT_ROOT, helm: Path = HELM) -> Rendered:
    """Render every Helm release of ``result``; a note instead when helm is not there."""
    with Renderer(kubernetes_version, root, helm) as renderer:
        return renderer.collect(result)
