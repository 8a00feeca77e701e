"""An elastic job's rendezvous backend and its image: the etcd backends import python-etcd, and a
config whose image is known to lack it is refused (facts/images.py: the AWS Deep Learning
Containers' pytorch-training GPU images, none of which installs it). The dev stack's example
rendezvous as shipped: c10d, which needs nothing in the image.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

import jobs as J
from facts import images
from stacks import config as C
from tests.helpers import (
    ALL_JOBS,
    DOC_TEXT,
    JOBS_KEY,
    NS,
    dev_values,
    elastic_job,
    make_ctx,
    one_job_problem,
    parse_job_list,
)

DLC = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training"
DLC_EC2 = f"{DLC}:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
DLC_SAGEMAKER = f"{DLC}:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
# The same image with python-etcd added, pushed to your own registry: unknown, so not refused.
OWN_COPY = "123456789012.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref",
    [
        DLC_EC2,
        DLC_SAGEMAKER,
        f"{DLC}:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2-v1.30",
        f"{DLC}:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker-v1.14-2025-07-22-19-53-18",
        f"{DLC}:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2@sha256:{'a' * 64}",
        "763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.0.1-gpu-py310-cu118-ubuntu20.04-ec2",
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.10.0-gpu-py313-cu130-ubuntu22.04-sagemaker",
        "871362719292.dkr.ecr.ap-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-ec2",
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-training:2.6.0-gpu-py312-cu126-ubuntu22.04-ec2",
    ],
)
def test_aws_pytorch_training_gpu_images_are_known_to_lack_python_etcd(ref: str) -> None:
    known = images.known_image(ref)
    assert known is not None and known.python_etcd is False
    assert re.search(
        r"aws/deep-learning-containers pytorch/training/docker/2\.\d+/py3/cu\d+/Dockerfile\.gpu \(tag v[\w.-]+\)",
        known.source,
    )


@pytest.mark.parametrize(
    "ref",
    [
        OWN_COPY,  # another account: a copy, maybe with python-etcd added
        # not that region's account
        "763104351884.dkr.ecr.ap-east-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2",
        # China without .cn
        "727897471807.dkr.ecr.cn-north-1.amazonaws.com/pytorch-training:2.6.0-gpu-py312-cu126-ubuntu22.04-ec2",
        f"{DLC}:2.5.1-cpu-py311-ubuntu22.04-ec2",  # CPU images are not in the table
        f"{DLC}:2.5.1-gpu-py311-cu121-ubuntu22.04-ec2",  # no 2.5 build for CUDA 12.1
        f"{DLC}:2.11.0-gpu-py312-cu130-ubuntu22.04-ec2",  # a minor not read
        f"{DLC}:2.5.1-gpu-py311-cu124-ubuntu22.04-ec2-etcd",  # someone's own tag
        f"{DLC}@sha256:{'a' * 64}",  # no tag to read
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx:2.5.1-neuronx-py310-sdk2.22.0-ubuntu22.04",
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/huggingface-pytorch-training:2.5.1-transformers4.49.0-gpu-py311-cu124-ubuntu22.04",
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        "pytorch-training",
    ],
)
def test_other_images_are_unknown(ref: str) -> None:
    assert images.known_image(ref) is None


def test_every_row_names_a_dockerfile_of_its_minor_and_cuda() -> None:
    rows = images.DLC_PYTORCH_TRAINING_GPU
    assert len({(r.minor, r.cuda) for r in rows}) == len(rows)
    for r in rows:
        assert r.dockerfile == f"pytorch/training/docker/{r.minor}/py3/{r.cuda}/Dockerfile.gpu"
        assert images.DLC_READ_AT in r.source and r.dockerfile in r.source
        assert r.builds(f"{r.minor}.0-gpu-py312-{r.cuda}-ubuntu22.04-ec2") and not r.builds(
            f"{r.minor}.0-gpu-py312-cu999-ubuntu22.04-ec2"
        )
    assert re.fullmatch("[0-9a-f]{40}", images.DLC_READ_AT_COMMIT)
    assert all(re.fullmatch(r"\d{12}", a) for a in images.DLC_REGISTRY_ACCOUNTS)
    regions = [r for rs in images.DLC_REGISTRY_ACCOUNTS.values() for r in rs]
    assert len(regions) == len(set(regions)), "one registry per region"


# ---------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", [None, "etcd", "etcd-v2"])
def test_an_etcd_backend_on_an_image_known_to_lack_python_etcd_is_refused(backend: Any) -> None:
    over = {} if backend is None else {"rendezvous": backend}
    p = one_job_problem([elastic_job(image=DLC_EC2, **over)])
    assert p.key == f"{JOBS_KEY}[0].rendezvous"
    shown = backend or "etcd"
    assert p.message.startswith(f"{shown!r}{' (the default)' if backend is None else ''} needs the python-etcd package")
    for words in (
        repr(DLC_EC2),
        "pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu",
        "rendezvous 'c10d'",
        "an image with python-etcd",
        "pip install python-etcd",
    ):
        assert words in p.message, (words, p.message)


def test_a_disabled_job_is_refused_too() -> None:
    """It is wrong on its own, like a bad image reference (checked for disabled jobs as well)."""
    assert one_job_problem([elastic_job(image=DLC_EC2, enabled=False)]).key == f"{JOBS_KEY}[0].rendezvous"


@pytest.mark.parametrize(
    "job",
    [
        elastic_job(image=DLC_EC2, rendezvous="c10d"),  # c10d needs nothing in the image
        elastic_job(image=OWN_COPY),  # an image of your own: unknown, the etcd default stands
        elastic_job(image=OWN_COPY, rendezvous="etcd-v2"),
        elastic_job(image="nvcr.io/nvidia/pytorch:24.01-py3"),
        # On SageMaker the toolkit starts torchrun with a static rendezvous: `rendezvous` does not apply.
        elastic_job(image=DLC_SAGEMAKER, runtime="sagemaker", nodeGroup="p4d"),
    ],
    ids=["c10d", "own-copy", "own-copy-etcd-v2", "ngc", "sagemaker"],
)
def test_what_is_accepted(job: dict[str, Any]) -> None:
    _, problems = parse_job_list([job])
    assert [p for p in problems if p.key.endswith(".rendezvous")] == []


def test_c10d_on_the_aws_image_emits_the_operator_default_endpoint() -> None:
    """c10d: no rdzvHost/rdzvPort, so the operator points PET_RDZV_ENDPOINT at <name>-worker-0."""
    (spec,), problems = parse_job_list([elastic_job(image=DLC_EC2, rendezvous="c10d", minNodes=1, maxNodes=2)])
    assert problems == []
    (cr,) = spec.build(make_ctx(etcd_endpoint=None))
    policy = cr["spec"]["elasticPolicy"]
    assert policy["rdzvBackend"] == "c10d" and "rdzvHost" not in policy and "rdzvPort" not in policy


# ---------------------------------------------------------------------------------------------
# The dev stack's example, as shipped
# ---------------------------------------------------------------------------------------------


def _elastic_on_eks(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [j for j in values[f"{NS}:jobs"] if j["kind"] == "pytorch-elastic" and j.get("runtime", "eks") == "eks"]


def test_the_dev_elastic_example_rendezvous_with_c10d_on_the_aws_image() -> None:
    (job,) = _elastic_on_eks(dev_values())
    assert job.get("enabled", True) and job["rendezvous"] == "c10d"
    known = images.known_image(job["image"])
    assert known is not None and not known.python_etcd, "the example runs AWS's own image, as a user would"


def test_the_dev_elastic_example_on_etcd_would_be_refused() -> None:
    """The issue: the example kept the etcd default on an image without python-etcd."""
    values = copy.deepcopy(dev_values())
    (job,) = _elastic_on_eks(values)
    job.pop("rendezvous")
    with pytest.raises(C.ConfigError) as err:
        C.load(values, "gpu-training", "dev")
    (problem,) = [p for p in err.value.problems if p.key.endswith(".rendezvous")]
    assert (
        re.fullmatch(rf"{NS}:jobs\[\d+\]\.rendezvous", problem.key)
        and "(the default) needs the python-etcd package" in problem.message
    )


def test_the_dev_plan_has_the_c10d_policy(dev_plan) -> None:
    (cr,) = [o for o in dev_plan.kubernetes_objects() if o.get("kind") == "PyTorchJob"]
    policy = cr["spec"]["elasticPolicy"]
    assert policy["rdzvBackend"] == "c10d" and "rdzvHost" not in policy
    assert re.fullmatch(r"resnet50-elastic-1-[0-9a-f]{8}", policy["rdzvId"])
    assert J.PyTorchElasticSpec.model_fields["rendezvous"].default == "etcd", "the default stays the stack's etcd"


def test_the_docs_quote_the_first_examples_rendezvous_id() -> None:
    first = next(j for j in ALL_JOBS if j["kind"] == "pytorch-elastic")
    quoted = re.search(r"`([a-z0-9-]+-\d+-[0-9a-f]{8})` for the first example below", DOC_TEXT)
    assert quoted is not None and quoted.group(1) == J.PyTorchElasticSpec.model_validate(first).rendezvous_id
