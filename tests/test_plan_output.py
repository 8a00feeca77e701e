"""What the plan command prints is readable: one line per Helm release with its objects counted by
kind, and jobs that wait on purpose (the queue holds one job after another, a group at zero that
the autoscaler grows) say so. Every expectation is derived from the plan itself."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import yaml

from infra.releases import RELEASE
from stacks import queues
from stacks.config.stackfile import read_stack_config
from stacks.queues.resources import GPU
from tests.helpers import ROOT, cfg_of, dev_values, minimal_values, nccl_job

RELEASE_LINE = re.compile(r"^  Helm release (\S+) installs (\d+): (.*)$")


def test_one_line_per_helm_release_with_counts_by_kind(dev_plan_command, dev_plan_verbose, dev_plan):
    assert dev_plan_verbose.code == 0, dev_plan_verbose.stderr
    lines = [m for line in dev_plan_verbose.stdout.splitlines() if (m := RELEASE_LINE.match(line))]
    releases = [r.inputs["name"] for r in dev_plan.records if r.type == RELEASE]
    assert [m.group(1) for m in lines] == releases
    docs = [
        d
        for d in yaml.load_all((dev_plan_command.out / "releases.yaml").read_text(), Loader=yaml.CSafeLoader)
        if isinstance(d, dict)
    ]
    shown: Counter[str] = Counter()
    for m in lines:
        parts = [p.split(" ", 1) for p in m.group(3).split(", ")]
        counts = {kind: int(n) for n, kind in parts}
        assert sum(counts.values()) == int(m.group(2)), m.group(0)
        assert list(counts.values()) == sorted(counts.values(), reverse=True), m.group(0)  # most first
        assert "/" not in m.group(3), "names of objects are in releases.yaml, not in the summary"
        shown.update(counts)
    assert shown == Counter(d["kind"] for d in docs)


def _table_lines(text: str, job: str) -> list[str]:
    """The lines of ``job`` in the queue table: its row, its verdict, and what follows it."""
    lines = text.splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("Queues ("))
    i = next(i for i, line in enumerate(lines) if i > table and line.strip().startswith(job + " "))
    end = next((j for j in range(i + 1, len(lines)) if not lines[j].startswith("      ")), len(lines))
    return lines[i:end]


def test_a_job_the_queue_holds_back_says_it_is_intended(dev_plan_verbose):
    plan = queues.plan_for(cfg_of(dev_values()))
    assert plan is not None
    admissions = plan.admissions()
    waiting = [a for a in admissions if not a.at_once]
    assert waiting, "the dev stack queues one of its jobs behind another"
    for a in waiting:
        ahead = [x.demand.job for x in admissions if x.at_once and x.demand.flavor == a.demand.flavor]
        rows = _table_lines(dev_plan_verbose.stdout, a.demand.job)
        intended = [r for r in rows if r.strip().startswith("intended:")]
        assert len(intended) == 1, rows
        assert all(job in intended[0] for job in ahead), (ahead, intended)


def test_an_admitted_job_on_a_group_at_zero_says_the_autoscaler_grows_it(dev_plan_verbose):
    cfg = cfg_of(dev_values())
    plan = queues.plan_for(cfg)
    assert plan is not None
    flavors = {f.name: f for f in plan.flavors}
    checked = 0
    for a in plan.admissions():
        f = flavors[a.demand.flavor or ""]
        if not (a.at_once and f.autoscaled and f.first_nodes == 0):
            continue
        nodes = -(-a.demand.total[GPU] // f.per_node[GPU])
        rows = _table_lines(dev_plan_verbose.stdout, a.demand.job)
        assert any(f"grows group {f.name} from 0 to the {nodes} node" in r for r in rows), rows
        checked += 1
    assert checked, "the dev stack's groups start at zero"


def test_a_fixed_group_with_its_nodes_running_has_no_such_line():
    group = {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 2, "desiredSize": 2, "maxSize": 2}
    plan = queues.plan_for(
        cfg_of(minimal_values(gpuNodeGroups=[{**group, "autoscale": False}], jobs=[nccl_job("a", 2)]))
    )
    assert plan is not None
    text = queues.describe(plan, "v")
    assert "admitted at once" in text and "intended:" not in text


def test_the_teardown_lines_name_what_the_plan_protects_and_retains(prod_plan, dev_plan):
    from infra import teardown

    text = teardown.describe(prod_plan.records)
    custom = [r for r in prod_plan.records if r.custom]
    protected = [r.name for r in custom if r.options.get("protect")]
    retained = [r.name for r in custom if r.options.get("retainOnDelete")]
    refused = [r.name for r in prod_plan.records if r.inputs.get("deletionProtection") is True]
    assert protected and retained and refused, "prod protects its data stores, keeps the FSx key, and EKS refuses"
    first, *rest = text.splitlines()
    # While anything is protected destroy deletes nothing: the first line says so, and no count of deletes.
    assert first.startswith(f"Tear-down (`pulumi destroy`): deletes nothing while {len(protected)} resources are")
    assert [n.split(" (")[0] for n in first.split("naming each): ", 1)[1].split(", ")] == protected, first
    assert rest[0] == (
        f"  once they are unprotected it deletes {len(custom) - len(retained)} of the {len(custom)} "
        "cloud/Kubernetes resources; it stops at or leaves:"
    )
    lines = {line.split(" (", 1)[0].strip(): line for line in rest[1:]}
    for kind, names in (("deletion protection on at AWS", refused), ("retained", retained)):
        assert [n.split(" (")[0] for n in lines[kind].split("): ", 1)[1].split(", ")] == names, lines[kind]
    dev_custom = sum(1 for r in dev_plan.records if r.custom)
    assert teardown.describe(dev_plan.records) == (
        f"Tear-down (`pulumi destroy`): deletes all {dev_custom} cloud/Kubernetes resources; none protected or "
        "retained\n"
    )


def test_without_protection_the_teardown_counts_what_it_deletes(prod_plan):
    """Break the rule once: prod's records with protect off give a count on the first line."""
    import dataclasses

    from infra import teardown

    unprotected = [
        dataclasses.replace(r, options={k: v for k, v in r.options.items() if k != "protect"})
        for r in prod_plan.records
    ]
    custom = [r for r in unprotected if r.custom]
    retained = [r for r in custom if r.options.get("retainOnDelete")]
    first = teardown.describe(unprotected).splitlines()[0]
    assert first == (
        f"Tear-down (`pulumi destroy`): deletes {len(custom) - len(retained)} of the {len(custom)} cloud/Kubernetes "
        "resources; it stops at or leaves:"
    )
    assert "nothing" not in teardown.describe(unprotected)


