"""torchrun's own argument parser against the stack's table of its options (facts/launchers.py) and
the rule that finds the options the training operator derives (jobs/launchers.py): the same options,
spellings and flags, and on every sample command line the same options found as torchrun reads."""

from __future__ import annotations

import os

import pytest

from facts.launchers import TORCHRUN_DERIVED, TORCHRUN_FLAGS, TORCHRUN_OPTIONS
from jobs import launchers


@pytest.fixture(scope="module")
def parser():
    from torch.distributed.run import get_args_parser

    assert not [k for k in os.environ if k.startswith("PET_")], "PET_* variables would change torchrun's defaults"
    return get_args_parser()


def test_the_table_is_torchruns(parser):
    options = {a.dest: tuple(a.option_strings) for a in parser._actions if a.option_strings}
    assert options == TORCHRUN_OPTIONS
    assert {a.dest for a in parser._actions if a.option_strings and a.nargs == 0} == TORCHRUN_FLAGS
    assert set(TORCHRUN_DERIVED) <= set(options)


LINES = [
    ["--nproc-per-node=8", "train.py"],
    ["--nproc_per_node", "4", "--nnodes", "1:2", "train.py", "--nnodes", "9"],
    ["--log-dir", "/tmp/x", "--standalone", "train.py", "--max-restarts", "7"],
    ["--nnode", "3", "--rdzv-backend=etcd", "--rdzv_endpoint", "h:1", "train.py"],
    ["--no-python", "--rdzv-id", "abc", "--max_restarts=5", "run.sh"],
    ["-m", "--max-restarts", "2", "pkg.mod", "--nproc-per-node", "9"],
    ["--rdzv-conf", "timeout=9", "--role", "w", "train.py"],
]


@pytest.mark.parametrize("line", LINES)
def test_the_rule_finds_what_torchrun_reads(parser, line):
    defaults = vars(parser.parse_args(["x.py"]))
    parsed = vars(parser.parse_args(line))
    set_by_line = {dest for dest in TORCHRUN_DERIVED if parsed[dest] != defaults[dest]}
    found = launchers.torchrun_options(["torchrun", *line], 1)
    assert {w.option for w in found} == set_by_line
    for w in found:
        if w.value is not None:
            assert str(parsed[w.option]) == w.value
