"""Every argument and config key is described where it is declared.

- Components: every field of every ``*Args`` dataclass in ``components/*.py`` carries a comment,
  trailing on its declaration line or on the line directly above it. Read from the source (ast and
  tokenize), nothing imported.
- Config and job specs: every field of the stack config models (``ConfigModel`` subclasses in
  ``stacks/config/models.py`` and ``stack_config.py``) and of the job spec models has a one-line ``description``.
"""

from __future__ import annotations

import ast
import inspect
import io
import textwrap
import tokenize
from pathlib import Path

import pytest
from pydantic import BaseModel

from jobs.base import SecretKeyRef, VolumeMount
from jobs.registry import JOB_KINDS
from stacks.config import models as config_models
from stacks.config import stack_config
from tests.helpers import ROOT

COMPONENTS = ROOT / "components"
COMPONENT_FILES = sorted(p for p in COMPONENTS.glob("*.py") if p.name != "__init__.py")
# Comments that steer tools rather than describe anything.
PRAGMAS = ("noqa", "type:", "pragma", "fmt:", "isort:", "pyright:")


# ---------------------------------------------------------------------------------------------
# Component arguments: a comment on every dataclass field
# ---------------------------------------------------------------------------------------------


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id == "dataclass"
    return isinstance(target, ast.Attribute) and target.attr == "dataclass"


def _is_classvar(annotation: ast.expr) -> bool:
    """``ClassVar[...]`` (or a string of it) is not a dataclass field."""
    text = (
        annotation.value
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str)
        else ast.unparse(annotation)
    )
    return text.split("[")[0].split(".")[-1] == "ClassVar"


def _describing_comments(source: str) -> dict[int, str]:
    """Line number -> text of the comment on that line, for comments that say something."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            if text and not text.startswith(PRAGMAS):
                found[tok.start[0]] = text
    return found


def args_fields(source: str) -> list[tuple[str, str]]:
    """(class, field) of every field of every dataclass whose name ends with ``Args``."""
    fields = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.ClassDef)
            and node.name.endswith("Args")
            and any(_is_dataclass_decorator(d) for d in node.decorator_list)
        ):
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and not _is_classvar(stmt.annotation)
                ):
                    fields.append((node.name, stmt.target.id))
    return fields


def undescribed_fields(source: str, module: str) -> list[str]:
    """``module.Class.field`` for every ``*Args`` dataclass field with neither a comment on its
    declaration (any of its lines, when it spans several) nor a comment line directly above it."""
    lines = source.splitlines()
    comments = _describing_comments(source)
    missing = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.ClassDef)
            and node.name.endswith("Args")
            and any(_is_dataclass_decorator(d) for d in node.decorator_list)
        ):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)) or _is_classvar(
                stmt.annotation
            ):
                continue
            end = stmt.end_lineno or stmt.lineno
            trailing = any(n in comments for n in range(stmt.lineno, end + 1))
            above = stmt.lineno - 1
            leading = above >= 1 and lines[above - 1].lstrip().startswith("#") and above in comments
            if not (trailing or leading):
                missing.append(f"{module}.{node.name}.{stmt.target.id}")
    return missing


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@pytest.mark.parametrize("path", COMPONENT_FILES, ids=lambda p: p.name)
def test_component_args_fields_are_described(path: Path) -> None:
    missing = undescribed_fields(path.read_text(), _module_name(path))
    assert not missing, (
        "these component arguments need a one-line comment where they are declared (trailing, or on the line above):\n"
        + "\n".join(f"  {m}" for m in missing)
    )


def test_component_args_are_found() -> None:
    """The checker sees the dataclasses it is meant to check (a parse that finds nothing passes vacuously)."""
    found = {cls for path in COMPONENT_FILES for cls, _ in args_fields(path.read_text())}
    expected = {"ClusterArgs", "NodeGroupArgs", "NetworkArgs", "EfsStoreArgs", "FsxStoreArgs", "OperatorArgs"}
    assert expected <= found, f"not found: {sorted(expected - found)}"


def test_checker_reports_undescribed_fields() -> None:
    source = textwrap.dedent(
        '''
        from dataclasses import dataclass, field
        from typing import ClassVar


        @dataclass
        class SampleArgs:
            """A docstring is not a field description."""

            described: str  # a trailing comment
            # a comment line directly above
            described_above: int = 1
            bare: str = "x"
            pragma_only: int = 2  # noqa: E501
            empty_comment: int = 3  #
            # a comment above a blank line does not count

            after_blank: int = 4
            multi_line: dict[str, str] = field(
                default_factory=dict
            )  # a comment on the declaration's last line
            KIND: ClassVar[str] = "not a field"


        @dataclass(frozen=True)
        class OtherArgs:
            undescribed: str


        class NotADataclassArgs:
            ignored: str


        @dataclass
        class Settings:
            ignored: str
        '''
    )
    assert undescribed_fields(source, "sample") == [
        "sample.SampleArgs.bare",
        "sample.SampleArgs.pragma_only",
        "sample.SampleArgs.empty_comment",
        "sample.SampleArgs.after_blank",
        "sample.OtherArgs.undescribed",
    ]


# ---------------------------------------------------------------------------------------------
# Config and job spec models: a one-line description on every field
# ---------------------------------------------------------------------------------------------


def _config_models() -> list[type[BaseModel]]:
    return [
        cls
        for module in (config_models, stack_config)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, config_models.ConfigModel) and cls.__module__ == module.__name__ and cls.model_fields
    ]


def _job_models() -> list[type[BaseModel]]:
    return [*JOB_KINDS.values(), SecretKeyRef, VolumeMount]


def badly_described(models: list[type[BaseModel]]) -> list[str]:
    """``module.Model.field: problem`` for every field without a single-line description."""
    problems = []
    for model in models:
        for name, info in model.model_fields.items():
            where = f"{model.__module__}.{model.__qualname__}.{name}"
            description = info.description
            if not description or not description.strip():
                problems.append(f"{where}: no description")
            elif "\n" in description or "\r" in description:
                problems.append(f"{where}: description spans several lines")
    return problems


def test_config_models_are_found() -> None:
    names = {m.__name__ for m in _config_models()}
    assert {"StackConfig", "NetworkConfig", "ClusterConfig", "GpuNodeGroupConfig", "FsxConfig"} <= names, sorted(names)


@pytest.mark.parametrize(
    ("group", "models"), [("config", _config_models()), ("jobs", _job_models())], ids=["config", "jobs"]
)
def test_model_fields_have_one_line_descriptions(group: str, models: list[type[BaseModel]]) -> None:
    problems = badly_described(models)
    assert not problems, f"{group} model fields need a one-line Field(description=...):\n" + "\n".join(
        f"  {p}" for p in problems
    )


def test_description_check_reports_problems() -> None:
    from pydantic import Field

    class Sample(BaseModel):
        good: int = Field(1, description="a description")
        missing: int = 2
        blank: int = Field(3, description="  ")
        two_lines: int = Field(4, description="first\nsecond")

    assert [p.split(".")[-1] for p in badly_described([Sample])] == [
        "missing: no description",
        "blank: no description",
        "two_lines: description spans several lines",
    ]
