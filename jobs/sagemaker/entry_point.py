"""A job's ``command`` + ``args`` as SageMaker's framework containers see them: the launcher (what
runs the script: ``python`` for ``mpi``, ``torchrun`` for ``pytorch-elastic``), the entry script
(``sagemaker_program``, relative to the source directory) and its ``--name value`` arguments as
hyperparameters, which the containers pass back as the same arguments; or why they cannot be.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from jobs.sagemaker.limits import (
    MAX_HYPERPARAMETER_KEY,
    MAX_HYPERPARAMETER_VALUE,
    MAX_HYPERPARAMETERS,
    STACK_HYPERPARAMETERS,
)

_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
RESERVED_HYPERPARAMETER_PREFIX = "sagemaker_"
# Hyperparameters SageMaker's training toolkit keeps for itself without the prefix (params.py's
# SAGEMAKER_HYPERPARAMETERS): the script would never see them.
RESERVED_HYPERPARAMETERS = ("default_user_module_name", "_tuning_objective_metric")
# What argparse takes as a value although it starts with '-' (its negative-number pattern): any
# other value starting with '-' reads as an option once the toolkit passes it as --name value.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class EntryPoint:
    """``command`` + ``args`` as SageMaker's framework containers see it."""

    launcher: tuple[str, ...]  # what runs the script (python, torchrun...)
    script: str  # the entry script as the EKS job names it
    hyperparameters: dict[str, str]  # the script's --name value arguments


def _launcher_matches(launcher: tuple[str, ...], allowed: tuple[str, ...]) -> bool:
    if len(launcher) != len(allowed):
        return False
    for part, want in zip(launcher, allowed, strict=True):
        base = posixpath.basename(part)
        if want == "python":
            if not _PYTHON.match(base):
                return False
        elif part != want and base != want:
            return False
    return True


def _inside(path: str, directory: str) -> bool:
    d = posixpath.normpath(directory)
    return posixpath.normpath(path).startswith(d.rstrip("/") + "/")


def _program(script: str, source_dir: str) -> str:
    """The entry script relative to the source directory (its file name for an S3 tarball)."""
    if script.startswith("/") and not source_dir.startswith("s3://") and _inside(script, source_dir):
        return posixpath.relpath(posixpath.normpath(script), posixpath.normpath(source_dir))
    if script.startswith("/"):
        return posixpath.basename(script)
    return posixpath.normpath(script)  # ./train.py -> train.py


def args_to_hyperparameters(args: Sequence[str]) -> dict[str, str] | str:
    """The script's ``--name value`` / ``--name=value`` arguments as hyperparameters (SageMaker's
    containers pass each back as ``--name value``), or why they cannot be."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            return (
                f"{arg!r} is not allowed with runtime 'sagemaker': SageMaker passes script arguments as --name value "
                "hyperparameters, so every argument after the entry script must be one"
            )
        name, eq, value = arg[2:].partition("=")
        if not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                return (
                    f"{arg!r} has no value: SageMaker passes script arguments as --name "
                    f"value hyperparameters; give it one (e.g. {arg}=true)"
                )
            value = args[i + 1]
            i += 2
        else:
            i += 1
        if len(name) < 2:
            # SageMaker's containers pass a one-letter hyperparameter back as -x, not --x.
            return (
                f"{arg!r} is not allowed with runtime 'sagemaker': hyperparameter names need two "
                f"characters or more (SageMaker passes a one-letter name back as -{name})"
            )
        if name.startswith(RESERVED_HYPERPARAMETER_PREFIX) or name in RESERVED_HYPERPARAMETERS:
            return (
                f"{arg!r} is not allowed: hyperparameters starting with {RESERVED_HYPERPARAMETER_PREFIX!r}, "
                f"{' and '.join(RESERVED_HYPERPARAMETERS)} are SageMaker's own"
            )
        if value.startswith("-") and not _NEGATIVE_NUMBER.match(value):
            return (
                f"--{name} {value!r}: a value starting with '-' (other than a negative "
                "number) is not allowed with runtime 'sagemaker': "
                "SageMaker passes it back as --name value, and the script's parser would read it as an option"
            )
        if name in out:
            return f"--{name} is given twice; a hyperparameter has one value"
        if len(name) > MAX_HYPERPARAMETER_KEY or len(json.dumps(value)) > MAX_HYPERPARAMETER_VALUE:
            return (
                f"--{name} is too long for a hyperparameter (names up to "
                f"{MAX_HYPERPARAMETER_KEY} characters, values up to {MAX_HYPERPARAMETER_VALUE})"
            )
        out[name] = value
    if len(out) > MAX_HYPERPARAMETERS - STACK_HYPERPARAMETERS:
        return f"{len(out)} arguments are more than SageMaker's {MAX_HYPERPARAMETERS} hyperparameters leave room for"
    return out
