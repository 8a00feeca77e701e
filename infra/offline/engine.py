"""Running the program against the offline engine: the mocks and the recording monitor set up, the
config given, the registrations reported in the order the program constructs them, and the stack
outputs resolved (``run``, ``PlanResult``); Python's collector kept out of the way of a run
(``collector_paused``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi.resource as pulumi_resource
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as sdk_registration
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from facts.kube import is_kubernetes_object
from infra.offline.deployed import Deployed
from infra.offline.fleet import OfflineFleet
from infra.offline.inline_monitor import monitor_calls_inline
from infra.offline.mocks import OfflineMocks
from infra.offline.monitor import DuplicateURNError, Record, RecordingMonitor
from infra.offline.unknowns import unknowns_walked_flat
from infra.offline.wire_memo import memo_wire_forms


@dataclass
class PlanResult:
    records: list[Record]
    outputs: dict[str, Any]
    deployed: Deployed = field(default_factory=Deployed)  # the deployed stack the engine answered for

    def of_type(self, typ: str) -> list[Record]:
        return [r for r in self.records if r.type == typ]

    def named(self, typ: str, name: str) -> Record:
        found = [r for r in self.records if r.type == typ and r.name == name]
        if len(found) != 1:
            raise KeyError(f"{len(found)} resources of type {typ} named {name}")
        return found[0]

    def children_of(self, typ: str, name: str) -> list[Record]:
        return [r for r in self.records if r.parent == {"type": typ, "name": name}]

    def kubernetes_objects(self) -> list[dict[str, Any]]:
        """Every Kubernetes object registered, as its manifest."""
        return [r.inputs for r in self.records if is_kubernetes_object(r.type, r.inputs)]


_heap_frozen = False
_runs = [0]  # the runs this process started


@contextmanager
def collector_paused() -> Iterator[None]:
    """Keep Python's cyclic garbage collector out of the way of a run.

    A run allocates a few hundred thousand objects (registrations, outputs, the SDK's type
    information), so the collector runs often, and every full collection walks every object in the
    process: the SDK modules alone leave about 300,000. That was about half the time of a first run.
    So: what is alive before the first run (modules, classes, the SDK's tables) lives as long as the
    process and is moved out of the collector's sight once (``gc.freeze``); during the run the
    collector is off, and the run's garbage cycles (a few MB) go at the first collection after it.
    """
    global _heap_frozen
    if not _heap_frozen:
        gc.freeze()
        _heap_frozen = True
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def flat_config(values: dict[str, Any]) -> dict[str, str]:
    """Values -> the engine's wire form (structured values as JSON text)."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}


def run(
    program: Callable[[], dict[str, Any]],
    config: dict[str, Any],
    project: str,
    stack: str,
    region: str | None = None,
    on_record: Callable[[Record], None] | None = None,
    deployed: Deployed | None = None,
    fleet: OfflineFleet | None = None,
) -> PlanResult:
    """Run ``program`` against the offline engine with ``config`` (``{"ns:key": value}``).

    Returns what was registered, in order, and the resolved stack outputs (secrets masked).
    ``on_record`` sees each registration as it is recorded.
    ``deployed``: what the stack already has in AWS (default: nothing, a new stack).
    ``fleet``: the outputs of the stacks it references and its organization (default: none).
    """
    region = region or str(config.get("aws:region") or "us-west-2")
    mocks = OfflineMocks(region, deployed, fleet)
    monitor = RecordingMonitor(mocks, on_record)
    pulumi_mocks.set_mocks(
        mocks, project=project, stack=stack, preview=False, monitor=monitor, organization=mocks.fleet.organization
    )
    set_all_config(flat_config(config), [])
    # Config comes from `config` only, never from a PULUMI_CONFIG left in the environment.
    saved_env_config = os.environ.pop("PULUMI_CONFIG", None)
    outputs: dict[str, Any] = {}

    # Registrations reach the monitor in whatever order their inputs resolve, which varies from
    # run to run; the order in which the program constructs resources does not. Record that
    # order (the SDK calls register_resource synchronously from each constructor) and report
    # registrations in it, so the same config gives the same files.
    constructed: list[tuple[str, str]] = []
    original_register = pulumi_resource.register_resource

    def register_in_order(res, ty, name, *args, **kwargs):
        constructed.append((ty, name))
        return original_register(res, ty, name, *args, **kwargs)

    async def body() -> None:
        result = program()
        for key, value in (result or {}).items():
            out = pulumi.Output.from_input(value)
            resolved = await out.future(with_unknowns=True)
            outputs[key] = "[secret]" if await out.is_secret() else _jsonable(resolved)

    planned_before = _runs[0] > 0
    _runs[0] += 1
    pulumi_resource.register_resource = register_in_order
    original_stack_trace = sdk_registration._get_stack_trace
    sdk_registration._get_stack_trace = _no_stack_trace
    try:
        # The memory of wire forms pays from a process's second plan on: the plan command plans once.
        with (
            collector_paused(),
            monitor_calls_inline(),
            unknowns_walked_flat(),
            memo_wire_forms() if planned_before else contextlib.nullcontext(),
        ):
            _sync_await(run_pulumi_func(body))
    except Exception:  # a duplicate URN, or the program's own error (a RunError raised in an apply)
        _end_pending_tasks()
        raise
    finally:
        pulumi_resource.register_resource = original_register
        sdk_registration._get_stack_trace = original_stack_trace
        if saved_env_config is not None:
            os.environ["PULUMI_CONFIG"] = saved_env_config
    position = {key: i for i, key in reversed(list(enumerate(constructed)))}
    records = sorted(monitor.records, key=lambda r: position.get((r.type, r.name), len(position)))
    return PlanResult(records=records, outputs=outputs, deployed=mocks.deployed)


def _no_stack_trace() -> source_pb2.StackTrace:
    """What the SDK sends the engine as the source position of each registration (the Pulumi CLI shows it
    beside a resource's errors), empty. The SDK walks the whole Python stack and builds a file URI per
    frame for every resource, about a sixth of a run's time; the offline engine records no positions."""
    return source_pb2.StackTrace()


def _quiet_about_duplicates(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if not isinstance(context.get("exception"), (DuplicateURNError, pulumi.RunError)):
        loop.default_exception_handler(context)


def _end_pending_tasks() -> None:
    """A run stopped at a duplicate URN (or by the program's own error) leaves the SDK's other
    registrations and outputs pending (the mocks' settings keep the set of output tasks from run to
    run); end them, so that the next run in this process starts clean instead of meeting them."""
    loop = asyncio.get_event_loop()
    # The registration's futures hold the error too; asyncio would print each with its traceback
    # when they are collected ("exception was never retrieved"): the error is reported already.
    loop.set_exception_handler(_quiet_about_duplicates)
    with pulumi_settings.SETTINGS.lock:
        leftovers = list(pulumi_settings.SETTINGS.outputs)
        pulumi_settings.SETTINGS.outputs.clear()
    pending = {t for t in asyncio.all_tasks(loop) if not t.done()} | set(leftovers)
    for task in pending:
        task.cancel()
    if pending and not loop.is_running():
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
