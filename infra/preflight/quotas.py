"""Preflight's quota checks: the EC2 vCPU quotas of the GPU groups at their maxSize (on-demand and
spot; capacity blocks do not count), EKS's nodes per managed node group against every group's
maxSize, EKS's managed node groups per cluster against the stack's node groups, and the SageMaker
training quotas of the stack's ``runtime: sagemaker`` jobs, per ml. type.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from facts import aws_names
from infra.preflight.results import (
    FAIL,
    PASS,
    SKIP,
    CheckResult,
    _error_code,
    _guard,
    _is_client_error,
    _paginate,
    _unanswered,
)
from stacks import config as stack_config
from stacks.config.job_entries import sagemaker_jobs
from stacks.config.quota_warnings import managed_node_groups

if TYPE_CHECKING:
    from infra.preflight import _Context

# EC2 vCPU quotas by instance family letter (Service Quotas, service code "ec2").
QUOTAS: dict[str, dict[str, tuple[str, str]]] = {
    "p": {
        "on-demand": ("L-417A185B", "Running On-Demand P instances"),
        "spot": ("L-7212CCBC", "All P Spot Instance Requests"),
    },
}


class _QuotaUnreadable(Exception):
    pass


def _quota_value(sq: Any, code: str, service: str = "ec2") -> tuple[float, str]:
    """The applied quota value, else AWS's default. Raises _QuotaUnreadable when the endpoint has
    neither; other AWS errors (access denied...) propagate."""
    try:
        return float(sq.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]), "applied"
    except Exception as err:
        why = _unanswered(err)
        if why:
            raise _QuotaUnreadable(f"the endpoint {why}") from None
        if not (_is_client_error(err) and _error_code(err)[0] == "NoSuchResourceException"):
            raise
        first = "GetServiceQuota: {}: {}".format(*_error_code(err))
    try:
        return float(
            sq.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"]
        ), "AWS default"
    except Exception as err:
        why = _unanswered(err)
        if why or (_is_client_error(err) and _error_code(err)[0] == "NoSuchResourceException"):
            second = f"the endpoint {why}" if why else "{}: {}".format(*_error_code(err))
            raise _QuotaUnreadable(f"{first}; GetAWSDefaultServiceQuota: {second}") from None
        raise


def _check_quotas(ctx: _Context) -> list[CheckResult]:
    cfg = ctx.cfg
    results: list[CheckResult] = []
    blocks = [g.name for g in cfg.gpu_node_groups if g.capacity_type == "capacity-block"]
    for capacity_type in ("on-demand", "spot"):
        by_family: dict[str, list[stack_config.GpuNodeGroupConfig]] = defaultdict(list)
        for g in cfg.gpu_node_groups:
            if g.capacity_type == capacity_type:
                by_family[g.instance_type[0]].append(g)
        for family, groups in sorted(by_family.items()):
            quota = QUOTAS.get(family, {}).get(capacity_type)
            if quota is None:
                results.append(
                    CheckResult(
                        SKIP,
                        f"{capacity_type} vCPU quota for {family.upper()} instances",
                        f"no Service Quotas code known for {family.upper()} instances; "
                        "check it in the Service Quotas console",
                    )
                )
                continue
            code, name = quota
            results.extend(
                _guard(
                    f"{capacity_type} vCPU quota {code} ({name})",
                    "service-quotas GetServiceQuota",
                    "servicequotas:GetServiceQuota",
                    functools.partial(_quota_line, ctx, capacity_type, code, name, groups, blocks),
                )
            )
    return results


def _quota_line(
    ctx: _Context, capacity_type: str, code: str, name: str, groups: list, blocks: list[str]
) -> list[CheckResult]:
    check = f"{capacity_type} vCPU quota {code} ({name})"
    needed = sum(g.max_size * g.instance.vcpus for g in groups)
    parts = ", ".join(f"{g.name}: {g.max_size} x {g.instance.vcpus}" for g in groups)
    note = (
        f"; capacity-block groups {', '.join(blocks)} do not count" if blocks and capacity_type == "on-demand" else ""
    )
    try:
        value, source = _quota_value(ctx.client("service-quotas"), code)
    except _QuotaUnreadable as err:
        return [
            CheckResult(
                SKIP,
                check,
                f"the quota cannot be read here ({err}); {needed:g} vCPUs needed at maxSize ({parts}). Check it with: "
                f"aws service-quotas get-service-quota --region {ctx.cfg.region} "
                f"--service-code ec2 --quota-code {code}",
            )
        ]
    if value >= needed:
        return [
            CheckResult(
                PASS, check, f"{value:g} vCPUs ({source}) covers the {needed:g} needed at maxSize ({parts}){note}"
            )
        ]
    short = needed - value
    return [
        CheckResult(
            FAIL,
            check,
            f"{value:g} vCPUs ({source}) but {needed:g} are needed at maxSize "
            f"({parts}){note}: short by {short:g} vCPUs",
            f"request at least {needed:g} (aws service-quotas request-service-quota-increase --region {ctx.cfg.region} "
            f"--service-code ec2 --quota-code {code} --desired-value {needed:g}) or lower maxSize in {ctx.stack_file}",
        )
    ]


def _eks_quota_check(
    ctx: _Context, quota: tuple[str, str, str], line: Callable[[_Context, str], list[CheckResult]]
) -> list[CheckResult]:
    """One EKS quota (service, code, name: facts/aws_names.py) read from Service Quotas, judged by ``line``."""
    _, code, name = quota
    check = f"EKS quota {code} ({name})"
    return _guard(
        check, "service-quotas GetServiceQuota", "servicequotas:GetServiceQuota", functools.partial(line, ctx, check)
    )


def _check_node_group_sizes(ctx: _Context) -> list[CheckResult]:
    """EKS's nodes-per-managed-node-group quota (facts/aws_names.py) against every group's maxSize."""
    return _eks_quota_check(ctx, aws_names.EKS_NODES_PER_NODEGROUP, _node_group_line)


def _node_group_line(ctx: _Context, check: str) -> list[CheckResult]:
    service, code, _ = aws_names.EKS_NODES_PER_NODEGROUP
    cfg = ctx.cfg
    sizes = [("system", cfg.system_node_group.max_size)] + [(g.name, g.max_size) for g in cfg.gpu_node_groups]
    largest = max(size for _, size in sizes)
    try:
        value, source = _quota_value(ctx.client("service-quotas"), code, service)
    except _QuotaUnreadable as err:
        return [
            CheckResult(
                SKIP,
                check,
                f"the quota cannot be read here ({err}); the largest group has maxSize {largest}. Check it with: "
                f"aws service-quotas get-service-quota --region {cfg.region} "
                f"--service-code {service} --quota-code {code}",
            )
        ]
    over = [f"{group}: maxSize {size}" for group, size in sizes if size > value]
    if not over:
        return [
            CheckResult(PASS, check, f"{value:g} nodes ({source}) hold every group's maxSize (the largest: {largest})")
        ]
    return [
        CheckResult(
            FAIL,
            check,
            f"{value:g} nodes ({source}) per node group, but {', '.join(over)}: EKS refuses the group",
            f"request at least {largest} (aws service-quotas request-service-quota-increase --region "
            f"{cfg.region} --service-code {service} "
            f"--quota-code {code} --desired-value {largest}) or lower maxSize in {ctx.stack_file}",
        )
    ]


def _check_node_group_count(ctx: _Context) -> list[CheckResult]:
    """EKS's managed-node-groups-per-cluster quota (facts/aws_names.py) against the stack's node groups."""
    return _eks_quota_check(ctx, aws_names.EKS_NODEGROUPS_PER_CLUSTER, _node_group_count_line)


def _node_group_count_line(ctx: _Context, check: str) -> list[CheckResult]:
    service, code, _ = aws_names.EKS_NODEGROUPS_PER_CLUSTER
    cfg = ctx.cfg
    groups = managed_node_groups(cfg)
    try:
        value, source = _quota_value(ctx.client("service-quotas"), code, service)
    except _QuotaUnreadable as err:
        return [
            CheckResult(
                SKIP,
                check,
                f"the quota cannot be read here ({err}); the stack has {len(groups)} managed node groups. Check it "
                f"with: aws service-quotas get-service-quota --region {cfg.region} --service-code {service} "
                f"--quota-code {code}",
            )
        ]
    if len(groups) <= value:
        return [CheckResult(PASS, check, f"{value:g} ({source}) hold the stack's {len(groups)} managed node groups")]
    return [
        CheckResult(
            FAIL,
            check,
            f"{value:g} managed node groups per cluster ({source}), but the stack has {len(groups)} "
            f"({', '.join(groups)}): EKS refuses the groups past {value:g}",
            f"request at least {len(groups)} (aws service-quotas request-service-quota-increase --region "
            f"{cfg.region} --service-code {service} --quota-code {code} --desired-value {len(groups)}) or remove "
            f"GPU groups from {ctx.stack_file}",
        )
    ]


def sagemaker_quota_name(instance_type: str, spot: bool) -> str:
    """The Service Quotas name (service code ``sagemaker``) of a training instance type's quota."""
    return f"{instance_type} for {'spot ' if spot else ''}training job usage"


