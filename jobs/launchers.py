"""One rule for the launcher options the stack derives: ``mpirun``'s process count, hosts and
processes per node (``mpirunArgs`` of the MPI kinds, on EKS and on SageMaker) and ``torchrun``'s
processes per node, nodes, rendezvous and restarts (``command``/``args`` of ``pytorch-elastic`` on
EKS; on SageMaker no torchrun option is taken at all, ``PortableJob.entry_point_or_problem``).

Written by hand, such an option wins over the derived one (mpirun reads its command line after the
stack's ``-np``; torchrun's command line wins over the operator's PET_* variables), and a value that
differs leaves GPUs idle or ranks without a GPU. So it is refused, in any spelling (``-np``, ``--n``,
``-c``; ``--nproc-per-node``, ``--nproc_per_node``, an unambiguous prefix), as ``--opt=value`` or
``--opt value``, naming the key, the option as written and the value the stack derives. A value
equal to the derived one is refused too: written there, it would not follow the next change of the
job's nodes or of its node group's type.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from facts.launchers import (
    ENV_FLAGS,
    ENV_NAMES,
    ENV_OPTIONS_WITH_VALUE,
    MPIRUN_FLAGS,
    MPIRUN_MAP_BY,
    MPIRUN_NAMES,
    MPIRUN_OPTIONS,
    MPIRUN_PER_SOCKET,
    MPIRUN_PPR,
    PYTHON_FLAG_LETTERS,
    PYTHON_OPTIONS_WITH_VALUE,
    SHELLS,
    TORCHRUN_DERIVED,
    TORCHRUN_FLAGS,
    TORCHRUN_MODULES,
    TORCHRUN_OPTIONS,
)
from facts.problems import Problem
from facts.problems import fmt as fmt

_PYTHON = re.compile(r"python(3(\.\d+)?)?")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_MPIRUN = {spelling: what for what, spellings in MPIRUN_OPTIONS.items() for spelling in spellings}
_TORCHRUN = {spelling: dest for dest, spellings in TORCHRUN_OPTIONS.items() for spelling in spellings}
# How a message names each derived option.
MPIRUN_LABELS = {
    "processes": "process count (-np)",
    "hosts": "hosts (--host, --hostfile)",
    "per node": "processes per node (--npernode)",
}


@dataclass(frozen=True)
class Derived:
    """What the stack gives a launcher for one option, and where that comes from."""

    value: str
    source: str
    # What a different value written by hand would do, given that value (None: nothing to add).
    consequence: Callable[[str], str | None] | None = None


@dataclass(frozen=True)
class Written:
    """A launcher option found in a list of arguments."""

    at: int  # the index of its (first) argument
    text: str  # as written, with its value when that is the next argument
    option: str  # what it sets: an MPIRUN_OPTIONS key or a TORCHRUN_OPTIONS destination
    value: str | None


def mpirun_options(args: Sequence[str]) -> list[Written]:
    """The mpirun options of ``args`` (``mpirunArgs``: options only) that set what MPIRUN_OPTIONS lists,
    and a mapping of N processes per node or other object (``--map-by ppr:N:node``, ``-npersocket N``):
    per node too."""
    found = []
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in MPIRUN_MAP_BY:
            found += _ppr_mapping(args, i, value if eq else None)
            continue
        if name in MPIRUN_PER_SOCKET:  # --map-by ppr:N:socket in its older spelling
            n = value if eq else (args[i + 1] if i + 1 < len(args) else None)
            found.append(Written(i, arg if eq or n is None else f"{arg} {n}", "per node", f"ppr:{n}:socket"))
            continue
        what = _MPIRUN.get(name)
        if what is None:
            continue
        if not eq and name not in MPIRUN_FLAGS and i + 1 < len(args):
            found.append(Written(i, f"{arg} {args[i + 1]}", what, args[i + 1]))
        else:
            found.append(Written(i, arg, what, value if eq else None))
    return found


def _ppr_mapping(args: Sequence[str], i: int, joined: str | None) -> list[Written]:
    """``--map-by ppr:N:OBJECT`` at ``args[i]`` (the policy after '=' or as the next argument) as a
    per-node option: its value N where the object is a node, else the whole policy."""
    policy = joined if joined is not None else (args[i + 1] if i + 1 < len(args) else "")
    parts = policy.split(":")
    if parts[0].lower() != MPIRUN_PPR:
        return []
    text = args[i] if joined is not None else f"{args[i]} {policy}"
    per_node = len(parts) >= 3 and parts[2].lower() == "node"
    return [Written(i, text, "per node", parts[1] if per_node and len(parts) > 1 else policy)]


def _python_module_at(line: Sequence[str]) -> tuple[str, int] | None:
    """``(module, where its arguments start)`` when ``line`` is ``python [options] -m module ...``
    (CPython's options before -m: facts.launchers.PYTHON_*), else None."""
    if not line or not _PYTHON.fullmatch(posixpath.basename(line[0])):
        return None
    i = 1
    while i < len(line):
        arg = line[i]
        if arg == "-m":
            return (line[i + 1], i + 2) if i + 1 < len(line) else None
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:], i + 1
        if arg in PYTHON_OPTIONS_WITH_VALUE:
            i += 2
        elif _python_option(arg):
            i += 1
        else:
            return None
    return None


