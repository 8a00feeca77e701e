"""Preflight: check the target AWS account and region before anything is created.

    python -m infra preflight --stack dev

Reads the stack config exactly like the offline plan, then asks AWS with boto3 (the standard
credential chain and AWS environment variables, e.g. AWS_PROFILE or AWS_ENDPOINT_URL for a local
emulator; the region is the stack's ``aws:region``) and prints one line per check:

- every configured instance type is offered in the region, and the GPU types in the GPU AZ
  (with ``auto``, the AZ is picked by ``stacks.placement.choose_gpu_az``, the function the
  Pulumi program uses at preview time, so both always agree);
- EFA is supported where the config uses it, with as many interfaces as the catalog wires;
- the on-demand (and spot) vCPU quota for P instances covers every group at its maxSize
  (capacity blocks do not count against it). Instances already running in the account use the
  same quota: this check does not see them;
- a configured capacity reservation / capacity block exists, is of the group's type and is in
  the GPU AZ; for a capacity-block group, the block behind it (DescribeCapacityBlocks) holds the
  group's maxSize instances and has the window the group's capacity.start/end schedule it by;
- a capacity-block group's ``capacity.offering``: the offerings EC2 has (DescribeCapacityBlockOfferings)
  with their upfront price, and with ``purchase: true`` the offering `pulumi up` will buy (a WARN
  line that says so) or the block an earlier `up` bought;
- the SageMaker training quota ("<ml type> for training job usage", or "... for spot training job
  usage") covers the instances the stack's enabled ``runtime: sagemaker`` jobs use of each type
  (they all start with the same `pulumi up`);
- EKS offers the configured Kubernetes version in the region;
- the version's EKS standard support does not end within ``SUPPORT_WARNING_DAYS`` days (a WARN
  line, not a failure; a FAIL once it has ended): with the stack's STANDARD upgrade policy EKS
  then upgrades the control plane itself, and the next refreshed ``pulumi up`` would try to move
  it back to the pinned version;
- every pinned managed add-on build (``stacks/addons.py``) is published for that version, and any
  configuration values the stack sends fit the build's configuration schema.

A check the endpoint cannot answer (an emulator that does not implement the call) is a SKIP; a WARN
is something to act on soon that does not block a deploy.
Exit codes: 0 every check passed, warned or was skipped; 1 a check failed, or no usable credentials;
2 invalid config (messages on stderr).
"""

from __future__ import annotations

import datetime
import functools
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, TextIO

from facts.catalog import CAPACITY_BLOCK_DRAIN_TEXT
from facts.paths import PROJECT_ROOT
from stacks import config as stack_config
from stacks.config.jobs import sagemaker_jobs
from stacks.config.placeholders import placeholders

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG = 0, 1, 2

PASS, FAIL, SKIP, WARN = "PASS", "FAIL", "SKIP", "WARN"

# How long before the end of the pinned Kubernetes version's EKS standard support preflight warns:
# enough for a version bump through a pull request and a deploy (facts/versions.py has the dates).
SUPPORT_WARNING_DAYS = 60

# EC2 vCPU quotas by instance family letter (Service Quotas, service code "ec2").
QUOTAS: dict[str, dict[str, tuple[str, str]]] = {
    "p": {
        "on-demand": ("L-417A185B", "Running On-Demand P instances"),
        "spot": ("L-7212CCBC", "All P Spot Instance Requests"),
    },
}

# Capacity reservation states in which the reservation is gone or can never be used.
_DEAD_RESERVATION_STATES = {"expired", "cancelled", "cancelling", "failed", "payment-failed", "unsupported", "unavailable"}

# Error codes meaning "the caller may not do this".
_ACCESS_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess", "Forbidden"}
# Error codes meaning "this endpoint does not implement the call" (emulators).
_NOT_IMPLEMENTED = {"NotImplemented", "NotImplementedException", "InvalidAction", "UnknownOperationException", "404"}
# Error codes of a server that failed to answer (after botocore's retries).
_SERVER_ERRORS = {"InternalFailure", "InternalError", "InternalServerError", "ServiceUnavailable", "ServiceUnavailableException"}


@dataclass(frozen=True)
class CheckResult:
    """One line of the report."""

    status: str  # PASS, FAIL, SKIP or WARN
    check: str  # what was checked
    detail: str  # what was found
    fix: str = ""  # on FAIL: what to do

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    def line(self) -> str:
        text = f"{self.status}  {self.check}: {self.detail}"
        if self.status in (FAIL, WARN) and self.fix:
            text += f" -> {self.fix}"
        return text


# ---------------------------------------------------------------------------------------------
# AWS error handling
# ---------------------------------------------------------------------------------------------


