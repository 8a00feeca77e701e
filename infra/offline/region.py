"""AWS's recorded region data, shipped by moto: which AZs offer which instance types. The offline
engine answers the program's lookups of the region (its AZs, the offerings) from it; a region moto
has no data for is ``OfflineDataError``.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from functools import cache
from pathlib import Path


def _moto_resources() -> Path | None:
    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "ec2" / "resources"


class OfflineDataError(RuntimeError):
    """The offline engine has no recorded AWS data for what the stack asks (a region moto does not
    ship offering data for). A real `pulumi up` asks AWS instead."""


@cache
def az_offerings(region: str) -> dict[str, set[str]]:
    """Instance type -> AZ names offering it in ``region``, from AWS's recorded data."""
    base = _moto_resources()
    path = base / "instance_type_offerings" / "availability-zone" / f"{region}.json.gz" if base else None
    if path is None or not path.exists():
        recorded = (
            sorted(
                p.name.removesuffix(".json.gz")
                for p in (base / "instance_type_offerings" / "availability-zone").glob("*.json.gz")
            )
            if base
            else []
        )
        raise OfflineDataError(
            f"the offline plan has no recorded AWS offering data for region {region!r} (it has: "
            f"{', '.join(recorded) or 'none; install the dev requirements'}); plan a stack in one of those regions "
            "offline, or run `pulumi preview` against AWS"
        )
    offered: dict[str, set[str]] = {}
    for item in json.loads(gzip.decompress(path.read_bytes())):
        offered.setdefault(item["InstanceType"], set()).add(item["Location"])
    return offered


def region_azs(region: str) -> list[str]:
    return sorted({az for azs in az_offerings(region).values() for az in azs})
