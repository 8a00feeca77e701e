"""Training images whose contents are known from the files they are built from.

Only what a check needs: whether an image carries ``python-etcd``, the package PyTorch's etcd
rendezvous backends import (torch/distributed/elastic/rendezvous/etcd_rendezvous.py and
etcd_rendezvous_backend.py: ``import etcd``; without it torchrun fails when it creates the
rendezvous handler, in torch 2.13 with ``EtcdStubError: The 'etcd' module is required but not
installed``). The ``c10d`` backend needs nothing beyond torch. None of AWS's images below has it, so the
stack ships python-etcd to every job on its etcd (jobs/python_etcd.py) whatever the image: these tables
record why, and the tests run the dev stack's job on the stack's etcd with an interpreter that has no
python-etcd of its own, as these images (tests/integration/test_elastic_rendezvous.py).

AWS Deep Learning Containers, ``pytorch-training`` (github.com/aws/deep-learning-containers):

- GPU images are built from ``pytorch/training/docker/<minor>/py3/<cuda>/Dockerfile.gpu``, whose
  ``ec2`` and ``sagemaker`` stages give the ``-ec2`` and ``-sagemaker`` images; the tag is
  ``<version>-gpu-<python>-<cuda>-<os>-ec2|sagemaker`` (pytorch/training/buildspec-2-<minor>-ec2.yml
  and -sm.yml), pinned releases add ``-v<release>`` and sometimes ``-<date>``.
- Every Dockerfile.gpu below, read at tag v2.4-pt-ec2-2.10.0-tr-py313 (commit 70d4a81d), installs no
  python-etcd, and none of their revisions on any branch or tag ever named etcd (``git log --all
  -S etcd`` over them finds no commit); the 2.5 one was read at the last 2.5.1 releases too,
  v1.30-pt-ec2-2.5.1-tr-py311 (9634533a) and v1.23-pt-sagemaker-2.5.1-tr-py311 (cbf299bf): no
  pip or conda line names it (torch, torchvision, torchaudio, torchtnt, s3torchconnector, fastai,
  accelerate, spacy, flash-attn, Transformer Engine, mpi4py; SageMaker's toolkits in the sagemaker
  stage). Only the Neuron images of the repository (Dockerfile.neuron/.neuronx) install python-etcd.
- The registries they are published in: available_images.md at tag v1.30-pt-ec2-2.5.1-tr-py311. A
  copy in another registry (your own ECR, with python-etcd added or not) is unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DLC_REPOSITORY = "aws/deep-learning-containers"
DLC_READ_AT = "v2.4-pt-ec2-2.10.0-tr-py313"
DLC_READ_AT_COMMIT = "70d4a81dae244d899f07347cfa4478e59a279d88"

# The ECR registries of the Deep Learning Containers: account -> regions (available_images.md at tag
# v1.30-pt-ec2-2.5.1-tr-py311, commit 9634533af41cf479fc58960103df2ffd963967d2).
DLC_REGISTRY_ACCOUNTS: dict[str, tuple[str, ...]] = {
    "763104351884": (
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "ca-central-1",
        "sa-east-1",
        "eu-central-1",
        "eu-north-1",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "ap-east-2",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-south-1",
        "ap-southeast-1",
        "ap-southeast-2",
    ),
    "204538143572": ("ca-west-1",),
    "217643126080": ("me-south-1",),
    "364406365360": ("ap-northeast-3",),
    "380420809688": ("eu-central-2",),
    "457447274322": ("ap-southeast-4",),
    "503227376785": ("eu-south-2",),
    "550225433462": ("ap-southeast-5",),
    "590183813437": ("ap-southeast-7",),
    "626614931356": ("af-south-1",),
    "637423239942": ("mx-central-1",),
    "692866216735": ("eu-south-1",),
    "727897471807": ("cn-north-1", "cn-northwest-1"),
    "772153158452": ("ap-south-2",),
    "780543022126": ("il-central-1",),
    "871362719292": ("ap-east-1",),
    "907027046896": ("ap-southeast-3",),
    "914824155844": ("me-central-1",),
}
DLC_PYTORCH_TRAINING = "pytorch-training"
# After the CUDA version: the OS, the stage, and a release pin (-v1.30) with its build time, if any.
_TAG_TAIL = r"ubuntu\d+\.\d+-(ec2|sagemaker)(-v\d+(\.\d+)*(-\d{4}(-\d{2}){5})?)?"


@dataclass(frozen=True)
class DlcPyTorchTraining:
    """One Dockerfile.gpu of the ``pytorch-training`` images: PyTorch ``minor`` built for ``cuda``."""

    minor: str  # "2.5"
    cuda: str  # "cu124"
    python_etcd: bool

    @property
    def dockerfile(self) -> str:
        return f"pytorch/training/docker/{self.minor}/py3/{self.cuda}/Dockerfile.gpu"

    @property
    def source(self) -> str:
        return f"{DLC_REPOSITORY} {self.dockerfile} (tag {DLC_READ_AT})"

    def builds(self, tag: str) -> bool:
        """Whether ``tag`` names an image built from this Dockerfile (with or without a release pin)."""
        return re.fullmatch(rf"{re.escape(self.minor)}\.\d+-gpu-py3\d+-{self.cuda}-{_TAG_TAIL}", tag) is not None


DLC_PYTORCH_TRAINING_GPU = (
    DlcPyTorchTraining("2.0", "cu118", python_etcd=False),
    DlcPyTorchTraining("2.0", "cu121", python_etcd=False),
    DlcPyTorchTraining("2.1", "cu121", python_etcd=False),
    DlcPyTorchTraining("2.2", "cu121", python_etcd=False),
    DlcPyTorchTraining("2.3", "cu121", python_etcd=False),
    DlcPyTorchTraining("2.4", "cu124", python_etcd=False),
    DlcPyTorchTraining("2.5", "cu124", python_etcd=False),
    DlcPyTorchTraining("2.6", "cu126", python_etcd=False),
    DlcPyTorchTraining("2.7", "cu128", python_etcd=False),
    DlcPyTorchTraining("2.8", "cu129", python_etcd=False),
    DlcPyTorchTraining("2.9", "cu130", python_etcd=False),
    DlcPyTorchTraining("2.10", "cu130", python_etcd=False),
)


@dataclass(frozen=True)
class KnownImage:
    """What is known about one image reference, and where it was read."""

    python_etcd: bool
    source: str


def known_image(ref: str) -> KnownImage | None:
    """What is known about the image ``ref`` (``registry/repository:tag[@digest]``), or None when it
    is in none of the tables above."""
    parts = _registry_repository_tag(ref)
    if parts is None:
        return None
    registry, repository, tag = parts
    if repository != DLC_PYTORCH_TRAINING or not _is_dlc_registry(registry):
        return None
    build = next((b for b in DLC_PYTORCH_TRAINING_GPU if b.builds(tag)), None)
    return None if build is None else KnownImage(build.python_etcd, build.source)


def _registry_repository_tag(ref: str) -> tuple[str, str, str] | None:
    name = ref.split("@", 1)[0]
    registry, slash, rest = name.partition("/")
    repository, colon, tag = rest.rpartition(":")
    if not slash or not colon:
        return None
    return registry, repository, tag


def _is_dlc_registry(registry: str) -> bool:
    m = re.fullmatch(r"(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?", registry)
    if m is None:
        return False
    account, region, china = m.groups()
    return region in DLC_REGISTRY_ACCOUNTS.get(account, ()) and bool(china) == region.startswith("cn-")
