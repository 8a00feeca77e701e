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
  so the group and subnets can go. Interfaces SageMaker still holds (requester-managed, in use) are
  waited for; any that cannot be deleted are reported as a warning, not an error. A job that is
  already gone is deleted without error.

AWS credentials: as the stack's AWS provider has them. Pulumi (CLI 3.139.0 and later) hands a dynamic
provider the whole stack config when it starts it (``Configure``: ``pkg/resource/deploy/target.go``
``GetPackageConfig`` keeps every namespace for ``pulumi-python``; ``pulumi/dynamic/__main__.py`` calls
``configure`` once the provider is unpickled). ``configure`` reads ``aws:profile``,
``aws:accessKey``/``aws:secretKey``/``aws:token``, ``aws:assumeRoles`` and ``aws:stsRegion`` from it;
without them, boto3's standard chain (``AWS_PROFILE``, ...) applies, as it does for the AWS provider.
These are the settings of the stack's default AWS provider (the one every resource of this stack
uses); an explicit ``aws.Provider``'s arguments would not reach this provider.
Nothing of this goes into the jobs' state: a profile name differs from one person to the next, and
keys are secrets. (Pulumi itself records the stack config as the inputs of its default
``pulumi-python`` provider, secrets encrypted, as it records ``aws:*`` for the AWS provider.) The region is the job's own (its ``region`` input, the stack's ``aws:region``
when it was created), so a destroy finds the job where it runs.

Pickling: Pulumi stores this provider in the state of every job (``__provider``, dill) as a
*reference* to ``providers.sagemaker_training_job.TrainingJobProvider``, and ``pulumi destroy`` and
``pulumi refresh`` load it from there without running the program. So this module's path and the
class's name must never change: a stack whose state names a module that is gone can neither refresh
nor destroy its jobs. ``tests/test_sagemaker_provider.py`` pins both (with the reference a state
written today holds). Serializing by value instead would freeze the code of the day a job was
created into its state: a fix here would not reach the jobs already created (a delete runs the
code of their state until they are updated), and the pickled code would drag in its imports. If this module ever has to move, leave a module at this path that
imports the class from its new home.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pulumi
import pulumi.dynamic as dynamic

from facts.problems import ConfigError, Problem, fmt

ClientFactory = Callable[[str, str], Any]  # (service, region) -> boto3 client
Warn = Callable[[str], None]

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

# Where the stack's AWS provider takes its identity from (pulumi-aws 7.x provider config).
DEFAULT_SESSION_NAME = "pulumi-sagemaker-training-job"
ASSUME_ROLE_FIELDS = ("roleArn", "sessionName", "externalId", "duration", "policy", "policyArns", "sourceIdentity", "tags", "transitiveTagKeys")
# AWS provider settings this provider cannot follow, and what does the same for both of them.
REFUSED = {
    "aws:assumeRole": "is pulumi-aws 6.x config; pulumi-aws 7 (this stack's) reads aws:assumeRoles, a list: aws:assumeRoles: [{roleArn: arn:aws:iam::123456789012:role/deploy}]",
    "aws:assumeRoleWithWebIdentity": "is not followed by the SageMaker job provider; set AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE instead (the AWS provider and boto3 both read them)",
    "aws:sharedConfigFiles": "is not followed by the SageMaker job provider; set AWS_CONFIG_FILE instead (the AWS provider and boto3 both read it)",
    "aws:sharedCredentialsFiles": "is not followed by the SageMaker job provider; set AWS_SHARED_CREDENTIALS_FILE instead (the AWS provider and boto3 both read it)",
}
ENDPOINT_SERVICES = ("sagemaker", "ec2", "sts")  # aws:endpoints entries for these are refused (AWS_ENDPOINT_URL_<SERVICE> instead)
ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+")
SESSION_NAME = re.compile(r"[\w+=,.@-]{2,64}")
EXTERNAL_ID = re.compile(r"[\w+=,.@:/-]{2,1224}")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def _warn(message: str) -> None:
    # In the provider host there is no engine to log to: this prints "warning: ..." to stderr,
    # which the Pulumi CLI shows in the output of the update (a dynamic provider's output is not hidden).
    pulumi.log.warn(message)


def _client(service: str, region: str) -> Any:
    """A client from boto3's standard chain: what the provider uses until Pulumi has configured it."""
    import boto3

    return boto3.client(service, region_name=region)


def _error(err: Exception) -> tuple[str, str]:
    response = getattr(err, "response", None) or {}
    e = response.get("Error", {})
    return str(e.get("Code", "")), str(e.get("Message", ""))


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


