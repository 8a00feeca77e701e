"""An elastic job's rendezvous backend and its image: the etcd backends import python-etcd, which AWS's
pytorch-training GPU images lack (facts/images.py), so the stack ships it to the job's workers
(jobs/python_etcd.py). The dev stack's example rendezvous as shipped on the stack's etcd, with AWS's image.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import jobs as J
from facts import images, versions
from facts.paths import PROJECT_ROOT as ROOT
from jobs import python_etcd
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
# The stack ships python-etcd (jobs/python_etcd.py)
# ---------------------------------------------------------------------------------------------


def _build(**over: Any) -> list[dict[str, Any]]:
    (spec,), problems = parse_job_list([elastic_job(**over)])
    assert problems == []
    return spec.build(make_ctx())


def _pytorch_container(cr: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in cr["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"])


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "<from>") for e in container.get("env") or []}


@pytest.mark.parametrize("backend", [None, "etcd", "etcd-v2"])
def test_an_etcd_backend_on_aws_image_is_accepted_and_gets_the_shipped_python_etcd(backend: Any) -> None:
    """The refusal of issue 27 is gone: AWS's image as it is, the stack's etcd, python-etcd from a ConfigMap."""
    over = {} if backend is None else {"rendezvous": backend}
    cm, cr = _build(image=DLC_EC2, **over)
    assert (cm["kind"], cm["metadata"]["name"]) == ("ConfigMap", "imagenet-python-etcd")
    assert cm["metadata"]["namespace"] == cr["metadata"]["namespace"]
    spec = cr["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == python_etcd.VOLUME]
    items = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    assert volume["configMap"]["name"] == cm["metadata"]["name"] and set(items) == set(cm["data"])
    assert sorted(items.values()) == [
        "dns/__init__.py",
        "etcd/__init__.py",
        "etcd/auth.py",
        "etcd/client.py",
        "etcd/lock.py",
    ]
    container = _pytorch_container(cr)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == python_etcd.VOLUME]
    assert mount == {"name": python_etcd.VOLUME, "mountPath": "/opt/python-etcd", "readOnly": True}
    assert _env(container)["PYTHONPATH"] == "/opt/python-etcd"
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in _env(container)


def test_the_shipped_modules_are_the_pinned_vendored_files() -> None:
    """Verbatim from the sdist (SOURCES.md), each file's sha256 pinned in facts/versions.py."""
    (cm, _) = _build()
    sources = (ROOT / "manifests" / "vendor" / "SOURCES.md").read_text()
    assert versions.PYTHON_ETCD_SDIST_SHA256 in sources and "python-etcd-0.4.5.tar.gz" in sources
    for pinned in versions.PYTHON_ETCD_FILES:
        data = (ROOT / pinned.file).read_bytes()
        assert hashlib.sha256(data).hexdigest() == pinned.sha256 and pinned.sha256 in sources
        name = pinned.file.removeprefix(versions.PYTHON_ETCD_DIR + "/")
        assert cm["data"][python_etcd.key(name)] == data.decode()
    assert cm["data"]["dns.__init__.py"] == (ROOT / "jobs" / "scripts" / "dns_fallback.py").read_text()
    size = sum(len(k) + len(v.encode()) for k, v in cm["data"].items())
    assert size < 200_000, f"{size} bytes: a ConfigMap holds at most 1 MiB"


def test_a_changed_vendored_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    first = versions.PYTHON_ETCD_FILES[0]
    wrong = type(first)(file=first.file, sha256="0" * 64)
    monkeypatch.setattr(versions, "PYTHON_ETCD_FILES", (wrong, *versions.PYTHON_ETCD_FILES[1:]))
    python_etcd.files.cache_clear()
    try:
        with pytest.raises(
            python_etcd.VendoredFileError, match=f"{first.file}: sha256 [0-9a-f]{{64}} is not the pinned"
        ):
            python_etcd.files()
    finally:
        python_etcd.files.cache_clear()


def test_the_jobs_own_pythonpath_comes_after_the_shipped_one() -> None:
    _, cr = _build(env={"PYTHONPATH": "/workspace/src"})
    assert _env(_pytorch_container(cr))["PYTHONPATH"] == "/opt/python-etcd:/workspace/src"


def test_a_pythonpath_from_a_secret_is_refused_on_etcd() -> None:
    p = one_job_problem([elastic_job(secretEnv={"PYTHONPATH": {"secret": "s", "key": "k"}})])
    assert p.key == f"{JOBS_KEY}[imagenet].secretEnv.PYTHONPATH"
    assert (
        "puts its python-etcd (/opt/python-etcd) first on PYTHONPATH" in p.message
        and "set PYTHONPATH in `env`" in p.message
    )
    _, problems = parse_job_list(
        [elastic_job(rendezvous="c10d", secretEnv={"PYTHONPATH": {"secret": "s", "key": "k"}})]
    )
    assert problems == []


def test_c10d_ships_nothing_and_gets_a_store_per_round() -> None:
    """c10d: no rdzvHost/rdzvPort (the operator points PET_RDZV_ENDPOINT at <name>-worker-0), no python-etcd,
    and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (jobs/pytorch_elastic.py, C10D_OWN_STORE)."""
    job = elastic_job(image=DLC_EC2, rendezvous="c10d", minNodes=1, maxNodes=2, fabric="off")  # no guard objects
    (spec,), problems = parse_job_list([job])
    assert problems == []
    (cr,) = spec.build(make_ctx(etcd_endpoint=None))
    policy = cr["spec"]["elasticPolicy"]
    assert policy["rdzvBackend"] == "c10d" and "rdzvHost" not in policy and "rdzvPort" not in policy
    container = _pytorch_container(cr)
    assert _env(container)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" and "PYTHONPATH" not in _env(container)


