"""IAM helpers shared by components: one role per driver or agent, bound through EKS Pod Identity."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_aws as aws

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_trust_policy() -> str:
    """Trust policy letting the EKS Pod Identity agent hand this role to a service account."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                }
            ],
        }
    )


def pod_identity_role(
    name: str,
    *,
    description: str,
    managed_policies: tuple[str, ...] = (),
    inline_policy: pulumi.Input[str] | None = None,
    tags: dict[str, str] | None = None,
    parent: pulumi.Resource,
) -> aws.iam.Role:
    """A role for one service account: AWS managed policies by path (e.g. "service-role/X")
    and/or one inline policy document."""
    opts = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(
        name,
        assume_role_policy=pod_identity_trust_policy(),
        description=description,
        tags=tags or {},
        opts=opts,
    )
    partition = aws.get_partition_output(opts=pulumi.InvokeOutputOptions(parent=parent)).partition
    for policy in managed_policies:
        short = policy.split("/")[-1]
        aws.iam.RolePolicyAttachment(
            f"{name}-{short}",
            role=role.name,
            policy_arn=pulumi.Output.format("arn:{0}:iam::aws:policy/{1}", partition, policy),
            opts=opts,
        )
    if inline_policy is not None:
        aws.iam.RolePolicy(f"{name}-inline", role=role.id, policy=inline_policy, opts=opts)
    return role


def policy_document(statements: list[dict[str, Any]]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def pod_identity_association(
    name: str,
    *,
    cluster_name: pulumi.Input[str],
    namespace: str,
    service_account: str,
    role: aws.iam.Role,
    tags: dict[str, str],
    parent: pulumi.Resource,
    depends_on: list[pulumi.Resource],
) -> aws.eks.PodIdentityAssociation:
    """Binds ``role`` to one service account through EKS Pod Identity (``depends_on``: the agent add-on)."""
    return aws.eks.PodIdentityAssociation(
        name,
        cluster_name=cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.arn,
        tags=tags,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=depends_on),
    )
