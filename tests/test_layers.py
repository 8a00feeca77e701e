"""The layers import one way, from low to high: facts -> jobs -> providers -> components -> stacks -> infra.

A module may import its own layer and the layers below it, never one above. ``components`` and
``jobs`` know nothing of stack config or boto3 (``providers``, the dynamic providers the components
use, are where boto3 talks to AWS at `pulumi up`); ``facts`` imports nothing of ours; and the program
``pulumi up`` runs never loads the offline engine or Pulumi's mocks.

Inside a layer, a package split along its concerns (``jobs/sagemaker``, ``stacks/queues``,
``infra/preflight``) is layered the same way: its modules in one order, each importing only those
before it. The SageMaker runtime is not a job kind: it imports what the kinds share, never a kind.
And the packages and modules of one layer never import each other in a circle (``stacks/queues``
sits below ``stacks/config``), not even from inside a function.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from tests.helpers import ROOT, program_modules

LAYERS = ["facts", "jobs", "providers", "components", "stacks", "infra"]
RANK = {name: i for i, name in enumerate(LAYERS)}
# Third-party packages a layer must not import (at any depth of its own modules).
FORBIDDEN_EXTERNAL = {
    "facts": {"pulumi", "pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "boto3", "botocore", "pydantic", "yaml"},
    "jobs": {"pulumi", "pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "boto3", "botocore", "yaml"},
    "providers": {"pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "yaml"},
    "components": {"boto3", "botocore"},
}


# Packages split along their concerns, from the bottom up: a module imports the ones before it, never
# one after it, nor the package itself (its __init__ re-exports them all). Imports under
# `if TYPE_CHECKING:` are for annotations only: they do not run, and do not count.
PACKAGES = {
    "jobs.sagemaker": ["limits", "options", "entry_point", "training_job", "sagemaker_checks", "portable"],
    "stacks.queues": ["resources", "cluster_queues", "admission", "plan", "queue_checks"],
    "infra.preflight": ["results", "placement", "quotas", "capacity", "eks"],
    "infra.invariants": ["view", "queue_rules", "rules"],
    "infra.api_checks": [
        *("java_regex", "shapes", "aws_table", "translate", "aws_model"),
        *("kube_rules", "kube_objects", "kube_crds", "kube_check"),
    ],
    "infra.offline": [
        *("region", "deployed", "fleet", "mocks", "monitor"),
        *("wire_memo", "inline_monitor", "unknowns", "engine"),
    ],
    "infra.diff": ["values", "replace_fields", "plans", "compare", "refusals", "impact", "markdown", "cli"],
}
# Packages whose modules import none after them even for annotations: no circle under
# `if TYPE_CHECKING:` either (a module that needs the shape of one above it says what it reads, as
# jobs/sagemaker/sagemaker_checks.py's SageMakerSpec does).
NO_ANNOTATION_CIRCLES = {"jobs.sagemaker", "infra.offline"}
# What the SageMaker runtime (the base of the kinds with two runtimes) may import of the jobs layer:
# the pieces every kind shares. The kinds import it, so it never imports a kind or the registry.
SAGEMAKER_RUNTIME_USES = {"jobs.base", "jobs.targets", "jobs.spec_checks", "jobs.pod"}


def imports_of(source: str) -> list[tuple[int, str]]:
    """(line, dotted module) for every import in ``source``, at any depth (function-level too)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            # `from facts import catalog` imports facts.catalog
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def runtime_imports_of(source: str) -> list[tuple[int, str]]:
    """``imports_of`` without the imports under ``if TYPE_CHECKING:``."""
    skipped = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(range(node.body[0].lineno, (node.body[-1].end_lineno or node.body[-1].lineno) + 1))
    return [(line, module) for line, module in imports_of(source) if line not in skipped]


def violations(layer: str, source: str, where: str) -> list[str]:
    found = []
    for line, module in imports_of(source):
        top = module.split(".")[0]
        if top in RANK and RANK[top] > RANK[layer]:
            found.append(f"{where}:{line} imports {module} ({top} is above {layer})")
        if top in FORBIDDEN_EXTERNAL.get(layer, set()):
            found.append(f"{where}:{line} imports {module} ({layer} must not use {top})")
    return found


