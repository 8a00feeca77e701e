"""scripts/compare.sh, the one command docs/previews.md and docs/development.md give for comparing a checkout's
plan with another commit's: it plans both, prints `python -m infra diff`, and leaves no worktree behind, also
when a plan fails. Run in a throwaway git repository made of this checkout's files (never this repository's
own worktrees). Marked real_run (bash scripts/test_slow.sh): each test plans two stacks in processes of their
own, as a reader runs the script."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.real_run

SCRIPT = "scripts/compare.sh"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo.parent), **GIT_ENV}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _files() -> list[str]:
    """This checkout's files as git sees them: tracked, and new ones not ignored."""
    listed = _git(ROOT, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    return [f for f in listed.split("\0") if f and (ROOT / f).is_file()]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository of this checkout's files, one commit, with this checkout's .venv and .tools linked."""
    repo = tmp_path_factory.mktemp("compare") / "project"
    for name in _files():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    _git(repo, "init", "--quiet", "--initial-branch=main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "base")
    for link in (".venv", ".tools"):
        (repo / link).symlink_to((ROOT / link).resolve())
    return repo


def _compare(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo.parent), "LANG": "C.UTF-8", "TMPDIR": str(repo.parent)}
    return subprocess.run(["bash", SCRIPT, *args], cwd=repo, env=env, capture_output=True, text=True)


def _worktrees(repo: Path) -> list[str]:
    return [ln for ln in _git(repo, "worktree", "list", "--porcelain").splitlines() if ln.startswith("worktree ")]


def _leftovers(repo: Path) -> list[Path]:
    return sorted(repo.parent.glob("gpu-training-compare.*"))


def test_help_says_what_it_does_and_exits_0(repo: Path):
    done = _compare(repo, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: bash scripts/compare.sh") and "worktree" in done.stdout


def test_an_unknown_base_is_refused_by_name(repo: Path):
    done = _compare(repo, "no-such-branch")
    assert done.returncode == 2
    assert "git does not know BASE 'no-such-branch'" in done.stderr
    assert len(_worktrees(repo)) == 1 and _leftovers(repo) == []


def test_it_compares_the_checkout_with_the_base_and_removes_the_worktree(repo: Path):
    """A change in the checkout (not committed) shows in the diff; the base's worktree is gone after."""
    dev = repo / "Pulumi.dev.yaml"
    before = dev.read_text()
    assert "gpu-training:etcd:\n    replicas: 1\n" in before
    dev.write_text(before.replace("gpu-training:etcd:\n    replicas: 1\n", "gpu-training:etcd:\n    replicas: 3\n"))
    try:
        done = _compare(repo, "main", "dev")
    finally:
        dev.write_text(before)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Offline plan: dev, main to this checkout" in done.stdout
    assert "etcd" in done.stdout and "replicas" in done.stdout
    assert len(_worktrees(repo)) == 1 and _leftovers(repo) == []


def test_a_failing_plan_is_shown_and_the_worktree_still_removed(repo: Path):
    dev = repo / "Pulumi.dev.yaml"
    before = dev.read_text()
    dev.write_text(before.replace("gpu-training:etcd:\n    replicas: 1\n", "gpu-training:etcd:\n    replicas: many\n"))
    try:
        done = _compare(repo, "main", "dev")
    finally:
        dev.write_text(before)
    assert done.returncode == 1
    assert "the plan of this checkout failed" in done.stderr
    assert "etcd.replicas" in done.stdout  # the config error, in the comparison's failed-plan section
    assert len(_worktrees(repo)) == 1 and _leftovers(repo) == []
