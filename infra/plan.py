"""The offline plan: run the stack's real program against the offline engine and show what it
would create, with no AWS account and no Pulumi CLI.

    python -m infra plan --stack dev [--out DIR]

Exit codes: 0 planned; 2 invalid config (messages on stderr, no files written); 1 the program
failed for another reason.
"""

from __future__ import annotations

import copy
import datetime
import gc
import json
import sys
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any, Optional, TextIO

import yaml

from facts import catalog, versions
from facts.paths import PROJECT_ROOT
from infra import critical_path, offline, releases
from stacks import config as stack_config
from stacks import cost, queues
from stacks.config.placeholders import placeholders
from stacks.config.stackfile import read_stack_config

EXIT_OK, EXIT_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


def load_config(stack: str, root: Optional[Path] = None) -> stack_config.StackConfig:
    project, values = read_stack_config(stack, root or PROJECT_ROOT)
    return stack_config.load(values, project, stack)


def plan(stack: str, root: Optional[Path] = None) -> tuple[stack_config.StackConfig, offline.PlanResult]:
    """Validate the stack's config, then run the program offline. Raises ConfigError first."""
    root = root or PROJECT_ROOT
    project, values = read_stack_config(stack, root)
    cfg = stack_config.load(values, project, stack)
    from infra import program  # imported late: the program module imports pulumi resources

    # The program gets its own copy of the values, as if read again from the files.
    result = offline.run(program.main, copy.deepcopy(values), project=project, stack=stack, region=cfg.region)
    return cfg, result


# ---------------------------------------------------------------------------------------------
# Output files
# ---------------------------------------------------------------------------------------------


