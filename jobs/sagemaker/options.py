"""The ``sagemaker`` section of an ``mpi``/``pytorch-elastic`` spec: the settings only the SageMaker
runtime reads (the ml. type, S3 output, input channels and code, checkpoints, TensorBoard, spot,
the volume size).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from jobs.base import SpecModel


class S3Input(SpecModel):
    """An S3 input channel (SageMaker only): SageMaker copies or streams the prefix into the job."""

    channel: str = Field(
        description="channel name: the data is at /opt/ml/input/data/<channel> (env SM_CHANNEL_<CHANNEL>)"
    )
    s3_uri: str = Field(description="`s3://bucket/prefix` to read (every object whose key starts with the prefix)")
    mode: Literal["File", "FastFile", "Pipe"] = Field(
        "File",
        description="`File` copies it before training starts, `FastFile` streams files "
        "on first read, `Pipe` streams through a FIFO",
    )
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = Field(
        "FullyReplicated",
        description="`FullyReplicated`: every instance gets all of it; "
        "`ShardedByS3Key`: each instance a share of the objects",
    )


class SageMakerOptions(SpecModel):
    """Settings only the SageMaker runtime reads (kept in the spec when it runs on EKS)."""

    instance_type: str | None = Field(
        None, description="the `ml.` training type (default: the ml. equivalent of the node group's type)"
    )
    output_path: str | None = Field(
        None, description="`s3://bucket/prefix` for the model and output files (required with runtime sagemaker)"
    )
    source_dir: str | None = Field(
        None,
        description="the code SageMaker puts in /opt/ml/code: an `s3://.../sourcedir.tar.gz`, or a directory "
        "in the image or on a volume (default: the entry script's directory)",
    )
    entry_point: str | None = Field(
        None, description="the entry script's path inside sourceDir (default: the script in command/args)"
    )
    inputs: list[S3Input] = Field(
        default_factory=list, description="S3 input channels `{channel, s3Uri, mode, distribution}` (SageMaker only)"
    )
    checkpoint_s3_uri: str | None = Field(
        None, description="`s3://...` that /opt/ml/checkpoints is synced to (required with spot)"
    )
    tensorboard_s3_uri: str | None = Field(None, description="`s3://...` that /opt/ml/output/tensorboard is synced to")
    spot: bool = Field(
        False,
        description="managed spot training (needs checkpointS3Uri: an interrupted job resumes from its checkpoints)",
    )
    max_wait_seconds: int | None = Field(
        None,
        ge=1,
        description="spot: how long to wait for capacity plus run, at least the max runtime "
        "(default: twice the max runtime, at most 28 days)",
    )
    volume_size_gib: int = Field(
        100,
        ge=1,
        le=16384,
        alias="volumeSizeGiB",
        description="EBS storage per instance, GiB; on types with local NVMe (ml.p3dn, ml.p4d, ml.p5) "
        "SageMaker uses the NVMe instead, and refuses more than it holds",
    )
