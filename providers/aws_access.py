"""How the SageMaker job provider (``providers/sagemaker_training_job.py``) reaches AWS: boto3's
standard chain until Pulumi has configured it, then the identity of the stack's AWS provider;
the code and message of an AWS error; and warnings, which the Pulumi CLI shows.

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
``pulumi-python`` provider, secrets encrypted, as it records ``aws:*`` for the AWS provider.)
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi

from facts.problems import ConfigError, Problem, fmt

ClientFactory = Callable[[str, str], Any]  # (service, region) -> boto3 client
Warn = Callable[[str], None]

# Where the stack's AWS provider takes its identity from (pulumi-aws 7.x provider config).
DEFAULT_SESSION_NAME = "pulumi-sagemaker-training-job"
ASSUME_ROLE_FIELDS = (
    "roleArn",
    "sessionName",
    "externalId",
    "duration",
    "policy",
    "policyArns",
    "sourceIdentity",
    "tags",
    "transitiveTagKeys",
)
# AWS provider settings this provider cannot follow, and what does the same for both of them.
REFUSED = {
    "aws:assumeRole": "is pulumi-aws 6.x config; pulumi-aws 7 (this stack's) reads aws:assumeRoles, a list: "
    "aws:assumeRoles: [{roleArn: arn:aws:iam::123456789012:role/deploy}]",
    "aws:assumeRoleWithWebIdentity": "is not followed by the SageMaker job provider; set AWS_ROLE_ARN and "
    "AWS_WEB_IDENTITY_TOKEN_FILE instead (the AWS provider and boto3 both read them)",
    "aws:sharedConfigFiles": "is not followed by the SageMaker job provider; set AWS_CONFIG_FILE "
    "instead (the AWS provider and boto3 both read it)",
    "aws:sharedCredentialsFiles": "is not followed by the SageMaker job provider; set AWS_SHARED_CREDENTIALS_FILE "
    "instead (the AWS provider and boto3 both read it)",
}
ENDPOINT_SERVICES = (
    "sagemaker",
    "ec2",
    "sts",
)  # aws:endpoints entries for these are refused (AWS_ENDPOINT_URL_<SERVICE> instead)
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


# ---------------------------------------------------------------------------------------------
# The AWS identity: the stack's AWS provider config, as Pulumi hands it to the provider
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AssumeRole:
    """One entry of ``aws:assumeRoles`` (pulumi-aws 7.x ``ProviderAssumeRole``)."""

    role_arn: str
    session_name: str = DEFAULT_SESSION_NAME
    external_id: str | None = None
    duration_seconds: int | None = None
    policy: str | None = None
    policy_arns: tuple[str, ...] = ()
    source_identity: str | None = None
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

    profile: str | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    assume_roles: tuple[AssumeRole, ...] = ()
    sts_region: str | None = None

    @classmethod
    def from_config(cls, get: Callable[[str], Any]) -> AwsSettings:
        """The settings from the stack config (``get("aws:profile")``: Pulumi's dynamic ``Config.get``).
        Raises ``ConfigError`` naming every key it cannot follow."""
        problems: list[Problem] = []
        for key, why in REFUSED.items():
            if _decoded(get(key)) not in (None, "", [], {}):
                problems.append(Problem(key, why))
        endpoints = _decoded(get("aws:endpoints"))
        named = (
            sorted({s for e in endpoints if isinstance(e, dict) for s in e if s in ENDPOINT_SERVICES})
            if isinstance(endpoints, list)
            else []
        )
        if named:
            env = ", ".join(f"AWS_ENDPOINT_URL_{s.upper()}" for s in named)
            problems.append(
                Problem(
                    "aws:endpoints",
                    f"entries for {', '.join(named)} are not followed by the SageMaker job provider; set {env} instead",
                )
            )
        strings = {}
        for key in ("aws:profile", "aws:accessKey", "aws:secretKey", "aws:token", "aws:stsRegion"):
            value = _decoded(get(key))
            if value is not None and (not isinstance(value, str) or not value.strip()):
                problems.append(Problem(key, f"{fmt(value)} is not a non-empty string"))
            elif value is not None:
                strings[key] = value
        if ("aws:accessKey" in strings) != ("aws:secretKey" in strings):
            have, lack = (
                ("aws:accessKey", "aws:secretKey") if "aws:accessKey" in strings else ("aws:secretKey", "aws:accessKey")
            )
            problems.append(
                Problem(
                    lack,
                    f"is required with {have}: set both, or neither (then the "
                    "profile or environment credentials apply)",
                )
            )
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


def duration_seconds(text: Any) -> int | None:
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


_ASSUME_ROLES_EXAMPLE = "e.g. [{roleArn: arn:aws:iam::123456789012:role/deploy}]"


def _assume_roles(value: Any, problems: list[Problem]) -> tuple[AssumeRole, ...]:
    if value in (None, "", []):
        return ()
    if not isinstance(value, list):
        problems.append(Problem("aws:assumeRoles", f"{fmt(value)} is not a list of roles, {_ASSUME_ROLES_EXAMPLE}"))
        return ()
    roles = []
    for i, raw in enumerate(value):
        role = _assume_role(f"aws:assumeRoles[{i}]", raw, problems)
        if role is not None:
            roles.append(role)
    return tuple(roles)


def _assume_role(key: str, raw: Any, problems: list[Problem]) -> AssumeRole | None:
    """One role of ``aws:assumeRoles``, or None with its problems appended."""
    if not isinstance(raw, dict):
        problems.append(Problem(key, f"{fmt(raw)} is not a role ({{roleArn: ..., ...}}), {_ASSUME_ROLES_EXAMPLE}"))
        return None
    unknown = sorted(set(raw) - set(ASSUME_ROLE_FIELDS))
    if unknown:
        problems.append(
            Problem(key, f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(ASSUME_ROLE_FIELDS)}")
        )
    before = len(problems)
    arn = _role_arn(key, raw, problems)
    session = _session_name(key, raw, problems)
    external = _external_id(key, raw, problems)
    seconds = _duration(key, raw, problems)
    lists = _string_lists(key, raw, problems)
    tags = _tags(key, raw, problems)
    _check_strings(key, raw, problems)
    if len(problems) > before:
        return None
    return AssumeRole(
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


def _role_arn(key: str, raw: dict[str, Any], problems: list[Problem]) -> Any:
    arn = raw.get("roleArn")
    if not isinstance(arn, str) or not ROLE_ARN.fullmatch(arn):
        problems.append(
            Problem(
                f"{key}.roleArn",
                f"{fmt(arn)} is not an IAM role ARN (arn:aws:iam::<12-digit account>:role/<name>); it is required",
            )
        )
    return arn


def _session_name(key: str, raw: dict[str, Any], problems: list[Problem]) -> Any:
    session = raw.get("sessionName") or DEFAULT_SESSION_NAME
    if not isinstance(session, str) or not SESSION_NAME.fullmatch(session):
        problems.append(
            Problem(f"{key}.sessionName", f"{fmt(session)} is not a session name: 2-64 of letters, digits and +=,.@_-")
        )
    return session


def _external_id(key: str, raw: dict[str, Any], problems: list[Problem]) -> Any:
    external = raw.get("externalId")
    if external is not None and (not isinstance(external, str) or not EXTERNAL_ID.fullmatch(external)):
        problems.append(
            Problem(
                f"{key}.externalId", f"{fmt(external)} is not an external ID: 2-1224 of letters, digits and +=,.@:/_-"
            )
        )
    return external


def _duration(key: str, raw: dict[str, Any], problems: list[Problem]) -> int | None:
    seconds = duration_seconds(raw.get("duration")) if raw.get("duration") is not None else None
    if raw.get("duration") is not None and (seconds is None or not 900 <= seconds <= 43200):
        problems.append(
            Problem(
                f"{key}.duration", f"{fmt(raw.get('duration'))} is not a duration from 15m to 12h (e.g. 1h, 45m, 1h30m)"
            )
        )
    return seconds


def _string_lists(key: str, raw: dict[str, Any], problems: list[Problem]) -> dict[str, tuple[str, ...]]:
    """policyArns and transitiveTagKeys, the ones that are lists of strings."""
    lists = {}
    for name in ("policyArns", "transitiveTagKeys"):
        items = raw.get(name) or []
        if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
            problems.append(Problem(f"{key}.{name}", f"{fmt(items)} is not a list of strings"))
        else:
            lists[name] = tuple(items)
    return lists


def _tags(key: str, raw: dict[str, Any], problems: list[Problem]) -> Any:
    tags = raw.get("tags") or {}
    if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        problems.append(Problem(f"{key}.tags", f"{fmt(tags)} is not a map of strings to strings"))
    return tags


def _check_strings(key: str, raw: dict[str, Any], problems: list[Problem]) -> None:
    for name in ("policy", "sourceIdentity"):
        if raw.get(name) is not None and not isinstance(raw.get(name), str):
            problems.append(Problem(f"{key}.{name}", f"{fmt(raw.get(name))} is not a string"))


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
        raise ConfigError(
            [Problem("aws:profile", f"{fmt(settings.profile)} is not a profile of the AWS config files ({err})")]
        ) from err
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