# ---------------------------------------------------------------------------------------------
# The AWS identity: the stack's AWS provider config, as Pulumi hands it to the provider
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AssumeRole:
    """One entry of ``aws:assumeRoles`` (pulumi-aws 7.x ``ProviderAssumeRole``)."""

    role_arn: str
    session_name: str = DEFAULT_SESSION_NAME
    external_id: Optional[str] = None
    duration_seconds: Optional[int] = None
    policy: Optional[str] = None
    policy_arns: tuple[str, ...] = ()
    source_identity: Optional[str] = None
    tags: tuple[tuple[str, str], ...] = ()
    transitive_tag_keys: tuple[str, ...] = ()

    def request(self) -> dict[str, Any]:
        """STS AssumeRole's request."""
        out: dict[str, Any] = {"RoleArn": self.role_arn, "RoleSessionName": self.session_name}
        optional = {
            "ExternalId": self.external_id,
            "DurationSeconds": self.duration_seconds,
            "Policy": self.policy,
            "PolicyArns": [{"arn": a} for a in self.policy_arns],
            "SourceIdentity": self.source_identity,
            "Tags": [{"Key": k, "Value": v} for k, v in self.tags],
            "TransitiveTagKeys": list(self.transitive_tag_keys),
        }
        out.update({k: v for k, v in optional.items() if v})
        return out


@dataclass(frozen=True)
class AwsSettings:
    """How the provider calls AWS: the stack's AWS provider identity settings (never stored)."""

    profile: Optional[str] = None
    access_key: Optional[str] = field(default=None, repr=False)
    secret_key: Optional[str] = field(default=None, repr=False)
    token: Optional[str] = field(default=None, repr=False)
    assume_roles: tuple[AssumeRole, ...] = ()
    sts_region: Optional[str] = None

    @classmethod
    def from_config(cls, get: Callable[[str], Any]) -> AwsSettings:
        """The settings from the stack config (``get("aws:profile")``: Pulumi's dynamic ``Config.get``).
        Raises ``ConfigError`` naming every key it cannot follow."""
        problems: list[Problem] = []
        for key, why in REFUSED.items():
            if _decoded(get(key)) not in (None, "", [], {}):
                problems.append(Problem(key, why))
        endpoints = _decoded(get("aws:endpoints"))
        named = sorted({s for e in endpoints if isinstance(e, dict) for s in e if s in ENDPOINT_SERVICES}) if isinstance(endpoints, list) else []
        if named:
            env = ", ".join(f"AWS_ENDPOINT_URL_{s.upper()}" for s in named)
            problems.append(Problem("aws:endpoints", f"entries for {', '.join(named)} are not followed by the SageMaker job provider; set {env} instead"))
        strings = {}
        for key in ("aws:profile", "aws:accessKey", "aws:secretKey", "aws:token", "aws:stsRegion"):
            value = _decoded(get(key))
            if value is not None and (not isinstance(value, str) or not value.strip()):
                problems.append(Problem(key, f"{fmt(value)} is not a non-empty string"))
            elif value is not None:
                strings[key] = value
        if ("aws:accessKey" in strings) != ("aws:secretKey" in strings):
            have, lack = ("aws:accessKey", "aws:secretKey") if "aws:accessKey" in strings else ("aws:secretKey", "aws:accessKey")
            problems.append(Problem(lack, f"is required with {have}: set both, or neither (then the profile or environment credentials apply)"))
        roles = _assume_roles(_decoded(get("aws:assumeRoles")), problems)
        if problems:
            raise ConfigError(problems)
        return cls(
            profile=strings.get("aws:profile"),
            access_key=strings.get("aws:accessKey"),
            secret_key=strings.get("aws:secretKey"),
            token=strings.get("aws:token"),
            assume_roles=roles,
            sts_region=strings.get("aws:stsRegion"),
        )


