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
  then returns as soon as SageMaker has the job: ``pulumi up`` does not wait for the run. Once
  CreateTrainingJob has succeeded, create never fails: the job exists, so Pulumi must record it (a
  failed DescribeTrainingJob after it leaves the status ``Unknown`` until the next refresh). A job
  of the same name that already exists with the same request (a lost response, a state that lost
  it) is taken over instead of failing or starting a second one;
- read (``pulumi refresh``, and every ``pulumi up``/``preview`` with ``refresh: always``): the job's
  status. A job that no longer exists at AWS is kept in the state with status ``Missing`` (Pulumi
  would otherwise drop a resource whose read returns no ID, and the next ``pulumi up`` would quietly
  start a new full training run under the same name);
- diff: any change replaces the job (a training job cannot be changed), the old one deleted first;
  so does status ``Missing``: the preview shows the job being replaced, for the user to approve;
- delete (``pulumi destroy`` or a replacement): ``StopTrainingJob`` if it still runs, wait until it
  has stopped (it uploads its output and checkpoints first), ``DeleteTrainingJob`` (which frees the
  name), then delete the network interfaces left in the job's subnets with its own security group,
  so the group and subnets can go (``providers/network_interfaces.py``). Interfaces SageMaker still
  holds (requester-managed, in use) are waited for; any that cannot be deleted are reported as a
  warning, not an error. A job that is already gone is deleted without error.

AWS credentials: as the stack's AWS provider has them, from the stack config Pulumi hands the
provider when it starts it (``providers/aws_access.py``); nothing of them goes into the jobs'
state. The region is the job's own (its ``region`` input, the stack's ``aws:region``
when it was created), so a destroy finds the job where it runs.

Pickling: Pulumi stores this provider in the state of every job (``__provider``, dill) as a
*reference* to ``providers.sagemaker_training_job.TrainingJobProvider``, and ``pulumi destroy`` and
``pulumi refresh`` load it from there without running the program. So this module's path and the
class's name must never change: a stack whose state names a module that is gone can neither refresh
nor destroy its jobs. ``tests/test_sagemaker_provider.py`` pins both (with the reference a state
written today holds). Serializing by value instead would freeze the code of the day a job was
created into its state: a fix here would not reach the jobs already created (a delete runs the
code of their state until they are updated), and the pickled code would drag in its imports. If this
module ever has to move, leave a module at this path that imports the class from its new home.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pulumi
import pulumi.dynamic as dynamic

from facts.problems import ConfigError, Problem
from providers.aws_access import (
    DEFAULT_SESSION_NAME as DEFAULT_SESSION_NAME,
)  # re-exported, as are the two below: the tests read them here
from providers.aws_access import AssumeRole as AssumeRole
from providers.aws_access import AwsSettings, ClientFactory, Clients, Warn, _client, _error, _warn
from providers.aws_access import duration_seconds as duration_seconds
from providers.network_interfaces import (
    ENI_FIRST_PAUSE as ENI_FIRST_PAUSE,
)  # re-exported, as are the two below: the tests read them here
from providers.network_interfaces import ENI_LONGEST_PAUSE as ENI_LONGEST_PAUSE
from providers.network_interfaces import ENI_SECONDS as ENI_SECONDS
from providers.network_interfaces import delete_interfaces

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
MISSING = "Missing"  # the status of a job the state knows and AWS no longer does
UNKNOWN = "Unknown"  # the status of a job created while DescribeTrainingJob failed
PROPAGATION_SECONDS = 180
POLL_SECONDS = 15
DESCRIBE_TRIES = 3  # DescribeTrainingJob after a successful create, POLL_SECONDS apart


def _not_found(err: Exception) -> bool:
    code, message = _error(err)
    return code in ("ResourceNotFound", "ValidationException") and (
        "not found" in message.lower() or "does not exist" in message.lower()
    )


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


# ---------------------------------------------------------------------------------------------
# Create
# ---------------------------------------------------------------------------------------------

# What a job of the same name must share with our request to be taken over as ours.
SAME_JOB_FIELDS: tuple[tuple[str, ...], ...] = (
    ("RoleArn",),
    ("AlgorithmSpecification", "TrainingImage"),
    ("ResourceConfig", "InstanceType"),
    ("ResourceConfig", "InstanceCount"),
    ("VpcConfig", "SecurityGroupIds"),
    ("VpcConfig", "Subnets"),
    ("OutputDataConfig", "S3OutputPath"),
)