def _one_line(text: str, limit: int = 160) -> str:
    """An error message fit for one report line (emulators answer with HTML pages)."""
    text = " ".join(re.sub(r"<[^>]+>", " ", str(text)).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_code(err: Exception) -> tuple[str, str]:
    response = getattr(err, "response", None) or {}
    error = response.get("Error") or {}
    return str(error.get("Code", "")), _one_line(error.get("Message", err), 100)


def _http_status(err: Exception) -> int:
    response = getattr(err, "response", None) or {}
    return int((response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0)


def _is_client_error(err: Exception) -> bool:
    from botocore.exceptions import ClientError

    return isinstance(err, ClientError)


def _unanswered(err: Exception) -> Optional[str]:
    """Why the endpoint could not answer the call at all (not implemented by an emulator, or a
    server error after botocore's retries), else None."""
    if isinstance(err, NotImplementedError):
        return "does not implement it (a local emulator?)"
    if not _is_client_error(err):
        return None
    code, message = _error_code(err)
    if code in _NOT_IMPLEMENTED or "not implemented" in message.lower():
        return f"does not implement it ({code}: {message})"
    status = _http_status(err) or (int(code) if code.isdigit() else 0)
    if status >= 500 or code in _SERVER_ERRORS:
        return f"answered with a server error ({code}: {message}); run preflight again later"
    return None


def _api_failure(check: str, call: str, iam_action: str, err: Exception) -> CheckResult:
    """A check whose AWS call failed: SKIP when the endpoint could not answer it, else FAIL."""
    why = _unanswered(err)
    if why:
        return CheckResult(SKIP, check, f"not checked: for {call}, the AWS endpoint {why}")
    code, message = _error_code(err)
    if code in _ACCESS_DENIED:
        return CheckResult(FAIL, check, f"not allowed to call {call} ({code})", f"allow {iam_action} for this identity, or run preflight with one that has it")
    return CheckResult(FAIL, check, f"{call} failed: {code}: {message}", "fix the AWS error above and run preflight again")


def _guard(check: str, call: str, iam_action: str, fn: Callable[[], list[CheckResult]]) -> list[CheckResult]:
    """Run one check; an AWS error of the call becomes its result. Credential and connection
    problems (botocore's own errors) propagate: they concern every check."""
    try:
        return fn()
    except NotImplementedError as err:
        return [_api_failure(check, call, iam_action, err)]
    except Exception as err:
        if _is_client_error(err):
            return [_api_failure(check, call, iam_action, err)]
        raise


def _paginate(client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
    if client.can_paginate(operation):
        out: list[Any] = []
        for page in client.get_paginator(operation).paginate(**kwargs):
            out.extend(page.get(key, []))
        return out
    return list(getattr(client, operation)(**kwargs).get(key, []))


# ---------------------------------------------------------------------------------------------
# The checks
# ---------------------------------------------------------------------------------------------


def current_date() -> datetime.date:
    """The date the support window is measured from (a function, so tests can fix it)."""
    return datetime.date.today()


@dataclass
class _Context:
    cfg: stack_config.StackConfig
    session: Any
    stack_file: str
    region_azs: list[str]
    offered: dict[str, set[str]]  # type -> AZs of the region offering it
    gpu_az: Optional[str] = None
    subnet_azs: Optional[list[str]] = None
    today: datetime.date = field(default_factory=lambda: current_date())
    # What EKS's DescribeClusterVersions said of the configured version, when it answered.
    eks_version: Optional[dict[str, Any]] = None

    def client(self, service: str) -> Any:
        return self.session.client(service, region_name=self.cfg.region)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _list(items: Any) -> str:
    items = sorted(items)
    return ", ".join(items) if items else "none"


def _region_facts(cfg: stack_config.StackConfig, session: Any) -> tuple[list[str], dict[str, set[str]]]:
    """The region's AZs (as the program sees them) and which of them offer each configured type."""
    ec2 = session.client("ec2", region_name=cfg.region)
    zones = ec2.describe_availability_zones(
        Filters=[
            {"Name": "opt-in-status", "Values": ["opt-in-not-required"]},
            {"Name": "state", "Values": ["available"]},
        ]
    )["AvailabilityZones"]
    region_azs = sorted(z["ZoneName"] for z in zones)
    types = sorted({cfg.system_node_group.instance_type, *cfg.gpu_instance_types})
    offered: dict[str, set[str]] = {t: set() for t in types}
    for item in _paginate(
        ec2,
        "describe_instance_type_offerings",
        "InstanceTypeOfferings",
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": types}],
    ):
        if item["Location"] in region_azs and item["InstanceType"] in offered:
            offered[item["InstanceType"]].add(item["Location"])
    return region_azs, offered


def _check_placement(ctx: _Context) -> list[CheckResult]:
    """Instance types in the region, the GPU AZ (chosen like the program does), the subnet AZs."""
    from stacks.placement import PlacementError, choose_gpu_az, choose_subnet_azs

    cfg, region = ctx.cfg, ctx.cfg.region
    results: list[CheckResult] = []
    gpu_types = cfg.gpu_instance_types
    requested = cfg.gpu_availability_zone
    az_key = f"{stack_config.NAMESPACE}:gpuAvailabilityZone"

    # The GPU AZ first: the system type's line names the subnet AZs that follow from it.
    az_result: CheckResult
    try:
        if gpu_types or requested != "auto":
            ctx.gpu_az = choose_gpu_az(requested, ctx.region_azs, {t: ctx.offered.get(t, set()) for t in gpu_types}, gpu_types)
        else:
            ctx.gpu_az = ctx.region_azs[0] if ctx.region_azs else None
        if ctx.gpu_az is None:
            az_result = CheckResult(FAIL, "GPU AZ", f"{region} has no available AZ", f"check aws:region in {ctx.stack_file}")
        elif requested == "auto":
            why = f"the first AZ by name that offers {', '.join(gpu_types)}" if gpu_types else "the first AZ by name (no GPU groups)"
            az_result = CheckResult(
                PASS,
                "GPU AZ",
                f"'auto' picked {ctx.gpu_az}, {why}; pin it so it can never move: set {az_key}: {ctx.gpu_az} in {ctx.stack_file}",
            )
        else:
            offers = f"offers {', '.join(gpu_types)}" if gpu_types else "is an available AZ"
            az_result = CheckResult(PASS, "GPU AZ", f"{ctx.gpu_az} (from config) {offers}")
    except PlacementError as err:
        ctx.gpu_az = None
        if requested == "auto":
            fix = "choose GPU types that one AZ offers together, or split the groups across stacks"
        else:
            candidates = [az for az in ctx.region_azs if all(az in ctx.offered.get(t, set()) for t in gpu_types)]
            fix = (
                f"set {az_key} to one of {_list(candidates)} (or 'auto') in {ctx.stack_file}" if candidates else "choose GPU types that one AZ offers together"
            )
        az_result = CheckResult(FAIL, "GPU AZ", str(err), fix)

    if ctx.gpu_az is not None:
        try:
            ctx.subnet_azs = choose_subnet_azs(ctx.gpu_az, ctx.region_azs, cfg.network.availability_zone_count)
        except PlacementError as err:
            ctx.subnet_azs = None
            subnet_result = CheckResult(
                FAIL, "subnet AZs", str(err), f"lower network.availabilityZoneCount in {ctx.stack_file} to at most {len(ctx.region_azs)}"
            )
        else:
            subnet_result = CheckResult(
                PASS, "subnet AZs", f"private subnets in {', '.join(ctx.subnet_azs)} (the GPU AZ {ctx.gpu_az} and {len(ctx.subnet_azs) - 1} more)"
            )
    else:
        subnet_result = CheckResult(SKIP, "subnet AZs", "not checked: no GPU AZ")

    # Every configured type offered in the region.
    users: dict[str, list[str]] = defaultdict(list)
    users[cfg.system_node_group.instance_type].append("system nodes")
    for g in cfg.gpu_node_groups:
        users[g.instance_type].append(f"GPU group {g.name}")
    for t in sorted(users):
        check = f"{t} ({', '.join(users[t])})"
        azs = ctx.offered.get(t, set())
        if not azs:
            results.append(CheckResult(FAIL, check, f"no AZ of {region} offers {t}", f"choose another instance type or region in {ctx.stack_file}"))
            continue
        if t == cfg.system_node_group.instance_type and ctx.subnet_azs:
            missing = [az for az in ctx.subnet_azs if az not in azs]
            if missing:
                results.append(
                    CheckResult(
                        FAIL,
                        check,
                        f"offered in {_list(azs)} but not in subnet AZ {', '.join(missing)}: system nodes could not start there",
                        f"set systemNodeGroup.instanceType in {ctx.stack_file} to a type offered in {', '.join(ctx.subnet_azs)}",
                    )
                )
                continue
        results.append(CheckResult(PASS, check, f"offered in {_list(azs)}"))
    return results + [az_result, subnet_result]


def _check_efa(ctx: _Context) -> list[CheckResult]:
    from infra import aws_catalog

    groups = [g for g in ctx.cfg.gpu_node_groups if g.efa_interfaces > 0]
    if not groups:
        return []
    described = aws_catalog.describe([g.instance_type for g in groups], session=ctx.session, region=ctx.cfg.region)
    results = []
    for g in groups:
        check = f"EFA for GPU group {g.name} ({g.instance_type})"
        it = described.get(g.instance_type)
        if it is None:
            results.append(
                CheckResult(
                    FAIL, check, f"EC2 DescribeInstanceTypes does not know {g.instance_type} in {ctx.cfg.region}", f"choose a type offered in {ctx.cfg.region}"
                )
            )
        elif not it.efa_supported:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"EC2 reports no EFA support for {g.instance_type}; the group would wire {g.efa_interfaces} EFA interface(s)",
                    f"set efa: false for group {g.name} in {ctx.stack_file}",
                )
            )
        elif it.efa_interfaces < g.efa_interfaces:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"the group wires {g.efa_interfaces} EFA interfaces (instance catalog) but EC2 reports at most {it.efa_interfaces} for {g.instance_type}",
                    "correct the instance catalog (facts/catalog.py) to what EC2 reports",
                )
            )
        else:
            results.append(CheckResult(PASS, check, f"EfaSupported, up to {_n(it.efa_interfaces, 'interface')}; the group wires {g.efa_interfaces}"))
    return results


