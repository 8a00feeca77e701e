"""SageMaker as a second runtime for the GPU kinds where it makes sense (``mpi``, ``pytorch-elastic``):
one spec, ``runtime: eks`` (the kind's Kubernetes job) or ``runtime: sagemaker`` (a SageMaker
training job in the stack's VPC, reading the stack's FSx and EFS).

What carries over from the EKS spec, unchanged:
- ``image``;
- the entry script: ``command`` + ``args`` is ``[launcher..., script, --name value ...]``; the
  launcher is what SageMaker's framework container runs for the kind (``python`` under mpirun for
  ``mpi``, torchrun for ``pytorch-elastic``), the script becomes ``sagemaker_program`` and its
  ``--name value`` arguments become hyperparameters, which the container passes back as the same
  ``--name value`` arguments;
- ``volumes``: each becomes a file-system input channel named after the volume, which SageMaker
  mounts at ``/opt/ml/input/data/<name>``; the job mounts it at that same path on EKS, so the
  script sees its data at one path in both runtimes;
- ``env`` (plus the EFA settings derived from the instance type), ``activeDeadlineSeconds`` (max
  runtime), ``backoffLimit`` (retries) and the total GPUs: instances x GPUs of the ``ml.`` type,
  which is the ml. equivalent of the node group's type unless ``sagemaker.instanceType`` says.

Pure: builds a ``SageMakerJob`` description; ``components/sagemaker.py`` registers it. The
package, from the bottom up: ``limits`` (SageMaker's paths and limits), ``options`` (the spec's
``sagemaker`` section), ``entry_point`` (command + args as launcher, script and hyperparameters),
``training_job`` (``SageMakerJob``: the CreateTrainingJob request, the execution role's policy),
``checks`` (the checks of runtime sagemaker, on ``SageMakerSpec``: what they read of a spec) and
``portable`` (``PortableJob``, the base of the kinds with both runtimes). Every name is importable
from ``jobs.sagemaker``.
"""

from __future__ import annotations

from jobs.sagemaker.entry_point import (
    RESERVED_HYPERPARAMETER_PREFIX,
    RESERVED_HYPERPARAMETERS,
    EntryPoint,
    args_to_hyperparameters,
)
from jobs.sagemaker.limits import (
    CHECKPOINT_LOCAL_PATH,
    DEFAULT_MAX_RUNTIME,
    ECR_IMAGE,
    MAX_ENVIRONMENT,
    MAX_ENVIRONMENT_VALUE,
    MAX_HYPERPARAMETER_KEY,
    MAX_HYPERPARAMETER_VALUE,
    MAX_HYPERPARAMETERS,
    MAX_RETRY_ATTEMPTS,
    MAX_RUNTIME_LIMIT,
    NAME_HASH_LENGTH,
    SAGEMAKER_DATA_ROOT,
    STACK_HYPERPARAMETERS,
    TENSORBOARD_LOCAL_PATH,
    TRAINING_JOB_NAME_MAX,
)
from jobs.sagemaker.options import S3Input, SageMakerOptions
from jobs.sagemaker.portable import PortableJob
from jobs.sagemaker.sagemaker_checks import check_sagemaker_runtime, training_job_suffix
from jobs.sagemaker.training_job import (
    VPC_ACTIONS,
    FileSystemChannel,
    FileSystemTarget,
    S3Channel,
    SageMakerJob,
    execution_policy,
)

__all__ = [
    "CHECKPOINT_LOCAL_PATH",
    "DEFAULT_MAX_RUNTIME",
    "ECR_IMAGE",
    "EntryPoint",
    "FileSystemChannel",
    "FileSystemTarget",
    "MAX_ENVIRONMENT",
    "MAX_ENVIRONMENT_VALUE",
    "MAX_HYPERPARAMETERS",
    "MAX_HYPERPARAMETER_KEY",
    "MAX_HYPERPARAMETER_VALUE",
    "MAX_RETRY_ATTEMPTS",
    "MAX_RUNTIME_LIMIT",
    "NAME_HASH_LENGTH",
    "PortableJob",
    "RESERVED_HYPERPARAMETERS",
    "RESERVED_HYPERPARAMETER_PREFIX",
    "S3Channel",
    "S3Input",
    "SAGEMAKER_DATA_ROOT",
    "STACK_HYPERPARAMETERS",
    "SageMakerJob",
    "SageMakerOptions",
    "TENSORBOARD_LOCAL_PATH",
    "TRAINING_JOB_NAME_MAX",
    "VPC_ACTIONS",
    "args_to_hyperparameters",
    "check_sagemaker_runtime",
    "execution_policy",
    "training_job_suffix",
]
