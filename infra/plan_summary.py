"""The text the offline plan prints (``python -m infra plan``): a summary a reviewer reads in one
screen, and with ``--verbose`` the detail behind each part.

The summary, in order: the stack and its GPU AZ (a move of it, and what a running stack's API would
refuse, in capitals); the node groups, with what a Capacity Block group buys; what the plan creates,
counted per component (per type with ``--verbose``); the Kubernetes objects, counted the way
``python -m infra diff`` counts them (the objects the stack declares and those its Helm releases
render, infra/diff/plans.py); one line per GPU job (infra/plan_jobs.py); the estimated time of a
first `pulumi up`; the hourly cost; and what `pulumi destroy` would do (infra/teardown.py).
``--verbose`` adds the resources per type, each Helm release's objects by kind, each job's hang
detection and checkpoints, the queue table (stacks/queues) and the cost's notes and exclusions in
full. The warnings, the invariants and the API checks follow the summary (infra/plan.py)."""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from collections.abc import Sequence

from components import node_scaling
from facts import catalog, instance_types, versions
from infra import critical_path, offline, plan_fleet, plan_jobs, releases, teardown
from infra.diff.plans import manifest_key
from stacks import alerts, cost, fleet, fleet_jobs, queues
from stacks import config as stack_config

VERBOSE_HINT = (
    "More with --verbose: resources per type, Helm releases by kind, queue table, jobs' hang detection and checkpoints"
)
# Package of a resource type -> how the summary names it ("aws:ec2/vpc:Vpc" -> AWS).
_PACKAGES = {"aws": "AWS", "kubernetes": "Kubernetes", "pulumi": "Pulumi provider", "pulumi-python": "dynamic"}
_WIDTH = 120  # the summary's lines that list things wrap at this width


def summary(
    cfg: stack_config.StackConfig,
    result: offline.PlanResult,
    rendered: releases.Rendered | None = None,
    verbose: bool = False,
    fleet_workers: Sequence[fleet.WorkerSupply] | None = None,
) -> str:
    lines = [
        f"Stack {cfg.project}/{cfg.stack} in {cfg.region}: cluster {cfg.cluster_name}, Kubernetes "
        f"{cfg.cluster.kubernetes_version}"
    ]
    lines += gpu_az_lines(cfg, result)
    lines += refused_lines(result)
    lines += ["", *node_group_lines(cfg)]
    lines += ["", *resource_lines(result.records, verbose)]
    lines += kubernetes_lines(result, rendered, verbose)
    lines += plan_jobs.lines(cfg, result.records, verbose)
    lines += plan_fleet.lines(cfg, result.outputs)
    lines += fleet_jobs.lines(cfg, fleet_workers)
    lines += alerts.dashboard_lines(cfg)
    queue_plan = queues.plan_for(cfg) if verbose else None
    if queue_plan is not None:
        lines += ["", queues.describe(queue_plan, versions.KUEUE_VERSION).rstrip("\n")]
    lines += ["", critical_path.describe(critical_path.estimate(result.records)).rstrip("\n")]
    lines += ["", *cost_lines(cfg, verbose)]
    lines.append(teardown.describe(result.records).rstrip("\n"))
    if not verbose:
        lines.append(VERBOSE_HINT)
    return "\n".join(lines) + "\n"


def node_group_lines(cfg: stack_config.StackConfig) -> list[str]:
    """One line per GPU group (and what a capacity-block group buys and when it runs), then the system group."""
    lines = ["GPU node groups:"]
    if not cfg.gpu_node_groups:
        lines.append("  (none)")
    for g in cfg.gpu_node_groups:
        it = g.instance
        efa = (
            f"{g.efa_interfaces} EFA interface{'s' if g.efa_interfaces != 1 else ''}"
            if g.efa_interfaces
            else ("EFA off" if it.efa_supported else "no EFA")
        )
        efa_cards = [slot.card for slot in instance_types.efa_layout(it) if slot.is_efa] if g.efa_interfaces else []
        if efa_cards and 0 not in efa_cards:
            efa += f" (cards {min(efa_cards)}-{max(efa_cards)}; card 0 ENA only)"
        lines.append(
            f"  {g.name:<12} {g.instance_type:<15} {it.gpus} x {it.gpu_model} {it.gpu_memory_mib // 1024} GiB, {efa}, "
            f"nodes {g.min_size}/{g.desired_size}/{g.max_size} (min/desired/max), {g.capacity_type}, placement "
            f"{g.placement.mode}"
        )
        lines += [f"  {'':<12} {line}" for line in capacity_lines(g)]
    s = cfg.system_node_group
    sys_it = catalog.get(s.instance_type)
    lines.append(
        f"System node group: {s.instance_type} ({sys_it.summary() if sys_it else '?'}), nodes "
        f"{s.min_size}/{s.desired_size}/{s.max_size}"
    )
    return lines


