"""The wire form of large plain inputs, serialized once per process, and the outputs of large Kubernetes
objects made once (``memo_wire_forms``).

Every registration's inputs go through the SDK's ``rpc.serialize_properties``: a walk, in Python and
one coroutine per value, that translates names by the resource's type information and builds a
protobuf ``Struct``. For the CRDs (hundreds of KB of schema each, most of a plan's input bytes) that
walk is most of what registering them costs, and every plan of a process (the tests plan hundreds of
configs) registers the same CRDs with the same inputs.

So while the offline engine runs, ``serialize_properties`` is wrapped: inputs that are plain data
(dicts, lists, strings, numbers, booleans, None: nothing to await, no resource, no secret) are keyed
by ``marshal.dumps(inputs, 2)``, which is exact (it tells ``1`` from ``True`` and ``"1"``, a list from
a tuple, and refuses every other type: an Output, an input class, a dict subclass), together with the
type information and name translator the SDK was given. The SDK's own function serializes them the
first time; later calls with the same key get a copy of that ``Struct`` and the same (empty)
dependencies per property. Anything else goes to the SDK as before.

On the way back the SDK decodes the same inputs again: ``rpc.resolve_outputs`` gives each input property the
provider did not answer for (a CRD's spec: the mocks answer a Kubernetes object's identity only) the value of
that input, decoded from its wire form and translated to the SDK's output types, and hands the values to the
resource's outputs. For a Kubernetes object with large inputs that is wrapped too: keyed by the resource's
class, the wire bytes of its inputs and of the mocks' answer, and the flags the SDK reads, the values are
made by the SDK the first time and the same values are handed to later registrations (the same objects: the
SDK's output types cannot be copied by pickle; the program reads nothing of a Kubernetes object's outputs but
its metadata, and nothing changes them). The dependencies are the registration's own.

The engine keeps this memory from a process's second run on (the plan command plans once: its one plan
would pay for keys it never reads again). `pulumi up` never runs any of this.
"""

from __future__ import annotations

import hashlib
import marshal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from google.protobuf import struct_pb2
from pulumi.runtime import rpc, settings

from infra.offline.mocks import identity_only
from infra.offline.monitor import LARGE_OBJECT, RECORDED_KEPT

# A registration is large from LARGE_OBJECT bytes of its inputs (marshal or wire form), as the monitor counts
# an object whose recorded inputs it keeps; RECORDED_KEPT bytes of wire forms are kept, the oldest go first.

_kept: dict[tuple[Any, ...], tuple[bytes, tuple[str, ...]]] = {}
_kept_bytes = [0]
_lock = threading.Lock()
hits = [0]  # how many serializations were answered from memory (for the tests)
_resolved: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, str]]] = {}
resolve_hits = [0]  # how many registrations' outputs were answered from memory (for the tests)
_capture: list[Any] = []  # (the SDK's values as it hands them to resolve_properties, while one is captured)
KEPT_RESOLVED = 256  # registrations whose outputs are kept; the oldest go first


def _key(
    inputs: Any, input_transformer: Callable[[str], str] | None, typ: Any, flags: tuple[bool, bool]
) -> tuple[Any, ...] | None:
    """The memo key of a serialization, or None when the inputs are small or not plain data."""
    if input_transformer is not None or type(inputs) is not dict:
        # (a translator is a resource's bound method: the SDK passes none when it has type information)
        return None
    try:
        text = marshal.dumps(inputs, 2)
    except ValueError:  # an Output, an input class, a resource, ...: not plain data
        return None
    if len(text) < LARGE_OBJECT:
        return None
    return (text, typ, flags)


def _keep(key: tuple[Any, ...], struct: struct_pb2.Struct, names: tuple[str, ...]) -> None:
    wire = struct.SerializeToString()
    with _lock:
        if key in _kept:
            return
        _kept[key] = (wire, names)
        _kept_bytes[0] += len(wire)
        while _kept_bytes[0] > RECORDED_KEPT:
            _kept_bytes[0] -= len(_kept.pop(next(iter(_kept)))[0])


