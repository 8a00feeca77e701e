"""The offline engine: runs the real Pulumi program in-process against Pulumi's runtime mocks.

It stands in for the cloud only. Every resource gets a stable fake id and the outputs the program
reads; invokes that ask AWS about the region (AZs, instance type offerings) are answered from
AWS's recorded data that moto ships, and lookups of what the stack has already made (its GPU
subnet) from ``infra/offline_deployed.py``: nothing by default, a new stack. The program itself
runs unchanged.

Used by the offline plan (``python -m infra plan``) and by the tests.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import hashlib
import importlib.util
import json
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pulumi
import pulumi.resource as pulumi_resource
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from infra import offline_deployed
from infra.offline_deployed import Deployed

ACCOUNT_ID = "123456789012"

# Wire-format signatures of the Pulumi RPC layer.
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SIG_SECRET = "1b47061264138c4ac30d75fd1eb44270"
_SIG_RESOURCE = "5cf8f73096256a8f31e491e813e4eb8e"
_UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

# Fake physical id prefixes by resource type, so ids look like what AWS would return.
_ID_PREFIX = {
    "aws:ec2/vpc:Vpc": "vpc-",
    "aws:ec2/subnet:Subnet": "subnet-",
    "aws:ec2/internetGateway:InternetGateway": "igw-",
    "aws:ec2/natGateway:NatGateway": "nat-",
    "aws:ec2/eip:Eip": "eipalloc-",
    "aws:ec2/routeTable:RouteTable": "rtb-",
    "aws:ec2/routeTableAssociation:RouteTableAssociation": "rtbassoc-",
    "aws:ec2/securityGroup:SecurityGroup": "sg-",
    "aws:ec2/launchTemplate:LaunchTemplate": "lt-",
    "aws:ec2/vpcEndpoint:VpcEndpoint": "vpce-",
    "aws:ec2/placementGroup:PlacementGroup": "pg-",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": "sgr-",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": "sgr-",
    "aws:efs/fileSystem:FileSystem": "fs-",
    "aws:efs/mountTarget:MountTarget": "fsmt-",
    "aws:efs/accessPoint:AccessPoint": "fsap-",
    "aws:fsx/lustreFileSystem:LustreFileSystem": "fs-",
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": "dra-",
}


def _digest(*parts: str, n: int = 17) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:n]


# ---------------------------------------------------------------------------------------------
# AWS's recorded region data (shipped by moto)
# ---------------------------------------------------------------------------------------------


def _moto_resources() -> Optional[Path]:
    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "ec2" / "resources"


class OfflineDataError(RuntimeError):
    """The offline engine has no recorded AWS data for what the stack asks (a region moto does not
    ship offering data for). A real `pulumi up` asks AWS instead."""


@lru_cache(maxsize=None)
def az_offerings(region: str) -> dict[str, set[str]]:
    """Instance type -> AZ names offering it in ``region``, from AWS's recorded data."""
    base = _moto_resources()
    path = base / "instance_type_offerings" / "availability-zone" / f"{region}.json.gz" if base else None
    if path is None or not path.exists():
        recorded = sorted(p.name.removesuffix(".json.gz") for p in (base / "instance_type_offerings" / "availability-zone").glob("*.json.gz")) if base else []
        raise OfflineDataError(
            f"the offline plan has no recorded AWS offering data for region {region!r} (it has: {', '.join(recorded) or 'none; install the dev requirements'}); "
            "plan a stack in one of those regions offline, or run `pulumi preview` against AWS"
        )
    offered: dict[str, set[str]] = {}
    for item in json.loads(gzip.decompress(path.read_bytes())):
        offered.setdefault(item["InstanceType"], set()).add(item["Location"])
    return offered


def region_azs(region: str) -> list[str]:
    return sorted({az for azs in az_offerings(region).values() for az in azs})


# ---------------------------------------------------------------------------------------------
# Mocks
# ---------------------------------------------------------------------------------------------


def _fake_kubeconfig(cluster_name: str, region: str) -> dict[str, Any]:
    endpoint = f"https://{_digest(cluster_name, n=32).upper()}.gr7.{region}.eks.amazonaws.com"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": "TU9DSw=="}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "users": [
            {
                "name": cluster_name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": ["eks", "get-token", "--cluster-name", cluster_name, "--output", "json"],
                    }
                },
            }
        ],
    }


# What the mocks read of a Kubernetes object (not a Helm release): the rest never reaches them.
_IDENTITY = ("apiVersion", "kind", "metadata")


def _identity_only(typ: str) -> bool:
    return typ.startswith("kubernetes:") and not typ.startswith("kubernetes:helm.sh/")