def _python_option(arg: str) -> bool:
    """A CPython option in one argument: a value joined to its option (``-Xfaulthandler``), or flags (``-uB``)."""
    if arg[:2] in PYTHON_OPTIONS_WITH_VALUE or arg.startswith("--check-hash-based-pycs="):
        return True
    return arg.startswith("-") and not arg.startswith("--") and len(arg) > 1 and set(arg[1:]) <= PYTHON_FLAG_LETTERS


def env_prefix(line: Sequence[str]) -> int:
    """How many arguments of ``line`` are ``env [options] [NAME=VALUE...]`` in front of the command it
    runs (facts.launchers.ENV_*): 0 when the line does not start with env."""
    if not line or posixpath.basename(line[0]) not in ENV_NAMES:
        return 0
    i = 1
    while i < len(line):
        arg = line[i]
        if arg in ENV_OPTIONS_WITH_VALUE:
            i += 2
        elif arg in ENV_FLAGS or _ASSIGNMENT.match(arg) or _env_option_with_joined_value(arg):
            i += 1
        else:
            return i
    return i


def _env_option_with_joined_value(arg: str) -> bool:
    """``--unset=NAME``, ``--chdir=DIR``, ``-uNAME``, ``-CDIR``."""
    return arg.split("=", 1)[0] in ENV_OPTIONS_WITH_VALUE[2:] or (len(arg) > 2 and arg[:2] in ENV_OPTIONS_WITH_VALUE)


def torchrun_start(line: Sequence[str]) -> int | None:
    """Where torchrun's own options start in ``line`` (command + args): after ``torchrun`` or
    ``python [-u -O -X ...] -m torch.distributed.run`` (or ``.launch``), also behind ``env [NAME=VALUE...]``;
    None when the line starts no torchrun."""
    skip = env_prefix(line)
    line = line[skip:]
    if line and posixpath.basename(line[0]) == "torchrun":
        return skip + 1
    module = _python_module_at(line)
    if module is not None and module[0] in TORCHRUN_MODULES:
        return skip + module[1]
    return None


def shell_script_at(line: Sequence[str]) -> int | None:
    """Where the script of ``sh -c SCRIPT`` (bash, dash, ...; ``-c`` also among other flags, ``-lc``) is
    in ``line``, or None when the line runs no shell script."""
    if not line or posixpath.basename(line[0]) not in SHELLS:
        return None
    for i in range(1, len(line)):
        arg = line[i]
        if not arg.startswith("-") or arg.startswith("--") or arg == "-":
            return None
        if "c" in arg[1:]:
            return i + 1 if i + 1 < len(line) else None
    return None


def script_commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script (split on ; & | and newlines), each without the variable
    assignments and ``exec`` in front of it (``env`` is left to ``env_prefix``); none where the script
    is not shell words (an open quote)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|()\n")
    lexer.whitespace = " \t"
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return []
    commands: list[list[str]] = [[]]
    for word in words:
        if word and set(word) <= set(";&|()\n"):
            commands.append([])
        elif commands[-1] or not (_ASSIGNMENT.match(word) or word == "exec"):
            commands[-1].append(word)
    return [c for c in commands if c]


@dataclass(frozen=True)
class Launch:
    """A launcher started by a job's command line: by the line itself (``script_at`` None), or by a
    command of the shell script at ``script_at`` (``bash -c "torchrun ..."``)."""

    script_at: int | None
    line: list[str]
    start: int


def launches(line: Sequence[str], start_of: Callable[[Sequence[str]], int | None]) -> list[Launch]:
    """Every launcher ``start_of`` finds in ``line``: the line itself, or the commands of its shell script."""
    start = start_of(line)
    if start is not None:
        return [Launch(None, list(line), start)]
    at = shell_script_at(line)
    if at is None:
        return []
    found = []
    for command in script_commands(line[at]):
        inner = start_of(command)
        if inner is not None:
            found.append(Launch(at, command, inner))
    return found