def _sagemaker_quotas(sq: Any) -> tuple[dict[str, tuple[str, float]], str]:
    """Quota name -> (code, value) of the account's SageMaker quotas (applied values, AWS's
    defaults where none is applied)."""
    found: dict[str, tuple[str, float]] = {}
    source = "applied"
    try:
        for q in _paginate(sq, "list_aws_default_service_quotas", "Quotas", ServiceCode="sagemaker"):
            found[q["QuotaName"]] = (q["QuotaCode"], float(q["Value"]))
        source = "applied, else AWS default"
    except Exception as err:
        if not (_is_client_error(err) and _error_code(err)[0] == "NoSuchResourceException") and not _unanswered(err):
            raise
    for q in _paginate(sq, "list_service_quotas", "Quotas", ServiceCode="sagemaker"):
        found[q["QuotaName"]] = (q["QuotaCode"], float(q["Value"]))
    return found, source


def _check_sagemaker_quotas(ctx: _Context) -> list[CheckResult]:
    cfg = ctx.cfg
    needed: dict[tuple[str, bool], list[tuple[str, int]]] = defaultdict(list)
    for job in sagemaker_jobs(cfg.jobs, cfg.gpu_node_groups, cfg.region, cfg.cluster_name, {}):
        needed[(job.instance_type, job.spot)].append((job.job, job.instance_count))
    if not needed:
        return []
    quotas: dict[str, tuple[str, float]] = {}
    source = ""

    def read() -> list[CheckResult]:
        nonlocal quotas, source
        quotas, source = _sagemaker_quotas(ctx.client("service-quotas"))
        return []

    failed = _guard(
        "SageMaker training quotas", "service-quotas ListServiceQuotas", "servicequotas:ListServiceQuotas", read
    )
    if failed:
        return failed
    results = []
    for (instance_type, spot), jobs in sorted(needed.items()):
        name = sagemaker_quota_name(instance_type, spot)
        count = sum(n for _, n in jobs)
        parts = ", ".join(f"{j}: {n}" for j, n in jobs)
        check = f"SageMaker quota {name!r}"
        if name not in quotas:
            results.append(
                CheckResult(
                    SKIP,
                    check,
                    f"not listed by Service Quotas here; {count} instances needed ({parts}). "
                    "Check it with: aws service-quotas list-service-quotas "
                    f"--region {cfg.region} --service-code sagemaker --query \"Quotas[?QuotaName=='{name}']\"",
                )
            )
            continue
        code, value = quotas[name]
        if value >= count:
            results.append(
                CheckResult(
                    PASS, check, f"{value:g} ({source}) covers the {count} instances the SageMaker jobs use ({parts})"
                )
            )
        else:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"{value:g} ({source}) but the SageMaker jobs use {count} "
                    f"instances ({parts}): short by {count - value:g}",
                    f"request at least {count} (aws service-quotas request-service-quota-increase --region "
                    f"{cfg.region} --service-code sagemaker "
                    f"--quota-code {code} --desired-value {count}) or lower the jobs' nodes in {ctx.stack_file}",
                )
            )
    return results
