"""Vendored Helm chart packages: a path, its pinned sha256 and the chart version inside."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


class ChartChecksumError(ValueError):
    """A vendored chart package whose sha256 is not the pinned one."""


@dataclass(frozen=True)
class ChartFile:
    """A vendored Helm chart package."""

    path: str  # the .tgz, relative to the project folder (where Pulumi runs the program)
    sha256: str  # its pinned sha256
    version: str  # the chart version inside it

    def verified(self, root: Path = Path(".")) -> str:
        """The path, after checking the package's sha256 (a mismatch raises ChartChecksumError)."""
        digest = hashlib.sha256((root / self.path).read_bytes()).hexdigest()
        if digest != self.sha256:
            raise ChartChecksumError(f"{self.path}: sha256 {digest} is not the pinned {self.sha256}")
        return self.path