class OfflineMocks(pulumi_mocks.Mocks):
    """Stable fake ids and the outputs the program reads; region facts from recorded AWS data."""

    def __init__(self, region: str, deployed: Optional[Deployed] = None):
        self.region = region
        self.deployed = deployed or Deployed()  # what the stack already has (default: nothing, a new stack)

    # -- resources ------------------------------------------------------------------------
    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        typ, name, inputs = args.typ, args.name, dict(args.inputs)
        if args.resource_id:
            return args.resource_id, inputs
        if _identity_only(typ):
            # Kubernetes objects: the program reads back only their metadata (names), and a CRD's
            # schema runs to hundreds of kilobytes: hand back the identity only (sending whole
            # objects through the mock monitor again is most of what registering them costs here).
            return f"{name}-{_digest(typ, name)}", {k: inputs[k] for k in _IDENTITY if k in inputs}
        rid = _ID_PREFIX.get(typ, f"{name}-") + _digest(typ, name)
        arn_service = typ.split(":")[1].split("/")[0] if ":" in typ else "unknown"
        state = dict(inputs)
        state.setdefault("arn", f"arn:aws:{arn_service}:{self.region}:{ACCOUNT_ID}:{name}/{rid}")
        state.setdefault("name", inputs.get("name") or f"{name}-{_digest(typ, name, n=7)}")
        extra = self._extra_outputs(typ, name, inputs, rid)
        state.update(extra)
        return rid, state

    def _extra_outputs(self, typ: str, name: str, inputs: dict, rid: str) -> dict[str, Any]:
        if typ == "aws:iam/role:Role":
            role_name = inputs.get("name") or f"{name}-{_digest(typ, name, n=7)}"
            return {"arn": f"arn:aws:iam::{ACCOUNT_ID}:role/{role_name}", "name": role_name, "uniqueId": "AROA" + _digest(name).upper()}
        if typ == "aws:kms/key:Key":
            key_id = f"{_digest(name, n=8)}-{_digest(name, 'a', n=4)}-{_digest(name, 'b', n=4)}-{_digest(name, 'c', n=4)}-{_digest(name, 'd', n=12)}"
            return {"keyId": key_id, "arn": f"arn:aws:kms:{self.region}:{ACCOUNT_ID}:key/{key_id}"}
        if typ == "aws:ec2/launchTemplate:LaunchTemplate":
            return {"latestVersion": 1, "defaultVersion": 1}
        if typ == "aws:ec2/securityGroup:SecurityGroup":
            return {"arn": f"arn:aws:ec2:{self.region}:{ACCOUNT_ID}:security-group/{rid}"}
        if typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
            return {
                "dnsName": f"{rid}.fsx.{self.region}.amazonaws.com",
                "mountName": _digest("mount", name, n=8),
                "networkInterfaceIds": ["eni-" + _digest("eni", name)],
            }
        if typ == "aws:eks/nodeGroup:NodeGroup":
            # EKS makes one Auto Scaling group per managed node group, named eks-<group>-<uuid>.
            group = inputs.get("nodeGroupName") or name
            return {"resources": [{"autoscalingGroups": [{"name": f"eks-{group}-{_digest('asg', group, n=8)}"}], "remoteAccessSecurityGroupId": ""}]}
        if typ == "aws:efs/fileSystem:FileSystem":
            return {"dnsName": f"{rid}.efs.{self.region}.amazonaws.com"}
        if typ == "eks:index:Cluster":
            cluster_name = inputs.get("name") or name
            kubeconfig = _fake_kubeconfig(cluster_name, self.region)
            oidc = f"oidc.eks.{self.region}.amazonaws.com/id/{_digest(cluster_name, n=32).upper()}"
            return {
                "kubeconfig": kubeconfig,
                "kubeconfigJson": json.dumps(kubeconfig, sort_keys=True),
                "clusterSecurityGroupId": "sg-" + _digest("cluster-sg", cluster_name),
                "nodeSecurityGroupId": "sg-" + _digest("node-sg", cluster_name),
                "oidcProviderArn": f"arn:aws:iam::{ACCOUNT_ID}:oidc-provider/{oidc}",
                "oidcProviderUrl": f"https://{oidc}",
                "oidcIssuer": oidc,
            }
        return {}

    # -- invokes --------------------------------------------------------------------------
    def call(self, args: pulumi_mocks.MockCallArgs):
        token, a = args.token, args.args
        if token == "aws:index/getPartition:getPartition":
            return {"id": "aws", "partition": "aws", "dnsSuffix": "amazonaws.com", "reverseDnsPrefix": "com.amazonaws"}
        if token == "aws:index/getRegion:getRegion":
            return {"id": self.region, "name": self.region, "region": self.region, "endpoint": f"ec2.{self.region}.amazonaws.com"}
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"id": ACCOUNT_ID, "accountId": ACCOUNT_ID, "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/offline", "userId": "AIDAOFFLINE"}
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            names = region_azs(self.region)
            return {"id": self.region, "names": names, "zoneIds": [f"{self.region[:2]}{self.region.split('-')[-1]}-az{i + 1}" for i in range(len(names))]}
        if token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            wanted: Optional[set[str]] = None
            for f in a.get("filters") or []:
                if f.get("name") == "instance-type":
                    wanted = set(f.get("values") or [])
            types, locs = [], []
            for t, azs in sorted(az_offerings(self.region).items()):
                if wanted is not None and t not in wanted:
                    continue
                for az in sorted(azs):
                    types.append(t)
                    locs.append(az)
            return {"id": self.region, "instanceTypes": types, "locations": locs, "locationTypes": ["availability-zone"] * len(types)}
        if token in offline_deployed.TOKENS:  # what the stack has already made (its GPU subnet)
            return self.deployed.answer(token, a, self.region)
        raise NotImplementedError(f"the offline engine has no answer for invoke {token}")


