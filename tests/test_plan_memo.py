"""The tests' kept plans (tests/plan_memo.py): a config planned before in this process is handed out
again, as a copy of its own; patched tests, ``fresh_plans()``, other programs and deployed stacks plan
afresh. The plan folders `infra diff` reads likewise, by their files' bytes."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pulumi
import pytest

from infra import offline
from infra import program as real_program
from infra.diff import cli as diff_cli
from tests import plan_memo
from tests.helpers import minimal_values, run_stack

STACK = "memo"  # a stack name no other module plans, so the first run here is a real one


def _values(**sections):
    return minimal_values(**{"tags": {"memo": "yes"}, **sections})


def test_a_config_planned_again_is_handed_out_again_as_a_copy():
    assert offline.run is plan_memo.run  # conftest.py installs it for the session
    first = run_stack(_values(), stack=STACK)
    hits = plan_memo.hits[0]
    again = run_stack(_values(), stack=STACK)
    assert plan_memo.hits[0] == hits + 1
    assert [r.as_json() for r in again.records] == [r.as_json() for r in first.records]
    assert again.outputs == first.outputs
    # A copy of its own: what one caller changes, the next one does not see.
    again.records[0].inputs["changed"] = True
    again.records.pop()
    third = run_stack(_values(), stack=STACK)
    assert "changed" not in third.records[0].inputs and len(third.records) == len(first.records)
    assert third.records[0] is not again.records[0]


def test_another_config_stack_or_program_is_planned_afresh():
    run_stack(_values(), stack=STACK)
    hits = plan_memo.hits[0]
    other = run_stack(_values(tags={"memo": "no"}), stack=STACK)
    run_stack(_values(), stack=f"{STACK}-other")
    offline.run(lambda: {"n": 1}, _values(), project="gpu-training", stack=STACK)
    assert plan_memo.hits[0] == hits
    assert any("no" in str(r.inputs.get("tags")) for r in other.records)


def test_inside_fresh_plans_nothing_is_handed_out():
    run_stack(_values(), stack=STACK)
    hits = plan_memo.hits[0]
    with plan_memo.fresh_plans():
        run_stack(_values(), stack=STACK)
    assert plan_memo.hits[0] == hits


def test_a_test_that_patches_plans_afresh(monkeypatch):
    run_stack(_values(), stack=STACK)
    hits = plan_memo.hits[0]
    monkeypatch.setattr(real_program, "main", real_program.main)  # (a patch: the kept plan may not hold)
    run_stack(_values(), stack=STACK)
    assert plan_memo.hits[0] == hits


def test_a_kept_run_shows_each_record_to_on_record_in_order():
    values = _values()
    first = offline.run(real_program.main, values, project="gpu-training", stack=STACK)
    seen: list[offline.Record] = []
    offline.run(real_program.main, values, project="gpu-training", stack=STACK, on_record=seen.append)
    assert [(r.type, r.name) for r in seen] == [(r.type, r.name) for r in first.records]


def test_the_fleets_answers_are_in_the_key():
    """The plan command hands the engine the fleet's answers (empty for a stack without a fleet): the same
    answers are the same run, as none given is; other answers (another organization, other outputs of a
    referenced stack) plan afresh."""
    values = _values(tags={"memo": "fleet"})
    first = offline.run(real_program.main, values, project="gpu-training", stack=STACK)
    hits = plan_memo.hits[0]
    again = offline.run(real_program.main, values, project="gpu-training", stack=STACK, fleet=offline.OfflineFleet())
    assert plan_memo.hits[0] == hits + 1
    assert [r.as_json() for r in again.records] == [r.as_json() for r in first.records]
    for other in (
        offline.OfflineFleet(organization="acme"),
        offline.OfflineFleet(outputs={"acme/gpu-training/w1": {"fleetWorker": {"cluster": "w1"}}}),
    ):
        offline.run(real_program.main, values, project="gpu-training", stack=STACK, fleet=other)
        assert plan_memo.hits[0] == hits + 1


def test_a_run_that_fails_is_not_kept():
    values = _values(gpuAvailabilityZone="us-west-2z")
    hits = plan_memo.hits[0]
    for _ in range(2):
        with pytest.raises(pulumi.RunError):
            offline.run(real_program.main, values, project="gpu-training", stack=STACK)
    assert plan_memo.hits[0] == hits


def test_a_run_kept_by_another_process_of_the_session_is_read_from_the_sessions_folder():
    folder = Path(os.environ[plan_memo.SHARED_ENV])  # conftest.py makes it before the workers start
    values = _values(tags={"memo": "shared"})
    first = run_stack(values, stack=STACK)
    key = plan_memo._key(values, "gpu-training", STACK, "us-west-2")
    written = pickle.loads((folder / f"{key}.pickle").read_bytes())
    assert [r.as_json() for r in written.records] == [r.as_json() for r in first.records]
    del plan_memo._KEPT[key]  # as if another process had planned it
    hits, shared = plan_memo.hits[0], plan_memo.shared_hits[0]
    again = run_stack(values, stack=STACK)
    assert (plan_memo.hits[0], plan_memo.shared_hits[0]) == (hits + 1, shared + 1)
    assert [r.as_json() for r in again.records] == [r.as_json() for r in first.records]


# ---------------------------------------------------------------------------------------------
# The plan folders `infra diff` reads
# ---------------------------------------------------------------------------------------------


def _folder(path: Path, name: str) -> Path:
    path.mkdir()
    (path / "resources.json").write_text(json.dumps([{"type": "t:m:T", "name": name, "inputs": {"n": name}}]))
    (path / "outputs.json").write_text("{}")
    (path / "manifests.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    return path


def test_a_plan_folder_read_again_is_handed_out_again_as_a_copy(tmp_path):
    assert diff_cli.load_plan is plan_memo.load_plan  # conftest.py installs it for the session
    folder = _folder(tmp_path / "a", "one")
    first = diff_cli.load_plan(folder)
    hits = plan_memo.folder_hits[0]
    again = diff_cli.load_plan(folder)
    assert plan_memo.folder_hits[0] == hits + 1
    assert (again.resources, again.manifests, again.outputs) == (first.resources, first.manifests, first.outputs)
    again.resources[("t:m:T", "one")]["inputs"]["n"] = "changed"
    assert diff_cli.load_plan(folder).resources[("t:m:T", "one")]["inputs"]["n"] == "one"


def test_a_plan_folder_with_other_files_or_root_is_read_afresh(tmp_path):
    folder = _folder(tmp_path / "a", "one")
    diff_cli.load_plan(folder)
    hits = plan_memo.folder_hits[0]
    (folder / "resources.json").write_text(json.dumps([{"type": "t:m:T", "name": "two", "inputs": {}}]))
    assert list(diff_cli.load_plan(folder).resources) == [("t:m:T", "two")]
    diff_cli.load_plan(folder, tmp_path)  # the root is part of what is read (written as <project>)
    with plan_memo.fresh_plans():
        diff_cli.load_plan(folder)
    assert plan_memo.folder_hits[0] == hits
