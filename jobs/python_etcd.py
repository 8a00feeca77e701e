"""python-etcd for the workers of a job on the stack's etcd, shipped by the stack: no custom image.

PyTorch's etcd rendezvous runs in torchrun's agent and imports ``etcd`` (python-etcd); AWS's
pytorch-training images lack it (facts/images.py). A job with rendezvous ``etcd``/``etcd-v2`` gets a
ConfigMap ``<job>-python-etcd`` holding python-etcd 0.4.5's four modules, verbatim from its PyPI sdist
(manifests/vendor/python-etcd-0.4.5, each file checked against its sha256 in facts/versions.py before
use), and a ``dns`` stand-in (jobs/scripts/dns_fallback.py: python-etcd imports dnspython, which the
images lack and torch's calls never use). It is mounted read-only at ``/opt/python-etcd`` and put
first on the ``pytorch`` container's PYTHONPATH (before the job's own PYTHONPATH, if its env sets
one); python-etcd's one other dependency, urllib3, is in the images (docker/pytorch/<minor>/cuda/uv.lock
of aws/deep-learning-containers: urllib3 2.7.0). About 60 KB: far below a ConfigMap's 1 MiB.
"""

from __future__ import annotations

import hashlib
import posixpath
from functools import cache
from pathlib import Path
from typing import Any

from facts import versions
from facts.paths import PROJECT_ROOT

MOUNT = "/opt/python-etcd"
VOLUME = "python-etcd"
PYTHONPATH = "PYTHONPATH"
DNS_FALLBACK = Path(__file__).parent / "scripts" / "dns_fallback.py"


class VendoredFileError(ValueError):
    """A vendored python-etcd file whose sha256 is not the pinned one."""


def config_map_name(job: str) -> str:
    return f"{job}-python-etcd"


@cache
def files() -> dict[str, str]:
    """Path under the mount -> text: python-etcd's modules (checked against their pins) and the dns stand-in."""
    out: dict[str, str] = {}
    for pinned in versions.PYTHON_ETCD_FILES:
        data = (PROJECT_ROOT / pinned.file).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != pinned.sha256:
            raise VendoredFileError(f"{pinned.file}: sha256 {digest} is not the pinned {pinned.sha256}")
        out[posixpath.relpath(pinned.file, versions.PYTHON_ETCD_DIR)] = data.decode()
    out["dns/__init__.py"] = DNS_FALLBACK.read_text()
    return out


def key(path: str) -> str:
    """A ConfigMap key for a path under the mount (keys allow no '/'): ``etcd/client.py`` -> ``etcd.client.py``."""
    return path.replace("/", ".")


def config_map(job: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": config_map_name(job), "namespace": namespace, "labels": labels},
        "data": {key(path): text for path, text in sorted(files().items())},
    }


def search_path(own: str | None) -> str:
    """PYTHONPATH of the container: the mount first, then the job's own PYTHONPATH, if any."""
    return MOUNT if not own else f"{MOUNT}:{own}"


def equip(job: str, pod_spec: dict[str, Any], container: dict[str, Any]) -> None:
    """Mount the ConfigMap (each key at its path) and put it first on the container's PYTHONPATH."""
    items = [{"key": key(path), "path": path} for path in sorted(files())]
    pod_spec.setdefault("volumes", []).append(
        {"name": VOLUME, "configMap": {"name": config_map_name(job), "items": items}}
    )
    container.setdefault("volumeMounts", []).append({"name": VOLUME, "mountPath": MOUNT, "readOnly": True})
    env = container.setdefault("env", [])
    own = next((e for e in env if e["name"] == PYTHONPATH and "value" in e), None)
    if own is not None:
        own["value"] = search_path(own["value"])
    else:
        env.append({"name": PYTHONPATH, "value": search_path(None)})