class _QuotaUnreadable(Exception):
    pass


def _quota_value(sq: Any, code: str) -> tuple[float, str]:
    """The applied quota value, else AWS's default. Raises _QuotaUnreadable when the endpoint has
    neither; other AWS errors (access denied...) propagate."""
    try:
        return float(sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), "applied"
    except Exception as err:
        why = _unanswered(err)
        if why:
            raise _QuotaUnreadable(f"the endpoint {why}") from None
        if not (_is_client_error(err) and _error_code(err)[0] == "NoSuchResourceException"):
            raise
        first = "GetServiceQuota: %s: %s" % _error_code(err)
    try:
        return float(sq.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]), "AWS default"
    except Exception as err:
        why = _unanswered(err)
        if why or (_is_client_error(err) and _error_code(err)[0] == "NoSuchResourceException"):
            second = f"the endpoint {why}" if why else "%s: %s" % _error_code(err)
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
                        f"no Service Quotas code known for {family.upper()} instances; check it in the Service Quotas console",
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


def _quota_line(ctx: _Context, capacity_type: str, code: str, name: str, groups: list, blocks: list[str]) -> list[CheckResult]:
    check = f"{capacity_type} vCPU quota {code} ({name})"
    needed = sum(g.max_size * g.instance.vcpus for g in groups)
    parts = ", ".join(f"{g.name}: {g.max_size} x {g.instance.vcpus}" for g in groups)
    note = f"; capacity-block groups {', '.join(blocks)} do not count" if blocks and capacity_type == "on-demand" else ""
    try:
        value, source = _quota_value(ctx.client("service-quotas"), code)
    except _QuotaUnreadable as err:
        return [
            CheckResult(
                SKIP,
                check,
                f"the quota cannot be read here ({err}); {needed:g} vCPUs needed at maxSize ({parts}). Check it with: "
                f"aws service-quotas get-service-quota --region {ctx.cfg.region} --service-code ec2 --quota-code {code}",
            )
        ]
    if value >= needed:
        return [CheckResult(PASS, check, f"{value:g} vCPUs ({source}) covers the {needed:g} needed at maxSize ({parts}){note}")]
    short = needed - value
    return [
        CheckResult(
            FAIL,
            check,
            f"{value:g} vCPUs ({source}) but {needed:g} are needed at maxSize ({parts}){note}: short by {short:g} vCPUs",
            f"request at least {needed:g} (aws service-quotas request-service-quota-increase --region {ctx.cfg.region} "
            f"--service-code ec2 --quota-code {code} --desired-value {needed:g}) or lower maxSize in {ctx.stack_file}",
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

    failed = _guard("SageMaker training quotas", "service-quotas ListServiceQuotas", "servicequotas:ListServiceQuotas", read)
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
                    f"not listed by Service Quotas here; {count} instances needed ({parts}). Check it with: aws service-quotas list-service-quotas "
                    f"--region {cfg.region} --service-code sagemaker --query \"Quotas[?QuotaName=='{name}']\"",
                )
            )
            continue
        code, value = quotas[name]
        if value >= count:
            results.append(CheckResult(PASS, check, f"{value:g} ({source}) covers the {count} instances the SageMaker jobs use ({parts})"))
        else:
            results.append(
                CheckResult(
                    FAIL,
                    check,
                    f"{value:g} ({source}) but the SageMaker jobs use {count} instances ({parts}): short by {count - value:g}",
                    f"request at least {count} (aws service-quotas request-service-quota-increase --region {cfg.region} --service-code sagemaker "
                    f"--quota-code {code} --desired-value {count}) or lower the jobs' nodes in {ctx.stack_file}",
                )
            )
    return results


