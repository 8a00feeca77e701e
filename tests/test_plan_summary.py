"""The plan's default output is one screen (issue 35): what it creates per component, the
Kubernetes objects counted as the diff counts them, one line per GPU job, cost, tear-down,
warnings and checks; the per-type detail is behind --verbose. Expectations come from the plan's
own files, not from the summary's code."""

from __future__ import annotations

import io
import json
import re
from collections import Counter

import pytest
import yaml

from facts.operators import KINDS
from infra import plan as plan_mod
from stacks import queues
from tests.helpers import cfg_of, dev_values
from tests.plan_memo import load_plan  # (infra.diff.plans.load_plan, kept per process: the dev plan command's folder)

SCREEN = 60  # lines: what the issue asks of dev and prod


@pytest.fixture(scope="module")
def prod_output() -> str:
    out, err = io.StringIO(), io.StringIO()
    assert plan_mod.run_cli("prod", None, stdout=out, stderr=err) == plan_mod.EXIT_OK, err.getvalue()
    return out.getvalue()


def _docs(path) -> list[dict]:
    return [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if isinstance(d, dict)]


def test_dev_and_prod_fit_one_screen(dev_plan_command, prod_output):
    assert dev_plan_command.code == 0, dev_plan_command.stderr
    for stack, text in (("dev", dev_plan_command.stdout), ("prod", prod_output)):
        assert len(text.splitlines()) <= SCREEN, (stack, len(text.splitlines()))


def test_the_detail_is_behind_verbose(dev_plan_command, dev_plan_verbose):
    """Break it once: the verbose output is longer than a screen, so the count above means something."""
    assert len(dev_plan_verbose.stdout.splitlines()) > SCREEN
    per_type = re.compile(r"^ {6} *\d+ \S+:\S+")
    assert any(per_type.match(line) for line in dev_plan_verbose.stdout.splitlines())
    assert not any(per_type.match(line) for line in dev_plan_command.stdout.splitlines())
    assert "Queues (Kueue" in dev_plan_verbose.stdout and "Queues (Kueue" not in dev_plan_command.stdout
    hint = [line for line in dev_plan_command.stdout.splitlines() if "--verbose" in line]
    assert hint and "--verbose" not in dev_plan_verbose.stdout.split("Whole-stack invariants")[0]


def test_no_empty_groups(dev_plan_command, dev_plan_verbose, prod_output):
    for text in (dev_plan_command.stdout, dev_plan_verbose.stdout, prod_output):
        assert not [line for line in text.splitlines() if line.rstrip().endswith(": 0")]


def _roots(records: list[dict]) -> Counter[str]:
    """Custom resources (those with an id) per top-level resource's name, from resources.json."""
    by_key = {(r["type"], r["name"]): r for r in records}

    def root(r: dict) -> dict:
        while r["parent"] is not None:
            r = by_key[(r["parent"]["type"], r["parent"]["name"])]
        return r

    return Counter(root(r)["name"] for r in records if r["id"] is not None)


def test_resources_per_component_are_counted_from_the_tree(dev_plan_command):
    records = json.loads((dev_plan_command.out / "resources.json").read_text())
    expected = _roots(records)
    lines = dev_plan_command.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Resources: "))
    assert lines[at].startswith(f"Resources: {sum(expected.values())} cloud/Kubernetes resources (")
    block = " ".join(line.strip() for line in lines[at + 1 : at + 4] if line.startswith("  "))
    shown = {name: int(n) for name, n in re.findall(r"([\w-]+) (\d+)(?:,|$)", block)}
    assert shown == dict(expected)


def test_kubernetes_objects_are_counted_as_the_diff_counts_them(dev_plan_command):
    out = dev_plan_command.out
    declared, rendered = _docs(out / "manifests.yaml"), _docs(out / "releases.yaml")
    counted_by_diff = len(load_plan(out).manifests)
    line = next(ln for ln in dev_plan_command.stdout.splitlines() if ln.startswith("Kubernetes objects: "))
    assert line.startswith(f"Kubernetes objects: {counted_by_diff} ({len(declared)} declared, {len(rendered)} from "), (
        line
    )
    api = next(ln for ln in dev_plan_command.stdout.splitlines() if ln.startswith("Kubernetes API rules: "))
    assert api.startswith(f"Kubernetes API rules: {counted_by_diff} objects checked")


def test_one_line_per_gpu_job(dev_plan_command):
    cfg = cfg_of(dev_values())
    docs = _docs(dev_plan_command.out / "manifests.yaml")
    jobs = [j for j in cfg.jobs if j.enabled and j.kind in ("mpi", "nccl-test", "pytorch-elastic", "paddle")]
    assert jobs, "the dev stack has GPU jobs"
    lines = dev_plan_command.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("GPU jobs ("))
    assert lines[head].startswith(f"GPU jobs ({len(jobs)}):")
    groups = {g.name: g for g in cfg.gpu_node_groups}
    for j, line in zip(jobs, lines[head + 1 :], strict=False):
        labelled = [d for d in docs if d["metadata"].get("labels", {}).get("gputraining/job") == j.name]
        (obj,) = [d for d in labelled if d["kind"] in {k.kind for k in KINDS}]
        queue = obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
        cells = line.split()
        assert cells[:4] == [j.name, j.kind, obj["kind"], j.node_group], line
        high = getattr(j, "elastic_max", j.nodes)
        assert re.search(rf" \d+(-{high})? x {groups[j.node_group].instance.gpus} ", line), line
        assert f" {queue}: admitted at once " in line or f" {queue}: waits for " in line, line
    # A job the queue holds back names the jobs admitted before it on its flavor (stacks/queues).
    plan = queues.plan_for(cfg)
    assert plan is not None
    admissions = plan.admissions()
    waiting = [a for a in admissions if not a.at_once]
    assert waiting, "the dev stack queues one job behind another"
    for a in waiting:
        ahead = [x.demand.job for x in admissions if x.at_once and x.demand.flavor == a.demand.flavor]
        (line,) = [ln for ln in lines[head + 1 : head + 1 + len(jobs)] if ln.split()[0] == a.demand.job]
        assert f"waits for {', '.join(ahead)} " in line, line