def _memoized(original: Callable[..., Any]) -> Callable[..., Any]:
    async def serialize_properties(
        inputs: Any,
        property_deps: dict[str, list[Any]],
        resource_obj: Any = None,
        input_transformer: Callable[[str], str] | None = None,
        typ: Any = None,
        keep_output_values: bool = False,
        exclude_resource_refs_from_deps: bool = False,
    ) -> struct_pb2.Struct:
        key = _key(inputs, input_transformer, typ, (keep_output_values, exclude_resource_refs_from_deps))
        kept = None
        if key is not None:
            with _lock:
                kept = _kept.get(key)
        if kept is not None:
            wire, names = kept
            hits[0] += 1
            for name in names:
                property_deps[name] = []
            struct = struct_pb2.Struct()
            struct.ParseFromString(wire)
            return struct
        deps: dict[str, list[Any]] = {}
        struct = await original(
            inputs,
            deps,
            resource_obj,
            input_transformer,
            typ,
            keep_output_values,
            exclude_resource_refs_from_deps,
        )
        property_deps.update(deps)
        if key is not None and not any(deps.values()):
            _keep(key, struct, tuple(deps))
        return struct

    return serialize_properties


def _resolve_key(res: Any, serialized_props: Any, outputs: Any, flags: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The memo key of a registration's outputs, or None unless it is a Kubernetes object with large inputs."""
    if not identity_only(getattr(res, "_type", "")) or serialized_props.ByteSize() < LARGE_OBJECT:
        return None
    digest = hashlib.sha256(serialized_props.SerializeToString(deterministic=True))
    digest.update(outputs.SerializeToString(deterministic=True))
    return (type(res), digest.digest(), settings.is_dry_run(), flags)


def _memoized_resolving(original: Callable[..., Any], resolve_properties: Callable[..., Any]) -> Callable[..., Any]:
    def resolve_outputs(
        res: Any,
        serialized_props: Any,
        outputs: Any,
        deps: Any,
        resolvers: Any,
        custom: bool,
        transform_using_type_metadata: bool = False,
        keep_unknowns: bool = False,
        resolve_missing_as_unknown: bool = False,
    ) -> None:
        flags = (custom, transform_using_type_metadata, keep_unknowns, resolve_missing_as_unknown)
        key = _resolve_key(res, serialized_props, outputs, flags)
        with _lock:
            kept = _resolved.get(key) if key is not None else None
        if kept is not None and set(deps) <= set(kept[1]):
            values, names = kept
            resolve_hits[0] += 1
            resolve_properties(
                resolvers, values, {names[k]: v for k, v in deps.items()}, custom, resolve_missing_as_unknown
            )
            return
        if key is None:
            original(res, serialized_props, outputs, deps, resolvers, custom, *flags[1:])
            return
        _capture.append(None)
        try:
            original(res, serialized_props, outputs, deps, resolvers, custom, *flags[1:])
            values, translated = _capture[-1]
        finally:
            _capture.pop()
        if len(translated) != len(deps):  # (two names the SDK translated to one: left to it each time)
            return
        with _lock:
            _resolved[key] = (values, dict(zip(deps, translated, strict=True)))
            while len(_resolved) > KEPT_RESOLVED:
                _resolved.pop(next(iter(_resolved)))

    return resolve_outputs


def _capturing(resolve_properties: Callable[..., Any]) -> Callable[..., Any]:
    """``rpc.resolve_properties``, noting the values and dependencies it was given while a capture is open."""

    def capture(resolvers: Any, all_properties: Any, deps: Any, *args: Any, **kwargs: Any) -> Any:
        if _capture and _capture[-1] is None:
            _capture[-1] = (all_properties, list(deps))
        return resolve_properties(resolvers, all_properties, deps, *args, **kwargs)

    return capture


@contextmanager
def memo_wire_forms() -> Iterator[None]:
    """While inside, the SDK's ``rpc.serialize_properties`` answers large plain inputs from memory, and its
    ``rpc.resolve_outputs`` the outputs of Kubernetes objects with large inputs."""
    serialize, resolve, resolve_properties = rpc.serialize_properties, rpc.resolve_outputs, rpc.resolve_properties
    rpc.serialize_properties = _memoized(serialize)
    rpc.resolve_outputs = _memoized_resolving(resolve, resolve_properties)
    rpc.resolve_properties = _capturing(resolve_properties)
    try:
        yield
    finally:
        rpc.serialize_properties, rpc.resolve_outputs, rpc.resolve_properties = serialize, resolve, resolve_properties
