"""``dns`` for the python-etcd the stack ships (jobs/python_etcd.py), mounted as ``dns/__init__.py`` beside it.

python-etcd 0.4.5's client module imports ``dns.resolver`` (dnspython) at the top, for one feature only:
``etcd.Client(srv_domain=...)``, the discovery of etcd's members from DNS SRV records (client.py,
``Client._discover``). PyTorch's etcd rendezvous never passes ``srv_domain`` (torch 2.13,
torch/distributed/elastic/rendezvous/etcd_rendezvous.py ``_create_etcd_client`` and
etcd_rendezvous_backend.py ``_create_etcd_client``: host, port, protocol, certificates), and AWS's
pytorch-training images have no dnspython (their uv.lock: urllib3, no dnspython).

The folder is first on PYTHONPATH, so this module must not hide a real dnspython: when another entry of
``sys.path`` has a ``dns`` package, that one is loaded in this module's place. Only without one does
``dns.resolver`` become a stand-in whose ``query`` fails, saying why. Python 3.8+ standard library only.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import NoReturn

_HERE = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _elsewhere() -> list[str]:
    """``sys.path`` without the folder this module is mounted in."""
    return [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]


def _no_dnspython(*args: object, **kwargs: object) -> NoReturn:
    raise ImportError(
        "dnspython is not installed: etcd.Client(srv_domain=...) needs it; PyTorch's etcd rendezvous does not "
        "(the stack ships python-etcd without it)"
    )


def _load() -> None:
    spec = importlib.machinery.PathFinder.find_spec(__name__, _elsewhere())
    if spec is not None and spec.loader is not None:
        real = importlib.util.module_from_spec(spec)
        sys.modules[__name__] = real  # the import statement returns what sys.modules holds
        spec.loader.exec_module(real)
        return
    resolver = types.ModuleType(f"{__name__}.resolver", "A stand-in: dnspython is not installed.")
    resolver.query = _no_dnspython  # type: ignore[attr-defined]
    resolver.resolve = _no_dnspython  # type: ignore[attr-defined]
    sys.modules[resolver.__name__] = resolver
    globals()["resolver"] = resolver


if __name__ == "dns":  # mounted as dns/__init__.py (not when a test reads this file as a module of its own)
    _load()
