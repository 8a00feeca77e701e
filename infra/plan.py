"""The offline plan: run the stack's real program against the offline engine and show what it
would create, with no AWS account and no Pulumi CLI.

    python -m infra plan --stack dev [--out DIR] [--config-file PATH] [--verbose]

Exit codes: 0 planned; 2 invalid config (messages on stderr, no files written); 1 the program
failed for another reason.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from components import operators
from facts.paths import PROJECT_ROOT
from infra import invariants, offline, plan_cache, releases
from infra.api_checks import aws_model
from infra.plan_summary import capacity_lines as capacity_lines  # the tests call it here
from infra.plan_summary import refused_lines as refused_lines
from infra.plan_summary import summary
from infra.plan_text import json_text, manifests_yaml
from stacks import config as stack_config
from stacks import cost, fleet_jobs, queues
from stacks.config.loading import PlacementAsk
from stacks.config.placeholders import placeholders
from stacks.config.quota_warnings import quota_warnings
from stacks.config.stackfile import read_stack_config

if TYPE_CHECKING:
    from infra.api_checks import kube_check as kube_check_module

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


def load_config(stack: str, root: Path | None = None, stack_file: Path | None = None) -> stack_config.StackConfig:
    """The stack's validated config, without the GPU AZ check (preflight makes it against the account).
    ``stack_file``: read it from that file instead of ``Pulumi.<stack>.yaml`` in the project root (as `plan`)."""
    project, values = read_stack_config(stack, root or PROJECT_ROOT, stack_file)
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
    # A fleet's manager: every job of the fleet against the workers' stack files (stacks/fleet_jobs.py).
    fleet_jobs.check(cfg, stack_file or root / f"Pulumi.{stack}.yaml")
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
        fleet=offline.offline_fleet(cfg, stack_file or root / f"Pulumi.{stack}.yaml"),
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


def load_config_for_cli(
    stack: str, root: Path | None, stderr: TextIO, stack_file: Path | None = None
) -> stack_config.StackConfig | None:
    """The validated config of a stack, or None after printing why not (for the CLIs' exit 2)."""
    try:
        return load_config(stack, root, stack_file)
    except CONFIG_ERRORS as err:
        report_config_error(stack, err, stderr)
        return None


def run_cli(
    stack: str,
    out: str | None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stack_file: str | None = None,
    verbose: bool = False,
) -> int:
    import pulumi

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    # The collector stays paused from the run to the files (see offline.collector_paused): the
    # files allocate much as well, and the run's objects are not worth a collection in between.
    # Each Helm release is rendered from the moment it is registered, beside the rest of the run.
    with offline.collector_paused(), contextlib.ExitStack() as cleanup:
        cleanup.enter_context(queues.plans_kept())  # (the summary, cost and checks read the one queue plan)
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
        manager_file = Path(stack_file) if stack_file else PROJECT_ROOT / f"Pulumi.{stack}.yaml"
        workers = fleet_jobs.present_workers(cfg, manager_file) if fleet_jobs.fleet_specs(cfg) else None
        stdout.write(summary(cfg, result, rendered, verbose, workers))
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
