"""Plans of the same config, made once per test process: the real program (``infra.program.main``) run
offline against a config already planned in this process gives what it gave then, so the run is
kept and handed out again. Many modules plan the dev or prod stack, or the same small config, again
(a plan is about half a second of CPU under the mocks).

- The key is a sha256 over the config values, the project, stack and region, and the fleet's answers
  (``OfflineFleet``: the organization and the referenced stacks' outputs, all the run reads of other
  stacks; none given is the empty one, as the engine takes it) (as JSON, keys sorted). Only runs of the
  real program with no deployed stack are kept; a run that raises is not.
- Each caller gets a copy of its own (the run is kept pickled and unpickled per hit), so a test that
  edits what it got cannot change what another one gets.
- ``on_record`` (the plan command's Helm renders) sees every record of a kept run again, in order.
- A test that patches code or the environment (``monkeypatch``) plans afresh (conftest.py), and so
  does code inside ``fresh_plans()`` (tests of two runs agreeing, of what a run does).

Within one test session the kept runs are shared by the session's processes too (pytest-xdist's workers
plan the same dev, prod and small configs): each is also written to the folder named by
``SHARED_ENV`` (conftest.py makes one per session, before the workers start, and removes it at the end),
as ``<key>.pickle``, written whole or not at all (a temporary file renamed), and a process that has not
planned a config reads it there before planning it.

``load_plan`` does the same for the plan folders ``infra diff`` reads (``infra.diff.cli.load_plan``): reading
one is about 3 s of CPU (7 MB of YAML and JSON for the dev stack), and the diff tests compare many heads
with the same few bases. The key is a sha256 over the folder's files (names and bytes) and the project
root, so a folder written again with other content is read again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra import offline
from infra.diff import plans
from infra.offline import engine

SHARED_ENV = "GPU_TRAINING_TEST_PLAN_MEMO"  # the session's folder of kept runs and plan folders
_KEPT: dict[str, bytes] = {}
_fresh = [0]  # > 0: inside fresh_plans(), nothing kept or handed out
hits = [0]  # how many runs were handed out again (for the tests of this module)
_READ: dict[str, bytes] = {}
folder_hits = [0]  # how many plan folders were handed out again
shared_hits = [0]  # how many of those (runs and folders) another process of the session had kept


@contextmanager
def fresh_plans() -> Iterator[None]:
    """Every run inside plans afresh (and keeps nothing)."""
    _fresh[0] += 1
    try:
        yield
    finally:
        _fresh[0] -= 1


def _kept(store: dict[str, bytes], key: str) -> bytes | None:
    """What this process kept under ``key``, or else another process of the session (SHARED_ENV)."""
    if key in store:
        return store[key]
    folder = os.environ.get(SHARED_ENV)
    path = Path(folder) / f"{key}.pickle" if folder else None
    if path is None or not path.is_file():
        return None
    store[key] = path.read_bytes()
    shared_hits[0] += 1
    return store[key]


def _keep(store: dict[str, bytes], key: str, data: bytes) -> None:
    store[key] = data
    folder = os.environ.get(SHARED_ENV)
    if folder and Path(folder).is_dir():
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".part", delete=False) as fh:
            fh.write(data)
        os.replace(fh.name, Path(folder) / f"{key}.pickle")


def _key(
    config: dict[str, Any], project: str, stack: str, region: str | None, fleet: offline.OfflineFleet | None = None
) -> str:
    answers = dataclasses.asdict(fleet or offline.OfflineFleet())
    text = json.dumps([config, project, stack, region, answers], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def run(
    program: Callable[[], dict[str, Any]],
    config: dict[str, Any],
    project: str,
    stack: str,
    region: str | None = None,
    on_record: Callable[[offline.Record], None] | None = None,
    deployed: offline.Deployed | None = None,
    fleet: offline.OfflineFleet | None = None,
) -> offline.PlanResult:
    """``infra.offline.run``, keeping the runs of the real program (see the module's docstring)."""
    from infra import program as real_program

    if program is not real_program.main or deployed is not None or _fresh[0]:
        return engine.run(program, config, project, stack, region, on_record, deployed, fleet)
    # (the engine's default region, so that the plan command's runs, which name it, and run_stack's agree)
    key = _key(config, project, stack, region or str(config.get("aws:region") or "us-west-2"), fleet)
    kept = _kept(_KEPT, key)
    if kept is None:
        result = engine.run(program, config, project, stack, region, on_record, None, fleet)
        _keep(_KEPT, key, pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        return result
    hits[0] += 1
    result = pickle.loads(kept)
    if on_record is not None:
        for record in result.records:
            on_record(record)
    return result


def _folder_key(folder: Path, root: Path | None) -> str:
    digest = hashlib.sha256(str(Path(root).resolve() if root else "").encode() + b"\0")
    for path in sorted(Path(folder).iterdir()):
        if path.is_file():
            digest.update(path.name.encode() + b"\0")
            digest.update(path.read_bytes())  # (hashed where it was read: no copy of megabytes joined to a name)
            digest.update(b"\0")
    return digest.hexdigest()


def load_plan(folder: Path, root: Path | None = None) -> plans.Plan:
    """``infra.diff.plans.load_plan``, keeping what a folder of the same files gave (see the module's docstring)."""
    if _fresh[0]:
        return plans.load_plan(folder, root)
    key = "folder-" + _folder_key(folder, root)
    kept = _kept(_READ, key)
    if kept is None:
        plan = plans.load_plan(folder, root)
        _keep(_READ, key, pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL))
        return plan
    folder_hits[0] += 1
    return pickle.loads(kept)