def _check_reservations(ctx: _Context) -> list[CheckResult]:
    results: list[CheckResult] = []
    for g in ctx.cfg.gpu_node_groups:
        if not g.capacity_reservation_id:
            continue
        check = f"capacity reservation {g.capacity_reservation_id} (GPU group {g.name})"
        results.extend(
            _guard(check, "ec2 DescribeCapacityReservations", "ec2:DescribeCapacityReservations", functools.partial(_reservation_line, ctx, g, check))
        )
    results += _check_capacity_offerings(ctx)
    return results


def _describe_reservation(ctx: _Context, rid: str) -> Optional[dict[str, Any]]:
    """The capacity reservation ``rid``, or None when EC2 does not know it."""
    from botocore.exceptions import ClientError

    try:
        found = ctx.client("ec2").describe_capacity_reservations(CapacityReservationIds=[rid]).get("CapacityReservations", [])
    except ClientError as err:
        code, _ = _error_code(err)
        if not code.startswith("InvalidCapacityReservationId"):
            raise
        found = []
    return found[0] if found else None


def _reservation_line(ctx: _Context, g: stack_config.GpuNodeGroupConfig, check: str, cr: Optional[dict[str, Any]] = None) -> list[CheckResult]:
    rid = g.capacity_reservation_id
    if cr is None:
        cr = _describe_reservation(ctx, rid or "")
    if cr is None:
        return [
            CheckResult(
                FAIL,
                check,
                f"does not exist in {ctx.cfg.region} for this account",
                f"check capacityReservationId of group {g.name} in {ctx.stack_file} (and that aws:region is the reservation's region)",
            )
        ]
    problems, fixes = [], []
    az, typ, state = cr.get("AvailabilityZone"), cr.get("InstanceType"), cr.get("State", "")
    kind = cr.get("ReservationType", "default")
    if typ != g.instance_type:
        problems.append(f"it reserves {typ}, the group uses {g.instance_type}")
        fixes.append(f"set instanceType: {typ} for group {g.name} or use a reservation of {g.instance_type}")
    if ctx.gpu_az is None:
        problems.append(f"it is in {az} but no GPU AZ could be chosen")
        fixes.append("fix the GPU AZ check first")
    elif az != ctx.gpu_az:
        how = "'auto' picked" if ctx.cfg.gpu_availability_zone == "auto" else "config sets"
        problems.append(f"it is in {az} but the GPU AZ is {ctx.gpu_az} ({how})")
        fixes.append(f"set {stack_config.NAMESPACE}:gpuAvailabilityZone: {az} in {ctx.stack_file} or use a reservation in {ctx.gpu_az}")
    if state in _DEAD_RESERVATION_STATES:
        problems.append(f"its state is {state}")
        fixes.append("use a reservation that is active or scheduled")
    if g.capacity_type == "capacity-block" and kind != "capacity-block":
        problems.append("it is an on-demand capacity reservation, not a capacity block")
        fixes.append(f"set capacityType: on-demand for group {g.name}")
    elif g.capacity_type != "capacity-block" and kind == "capacity-block":
        problems.append("it is a capacity block")
        fixes.append(f"set capacityType: capacity-block for group {g.name}")
    if g.capacity_type == "capacity-block" and kind == "capacity-block":
        return _capacity_block_lines(ctx, g, check, cr, problems, fixes)
    if problems:
        return [CheckResult(FAIL, check, "; ".join(problems), "; ".join(fixes))]
    count = cr.get("TotalInstanceCount")
    return [CheckResult(PASS, check, f"{kind} reservation of {count} x {typ} in {az}, {state} (group maxSize {g.max_size})")]


# ---------------------------------------------------------------------------------------------
# Capacity Blocks: the block behind a group (count, window), and offerings to buy
# ---------------------------------------------------------------------------------------------


def _utc(when: Any) -> Optional[datetime.datetime]:
    """A timestamp botocore parsed (a datetime, or text) as an aware UTC datetime."""
    if isinstance(when, str):
        try:
            when = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(when, datetime.datetime):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.astimezone(datetime.timezone.utc)


def _when(when: Optional[datetime.datetime]) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else "?"


