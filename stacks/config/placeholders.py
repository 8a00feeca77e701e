"""Placeholders a stack file copied from an example may still hold: values that are valid, so the
config checks take them, but belong to nobody (facts.aws_names: the documentation networks of
RFC 5737, the example account ids of AWS's documentation).

The offline plan prints them as warnings (an example stack plans as it is); preflight, the step
before a real `pulumi up`, fails on them: with 203.0.113.0/24 as the only public endpoint CIDR
nobody reaches the cluster's API, and an access entry for a role in 111122223333 is refused.
"""

from __future__ import annotations

from facts import aws_names
from facts.problems import Problem, entry_keys
from stacks.config.models import NAMESPACE
from stacks.config.stack_config import StackConfig


def placeholders(cfg: StackConfig) -> list[Problem]:
    """Every placeholder value in ``cfg``, naming its key, the value and what to put there."""
    found: list[Problem] = []
    c = cfg.cluster
    if c.endpoint_public_access:
        for i, cidr in enumerate(c.endpoint_public_access_cidrs):
            block = aws_names.documentation_network(cidr)
            if block is not None:
                found.append(
                    Problem(
                        f"{NAMESPACE}:cluster.endpointPublicAccessCidrs[{i}]",
                        f"{cidr!r} is in {block}, a range reserved for documentation (RFC "
                        "5737) that no client has: with it nobody "
                        "reaches the public endpoint; put the public CIDR of your network or CI runners there",
                    )
                )
    for i, arn in enumerate(c.admin_principals):
        account = aws_names.example_account(arn)
        if account is not None:
            found.append(
                Problem(
                    f"{NAMESPACE}:cluster.adminPrincipals[{i}]",
                    f"{arn!r} is in {account}, the example account of AWS's "
                    "documentation, not yours: its access entry would make "
                    "nobody of yours an admin; put the ARN of your own admin role there "
                    "(aws sts get-caller-identity shows your account)",
                )
            )
    team_keys = entry_keys(f"{NAMESPACE}:queues.teams", [t.name for t in cfg.queues.teams])
    for tk, team in zip(team_keys, cfg.queues.teams, strict=True):
        account = aws_names.example_account(team.role_arn) if team.role_arn else None
        if account is not None:
            found.append(
                Problem(
                    f"{tk}.roleArn",
                    f"{team.role_arn!r} is in {account}, the example account of AWS's "
                    "documentation, not yours: its access entry would "
                    f"let nobody of yours submit jobs to team {team.name!r}; put "
                    "the ARN of the team's own IAM role there",
                )
            )
    for jk, job in zip(entry_keys(f"{NAMESPACE}:jobs", [j.name for j in cfg.jobs]), cfg.jobs, strict=True):
        account = aws_names.example_account(job.image)
        if job.enabled and account is not None and ".dkr.ecr." in job.image:
            found.append(
                Problem(
                    f"{jk}.image",
                    f"{job.image!r} is in the ECR registry of {account}, the example "
                    "account of AWS's documentation: no image can be "
                    "pulled from it; push the image to your own registry and name it there",
                )
            )
    return found
