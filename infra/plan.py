"""The offline plan: run the stack's real program against the offline engine and show what it
would create, with no AWS account and no Pulumi CLI.

    python -m infra plan --stack dev [--out DIR] [--config-file PATH]

Exit codes: 0 planned; 2 invalid config (messages on stderr, no files written); 1 the program
failed for another reason.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import gc
import sys
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from components import node_scaling, operators
from facts import catalog, instance_types, versions
from facts.paths import PROJECT_ROOT
from infra import critical_path, invariants, offline, plan_cache, releases, teardown
from infra.api_checks import aws_model
from infra.plan_text import json_text, manifests_yaml
from jobs import resilience, trainjob
from jobs.base import GpuJob
from stacks import config as stack_config
from stacks import cost, queues
from stacks.config.loading import PlacementAsk
from stacks.config.placeholders import placeholders
from stacks.config.quota_warnings import quota_warnings
from stacks.config.stackfile import read_stack_config

if TYPE_CHECKING:
    from infra.api_checks import kube_check as kube_check_module

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


def load_config(stack: str, root: Path | None = None) -> stack_config.StackConfig:
    """The stack's validated config, without the GPU AZ check (preflight makes it against the account)."""
    project, values = read_stack_config(stack, root or PROJECT_ROOT)
    return stack_config.load(values, project, stack)


def offline_placement_check(ask: PlacementAsk) -> list[stack_config.Problem]:
    """The GPU AZ check of the offline plan, made with the rest of the config: against the AWS
    offerings the plan's run answers from (recorded), for a new stack as the plan is. A region
    without recorded offerings is not judged here: the run says so (OfflineDataError)."""
    from stacks import placement  # imported late: it imports the AWS provider's modules

    try:
        facts = placement.RegionFacts(offline.region_azs(ask.region), offline.az_offerings(ask.region))
    except offline.OfflineDataError:
        return []
    return placement.placement_problems(ask, facts)


# Set by the plan command while it plans: makes, from the stack's config, what sees each
# registration as it is made (the command starts each Helm render there, beside the run).
_on_record: contextvars.ContextVar[Callable[[stack_config.StackConfig], Callable[[offline.Record], None]] | None] = (
    contextvars.ContextVar("on_record", default=None)
)


def plan(
    stack: str, root: Path | None = None, stack_file: Path | None = None
) -> tuple[stack_config.StackConfig, offline.PlanResult]:
    """Validate the stack's config (the GPU AZ with the rest: ``offline_placement_check``), then
    run the program offline. Raises ConfigError first.
    ``stack_file``: the stack's config from that file instead of ``Pulumi.<stack>.yaml`` in the
    project root (an example planned in place: examples/<scenario>/)."""
    root = root or PROJECT_ROOT
    project, values = read_stack_config(stack, root, stack_file)
    cfg = stack_config.load(values, project, stack, placement_check=offline_placement_check)
    from infra import program  # imported late: the program module imports pulumi resources

    watch = _on_record.get()
    # The program gets its own copy of the values, as if read again from the files.
    result = offline.run(
        program.main,
        copy.deepcopy(values),
        project=project,
        stack=stack,
        region=cfg.region,
        on_record=watch(cfg) if watch else None,
    )
    return cfg, result


# ---------------------------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------------------------