def mpirun_start(line: Sequence[str]) -> int | None:
    """Where mpirun's options start when ``line`` starts mpirun (mpiexec, orterun; by any path; also
    behind ``env [NAME=VALUE...]``), else None."""
    skip = env_prefix(line)
    return skip + 1 if len(line) > skip and posixpath.basename(line[skip]) in MPIRUN_NAMES else None


def _torchrun_dest(name: str) -> str | None:
    """The option ``name`` sets, as argparse reads it: a spelling, or a prefix of one option's long spellings only."""
    if name in _TORCHRUN:
        return _TORCHRUN[name]
    if not name.startswith("--") or len(name) < 3:
        return None
    dests = {dest for spelling, dest in _TORCHRUN.items() if spelling.startswith(name)}
    return dests.pop() if len(dests) == 1 else None


def _torchrun_walk(line: Sequence[str], start: int) -> tuple[list[Written], int]:
    """Every torchrun option in ``line`` from ``start``, and where the training script (its first
    positional argument) is: what follows the script is the script's own."""
    found = []
    i = start
    while i < len(line) and line[i].startswith("-") and line[i] != "--":
        name, eq, value = line[i].partition("=")
        dest = _torchrun_dest(name)
        takes_value = dest is not None and dest not in TORCHRUN_FLAGS and not eq
        if dest is not None:
            if takes_value and i + 1 < len(line):
                found.append(Written(i, f"{line[i]} {line[i + 1]}", dest, line[i + 1]))
            else:
                found.append(Written(i, line[i], dest, value if eq else None))
        i += 2 if takes_value else 1
    if i < len(line) and line[i] == "--":
        i += 1
    return found, i


def torchrun_options(line: Sequence[str], start: int) -> list[Written]:
    """torchrun's options in ``line`` from ``start`` up to the training script that the stack derives."""
    return [w for w in _torchrun_walk(line, start)[0] if w.option in TORCHRUN_DERIVED]


def torchrun_script(line: Sequence[str], start: int) -> tuple[int, list[Written]]:
    """Where the training script is in ``line`` and every torchrun option before it."""
    found, at = _torchrun_walk(line, start)
    return at, found


def derived_option_problems(
    found: Sequence[Written],
    derived: Mapping[str, Derived],
    launcher: str,
    label: Callable[[str], str],
    key: Callable[[int], str],
    problems: list[Problem],
) -> None:
    """One problem per option of ``found`` that the stack derives (``derived``), keyed by ``key(at)``."""
    for w in found:
        d = derived.get(w.option)
        if d is None:
            continue
        given = f" to {w.value}" if w.value is not None else ""
        extra = d.consequence(w.value) if d.consequence is not None and w.value is not None else None
        problems.append(
            Problem(
                key(w.at),
                f"{fmt(w.text)} sets {launcher}'s {label(w.option)}{given}, which the stack derives: {d.value} "
                f"({d.source})"
                + (f"; {extra}" if extra else "")
                + "; remove it. A value equal to the derived one is refused too: written here it would not follow the "
                "next change of the job's nodes or of its node group",
            )
        )


def torchrun_label(dest: str) -> str:
    return TORCHRUN_OPTIONS[dest][0]


def torchrun_env() -> dict[str, str]:
    """The PET_* variables of the torchrun options the stack derives, each with why a job may not set it
    in ``env``: torchrun takes PET_<OPTION> as the option's default (torch/distributed/argparse_util.py,
    ``env``), and the training operator sets these from the job's spec (facts.launchers.TORCHRUN_DERIVED;
    PET_STANDALONE, which it does not set, would rendezvous each node alone)."""
    return {
        f"PET_{dest.upper()}": f"sets torchrun's {torchrun_label(dest)}, which the stack derives (the training "
        "operator sets the PET_* variables from the job's spec: minNodes/maxNodes, rendezvous, maxRestarts and the "
        "node group's GPUs)"
        for dest in TORCHRUN_DERIVED
    }


def ranks_without_gpu(gpus: int) -> Callable[[str], str | None]:
    """What a processes-per-node value other than ``gpus`` (the node's GPUs, one rank each) does."""

    def consequence(value: str) -> str | None:
        if not value.isdigit() or int(value) == gpus:
            return None
        n = int(value)
        if n > gpus:
            return (
                f"with {n} processes on a node of {gpus} GPU{'s' if gpus > 1 else ''}, {n - gpus} of {n} ranks would "
                "get no GPU"
            )
        return f"with {n} processes on a node of {gpus} GPUs, {gpus - n} of the GPUs would idle"

    return consequence
