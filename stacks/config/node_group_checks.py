"""The node groups' checks, for ``check_all`` (``stacks/config/cross_checks.py``): the system group's
type and sizes; each GPU group's name, type, EFA and sizes, its capacity (reservations, Capacity
Blocks with their window, offering and purchase, spot), its placement group, labels and taints.

Each appends a ``Problem`` naming the config key, the bad value and what is allowed.
"""

from __future__ import annotations

import re

from facts import aws_names, catalog, instance_types
from facts.kube import BURN_IN_TAINT, GPU_TAINT
from facts.problems import Problem, entry_keys
from facts.problems import fmt as _fmt
from stacks.config.capacity_checks import check_capacity
from stacks.config.models import NAMESPACE, GpuNodeGroupConfig, SystemNodeGroupConfig


def _check_scaling(k: str, min_size: int, desired: int, max_size: int, problems: list[Problem]) -> None:
    if min_size > max_size:
        problems.append(Problem(f"{k}.minSize", f"{min_size} is greater than maxSize {max_size}"))
    elif not min_size <= desired <= max_size:
        problems.append(Problem(f"{k}.desiredSize", f"{desired} is outside minSize..maxSize ({min_size}..{max_size})"))


def _check_system(s: SystemNodeGroupConfig, problems: list[Problem]) -> None:
    k = f"{NAMESPACE}:systemNodeGroup"
    it = catalog.get(s.instance_type)
    if it is None:
        problems.append(
            Problem(
                f"{k}.instanceType",
                f"{_fmt(s.instance_type)} is not in the instance catalog; use one of {', '.join(catalog.SYSTEM_TYPES)}",
            )
        )
    elif it.is_gpu:
        problems.append(
            Problem(
                f"{k}.instanceType",
                f"{_fmt(s.instance_type)} is a GPU type; system nodes use one of {', '.join(catalog.SYSTEM_TYPES)}",
            )
        )
    _check_scaling(k, s.min_size, s.desired_size, s.max_size, problems)
    if s.min_size < 1:
        problems.append(
            Problem(
                f"{k}.minSize",
                f"{s.min_size} is not allowed: at least 1 (CoreDNS, the operators, etcd and the CSI controllers run on "
                "system nodes)",
            )
        )


_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
RESERVED_LABEL_DOMAINS = ("kubernetes.io", "k8s.io", "eks.amazonaws.com")


def _reserved_label(key: str) -> bool:
    """Labels in these domains (or their subdomains) are refused by kubelet or owned by EKS."""
    if "/" not in key:
        return False
    domain = key.split("/", 1)[0]
    return any(domain == d or domain.endswith("." + d) for d in RESERVED_LABEL_DOMAINS)


def _check_gpu_groups(groups: list[GpuNodeGroupConfig | None], burn_in: bool, problems: list[Problem]) -> None:
    """Every GPU group's checks; ``burn_in``: the stack's burnIn.enabled (a group's burnIn overrides it)."""
    base = f"{NAMESPACE}:gpuNodeGroups"
    seen: dict[str, int] = {}
    keys = entry_keys(base, [g.name if g is not None else None for g in groups])
    for i, (k, g) in enumerate(zip(keys, groups, strict=True)):
        if g is None:
            continue
        _check_group_name(k, i, g, seen, problems)
        it = _check_group_type(k, g, problems)
        _check_scaling(k, g.min_size, g.desired_size, g.max_size, problems)
        _check_reservation_required(k, g, problems)
        check_capacity(k, g, it, problems)
        _check_reservation_id(k, g, problems)
        _check_autoscale(k, g, problems)
        _check_spot(k, g, problems)
        _check_placement_group(k, g, problems)
        _check_labels(k, g, problems)
        _check_taints(k, g, problems)
        _check_taint_count(k, g, burn_in if g.burn_in is None else g.burn_in, problems)


def _check_group_name(k: str, i: int, g: GpuNodeGroupConfig, seen: dict[str, int], problems: list[Problem]) -> None:
    """A valid node group name, unique among the groups (``seen`` maps the names so far to their index)."""
    if not _K8S_NAME.match(g.name) or len(g.name) > 32:
        problems.append(
            Problem(
                f"{k}.name",
                f"{_fmt(g.name)} is not allowed: lower-case letters, digits and '-', starting and ending with a letter "
                "or digit, at most 32 characters",
            )
        )
    if g.name in seen:
        problems.append(
            Problem(
                f"{k}.name",
                f"{_fmt(g.name)} is used by gpuNodeGroups[{seen[g.name]}] too; node group names must be unique",
            )
        )
    else:
        seen[g.name] = i


