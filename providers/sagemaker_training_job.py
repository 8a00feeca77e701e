"""A SageMaker training job as a Pulumi resource that does not wait for the job to finish.

Why not ``aws.sagemaker.TrainingJob`` (pulumi-aws 7.51.1, Terraform's ``aws_sagemaker_training_job``):
its create waits until the job is Completed or Stopped (``waitTrainingJobCreated`` in the
provider's internal/service/sagemaker: Pending ``InProgress``, Target ``Completed``/``Stopped``),
bounded by the create timeout (45 minutes by default). So ``pulumi up`` would block for the whole
training run, and a run longer than the timeout fails the create without the job being recorded:
it keeps running (and billing) where ``pulumi destroy`` cannot see it. Its delete (stop, wait,
DeleteTrainingJob, then the ENIs of the job's security group and subnets) is what we want, and is
what ``delete`` below does.

This provider:
- create: ``CreateTrainingJob`` (retried while a new role's trust or policy is still propagating),
  then returns as soon as SageMaker reports the job (``InProgress``): ``pulumi up`` does not wait
  for the run;
- read (``pulumi refresh``): the job's status;
- diff: any change replaces the job (a training job cannot be changed), the old one deleted first;
- delete (``pulumi destroy`` or a replacement): ``StopTrainingJob`` if it still runs, wait until it
  has stopped (it uploads its output and checkpoints first), ``DeleteTrainingJob`` (which frees the
  name), then detach and delete the network interfaces left in the job's subnets with its own
  security group, so the group and subnets can go.

AWS credentials come from the standard chain (AWS_PROFILE, ...), as for the AWS provider.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import pulumi
import pulumi.dynamic as dynamic

# Messages of CreateTrainingJob while a just-created role or its policy has not propagated yet
# (the same ones the Terraform resource retries on).
PROPAGATION_MESSAGES = (
    "Could not assume role",
    "Unauthorized to List objects under S3 URL",
    "Access denied to OutputDataConfig S3 bucket",
    "no identity-based policy allows the s3:ListBucket action",
    "Access denied for repository",
)
TERMINAL = ("Completed", "Failed", "Stopped")
# EC2 errors of an interface (or its attachment) that no longer exists.
ENI_GONE = ("InvalidNetworkInterfaceID.NotFound", "InvalidAttachmentID.NotFound")
DETACH_WAIT = {"Delay": 5, "MaxAttempts": 60}  # up to 5 minutes for a detachment to finish
PROPAGATION_SECONDS = 180
POLL_SECONDS = 15


def _client(service: str, region: str) -> Any:
    import boto3

    return boto3.client(service, region_name=region)


def _error(err: Exception) -> tuple[str, str]:
    response = getattr(err, "response", None) or {}
    e = response.get("Error", {})
    return str(e.get("Code", "")), str(e.get("Message", ""))


def _gone(response: dict[str, Any]) -> bool:
    return str((response.get("Error") or {}).get("Code", "")) in ENI_GONE


def _not_found(err: Exception) -> bool:
    code, message = _error(err)
    return code in ("ResourceNotFound", "ValidationException") and ("not found" in message.lower() or "does not exist" in message.lower())


def plain_request(request: Any) -> Any:
    """The request as boto3 takes it: Pulumi hands every number back to a provider as a float
    (protobuf's Struct), and SageMaker's integer fields refuse 2.0."""
    if isinstance(request, float) and request.is_integer():
        return int(request)
    if isinstance(request, dict):
        return {k: plain_request(v) for k, v in request.items()}
    if isinstance(request, list):
        return [plain_request(v) for v in request]
    return request


def create_job(
    request: dict[str, Any], region: str, client: Callable[[str, str], Any] = _client, sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """Start the training job; returns its ARN and status once SageMaker reports it. Retried while
    a new role propagates, and while a job of the same name replaced just before is still being
    deleted (ResourceInUse)."""
    sm = client("sagemaker", region)
    request = plain_request(request)
    deadline = time.monotonic() + PROPAGATION_SECONDS
    while True:
        try:
            sm.create_training_job(**request)
            break
        except Exception as err:  # botocore ClientError
            code, message = _error(err)
            retry = (code == "ValidationException" and any(m in message for m in PROPAGATION_MESSAGES)) or code == "ResourceInUse"
            if retry and time.monotonic() < deadline:
                sleep(POLL_SECONDS)
                continue
            raise
    job = sm.describe_training_job(TrainingJobName=request["TrainingJobName"])
    return {"arn": job["TrainingJobArn"], "status": job["TrainingJobStatus"]}


def _status(sm: Any, name: str) -> Optional[str]:
    """The job's status, or None once it is gone."""
    try:
        return str(sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"])
    except Exception as err:
        if _not_found(err):
            return None
        raise


def delete_job(
    name: str,
    region: str,
    security_group_ids: list[str],
    subnet_ids: list[str],
    timeout_seconds: int,
    client: Callable[[str, str], Any] = _client,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Stop (if running), wait until it has stopped, delete the job and wait until it is gone (its
    name is free again then), and delete the network interfaces it left; returns their IDs."""
    sm = client("sagemaker", region)
    deadline = time.monotonic() + timeout_seconds

    def wait(until: Callable[[Optional[str]], bool], status: Optional[str]) -> Optional[str]:
        while not until(status):
            if time.monotonic() > deadline:
                raise TimeoutError(f"SageMaker training job {name} is still {status} after {timeout_seconds} s")
            sleep(POLL_SECONDS)
            status = _status(sm, name)
        return status

    status = _status(sm, name)
    if status == "InProgress":
        try:
            sm.stop_training_job(TrainingJobName=name)
        except Exception as err:
            # It may have ended (or be stopping) since it was described: wait for it either way.
            if _error(err)[0] != "ValidationException" and not _not_found(err):
                raise
    status = wait(lambda s: s is None or s in TERMINAL or s == "Deleting", status)
    if status in TERMINAL:
        try:
            sm.delete_training_job(TrainingJobName=name)
        except Exception as err:
            if not _not_found(err):
                raise
        status = "Deleting"
    if status is not None:
        wait(lambda s: s is None, status)
    return delete_interfaces(region, security_group_ids, subnet_ids, client)


def delete_interfaces(region: str, security_group_ids: list[str], subnet_ids: list[str], client: Callable[[str, str], Any] = _client) -> list[str]:
    """Detach and delete every network interface in ``subnet_ids`` with one of ``security_group_ids``
    (the job's own group: nothing else carries it)."""
    if not security_group_ids or not subnet_ids:
        return []
    ec2 = client("ec2", region)
    found = ec2.describe_network_interfaces(
        Filters=[{"Name": "group-id", "Values": list(security_group_ids)}, {"Name": "subnet-id", "Values": list(subnet_ids)}]
    )["NetworkInterfaces"]
    deleted = []
    for eni in found:
        eni_id = eni["NetworkInterfaceId"]
        attachment = eni.get("Attachment") or {}
        try:
            if attachment.get("AttachmentId"):
                ec2.detach_network_interface(AttachmentId=attachment["AttachmentId"], Force=True)
                # A detachment takes a while; deleting before it has finished fails with InUse.
                try:
                    ec2.get_waiter("network_interface_available").wait(NetworkInterfaceIds=[eni_id], WaiterConfig=DETACH_WAIT)
                except Exception as err:  # botocore WaiterError: gone meanwhile, or still attached after the wait
                    if not _gone(getattr(err, "last_response", None) or {}):
                        raise
            ec2.delete_network_interface(NetworkInterfaceId=eni_id)
        except Exception as err:
            # SageMaker removes its own interfaces too, at the same time: one gone meanwhile is fine.
            if _error(err)[0] not in ENI_GONE:
                raise
            continue
        deleted.append(eni_id)
    return deleted


def retag(name: str, arn: str, old: list[dict[str, str]], new: list[dict[str, str]], region: str, client: Callable[[str, str], Any] = _client) -> None:
    """Change a job's tags in place (AddTags / DeleteTags)."""
    sm = client("sagemaker", region)
    arn = arn or sm.describe_training_job(TrainingJobName=name)["TrainingJobArn"]
    was, now = {t["Key"]: t["Value"] for t in old}, {t["Key"]: t["Value"] for t in new}
    gone = sorted(set(was) - set(now))
    if gone:
        sm.delete_tags(ResourceArn=arn, TagKeys=gone)
    changed = [{"Key": k, "Value": v} for k, v in sorted(now.items()) if was.get(k) != v]
    if changed:
        sm.add_tags(ResourceArn=arn, Tags=changed)


class TrainingJobProvider(dynamic.ResourceProvider):
    """The dynamic provider behind ``SageMakerTrainingJob``."""

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        out = create_job(props["request"], props["region"])
        return dynamic.CreateResult(id_=props["request"]["TrainingJobName"], outs={**props, **out})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        if not isinstance(news.get("request"), dict) or not isinstance(olds.get("request"), dict):
            # Not known yet (a preview where something the request is built from is being replaced).
            return dynamic.DiffResult(changes=True, replaces=["request"], delete_before_replace=True)
        old, new = dict(olds["request"]), dict(news["request"])
        retag = old.pop("Tags", None) != new.pop("Tags", None)
        replaces = [k for k, changed in (("request", old != new), ("region", olds.get("region") != news.get("region"))) if changed]
        # A training job cannot change: anything but its tags makes a new job. Tags change in place.
        return dynamic.DiffResult(changes=bool(replaces) or retag, replaces=replaces, delete_before_replace=True)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        retag(id_, olds.get("arn") or "", olds["request"].get("Tags") or [], news["request"].get("Tags") or [], news["region"], client=_client)
        return dynamic.UpdateResult(outs={**news, "arn": olds.get("arn"), "status": olds.get("status")})

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        try:
            job = _client("sagemaker", props["region"]).describe_training_job(TrainingJobName=id_)
        except Exception as err:
            if _not_found(err):
                return dynamic.ReadResult(None, {})
            raise
        return dynamic.ReadResult(id_, {**props, "arn": job["TrainingJobArn"], "status": job["TrainingJobStatus"]})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        vpc = props["request"].get("VpcConfig") or {}
        delete_job(id_, props["region"], list(vpc.get("SecurityGroupIds", [])), list(vpc.get("Subnets", [])), int(props["stopTimeoutSeconds"]))


class SageMakerTrainingJob(dynamic.Resource, module="gputraining", name="SageMakerTrainingJob"):
    """One SageMaker training job, started by ``pulumi up`` without waiting for it to finish.
    ``request`` is CreateTrainingJob's request (boto3 names); outputs ``arn`` and ``status``.
    Its type is ``pulumi-python:dynamic/gputraining:SageMakerTrainingJob``."""

    arn: pulumi.Output[str]
    status: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        request: pulumi.Input[dict[str, Any]],
        region: str,
        stop_timeout_seconds: int,
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        props = {"request": request, "region": region, "stopTimeoutSeconds": stop_timeout_seconds, "arn": None, "status": None}
        super().__init__(TrainingJobProvider(), name, props, opts)