def _field(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = doc
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return sorted(value) if isinstance(value, list) else value


def _existing_job(sm: Any, name: str) -> dict[str, Any] | None:
    """DescribeTrainingJob, or None if there is no such job."""
    try:
        return dict(sm.describe_training_job(TrainingJobName=name))
    except Exception as err:
        if _not_found(err):
            return None
        raise


def _take_over(job: dict[str, Any], request: dict[str, Any], warn: Warn) -> dict[str, Any]:
    """A job of our name exists (not being deleted): ours if it runs our request, else an error."""
    name, status = request["TrainingJobName"], str(job["TrainingJobStatus"])
    differ = [".".join(p) for p in SAME_JOB_FIELDS if _field(job, p) != _field(request, p)]
    if differ:
        raise RuntimeError(
            f"SageMaker training job {name} already exists (status {status}, "
            f"created {job.get('CreationTime')}) with another "
            f"{', '.join(differ)} than this stack's job of that name: it is not this stack's run. Delete it "
            f"(aws sagemaker delete-training-job --training-job-name {name}) or "
            "bump the job's `run`, then run `pulumi up` again."
        )
    warn(
        f"SageMaker training job {name} already exists (status {status}) with this request: the stack now tracks it "
        "instead of starting a second run. To run the job again, bump its `run`."
    )
    return {"arn": str(job["TrainingJobArn"]), "status": status}


def create_job(
    request: dict[str, Any],
    region: str,
    client: ClientFactory = _client,
    sleep: Callable[[float], None] = time.sleep,
    warn: Warn = _warn,
) -> dict[str, Any]:
    """Start the training job; returns its ARN and status. Retried while a new role propagates, and
    while a job of the same name replaced just before is still being deleted (ResourceInUse). Once
    CreateTrainingJob has succeeded it does not raise: the job runs, so Pulumi must record it."""
    sm = client("sagemaker", region)
    request = plain_request(request)
    name = request["TrainingJobName"]
    deadline = time.monotonic() + PROPAGATION_SECONDS
    while True:
        try:
            created = sm.create_training_job(**request)
            break
        except Exception as err:  # botocore ClientError
            code, message = _error(err)
            if code == "ResourceInUse":
                # The name is taken: by the job a replacement is deleting (wait), or by a job that is
                # already ours (a retried request whose first answer was lost, a state that lost it).
                try:
                    job = _existing_job(sm, name)
                except Exception:
                    job = None  # could not tell (throttled, ...): ask again after the pause
                if job is not None and job.get("TrainingJobStatus") != "Deleting":
                    return _take_over(job, request, warn)
            retry = (
                code == "ValidationException" and any(m in message for m in PROPAGATION_MESSAGES)
            ) or code == "ResourceInUse"
            if retry and time.monotonic() < deadline:
                sleep(POLL_SECONDS)
                continue
            raise
    arn = str(created.get("TrainingJobArn") or "")
    failure = ""
    for attempt in range(DESCRIBE_TRIES):
        try:
            job = sm.describe_training_job(TrainingJobName=name)
            return {"arn": str(job["TrainingJobArn"]), "status": str(job["TrainingJobStatus"])}
        except Exception as err:
            failure = f"{type(err).__name__}: {err}"
            if attempt + 1 < DESCRIBE_TRIES:
                sleep(POLL_SECONDS)
    warn(
        f"SageMaker training job {name} was started, but DescribeTrainingJob "
        f"failed {DESCRIBE_TRIES} times ({failure}); "
        f"its status is recorded as {UNKNOWN} until the next `pulumi refresh`."
    )
    return {"arn": arn, "status": UNKNOWN}


# ---------------------------------------------------------------------------------------------
# Delete
# ---------------------------------------------------------------------------------------------


def _status(sm: Any, name: str) -> str | None:
    """The job's status, or None once it is gone."""
    job = _existing_job(sm, name)
    return None if job is None else str(job["TrainingJobStatus"])


def delete_job(
    name: str,
    region: str,
    security_group_ids: list[str],
    subnet_ids: list[str],
    timeout_seconds: int,
    client: ClientFactory = _client,
    sleep: Callable[[float], None] = time.sleep,
    warn: Warn = _warn,
) -> list[str]:
    """Stop (if running), wait until it has stopped, delete the job and wait until it is gone (its
    name is free again then), and delete the network interfaces it left; returns their IDs. A job
    that is already gone only has its interfaces cleaned up."""
    sm = client("sagemaker", region)
    deadline = time.monotonic() + timeout_seconds

    def wait(until: Callable[[str | None], bool], status: str | None) -> str | None:
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
    return delete_interfaces(region, security_group_ids, subnet_ids, client, sleep=sleep, warn=warn, job=name)


def retag(
    name: str,
    arn: str,
    old: list[dict[str, str]],
    new: list[dict[str, str]],
    region: str,
    client: ClientFactory = _client,
) -> None:
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


# ---------------------------------------------------------------------------------------------
# The provider. Its module path and class name are in every stack's state: never move or rename
# them (see the module docstring). Set no attributes in __init__: they would be pickled too.
# ---------------------------------------------------------------------------------------------


class TrainingJobProvider(dynamic.ResourceProvider):
    """The dynamic provider behind ``SageMakerTrainingJob``."""

    # Set by `configure` in the provider host, after unpickling; never pickled.
    _clients: Clients | None = None

    def configure(self, req: dynamic.ConfigureRequest) -> None:
        """Pulumi hands over the stack config (every namespace, secrets in plain text, in memory
        only) once, before any other call."""
        if req.config.get("aws:region") is None:
            # The stack config requires aws:region: without it, Pulumi passed no stack config at all.
            raise ConfigError(
                [
                    Problem(
                        "aws:region",
                        "did not reach the SageMaker job provider: Pulumi CLI "
                        "3.139.0 or later passes a dynamic provider "
                        "the stack config (and with it aws:profile and aws:assumeRoles). Upgrade the Pulumi CLI; for a "
                        "`pulumi destroy` or `pulumi refresh`, run `pulumi up` once "
                        "with it first (it records the config "
                        "for this provider).",
                    )
                ]
            )
        self._clients = Clients(AwsSettings.from_config(req.config.get))

    def _client_factory(self) -> ClientFactory:
        return self._clients if self._clients is not None else _client

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        out = create_job(props["request"], props["region"], client=self._client_factory())
        return dynamic.CreateResult(id_=props["request"]["TrainingJobName"], outs={**props, **out})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        # `olds` are the outputs in the state (after a refresh, what `read` returned).
        if olds.get("status") == MISSING:
            # The job is gone at AWS: starting it again is a new training run, which the preview
            # must show (as a replacement) rather than do quietly.
            return dynamic.DiffResult(changes=True, replaces=["status"], delete_before_replace=True)
        if not isinstance(news.get("request"), dict) or not isinstance(olds.get("request"), dict):
            # Not known yet (a preview where something the request is built from is being replaced).
            return dynamic.DiffResult(changes=True, replaces=["request"], delete_before_replace=True)
        old, new = dict(olds["request"]), dict(news["request"])
        retags = old.pop("Tags", None) != new.pop("Tags", None)
        replaces = [
            k
            for k, changed in (("request", old != new), ("region", olds.get("region") != news.get("region")))
            if changed
        ]
        # A training job cannot change: anything but its tags makes a new job. Tags change in place.
        return dynamic.DiffResult(changes=bool(replaces) or retags, replaces=replaces, delete_before_replace=True)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        retag(
            id_,
            olds.get("arn") or "",
            olds["request"].get("Tags") or [],
            news["request"].get("Tags") or [],
            news["region"],
            client=self._client_factory(),
        )
        return dynamic.UpdateResult(outs={**news, "arn": olds.get("arn"), "status": olds.get("status")})

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        try:
            job = self._client_factory()("sagemaker", props["region"]).describe_training_job(TrainingJobName=id_)
        except Exception as err:
            if _not_found(err):
                # Kept, with what was last known: Pulumi drops a resource whose read returns no ID,
                # and would then create the job again without a word in the next preview.
                return dynamic.ReadResult(id_, {**props, "status": MISSING})
            raise
        return dynamic.ReadResult(id_, {**props, "arn": job["TrainingJobArn"], "status": job["TrainingJobStatus"]})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        vpc = props["request"].get("VpcConfig") or {}
        delete_job(
            id_,
            props["region"],
            list(vpc.get("SecurityGroupIds", [])),
            list(vpc.get("Subnets", [])),
            int(props["stopTimeoutSeconds"]),
            client=self._client_factory(),
        )


class SageMakerTrainingJob(dynamic.Resource, module="gputraining", name="SageMakerTrainingJob"):
    """One SageMaker training job, started by ``pulumi up`` without waiting for it to finish.
    ``request`` is CreateTrainingJob's request (boto3 names); outputs ``arn`` and ``status``
    (SageMaker's TrainingJobStatus, ``Missing`` once the job is gone at AWS, ``Unknown`` if it could
    not be described when it was created). Its type is ``pulumi-python:dynamic/gputraining:SageMakerTrainingJob``."""

    arn: pulumi.Output[str]
    status: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        request: pulumi.Input[dict[str, Any]],
        region: str,
        stop_timeout_seconds: int,
        opts: pulumi.ResourceOptions | None = None,
    ):
        props = {
            "request": request,
            "region": region,
            "stopTimeoutSeconds": stop_timeout_seconds,
            "arn": None,
            "status": None,
        }
        super().__init__(TrainingJobProvider(), name, props, opts)
