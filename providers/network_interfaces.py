"""The network interfaces a SageMaker training job in a VPC leaves in its subnets, and their
clean-up once the job is deleted: every interface with the job's own security group is detached
and deleted; those SageMaker still holds (requester-managed, in use) are waited for, with growing
pauses, and what cannot be deleted is a warning, not an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from providers.aws_access import ClientFactory, Warn, _client, _error, _warn

# EC2 errors of the network-interface clean-up (EC2 models no errors: these are the codes of the EC2
# API reference's "Error codes", and what EC2 answers for interfaces another service manages).
# An interface (or its attachment) that no longer exists.
ENI_GONE = ("InvalidNetworkInterfaceID.NotFound",)
ATTACHMENT_GONE = ("InvalidAttachmentID.NotFound",)
# Still attached or being released: wait and try again. DeleteNetworkInterface answers
# InvalidNetworkInterface.InUse, or InvalidParameterValue "Network interface 'eni-...' is currently in use".
ENI_IN_USE = ("InvalidNetworkInterface.InUse",)
# What EC2 answers the account for an interface a service manages (requester-managed: "You can't
# detach a requester-managed network interface"; the service detaches and deletes it itself).
ENI_MANAGED = ("OperationNotPermitted", "AuthFailure")
ENI_SECONDS = 900  # how long a destroy waits for SageMaker to release its interfaces
ENI_FIRST_PAUSE, ENI_LONGEST_PAUSE = 5, 60  # the pause between rounds doubles, up to the longest


def _interfaces(ec2: Any, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = ec2.describe_network_interfaces(Filters=filters, **({"NextToken": token} if token else {}))
        out += page.get("NetworkInterfaces", [])
        token = page.get("NextToken")
        if not token:
            return out


def _release(ec2: Any, eni: dict[str, Any]) -> tuple[str, str]:
    """One try at deleting one interface: ("deleted" | "gone" | "busy" | "failed", why)."""
    eni_id = eni["NetworkInterfaceId"]
    attachment = eni.get("Attachment") or {}
    held = bool(attachment.get("AttachmentId")) and attachment.get("Status") != "detached"
    attached = held and attachment.get("Status") != "detaching"
    # SageMaker's own interfaces: the account may not detach them; SageMaker detaches (and usually
    # deletes) them itself once the job's instances are gone.
    managed = bool(eni.get("RequesterManaged")) or attachment.get("InstanceOwnerId") == "amazon-aws"
    if held and managed:
        return (
            "busy",
            f"{attachment.get('Status') or 'attached'}, managed by "
            f"{eni.get('RequesterId') or 'AWS'}: waiting for it to be released",
        )
    try:
        if attached:
            try:
                ec2.detach_network_interface(AttachmentId=attachment["AttachmentId"], Force=True)
            except Exception as err:
                if _error(err)[0] not in ATTACHMENT_GONE:
                    raise
        # A detachment takes a while: deleting before it has finished fails "in use", and is tried again.
        ec2.delete_network_interface(NetworkInterfaceId=eni_id)
        return "deleted", ""
    except Exception as err:
        code, message = _error(err)
        why = f"{code}: {message}" if code else f"{type(err).__name__}: {err}"
        if code in ENI_GONE:
            return "gone", ""  # SageMaker removes its interfaces too, at the same time
        if code in ENI_IN_USE or (code == "InvalidParameterValue" and "in use" in message.lower()):
            return "busy", why
        if managed and code in ENI_MANAGED:
            return "busy", why
        return "failed", why


def delete_interfaces(
    region: str,
    security_group_ids: list[str],
    subnet_ids: list[str],
    client: ClientFactory = _client,
    sleep: Callable[[float], None] = time.sleep,
    warn: Warn = _warn,
    job: str = "",
    timeout_seconds: int = ENI_SECONDS,
) -> list[str]:
    """Detach and delete every network interface in ``subnet_ids`` with one of ``security_group_ids``
    (the job's own group: nothing else carries it); returns the IDs deleted.

    Interfaces still in use or held by SageMaker are tried again, with pauses doubling from
    ENI_FIRST_PAUSE to ENI_LONGEST_PAUSE, for up to ``timeout_seconds``. What is left then, and
    any other error, is a warning, not a failure: the job is gone, and the stack's own delete of the
    security group and subnets then names whatever still holds them."""
    if not security_group_ids or not subnet_ids:
        return []
    ec2 = client("ec2", region)
    filters = [
        {"Name": "group-id", "Values": list(security_group_ids)},
        {"Name": "subnet-id", "Values": list(subnet_ids)},
    ]
    label = f"SageMaker training job {job}" if job else "SageMaker training job"
    deadline = time.monotonic() + timeout_seconds
    pause = ENI_FIRST_PAUSE
    deleted: list[str] = []
    failed: dict[str, str] = {}
    while True:
        try:
            found = [e for e in _interfaces(ec2, filters) if e["NetworkInterfaceId"] not in failed]
        except Exception as err:
            code, message = _error(err)
            warn(
                f"{label}: could not list its network interfaces "
                f"({code or type(err).__name__}: {message or err}); none were deleted."
            )
            return deleted
        busy: dict[str, str] = {}
        for eni in found:
            outcome, why = _release(ec2, eni)
            if outcome == "deleted":
                deleted.append(eni["NetworkInterfaceId"])
            elif outcome == "busy":
                busy[eni["NetworkInterfaceId"]] = why
            elif outcome == "failed":
                failed[eni["NetworkInterfaceId"]] = why
        if not busy:
            break
        if time.monotonic() >= deadline:
            failed.update({k: f"{v} (still, after {timeout_seconds} s)" for k, v in busy.items()})
            break
        sleep(pause)
        pause = min(pause * 2, ENI_LONGEST_PAUSE)
    if failed:
        listed = "; ".join(f"{k}: {v}" for k, v in sorted(failed.items()))
        groups = ", ".join(security_group_ids)
        warn(
            f"{label}: {len(failed)} network interface(s) with security group {groups} could not be deleted: {listed}. "
            "Deleting the group and the subnets fails while they exist: wait "
            "for SageMaker to release them, or delete them "
            "(aws ec2 delete-network-interface --network-interface-id <id>), then "
            "run `pulumi destroy` (or `pulumi up`) again."
        )
    return deleted