@pytest.mark.parametrize("with_dnspython", [False, True], ids=["no-dnspython", "dnspython"])
def test_the_shipped_folder_imports_with_only_urllib3(tmp_path: Path, with_dnspython: bool) -> None:
    """The ConfigMap's files as mounted, in an interpreter without site-packages (``-S``) that sees only urllib3
    (as AWS's images: urllib3, no dnspython, no python-etcd): ``import etcd`` works and makes a client; the
    ``dns`` stand-in fails only when used. With a real dnspython on the path, ``dns`` is dnspython."""
    import urllib3

    mount = tmp_path / "opt-python-etcd"
    for path, text in python_etcd.files().items():
        (mount / path).parent.mkdir(parents=True, exist_ok=True)
        (mount / path).write_text(text)
    deps = tmp_path / "site"
    deps.mkdir()
    for module in (urllib3, importlib.import_module("dns")) if with_dnspython else (urllib3,):
        (deps / module.__name__).symlink_to(Path(module.__file__ or "").parent)
    probe = (
        "import etcd, dns, dns.resolver\n"
        "client = etcd.Client(host='127.0.0.1', port=2379)\n"
        "print('real' if hasattr(dns, 'version') else 'stand-in', etcd.__file__)\n"
        "try:\n    dns.resolver.query('x', 'SRV')\nexcept ImportError as err:\n    print('refused:', err)\n"
        "except Exception as err:\n    print('dnspython:', type(err).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        env={"PYTHONPATH": f"{mount}:{deps}", "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert f"{mount}/etcd/__init__.py" in out.stdout
    if with_dnspython:
        assert out.stdout.startswith("real") and "dnspython:" in out.stdout, out.stdout
    else:
        assert out.stdout.startswith("stand-in") and "refused: dnspython is not installed" in out.stdout, out.stdout
    bare = subprocess.run(
        [sys.executable, "-S", "-c", "import etcd"], env={"PYTHONPATH": str(deps)}, capture_output=True
    )
    assert bare.returncode != 0, "the probe's interpreter has a python-etcd of its own"


# ---------------------------------------------------------------------------------------------
# The dev stack's example, as shipped
# ---------------------------------------------------------------------------------------------


def _elastic_on_eks(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The pytorch-elastic jobs on EKS on the training operator (a TrainJob does no rendezvous of its own)."""
    return [
        j
        for j in values[f"{NS}:jobs"]
        if j["kind"] == "pytorch-elastic" and j.get("runtime", "eks") == "eks" and "operator" not in j
    ]


def test_the_dev_elastic_example_rendezvous_on_the_stacks_etcd_with_the_aws_image() -> None:
    (job,) = _elastic_on_eks(dev_values())
    assert job.get("enabled", True) and job.get("rendezvous", "etcd") == "etcd"
    known = images.known_image(job["image"])
    assert known is not None and not known.python_etcd, "the example runs AWS's own image, as a user would"


def test_no_example_on_eks_falls_back_to_c10d() -> None:
    """Issue 37: every example had `rendezvous: c10d` because the images lack python-etcd; the stack ships it.
    (A SageMaker job may keep it: it does not apply there, and its name derives from the spec.)"""
    for path in [
        ROOT / "Pulumi.dev.yaml",
        ROOT / "Pulumi.prod.yaml",
        *sorted((ROOT / "examples").glob("*/Pulumi.*.yaml")),
    ]:
        config = yaml.safe_load(path.read_text())["config"]
        for job in config.get(f"{NS}:jobs") or []:
            # (A TrainJob has torchrun meet on node 0, which Trainer's torch runtime sets: docs/trainer.md.)
            if job.get("kind") == "pytorch-elastic" and job.get("runtime", "eks") == "eks" and "operator" not in job:
                assert job.get("rendezvous", "etcd") == "etcd", (path, job["name"])


def test_the_dev_plan_has_the_etcd_policy_and_ships_python_etcd(dev_plan) -> None:
    objects = dev_plan.kubernetes_objects()
    (cr,) = [o for o in objects if o.get("kind") == "PyTorchJob"]
    policy = cr["spec"]["elasticPolicy"]
    assert policy["rdzvBackend"] == "etcd" and policy["rdzvHost"].startswith("etcd.") and policy["rdzvPort"] == 2379
    assert re.fullmatch(r"resnet50-elastic-1-[0-9a-f]{8}", policy["rdzvId"])
    name = python_etcd.config_map_name(cr["metadata"]["name"])
    assert [o for o in objects if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == name]
    assert J.PyTorchElasticSpec.model_fields["rendezvous"].default == "etcd", "the default stays the stack's etcd"


def test_the_docs_quote_the_first_examples_rendezvous_id() -> None:
    first = next(j for j in ALL_JOBS if j["kind"] == "pytorch-elastic")
    quoted = re.search(r"`([a-z0-9-]+-\d+-[0-9a-f]{8})` for the first example below", DOC_TEXT)
    assert quoted is not None and quoted.group(1) == J.PyTorchElasticSpec.model_validate(first).rendezvous_id