def _capacity_block(ctx: _Context, block_id: str) -> Optional[dict[str, Any]]:
    """The Capacity Block ``block_id`` (DescribeCapacityBlocks), or None when EC2 does not list it or
    the endpoint cannot answer (the reservation's own dates then stand for the block's)."""
    try:
        blocks = _paginate(ctx.client("ec2"), "describe_capacity_blocks", "CapacityBlocks", CapacityBlockIds=[block_id])
    except Exception as err:
        if isinstance(err, NotImplementedError) or _unanswered(err) or (_is_client_error(err) and "NotFound" in _error_code(err)[0]):
            return None
        raise
    return next((b for b in blocks if b.get("CapacityBlockId") == block_id), None)


def _capacity_block_lines(
    ctx: _Context, g: stack_config.GpuNodeGroupConfig, check: str, cr: dict[str, Any], problems: list[str], fixes: list[str]
) -> list[CheckResult]:
    """A capacity-block group's block: its type, AZ and state (checked by the caller), its instance
    count against maxSize, and its window against capacity.start/end."""
    block_id = cr.get("CapacityBlockId")
    block = _capacity_block(ctx, block_id) if block_id else None
    source = block or cr
    start, end = _utc(source.get("StartDate")), _utc(source.get("EndDate"))
    count = int(cr.get("TotalInstanceCount") or 0)
    if block is not None and block.get("State") in _DEAD_RESERVATION_STATES and f"its state is {block.get('State')}" not in problems:
        problems.append(f"its capacity block {block_id} is {block.get('State')}")
        fixes.append("use a capacity block that is active or scheduled")
    warnings = []
    if count < g.max_size:
        problems.append(f"it holds {count} instances but the group scales to maxSize {g.max_size} in its window: the launches beyond {count} fail")
        fixes.append(f"set maxSize: {count} for group {g.name}")
    elif count > g.max_size:
        warnings.append(f"it holds {count} instances and the group uses at most {g.max_size}: {count - g.max_size} paid for and left idle")
    window = g.capacity_block_window
    where = f"capacity.start: {_when(start)} and capacity.end: {_when(end)}"
    if window is not None:
        want_start, want_end = (_utc(w) for w in window)
        if (want_start, want_end) != (start, end):
            problems.append(
                f"its window is {_when(start)} to {_when(end)}, the group's is {_when(want_start)} to {_when(want_end)}: the group would scale at the wrong times"
            )
            fixes.append(f"set {where} for group {g.name}")
    label = f"capacity block {block_id}" if block_id else "capacity block"
    detail = f"{label} of {count} x {cr.get('InstanceType')} in {cr.get('AvailabilityZone')}, {source.get('State') or cr.get('State')}, {_when(start)} to {_when(end)}"
    if problems:
        return [CheckResult(FAIL, check, f"{detail}: " + "; ".join(problems), "; ".join(fixes))]
    if warnings:
        return [CheckResult(WARN, check, f"{detail}: " + "; ".join(warnings), f"set maxSize: {count} for group {g.name} to use all of it")]
    if window is None:
        return [
            CheckResult(
                PASS,
                check,
                f"{detail} (group maxSize {g.max_size}); the group is sized by hand: set {where} in {ctx.stack_file} and it follows the "
                f"window by itself ({g.max_size} nodes at the start, 0 {CAPACITY_BLOCK_DRAIN_TEXT} before the end)",
            )
        ]
    return [CheckResult(PASS, check, f"{detail}, the group's window (group maxSize {g.max_size})")]


def _money(fee: Any, currency: Any) -> str:
    try:
        amount = f"{float(fee):,.2f}"
    except (TypeError, ValueError):
        amount = str(fee)
    return f"${amount} {currency}" if currency in (None, "USD") else f"{amount} {currency}"


def _offering_text(o: dict[str, Any]) -> str:
    return (
        f"{o.get('CapacityBlockOfferingId')} in {o.get('AvailabilityZone')}: {o.get('InstanceCount')} x {o.get('InstanceType')}, "
        f"{_when(_utc(o.get('StartDate')))} to {_when(_utc(o.get('EndDate')))} ({o.get('CapacityBlockDurationHours')} h), "
        f"upfront {_money(o.get('UpfrontFee'), o.get('CurrencyCode'))}"
    )


# At most this many offerings on the report line of a group.
MAX_OFFERINGS_SHOWN = 5


def _check_capacity_offerings(ctx: _Context) -> list[CheckResult]:
    """Each capacity-block group with ``capacity.offering``: the offerings EC2 has for it (with their
    upfront price), and for ``purchase: true`` the one `pulumi up` will buy, or the block it bought."""
    results: list[CheckResult] = []
    for g in ctx.cfg.gpu_node_groups:
        if g.capacity_type != "capacity-block" or g.capacity is None or g.capacity.offering is None:
            continue
        if g.capacity_block_purchase:
            check = f"capacity block purchase {g.capacity_block_purchase} (GPU group {g.name})"
            results += _guard(
                check,
                "ec2 DescribeCapacityReservations / DescribeCapacityBlockOfferings",
                "ec2:DescribeCapacityReservations and ec2:DescribeCapacityBlockOfferings",
                functools.partial(_purchase_line, ctx, g, check),
            )
        else:
            check = f"capacity block offerings (GPU group {g.name})"
            results += _guard(
                check,
                "ec2 DescribeCapacityBlockOfferings",
                "ec2:DescribeCapacityBlockOfferings",
                functools.partial(_offerings_line, ctx, g, check),
            )
    return results


