"""The objects the stack's Helm releases install, rendered for the offline plan.

A Helm release is one resource in the plan (the Kubernetes provider renders the chart at `pulumi
up`). So that the offline plan shows every object that gets installed, each release is rendered
here from its vendored chart package, with exactly the values, name and namespace the plan
registers, by the real `helm template` (scripts/k8s_tools.py unpacks it into .tools/bin).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from facts.paths import PROJECT_ROOT, TOOLS_BIN
from infra.offline import PlanResult

RELEASE = "kubernetes:helm.sh/v3:Release"
HELM = TOOLS_BIN / "helm"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class Rendered:
    objects: list[dict[str, Any]] = field(default_factory=list)  # every object of every release, in plan order
    per_release: dict[str, list[str]] = field(default_factory=dict)  # release name -> "Kind/name" of its objects
    note: Optional[str] = None  # why nothing was rendered


def render(result: PlanResult, kubernetes_version: str, root: Path = PROJECT_ROOT, helm: Path = HELM) -> Rendered:
    """Render every Helm release of ``result``; a note instead when helm is not there."""
    releases = result.of_type(RELEASE)
    out = Rendered()
    if not releases:
        return out
    if not helm.exists():
        out.note = f"{len(releases)} Helm release(s) not rendered: no helm at {helm.relative_to(root) if helm.is_relative_to(root) else helm} (bash scripts/plan.sh installs it)"
        return out
    with tempfile.TemporaryDirectory() as tmp:
        # Every helm runs at once (Kueue's chart alone takes about 0.3 s); the output is read in the
        # plan's order.
        running = []
        for r in releases:
            inputs = r.inputs
            values = Path(tmp) / f"{r.name}.json"
            values.write_text(json.dumps(inputs.get("values") or {}))  # JSON is YAML
            cmd = [
                str(helm),
                "template",
                inputs["name"],
                str(root / inputs["chart"]),
                "--namespace",
                inputs.get("namespace") or "default",
                "--kube-version",
                f"{kubernetes_version}.0",
                "--include-crds",
                "-f",
                str(values),
            ]
            running.append((inputs["name"], cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        try:
            for name, cmd, proc in running:
                text, err = proc.communicate(timeout=120)
                if proc.returncode:
                    raise subprocess.CalledProcessError(proc.returncode, cmd, text, err)
                docs = [d for d in yaml.load_all(text, Loader=_LOADER) if isinstance(d, dict)]
                out.objects += docs
                out.per_release[name] = [f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}" for d in docs]
        finally:
            for _, _, proc in running:  # after a failure, none is left running
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return out
