"""Values above the default of an adjustable AWS quota: the account may have had it raised, so the
config takes them and the offline plan prints a warning per value (preflight reads the account's
quota and fails when it is short). Refusing them would also keep preflight, which reads the same
config, from ever reading a raised quota.
"""

from __future__ import annotations

from facts import aws_names
from facts.problems import Problem, entry_keys
from stacks.config.models import NAMESPACE
from stacks.config.stack_config import StackConfig


def quota_warnings(cfg: StackConfig) -> list[Problem]:
    """Each node group whose maxSize is above EKS's default nodes-per-node-group quota; the node groups
    together when they are more than EKS's default managed-node-groups-per-cluster quota."""
    return node_size_warnings(cfg) + node_group_count_warnings(cfg)


def managed_node_groups(cfg: StackConfig) -> list[str]:
    """The EKS managed node groups the stack creates, by config name: the system group and every GPU
    group but a capacity-block one still waiting for its block (not built: stacks/environment.py)."""
    return ["system"] + [g.name for g in cfg.gpu_node_groups if not g.awaiting_capacity_block]


def node_group_count_warnings(cfg: StackConfig) -> list[Problem]:
    """The stack's managed node groups above EKS's default quota of them per cluster."""
    service, code, name = aws_names.EKS_NODEGROUPS_PER_CLUSTER
    default = aws_names.EKS_NODEGROUPS_PER_CLUSTER_DEFAULT
    count = len(managed_node_groups(cfg))
    if count <= default:
        return []
    return [
        Problem(
            f"{NAMESPACE}:gpuNodeGroups",
            f"{count} managed node groups (the system group and {count - 1} GPU groups) are more than {default}, "
            f"EKS's default quota of managed node groups per cluster ({name!r}, Service Quotas {service} {code}, "
            f"adjustable): EKS refuses the groups past it unless the account's quota is raised; preflight reads it "
            f"(aws service-quotas get-service-quota --service-code {service} --quota-code {code})",
        )
    ]


def node_size_warnings(cfg: StackConfig) -> list[Problem]:
    """Each node group whose maxSize is above EKS's default nodes-per-node-group quota."""
    service, code, name = aws_names.EKS_NODES_PER_NODEGROUP
    default = aws_names.EKS_NODES_PER_NODEGROUP_DEFAULT
    groups = [("systemNodeGroup", cfg.system_node_group.max_size)]
    keys = entry_keys("gpuNodeGroups", [g.name for g in cfg.gpu_node_groups])
    groups += [(key, g.max_size) for key, g in zip(keys, cfg.gpu_node_groups, strict=True)]
    return [
        Problem(
            f"{NAMESPACE}:{key}.maxSize",
            f"{size} is more than {default}, EKS's default quota of nodes per managed node group ({name!r}, Service "
            f"Quotas {service} {code}, adjustable): EKS refuses the group unless the account's quota is raised; "
            f"preflight reads it (aws service-quotas get-service-quota --service-code {service} --quota-code {code})",
        )
        for key, size in groups
        if size > default
    ]
