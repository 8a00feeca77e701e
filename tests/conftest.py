"""The tests' fixtures: the shared dev and prod plans, the plan command's run, moto.
Helpers (functions, configs, specs) are in tests/helpers.py."""

from __future__ import annotations

import functools
import gc
import hashlib
import io
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pulumi.runtime import settings as pulumi_settings

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from infra import offline  # noqa: E402
from infra.plan_cache import CACHE_ENV  # noqa: E402
from stacks.config.stackfile import read_stack_config  # noqa: E402
from tests import aws_stubs, plan_memo  # noqa: E402
from tests.helpers import ROOT, clean_aws_env, dev_values, run_stack  # noqa: E402

# The offline plan keeps Helm renders, parsed manifests, botocore's model parts and the CEL parser's
# tables in a cache (infra/plan_cache.py). The tests keep theirs in .cache/tests/ (TEST_PLAN_CACHE),
# a folder of their own beside the one the checkout's plans use, kept from one run to the next: an
# entry is named by a sha256 over everything its content depends on (the chart's files, the values,
# helm itself, the Kubernetes version, ...), so a second run renders again only what changed, and
# what an entry holds is checked before it is used. The tests of the cache itself (test_plan_cache.py)
# each use a folder of their own, so the renders and parses are still run in every session. The
# variable is set here in the main process before any xdist worker starts (they, and the commands the
# tests start, inherit it) and put back at the end.
TEST_PLAN_CACHE = ROOT / ".cache" / "tests"
_PLAN_CACHE = pytest.StashKey["str | None"]()  # the variable's value before


_MEMO = pytest.StashKey["str | None"]()  # plan_memo.SHARED_ENV's value before

# Python's cyclic collector runs a young-generation collection every 700 allocations by default, and every
# tenth of those a middle one, every tenth of those (once the old generation has grown by a quarter) a full
# one. A test process holds a large heap (the SDKs, the plans it keeps) and allocates millions of objects
# (each plan, helm's output parsed, botocore's models): at the default that was about a quarter of the
# suite's CPU, mostly in full collections walking the whole heap. Each process of the session (the xdist
# workers too) collects every 10,000 allocations instead: the same garbage goes, a few hundred MB later.
GC_THRESHOLD = (10_000, 10, 10)
_GC = pytest.StashKey["tuple[int, int, int]"]()  # the thresholds before

# What a test process keeps grows from test to test (the SDKs' modules, the plans kept, the caches), and
# every middle and full collection walks all of it again. So after a test that allocated much (FREEZE_FROM
# tracked objects more than it freed, or a collection ran since the last), the last run's SDK state is let
# go (``reset_options``: the mock monitor, its resources and outputs, which the SDK keeps until the next
# run), its garbage collected, and what is left moved out of the collector's sight (``gc.freeze``): later
# collections walk only what later tests make. (An object frozen there that later becomes a garbage cycle
# stays until the process ends; a test process's memory was measured lower this way, not higher.)
FREEZE_FROM = 5_000  # allocations (less deallocations) of tracked objects since the last collection


def _settle_heap() -> None:
    if gc.get_count()[0] < FREEZE_FROM and not any(gc.get_count()[1:]):
        return
    pulumi_settings.reset_options()
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield  # (the test's fixtures are torn down: what they held is let go first)
    _settle_heap()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_GC] = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    if not hasattr(config, "workerinput"):  # not an xdist worker
        config.stash[_PLAN_CACHE] = os.environ.get(CACHE_ENV)
        os.environ[CACHE_ENV] = str(TEST_PLAN_CACHE)
        # The session's kept plans, shared by its workers (tests/plan_memo.py); gone when the session ends.
        config.stash[_MEMO] = os.environ.get(plan_memo.SHARED_ENV)
        os.environ[plan_memo.SHARED_ENV] = tempfile.mkdtemp(prefix="gpu-training-plan-memo-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _GC in config.stash:
        gc.set_threshold(*config.stash[_GC])
    if _MEMO in config.stash:
        shutil.rmtree(os.environ[plan_memo.SHARED_ENV], ignore_errors=True)
        before_memo = config.stash[_MEMO]
        if before_memo is None:
            os.environ.pop(plan_memo.SHARED_ENV, None)
        else:
            os.environ[plan_memo.SHARED_ENV] = before_memo
    if _PLAN_CACHE in config.stash:
        before = config.stash[_PLAN_CACHE]
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


@pytest.fixture(scope="session", autouse=True)
def _kubernetes_schemas_read_once() -> Iterator[None]:
    """kubernetes-validate reads and parses its JSON schema files (the definitions file is megabytes) on every
    ``validate``: each file is read once per process instead (the validator does not change what it reads)."""
    import kubernetes_validate.utils as kv_utils

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kv_utils, "schema_contents", functools.cache(kv_utils.schema_contents))
        yield


