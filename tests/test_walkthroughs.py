"""docs/walkthroughs.md runs as written: each walkthrough's commands run for real, in a copy of the
project, and print at least the lines the walkthrough shows, in that order. The test reads the same
blocks the reader does, so the two cannot drift apart.

The blocks, in the order they appear under each ``## `` heading:

- ```` ```console ````: ``$ command`` lines, each followed by lines of its output. The command runs
  with bash in the project copy (stdout and stderr together) and must exit 0; every output line shown
  must appear, in order, among the lines it prints. ``...`` stands for lines left out; a shown line
  that ends in `` ...`` matches a line that starts with the text before it.
- ```` ```yaml ```` whose first line is ``# <file>, under config: ...``: an edit of that stack file.
  Maps are merged key by key; a list entry whose ``name`` an entry of the file's list has changes
  that entry, any other is added at the end; any other value replaces the file's.
- any other block (```` ```sh ````: needs AWS or a cluster) is not run.

"Before you start" runs once, in a first copy; each walkthrough runs its own blocks in a copy of that one
(what the set-up wrote included), as a reader who did the set-up goes on to any of them."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.config.stackfile import load_yaml
from tests.helpers import ROOT

DOC = ROOT / "docs" / "walkthroughs.md"
SETUP = "Before you start"
REVIEW = "Review a change"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
EDIT = re.compile(r"^# (\S+), under config:")


@dataclass(frozen=True)
class Command:
    line: str
    shown: tuple[str, ...]


@dataclass(frozen=True)
class Edit:
    file: str
    values: dict[str, Any]


Step = Command | Edit


def sections(text: str) -> dict[str, list[Step]]:
    """The steps of each ``## `` section, by its title (without a leading number)."""
    out: dict[str, list[Step]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        steps: list[Step] = []
        for m in FENCE.finditer(body):
            lang, block = m.group(1), m.group(2)
            if lang == "console":
                steps += commands(block)
            elif lang == "yaml" and (e := EDIT.match(block)):
                steps.append(Edit(e.group(1), load_yaml(block)))
        out[re.sub(r"^\d+\.\s*", "", title.strip())] = steps
    return out


def commands(block: str) -> list[Command]:
    out: list[Command] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            out.append(Command(line[2:], ()))
        elif out and line.strip() != "...":
            out[-1] = Command(out[-1].line, (*out[-1].shown, line.rstrip()))
    return out


def merged(into: Any, change: Any) -> Any:
    """``change`` applied to ``into`` as the module docstring says."""
    if isinstance(into, dict) and isinstance(change, dict):
        return {**into, **{k: merged(into[k], v) if k in into else v for k, v in change.items()}}
    if isinstance(into, list) and isinstance(change, list):
        out = list(into)
        for item in change:
            named = [
                i
                for i, e in enumerate(out)
                if isinstance(e, dict) and isinstance(item, dict) and e.get("name") == item.get("name")
            ]
            if named:
                out[named[0]] = merged(out[named[0]], item)
            else:
                out.append(item)
        return out
    return change


def project_copy(tmp: Path) -> Path:
    """The project in ``tmp``: its code linked, its stack files and facts/ copied (facts/paths.py makes
    the copy the project root, so stack files, plan folders and .cache stay in it)."""
    proj = tmp / "project"
    proj.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in (".git", ".cache", "__pycache__", ".pytest_cache") or entry.name.startswith("Pulumi."):
            continue
        if entry.name == "facts":
            shutil.copytree(entry, proj / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (proj / entry.name).symlink_to(entry)
    for stack_file in ROOT.glob("Pulumi*.yaml"):
        shutil.copy(stack_file, proj)
    return proj


def run_step(step: Step, proj: Path, home: Path, cache: Path | None = None) -> str | None:
    if isinstance(step, Edit):
        path = proj / step.file
        doc = load_yaml(path.read_text())
        doc["config"] = merged(doc["config"], step.values)
        path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
        return None
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "AWS_EC2_METADATA_DISABLED": "true"}
    if cache is not None:  # the plans' Helm renders, shared by the walkthroughs (infra/plan_cache.py)
        env["GPU_TRAINING_PLAN_CACHE"] = str(cache)
    done = subprocess.run(
        ["bash", "-c", step.line], cwd=proj, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert done.returncode == 0, f"$ {step.line}\n{done.stdout}"
    return done.stdout


def unmatched(shown: tuple[str, ...], printed: str) -> list[str]:
    """The shown lines not found, in order, among the printed ones."""
    lines = printed.splitlines()
    at, missing = 0, []
    for want in shown:
        prefix = want[:-4] if want.endswith(" ...") else None
        found = next(
            (
                i
                for i in range(at, len(lines))
                if (lines[i].startswith(prefix) if prefix else lines[i].rstrip() == want)
            ),
            None,
        )
        if found is None:
            missing.append(want)
        else:
            at = found + 1
    return missing


@pytest.fixture(scope="session")
def plan_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("walkthrough-plan-cache")


def set_up() -> None:
    """The walkthroughs call scripts/plan.sh, whose set-up must have nothing to do (no pip from a test)."""
    want = hashlib.sha256((ROOT / "requirements.txt").read_bytes() + (ROOT / "requirements-dev.txt").read_bytes())
    stamp = ROOT / ".venv" / ".requirements.sha256"
    assert stamp.exists() and stamp.read_text().strip() == want.hexdigest(), "run: bash scripts/bootstrap.sh"
    assert all((ROOT / ".tools" / "bin" / tool).exists() for tool in ("helm", "kubectl")), "run: bash scripts/plan.sh"


def run_and_match(steps: list[Step], proj: Path, home: Path, cache: Path) -> None:
    for step in steps:
        printed = run_step(step, proj, home, cache)
        if isinstance(step, Command):
            assert printed is not None
            assert unmatched(step.shown, printed) == [], f"$ {step.line}\n--- printed:\n{printed}"


@pytest.fixture(scope="session")
def set_up_project(tmp_path_factory: pytest.TempPathFactory, plan_cache: Path) -> Path:
    """The project after "Before you start", run (and its output matched) once: every walkthrough starts
    from a copy of it, as a reader who did the set-up once goes on to any of them."""
    set_up()
    tmp = tmp_path_factory.mktemp("walkthrough-set-up")
    proj, home = project_copy(tmp), tmp / "home"
    home.mkdir()
    run_and_match(sections(DOC.read_text())[SETUP], proj, home, plan_cache)
    return proj


def walk(title: str, tmp_path: Path, cache: Path, set_up_project: Path) -> None:
    proj, home = tmp_path / "project", tmp_path / "home"
    shutil.copytree(set_up_project, proj, symlinks=True)
    home.mkdir()
    run_and_match(sections(DOC.read_text())[title], proj, home, cache)


TITLES = [t for t in sections(DOC.read_text()) if t not in (SETUP, REVIEW)]


def test_the_walkthroughs_are_there_and_run_commands():
    found = sections(DOC.read_text())
    assert SETUP in found and REVIEW in found and len(TITLES) >= 5
    for title in TITLES + [REVIEW]:
        assert any(isinstance(s, Command) and s.shown for s in found[title]), title


@pytest.mark.real_run
@pytest.mark.parametrize("title", TITLES)
def test_walkthrough(title, tmp_path, plan_cache, set_up_project):
    walk(title, tmp_path, plan_cache, set_up_project)


@pytest.mark.real_run
def test_review_walkthrough(tmp_path, plan_cache, set_up_project):
    """Runs `python -m infra diff` (issue 26, item 7)."""
    walk(REVIEW, tmp_path, plan_cache, set_up_project)


def test_the_matching_rules():
    assert unmatched(("a", "c ..."), "a\nb\nc d\n") == []
    assert unmatched(("c", "a"), "a\nc\n") == ["a"]
    assert merged(
        {"l": [{"name": "x", "v": 1}], "m": {"a": 1}}, {"l": [{"name": "x", "v": 2}, {"name": "y"}], "m": {"b": 2}}
    ) == {
        "l": [{"name": "x", "v": 2}, {"name": "y"}],
        "m": {"a": 1, "b": 2},
    }
