"""The SageMaker training job of one spec, as data: ``SageMakerJob`` (everything the job needs
before the stack's resources exist, and its CreateTrainingJob request once they do), its input
channels, and the execution role's least-privilege policy. ``components/sagemaker.py`` registers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.sagemaker.limits import CHECKPOINT_LOCAL_PATH, ECR_IMAGE, TENSORBOARD_LOCAL_PATH


@dataclass(frozen=True)
class FileSystemChannel:
    """One of the stack's shared volumes as a file-system input channel."""

    channel: str  # the volume name, "fsx" or "efs"
    volume: str
    sub_path: str  # inside the file system ("" = its root); FSx paths get the mount name in front
    read_only: bool


@dataclass(frozen=True)
class S3Channel:
    channel: str
    s3_uri: str
    mode: str
    distribution: str


@dataclass(frozen=True)
class FileSystemTarget:
    """A file system of the stack, as a channel reaches it (known once it exists)."""

    type: str  # SageMaker's FileSystemType: "FSxLustre" or "EFS"
    file_system_id: str
    mount_name: str = ""  # FSx: the mount name every directory path starts with


@dataclass(frozen=True)
class SageMakerJob:
    """Everything a SageMaker training job of one spec needs, before the stack's resources exist."""

    job: str  # the job's name in config
    training_job_name: str  # unique per stack, run and spec (SageMaker names are unique per account and region)
    image: str
    instance_type: str
    instance_count: int
    gpus_per_instance: int
    efa: bool  # EFA in use (the job's security group then also allows all traffic out to itself)
    volume_size_gib: int
    hyperparameters: dict[str, str]  # JSON-encoded values, as SageMaker's framework containers read them
    environment: dict[str, str]
    file_systems: list[FileSystemChannel]
    s3_inputs: list[S3Channel]
    output_path: str
    max_runtime_seconds: int
    retries: int  # RetryStrategy attempts (0 = none)
    spot: bool
    max_wait_seconds: int | None
    checkpoint_s3_uri: str | None
    tensorboard_s3_uri: str | None
    s3_read: list[str] = field(default_factory=list)  # s3:// prefixes or objects the role may read
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def total_gpus(self) -> int:
        return self.instance_count * self.gpus_per_instance

    @property
    def volumes(self) -> set[str]:
        return {f.volume for f in self.file_systems}

    def create_request(
        self,
        role_arn: str,
        security_group_ids: Sequence[str],
        subnet_ids: Sequence[str],
        file_systems: dict[str, FileSystemTarget],
    ) -> dict[str, Any]:
        """SageMaker's CreateTrainingJob request (boto3 names) once the stack's resources exist;
        ``file_systems`` maps each volume the job reads to its file system."""
        channels: list[dict[str, Any]] = []
        for c in self.file_systems:
            fs = file_systems[c.volume]
            # FSx directory paths start with the file system's mount name; EFS paths at its root.
            root = f"/{fs.mount_name}" if fs.type == "FSxLustre" else ""
            path = f"{root}/{c.sub_path}" if c.sub_path else (root or "/")
            source = {
                "FileSystemId": fs.file_system_id,
                "FileSystemType": fs.type,
                "FileSystemAccessMode": "ro" if c.read_only else "rw",
                "DirectoryPath": path,
            }
            # A file system is mounted: File is the only input mode SageMaker takes for one.
            channels.append(
                {"ChannelName": c.channel, "InputMode": "File", "DataSource": {"FileSystemDataSource": source}}
            )
        for s in self.s3_inputs:
            source = {"S3DataType": "S3Prefix", "S3Uri": s.s3_uri, "S3DataDistributionType": s.distribution}
            channels.append({"ChannelName": s.channel, "InputMode": s.mode, "DataSource": {"S3DataSource": source}})
        stopping: dict[str, int] = {"MaxRuntimeInSeconds": self.max_runtime_seconds}
        if self.max_wait_seconds is not None:
            stopping["MaxWaitTimeInSeconds"] = self.max_wait_seconds
        request: dict[str, Any] = {
            "TrainingJobName": self.training_job_name,
            "RoleArn": role_arn,
            "AlgorithmSpecification": {"TrainingImage": self.image, "TrainingInputMode": "File"},
            "HyperParameters": dict(self.hyperparameters),
            "OutputDataConfig": {"S3OutputPath": self.output_path},
            "ResourceConfig": {
                "InstanceType": self.instance_type,
                "InstanceCount": self.instance_count,
                "VolumeSizeInGB": self.volume_size_gib,
            },
            "StoppingCondition": stopping,
            "VpcConfig": {"SecurityGroupIds": list(security_group_ids), "Subnets": list(subnet_ids)},
            "EnableManagedSpotTraining": self.spot,
        }
        if self.environment:
            request["Environment"] = dict(self.environment)
        if channels:
            request["InputDataConfig"] = channels
        if self.retries:
            request["RetryStrategy"] = {"MaximumRetryAttempts": self.retries}
        if self.checkpoint_s3_uri:
            request["CheckpointConfig"] = {"S3Uri": self.checkpoint_s3_uri, "LocalPath": CHECKPOINT_LOCAL_PATH}
        if self.tensorboard_s3_uri:
            request["TensorBoardOutputConfig"] = {
                "S3OutputPath": self.tensorboard_s3_uri,
                "LocalPath": TENSORBOARD_LOCAL_PATH,
            }
        if self.tags:
            request["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(self.tags.items())]
        return request

    def execution_policy(self, partition: str, region: str, account: str) -> dict[str, Any]:
        """The execution role's policy: its S3 prefixes, the VPC network-interface actions SageMaker
        documents for VPC jobs, its CloudWatch logs and metrics, and pulling its image from ECR."""
        return execution_policy(self, partition, region, account)


# ---------------------------------------------------------------------------------------------
# IAM
# ---------------------------------------------------------------------------------------------

# The network-interface permissions SageMaker documents for training jobs in a VPC ("Give SageMaker
# AI Access to Resources in your Amazon VPC"). The Describe calls take no resource-level scoping.
VPC_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
)


