"""What the offline engine knows of a stack that is already deployed: by default nothing, so the
offline plan is the plan of a new stack.

The program looks up what the stack has already made (``stacks/placement.py``: the GPU subnet, by
its tags, to keep the GPU AZ). The engine answers those lookups from a ``Deployed``: its subnets,
as AWS would (``aws.ec2.get_subnets`` by tags and filters, ``aws.ec2.get_subnet`` by id). Tests
simulate a deployed stack with ``Deployed.from_records``: the subnets an earlier plan registered,
with the ids, AZs and tags that plan gave them, and every record of that plan as the stack's state
(``resources``, as resources.json lists them), against which the plan of the running stack checks the
changes the API refuses on update (infra/diff/refusals.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SUBNET_TYPE = "aws:ec2/subnet:Subnet"
GET_SUBNETS = "aws:ec2/getSubnets:getSubnets"
GET_SUBNET = "aws:ec2/getSubnet:getSubnet"
TOKENS = (GET_SUBNETS, GET_SUBNET)


class UnknownSubnetError(LookupError):
    """``aws.ec2.get_subnet`` asked for a subnet the deployed stack does not have (AWS: no matching subnet)."""


@dataclass(frozen=True)
class Subnet:
    id: str
    availability_zone: str
    tags: Mapping[str, str] = field(default_factory=dict)
    vpc_id: str = ""
    cidr_block: str = ""

    def matches(self, tags: Mapping[str, str], filters: list[dict[str, Any]]) -> bool:
        """Whether DescribeSubnets with these tags (each pair must match) and filters returns it."""
        if any(self.tags.get(k) != v for k, v in tags.items()):
            return False
        return all(self._value(f["name"]) in (f.get("values") or []) for f in filters)

    def _value(self, name: str) -> str | None:
        if name.startswith("tag:"):
            return self.tags.get(name.removeprefix("tag:"))
        fields = {
            "availability-zone": self.availability_zone,
            "subnet-id": self.id,
            "vpc-id": self.vpc_id,
            "cidr-block": self.cidr_block,
        }
        if name not in fields:
            raise NotImplementedError(
                f"the offline engine cannot filter subnets by {name!r} (it knows tag:<key>, {', '.join(fields)})"
            )
        return fields[name]

    def as_result(self) -> dict[str, Any]:
        """What ``aws.ec2.get_subnet`` returns of it."""
        return {
            "id": self.id,
            "availabilityZone": self.availability_zone,
            "tags": dict(self.tags),
            "vpcId": self.vpc_id,
            "cidrBlock": self.cidr_block,
        }


@dataclass(frozen=True)
class Deployed:
    """The deployed stack as the engine answers for it; empty: a new stack."""

    subnets: tuple[Subnet, ...] = ()
    resources: tuple[dict[str, Any], ...] = ()  # the state: each resource as resources.json lists it

    @classmethod
    def from_records(cls, records: Iterable[Any]) -> Deployed:
        """The subnets and the state of a plan's records (``offline.Record``), as a `pulumi up` of that plan
        left them."""
        records = list(records)
        return cls(
            tuple(
                Subnet(
                    r.id,
                    r.inputs["availabilityZone"],
                    dict(r.inputs.get("tags") or {}),
                    str(r.inputs.get("vpcId", "")),
                    str(r.inputs.get("cidrBlock", "")),
                )
                for r in records
                if r.type == SUBNET_TYPE
            ),
            tuple(r.as_json() for r in records),
        )

    def find(self, tags: Mapping[str, str], filters: list[dict[str, Any]] | None = None) -> list[Subnet]:
        return [s for s in self.subnets if s.matches(tags, filters or [])]

    def answer(self, token: str, args: Mapping[str, Any], region: str) -> dict[str, Any]:
        """The answer to one of ``TOKENS``."""
        if token == GET_SUBNETS:
            found = self.find(args.get("tags") or {}, list(args.get("filters") or []))
            return {"id": region, "ids": [s.id for s in found], "tags": dict(args.get("tags") or {}), "region": region}
        wanted = args.get("id")
        for s in self.subnets:
            if s.id == wanted:
                return s.as_result()
        raise UnknownSubnetError(
            f"no matching EC2 Subnet found (id {wanted!r}; the simulated deployed stack has {len(self.subnets)} "
            "subnets)"
        )