def layer_modules() -> list[tuple[str, Path]]:
    return [(layer, path) for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))]


def test_every_layer_exists_and_has_modules():
    for layer in LAYERS:
        assert (ROOT / layer / "__init__.py").exists(), layer
    assert len(layer_modules()) > 20


@pytest.mark.parametrize(
    "layer,path", layer_modules(), ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else v
)
def test_imports_point_down(layer: str, path: Path):
    assert violations(layer, path.read_text(), str(path.relative_to(ROOT))) == []


def test_the_checker_catches_upward_and_forbidden_imports():
    source = (
        "import pulumi\nfrom stacks.config import load\n\ndef f():\n    from infra import offline\n    import boto3\n"
    )
    found = violations("components", source, "x.py")
    assert [f.split(" imports ")[1].split(" ")[0] for f in found] == [
        "stacks.config",
        "stacks.config.load",
        "infra",
        "infra.offline",
        "boto3",
    ]
    assert violations("facts", "import pydantic\n", "y.py") and violations("jobs", "import pulumi_aws as aws\n", "z.py")
    assert violations("infra", "from stacks import environment\nfrom facts import catalog\n", "w.py") == []


def test_the_pulumi_program_does_not_load_the_offline_engine():
    """What `pulumi up` runs (__main__.py -> infra.program) loads neither the offline engine nor the
    tooling around it (plan, preflight, moto), nor the stack-file reader (the engine hands the program
    its config; ruamel.yaml is in requirements-dev.txt only). (The Pulumi SDK itself imports its mocks
    module on `import pulumi`; what matters is that our mock engine is never set up.)"""
    tooling = {"infra.offline", "infra.plan", "infra.preflight", "infra.aws_catalog", "infra.diff"}
    others = {"moto", "boto3", "stacks.config.stackfile"}
    bad = sorted(
        m for m in program_modules() if ".".join(m.split(".")[:2]) in tooling or m in others or m.startswith("ruamel")
    )
    assert bad == []
    assert "infra.program" in program_modules()


def package_violations(package: str, module: str, source: str) -> list[str]:
    """Imports of ``package.module`` that point up or sideways inside its package (see PACKAGES;
    annotation-only imports count in the packages of NO_ANNOTATION_CIRCLES)."""
    order = PACKAGES[package]
    found: list[str] = []
    for line, name in (imports_of if package in NO_ANNOTATION_CIRCLES else runtime_imports_of)(source):
        if any(f"{module}:{line} " in f for f in found):
            continue  # `from a.b import c` is a.b and a.b.c: one import
        if name == package or name.startswith(package + "."):
            inside = name[len(package) + 1 :].split(".")[0]
            if inside not in order:
                found.append(f"{package}.{module}:{line} imports {name} (the package itself)")
            elif order.index(inside) >= order.index(module):
                found.append(f"{package}.{module}:{line} imports {name} ({inside} is not below {module})")
        elif (
            package == "jobs.sagemaker"
            and name.startswith("jobs.")
            and ".".join(name.split(".")[:2]) not in SAGEMAKER_RUNTIME_USES
        ):
            found.append(
                f"{package}.{module}:{line} imports {name} (the runtime uses only "
                f"{', '.join(sorted(SAGEMAKER_RUNTIME_USES))})"
            )
    return found


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_split_packages_import_from_the_bottom_up(package: str):
    folder = ROOT.joinpath(*package.split("."))
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert modules == set(PACKAGES[package]), f"list every module of {package} in PACKAGES, in its place"
    found = [v for m in PACKAGES[package] for v in package_violations(package, m, (folder / f"{m}.py").read_text())]
    assert found == []