def _split_s3(uri: str) -> tuple[str, str]:
    rest = uri[len("s3://") :]
    bucket, _, key = rest.partition("/")
    return bucket, key


def execution_policy(job: SageMakerJob, partition: str, region: str, account: str) -> dict[str, Any]:
    """Least privilege for one training job (see ``SageMakerJob.execution_policy``)."""
    read = sorted(set(job.s3_read))
    write = sorted({job.output_path, *([job.tensorboard_s3_uri] if job.tensorboard_s3_uri else [])})
    both = [job.checkpoint_s3_uri] if job.checkpoint_s3_uri else []

    def objects(uris: Sequence[str]) -> list[str]:
        # S3Prefix semantics: every key that starts with the prefix.
        return [f"arn:{partition}:s3:::{b}/{k}*" for b, k in map(_split_s3, uris)]

    listing: dict[str, list[str]] = {}
    for uri in [*read, *write, *both]:
        b, k = _split_s3(uri)
        listing.setdefault(b, []).append(f"{k}*")
    statements: list[dict[str, Any]] = []
    for i, (bucket, prefixes) in enumerate(sorted(listing.items())):
        statement: dict[str, Any] = {
            "Sid": f"ListBucket{i}",
            "Effect": "Allow",
            "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
            "Resource": f"arn:{partition}:s3:::{bucket}",
        }
        if "*" not in prefixes:
            statement["Condition"] = {"StringLike": {"s3:prefix": sorted(set(prefixes))}}
        statements.append(statement)
    if read or both:
        statements.append(
            {"Sid": "ReadInputs", "Effect": "Allow", "Action": "s3:GetObject", "Resource": objects([*read, *both])}
        )
    statements.append(
        {
            "Sid": "WriteOutputs",
            "Effect": "Allow",
            "Action": ["s3:PutObject", "s3:AbortMultipartUpload"],
            "Resource": objects([*write, *both]),
        }
    )
    statements.append({"Sid": "VpcNetworkInterfaces", "Effect": "Allow", "Action": list(VPC_ACTIONS), "Resource": "*"})
    log_groups = f"arn:{partition}:logs:{region}:{account}:log-group:/aws/sagemaker/TrainingJobs"
    statements.append(
        {
            "Sid": "Logs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            "Resource": [log_groups, f"{log_groups}:*"],
        }
    )
    statements.append(
        {
            "Sid": "Metrics",
            "Effect": "Allow",
            "Action": "cloudwatch:PutMetricData",
            "Resource": "*",
            "Condition": {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
        }
    )
    statements.append({"Sid": "EcrLogin", "Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"})
    m = ECR_IMAGE.match(job.image)
    if m:
        repo_account, repo_region, repo = m.group(1), m.group(2), m.group(3)
        statements.append(
            {
                "Sid": "PullImage",
                "Effect": "Allow",
                "Action": ["ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
                "Resource": f"arn:{partition}:ecr:{repo_region}:{repo_account}:repository/{repo}",
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}