def _offerings(ctx: _Context, g: stack_config.GpuNodeGroupConfig) -> list[dict[str, Any]]:
    """DescribeCapacityBlockOfferings for ``g``: maxSize instances of its type, the offering's
    duration and dates; sorted by start, then fee."""
    o = g.capacity.offering if g.capacity is not None else None
    assert o is not None
    kwargs: dict[str, Any] = {
        "InstanceType": g.instance_type,
        "InstanceCount": g.max_size,
        "CapacityDurationHours": o.duration_hours,
        "StartDateRange": o.earliest_start,
    }
    if o.latest_end is not None:
        kwargs["EndDateRange"] = o.latest_end
    found = _paginate(ctx.client("ec2"), "describe_capacity_block_offerings", "CapacityBlockOfferings", **kwargs)

    def fee(item: dict[str, Any]) -> float:
        try:
            return float(item.get("UpfrontFee") or 0)
        except ValueError:
            return 0.0

    return sorted(found, key=lambda i: (_utc(i.get("StartDate")) or datetime.datetime.max.replace(tzinfo=datetime.timezone.utc), fee(i)))


def _offerings_line(ctx: _Context, g: stack_config.GpuNodeGroupConfig, check: str) -> list[CheckResult]:
    found = _offerings(ctx, g)
    usable = [o for o in found if ctx.gpu_az is None or o.get("AvailabilityZone") == ctx.gpu_az]
    o = g.capacity.offering if g.capacity is not None else None
    assert o is not None
    asked = f"{g.max_size} x {g.instance_type} for {o.duration_hours} h from {_when(_utc(o.earliest_start))}"
    if not found:
        return [CheckResult(WARN, check, f"EC2 has no offering of {asked}", "try other dates or another duration (capacity.offering)")]
    if not usable:
        azs = sorted({str(x.get("AvailabilityZone")) for x in found})
        return [
            CheckResult(
                FAIL,
                check,
                f"EC2 offers {asked} only in {', '.join(azs)}, not in the GPU AZ {ctx.gpu_az}: a block there cannot serve the group",
                f"set {stack_config.NAMESPACE}:gpuAvailabilityZone to one of {', '.join(azs)} in {ctx.stack_file}, or try other dates",
            )
        ]
    shown = "; ".join(_offering_text(x) for x in usable[:MAX_OFFERINGS_SHOWN])
    more = f" (and {len(usable) - MAX_OFFERINGS_SHOWN} more)" if len(usable) > MAX_OFFERINGS_SHOWN else ""
    first = usable[0]
    how = (
        f"nothing is bought. To buy one with `pulumi up` (irreversible: the upfront fee is charged at once), set capacity.offering.offeringId: "
        f"{first.get('CapacityBlockOfferingId')}, capacity.start: {_when(_utc(first.get('StartDate')))}, capacity.end: "
        f"{_when(_utc(first.get('EndDate')))} and capacity.offering.purchase: true for group {g.name} (or those of another offering)"
    )
    return [CheckResult(PASS, check, f"{len(usable)} offering(s) in {ctx.gpu_az}: {shown}{more}; {how}")]


def _purchased(ctx: _Context, offering_id: str) -> Optional[dict[str, Any]]:
    """The capacity reservation the stack bought from ``offering_id`` (tagged so by the node group), if any."""
    found = _paginate(
        ctx.client("ec2"),
        "describe_capacity_reservations",
        "CapacityReservations",
        Filters=[{"Name": "tag:gputraining/capacity-block-offering", "Values": [offering_id]}],
    )
    return found[0] if found else None


def _purchase_line(ctx: _Context, g: stack_config.GpuNodeGroupConfig, check: str) -> list[CheckResult]:
    offering_id = g.capacity_block_purchase
    assert offering_id is not None
    bought = _purchased(ctx, offering_id)
    if bought is not None:
        # Bought by an earlier `pulumi up`: from now on it is the group's block.
        return _reservation_line(ctx, g, f"{check}: bought as {bought.get('CapacityReservationId')}", bought)
    match = next((o for o in _offerings(ctx, g) if o.get("CapacityBlockOfferingId") == offering_id), None)
    if match is None:
        return [
            CheckResult(
                FAIL,
                check,
                f"EC2 does not offer {offering_id} (or no longer) for {g.max_size} x {g.instance_type} at the offering's duration and dates: "
                "`pulumi up` would fail to buy it",
                "run preflight with purchase: false to list the current offerings and choose another",
            )
        ]
    problems, fixes = [], []
    if ctx.gpu_az is not None and match.get("AvailabilityZone") != ctx.gpu_az:
        problems.append(f"it is in {match.get('AvailabilityZone')} but the GPU AZ is {ctx.gpu_az}")
        fixes.append(f"set {stack_config.NAMESPACE}:gpuAvailabilityZone: {match.get('AvailabilityZone')} or choose an offering in {ctx.gpu_az}")
    window = g.capacity_block_window
    start, end = _utc(match.get("StartDate")), _utc(match.get("EndDate"))
    if window is not None and tuple(_utc(w) for w in window) != (start, end):
        problems.append(f"its window is {_when(start)} to {_when(end)}, not capacity.start/end")
        fixes.append(f"set capacity.start: {_when(start)} and capacity.end: {_when(end)} for group {g.name}")
    if problems:
        return [CheckResult(FAIL, check, f"{_offering_text(match)}: " + "; ".join(problems), "; ".join(fixes))]
    return [
        CheckResult(
            WARN,
            check,
            f"`pulumi up` WILL BUY {_offering_text(match)}. The purchase is irreversible: the fee is charged at once and never refunded",
            "go ahead only if this is the block you mean to pay for; otherwise set purchase: false",
        )
    ]


