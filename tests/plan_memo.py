"""Plans of the same config, made once per test process: the real program (``infra.program.main``) run
offline against a config already planned in this process gives what it gave then, so the run is
kept and handed out again. Many modules plan the dev or prod stack, or the same small config, again
(a plan is about half a second of CPU under the mocks).

- The key is a sha256 over the config values, the project, stack and region (as JSON, keys sorted).
  Only runs of the real program with no deployed stack and no fleet's workers are kept; a run that
  raises is not.
- Each caller gets a copy of its own (the run is kept pickled and unpickled per hit), so a test that
  edits what it got cannot change what another one gets.
- ``on_record`` (the plan command's Helm renders) sees every record of a kept run again, in order.
- A test that patches code or the environment (``monkeypatch``) plans afresh (conftest.py), and so
  does code inside ``fresh_plans()`` (tests of two runs agreeing, of what a run does).
"""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from infra import offline
from infra.offline import engine

_KEPT: dict[str, bytes] = {}
_fresh = [0]  # > 0: inside fresh_plans(), nothing kept or handed out
hits = [0]  # how many runs were handed out again (for the tests of this module)


@contextmanager
def fresh_plans() -> Iterator[None]:
    """Every run inside plans afresh (and keeps nothing)."""
    _fresh[0] += 1
    try:
        yield
    finally:
        _fresh[0] -= 1


def _key(config: dict[str, Any], project: str, stack: str, region: str | None) -> str:
    text = json.dumps([config, project, stack, region], sort_keys=True, default=repr)
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

    # A fleet's manager reads its workers' stack files too (their answers are not in the key): afresh.
    if program is not real_program.main or deployed is not None or fleet is not None or _fresh[0]:
        return engine.run(program, config, project, stack, region, on_record, deployed, fleet)
    # (the engine's default region, so that the plan command's runs, which name it, and run_stack's agree)
    key = _key(config, project, stack, region or str(config.get("aws:region") or "us-west-2"))
    kept = _KEPT.get(key)
    if kept is None:
        result = engine.run(program, config, project, stack, region, on_record)
        _KEPT[key] = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        return result
    hits[0] += 1
    result = pickle.loads(kept)
    if on_record is not None:
        for record in result.records:
            on_record(record)
    return result
