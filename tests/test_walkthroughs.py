"""docs/walkthroughs.md runs as written: each walkthrough's commands run for real, in a fresh copy of the
project, and print at least the lines the walkthrough shows, in that order. The test reads the same
blocks the reader does, so the two cannot drift apart. The ```console blocks of every other page of docs/
run the same way, each page in a fresh copy of its own.

The blocks, in the order they appear under each ``## `` heading:

- ```` ```console ````: ``$ command`` lines, each followed by lines of its output. The command runs
  with bash in the project copy (stdout and stderr together) and must exit 0; every output line shown
  must appear, in order, among the lines it prints. ``...`` stands for lines left out; a shown line
  that ends in `` ...`` matches a line that starts with the text before it.
- ```` ```yaml ```` whose first line is ``# <file>, under config: ...``: an edit of that stack file.
  Maps are merged key by key; a list entry whose ``name`` an entry of the file's list has changes
  that entry, any other is added at the end; any other value replaces the file's.
- any other block (```` ```sh ````: needs AWS or a cluster) is not run.

"Before you start" and each walkthrough run in a fresh copy of the project each, no walkthrough after another:
each starts from a fresh copy of the dev stack's file, as its first command says, and must leave no file behind
that the copy did not have (its last command removes what it wrote)."""

from __future__ import annotations

import hashlib
import os
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
# Every other page whose ```console blocks run: all of docs/ (a page without one has nothing to run).
PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if p != DOC)
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


def steps_of(text: str) -> list[Step]:
    """The steps of a text: its ```console blocks' commands and its ```yaml edits of a stack file."""
    steps: list[Step] = []
    for m in FENCE.finditer(text):
        lang, block = m.group(1), m.group(2)
        if lang == "console":
            steps += commands(block)
        elif lang == "yaml" and (e := EDIT.match(block)):
            steps.append(Edit(e.group(1), load_yaml(block)))
    return steps


def sections(text: str) -> dict[str, list[Step]]:
    """The steps of each ``## `` section, by its title (without a leading number)."""
    out: dict[str, list[Step]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        out[re.sub(r"^\d+\.\s*", "", title.strip())] = steps_of(body)
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


def files_of(proj: Path) -> set[str]:
    """The files and folders of a project copy, as a reader's ``git status`` would see them: links not followed,
    Python's and the plan's caches (ignored by git) left out."""
    out = set()
    for folder, dirs, files in os.walk(proj):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", ".cache")]
        rel = Path(folder).relative_to(proj)
        out |= {str(rel / name) for name in [*dirs, *files]}
    return out


def walk(steps: list[Step], tmp_path: Path, cache: Path) -> None:
    """``steps`` in a fresh copy of the project; nothing may be left behind."""
    set_up()
    proj, home = project_copy(tmp_path), tmp_path / "home"
    home.mkdir()
    before = files_of(proj)
    run_and_match(steps, proj, home, cache)
    after = files_of(proj)
    assert (sorted(after - before), sorted(before - after)) == ([], []), "left behind (or removed)"


TITLES = [t for t in sections(DOC.read_text()) if t not in (SETUP, REVIEW)]
FRESH = "cp Pulumi.dev.yaml Pulumi.mine.yaml"


def test_the_walkthroughs_are_there_and_run_commands():
    found = sections(DOC.read_text())
    assert SETUP in found and REVIEW in found and len(TITLES) >= 5
    for title in TITLES + [REVIEW]:
        assert any(isinstance(s, Command) and s.shown for s in found[title]), title


@pytest.mark.parametrize("title", [SETUP, *TITLES, REVIEW])
def test_each_walkthrough_starts_from_a_fresh_copy_of_dev(title):
    """Its first step copies the dev stack's file over ``mine``: no walkthrough builds on another's edits."""
    first = sections(DOC.read_text())[title][0]
    assert isinstance(first, Command) and first.line == FRESH, title


@pytest.mark.real_run
def test_set_up(tmp_path, plan_cache):
    walk(sections(DOC.read_text())[SETUP], tmp_path, plan_cache)


@pytest.mark.real_run
@pytest.mark.parametrize("title", TITLES)
def test_walkthrough(title, tmp_path, plan_cache):
    walk(sections(DOC.read_text())[title], tmp_path, plan_cache)


@pytest.mark.real_run
def test_review_walkthrough(tmp_path, plan_cache):
    """Runs `python -m infra diff`."""
    walk(sections(DOC.read_text())[REVIEW], tmp_path, plan_cache)


def page_commands(page: Path) -> list[Step]:
    """Every step of a page (its console commands and stack-file edits), in order, as one list."""
    return steps_of(page.read_text())


@pytest.mark.real_run
@pytest.mark.parametrize("page", [p for p in PAGES if page_commands(p)], ids=lambda p: p.name)
def test_the_commands_of_each_page(page, tmp_path, plan_cache):
    walk(page_commands(page), tmp_path, plan_cache)


def test_a_file_left_behind_fails(tmp_path, plan_cache):
    """The clean-up rule fires: a walkthrough that writes a file and does not remove it fails."""
    with pytest.raises(AssertionError, match="left behind"):
        walk([Command("touch Pulumi.mine.yaml", ())], tmp_path, plan_cache)


def test_the_matching_rules():
    assert unmatched(("a", "c ..."), "a\nb\nc d\n") == []
    assert unmatched(("c", "a"), "a\nc\n") == ["a"]
    assert merged(
        {"l": [{"name": "x", "v": 1}], "m": {"a": 1}}, {"l": [{"name": "x", "v": 2}, {"name": "y"}], "m": {"b": 2}}
    ) == {
        "l": [{"name": "x", "v": 2}, {"name": "y"}],
        "m": {"a": 1, "b": 2},
    }
