"""``data-stage``: copies an S3 prefix onto a shared volume with the AWS CLI, as a batch Job on the
system nodes, with its own service account whose Pod Identity role reads only that prefix."""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field

from facts.problems import Problem
from facts.versions import AWS_CLI_IMAGE
from jobs import pod, spec_checks
from jobs.base import Manifest, RunJob, SystemJob
from jobs.targets import JobsContext


class DataStageSpec(SystemJob, RunJob):
    """Copies an S3 prefix into ``path`` on a shared volume (a batch Job on the system nodes)."""

    kind: Literal["data-stage"] = Field(description="`data-stage`")
    image: str = Field(AWS_CLI_IMAGE, description="an AWS CLI v2 image (>= 2.15 for Pod Identity)")
    source: str = Field(description="`s3://bucket/prefix` to copy")
    path: str = Field(description="destination path inside the volume")
    source_region: str | None = Field(None, description="the bucket's region (default: the stack's)")

    @property
    def bucket(self) -> str:
        return self.source[len("s3://") :].split("/", 1)[0]

    @property
    def prefix(self) -> str:
        rest = self.source[len("s3://") :].split("/", 1)
        return rest[1].strip("/") if len(rest) > 1 else ""

    @property
    def source_uri(self) -> str:
        """The prefix as ``aws s3 sync`` reads it (always ending in /)."""
        return f"s3://{self.bucket}/{self.prefix}/" if self.prefix else f"s3://{self.bucket}/"

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        spec_checks.check_s3_uri(self.source, f"{key}.source", problems)
        spec_checks.check_relative_path(self.path, f"{key}.path", problems)
        if self.source_region is not None and not spec_checks.REGION.match(self.source_region):
            problems.append(
                Problem(
                    f"{key}.sourceRegion",
                    f"{spec_checks.fmt(self.source_region)} is not an AWS region name like 'us-west-2'",
                )
            )

    def pod_identity_policy(self, partition: str) -> dict[str, Any] | None:
        """Read access to the job's bucket/prefix and nothing else: list the bucket only under the
        prefix, get objects only below it."""
        bucket_arn = f"arn:{partition}:s3:::{self.bucket}"
        prefix = self.prefix
        listing: dict[str, Any] = {
            "Sid": "ListPrefix",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": bucket_arn,
        }
        if prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}/", f"{prefix}/*"]}}
        objects = f"{bucket_arn}/{prefix}/*" if prefix else f"{bucket_arn}/*"
        return {
            "Version": "2012-10-17",
            "Statement": [
                listing,
                {"Sid": "ReadPrefix", "Effect": "Allow", "Action": "s3:GetObject", "Resource": objects},
            ],
        }

    def pod_identity_description(self, namespace: str) -> str:
        return f"data-stage job {namespace}/{self.name}: read {self.source_uri}"

    def build(self, ctx: JobsContext) -> list[Manifest]:
        claim = pod.claim(ctx, self, self.volume)
        dest = pod.volume_path(self.volume, self.path)
        derived: dict[str, str] = {}
        region = self.source_region or ctx.region
        if region:
            derived = {"AWS_REGION": region, "AWS_DEFAULT_REGION": region}
        container: dict[str, Any] = {
            "name": "stage",
            "image": self.image,
            "command": ["aws", "s3", "sync", self.source_uri, dest + "/", "--no-progress", *self.args],
            "resources": copy.deepcopy(pod.SYSTEM_JOB_RESOURCES),
            "volumeMounts": [{"name": self.volume, "mountPath": f"/mnt/{self.volume}"}],
        }
        env = pod.env(self, derived)
        if env:
            container["env"] = env
        spec = pod.system_pod(
            ctx,
            {
                # Its own service account: Pod Identity binds the S3-read role to it alone.
                "serviceAccountName": self.name,
                "restartPolicy": "Never",
                "containers": [container],
                "volumes": [{"name": self.volume, "persistentVolumeClaim": {"claimName": claim}}],
            },
        )
        return [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": pod.metadata(self, ctx)},
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                # A copy of a large prefix can take hours: `pulumi up` does not wait for it
                # (kubectl wait / logs do).
                "metadata": pod.metadata(self, ctx, annotations={"pulumi.com/skipAwait": "true"}),
                "spec": {**self.bounds(), "template": pod.template(self, spec, "stage")},
            },
        ]
