"""The recording monitor: Pulumi's mock monitor, plus a ``Record`` of every registration in order
(its inputs as the plan shows them: secrets masked, references named, a dynamic provider's code left
out; its resource options), refusing a URN registered twice as the engine does.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

from infra.offline.mocks import IDENTITY, identity_only

# Wire-format signatures of the Pulumi RPC layer.
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SIG_SECRET = "1b47061264138c4ac30d75fd1eb44270"
_SIG_RESOURCE = "5cf8f73096256a8f31e491e813e4eb8e"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"


def _urn_parts(urn: str) -> tuple[str, str]:
    """(type, name) of a URN."""
    parts = urn.split("::")
    return parts[2].split("$")[-1], parts[3] if len(parts) > 3 else ""


def _engine_urn(parent: str, typ: str, name: str) -> str:
    """The URN the engine gives a registration: ``urn:pulumi:<stack>::<project>::<type chain>::<name>``,
    the type chain being the parent's chain and the type, without the root stack's type."""
    stack, project = pulumi.get_stack(), pulumi.get_project()
    if parent and _urn_parts(parent)[0] != "pulumi:pulumi:Stack":
        # (the mocks' URNs of parents start their chain with the root stack's type)
        typ = f"{parent.split('::')[2].removeprefix('pulumi:pulumi:Stack$')}${typ}"
    return f"urn:pulumi:{stack}::{project}::{typ}::{name}"


def _ref(urn: str) -> dict[str, str]:
    typ, name = _urn_parts(urn)
    return {"type": typ, "name": name}


def _wire_dict(struct: Any, references: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` -> plain dict, as ``json_format.MessageToDict`` gives it (numbers
    as floats, signature keys kept), appending every resource reference found to ``references``.

    A direct walk of the Struct: MessageToDict goes through the descriptors for every value and is
    several times slower on the large objects (CRD schemas) the plan registers.
    """
    out = {key: _wire_value(value, references) for key, value in struct.fields.items()}
    if out.get(_SIG_KEY) == _SIG_RESOURCE:
        references.append(out)
    return out


