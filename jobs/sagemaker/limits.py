"""SageMaker's paths and limits, as its CreateTrainingJob API and its training containers define
them, for the SageMaker runtime's modules.
"""

from __future__ import annotations

import re

# Where SageMaker mounts input channels (file-system channels included).
SAGEMAKER_DATA_ROOT = "/opt/ml/input/data"
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"  # SageMaker's default checkpoint directory
TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"  # what SageMaker syncs to tensorBoardS3Uri
# SageMaker's default and maximum for MaxRuntimeInSeconds (1 day, 28 days).
DEFAULT_MAX_RUNTIME = 86_400
MAX_RUNTIME_LIMIT = 2_419_200
MAX_RETRY_ATTEMPTS = 30  # RetryStrategy.MaximumRetryAttempts is 1-30
# CreateTrainingJob limits: 100 hyperparameters, keys up to 256 characters, values up to 2500.
MAX_HYPERPARAMETERS, MAX_HYPERPARAMETER_KEY, MAX_HYPERPARAMETER_VALUE = 100, 256, 2500
TRAINING_JOB_NAME_MAX = 63
NAME_HASH_LENGTH = 8  # hex digits of the spec hash in a training job name
# Hyperparameters the stack sets itself next to the script's arguments: program, submit directory,
# region, and up to three of the kind's distribution settings.
STACK_HYPERPARAMETERS = 6
MAX_ENVIRONMENT, MAX_ENVIRONMENT_VALUE = 100, 512  # CreateTrainingJob's Environment map
# An ECR image: SageMaker pulls training images from ECR (AWS's Deep Learning Containers live there too).
ECR_IMAGE = re.compile(
    r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/([a-z0-9][a-z0-9._/-]*)(?::[\w][\w.-]{0,127}|@sha256:[0-9a-f]{64})$"
)