# ---------------------------------------------------------------------------------------------
# Recording monitor
# ---------------------------------------------------------------------------------------------


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
    id: Optional[str]
    parent: Optional[dict[str, str]]
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
        # plan diff: protect, retainOnDelete, ignoreChanges, deleteBeforeReplace, aliases.
        shown = {k: v for k, v in self.options.items() if k in RECORDED_OPTIONS}
        if shown:
            out["options"] = shown
        return out


# The resource options resources.json records (the provider instance stays in Record.options only).
RECORDED_OPTIONS = ("protect", "retainOnDelete", "ignoreChanges", "deleteBeforeReplace", "aliases")


class DuplicateURNError(RuntimeError):
    """Two registrations of one URN: the Pulumi engine stops a preview or `up` on the second one."""


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """The mock monitor, plus a record of every registration in order. Like the engine, it refuses
    a URN registered twice (two resources of one type and name under one parent), with the engine's
    words (pkg/diag/errors.go, GetDuplicateResourceURNError, diagnostic 2001)."""

    def __init__(self, mocks: pulumi_mocks.Mocks, on_record: Optional[Callable[[Record], None]] = None):
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
        raw = _wire_dict(request.object, references)
        # Resource references among the inputs (a cluster handed to a node group) reach the mocks
        # as their URN: deserializing them for real would start lookups on another event loop. A
        # Kubernetes object reaches them as its identity, all they read of it (the SDK's decoding
        # of a CRD's whole schema, only to be dropped, was a good part of registering it). Most
        # other registrations go to the mocks as they came.
        identity_only = _identity_only(request.type)
        sanitized = request
        if references or identity_only:
            sanitized = type(request)()
            sanitized.CopyFrom(request)
            sanitized.object.Clear()
            sanitized.object.update(_without_references({k: raw[k] for k in _IDENTITY if k in raw} if identity_only else raw))
        response = super().RegisterResource(sanitized)
        parent = None
        if request.parent and not _urn_parts(request.parent)[0] == "pulumi:pulumi:Stack":
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
            inputs=_recorded_inputs(request.type, _plain(raw)),
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


# ---------------------------------------------------------------------------------------------
# Running the program
# ---------------------------------------------------------------------------------------------


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
        out = []
        for r in self.records:
            if not r.type.startswith("kubernetes:") or r.type.startswith("kubernetes:helm.sh/") or r.type.startswith("pulumi:providers"):
                continue
            if "apiVersion" in r.inputs and "kind" in r.inputs:
                out.append(r.inputs)
        return out


_heap_frozen = False


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
    region: Optional[str] = None,
    on_record: Optional[Callable[[Record], None]] = None,
    deployed: Optional[Deployed] = None,
) -> PlanResult:
    """Run ``program`` against the offline engine with ``config`` (``{"ns:key": value}``).

    Returns what was registered, in order, and the resolved stack outputs (secrets masked).
    ``on_record`` sees each registration as it is recorded (from the monitor's threads).
    ``deployed``: what the stack already has in AWS (default: nothing, a new stack).
    """
    region = region or str(config.get("aws:region") or "us-west-2")
    mocks = OfflineMocks(region, deployed)
    monitor = RecordingMonitor(mocks, on_record)
    pulumi_mocks.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor)
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

    pulumi_resource.register_resource = register_in_order
    try:
        with collector_paused():
            _sync_await(run_pulumi_func(body))
    except DuplicateURNError:
        _end_pending_tasks()
        raise
    finally:
        pulumi_resource.register_resource = original_register
        if saved_env_config is not None:
            os.environ["PULUMI_CONFIG"] = saved_env_config
    position = {key: i for i, key in reversed(list(enumerate(constructed)))}
    records = sorted(monitor.records, key=lambda r: position.get((r.type, r.name), len(position)))
    return PlanResult(records=records, outputs=outputs, deployed=mocks.deployed)


def _quiet_about_duplicates(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if not isinstance(context.get("exception"), DuplicateURNError):
        loop.default_exception_handler(context)


def _end_pending_tasks() -> None:
    """A run stopped at a duplicate URN leaves the SDK's other registrations and outputs pending (the
    mocks' settings keep the set of output tasks from run to run); end them, so that the next run in
    this process starts clean instead of meeting them."""
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