def _check_kubernetes(ctx: _Context) -> list[CheckResult]:
    version = ctx.cfg.cluster.kubernetes_version
    check = f"Kubernetes {version} offered by EKS in {ctx.cfg.region}"
    eks = ctx.client("eks")
    if not hasattr(eks, "describe_cluster_versions"):
        return [CheckResult(SKIP, check, "this botocore has no eks.describe_cluster_versions; upgrade boto3 to check")]

    def run() -> list[CheckResult]:
        items = _paginate(eks, "describe_cluster_versions", "clusterVersions", clusterVersions=[version])
        match = [i for i in items if i.get("clusterVersion") == version]
        if not match:
            offered = sorted({i.get("clusterVersion", "?") for i in _paginate(eks, "describe_cluster_versions", "clusterVersions")})
            return [
                CheckResult(
                    FAIL,
                    check,
                    f"EKS does not list {version}; it offers {_list(offered)}",
                    f"set cluster.kubernetesVersion in {ctx.stack_file} to an offered version",
                )
            ]
        ctx.eks_version = match[0]
        status = str(match[0].get("versionStatus") or match[0].get("status") or "").lower().replace("_", "-")
        if status == "unsupported":
            return [
                CheckResult(
                    FAIL, check, f"EKS lists {version} as unsupported", f"set cluster.kubernetesVersion in {ctx.stack_file} to a version in standard support"
                )
            ]
        if status == "extended-support":
            return [CheckResult(PASS, check, "offered, in extended support (billed extra per cluster hour); plan an upgrade")]
        return [CheckResult(PASS, check, f"offered ({status or 'status not reported'})")]

    return _guard(check, "eks DescribeClusterVersions", "eks:DescribeClusterVersions", run)


def _as_date(value: Any) -> Optional[datetime.date]:
    """A date from what botocore parses a timestamp into (a datetime), or an ISO date string."""
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    if isinstance(value, str):
        try:
            return datetime.date.fromisoformat(value[:10])
        except ValueError:
            return None
    return None


def support_window(version: str, today: datetime.date, ends: Optional[datetime.date] = None, stack_file: str = "Pulumi.<stack>.yaml") -> CheckResult:
    """How far the end of ``version``'s EKS standard support is: PASS when more than
    ``SUPPORT_WARNING_DAYS`` away, WARN within them, FAIL once it has come. ``ends``: the date EKS
    reports, else the one pinned in facts/versions.py."""
    from facts import versions

    check = f"EKS standard support of Kubernetes {version}"
    pinned = versions.KUBERNETES_STANDARD_SUPPORT_ENDS.get(version)
    end = ends or pinned
    if end is None:
        return CheckResult(SKIP, check, "no end date known (not in facts/versions.py KUBERNETES_STANDARD_SUPPORT_ENDS, and EKS did not say)")
    source = "EKS reports" if ends is not None else "pinned in facts/versions.py"
    if ends is not None and pinned is not None and ends != pinned:
        source += f"; facts/versions.py pins {pinned.isoformat()}: update it"
    left = (end - today).days
    bump = f"set cluster.kubernetesVersion in {stack_file} to the next minor (one facts/versions.py supports) and `pulumi up`"
    if left <= 0:
        return CheckResult(
            FAIL,
            check,
            f"ended {end.isoformat()} ({source}): with the STANDARD upgrade policy EKS upgrades the control plane to the next minor, "
            f"and `pulumi up` with {version} pinned would try to downgrade it",
            bump,
        )
    if left <= SUPPORT_WARNING_DAYS:
        return CheckResult(
            WARN,
            check,
            f"ends {end.isoformat()}, in {_n(left, 'day')} ({source}); then EKS upgrades the control plane itself and the next refreshed "
            f"`pulumi up` would try to downgrade it",
            bump + " before then",
        )
    return CheckResult(PASS, check, f"ends {end.isoformat()}, in {_n(left, 'day')} ({source})")


def _check_support_window(ctx: _Context) -> list[CheckResult]:
    ends = _as_date((ctx.eks_version or {}).get("endOfStandardSupportDate"))
    return [support_window(ctx.cfg.cluster.kubernetes_version, ctx.today, ends, ctx.stack_file)]


def _check_addons(ctx: _Context) -> list[CheckResult]:
    """Each pinned add-on build is published for the stack's Kubernetes version, and the
    configuration values the stack sends fit the build's schema."""
    from stacks.addons import addon_pins

    eks = ctx.client("eks")
    version = ctx.cfg.cluster.kubernetes_version
    results: list[CheckResult] = []
    for pin in addon_pins(ctx.cfg):
        check = f"add-on {pin.name} {pin.version}"
        results += _guard(check, "eks DescribeAddonVersions", "eks:DescribeAddonVersions", functools.partial(_addon_line, eks, pin, version, check))
        if pin.configuration_values is not None:
            check = f"add-on {pin.name} configuration values"
            results += _guard(
                check, "eks DescribeAddonConfiguration", "eks:DescribeAddonConfiguration", functools.partial(_addon_configuration_line, eks, pin, check)
            )
    return results


def _addon_line(eks: Any, pin: Any, k8s_version: str, check: str) -> list[CheckResult]:
    addons = _paginate(eks, "describe_addon_versions", "addons", addonName=pin.name, kubernetesVersion=k8s_version)
    builds = [v for a in addons if a.get("addonName") == pin.name for v in a.get("addonVersions") or []]
    names = [b.get("addonVersion", "") for b in builds]
    default = next((b.get("addonVersion") for b in builds for c in b.get("compatibilities") or [] if c.get("defaultVersion")), None)
    if pin.version in names:
        return [CheckResult(PASS, check, f"published for Kubernetes {k8s_version}" + (f" (EKS's default: {default})" if default else ""))]
    offered = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "") if names else "none"
    return [
        CheckResult(
            FAIL,
            check,
            f"EKS has no build {pin.version} of {pin.name} for Kubernetes {k8s_version} (it offers {offered})",
            "pin one it offers in facts/versions.py" + (f", e.g. EKS's default {default}" if default else ""),
        )
    ]


