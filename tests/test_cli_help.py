"""Every command and script answers --help with its usage and exit 0, and does nothing else;
preflight reads a stack file from a path (--config-file) with the plan's reader."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.__main__ import main
from tests.helpers import ROOT, clean_aws_env

SCRIPTS = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.suffix in (".sh", ".py"))


def test_every_script_is_covered():
    assert {"plan.sh", "test.sh", "test_integration.sh", "bootstrap.sh", "k8s_tools.py"} <= set(SCRIPTS)
    others = [p.name for p in (ROOT / "scripts").iterdir() if p.is_file() and p.suffix not in (".sh", ".py")]
    assert others == [], "a script in another language needs a --help case here"


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.endswith(".sh")])
def test_each_shell_script_prints_its_usage_and_does_nothing_else(script, tmp_path):
    """Run from a copy of scripts/ in an empty project: a script that went on past --help would set
    up .venv there (or fail for want of it)."""
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    done = subprocess.run(
        ["bash", f"scripts/{script}", "--help"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHON": "/nonexistent/python3"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.startswith(f"usage: bash scripts/{script}"), done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"]


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.endswith(".py")])
def test_each_python_script_prints_its_usage(script):
    done = subprocess.run(
        [sys.executable, f"scripts/{script}", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: "), done.stdout


@pytest.mark.parametrize("command", [[], ["plan"], ["preflight"], ["diff"]])
def test_each_command_prints_its_usage(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m infra {' '.join(command)}".rstrip())


def test_plan_and_preflight_help_name_config_file_and_verbose(capsys):
    for command in ("plan", "preflight"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--config-file PATH" in capsys.readouterr().out, command
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "--verbose" in capsys.readouterr().out


def test_a_bad_option_still_exits_2(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["plan", "--stack", "dev", "--no-such-option"])
    assert stop.value.code == 2 and "--no-such-option" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# preflight --config-file
# ---------------------------------------------------------------------------------------------

TEAMS = Path("examples") / "teams" / "Pulumi.teams.yaml"


def test_preflight_reads_the_stack_file_it_is_given(monkeypatch, tmp_path, capsys):
    """The teams example in place: its placeholder role ARNs fail before any AWS call (no credentials
    here), and the advice names the file it was read from."""
    clean_aws_env(monkeypatch, tmp_path)
    monkeypatch.chdir(ROOT)
    assert main(["preflight", "--stack", "teams", "--config-file", str(TEAMS)]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == "Preflight of gpu-training/teams, region us-west-2"
    fails = [line for line in captured.out.splitlines() if line.startswith("FAIL  placeholders")]
    assert fails and all(f"replace it in {TEAMS}" in line for line in fails), fails
    assert captured.err.startswith("error: no AWS credentials found") and "Traceback" not in captured.err


def test_preflight_without_config_file_looks_in_the_project(monkeypatch, tmp_path, capsys):
    """Break it once: the same stack name without --config-file is looked up as Pulumi.teams.yaml."""
    clean_aws_env(monkeypatch, tmp_path)
    assert main(["preflight", "--stack", "teams"]) == 2
    assert "no stack file Pulumi.teams.yaml" in capsys.readouterr().err


def test_preflight_with_a_missing_config_file_exits_2(monkeypatch, tmp_path, capsys):
    clean_aws_env(monkeypatch, tmp_path)
    missing = tmp_path / "Pulumi.nope.yaml"
    assert main(["preflight", "--stack", "nope", "--config-file", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: no stack file {missing}\n" and captured.out == ""
