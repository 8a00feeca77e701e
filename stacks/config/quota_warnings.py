"""Values above the default of an adjustable AWS quota: the account may have had it raised, so the
config takes them and the offline plan prints a warning per value (preflight reads the account's
quota and fails when it is short). Refusing them would also keep preflight, which reads the same
config, from ever reading a raised quota.
"""

from __future__ import annotations

from facts import aws_names
from facts.problems import Problem
from stacks.config.models import NAMESPACE
from stacks.config.stack_config import StackConfig


def quota_warnings(cfg: StackConfig) -> list[Problem]:
    """Each node group whose maxSize is above EKS's default nodes-per-node-group quota."""
    service, code, name = aws_names.EKS_NODES_PER_NODEGROUP
    default = aws_names.EKS_NODES_PER_NODEGROUP_DEFAULT
    groups = [("systemNodeGroup", cfg.system_node_group.max_size)]
    groups += [(f"gpuNodeGroups[{i}]", g.max_size) for i, g in enumerate(cfg.gpu_node_groups)]
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
