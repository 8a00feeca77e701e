"""The machine a figure was measured on, in one line: cores, CPU model and load average.

    .venv/bin/python scripts/machine.py

Every benchmark in scripts/ prints this line with its figures (before and after its runs), so that a figure
quoted in the docs says where and under what load it was measured (docs/development.md, "Figures")."""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (Linux), else what the platform module knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def cores() -> int:
    """The cores this process may run on, as `nproc` counts them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe() -> str:
    return f"machine: {cores()} cores (nproc), {cpu_model()}; load average {load()} (1, 5, 15 min)"


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    print(describe())