def _wire_value(value: Any, references: list[dict[str, Any]]) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return _wire_dict(value.struct_value, references)
    if kind == "list_value":
        return [_wire_value(v, references) for v in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        if math.isinf(number) or math.isnan(number):  # as MessageToDict: not representable in JSON
            raise ValueError(f"cannot record the number {number} (Infinity and NaN have no JSON form)")
        return number
    if kind == "bool_value":
        return value.bool_value
    return None  # null_value, or a Value with nothing set


def _plain(value: Any) -> Any:
    """Wire-format value -> JSON-safe plain value, with secrets masked and references named."""
    if isinstance(value, dict):
        sig = value.get(_SIG_KEY)
        if sig == _SIG_SECRET:
            return "[secret]"
        if sig == _SIG_RESOURCE:
            typ, name = _urn_parts(value.get("urn", ""))
            return f"resource:{typ}::{name}"
        if sig is not None:
            return {k: _plain(value[k]) for k in sorted(value) if k != _SIG_KEY}
        return {k: _plain(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if value == _UNKNOWN:
        return "[unknown]"
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# The recorded inputs of large Kubernetes objects (CRDs: hundreds of KB of schema each) by a digest of their
# wire form, pickled: every plan of a process registers the same CRDs (the tests plan many configs), and
# walking their Struct is most of what recording them costs. Each record gets a copy of its own.
_recorded: dict[bytes, bytes] = {}
_recorded_bytes = [0]  # the bytes of _recorded's pickles
_recorded_lock = threading.Lock()  # (the SDK may call the monitor from its executor's threads)
RECORDED_KEPT = 64_000_000  # bytes of pickles kept; the oldest go first
LARGE_OBJECT = 16_384  # bytes of wire form from which an object's recorded inputs are kept


def _object_inputs(struct: Any) -> dict[str, Any]:
    """``_plain(_wire_dict(struct))`` of a Kubernetes object, from memory when it is large and was recorded
    before: the same bytes of wire form (serialized deterministically: map keys sorted) are the same inputs."""
    if struct.ByteSize() < LARGE_OBJECT:
        return _plain(_wire_dict(struct, []))
    key = hashlib.sha256(struct.SerializeToString(deterministic=True)).digest()
    with _recorded_lock:
        kept = _recorded.get(key)
    if kept is not None:
        return pickle.loads(kept)
    inputs = _plain(_wire_dict(struct, []))
    kept = pickle.dumps(inputs, protocol=pickle.HIGHEST_PROTOCOL)
    with _recorded_lock:
        if key not in _recorded:
            _recorded[key] = kept
            _recorded_bytes[0] += len(kept)
            while _recorded_bytes[0] > RECORDED_KEPT:
                _recorded_bytes[0] -= len(_recorded.pop(next(iter(_recorded))))
    return inputs


def _without_references(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _SIG_RESOURCE:
            return value.get("urn", "")
        return {k: _without_references(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_references(v) for v in value]
    return value


@dataclass
class Record:
    type: str
    name: str
    id: str | None
    parent: dict[str, str] | None
    depends_on: list[dict[str, str]]
    inputs: dict[str, Any]
    custom: bool
    urn: str
    options: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = {
            "type": self.type,
            "name": self.name,
            "id": self.id,
            "parent": self.parent,
            "dependsOn": self.depends_on,
            "inputs": self.inputs,
        }
        # What `pulumi up` and `destroy` do with the resource beyond its inputs, for reviewers of the
        # plan diff: protect, retainOnDelete, ignoreChanges, replaceOnChanges, deleteBeforeReplace, aliases.
        shown = {k: v for k, v in self.options.items() if k in RECORDED_OPTIONS}
        if shown:
            out["options"] = shown
        return out


# The resource options resources.json records (the provider instance stays in Record.options only).
RECORDED_OPTIONS = ("protect", "retainOnDelete", "ignoreChanges", "replaceOnChanges", "deleteBeforeReplace", "aliases")


class DuplicateURNError(RuntimeError):
    """Two registrations of one URN: the Pulumi engine stops a preview or `up` on the second one."""


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The mock monitor, plus a record of every registration in order. Like the engine, it refuses
    a URN registered twice (two resources of one type and name under one parent), with the engine's
    words (pkg/diag/errors.go, GetDuplicateResourceURNError, diagnostic 2001)."""

    def __init__(self, mocks: pulumi_mocks.Mocks, on_record: Callable[[Record], None] | None = None):
        super().__init__(mocks)
        self.records: list[Record] = []
        self.stack_outputs: dict[str, Any] = {}
        self.urns: set[str] = set()
        self.on_record = on_record

    def RegisterResource(self, request):
        if request.type == "pulumi:pulumi:Stack":
            return super().RegisterResource(request)
        urn = _engine_urn(request.parent, request.type, request.name)
        if urn in self.urns:
            raise DuplicateURNError(f"Duplicate resource URN '{urn}'; try giving it a unique name")
        self.urns.add(urn)
        references: list[dict[str, Any]] = []
        # Resource references among the inputs (a cluster handed to a node group) reach the mocks
        # as their URN: deserializing them for real would start lookups on another event loop. A
        # Kubernetes object reaches them as its identity, all they read of it (the SDK's decoding
        # of a CRD's whole schema, only to be dropped, was a good part of registering it), and its
        # inputs are recorded by ``_object_inputs``. Most other registrations go to the mocks as they came.
        only_identity = identity_only(request.type)
        if only_identity:
            fields = request.object.fields
            raw = {k: _wire_value(fields[k], references) for k in IDENTITY if k in fields}
            inputs = _object_inputs(request.object)
        else:
            raw = _wire_dict(request.object, references)
            inputs = _plain(raw)
        sanitized = request
        if references or only_identity:
            sanitized = type(request)()
            sanitized.CopyFrom(request)
            sanitized.object.Clear()
            sanitized.object.update(_without_references(raw))
        response = super().RegisterResource(sanitized)
        parent = None
        if request.parent and _urn_parts(request.parent)[0] != "pulumi:pulumi:Stack":
            parent = _ref(request.parent)
        # The SDK gathers dependencies in sets: sort them so the same program gives the same file.
        deps = sorted((_ref(u) for u in set(request.dependencies)), key=lambda d: (d["type"], d["name"]))
        options: dict[str, Any] = {}
        if request.protect:
            options["protect"] = True
        if request.retainOnDelete:
            options["retainOnDelete"] = True
        if request.ignoreChanges:
            options["ignoreChanges"] = sorted(request.ignoreChanges)
        if request.replaceOnChanges:
            # The inputs whose change replaces the resource, beyond its provider's own (`python -m infra diff`).
            options["replaceOnChanges"] = sorted(request.replaceOnChanges)
        if request.deleteBeforeReplace:
            options["deleteBeforeReplace"] = True
        if request.aliases or request.aliasURNs:
            options["aliases"] = [*(_alias(a) for a in request.aliases), *({"urn": u} for u in request.aliasURNs)]
        if request.provider:
            # "<provider urn>::<provider id>": which provider instance manages this resource.
            options["provider"] = _ref(request.provider.rsplit("::", 1)[0])
        record = Record(
            type=request.type,
            name=request.name,
            id=response.id if request.custom else None,
            parent=parent,
            depends_on=deps,
            inputs=_recorded_inputs(request.type, inputs),
            custom=bool(request.custom),
            urn=response.urn,
            options=options,
        )
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)
        return response


def _alias(alias: Any) -> dict[str, Any]:
    """One alias of a registration as the SDK sent it: ``{"urn": ...}`` or the spec's fields that are set."""
    if alias.HasField("urn"):
        return {"urn": alias.urn}
    spec = alias.spec
    out: dict[str, Any] = {f.name: v for f, v in spec.ListFields()}
    return out


DYNAMIC_TYPE_PREFIX = "pulumi-python:dynamic"


def _recorded_inputs(typ: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """What the plan shows of a registration's inputs: a dynamic resource's pickled provider code
    (kilobytes of base64) is left out; its other inputs are the resource's."""
    if typ.startswith(DYNAMIC_TYPE_PREFIX) and "__provider" in inputs:
        return {**inputs, "__provider": "(serialized dynamic provider)"}
    return inputs
