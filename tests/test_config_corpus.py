"""Zero tracebacks for any config a user can write: configs generated from the models (valid and
mutated) go through the plan command, which either plans (exit 0) or refuses (exit 2) with every
problem naming its key -- never a Python traceback, never another exit code.

The corpus is deterministic (a seeded generator): each config value of the dev and a minimal stack
is replaced, in turn, by values of every YAML shape (null, booleans, numbers, strings of the wrong
kind, lists, maps), required keys are dropped and unknown keys added at every level, and the stack
file itself is written with YAML surprises (a key twice, `{value: ...}` forms, tabs).
"""

from __future__ import annotations

import copy
import io
import random
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import plan as plan_mod
from stacks.config import ConfigError, load
from tests import plan_memo
from tests.helpers import NS, ROOT, dev_values, minimal_values

# Every YAML shape a value can take, including the surprising ones (yes -> True, 012 -> 10).
SHAPES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    3,
    2**40,
    1.5,
    "",
    "yes",
    "x" * 300,
    "Ünïcødé",
    "a b",
    [],
    ["a"],
    [1, 2],
    {},
    {"k": "v"},
    {"value": "x"},
]
ERROR_LINE = re.compile(r"^  - (gpu-training:|aws:)[^:\s]*[^\s]*: \S")


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


def _set(values: dict[str, Any], path: tuple, new: Any) -> dict[str, Any]:
    out = copy.deepcopy(values)
    target: Any = out
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new
    return out


def _drop(values: dict[str, Any], path: tuple) -> dict[str, Any]:
    out = copy.deepcopy(values)
    target: Any = out
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    return out