def wrapped(first: str, items: Sequence[str], indent: str = "  ", sep: str = ", ") -> list[str]:
    """``first`` then ``items`` joined by ``sep``, on as few lines of at most _WIDTH characters as
    they fit; a line after the first starts with ``indent``."""
    out: list[str] = []
    line = first
    for i, item in enumerate(items):
        joiner = "" if i == 0 or not line.strip() else sep
        if line.strip() and len(line) + len(joiner) + len(item) > _WIDTH:
            out.append(line + joiner.rstrip())
            line = indent + item
        else:
            line += joiner + item
    return [*out, line]


def by_component(records: Sequence[offline.Record]) -> OrderedDict[str, Counter[str]]:
    """Per top-level resource ("Network network", "Namespace training-namespace"): the types of the
    cloud/Kubernetes resources in its tree, itself included when it is one (components are not counted)."""
    top_of: dict[tuple[str, str], str] = {}
    out: OrderedDict[str, Counter[str]] = OrderedDict()
    for r in records:
        if r.parent is None:
            top = f"{r.type.split(':')[-1]} {r.name}"
        else:
            top = top_of.get((r.parent["type"], r.parent["name"]), "?")
        top_of[(r.type, r.name)] = top
        counts = out.setdefault(top, Counter())
        if r.custom:
            counts[r.type] += 1
    return OrderedDict((top, counts) for top, counts in out.items() if counts)


