"""The shape of a config problem, shared by the stack config and the job kinds' own checks.

Every problem names the config key, the bad value and what is allowed; ``ConfigError`` carries all
problems found in one pass so a user sees every mistake at once.
"""

from __future__ import annotations

import json
from typing import Any


class Problem:
    """One config problem: the key it is about, and what is wrong."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message

    def __str__(self) -> str:
        return f"{self.key}: {self.message}"

    def __repr__(self) -> str:
        return f"Problem({self.key!r}, {self.message!r})"


class ConfigError(Exception):
    """Raised with every problem found in a stack config."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid stack config ({len(problems)} problem(s)):\n{lines}")


def fmt(value: Any) -> str:
    """A value as a message shows it: strings quoted, others as JSON, long ones cut at 80."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
