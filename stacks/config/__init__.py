"""The typed, validated stack config: everything a user sets per environment in Pulumi.<env>.yaml.

- ``models``: the sections and their fields, each with a one-line description; ``stack_config``:
  ``StackConfig``, the whole, and the sections that schedule work (autoscaling, teams, queues, ...);
- ``loading``: the engine's flat ``{"ns:key": value}`` map into a ``StackConfig`` (``load``, which
  walks StackConfig's fields: ``SECTIONS``);
- ``cross_checks``: cross-field checks (CIDRs, catalog types, names, ...); ``storage_checks``: EFS and
  FSx (sizes, throughput, backups, S3 link);
- ``job_entries``: the job section, parsed by the job kinds' own models and checks;
- ``errors``: pydantic's errors as ``Problem``s ("did you mean" for a key close to an allowed one);
  ``stackfile``: reading Pulumi.<stack>.yaml.

Keys live in the project's namespace (``gpu-training:<key>``) plus ``aws:region``. Validation runs
before any resource is registered and reports every problem at once, each naming the config key,
the bad value and what is allowed (``ConfigError``); ``loading`` says which problems wait for the
next run because they depend on another.
"""

from facts.problems import ConfigError, Problem
from stacks.config.cross_checks import LOG_RETENTION_DAYS, RESERVED_NAMESPACES, known_regions
from stacks.config.fleet_jobs import fleet_job_queues, fleet_job_targets
from stacks.config.loading import decode_config_values, load
from stacks.config.models import (
    NAMESPACE,
    ClusterConfig,
    EfsConfig,
    EtcdConfig,
    FsxConfig,
    GpuNodeGroupConfig,
    NetworkConfig,
    PlacementGroupConfig,
    S3LinkConfig,
    ServicesConfig,
    StorageConfig,
    SystemNodeGroupConfig,
    Taint,
)
from stacks.config.stack_config import (
    FOREIGN_NAMESPACES_ALLOWED,
    SECTIONS,
    AlertsConfig,
    AutoscalingConfig,
    BurnInConfig,
    MonitoringConfig,
    StackConfig,
)
from stacks.config.storage_checks import FSX_CAPACITY_STEP, FSX_THROUGHPUT, fsx_capacity_allowed

__all__ = [
    "fleet_job_queues",
    "fleet_job_targets",
    "FOREIGN_NAMESPACES_ALLOWED",
    "FSX_CAPACITY_STEP",
    "FSX_THROUGHPUT",
    "LOG_RETENTION_DAYS",
    "NAMESPACE",
    "RESERVED_NAMESPACES",
    "SECTIONS",
    "ClusterConfig",
    "ConfigError",
    "EfsConfig",
    "EtcdConfig",
    "FsxConfig",
    "GpuNodeGroupConfig",
    "AutoscalingConfig",
    "BurnInConfig",
    "MonitoringConfig",
    "AlertsConfig",
    "NetworkConfig",
    "PlacementGroupConfig",
    "Problem",
    "S3LinkConfig",
    "ServicesConfig",
    "StackConfig",
    "StorageConfig",
    "SystemNodeGroupConfig",
    "Taint",
    "decode_config_values",
    "fsx_capacity_allowed",
    "known_regions",
    "load",
]