def resource_lines(records: Sequence[offline.Record], verbose: bool = False) -> list[str]:
    """What the plan creates: the count, by package, then per top-level component (per type with ``verbose``)."""
    custom = [r for r in records if r.custom]
    packages = Counter(_PACKAGES.get(r.type.split(":", 1)[0], r.type.split(":", 1)[0]) for r in custom)
    split = ", ".join(
        f"{n} {p}{'s' if n != 1 and p.endswith('provider') else ''}"
        for p, n in sorted(packages.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    groups = by_component(records)
    lines = [
        f"Resources: {len(custom)} cloud/Kubernetes resources ({split}) and {len(records) - len(custom)} components; "
        "per component:"
    ]
    if not verbose:
        return lines + wrapped("  ", [f"{top.split(' ', 1)[1]} {sum(c.values())}" for top, c in groups.items()])
    for top, counts in groups.items():
        lines.append(f"  {top}: {sum(counts.values())}")
        lines += [f"      {n:>3} {typ}" for typ, n in sorted(counts.items())]
    return lines


def kubernetes_lines(
    result: offline.PlanResult, rendered: releases.Rendered | None, verbose: bool = False
) -> list[str]:
    """The Kubernetes objects `pulumi up` puts in the cluster, counted as `python -m infra diff`
    counts them (by apiVersion, kind, namespace and name, over manifests.yaml and releases.yaml):
    those the stack declares and those its Helm releases render."""
    declared = result.kubernetes_objects()
    if rendered is None or rendered.note:
        note = f"; Helm releases not counted: {rendered.note}" if rendered is not None else ""
        return [f"Kubernetes objects: {len(declared)} declared{note}"]
    total = len({manifest_key(m) for m in declared + rendered.objects})
    releases_count = len(rendered.per_release)
    head = (
        f"Kubernetes objects: {total} ({len(declared)} declared, {len(rendered.objects)} from {releases_count} Helm "
        f"release{'s' if releases_count != 1 else ''}"
    )
    if verbose:
        return [head + ")", *(release_line(name, objects) for name, objects in rendered.per_release.items())]
    items = [f"{name} {len(objects)}" for name, objects in rendered.per_release.items()]
    if not items:
        return [head + ")"]
    return wrapped(head + ": ", [*items[:-1], items[-1] + ")"], indent="    ")


def release_line(name: str, objects: list[str]) -> str:
    """One Helm release in the summary: how many objects it installs, by kind (most first); the
    objects by name are in releases.yaml."""
    kinds = Counter(o.split("/", 1)[0] for o in objects)
    by_kind = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"  Helm release {name} installs {len(objects)}: {by_kind}"


def _short(omitted: str) -> str:
    """An excluded cost by its name: "EFS storage: what is stored (...)" -> "EFS storage"."""
    text = omitted
    while (shorter := re.sub(r" ?\([^()]*\)", "", text)) != text:  # the innermost parentheses first
        text = shorter
    return text.split(":", 1)[0]


def cost_lines(cfg: stack_config.StackConfig, verbose: bool = False) -> list[str]:
    """The hourly cost (stacks/cost.py): the total, one line per item and each note; what it leaves
    out in one line by name (in full with ``verbose``, and in cost.json)."""
    estimate = cost.estimate(cfg)
    lines = cost.describe(estimate).rstrip("\n").splitlines()
    if verbose or not estimate.omitted:
        return lines
    kept = [line for line in lines if not line.startswith("  not counted: ")]
    names = [_short(o) for o in estimate.omitted]
    return kept + wrapped("  not counted (billed by use; in full: --verbose, cost.json): ", names, indent="    ")


def gpu_az_lines(cfg: stack_config.StackConfig, result: offline.PlanResult) -> list[str]:
    """The GPU AZ and how it was chosen; when it moves away from where the deployed stack has its
    GPU subnet (the engine's simulated deployed stack; none by default), a line in capitals."""
    from stacks.placement import az_move_warning, gpu_subnet_tags

    gpu_az, subnet_azs = result.outputs.get("gpuAvailabilityZone"), result.outputs.get("availabilityZones", [])
    deployed = sorted({s.availability_zone for s in result.deployed.find(gpu_subnet_tags(cfg))})
    auto = cfg.gpu_availability_zone == "auto"
    how = "chosen automatically" if auto else "from config"
    if gpu_az in deployed:
        how = (
            "kept by 'auto': this stack's GPU subnet is there"
            if auto
            else "from config; this stack's GPU subnet is there"
        )
    lines = [f"GPU availability zone: {gpu_az} ({how}); subnet AZs: {', '.join(subnet_azs)}"]
    if deployed and gpu_az not in deployed:
        lines.append(f"MOVE: {az_move_warning(deployed, str(gpu_az), subnet_azs)}")
    return lines


def refused_lines(result: offline.PlanResult) -> list[str]:
    """Of a running stack (the engine's simulated deployed stack; none by default): each change its
    `pulumi up` would send that the API refuses (infra/diff/refusals.py), a line in capitals."""
    if not result.deployed.resources:
        return []
    from infra.diff import refusals

    found = refusals.of_records(list(result.deployed.resources), [r.as_json() for r in result.records])
    return [f"REFUSED: {r.line()}" for r in found]


def capacity_lines(g: stack_config.GpuNodeGroupConfig) -> list[str]:
    """What a capacity-block group's block does, in words: the purchase above all (it costs money
    the moment `pulumi up` runs and cannot be undone)."""
    if g.capacity_type != "capacity-block":
        return []
    out = []
    offering = g.capacity.offering if g.capacity is not None else None
    if g.capacity_block_purchase:
        out.append(
            f"PURCHASE: `pulumi up` BUYS Capacity Block offering {g.capacity_block_purchase} ({g.max_size} x "
            f"{g.instance_type}): irreversible, its upfront fee is charged at once and never refunded (preflight shows "
            "the fee)"
        )
    elif g.awaiting_capacity_block:
        out.append(
            "no capacity block yet: the group is not built; preflight lists the offerings (capacity.offering), "
            "nothing is bought"
        )
    elif offering is not None:
        out.append("capacity.offering is looked up by preflight only: nothing is bought (purchase is false)")
    window = g.capacity_block_window
    if window is not None:
        out += _window_lines(node_scaling.capacity_block_plan(*window, g.max_size))
    return out


def _window_lines(block: node_scaling.BlockPlan) -> list[str]:
    """A capacity block's window at plan time (``node_scaling.utc_now``, as the program sees it)."""
    start, end, down = (node_scaling.utc_text(w) for w in (block.start, block.end, block.down))
    out = [f"block {start} to {end}: scheduled to {block.size} nodes at its start and to 0 at {down}"]
    if block.held:
        out.append(f"HELD BACK (plan time {node_scaling.utc_text(block.now)}): {node_scaling.held_back_text(block)}")
    elif block.phase == "over":
        out.append("the block has ended: each `pulumi up` keeps the group at 0")
    return out
