"""Paths inside the project checkout."""

from __future__ import annotations

from pathlib import Path

# The project folder (holds Pulumi.yaml); Pulumi runs the program with it as the working directory.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# helm and kubectl for rendering charts and overlays (scripts/k8s_tools.py unpacks them here).
TOOLS_BIN = PROJECT_ROOT / ".tools" / "bin"
