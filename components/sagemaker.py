"""SageMakerTrainingJobs: the jobs that run with ``runtime: sagemaker``, as SageMaker training jobs in
the stack's VPC. Per job:

- a security group: all traffic from itself (and, on EFA types, all traffic to itself, which EFA
  needs explicitly), all traffic out (ECR through the NAT gateway, S3 through the gateway endpoint);
- client access to the stack's file systems it reads: Lustre (988, 1018-1023) both ways with the
  FSx group, NFS (2049) into the EFS group;
- an execution role trusted by SageMaker with the job's least-privilege policy (``jobs/sagemaker/training_job.py``);
- the training job itself (``providers/sagemaker_training_job.py``: ``pulumi up`` starts it and does
  not wait for the run), in the GPU AZ's subnet when it reads FSx (which lives in that one AZ), else
  in the private subnets. ``pulumi destroy`` stops a running job and deletes the network
  interfaces it leaves, found by the job's own security group and subnets: a group per job keeps
  that from touching anything else.

Knows nothing of stack config: the stack hands it ``SageMakerJob`` descriptions and the VPC and
file systems to use.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_aws as aws

from components.storage import LUSTRE_PORTS, NFS_PORT
from jobs.sagemaker import FileSystemTarget, SageMakerJob
from providers.sagemaker_training_job import SageMakerTrainingJob

SAGEMAKER_TRUST = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
}
# How long `pulumi destroy` waits for a running job to stop (it uploads its output and checkpoints first).
STOP_TIMEOUT_SECONDS = 3600


@dataclass
class SharedFileSystem:
    """One of the stack's file systems as a SageMaker job reaches it."""

    type: Literal["FSxLustre", "EFS"]  # SageMaker's FileSystemType
    file_system_id: pulumi.Input[str]  # the file system
    security_group_id: pulumi.Input[str]  # its security group (client access is added to it)
    mount_name: pulumi.Input[str] | None = None  # FSx: the mount name every directory path starts with
    ready: list[pulumi.Resource] = field(
        default_factory=list
    )  # what must exist before a client mounts it (EFS mount targets)


@dataclass
class SageMakerTrainingJobsArgs:
    """Inputs of ``SageMakerTrainingJobs``."""

    jobs: Sequence[SageMakerJob]  # the jobs, described by jobs/sagemaker/training_job.py
    region: str  # the AWS region the jobs run in
    vpc_id: pulumi.Input[str]  # the stack's VPC
    private_subnet_ids: pulumi.Input[Sequence[pulumi.Input[str]]]  # where jobs that read no FSx run
    gpu_subnet_id: pulumi.Input[str]  # the GPU AZ's private subnet: where jobs that read FSx run
    file_systems: dict[str, SharedFileSystem] = field(default_factory=dict)  # volume name ("fsx"/"efs") -> file system
    tags: dict[str, str] = field(default_factory=dict)  # tags on every resource


