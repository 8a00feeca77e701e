"""Shared test helpers: run the real program against the offline engine with a given config."""

from __future__ import annotations

import copy
import hashlib
import io
import os
import pickle
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from infra import offline  # noqa: E402
from infra.plan_cache import CACHE_ENV  # noqa: E402
from stacks import config as stack_config  # noqa: E402
from stacks.config.stackfile import read_stack_config  # noqa: E402

NS = stack_config.NAMESPACE


# The offline plan keeps Helm renders and parsed manifests in a cache (infra/plan_cache.py). The
# tests keep theirs in a folder of this run, made here in the main process before any xdist worker
# starts (they, and the commands the tests start, inherit it) and removed at the end: every run
# renders each release and parses each manifest at least once, whatever an earlier run or a plan of
# the checkout left in .cache/.
_PLAN_CACHE = pytest.StashKey[tuple[str, "str | None"]]()  # the folder, and the variable's value before


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # not an xdist worker
        folder = tempfile.mkdtemp(prefix="plan-cache-")
        config.stash[_PLAN_CACHE] = (folder, os.environ.get(CACHE_ENV))
        os.environ[CACHE_ENV] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PLAN_CACHE in config.stash:
        folder, before = config.stash[_PLAN_CACHE]
        shutil.rmtree(folder, ignore_errors=True)
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


def minimal_values(**sections: Any) -> dict[str, Any]:
    """A small valid config: us-west-2, one p4d group. Override sections by their key name."""
    values: dict[str, Any] = {
        "aws:region": "us-west-2",
        f"{NS}:gpuAvailabilityZone": "auto",
        f"{NS}:gpuNodeGroups": [
            {"name": "p4d", "instanceType": "p4d.24xlarge", "minSize": 0, "desiredSize": 1, "maxSize": 2},
        ],
    }
    for key, value in sections.items():
        full = key if ":" in key else f"{NS}:{key}"
        if value is None:
            values.pop(full, None)
        else:
            values[full] = copy.deepcopy(value)
    return values


def dev_values() -> dict[str, Any]:
    _, values = read_stack_config("dev", ROOT)
    return values


def run_stack(values: dict[str, Any], stack: str = "test") -> offline.PlanResult:
    """Validate and run the real program offline; returns what it registered."""
    from infra import program

    stack_config.load(values, "gpu-training", stack)  # raise ConfigError first, like the CLI
    return offline.run(program.main, values, project="gpu-training", stack=stack)


# The plans of the repository's dev and prod stacks and one run of the dev plan command, made once
# per session (per xdist worker) and shared by every test that only reads them (a test that
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
            digest.update(str(path.relative_to(folder)).encode() + b"\0" + (path.read_bytes() if path.is_file() else b"/") + b"\0")
        return digest.hexdigest()

    _share("dev_plan_command", files)
    return PlanCommand(code, stdout.getvalue(), stderr.getvalue(), folder)


@pytest.fixture(scope="session", autouse=True)
def _shared_plans_stay_unchanged() -> Iterator[None]:
    yield
    changed = [name for name, (fingerprint, before) in _SHARED.items() if fingerprint() != before]
    assert not changed, (
        f"a test changed the shared {', '.join(changed)} (copy it before changing it); run the tests that use it one module at a time to find which"
    )


def clean_aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Nothing of the machine's AWS setup: no AWS_* variables, profile files or instance metadata."""
    import os

    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """moto with fake credentials (see clean_aws_env). AWS_DEFAULT_REGION points elsewhere: the
    region the code passes must win."""
    from moto import mock_aws

    clean_aws_env(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # no test needs moto's AMIs; loading them is slow
    with mock_aws():
        yield