def test_plan_help_and_the_readme_name_every_file_the_plan_writes(dev_plan_command, capsys):
    from infra.__main__ import main

    written = sorted(p.name for p in dev_plan_command.out.iterdir())
    assert len(written) == 6
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "six files" in help_text and all(name in help_text for name in written)
    quick_start = ROOT.joinpath("README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "six files" in quick_start and all(
        f"`{name}`" in quick_start or f"/{name}`" in quick_start for name in written
    )


def test_the_readme_environment_table_gives_each_group_its_capacity_type():
    text = ROOT.joinpath("README.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| GPU groups |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    for cell, stack in zip(cells, ("dev", "prod"), strict=True):
        cfg = cfg_of(read_stack_config(stack, ROOT)[1], stack)
        for g in cfg.gpu_node_groups:
            assert re.search(rf"\b{g.name} \({re.escape(g.capacity_type)}\b", cell), (
                stack,
                g.name,
                g.capacity_type,
                cell,
            )


def test_the_queue_table_in_the_job_reference_is_the_dev_plans(dev_plan_verbose):
    text = (ROOT / "docs" / "queues.md").read_text()
    start = text.index("    Queues (Kueue")
    block = [line[4:] for line in text[start:].split("\n\n", 1)[0].splitlines()]
    printed = dev_plan_verbose.stdout.splitlines()
    at = printed.index(block[0])
    assert printed[at : at + len(block)] == block
