"""How long a first `pulumi up` of a plan takes, estimated from its dependency graph: each resource
takes its type's typical creation time and starts when everything it needs is there. The longest
chain is the critical path; the "floor" is the chain no stack can avoid (network, cluster, system
nodes, managed add-ons).

The minutes are typical creation times seen for each resource type in us-west-2 (AWS's documented
ranges where there are any: an EKS control plane takes about 10 minutes, a managed node group 3-5,
FSx for Lustre SCRATCH 5-10 and PERSISTENT_2 about 15), rounded; they are an estimate to compare
plans, not a promise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.offline import Record

# Typical minutes to create one resource of a type; unlisted AWS and Kubernetes types take DEFAULT.
TYPICAL_MINUTES: dict[str, float] = {
    "aws:ec2/vpc:Vpc": 0.3,
    "aws:ec2/subnet:Subnet": 0.2,
    "aws:ec2/natGateway:NatGateway": 2.0,
    "aws:ec2/vpcEndpoint:VpcEndpoint": 1.0,
    "aws:ec2/securityGroup:SecurityGroup": 0.2,
    "aws:iam/role:Role": 0.2,
    "aws:kms/key:Key": 0.5,
    "eks:index:Cluster": 10.0,
    "eks:index:ManagedNodeGroup": 4.0,
    "aws:eks/nodeGroup:NodeGroup": 4.0,
    "aws:eks/addon:Addon": 1.5,
    "aws:efs/fileSystem:FileSystem": 0.5,
    "aws:efs/mountTarget:MountTarget": 1.5,
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": 5.0,
    "kubernetes:helm.sh/v3:Release": 1.5,
    "kubernetes:apps/v1:Deployment": 1.0,
    "kubernetes:apps/v1:StatefulSet": 1.5,
    "kubernetes:apps/v1:DaemonSet": 1.0,
}
FSX_MINUTES = {"SCRATCH_1": 6.0, "SCRATCH_2": 8.0, "PERSISTENT_1": 12.0, "PERSISTENT_2": 15.0}
ADDON_MINUTES = {
    "eks-node-monitoring-agent": 1.0,
    "eks-pod-identity-agent": 1.0,
    "aws-efs-csi-driver": 2.0,
    "aws-fsx-csi-driver": 2.0,
    "amazon-cloudwatch-observability": 3.0,
}
DEFAULT = 0.1


def minutes(record: Record) -> float:
    """Typical creation minutes of one resource (our components and providers: none of their own;
    pulumi-eks' cluster and node group are remote components that create the real thing)."""
    if record.type in TYPICAL_MINUTES and not record.custom:
        return TYPICAL_MINUTES[record.type]
    if not record.custom or record.type.startswith("pulumi:providers:"):
        return 0.0
    if record.type == "aws:fsx/lustreFileSystem:LustreFileSystem":
        return FSX_MINUTES.get(str(record.inputs.get("deploymentType")), 10.0)
    if record.type == "aws:eks/addon:Addon":
        return ADDON_MINUTES.get(str(record.inputs.get("addonName")), TYPICAL_MINUTES[record.type])
    return TYPICAL_MINUTES.get(record.type, DEFAULT)


def _references(value: Any) -> set[tuple[str, str]]:
    """Resource references among the inputs ("resource:<type>::<name>"): a remote component such
    as pulumi-eks' node group waits for the cluster it is handed. (A walk with a stack of its own: the
    inputs hold whole CRD schemas, and a generator per level cost a fifth of the summary.)"""
    found: set[tuple[str, str]] = set()
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if item.startswith("resource:"):
                typ, _, name = item[len("resource:") :].partition("::")
                found.add((typ, name))
        elif isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return found


@dataclass(frozen=True)
class Step:
    type: str
    name: str
    minutes: float
    finish: float


@dataclass(frozen=True)
class CriticalPath:
    total: float  # minutes of the longest chain
    chain: list[Step]  # that chain, first to last (resources that take time)
    floor: float  # minutes until the system nodes and every managed add-on are up
    floor_chain: list[Step]


def estimate(records: list[Record]) -> CriticalPath:
    """The critical path of a plan's records, and its floor."""
    by_key = {(r.type, r.name): r for r in records}
    children: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        if r.parent:
            children.setdefault((r.parent["type"], r.parent["name"]), []).append(r)

    def needs(r: Record) -> set[tuple[str, str]]:
        keys = {(d["type"], d["name"]) for d in r.depends_on}
        keys |= _references(r.inputs)
        provider = r.options.get("provider")
        if provider:
            keys.add((provider["type"], provider["name"]))
        return {k for k in keys if k in by_key and k != (r.type, r.name)}

    finish: dict[tuple[str, str], float] = {}
    via: dict[tuple[str, str], tuple[str, str] | None] = {}
    visiting: set[tuple[str, str]] = set()

    def done(key: tuple[str, str]) -> float:
        """When ``key`` is complete: a resource after its needs and its own minutes, a component
        when all its children are (depending on a component waits for its children)."""
        if key in finish:
            return finish[key]
        if key in visiting:  # a cycle cannot happen in a Pulumi graph; do not loop on bad data
            return 0.0
        visiting.add(key)
        r = by_key[key]
        before = [(done(k), k) for k in sorted(needs(r))]
        if not r.custom and r.type not in TYPICAL_MINUTES:
            before += [(done((c.type, c.name)), (c.type, c.name)) for c in children.get(key, [])]
        start, prev = max(before, default=(0.0, None))
        finish[key] = start + minutes(r)
        via[key] = prev
        visiting.discard(key)
        return finish[key]

    def chain_to(key: tuple[str, str] | None) -> list[Step]:
        steps: list[Step] = []
        while key is not None:
            r = by_key[key]
            if minutes(r) > 0:
                steps.append(Step(r.type, r.name, minutes(r), finish[key]))
            key = via.get(key)
        return list(reversed(steps))

    for r in records:
        done((r.type, r.name))
    end = max(finish, key=lambda k: (finish[k], k)) if finish else None
    floor_keys = [
        k
        for k, r in by_key.items()
        if r.type == "aws:eks/addon:Addon" or (r.type == "eks:index:ManagedNodeGroup" and r.name == "system-mng")
    ]
    floor_end = max(floor_keys, key=lambda k: (finish[k], k)) if floor_keys else None
    return CriticalPath(
        total=finish[end] if end else 0.0,
        chain=chain_to(end),
        floor=finish[floor_end] if floor_end else 0.0,
        floor_chain=chain_to(floor_end),
    )


def describe(path: CriticalPath) -> str:
    """Lines for the plan summary."""

    def names(steps: list[Step]) -> str:
        return " -> ".join(f"{s.name} ({s.minutes:g})" for s in steps)

    share = (path.total / path.floor - 1) * 100 if path.floor else 0.0
    return (
        f"Estimated `pulumi up` of a new stack: {path.total:.1f} min on the critical path, "
        f"{path.floor:.1f} min for network, cluster, system nodes and add-ons ({share:+.0f}%)\n"
        f"  critical path: {names(path.chain)}\n"
    )