class SageMakerTrainingJobs(pulumi.ComponentResource):
    """Registers one SageMaker training job, its security group, rules and role per job."""

    def __init__(self, name: str, args: SageMakerTrainingJobsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:SageMakerTrainingJobs", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        region = aws.get_region_output(opts=invoke).region
        account = aws.get_caller_identity_output(opts=invoke).account_id
        self.training_jobs: dict[str, SageMakerTrainingJob] = {}
        self.security_groups: dict[str, aws.ec2.SecurityGroup] = {}
        self.roles: dict[str, aws.iam.Role] = {}

        for job in args.jobs:
            missing = sorted(job.volumes - set(args.file_systems))
            if missing:
                raise ValueError(f"SageMaker job {job.job!r} reads {missing}, which the stack does not have")
            base = f"{name}-{job.job}"
            tags = {**args.tags, **job.tags, "gputraining/job": job.job}
            sg, ready = self._network(base, job, args, tags, child)
            role = aws.iam.Role(
                f"{base}-execution",
                # IAM role names are at most 64 characters: a prefix of at most 38, plus the provider's 26.
                name_prefix=f"{job.job[:27]}-sagemaker-",
                assume_role_policy=json.dumps(SAGEMAKER_TRUST),
                description=(
                    f"SageMaker training job {job.job}: its S3 prefixes, VPC interfaces, logs, metrics and image"
                ),
                tags=tags,
                opts=child,
            )
            policy = aws.iam.RolePolicy(
                f"{base}-execution",
                role=role.id,
                policy=pulumi.Output.all(partition, region, account).apply(_policy_json(job)),
                opts=child,
            )
            subnets: pulumi.Input[Sequence[pulumi.Input[str]]] = (
                [args.gpu_subnet_id] if "fsx" in job.volumes else args.private_subnet_ids
            )
            targets = {v: _target(args.file_systems[v]) for v in sorted(job.volumes)}
            request = pulumi.Output.all(
                role.arn, sg.id, subnets, pulumi.Output.all(**targets) if targets else {}
            ).apply(_request(job))
            self.training_jobs[job.job] = SageMakerTrainingJob(
                base,
                request=request,
                region=args.region,
                stop_timeout_seconds=STOP_TIMEOUT_SECONDS,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    # The job starts pulling its image and mounting its file systems at once: the role's
                    # policy and every network rule must be in place first (and on destroy, the job goes
                    # first: its interfaces hold the group and the subnets).
                    depends_on=[policy, *ready, *(r for v in sorted(job.volumes) for r in args.file_systems[v].ready)],
                    # A training job cannot change: a changed spec is a new job with a new name. The old
                    # one is stopped first, so two runs never hold the GPUs (and the quota) at once.
                    delete_before_replace=True,
                ),
            )
            self.security_groups[job.job] = sg
            self.roles[job.job] = role

        self.training_job_names = {j.job: j.training_job_name for j in args.jobs}
        self.register_outputs(
            {
                "trainingJobNames": self.training_job_names,
                "trainingJobArns": {j: t.arn for j, t in self.training_jobs.items()},
            }
        )

    def _network(
        self,
        base: str,
        job: SageMakerJob,
        args: SageMakerTrainingJobsArgs,
        tags: dict[str, str],
        child: pulumi.ResourceOptions,
    ) -> tuple[aws.ec2.SecurityGroup, list[pulumi.Resource]]:
        sg = aws.ec2.SecurityGroup(
            f"{base}-sagemaker",
            vpc_id=args.vpc_id,
            description=f"SageMaker training job {job.job}: its instances among themselves, and out",
            tags={**tags, "Name": f"{job.job}-sagemaker"},
            opts=child,
        )
        rules: list[pulumi.Resource] = [
            aws.vpc.SecurityGroupIngressRule(
                f"{base}-from-self",
                security_group_id=sg.id,
                referenced_security_group_id=sg.id,
                ip_protocol="-1",
                description="all traffic among the instances of the job (MPI, NCCL, torchrun)",
                opts=child,
            ),
            aws.vpc.SecurityGroupEgressRule(
                f"{base}-out",
                security_group_id=sg.id,
                cidr_ipv4="0.0.0.0/0",
                ip_protocol="-1",
                description="ECR, S3 (gateway endpoint), CloudWatch and the file systems",
                opts=child,
            ),
        ]
        if job.efa:
            # EFA traffic is allowed only by rules that name the group itself, both ways.
            rules.append(
                aws.vpc.SecurityGroupEgressRule(
                    f"{base}-to-self",
                    security_group_id=sg.id,
                    referenced_security_group_id=sg.id,
                    ip_protocol="-1",
                    description="all traffic to the instances of the job (EFA)",
                    opts=child,
                )
            )
        for volume in sorted(job.volumes):
            fs = args.file_systems[volume]
            if fs.type == "FSxLustre":
                # Lustre both ways: the job to the file servers, and the servers back to the job.
                directions = (
                    ("in-fsx", fs.security_group_id, sg.id, f"from SageMaker job {job.job}"),
                    ("from-fsx", sg.id, fs.security_group_id, "from FSx to the job"),
                )
                for lo, hi in LUSTRE_PORTS:
                    for suffix, into, source, text in directions:
                        rules.append(
                            aws.vpc.SecurityGroupIngressRule(
                                f"{base}-lustre-{lo}-{hi}-{suffix}",
                                security_group_id=into,
                                referenced_security_group_id=source,
                                ip_protocol="tcp",
                                from_port=lo,
                                to_port=hi,
                                description=f"Lustre {lo}-{hi} {text}",
                                opts=child,
                            )
                        )
            else:
                rules.append(
                    aws.vpc.SecurityGroupIngressRule(
                        f"{base}-nfs-in-efs",
                        security_group_id=fs.security_group_id,
                        referenced_security_group_id=sg.id,
                        ip_protocol="tcp",
                        from_port=NFS_PORT,
                        to_port=NFS_PORT,
                        description=f"NFS from SageMaker job {job.job}",
                        opts=child,
                    )
                )
        return sg, rules


def _policy_json(job: SageMakerJob) -> Callable[[list[Any]], str]:
    def render(v: list[Any]) -> str:
        return json.dumps(job.execution_policy(v[0], v[1], v[2]))

    return render


def _request(job: SageMakerJob) -> Callable[[list[Any]], dict[str, Any]]:
    def render(v: list[Any]) -> dict[str, Any]:
        return job.create_request(v[0], [v[1]], v[2], dict(v[3]))

    return render


def _target(fs: SharedFileSystem) -> pulumi.Output[FileSystemTarget]:
    def make(v: list[Any]) -> FileSystemTarget:
        return FileSystemTarget(v[0], v[1], v[2] or "")

    return pulumi.Output.all(fs.type, fs.file_system_id, fs.mount_name or "").apply(make)