def _decoded(value: Any) -> Any:
    """A config value as Pulumi passes it: objects and lists arrive as their JSON text."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def duration_seconds(text: Any) -> Optional[int]:
    """Seconds of a Go duration (``1h``, ``15m``, ``1h30m``, ``900s``), as the AWS provider takes
    ``duration``; None if it is not one."""
    if not isinstance(text, str) or not text:
        return None
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    return int(total) if pos == len(text) else None


def _assume_roles(value: Any, problems: list[Problem]) -> tuple[AssumeRole, ...]:
    if value in (None, "", []):
        return ()
    example = "e.g. [{roleArn: arn:aws:iam::123456789012:role/deploy}]"
    if not isinstance(value, list):
        problems.append(Problem("aws:assumeRoles", f"{fmt(value)} is not a list of roles, {example}"))
        return ()
    roles = []
    for i, raw in enumerate(value):
        key = f"aws:assumeRoles[{i}]"
        if not isinstance(raw, dict):
            problems.append(Problem(key, f"{fmt(raw)} is not a role ({{roleArn: ..., ...}}), {example}"))
            continue
        unknown = sorted(set(raw) - set(ASSUME_ROLE_FIELDS))
        if unknown:
            problems.append(Problem(key, f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(ASSUME_ROLE_FIELDS)}"))
        before = len(problems)
        arn = raw.get("roleArn")
        if not isinstance(arn, str) or not ROLE_ARN.fullmatch(arn):
            problems.append(Problem(f"{key}.roleArn", f"{fmt(arn)} is not an IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>); it is required"))
        session = raw.get("sessionName") or DEFAULT_SESSION_NAME
        if not isinstance(session, str) or not SESSION_NAME.fullmatch(session):
            problems.append(Problem(f"{key}.sessionName", f"{fmt(session)} is not a session name: 2-64 of letters, digits and +=,.@_-"))
        external = raw.get("externalId")
        if external is not None and (not isinstance(external, str) or not EXTERNAL_ID.fullmatch(external)):
            problems.append(Problem(f"{key}.externalId", f"{fmt(external)} is not an external ID: 2-1224 of letters, digits and +=,.@:/_-"))
        seconds = duration_seconds(raw.get("duration")) if raw.get("duration") is not None else None
        if raw.get("duration") is not None and (seconds is None or not 900 <= seconds <= 43200):
            problems.append(Problem(f"{key}.duration", f"{fmt(raw.get('duration'))} is not a duration from 15m to 12h (e.g. 1h, 45m, 1h30m)"))
        lists = {}
        for name in ("policyArns", "transitiveTagKeys"):
            items = raw.get(name) or []
            if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
                problems.append(Problem(f"{key}.{name}", f"{fmt(items)} is not a list of strings"))
            else:
                lists[name] = tuple(items)
        tags = raw.get("tags") or {}
        if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
            problems.append(Problem(f"{key}.tags", f"{fmt(tags)} is not a map of strings to strings"))
        for name in ("policy", "sourceIdentity"):
            if raw.get(name) is not None and not isinstance(raw.get(name), str):
                problems.append(Problem(f"{key}.{name}", f"{fmt(raw.get(name))} is not a string"))
        if len(problems) > before:
            continue
        roles.append(
            AssumeRole(
                role_arn=str(arn),
                session_name=str(session),
                external_id=external,
                duration_seconds=seconds,
                policy=raw.get("policy"),
                policy_arns=lists["policyArns"],
                source_identity=raw.get("sourceIdentity"),
                tags=tuple(sorted(tags.items())),
                transitive_tag_keys=lists["transitiveTagKeys"],
            )
        )
    return tuple(roles)


def make_session(settings: AwsSettings, region: str) -> Any:
    """A boto3 session with the settings' identity: the profile or keys (else boto3's standard
    chain), then each role of ``assume_roles`` assumed with the credentials of the one before, as
    the AWS provider chains them. The assumed credentials refresh themselves: a destroy can wait
    longer than a role session lasts (an hour for a chained role)."""
    import boto3
    import botocore.credentials
    import botocore.exceptions
    import botocore.session

    try:
        base = boto3.Session(
            profile_name=settings.profile,
            aws_access_key_id=settings.access_key,
            aws_secret_access_key=settings.secret_key,
            aws_session_token=settings.token,
            region_name=region,
        )
    except botocore.exceptions.ProfileNotFound as err:
        raise ConfigError([Problem("aws:profile", f"{fmt(settings.profile)} is not a profile of the AWS config files ({err})")]) from err
    if not settings.assume_roles:
        return base
    sts_region = settings.sts_region or region

    def assume() -> dict[str, str]:
        session, creds = base, {}
        for role in settings.assume_roles:
            creds = session.client("sts", region_name=sts_region).assume_role(**role.request())["Credentials"]
            session = boto3.Session(
                aws_access_key_id=creds["AccessKeyId"],
                aws_secret_access_key=creds["SecretAccessKey"],
                aws_session_token=creds["SessionToken"],
                region_name=region,
            )
        return {
            "access_key": creds["AccessKeyId"],
            "secret_key": creds["SecretAccessKey"],
            "token": creds["SessionToken"],
            "expiry_time": creds["Expiration"].isoformat(),
        }

    chained = botocore.credentials.DeferredRefreshableCredentials(refresh_using=assume, method="assume-role")

    class AssumedRoles(botocore.credentials.CredentialProvider):
        METHOD = "assume-role"

        def load(self) -> Any:
            return chained

    # The profile's other settings (retries, CA bundle, ...) still apply; only the credentials are ours.
    core = botocore.session.Session(profile=settings.profile)
    core.register_component("credential_provider", botocore.credentials.CredentialResolver([AssumedRoles()]))
    return boto3.Session(botocore_session=core, region_name=region)


class Clients:
    """The ``client`` factory of a configured provider: one session per region, its clients shared.
    Sessions are not thread-safe and the provider host serves four calls at once: hence the lock
    (clients are thread-safe)."""

    def __init__(self, settings: AwsSettings):
        self.settings = settings
        self._lock = threading.Lock()
        self._sessions: dict[str, Any] = {}
        self._clients: dict[tuple[str, str], Any] = {}

    def session(self, region: str) -> Any:
        with self._lock:
            return self._session(region)

    def _session(self, region: str) -> Any:
        if region not in self._sessions:
            self._sessions[region] = make_session(self.settings, region)
        return self._sessions[region]

    def __call__(self, service: str, region: str) -> Any:
        with self._lock:
            if (service, region) not in self._clients:
                self._clients[service, region] = self._session(region).client(service, region_name=region)
            return self._clients[service, region]


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


def _existing_job(sm: Any, name: str) -> Optional[dict[str, Any]]:
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
            f"SageMaker training job {name} already exists (status {status}, created {job.get('CreationTime')}) with another "
            f"{', '.join(differ)} than this stack's job of that name: it is not this stack's run. Delete it "
            f"(aws sagemaker delete-training-job --training-job-name {name}) or bump the job's `run`, then run `pulumi up` again."
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
            retry = (code == "ValidationException" and any(m in message for m in PROPAGATION_MESSAGES)) or code == "ResourceInUse"
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
        f"SageMaker training job {name} was started, but DescribeTrainingJob failed {DESCRIBE_TRIES} times ({failure}); "
        f"its status is recorded as {UNKNOWN} until the next `pulumi refresh`."
    )
    return {"arn": arn, "status": UNKNOWN}


# ---------------------------------------------------------------------------------------------
# Delete
# ---------------------------------------------------------------------------------------------


def _status(sm: Any, name: str) -> Optional[str]:
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
    return delete_interfaces(region, security_group_ids, subnet_ids, client, sleep=sleep, warn=warn, job=name)


def _interfaces(ec2: Any, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    token: Optional[str] = None
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
        return "busy", f"{attachment.get('Status') or 'attached'}, managed by {eni.get('RequesterId') or 'AWS'}: waiting for it to be released"
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
    filters = [{"Name": "group-id", "Values": list(security_group_ids)}, {"Name": "subnet-id", "Values": list(subnet_ids)}]
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
            warn(f"{label}: could not list its network interfaces ({code or type(err).__name__}: {message or err}); none were deleted.")
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
            f"Deleting the group and the subnets fails while they exist: wait for SageMaker to release them, or delete them "
            f"(aws ec2 delete-network-interface --network-interface-id <id>), then run `pulumi destroy` (or `pulumi up`) again."
        )
    return deleted


def retag(name: str, arn: str, old: list[dict[str, str]], new: list[dict[str, str]], region: str, client: ClientFactory = _client) -> None:
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
    _clients: Optional[Clients] = None

    def configure(self, req: dynamic.ConfigureRequest) -> None:
        """Pulumi hands over the stack config (every namespace, secrets in plain text, in memory
        only) once, before any other call."""
        if req.config.get("aws:region") is None:
            # The stack config requires aws:region: without it, Pulumi passed no stack config at all.
            raise ConfigError(
                [
                    Problem(
                        "aws:region",
                        "did not reach the SageMaker job provider: Pulumi CLI 3.139.0 or later passes a dynamic provider "
                        "the stack config (and with it aws:profile and aws:assumeRoles). Upgrade the Pulumi CLI; for a "
                        "`pulumi destroy` or `pulumi refresh`, run `pulumi up` once with it first (it records the config "
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
        replaces = [k for k, changed in (("request", old != new), ("region", olds.get("region") != news.get("region"))) if changed]
        # A training job cannot change: anything but its tags makes a new job. Tags change in place.
        return dynamic.DiffResult(changes=bool(replaces) or retags, replaces=replaces, delete_before_replace=True)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        retag(id_, olds.get("arn") or "", olds["request"].get("Tags") or [], news["request"].get("Tags") or [], news["region"], client=self._client_factory())
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
        opts: Optional[pulumi.ResourceOptions] = None,
    ):
        props = {"request": request, "region": region, "stopTimeoutSeconds": stop_timeout_seconds, "arn": None, "status": None}
        super().__init__(TrainingJobProvider(), name, props, opts)
