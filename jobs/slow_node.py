"""Slow-node detection's side of a pytorch-elastic job spec (docs/performance.md, "Slow nodes"): the ``slowNode``
section and the guard options it becomes. The check runs in the pods (jobs/scripts/slow_node.py, in every rank's
progress guard; the first rank's guard decides).

Defaults, and why: ``factor`` 1.5 -- identical GPU nodes run a step within a few percent of each other, a
throttling GPU or a degraded link costs far more (tens of percent to several times), and below 1.5 a data
loader's uneven batches could count; ``windows`` 3 of ``windowSeconds`` 300 -- a checkpoint save or a burst on the
shared file system lasts seconds to a minute or two, so 15 minutes of a node being slow is not one of those,
while a p5 hour ($100) is not spent waiting.
"""

from __future__ import annotations

from pydantic import Field

from jobs.base import SpecModel

# The taint on a node found slow: under the stack's prefix, a qualified name (at most 63 characters: Kubernetes'
# label-key rules, which taint keys follow); its value is the job's name. jobs/scripts/slow_node.py's TAINT_KEY.
SLOW_NODE_TAINT_KEY = "gputraining/slow-node"
MIN_FACTOR, MAX_FACTOR = 1.1, 10.0
MIN_WINDOWS, MAX_WINDOWS = 1, 100
MIN_WINDOW_SECONDS, MAX_WINDOW_SECONDS = 1, 24 * 3600


class SlowNode(SpecModel):
    """Slow-node detection: the ranks write their step times, the guard compares the nodes."""

    factor: float = Field(1.5, description="a node slower than this many times the other nodes' median step (1.1..10)")
    windows: int = Field(3, description="for this many windows in a row (1..100)")
    window_seconds: int = Field(300, description="the length of a window in seconds (1..86400)")


def guard_options(s: SlowNode, restart: bool) -> list[str]:
    out = ["--slow-node-factor", f"{s.factor:g}", "--slow-node-windows", str(s.windows)]
    out += ["--slow-node-window", str(s.window_seconds)]
    return out + (["--slow-node-restart"] if restart else [])


def problems_of(s: SlowNode) -> list[tuple[str, str]]:
    """(field, message) of the values out of range."""
    out = []
    if not MIN_FACTOR <= s.factor <= MAX_FACTOR:
        out.append(("factor", f"{s.factor:g} is out of range: {MIN_FACTOR:g} to {MAX_FACTOR:g}"))
    if not MIN_WINDOWS <= s.windows <= MAX_WINDOWS:
        out.append(("windows", f"{s.windows} is out of range: {MIN_WINDOWS} to {MAX_WINDOWS}"))
    if not MIN_WINDOW_SECONDS <= s.window_seconds <= MAX_WINDOW_SECONDS:
        out.append(
            (
                "windowSeconds",
                f"{s.window_seconds} is out of range: {MIN_WINDOW_SECONDS} to {MAX_WINDOW_SECONDS} seconds",
            )
        )
    return out
