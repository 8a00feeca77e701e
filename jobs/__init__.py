"""Job kinds: one module per kind (its spec model, builder and own checks), the pod pieces they
share (``jobs/pod.py``), shared checks (``jobs/spec_checks.py``) and the registry of kinds
(``jobs/registry.py``). Pure: imports only ``facts`` and pydantic, never Pulumi or boto3."""

from facts.versions import AWS_CLI_IMAGE, NCCL_TESTS_IMAGE, TENSORBOARD_IMAGE
from jobs.base import EFA_ENV_NAMES, VOLUME_NAMES, GpuJob, JobBase, SecretKeyRef, SystemJob, VolumeMount
from jobs.data_stage import DataStageSpec
from jobs.mpi import MPIJOB_API_VERSION, SSHD_COMMAND, MpiJobSpec, mpirun_command
from jobs.nccl_test import NCCL_ALL_REDUCE_PERF, NCCL_TEST_ARGS, NCCL_TESTS_IMAGE_GPU_MODELS, NcclTestSpec
from jobs.paddle import PaddleSpec
from jobs.pod import EFA_HUGEPAGES, JOB_LABEL, efa_env, gpu_worker_container, job_efa_interfaces
from jobs.pytorch_elastic import TRAINING_API_VERSION, PyTorchElasticSpec
from jobs.registry import GPU_KINDS, JOB_KINDS, KIND_OPERATOR, SYSTEM_KINDS, build_manifests
from jobs.sagemaker import SAGEMAKER_DATA_ROOT, PortableJob, S3Input, SageMakerJob, SageMakerOptions
from jobs.spec_checks import DNS1035_LABEL, MAX_HOSTNAME
from jobs.targets import GPU_TOLERATION, GroupFacts, JobBuildError, JobEnvironment, JobsContext, JobTarget
from jobs.tensorboard import TENSORBOARD_PORT, TensorboardSpec

__all__ = [
    "AWS_CLI_IMAGE",
    "DNS1035_LABEL",
    "EFA_ENV_NAMES",
    "EFA_HUGEPAGES",
    "GPU_KINDS",
    "GPU_TOLERATION",
    "JOB_KINDS",
    "JOB_LABEL",
    "KIND_OPERATOR",
    "MAX_HOSTNAME",
    "MPIJOB_API_VERSION",
    "NCCL_ALL_REDUCE_PERF",
    "NCCL_TESTS_IMAGE",
    "NCCL_TESTS_IMAGE_GPU_MODELS",
    "NCCL_TEST_ARGS",
    "SSHD_COMMAND",
    "SYSTEM_KINDS",
    "TENSORBOARD_IMAGE",
    "TENSORBOARD_PORT",
    "TRAINING_API_VERSION",
    "VOLUME_NAMES",
    "DataStageSpec",
    "GpuJob",
    "GroupFacts",
    "JobBase",
    "JobBuildError",
    "JobEnvironment",
    "JobTarget",
    "JobsContext",
    "MpiJobSpec",
    "NcclTestSpec",
    "PaddleSpec",
    "PortableJob",
    "S3Input",
    "SAGEMAKER_DATA_ROOT",
    "SageMakerJob",
    "SageMakerOptions",
    "PyTorchElasticSpec",
    "SecretKeyRef",
    "SystemJob",
    "TensorboardSpec",
    "VolumeMount",
    "build_manifests",
    "efa_env",
    "gpu_worker_container",
    "job_efa_interfaces",
    "mpirun_command",
]