@pytest.fixture(scope="session", autouse=True)
def _plans_kept() -> Iterator[None]:
    """Runs of the real program go through tests/plan_memo.py in this process (a config planned before
    is handed out again, as a copy), and so do the plan folders `infra diff` reads."""
    from infra.diff import cli as diff_cli

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(offline, "run", plan_memo.run)
        mp.setattr(diff_cli, "load_plan", plan_memo.load_plan)  # and the plan folders `infra diff` reads
        yield


@pytest.fixture(autouse=True)
def _fresh_plans_when_patched(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that patches code or the environment plans afresh: a kept plan was made without its patch."""
    if "monkeypatch" in request.fixturenames:
        with plan_memo.fresh_plans():
            yield
    else:
        yield


# The plans of the repository's dev and prod stacks and one run of the dev plan command, made once
# per session (per xdist worker; the workers share the plans: tests/plan_memo.py) and shared by every
# test that only reads them (a test that
# changes a plan plans its own, or copies). That they stay unchanged is checked when the session
# ends: each is kept with a function that fingerprints it and the fingerprint it had.
_SHARED: dict[str, tuple[Callable[[], str], str]] = {}


def _share(name: str, fingerprint: Callable[[], str]) -> None:
    _SHARED[name] = (fingerprint, fingerprint())


def _shared(name: str, plan: offline.PlanResult) -> offline.PlanResult:
    _share(name, lambda: hashlib.sha256(pickle.dumps((plan.records, plan.outputs))).hexdigest())
    return plan


@pytest.fixture(scope="session")
def dev_plan() -> offline.PlanResult:
    return _shared("dev_plan", run_stack(dev_values(), stack="dev"))


@pytest.fixture(scope="session")
def prod_plan() -> offline.PlanResult:
    return _shared("prod_plan", run_stack(read_stack_config("prod", ROOT)[1], stack="prod"))


@dataclass(frozen=True)
class PlanCommand:
    code: int
    stdout: str
    stderr: str
    out: Path  # the --out folder (read only: checked at the session's end)


@pytest.fixture(scope="session")
def dev_plan_command(tmp_path_factory: pytest.TempPathFactory) -> PlanCommand:
    """`python -m infra plan --stack dev --out DIR`, run once in-process and shared by the tests
    that read what it prints and writes."""
    from infra import plan as plan_mod

    folder = tmp_path_factory.mktemp("dev-plan-command")
    stdout, stderr = io.StringIO(), io.StringIO()
    code = plan_mod.run_cli("dev", str(folder), stdout=stdout, stderr=stderr)

    def files() -> str:
        digest = hashlib.sha256()
        for path in sorted(folder.rglob("*")):
            digest.update(
                str(path.relative_to(folder)).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"/") + b"\0"
            )
        return digest.hexdigest()

    _share("dev_plan_command", files)
    return PlanCommand(code, stdout.getvalue(), stderr.getvalue(), folder)


@pytest.fixture(scope="session")
def dev_plan_verbose() -> PlanCommand:
    """`python -m infra plan --stack dev --verbose` (no --out), run once in-process: the detail behind
    the summary (per-type counts, the Helm releases by kind, the queue table, ...)."""
    from infra import plan as plan_mod

    stdout, stderr = io.StringIO(), io.StringIO()
    code = plan_mod.run_cli("dev", None, stdout=stdout, stderr=stderr, verbose=True)
    return PlanCommand(code, stdout.getvalue(), stderr.getvalue(), Path())


@pytest.fixture(scope="session", autouse=True)
def _shared_plans_stay_unchanged() -> Iterator[None]:
    yield
    changed = [name for name, (fingerprint, before) in _SHARED.items() if fingerprint() != before]
    assert not changed, (
        f"a test changed the shared {', '.join(changed)} (copy it before changing it); run the tests that use it one "
        "module at a time to find which"
    )


def _moto_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials and nothing else of the machine's AWS setup (see clean_aws_env);
    AWS_DEFAULT_REGION points elsewhere: the region the code passes must win. The service models
    are read once per process (aws_stubs.share_service_models)."""
    clean_aws_env(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # no test needs moto's AMIs; loading them is slow
    aws_stubs.share_service_models(monkeypatch)


_module_moto: list[str] = []  # the module whose tests share one moto now (aws_module)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """moto, empty for this test, with fake credentials (see _moto_env)."""
    from moto import mock_aws

    # Inside a running moto a second one starts nothing (no reset): the test would see what the
    # module's other tests left there.
    assert not _module_moto, (
        f"{_module_moto[0]} shares one moto (aws_module): its tests cannot also have a moto of their own (aws)"
    )
    _moto_env(monkeypatch, tmp_path)
    with mock_aws():
        yield


@pytest.fixture(scope="module")
def aws_module(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One moto for the tests of a module that only read from it (what a module-scoped fixture put
    there, or nothing: moto then only keeps them from AWS), set up once; as ``aws`` otherwise. A
    module uses this or ``aws``, not both."""
    from moto import mock_aws

    with pytest.MonkeyPatch.context() as monkeypatch:
        _moto_env(monkeypatch, tmp_path_factory.mktemp("aws"))
        with mock_aws():
            _module_moto.append(request.module.__name__)
            try:
                yield
            finally:
                _module_moto.clear()