def test_the_package_checker_catches_upward_imports_and_kinds():
    up = (
        "from typing import TYPE_CHECKING\nfrom stacks.queues.plan import QueuePlan\n"
        "if TYPE_CHECKING:\n    from stacks.queues.queue_checks import x\n"
    )
    assert package_violations("stacks.queues", "admission", up) == [
        "stacks.queues.admission:2 imports stacks.queues.plan (plan is not below admission)"
    ]
    assert package_violations("stacks.queues", "queue_checks", up) == []
    assert package_violations(
        "jobs.sagemaker",
        "sagemaker_checks",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobs.sagemaker.portable import PortableJob\n",
    )
    assert (
        package_violations(
            "infra.preflight",
            "eks",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from infra.preflight import _Context\n",
        )
        == []
    )
    assert package_violations("infra.preflight", "eks", "from infra.preflight import _Context\n")
    assert package_violations("jobs.sagemaker", "portable", "from jobs.mpi import MpiBase\n")
    assert (
        package_violations("jobs.sagemaker", "portable", "from jobs import spec_checks\nfrom jobs.base import GpuJob\n")
        == []
    )


def _imported_files(source: str, where: Path) -> list[tuple[int, Path]]:
    """(line, file) for every module of the repository ``source`` (the file ``where``) imports, at any
    depth, relative imports too: ``import a.b``, ``from a.b import c`` (a.b, and a/b/c.py if c is a
    module) and, as pytest's rootdir imports allow, a bare ``test_x`` or ``conftest`` next to ``where``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [(node.lineno, alias.name.split(".")) for alias in node.names]
            bases = [ROOT, where.parent]
        elif isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".") if node.module else []
            if node.level:
                base = where.parent
                for _ in range(node.level - 1):
                    base = base.parent
                bases = [base]
            else:
                bases = [ROOT, where.parent]
            names = [(node.lineno, module)] + [(node.lineno, [*module, alias.name]) for alias in node.names]
        else:
            continue
        for line, parts in names:
            for base in bases:
                path = base.joinpath(*parts) if parts else base
                for candidate in (path.with_suffix(".py"), path / "__init__.py"):
                    if parts and candidate.is_file():
                        found.append((line, candidate))
    return found


def imports_of_test_modules(path: Path, source: str) -> list[str]:
    """The imports of ``source`` (the file ``path``, under tests/) of a test module or a conftest."""
    return [
        f"{path.relative_to(ROOT)}:{line} imports {file.relative_to(ROOT)}"
        for line, file in _imported_files(source, path)
        if file.name.startswith("test_") or file.name == "conftest.py"
    ]


def test_test_modules_import_no_other_test_module():
    """What test modules share lives in tests/helpers.py or a tests/**/<topic>_helpers-like module that is
    not a test module (fixtures in conftest.py): pytest imports a test module under its own name, so one
    imported again from another module runs twice, under two names. Every module under tests/, the
    integration tests' too."""
    paths = sorted((ROOT / "tests").rglob("*.py"))
    assert ROOT / "tests" / "integration" / "test_etcd_sizes.py" in paths
    found = [v for path in paths for v in imports_of_test_modules(path, path.read_text())]
    assert found == []


def test_the_test_module_checker_catches_imports_of_test_modules():
    where = ROOT / "tests" / "integration" / "test_etcd_sizes.py"
    for source in (
        "from tests.integration.test_etcd_members import JOIN_TIME\n",
        "def f():\n    import tests.integration.test_elastic_rendezvous\n",
        "from tests.integration import test_elastic_rendezvous\n",
        "from .test_etcd_members import plan_etcd\n",
        "from . import test_etcd_members\n",
        "import test_etcd_members\n",
        "from tests.test_layers import imports_of\n",
        "from tests.conftest import dev_values\n",
        "from ..conftest import dev_values\n",
    ):
        assert len(imports_of_test_modules(where, source)) == 1, source
    fine = (
        "from tests.integration.etcd_helpers import heal\nfrom tests.helpers import ROOT\n"
        "from tests.integration.etcd_local import LocalEtcd\nimport pytest\nfrom .elastic_helpers import STACK\n"
    )
    assert imports_of_test_modules(where, fine) == []


