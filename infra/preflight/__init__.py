"""Preflight: check the target AWS account and region before anything is created.

    python -m infra preflight --stack dev [--config-file PATH]

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
- EKS's quota of nodes per managed node group (L-BD136A63, 450 by default) holds every group's maxSize;
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

The checks live in this package's modules, run in that order by ``run_checks``: ``placement``
(types, AZs, EFA), ``quotas`` (EC2 vCPUs, SageMaker), ``capacity`` (reservations, Capacity Blocks,
offerings) and ``eks`` (version, support window, add-ons); ``results`` turns AWS's answers into
report lines.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from facts.paths import PROJECT_ROOT
from infra.preflight.capacity import MAX_OFFERINGS_SHOWN, _check_reservations
from infra.preflight.eks import (
    SUPPORT_WARNING_DAYS,
    _check_addons,
    _check_kubernetes,
    _check_support_window,
    support_window,
)
from infra.preflight.eks import _addon_configuration_line as _addon_configuration_line  # the tests call it here
from infra.preflight.placement import _check_efa, _check_placement, _region_facts
from infra.preflight.quotas import (
    QUOTAS,
    _check_node_group_count,
    _check_node_group_sizes,
    _check_quotas,
    _check_sagemaker_quotas,
    sagemaker_quota_name,
)
from infra.preflight.results import FAIL, PASS, SKIP, WARN, CheckResult, _error_code, _guard, _n, _one_line
from stacks import config as stack_config
from stacks.config.placeholders import placeholders

__all__ = [
    "EXIT_BAD_CONFIG",
    "EXIT_FAILED",
    "EXIT_OK",
    "FAIL",
    "MAX_OFFERINGS_SHOWN",
    "PASS",
    "QUOTAS",
    "SKIP",
    "SUPPORT_WARNING_DAYS",
    "WARN",
    "CheckResult",
    "current_date",
    "make_session",
    "report",
    "run_checks",
    "run_cli",
    "sagemaker_quota_name",
    "support_window",
]

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


def current_date() -> datetime.date:
    """The date the support window is measured from (a function, so tests can fix it)."""
    return datetime.date.today()


@dataclass
class _Context:
    """What the checks share: the config, the AWS session, the region's facts, and what earlier
    checks found (the GPU AZ, the subnet AZs, EKS's answer about the version)."""

    cfg: stack_config.StackConfig
    session: Any
    stack_file: str
    region_azs: list[str]
    offered: dict[str, set[str]]  # type -> AZs of the region offering it
    gpu_az: str | None = None
    subnet_azs: list[str] | None = None
    today: datetime.date = field(default_factory=lambda: current_date())
    # What EKS's DescribeClusterVersions said of the configured version, when it answered.
    eks_version: dict[str, Any] | None = None

    clients: dict[str, Any] = field(default_factory=dict)  # one boto3 client per service, made on first use

    def client(self, service: str) -> Any:
        if service not in self.clients:
            self.clients[service] = self.session.client(service, region_name=self.cfg.region)
        return self.clients[service]


def _check_placeholders(cfg: stack_config.StackConfig, stack_file: str) -> list[CheckResult]:
    """The examples' placeholders (documentation CIDRs, example accounts) the plan only warns about:
    before a real `pulumi up` each is a FAIL (no AWS call)."""
    check = "placeholders from the examples"
    found = placeholders(cfg)
    if not found:
        return [CheckResult(PASS, check, "none (no documentation CIDR, no example account)")]
    return [CheckResult(FAIL, check, f"{p.key}: {p.message}", f"replace it in {stack_file}") for p in found]


def offline_checks(cfg: stack_config.StackConfig, stack_file: str) -> list[CheckResult]:
    """The checks that need no AWS call: the CLI prints them before it asks AWS anything, so they
    show even without credentials."""
    return _check_placeholders(cfg, stack_file)


def run_checks(
    cfg: stack_config.StackConfig,
    session: Any,
    stack_file: str | None = None,
    today: datetime.date | None = None,
    *,
    offline: bool = True,
) -> list[CheckResult]:
    """Run every check against the account and region ``session`` reaches; one result per line.
    ``today``: the date the support window is measured from (default: today).

    AWS errors of a single call become that check's FAIL (or SKIP when the endpoint does not
    implement it); credential and connection errors (botocore's own) propagate. ``offline``: begin
    with ``offline_checks`` (the CLI runs those first, on their own).
    """
    stack_file = stack_file or f"Pulumi.{cfg.stack}.yaml"
    results: list[CheckResult] = offline_checks(cfg, stack_file) if offline else []
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
    results += _check_node_group_sizes(ctx)
    results += _check_node_group_count(ctx)
    results += _check_sagemaker_quotas(ctx)
    results += _check_reservations(ctx)
    results += _check_kubernetes(ctx)
    results += _check_support_window(ctx)
    results += _check_addons(ctx)
    return results


# ---------------------------------------------------------------------------------------------
# Report and entry
# ---------------------------------------------------------------------------------------------


def report(results: list[CheckResult], out: TextIO, shown: int = 0) -> int:
    """Print the results, one line each (but the first ``shown``, printed already), and a verdict;
    returns the exit code."""
    for r in results[shown:]:
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
    root: Path | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    session_factory: Callable[[str], Any] = make_session,
    stack_file: str | Path | None = None,
) -> int:
    """The CLI: load the config like the offline plan, run the checks, print them; the exit code.
    ``stack_file``: the stack's config from that file instead of ``Pulumi.<stack>.yaml`` in ``root``
    (``--config-file``, read by the plan's reader)."""
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from infra.plan import load_config_for_cli

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    root = Path(root) if root is not None else PROJECT_ROOT
    cfg = load_config_for_cli(stack, root, stderr, Path(stack_file) if stack_file is not None else None)
    if cfg is None:
        return EXIT_BAD_CONFIG

    stack_file = str(stack_file) if stack_file is not None else f"Pulumi.{stack}.yaml"
    stdout.write(f"Preflight of {cfg.project}/{cfg.stack}, region {cfg.region}\n")
    first = offline_checks(cfg, stack_file)  # before any AWS call: they show without credentials too
    for r in first:
        stdout.write(r.line() + "\n")
    try:
        session = session_factory(cfg.region)
        identity = session.client("sts", region_name=cfg.region).get_caller_identity()
        stdout.write(f"AWS account {identity.get('Account')} as {identity.get('Arn')}\n")
        results = first + run_checks(cfg, session, stack_file, offline=False)
    except NoCredentialsError:
        failed = sum(1 for r in first if r.status == FAIL)
        print(_NO_CREDENTIALS + (f" ({_n(failed, 'check')} above failed already)" if failed else ""), file=stderr)
        return EXIT_FAILED
    except ClientError as err:  # the credentials were refused (expired, invalid)
        code, message = _error_code(err)
        print(
            f"error: AWS refused the credentials ({code}: {message}); refresh them and run preflight again", file=stderr
        )
        return EXIT_FAILED
    except BotoCoreError as err:  # partial credentials, unknown profile, endpoint unreachable...
        print(f"error: cannot reach AWS: {_one_line(err, 300)}", file=stderr)
        return EXIT_FAILED
    return report(results, stdout, shown=len(first))
