"""Vendored files (Helm chart packages, CRDs), each a ``facts.versions.Vendored`` value: checked
against its pinned sha256 before the program uses it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from facts.versions import Vendored


class ChartChecksumError(ValueError):
    """A vendored file whose sha256 is not the pinned one."""


def verified(pinned: Vendored, root: Path = Path(".")) -> str:
    """The file's path, after checking its sha256 (a mismatch raises ChartChecksumError)."""
    digest = hashlib.sha256((root / pinned.file).read_bytes()).hexdigest()
    if digest != pinned.sha256:
        raise ChartChecksumError(f"{pinned.file}: sha256 {digest} is not the pinned {pinned.sha256}")
    return pinned.file