def unit_imports(layer: str) -> dict[str, dict[str, list[str]]]:
    """The imports between the packages and top-level modules ("units") of a layer, at any depth
    (function-level too; not those under ``if TYPE_CHECKING:``): unit -> unit it imports -> where.
    The layer's own ``__init__`` only re-exports, and is no unit."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted((ROOT / layer).rglob("*.py")):
        rel = path.relative_to(ROOT / layer)
        unit = rel.parts[0].removesuffix(".py")
        if unit == "__init__":
            continue
        for line, module in runtime_imports_of(path.read_text()):
            parts = module.split(".")
            if parts[0] == layer and len(parts) > 1 and parts[1] != unit:
                graph.setdefault(unit, {}).setdefault(parts[1], []).append(f"{layer}/{rel}:{line}")
    return graph


def _reach(graph: dict[str, dict[str, list[str]]], unit: str) -> set[str]:
    """Every unit ``unit`` imports, directly or through others."""
    reach, todo = set(), [unit]
    while todo:
        for nxt in graph.get(todo.pop(), {}):
            if nxt not in reach:
                reach.add(nxt)
                todo.append(nxt)
    return reach


def circles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The circles of ``graph``: each set of units that reach one another (a strongly connected
    component of more than one unit), sorted."""
    found: list[list[str]] = []
    for start in sorted(graph):
        circle = sorted(u for u in _reach(graph, start) if start in _reach(graph, u))
        if circle and circle not in found:
            found.append(circle)
    return found


@pytest.mark.parametrize("layer", LAYERS)
def test_the_packages_of_a_layer_import_one_way(layer: str):
    graph = unit_imports(layer)
    found = circles(graph)
    where = [
        f"{a} -> {b}: {', '.join(dict.fromkeys(graph[a][b]))}"
        for circle in found
        for a in circle
        for b in graph.get(a, {})
        if b in circle
    ]
    assert found == [], "\n".join(where)


def test_the_circle_checker_finds_a_circle_through_a_function_level_import():
    graph = {
        "config": {"queues": ["stacks/config/cross_checks.py:92"]},
        "queues": {"config": ["stacks/queues/plan.py:73"]},
        "cost": {"config": ["x"]},
    }
    assert circles(graph) == [["config", "queues"]]
    assert circles({"a": {"b": ["x"]}, "b": {"c": ["y"]}, "c": {"a": ["z"]}, "d": {"a": ["w"]}}) == [["a", "b", "c"]]
    assert circles({"config": {"queues": ["x"]}, "cost": {"config": ["y"]}}) == []
    source = "def plan_context():\n    from stacks.config.job_entries import job_targets\n"
    assert runtime_imports_of(source) == [
        (2, "stacks.config.job_entries"),
        (2, "stacks.config.job_entries.job_targets"),
    ]


# No product module (everything outside tests/ and the hidden folders: .venv, .tools, .git, caches) is
# longer than this: a longer one is split along a seam of its concerns (issue 25).
MAX_MODULE_LINES = 450


def product_modules(root: Path = ROOT) -> list[Path]:
    """Every .py file under ``root`` but those under tests/, manifests/ (vendored upstream files, verbatim) and hidden
    folders (symlinks not followed)."""
    found = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and not (here == root and d in ("tests", "manifests"))
        )
        found += [here / f for f in files if f.endswith(".py")]
    return sorted(found)


def long_modules(paths: list[Path], root: Path = ROOT) -> list[str]:
    """``path: N lines`` for every module of ``paths`` over MAX_MODULE_LINES lines."""
    counts = [(path, len(path.read_text().splitlines())) for path in paths]
    return [
        f"{path.relative_to(root)}: {n} lines (at most {MAX_MODULE_LINES})"
        for path, n in counts
        if n > MAX_MODULE_LINES
    ]


def test_no_product_module_is_over_450_lines():
    modules = product_modules()
    assert ROOT / "facts" / "catalog.py" in modules and ROOT / "__main__.py" in modules
    assert not any(p.is_relative_to(ROOT / "tests") or p.is_relative_to(ROOT / ".venv") for p in modules)
    assert long_modules(modules) == []


def test_the_length_checker_catches_a_long_module(tmp_path: Path):
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "facts" / "fine.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_long.py").write_text("x = 1\n" * 1000)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "long.py").write_text("x = 1\n" * 1000)
    modules = product_modules(tmp_path)
    assert modules == [tmp_path / "facts" / "fine.py", tmp_path / "facts" / "long.py"]
    assert long_modules(modules, tmp_path) == [f"facts{os.sep}long.py: {MAX_MODULE_LINES + 1} lines (at most 450)"]