def corpus(seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    bases = [dev_values(), minimal_values()]
    out: list[dict[str, Any]] = []
    for base in bases:
        paths = [p for p in _paths(base) if p]
        for path in paths:
            for shape in rng.sample(SHAPES, 5):
                out.append(_set(base, path, shape))
            if len(path) > 1:
                out.append(_drop(base, path))
            parent = _get(base, path[:-1]) if len(path) > 1 else None
            if isinstance(parent, dict):
                out.append(_set(base, (*path[:-1], "noSuchKey"), 1))
    return out


def _get(values: Any, path: tuple) -> Any:
    for part in path:
        values = values[part]
    return values


CORPUS = corpus()


@cache
def _refusal(i: int) -> ConfigError | None:
    """What validating config ``i`` of the corpus raises (None: valid), once per process for both tests below."""
    try:
        load(CORPUS[i], "gpu-training", "corpus")
    except ConfigError as err:
        return err
    return None


def test_the_corpus_is_large_and_mixed():
    outcomes = {"valid": 0, "invalid": 0}
    for i in range(len(CORPUS)):
        outcomes["invalid" if _refusal(i) else "valid"] += 1
    assert len(CORPUS) > 300
    assert outcomes["valid"] > 20 and outcomes["invalid"] > 200, outcomes


def _write_stack(root: Path, values: dict[str, Any]) -> None:
    (root / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (root / "Pulumi.corpus.yaml").write_text(yaml.safe_dump({"config": values}, sort_keys=False, allow_unicode=True))


def _run_plan(root: Path, monkeypatch) -> tuple[int, str]:
    monkeypatch.setattr(plan_mod, "PROJECT_ROOT", root)
    out, err = io.StringIO(), io.StringIO()
    try:
        code = plan_mod.run_cli("corpus", None, stdout=out, stderr=err)
    except BaseException as exc:  # noqa: BLE001 - the point: nothing may escape
        pytest.fail(f"the plan raised {type(exc).__name__}: {exc}")
    return code, err.getvalue()


def _check_refusal(code: int, stderr: str) -> None:
    assert code == 2, stderr
    assert "Traceback" not in stderr
    problems = [line for line in stderr.splitlines() if line.startswith("  - ")]
    if problems:
        bad = [line for line in problems if not ERROR_LINE.match(line)]
        assert not bad, f"problems that do not name their key: {bad}"
    else:
        assert stderr.startswith("error: "), stderr


@pytest.mark.parametrize("i", range(0, len(CORPUS)))
def test_every_generated_config_plans_or_is_refused_naming_its_key(i, request):
    values = CORPUS[i]
    err = _refusal(i)
    if err is not None:
        # Refused at validation: the same message the plan prints; check its shape without running.
        assert all(ERROR_LINE.match(f"  - {p}") for p in err.problems), err.problems
        return
    if i % 6:
        return  # valid configs are planned for a sample of them (each plan runs the whole program)
    # (a folder and a patch only for the configs planned: most of the corpus is refused before)
    tmp_path, monkeypatch = request.getfixturevalue("tmp_path"), request.getfixturevalue("monkeypatch")
    _write_stack(tmp_path, values)
    with plan_memo.fresh_plans():  # (as for every test that patches: see tests/conftest.py)
        code, stderr = _run_plan(tmp_path, monkeypatch)
    if code != 0:
        _check_refusal(code, stderr)


@pytest.mark.parametrize(
    "text,expect",
    [
        (
            "config:\n  gpu-training:tags:\n    env: dev\n"
            "  gpu-training:tags:\n    env: prod\n  aws:region: us-west-2\n",
            "written twice",
        ),
        ("config:\n  aws:region: us-west-2\n  gpu-training:etcd:\n    cpu: 1\n    cpu: 2\n", "written twice"),
        ("config:\n  aws:region:\n    value: us-west-2\n", "write the region itself"),
        ("config:\n\taws:region: us-west-2\n", "not valid YAML"),
        ("config: [1, 2]\n", "must be a map"),
        ("- just\n- a list\n", "must be a map"),
        (
            "config:\n  aws:region: us-west-2\n  gpu-training:systemNodeGroup:\n    minSize: 0\n",
            "systemNodeGroup.minSize",
        ),
        ("config:\n  aws:region: eu-north-9\n", "not an AWS region known"),
        # Read as the Pulumi CLI reads it (yaml.v3): what it refuses is refused, naming the key.
        (
            "config:\n  aws:region: us-west-2\n  gpu-training:tags: &t\n    a: *t\n",
            "gpu-training:tags.a: the alias *t (line 4) is inside its own anchor",
        ),
        (
            "config:\n  aws:region: us-west-2\n  gpu-training:tags: " + "{a: " * 1000 + "b" + "}" * 1000 + "\n",
            "gpu-training:tags: nests maps and lists",
        ),
        (
            "config:\n  aws:region: us-west-2\n  gpu-training:tags:\n"
            + "".join(
                f"    {c}: &{c} [{','.join(['*' + p] * 9) if p else 'x'}]\n"
                for p, c in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
            ),
            "excessive aliasing",
        ),
        (
            "config:\n  aws:region: us-west-2\n  gpu-training:etcd:\n    <<: {cpu: '1'}\n    cpu: '2'\n    cpu: '3'\n",
            "gpu-training:etcd.cpu: the key 'cpu' is written twice",
        ),
        (
            "config:\n  aws:region: us-west-2\n  gpu-training:tags:\n    1: a\n",
            "gpu-training:tags.1: the key '1' (line 4) is a number",
        ),
        (
            "config:\n  aws:region: us-west-2\n  gpu-training:tags: {a: .inf}\n",
            "gpu-training:tags.a: .inf (line 3) is infinity",
        ),
        (
            "config:\n  aws:region: us-west-2\n  gpu-training:tags: {cost: 0x1F}\n",
            "gpu-training:tags.cost: 31 is not allowed: expected a string",
        ),
        # A real region the offline plan has no recorded offering data for: refused by the offline
        # plan with the reason (a real `pulumi up` asks AWS instead).
        (
            "config:\n  aws:region: ap-southeast-7\n",
            "no recorded AWS offering data for region 'ap-southeast-7' (it has: ",
        ),
    ],
)
def test_yaml_surprises_in_the_stack_file_are_refused_with_the_reason(text, expect, tmp_path, monkeypatch):
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.corpus.yaml").write_text(text)
    code, stderr = _run_plan(tmp_path, monkeypatch)
    assert code == 2 and expect in stderr and "Traceback" not in stderr, stderr


def test_a_valid_config_with_numbers_where_quantities_go_plans(tmp_path, monkeypatch):
    values = minimal_values(etcd={"cpu": 1, "memory": "1Gi"})
    _write_stack(tmp_path, values)
    code, stderr = _run_plan(tmp_path, monkeypatch)
    assert code == 0, stderr
    assert load(values, "gpu-training", "x").etcd.cpu == "1"
    assert NS == "gpu-training"
