"""What the offline plan keeps on disk between runs, so that a plan of an unchanged config does not
redo the slow parts that gave the same result before: the Helm renders (infra/releases.py), the
parsed operator manifests (components/operators.py) and the parts of botocore's service models the
AWS check reads (infra/api_checks/shapes.py).

All of it is in .cache/ in the project, ignored by git (``GPU_TRAINING_PLAN_CACHE`` names another
folder; set to nothing, nothing is kept): .cache/helm-renders/, .cache/manifests/, .cache/aws-models/;
and .cache/cel/, cel-python's parser tables for the plan's CRD check, in lark's own cache format (lark
keeps a hash of the grammar, options and its version in the file and rebuilds on a mismatch;
infra/api_checks/kube_crds.py). Removing the folder is always safe: whatever is missing is made again.

An entry is one file named by its key, a sha256 over everything its content depends on (``key``),
and holds its key and its content's sha256 before the content. It is written to a temporary file
beside it and renamed into place, so that it is whole or absent; one whose key or sha256 does not
match what it holds is not used (``load``), and is made and written again. The content is a pickle
made by this project's code, kept in the project's own folder: read with the trust given to the
checkout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from facts.paths import PROJECT_ROOT

CACHE_ENV = "GPU_TRAINING_PLAN_CACHE"
DEFAULT_ROOT = PROJECT_ROOT / ".cache"
_MAGIC = b"gpu-training plan cache\n"


def folder(kind: str) -> Path | None:
    """The folder of one kind of entry (``helm-renders``, ``manifests``), or None when nothing is kept."""
    value = os.environ.get(CACHE_ENV)
    root = DEFAULT_ROOT if value is None else (Path(value) if value else None)
    return root / kind if root is not None else None


def key(inputs: dict[str, Any]) -> str:
    """A sha256 over ``inputs`` as canonical JSON (keys sorted, so the order of a mapping's keys does not count)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def yaml_fingerprint() -> str:
    """PyYAML and libyaml, and the Python that pickles what they read: what a parse depends on
    besides its input and the code that calls them."""
    parts = [sys.version, sys.executable, yaml.__version__, str(getattr(yaml, "__with_libyaml__", False))]
    if getattr(yaml, "__with_libyaml__", False):
        parts.append(yaml._yaml.get_version_string())
    return "\0".join(parts)


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it there: readers see the
    whole file or none. The cache is an aid: a folder that cannot be written is left alone."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def entry_path(where: Path, entry_key: str) -> Path:
    return where / f"{entry_key}.entry"


def store(where: Path, entry_key: str, data: bytes) -> None:
    """Keep ``data`` under ``entry_key``: the key and the data's sha256 first, then the data."""
    header = _MAGIC + entry_key.encode() + b"\n" + hashlib.sha256(data).hexdigest().encode() + b"\n"
    write_atomically(entry_path(where, entry_key), header + data)


def load(where: Path, entry_key: str) -> bytes | None:
    """The data kept under ``entry_key``, or None: no entry, or one that is not whole (another
    key, or data without the sha256 it was written with)."""
    try:
        blob = entry_path(where, entry_key).read_bytes()
    except OSError:
        return None
    head = _MAGIC + entry_key.encode() + b"\n"
    if not blob.startswith(head):
        return None
    digest, newline, data = blob[len(head) :].partition(b"\n")
    if not newline or digest != hashlib.sha256(data).hexdigest().encode():
        return None
    return data


def unpickled(data: bytes | None) -> Any:
    """``data`` unpickled, or None if it is not a pickle (nothing a whole entry holds)."""
    if data is None:
        return None
    try:
        return pickle.loads(data)
    except Exception:  # noqa: BLE001 - whatever it is, it is not an entry
        return None


class ManifestSnapshots:
    """The parsed operator manifests (components/operators.py's snapshots: the pickled documents),
    keyed by the manifest's sha256, the parsing code (components/operators.py) and
    ``yaml_fingerprint``."""

    def __init__(self, where: Path):
        self.where = where
        code = hashlib.sha256((PROJECT_ROOT / "components" / "operators.py").read_bytes()).hexdigest()
        self._parser = f"{code}\0{yaml_fingerprint()}"

    def _key(self, digest: str) -> str:
        return key({"kind": "manifest", "manifest_sha256": digest, "parser": self._parser})

    def get(self, digest: str) -> bytes | None:
        return load(self.where, self._key(digest))

    def put(self, digest: str, snapshot: bytes) -> None:
        store(self.where, self._key(digest), snapshot)
