"""The test commands between them run every test: scripts/test.sh the fast suite (tests/ but
tests/integration and the tests marked real_run), scripts/test_slow.sh the real_run tests (the
project's commands run for real, seconds of CPU each), scripts/test_integration.sh tests/integration;
.ci/run runs all three. pytest refuses a marker that pytest.ini does not register (--strict-markers),
so a misspelt real_run cannot drop a test from both commands."""

from __future__ import annotations

import configparser
import re
import shlex

from tests.helpers import ROOT

MARKER = "real_run"
COMMANDS = ("scripts/test.sh", "scripts/test_slow.sh", "scripts/test_integration.sh")


def pytest_line(script: str) -> list[str]:
    """The words of the script's (last) line that runs pytest."""
    lines = [line for line in script.splitlines() if "-m pytest" in line and not line.lstrip().startswith("#")]
    assert lines, "no line runs pytest"
    return shlex.split(lines[-1])


def marker_expression(words: list[str]) -> str | None:
    """What ``-m`` selects, or None when the command selects by no marker."""
    return next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "-m" and words[i + 1] != "pytest"), None)


def _words(name: str) -> list[str]:
    return pytest_line((ROOT / "scripts" / name).read_text())


def test_the_fast_and_the_slow_command_split_the_suite_by_the_marker():
    fast, slow = _words("test.sh"), _words("test_slow.sh")
    assert marker_expression(fast) == f"not {MARKER}"
    assert marker_expression(slow) == MARKER
    for words in (fast, slow):
        assert "--ignore=tests/integration" in words and words[-1] == "$@"


def test_a_command_without_the_marker_is_seen():
    words = pytest_line('exec .venv/bin/python -m pytest -n auto --ignore=tests/integration "$@"\n')
    assert marker_expression(words) is None
    assert marker_expression(shlex.split('python -m pytest -m "not real_run" -q')) == "not real_run"


def test_ci_runs_every_test_command():
    ran = re.findall(r"^bash (\S+)", (ROOT / ".ci" / "run").read_text(), re.M)
    assert set(COMMANDS) <= set(ran), ran


def test_the_marker_is_registered_and_unknown_markers_are_refused():
    ini = configparser.ConfigParser()
    ini.read(ROOT / "pytest.ini")
    registered = [line.split(":", 1)[0].strip() for line in ini["pytest"]["markers"].strip().splitlines()]
    assert MARKER in registered
    assert "--strict-markers" in ini["pytest"]["addopts"].split()
