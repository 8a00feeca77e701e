"""Preflight's EKS checks: the Kubernetes version offered in the region, how far the end of its
standard support is, and every pinned managed add-on build published for it, with the
configuration values the stack sends valid for the build's schema.
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import TYPE_CHECKING, Any

from infra.preflight.results import FAIL, PASS, SKIP, WARN, CheckResult, _guard, _list, _n, _one_line, _paginate

if TYPE_CHECKING:
    from infra.preflight import _Context

# How long before the end of the pinned Kubernetes version's EKS standard support preflight warns:
# enough for a version bump through a pull request and a deploy (facts/versions.py has the dates).
SUPPORT_WARNING_DAYS = 60


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
            offered = sorted(
                {i.get("clusterVersion", "?") for i in _paginate(eks, "describe_cluster_versions", "clusterVersions")}
            )
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
                    FAIL,
                    check,
                    f"EKS lists {version} as unsupported",
                    f"set cluster.kubernetesVersion in {ctx.stack_file} to a version in standard support",
                )
            ]
        if status == "extended-support":
            return [
                CheckResult(
                    PASS, check, "offered, in extended support (billed extra per cluster hour); plan an upgrade"
                )
            ]
        return [CheckResult(PASS, check, f"offered ({status or 'status not reported'})")]

    return _guard(check, "eks DescribeClusterVersions", "eks:DescribeClusterVersions", run)


def _as_date(value: Any) -> datetime.date | None:
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


def support_window(
    version: str, today: datetime.date, ends: datetime.date | None = None, stack_file: str = "Pulumi.<stack>.yaml"
) -> CheckResult:
    """How far the end of ``version``'s EKS standard support is: PASS when more than
    ``SUPPORT_WARNING_DAYS`` away, WARN within them, FAIL once it has come. ``ends``: the date EKS
    reports, else the one pinned in facts/versions.py."""
    from facts import versions

    check = f"EKS standard support of Kubernetes {version}"
    pinned = versions.KUBERNETES_STANDARD_SUPPORT_ENDS.get(version)
    end = ends or pinned
    if end is None:
        return CheckResult(
            SKIP,
            check,
            "no end date known (not in facts/versions.py KUBERNETES_STANDARD_SUPPORT_ENDS, and EKS did not say)",
        )
    source = "EKS reports" if ends is not None else "pinned in facts/versions.py"
    if ends is not None and pinned is not None and ends != pinned:
        source += f"; facts/versions.py pins {pinned.isoformat()}: update it"
    left = (end - today).days
    bump = (
        f"set cluster.kubernetesVersion in {stack_file} to the next minor "
        "(one facts/versions.py supports) and `pulumi up`"
    )
    if left <= 0:
        return CheckResult(
            FAIL,
            check,
            f"ended {end.isoformat()} ({source}): with the STANDARD upgrade policy "
            "EKS upgrades the control plane to the next minor, "
            f"and `pulumi up` with {version} pinned would try to downgrade it",
            bump,
        )
    if left <= SUPPORT_WARNING_DAYS:
        return CheckResult(
            WARN,
            check,
            f"ends {end.isoformat()}, in {_n(left, 'day')} ({source}); then EKS "
            "upgrades the control plane itself and the next refreshed "
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
        results += _guard(
            check,
            "eks DescribeAddonVersions",
            "eks:DescribeAddonVersions",
            functools.partial(_addon_line, eks, pin, version, check),
        )
        if pin.configuration_values is not None:
            check = f"add-on {pin.name} configuration values"
            results += _guard(
                check,
                "eks DescribeAddonConfiguration",
                "eks:DescribeAddonConfiguration",
                functools.partial(_addon_configuration_line, eks, pin, check),
            )
    return results


def _addon_line(eks: Any, pin: Any, k8s_version: str, check: str) -> list[CheckResult]:
    addons = _paginate(eks, "describe_addon_versions", "addons", addonName=pin.name, kubernetesVersion=k8s_version)
    builds = [v for a in addons if a.get("addonName") == pin.name for v in a.get("addonVersions") or []]
    names = [b.get("addonVersion", "") for b in builds]
    default = next(
        (b.get("addonVersion") for b in builds for c in b.get("compatibilities") or [] if c.get("defaultVersion")), None
    )
    if pin.version in names:
        return [
            CheckResult(
                PASS,
                check,
                f"published for Kubernetes {k8s_version}" + (f" (EKS's default: {default})" if default else ""),
            )
        ]
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
        return [
            CheckResult(
                SKIP, check, "not checked: the jsonschema package is not installed (it comes with the dev requirements)"
            )
        ]
    answer = eks.describe_addon_configuration(addonName=pin.name, addonVersion=pin.version)
    schema_text = answer.get("configurationSchema") or ""
    if not schema_text:
        return [
            CheckResult(
                FAIL,
                check,
                f"{pin.name} {pin.version} takes no configuration values, but the stack sends some",
                "send none for this build",
            )
        ]
    try:
        jsonschema.validate(pin.configuration_values, json.loads(schema_text))
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        return [
            CheckResult(
                FAIL,
                check,
                f"refused by the build's schema at {where}: {_one_line(err.message, 120)}",
                "fix the values the component sends",
            )
        ]
    return [CheckResult(PASS, check, "valid for the build's configuration schema")]
