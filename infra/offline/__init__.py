"""The offline engine: runs the real Pulumi program in-process against Pulumi's runtime mocks.

It stands in for the cloud only. Every resource gets a stable fake id and the outputs the program
reads; invokes that ask AWS about the region (AZs, instance type offerings) are answered from
AWS's recorded data that moto ships, and lookups of what the stack has already made (its GPU
subnet) from ``deployed.py``: nothing by default, a new stack. The program itself runs unchanged.

Used by the offline plan (``python -m infra plan``) and by the tests; never by what ``pulumi up``
runs. The package, from the bottom up: ``region`` (AWS's recorded region data), ``deployed`` (what
the stack already has), ``fleet`` (a fleet's stack references), ``mocks`` (the mocks' answers: ids,
outputs, invokes), ``monitor`` (the recording monitor: ``Record``, ``DuplicateURNError``) and
``engine`` (``run``, ``PlanResult``, ``collector_paused``). Every name below is importable from ``infra.offline``.
"""

from __future__ import annotations

from infra.offline.deployed import Deployed, Subnet, UnknownSubnetError
from infra.offline.engine import PlanResult, collector_paused, flat_config, run
from infra.offline.fleet import OfflineFleet, offline_fleet
from infra.offline.mocks import ACCOUNT_ID, OfflineMocks
from infra.offline.monitor import DYNAMIC_TYPE_PREFIX, RECORDED_OPTIONS, DuplicateURNError, Record, RecordingMonitor
from infra.offline.region import OfflineDataError, az_offerings, region_azs

__all__ = [
    "ACCOUNT_ID",
    "DYNAMIC_TYPE_PREFIX",
    "Deployed",
    "DuplicateURNError",
    "OfflineDataError",
    "OfflineFleet",
    "OfflineMocks",
    "PlanResult",
    "RECORDED_OPTIONS",
    "Record",
    "RecordingMonitor",
    "Subnet",
    "UnknownSubnetError",
    "az_offerings",
    "collector_paused",
    "flat_config",
    "offline_fleet",
    "region_azs",
    "run",
]
