"""The wire form of large plain inputs, serialized once per process, and decoded once
(``memo_wire_forms``).

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
that input, decoded from its wire form by ``rpc.deserialize_property``. So that function is wrapped too: a
large Struct (at the top of a decoding, not inside one) is keyed by its deterministic wire bytes and the
settings the decoding reads, and decoded by the SDK the first time; later calls get a copy of their own
(pickled, unpickled per call). A value holding a resource reference is always decoded by the SDK (decoding
one looks the resource up). `pulumi up` never runs any of this.
"""

from __future__ import annotations

import hashlib
import marshal
import pickle
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from google.protobuf import struct_pb2
from pulumi.runtime import rpc, settings

LARGE_INPUTS = 16_384  # bytes of marshal form from which a registration's inputs are kept
KEPT_BYTES = 64_000_000  # bytes of kept wire forms (Struct sizes); the oldest go first

_kept: dict[tuple[Any, ...], tuple[bytes, tuple[str, ...]]] = {}
_kept_bytes = [0]
_lock = threading.Lock()
hits = [0]  # how many serializations were answered from memory (for the tests)
_decoded: dict[tuple[Any, ...], bytes] = {}
_decoded_bytes = [0]
decode_hits = [0]  # how many decodings were answered from memory (for the tests)
_depth = threading.local()  # how deep in a decoding this thread is (the SDK's decoding calls itself)
_RESOURCE_SIG = b"5cf8f73096256a8f31e491e813e4eb8e"  # the wire signature of a resource reference


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
    if len(text) < LARGE_INPUTS:
        return None
    return (text, typ, flags)


def _keep(key: tuple[Any, ...], struct: struct_pb2.Struct, names: tuple[str, ...]) -> None:
    wire = struct.SerializeToString()
    with _lock:
        if key in _kept:
            return
        _kept[key] = (wire, names)
        _kept_bytes[0] += len(wire)
        while _kept_bytes[0] > KEPT_BYTES:
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


def _decode_key(value: Any, keep_unknowns: bool | None, keep_internal: bool | None) -> tuple[Any, ...] | None:
    """The memo key of decoding ``value``, or None when it is not a large Struct or holds a resource reference."""
    if not isinstance(value, struct_pb2.Struct) or value.ByteSize() < LARGE_INPUTS:
        return None
    wire = value.SerializeToString(deterministic=True)
    if _RESOURCE_SIG in wire:
        return None
    return (hashlib.sha256(wire).digest(), keep_unknowns, keep_internal, settings.is_dry_run())


def _keep_decoded(key: tuple[Any, ...], decoded: Any) -> None:
    try:
        kept = pickle.dumps(decoded, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - not plain data (an asset): decoded by the SDK each time
        return
    with _lock:
        if key in _decoded:
            return
        _decoded[key] = kept
        _decoded_bytes[0] += len(kept)
        while _decoded_bytes[0] > KEPT_BYTES:
            _decoded_bytes[0] -= len(_decoded.pop(next(iter(_decoded))))


def _memoized_decoding(original: Callable[..., Any]) -> Callable[..., Any]:
    def deserialize_property(value: Any, keep_unknowns: bool | None = None, keep_internal: bool | None = True) -> Any:
        depth = getattr(_depth, "n", 0)
        key = _decode_key(value, keep_unknowns, keep_internal) if depth == 0 else None
        if key is not None:
            with _lock:
                kept = _decoded.get(key)
            if kept is not None:
                decode_hits[0] += 1
                return pickle.loads(kept)
        _depth.n = depth + 1
        try:
            decoded = original(value, keep_unknowns, keep_internal)
        finally:
            _depth.n = depth
        if key is not None:
            _keep_decoded(key, decoded)
        return decoded

    return deserialize_property


@contextmanager
def memo_wire_forms() -> Iterator[None]:
    """While inside, the SDK's ``rpc.serialize_properties`` answers large plain inputs from memory, and its
    ``rpc.deserialize_property`` large Structs."""
    serialize, deserialize = rpc.serialize_properties, rpc.deserialize_property
    rpc.serialize_properties = _memoized(serialize)
    rpc.deserialize_property = _memoized_decoding(deserialize)
    try:
        yield
    finally:
        rpc.serialize_properties, rpc.deserialize_property = serialize, deserialize
