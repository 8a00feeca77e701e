"""The instance catalog read from AWS: ``ec2.describe_instance_types`` with boto3, in the same
``InstanceType`` shape as the built-in table in ``facts/catalog.py`` (preflight compares the two)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from facts.catalog import from_describe_instance_types
from facts.instance_types import InstanceType


def describe(names: Iterable[str], session: Any = None, region: str | None = None) -> dict[str, InstanceType]:
    """Read the facts for ``names`` from AWS with boto3 (``ec2.describe_instance_types``).

    Types AWS does not return (not offered in the region) are absent from the result.
    """
    import boto3  # imported here: the CLI loads this module without needing AWS libraries

    session = session or boto3.session.Session(region_name=region)
    ec2 = session.client("ec2", region_name=region)
    wanted = sorted(set(names))
    found: dict[str, InstanceType] = {}
    paginator = ec2.get_paginator("describe_instance_types")
    # Ask for each name separately: DescribeInstanceTypes fails the whole call on one unknown name.
    for name in wanted:
        try:
            for page in paginator.paginate(InstanceTypes=[name]):
                for item in page.get("InstanceTypes", []):
                    found[item["InstanceType"]] = from_describe_instance_types(item)
        except ec2.exceptions.ClientError as err:  # pragma: no cover - exercised against real AWS
            if err.response.get("Error", {}).get("Code") != "InvalidInstanceType":
                raise
    return found