def _addon_configuration_line(eks: Any, pin: Any, check: str) -> list[CheckResult]:
    try:
        import jsonschema
    except ImportError:
        return [CheckResult(SKIP, check, "not checked: the jsonschema package is not installed (it comes with the dev requirements)")]
    answer = eks.describe_addon_configuration(addonName=pin.name, addonVersion=pin.version)
    schema_text = answer.get("configurationSchema") or ""
    if not schema_text:
        return [CheckResult(FAIL, check, f"{pin.name} {pin.version} takes no configuration values, but the stack sends some", "send none for this build")]
    try:
        jsonschema.validate(pin.configuration_values, json.loads(schema_text))
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        return [CheckResult(FAIL, check, f"refused by the build's schema at {where}: {_one_line(err.message, 120)}", "fix the values the component sends")]
    return [CheckResult(PASS, check, "valid for the build's configuration schema")]


def _check_placeholders(cfg: stack_config.StackConfig, stack_file: str) -> list[CheckResult]:
    """The examples' placeholders (documentation CIDRs, example accounts) the plan only warns about:
    before a real `pulumi up` each is a FAIL (no AWS call)."""
    check = "placeholders from the examples"
    found = placeholders(cfg)
    if not found:
        return [CheckResult(PASS, check, "none (no documentation CIDR, no example account)")]
    return [CheckResult(FAIL, check, f"{p.key}: {p.message}", f"replace it in {stack_file}") for p in found]


def run_checks(cfg: stack_config.StackConfig, session: Any, stack_file: Optional[str] = None, today: Optional[datetime.date] = None) -> list[CheckResult]:
    """Run every check against the account and region ``session`` reaches; one result per line.
    ``today``: the date the support window is measured from (default: today).

    AWS errors of a single call become that check's FAIL (or SKIP when the endpoint does not
    implement it); credential and connection errors (botocore's own) propagate.
    """
    stack_file = stack_file or f"Pulumi.{cfg.stack}.yaml"
    results: list[CheckResult] = _check_placeholders(cfg, stack_file)
    facts: dict[str, Any] = {}

    def region() -> list[CheckResult]:
        facts["azs"], facts["offered"] = _region_facts(cfg, session)
        return []

    results += _guard(
        f"instance type offerings in {cfg.region}",
        "ec2 DescribeInstanceTypeOfferings",
        "ec2:DescribeAvailabilityZones and ec2:DescribeInstanceTypeOfferings",
        region,
    )
    if "azs" in facts:
        ctx = _Context(cfg, session, stack_file, facts["azs"], facts["offered"])
        results += _check_placement(ctx)
    else:
        ctx = _Context(cfg, session, stack_file, [], {})
    if today is not None:
        ctx.today = today
    results += _guard("EFA support", "ec2 DescribeInstanceTypes", "ec2:DescribeInstanceTypes", lambda: _check_efa(ctx))
    results += _check_quotas(ctx)
    results += _check_sagemaker_quotas(ctx)
    results += _check_reservations(ctx)
    results += _check_kubernetes(ctx)
    results += _check_support_window(ctx)
    results += _check_addons(ctx)
    return results


# ---------------------------------------------------------------------------------------------
# Report and entry
# ---------------------------------------------------------------------------------------------


def report(results: list[CheckResult], out: TextIO) -> int:
    """Print the results, one line each, and a verdict; returns the exit code."""
    for r in results:
        out.write(r.line() + "\n")
    failed = [r for r in results if r.status == FAIL]
    skipped = sum(1 for r in results if r.status == SKIP)
    passed = sum(1 for r in results if r.status == PASS)
    warned = sum(1 for r in results if r.status == WARN)
    tail = f"{passed} checks passed, {skipped} skipped" + (f", {_n(warned, 'warning')}" if warned else "")
    if failed:
        out.write(f"Not ready: {len(failed)} check(s) failed ({tail}).\n")
        return EXIT_FAILED
    out.write(f"Ready: {tail}.\n")
    return EXIT_OK


def make_session(region: str) -> Any:
    import boto3

    return boto3.session.Session(region_name=region)


_NO_CREDENTIALS = (
    "error: no AWS credentials found; set AWS_PROFILE (and run `aws sso login` for SSO profiles) or "
    "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, then run preflight again"
)


def run_cli(
    stack: str,
    root: Optional[Path] = None,
    stdout: Optional[TextIO] = None,
    stderr: Optional[TextIO] = None,
    session_factory: Callable[[str], Any] = make_session,
) -> int:
    """The CLI: load the config like the offline plan, run the checks, print them; the exit code."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from infra.plan import load_config_for_cli

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    root = Path(root) if root is not None else PROJECT_ROOT
    cfg = load_config_for_cli(stack, root, stderr)
    if cfg is None:
        return EXIT_BAD_CONFIG

    try:
        session = session_factory(cfg.region)
        identity = session.client("sts", region_name=cfg.region).get_caller_identity()
        stdout.write(f"Preflight of {cfg.project}/{cfg.stack}: account {identity.get('Account')} as {identity.get('Arn')}, region {cfg.region}\n")
        results = run_checks(cfg, session, f"Pulumi.{stack}.yaml")
    except NoCredentialsError:
        print(_NO_CREDENTIALS, file=stderr)
        return EXIT_FAILED
    except ClientError as err:  # the credentials were refused (expired, invalid)
        code, message = _error_code(err)
        print(f"error: AWS refused the credentials ({code}: {message}); refresh them and run preflight again", file=stderr)
        return EXIT_FAILED
    except BotoCoreError as err:  # partial credentials, unknown profile, endpoint unreachable...
        print(f"error: cannot reach AWS: {_one_line(err, 300)}", file=stderr)
        return EXIT_FAILED
    return report(results, stdout)
