"""The storage section's checks (``storage``: EFS, and FSx for Lustre's capacity, throughput,
backups and S3 link). Each appends a ``Problem`` naming the config key, the bad value and what is
allowed; ``stacks/config/cross_checks.py`` runs them with the other sections' checks.
"""

from __future__ import annotations

import re

from facts import aws_names
from facts.problems import Problem
from facts.problems import fmt as _fmt
from stacks.config.models import NAMESPACE, EfsConfig, FsxConfig, S3LinkConfig, StorageConfig

# FSx for Lustre rules (AWS FSx API reference, CreateFileSystem StorageCapacity and
# PerUnitStorageThroughput): 1200 GiB, 2400 GiB, then steps of 3600 (SCRATCH_1) or 2400 (others).
FSX_SSD_STEP = 2400  # also UpdateFileSystem's growth step on SSD (infra/diff/refusals.py)
FSX_CAPACITY_STEP = {
    "SCRATCH_1": 3600,
    "SCRATCH_2": FSX_SSD_STEP,
    "PERSISTENT_1": FSX_SSD_STEP,
    "PERSISTENT_2": FSX_SSD_STEP,
}
FSX_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}


def fsx_capacity_allowed(deployment_type: str, capacity: int) -> bool:
    step = FSX_CAPACITY_STEP[deployment_type]
    return capacity in (1200, 2400) or (capacity > 2400 and capacity % step == 0)


def check_storage(st: StorageConfig, problems: list[Problem]) -> None:
    _check_efs(st.efs, problems)
    f = st.fsx
    if not f.enabled:
        return
    k = f"{NAMESPACE}:storage.fsx"
    _check_fsx_capacity(k, f, problems)
    _check_fsx_throughput(k, f, problems)
    _check_fsx_backups(k, f, problems)
    if f.s3 is not None:
        _check_fsx_s3(k, f.deployment_type, f.s3, problems)


def _check_efs(e: EfsConfig, problems: list[Problem]) -> None:
    if e.enabled and e.performance_mode == "maxIO" and e.throughput_mode == "elastic":
        problems.append(
            Problem(
                f"{NAMESPACE}:storage.efs.performanceMode",
                "'maxIO' is not allowed with throughputMode 'elastic' (EFS offers Elastic throughput with "
                "generalPurpose only); use generalPurpose, or throughputMode bursting",
            )
        )


def _check_fsx_capacity(k: str, f: FsxConfig, problems: list[Problem]) -> None:
    step = FSX_CAPACITY_STEP[f.deployment_type]
    if not fsx_capacity_allowed(f.deployment_type, f.storage_capacity_gib):
        problems.append(
            Problem(
                f"{k}.storageCapacityGiB",
                f"{f.storage_capacity_gib} is not allowed for {f.deployment_type}: use 1200, 2400 or a multiple of "
                f"{step} GiB",
            )
        )


def _check_fsx_throughput(k: str, f: FsxConfig, problems: list[Problem]) -> None:
    allowed = FSX_THROUGHPUT.get(f.deployment_type)
    if allowed is None and f.per_unit_storage_throughput is not None:
        problems.append(
            Problem(
                f"{k}.perUnitStorageThroughput",
                f"{f.per_unit_storage_throughput} is not allowed: {f.deployment_type} has no per-unit throughput "
                "setting (PERSISTENT_1/PERSISTENT_2 only)",
            )
        )
    if allowed is not None and f.per_unit_storage_throughput is None:
        problems.append(
            Problem(
                f"{k}.perUnitStorageThroughput",
                f"is required for {f.deployment_type}: one of {', '.join(map(str, allowed))} (MB/s/TiB)",
            )
        )
    elif allowed is not None and f.per_unit_storage_throughput not in allowed:
        problems.append(
            Problem(
                f"{k}.perUnitStorageThroughput",
                f"{_fmt(f.per_unit_storage_throughput)} is not allowed for {f.deployment_type}: use one of "
                f"{', '.join(map(str, allowed))} (MB/s/TiB)",
            )
        )


def _check_fsx_backups(k: str, f: FsxConfig, problems: list[Problem]) -> None:
    if not f.deployment_type.startswith("PERSISTENT"):
        if f.backup_retention_days:
            problems.append(
                Problem(
                    f"{k}.backupRetentionDays",
                    f"{f.backup_retention_days} is not allowed: {f.deployment_type} has no backups "
                    "(PERSISTENT_1/PERSISTENT_2 only); use 0",
                )
            )
        if f.final_backup:
            problems.append(
                Problem(
                    f"{k}.finalBackup",
                    f"true is not allowed: {f.deployment_type} has no backups (PERSISTENT_1/PERSISTENT_2 only)",
                )
            )
    if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", f.backup_start_time):
        problems.append(
            Problem(f"{k}.backupStartTime", f"{_fmt(f.backup_start_time)} is not a UTC time HH:MM like 03:00")
        )


def _check_fsx_s3(k: str, deployment_type: str, s3: S3LinkConfig, problems: list[Problem]) -> None:
    if deployment_type == "SCRATCH_1":
        problems.append(
            Problem(
                f"{k}.s3",
                "an S3 link needs SCRATCH_2, PERSISTENT_1 or PERSISTENT_2 (SCRATCH_1 has no data repository "
                "associations)",
            )
        )
    why = aws_names.bucket_problem(s3.bucket)
    if why:
        problems.append(Problem(f"{k}.s3.bucket", f"{_fmt(s3.bucket)} is not an S3 bucket name: {why}"))
    if s3.prefix.startswith("/"):
        problems.append(Problem(f"{k}.s3.prefix", f"{_fmt(s3.prefix)} must not start with '/'"))
    if not s3.file_system_path.startswith("/"):
        problems.append(
            Problem(f"{k}.s3.fileSystemPath", f"{_fmt(s3.file_system_path)} must be an absolute path like /s3")
        )