def write_files(
    result: offline.PlanResult,
    out: Path,
    rendered: releases.Rendered | None = None,
    cfg: stack_config.StackConfig | None = None,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if cfg is not None:
        (out / "cost.json").write_text(json_text(cost.estimate(cfg).as_json()))
    (out / "resources.json").write_text(json_text([r.as_json() for r in result.records]))
    (out / "manifests.yaml").write_text(manifests_yaml(result.kubernetes_objects()))
    (out / "outputs.json").write_text(json_text(result.outputs))
    if rendered is not None:
        write_releases(rendered, out)


def write_releases(rendered: releases.Rendered, out: Path) -> None:
    if rendered.note is None:
        (out / "releases.yaml").write_text(releases.releases_yaml(rendered))


# ---------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------


def summary(
    cfg: stack_config.StackConfig, result: offline.PlanResult, rendered: releases.Rendered | None = None
) -> str:
    lines = []
    lines.append(
        f"Stack {cfg.project}/{cfg.stack} in {cfg.region}: cluster {cfg.cluster_name}, Kubernetes "
        f"{cfg.cluster.kubernetes_version}"
    )
    lines += gpu_az_lines(cfg, result)
    lines += refused_lines(result)
    lines.append("")
    lines.append("GPU node groups:")
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
    lines.append("")

    # Resources by component and type.
    by_component: OrderedDict[str, Counter] = OrderedDict()
    top_of: dict[tuple[str, str], str] = {}
    for r in result.records:
        key = (r.type, r.name)
        if r.parent is None:
            top_of[key] = f"{r.type.split(':')[-1]} {r.name}"
        else:
            top_of[key] = top_of.get((r.parent["type"], r.parent["name"]), "?")
        if r.parent is not None:
            by_component.setdefault(top_of[key], Counter())[r.type] += 1
        else:
            by_component.setdefault(top_of[key], Counter())
    custom = sum(1 for r in result.records if r.custom)
    lines.append(
        f"Resources: {len(result.records)} registered ({custom} cloud/Kubernetes resources, "
        f"{len(result.records) - custom} components)"
    )
    for comp, counts in by_component.items():
        total = sum(counts.values())
        lines.append(f"  {comp}: {total}")
        for typ, n in sorted(counts.items()):
            lines.append(f"      {n:>3} {typ}")
    k8s = result.kubernetes_objects()
    lines.append(f"Kubernetes objects: {len(k8s)}")
    if rendered is not None and rendered.note:
        lines.append(f"  {rendered.note}")
    elif rendered is not None:
        lines += [release_line(name, objects) for name, objects in rendered.per_release.items()]
    lines += job_lines(cfg)
    queue_plan = queues.plan_for(cfg)
    if queue_plan is not None:
        lines.append("")
        lines.append(queues.describe(queue_plan, versions.KUEUE_VERSION).rstrip("\n"))
    lines.append("")
    lines.append(critical_path.describe(critical_path.estimate(result.records)).rstrip("\n"))
    lines.append("")
    lines.append(cost.describe(cost.estimate(cfg)).rstrip("\n"))
    lines.append(teardown.describe(result.records).rstrip("\n"))
    return "\n".join(lines) + "\n"


def release_line(name: str, objects: list[str]) -> str:
    """One Helm release in the summary: how many objects it installs, by kind (most first); the
    objects by name are in releases.yaml."""
    kinds = Counter(o.split("/", 1)[0] for o in objects)
    by_kind = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"  Helm release {name} installs {len(objects)}: {by_kind}"


def job_lines(cfg: stack_config.StackConfig) -> list[str]:
    """Per enabled GPU job: its kind and runtime, and whether hang detection and checkpoints are on."""
    jobs = [j for j in cfg.jobs if j.enabled and isinstance(j, GpuJob)]
    if not jobs:
        return []
    lines = ["", 'GPU jobs (hang detection and checkpoints: docs/jobs.md, "Hangs and resume"):']
    legacy = []
    for j in jobs:
        hang, saved = resilience.describe(j)
        runtime = getattr(j, "runtime", "eks")
        api, old = trainjob.api_of(j) if runtime == "eks" else (None, False)
        shown = f", {api.kind} {api.api_version}" + (" (legacy API)" if old else "") if api is not None else ""
        lines.append(f"  {j.name:<22} {j.kind} on {runtime}{shown}")
        lines.append(f"  {'':<22} hang detection {hang}")
        lines.append(f"  {'':<22} checkpoints {saved}")
        legacy += [f"{j.name} ({api.kind})"] if api is not None and old else []
    if legacy:
        lines.append(
            f"  on a legacy API (Kubeflow Trainer v2 is upstream's path: docs/trainer.md): {', '.join(legacy)}"
        )
    return lines


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


# ---------------------------------------------------------------------------------------------
# Entry
# ---------------------------------------------------------------------------------------------


# What a user's config mistake raises while loading a stack (reported, never a traceback).
CONFIG_ERRORS = (stack_config.ConfigError, FileNotFoundError, yaml.YAMLError)


def report_config_error(stack: str, err: Exception, stderr: TextIO) -> None:
    if isinstance(err, stack_config.ConfigError):
        print(f"error: stack {stack!r}: {err}", file=stderr)
    elif isinstance(err, yaml.YAMLError):
        where = " ".join(str(err).split())
        print(f"error: stack {stack!r}: Pulumi.yaml is not valid YAML: {where}", file=stderr)
    else:  # FileNotFoundError, offline.StackFileError: a missing or unreadable stack file
        print(f"error: {err}", file=stderr)


def load_config_for_cli(stack: str, root: Path | None, stderr: TextIO) -> stack_config.StackConfig | None:
    """The validated config of a stack, or None after printing why not (for the CLIs' exit 2)."""
    try:
        return load_config(stack, root)
    except CONFIG_ERRORS as err:
        report_config_error(stack, err, stderr)
        return None


def run_cli(
    stack: str,
    out: str | None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stack_file: str | None = None,
) -> int:
    import pulumi

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    # The collector stays paused from the run to the files (see offline.collector_paused): the
    # files allocate much as well, and the run's objects are not worth a collection in between.
    # Each Helm release is rendered from the moment it is registered, beside the rest of the run.
    with offline.collector_paused(), contextlib.ExitStack() as cleanup:
        # The operator manifests are parsed once, then read from .cache/manifests/ (infra/plan_cache.py).
        kept = plan_cache.folder("manifests")
        cleanup.callback(setattr, operators, "snapshot_store", operators.snapshot_store)
        operators.snapshot_store = plan_cache.ManifestSnapshots(kept) if kept is not None else None
        renderers: list[releases.Renderer] = []

        def start_rendering(cfg: stack_config.StackConfig) -> Callable[[offline.Record], None]:
            renderers.append(
                cleanup.enter_context(releases.Renderer(cfg.cluster.kubernetes_version))
            )  # charts are in the checkout
            return renderers[0].start

        watching = _on_record.set(start_rendering)
        try:
            # (the project's own Pulumi.<stack>.yaml: plan(stack), as it always was; stand-ins for plan take
            # the stack only)
            cfg, result = plan(stack) if stack_file is None else plan(stack, stack_file=Path(stack_file))
        except CONFIG_ERRORS as err:
            report_config_error(stack, err, stderr)
            return EXIT_BAD_CONFIG
        except pulumi.RunError as err:  # the program refused the config at run time (placement, ...)
            print(f"error: stack {stack!r}: {err}", file=stderr)
            return EXIT_BAD_CONFIG
        except offline.OfflineDataError as err:  # a region the offline engine has no AWS data for
            print(f"error: stack {stack!r}: {err}", file=stderr)
            return EXIT_BAD_CONFIG
        except (
            offline.DuplicateURNError
        ) as err:  # the program registered one URN twice: `pulumi up` would stop there too
            print(f"error: stack {stack!r}: {err}", file=stderr)
            return EXIT_FAILED
        finally:
            _on_record.reset(watching)
        if out:  # (while the last renders finish)
            write_files(result, Path(out), None, cfg)
        if not renderers:  # (a plan() that did not ask for it: a test's stand-in)
            start_rendering(cfg)
        rendered = renderers[0].collect(result)
        stdout.write(summary(cfg, result, rendered))
        # Placeholders copied from the examples: planned as they are, refused by preflight; sizes above an
        # adjustable quota's default: planned, checked by preflight against the account's quota.
        for problem in placeholders(cfg) + quota_warnings(cfg):
            stdout.write(f"warning: {problem}\n")
        # What must hold when features meet (infra/invariants/): a violation is a bug of the stack.
        violations = invariants.check(result, cfg)
        for v in violations:
            print(f"error: whole-stack invariant broken: {v}", file=stderr)
        stdout.write(
            f"Whole-stack invariants: {len(invariants.RULES) - len({v.rule for v in violations})} of "
            f"{len(invariants.RULES)} hold\n"
        )
        # Every Kubernetes object, the Helm releases' too, as the API server would take it.
        kube = api_checks(result.kubernetes_objects() + rendered.objects)
        for refusal in kube.refusals:
            print(f"error: {refusal}", file=stderr)
        stdout.write(kube.line() + "\n")
        # Every AWS input against the API's request shape in botocore's models (infra/api_checks/aws_model.py).
        refused = aws_model.report_to(aws_model.check(result.records), stdout, stderr, Path(out) if out else None)
        if out:
            write_releases(rendered, Path(out))
            extra = f", {out}/releases.yaml" if rendered.objects else ""
            extra += f", {out}/cost.json, {out}/aws-model.json"
            stdout.write(f"Wrote {out}/resources.json, {out}/manifests.yaml, {out}/outputs.json{extra}\n")
        if _is_the_command():
            # Nothing runs after this in `python -m infra plan`, and everything still alive is about
            # to go: spare the collector, when it is turned on again, a pass over the run's objects,
            # and the interpreter's exit a last full collection over everything (about 0.1 s).
            gc.freeze()
    return EXIT_FAILED if violations or kube.refusals or refused else EXIT_OK


def api_checks(objects: list[dict[str, Any]]) -> kube_check_module.Report:
    """The Kubernetes objects against the API server's rules and their CRDs (infra/api_checks/kube_check.py)."""
    from infra.api_checks import kube_check  # imported late: cel-python and jsonschema, for the plan only

    return kube_check.check(objects)


def _is_the_command() -> bool:
    """Whether this process is `python -m infra` (not a test or a script calling run_cli)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == "infra.__main__"