def _dump_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _str_presenter(dumper: yaml.representer.SafeRepresenter, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


class _ManifestDumper(yaml.SafeDumper):
    """PyYAML's pure-Python emitter: the reference form of manifests.yaml."""


_ManifestDumper.add_representer(str, _str_presenter)

if getattr(yaml, "__with_libyaml__", False):

    class _FastManifestDumper(yaml.CSafeDumper):
        """The same representer over libyaml's emitter: about six times faster."""

    _FastManifestDumper.add_representer(str, _str_presenter)
    _FAST_DUMPER: Optional[type] = _FastManifestDumper
else:  # PyYAML built without libyaml
    _FAST_DUMPER = None

# libyaml and the pure-Python emitter write the same bytes for the same events, except in a few
# cases: a double-quoted scalar long enough to be folded (libyaml folds without the Python
# emitter's backslash escapes); a literal block that keeps its trailing line breaks ("|+", text
# ending in two of them), after which libyaml also ends the document with "..."; and some keys
# (empty, very long, with line breaks or control characters). A double-quoted scalar is only chosen
# for text with characters outside printable ASCII, or with a space right before a line break or at
# the end of a multi-line text. Manifests with none of those are written by libyaml; any other goes
# through the Python emitter, so the file never depends on which emitter wrote it.
# (tests/test_plan_speed_invariants.py compares the two on generated objects.)
_MAX_SIMPLE_KEY = 100


def _plain_ascii(text: str) -> bool:
    """Printable ASCII and line breaks only."""
    return text.isascii() and (text.isprintable() or text.replace("\n", "").isprintable())


def _libyaml_writes_it_alike(value: Any) -> bool:
    """Whether libyaml's emitter writes ``value`` byte for byte as the Python emitter does (see above)."""
    if isinstance(value, str):
        if "\n" in value:
            return _plain_ascii(value) and " \n" not in value and not value.endswith((" ", "\n\n")) and value != "\n"
        return _plain_ascii(value)
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                if not (0 < len(key) <= _MAX_SIMPLE_KEY and "\n" not in key and _plain_ascii(key)):
                    return False
            elif not isinstance(key, int):  # bool is an int
                return False
            if not _libyaml_writes_it_alike(item):
                return False
        return True
    if isinstance(value, list):
        return all(_libyaml_writes_it_alike(item) for item in value)
    return value is None or isinstance(value, (bool, int, float))


def manifests_yaml(objects: list[dict[str, Any]], dumper: Optional[type] = None) -> str:
    """The Kubernetes objects as one multi-document YAML text, in the pure-Python emitter's form.

    ``dumper`` forces an emitter (the tests compare the two); by default libyaml's writes the
    objects when it writes them alike, the Python emitter otherwise.
    """
    if not objects:
        return ""
    if dumper is not None:
        return yaml.dump_all(objects, Dumper=dumper, sort_keys=False, default_flow_style=False, explicit_start=True)
    if _FAST_DUMPER is None or not all(isinstance(o, dict) for o in objects):
        return manifests_yaml(objects, _ManifestDumper)
    # Each run of consecutive objects goes through the emitter that writes it alike (a chart's
    # CRDs with tabs in their descriptions need the Python emitter; the rest need not wait for it).
    # Every document starts with "---", so the runs join into the text one stream would be, unless
    # a run of the Python emitter ends open ("..." at its end, which one stream writes only at its
    # very end): then the whole stream goes through the Python emitter.
    parts: list[str] = []
    run: list[dict[str, Any]] = []
    run_fast: Optional[bool] = None
    for o in [*objects, None]:
        fast = None if o is None else _libyaml_writes_it_alike(o)
        if run and (o is None or fast != run_fast):
            text = manifests_yaml(run, _FAST_DUMPER if run_fast else _ManifestDumper)
            if not run_fast and o is not None and text.endswith("...\n"):
                return manifests_yaml(objects, _ManifestDumper)
            parts.append(text)
            run = []
        if o is not None:
            run.append(o)
            run_fast = fast
    return "".join(parts)


def write_files(result: offline.PlanResult, out: Path, rendered: Optional[releases.Rendered] = None, cfg: Optional[stack_config.StackConfig] = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if cfg is not None:
        (out / "cost.json").write_text(_dump_json(cost.estimate(cfg).as_json()))
    (out / "resources.json").write_text(_dump_json([r.as_json() for r in result.records]))
    (out / "manifests.yaml").write_text(manifests_yaml(result.kubernetes_objects()))
    (out / "outputs.json").write_text(_dump_json(result.outputs))
    if rendered is not None and rendered.note is None:
        (out / "releases.yaml").write_text(manifests_yaml(rendered.objects))


# ---------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------


def summary(cfg: stack_config.StackConfig, result: offline.PlanResult, rendered: Optional[releases.Rendered] = None) -> str:
    lines = []
    outputs = result.outputs
    lines.append(f"Stack {cfg.project}/{cfg.stack} in {cfg.region}: cluster {cfg.cluster_name}, Kubernetes {cfg.cluster.kubernetes_version}")
    gpu_az = outputs.get("gpuAvailabilityZone")
    how = "chosen automatically" if cfg.gpu_availability_zone == "auto" else "from config"
    lines.append(f"GPU availability zone: {gpu_az} ({how}); subnet AZs: {', '.join(outputs.get('availabilityZones', []))}")
    lines.append("")
    lines.append("GPU node groups:")
    if not cfg.gpu_node_groups:
        lines.append("  (none)")
    for g in cfg.gpu_node_groups:
        it = g.instance
        efa = f"{g.efa_interfaces} EFA interface{'s' if g.efa_interfaces != 1 else ''}" if g.efa_interfaces else ("EFA off" if it.efa_supported else "no EFA")
        efa_cards = [slot.card for slot in catalog.efa_layout(it) if slot.is_efa] if g.efa_interfaces else []
        if efa_cards and 0 not in efa_cards:
            efa += f" (cards {min(efa_cards)}-{max(efa_cards)}; card 0 ENA only)"
        lines.append(
            f"  {g.name:<12} {g.instance_type:<15} {it.gpus} x {it.gpu_model} {it.gpu_memory_mib // 1024} GiB, {efa}, "
            f"nodes {g.min_size}/{g.desired_size}/{g.max_size} (min/desired/max), {g.capacity_type}, placement {g.placement.mode}"
        )
        lines += [f"  {'':<12} {line}" for line in capacity_lines(g)]
    s = cfg.system_node_group
    sys_it = catalog.get(s.instance_type)
    lines.append(f"System node group: {s.instance_type} ({sys_it.summary() if sys_it else '?'}), nodes {s.min_size}/{s.desired_size}/{s.max_size}")
    lines.append("")

    # Resources by component and type.
    by_component: "OrderedDict[str, Counter]" = OrderedDict()
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
    lines.append(f"Resources: {len(result.records)} registered ({custom} cloud/Kubernetes resources, {len(result.records) - custom} components)")
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
        for name, objects in rendered.per_release.items():
            lines.append(f"  Helm release {name} installs {len(objects)}: {', '.join(objects)}")
    queue_plan = queues.plan_for(cfg)
    if queue_plan is not None:
        lines.append("")
        lines.append(queues.describe(queue_plan, versions.KUEUE_VERSION).rstrip("\n"))
    lines.append("")
    lines.append(critical_path.describe(critical_path.estimate(result.records)).rstrip("\n"))
    lines.append("")
    lines.append(cost.describe(cost.estimate(cfg)).rstrip("\n"))
    return "\n".join(lines) + "\n"


def capacity_lines(g: stack_config.GpuNodeGroupConfig) -> list[str]:
    """What a capacity-block group's block does, in words: the purchase above all (it costs money
    the moment `pulumi up` runs and cannot be undone)."""
    if g.capacity_type != "capacity-block":
        return []
    out = []
    offering = g.capacity.offering if g.capacity is not None else None
    if g.capacity_block_purchase:
        out.append(
            f"PURCHASE: `pulumi up` BUYS Capacity Block offering {g.capacity_block_purchase} ({g.max_size} x {g.instance_type}): "
            "irreversible, its upfront fee is charged at once and never refunded (preflight shows the fee)"
        )
    elif g.awaiting_capacity_block:
        out.append("no capacity block yet: the group is not built; preflight lists the offerings (capacity.offering), nothing is bought")
    elif offering is not None:
        out.append("capacity.offering is looked up by preflight only: nothing is bought (purchase is false)")
    window = g.capacity_block_window
    if window is not None:
        start, end = (w.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") for w in window)
        down = (window[1] - catalog.CAPACITY_BLOCK_DRAIN).astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        out.append(f"block {start} to {end}: scheduled to {g.max_size} nodes at its start and to 0 at {down}")
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


def load_config_for_cli(stack: str, root: Optional[Path], stderr: TextIO) -> Optional[stack_config.StackConfig]:
    """The validated config of a stack, or None after printing why not (for the CLIs' exit 2)."""
    try:
        return load_config(stack, root)
    except CONFIG_ERRORS as err:
        report_config_error(stack, err, stderr)
        return None


def run_cli(stack: str, out: Optional[str], stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    import pulumi

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        cfg, result = plan(stack)
    except CONFIG_ERRORS as err:
        report_config_error(stack, err, stderr)
        return EXIT_BAD_CONFIG
    except pulumi.RunError as err:  # the program refused the config at run time (placement, ...)
        print(f"error: stack {stack!r}: {err}", file=stderr)
        return EXIT_BAD_CONFIG
    except offline.OfflineDataError as err:  # a region the offline engine has no AWS data for
        print(f"error: stack {stack!r}: {err}", file=stderr)
        return EXIT_BAD_CONFIG
    except offline.DuplicateURNError as err:  # the program registered one URN twice: `pulumi up` would stop there too
        print(f"error: stack {stack!r}: {err}", file=stderr)
        return EXIT_FAILED
    with offline.collector_paused():  # writing the files allocates much as well
        rendered = releases.render(result, cfg.cluster.kubernetes_version)  # charts are in the checkout
        stdout.write(summary(cfg, result, rendered))
        # Placeholders copied from the examples: planned as they are, refused by preflight.
        for problem in placeholders(cfg):
            stdout.write(f"warning: {problem}\n")
        if out:
            write_files(result, Path(out), rendered, cfg)
            extra = f", {out}/releases.yaml" if rendered.objects else ""
            extra += f", {out}/cost.json"
            stdout.write(f"Wrote {out}/resources.json, {out}/manifests.yaml, {out}/outputs.json{extra}\n")
    if _is_the_command():
        # Nothing runs after this in `python -m infra plan`, and everything still alive is about to
        # go: spare the interpreter's exit a last full collection over it (about 0.1 s).
        gc.freeze()
    return EXIT_OK


def _is_the_command() -> bool:
    """Whether this process is `python -m infra` (not a test or a script calling run_cli)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == "infra.__main__"
