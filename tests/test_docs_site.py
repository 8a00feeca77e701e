"""The documentation site (mkdocs.yml, docs/): it builds with ``mkdocs build --strict`` (a broken link or anchor,
a page missing from the nav, fails), no page is over 25 KB, README.md is a front page of at most 15 KB, and every
heading README.md and docs/jobs.md had before the docs became a site still has a home.

tests/data/doc_headings.txt lists those headings (taken from git at 74bc036, the last commit before the move);
tests/data/doc_heading_moves.txt names the new heading of any that were renamed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT

DOCS = ROOT / "docs"
PAGE_LIMIT = 25 * 1024
README_LIMIT = 15 * 1024
HEADINGS = ROOT / "tests" / "data" / "doc_headings.txt"
MOVES = ROOT / "tests" / "data" / "doc_heading_moves.txt"


class _Loader(yaml.SafeLoader):
    """mkdocs.yml's one Python tag (the Mermaid fence's formatter) read as text."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)


def _data_lines(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines() if line and not line.startswith("#")]


def headings_of(text: str) -> set[str]:
    """The headings of a markdown text, without their #s; code blocks left out."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return {h.strip() for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def homeless(old: list[tuple[str, str]], have: set[str], moves: dict[str, str]) -> list[str]:
    """The old headings (file, heading with its #s) with no heading of the same or of the recorded new name."""
    out = []
    for file, heading in old:
        title = heading.lstrip("#").strip()
        if moves.get(title, title) not in have:
            out.append(f"{file}: {heading}")
    return out


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """ONE strict build of the site per session, into a temporary folder. Not --quiet: mkdocs 1.6.1 then drops
    the warnings before --strict counts them, and a broken anchor passes (test_a_broken_anchor_fails_...)."""
    out = tmp_path_factory.mktemp("site")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "LANG": "C.UTF-8"},
    )


def test_the_site_builds_strictly(site):
    assert site.returncode == 0, site.stdout + site.stderr


def test_every_page_is_in_the_nav_once():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)
    listed = []

    def walk(items: list) -> None:
        for item in items:
            for value in item.values() if isinstance(item, dict) else [item]:
                walk(value) if isinstance(value, list) else listed.append(value)

    walk(config["nav"])
    assert sorted(listed) == sorted(p.name for p in DOCS.glob("*.md"))


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_no_page_is_over_25_kb(page: Path):
    assert page.stat().st_size <= PAGE_LIMIT, f"{page.name}: {page.stat().st_size} bytes; split it"


def test_the_readme_is_a_front_page():
    size = (ROOT / "README.md").stat().st_size
    assert size <= README_LIMIT, f"README.md: {size} bytes, over {README_LIMIT}: move the detail into docs/"


def test_every_old_heading_has_a_home():
    old = [(file, heading) for file, heading in _data_lines(HEADINGS)]
    assert len(old) > 50 and {f for f, _ in old} == {"README.md", "docs/jobs.md"}
    moves = {a: b for a, b in _data_lines(MOVES)}
    have = headings_of((ROOT / "README.md").read_text())
    for page in DOCS.glob("*.md"):
        have |= headings_of(page.read_text())
    assert homeless(old, have, moves) == []


def test_the_home_rule_fires():
    old = [("README.md", "## Day two"), ("docs/jobs.md", "### `mpi`"), ("README.md", "## Working on it")]
    have = headings_of("# Day two\n```\n## Working on it\n```\n## Contributing\n")
    assert homeless(old, have, {}) == ["docs/jobs.md: ### `mpi`", "README.md: ## Working on it"]
    assert homeless(old, have | {"`mpi`"}, {"Working on it": "Contributing"}) == []


def test_a_broken_anchor_fails_the_strict_build(tmp_path: Path):
    """The build above could fail: the same configuration refuses a link to a heading that is not there."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [nowhere](other.md#no-such-heading).\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n")
    config = (ROOT / "mkdocs.yml").read_text()
    config = config[: config.index("\nnav:")] + "\nnav:\n  - index.md\n  - other.md\n"
    (tmp_path / "mkdocs.yml").write_text(config)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "LANG": "C.UTF-8"},
    )
    assert done.returncode != 0
    assert "no-such-heading" in done.stdout + done.stderr