def _check_group_type(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> instance_types.InstanceType | None:
    """A GPU type of the catalog, not refused, with EFA if the group asks for it; returns the type's catalog entry."""
    it = catalog.get(g.instance_type)
    refused = catalog.refusal(g.instance_type)
    if refused is not None:
        problems.append(Problem(f"{k}.instanceType", refused))
    elif it is None or not it.is_gpu:
        problems.append(
            Problem(
                f"{k}.instanceType",
                f"{_fmt(g.instance_type)} is not a GPU type in the instance catalog; use one of "
                f"{', '.join(catalog.GPU_TYPES)}",
            )
        )
    elif g.efa and not it.efa_supported:
        efa_types = ", ".join(t for t in catalog.GPU_TYPES if catalog.BUILTIN[t].efa_supported)
        problems.append(
            Problem(f"{k}.efa", f"true is not allowed: {g.instance_type} has no EFA; EFA types are {efa_types}")
        )
    return it


def _check_reservation_required(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    if (
        g.capacity_type == "capacity-block"
        and not g.capacity_reservation_id
        and (g.capacity is None or g.capacity.offering is None)
    ):
        problems.append(
            Problem(
                f"{k}.capacityReservationId",
                "is required with capacityType 'capacity-block' (the cr-... id of the block), unless "
                "capacity.offering looks for one to buy",
            )
        )


def _check_reservation_id(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    if g.capacity_reservation_id and not re.fullmatch(r"cr-[0-9a-f]{8,17}", g.capacity_reservation_id):
        problems.append(
            Problem(
                f"{k}.capacityReservationId",
                f"{_fmt(g.capacity_reservation_id)} is not a capacity reservation id like cr-0123456789abcdef0",
            )
        )


def _check_autoscale(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    if g.capacity_type == "capacity-block" and g.autoscale:
        problems.append(
            Problem(
                f"{k}.autoscale",
                "true is not allowed with capacityType 'capacity-block': outside the block's window every launch "
                "fails and the autoscaler backs off again and again, and EKS needs the group at desired size 0 before "
                "an upgrade. Leave it out (false is the default here) and give the block's window as capacity.start "
                "and capacity.end (the group then scales itself), or set desiredSize to the block's instance count "
                "for its window, 0 after",
            )
        )


def _check_spot(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    if g.capacity_type == "spot" and g.capacity_reservation_id:
        problems.append(Problem(f"{k}.capacityReservationId", "cannot be used with capacityType 'spot'"))


def _check_placement_group(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    pg = g.placement_group
    if pg is None:
        return
    if pg.mode == "existing" and not pg.name:
        problems.append(Problem(f"{k}.placementGroup.name", "is required with mode 'existing'"))
    if pg.mode != "existing" and pg.name:
        problems.append(
            Problem(
                f"{k}.placementGroup.name", f"{_fmt(pg.name)} is only used with mode 'existing' (mode is {pg.mode!r})"
            )
        )
    if pg.mode == "create" and (g.capacity_reservation_id or g.capacity_type == "capacity-block"):
        problems.append(
            Problem(
                f"{k}.placementGroup.mode",
                "'create' cannot be combined with a capacity reservation/block; use 'none' or the reservation's own "
                "placement group with 'existing'",
            )
        )


def _check_labels(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    for lk, lv in g.labels.items():
        if not _LABEL_KEY.match(lk) or _reserved_label(lk):
            problems.append(
                Problem(
                    f"{k}.labels.{lk}",
                    f"{_fmt(lk)} is not an allowed label key (a valid Kubernetes label key outside the kubernetes.io, "
                    "k8s.io and eks.amazonaws.com domains)",
                )
            )
        if not _LABEL_VALUE.match(lv):
            problems.append(Problem(f"{k}.labels.{lk}", f"{_fmt(lv)} is not a valid Kubernetes label value"))


def stack_taints(burn_in: bool) -> list[dict[str, str]]:
    """The taints the stack puts on a GPU group's nodes besides the config's ``taints``: the GPU taint
    (components/node_group.py) and, with burn-in, its startup taint (stacks/environment.py)."""
    return [GPU_TAINT, *([BURN_IN_TAINT] if burn_in else [])]


def _check_taint_count(k: str, g: GpuNodeGroupConfig, burn_in: bool, problems: list[Problem]) -> None:
    """EKS takes at most 50 taints per node group (aws_names.EKS_NODEGROUP_TAINTS_MAX), the stack's own among them."""
    ours = stack_taints(burn_in)
    room = aws_names.EKS_NODEGROUP_TAINTS_MAX - len(ours)
    if len(g.taints) > room:
        named = "the GPU taint" + (", and burn-in's startup taint" if burn_in else "")
        problems.append(
            Problem(
                f"{k}.taints",
                f"{len(g.taints)} taints are too many: EKS allows {aws_names.EKS_NODEGROUP_TAINTS_MAX} per node group "
                f"and the stack adds {len(ours)} ({named}); at most {room}",
            )
        )


def _check_taints(k: str, g: GpuNodeGroupConfig, problems: list[Problem]) -> None:
    taint_at: dict[tuple[str, str], int] = {}
    for j, t in enumerate(g.taints):
        if (t.key, t.effect) in taint_at:
            problems.append(
                Problem(
                    f"{k}.taints[{j}]",
                    f"{t.key!r} with effect {t.effect} is taints[{taint_at[t.key, t.effect]}] already; a key has one "
                    "taint per effect",
                )
            )
        taint_at.setdefault((t.key, t.effect), j)
        if not _LABEL_KEY.match(t.key) or _reserved_label(t.key):
            problems.append(
                Problem(
                    f"{k}.taints[{j}].key",
                    f"{_fmt(t.key)} is not an allowed taint key (a valid Kubernetes key outside the kubernetes.io, "
                    "k8s.io and eks.amazonaws.com domains)",
                )
            )
        if not _LABEL_VALUE.match(t.value):
            problems.append(
                Problem(
                    f"{k}.taints[{j}].value",
                    f"{_fmt(t.value)} is not a valid taint value (up to 63 letters, digits, '-', '_', '.')",
                )
            )
        if t.key == GPU_TAINT["key"]:
            problems.append(
                Problem(
                    f"{k}.taints[{j}].key",
                    f"{GPU_TAINT['key']!r} is set on every GPU group already; list only extra taints",
                )
            )
