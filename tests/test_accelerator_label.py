"""The `k8s.amazonaws.com/accelerator` values of the catalog are the names the Cluster Autoscaler's
AWS provider knows the GPUs by, and every GPU node group carries its type's value."""

from __future__ import annotations

import pytest

from facts import catalog
from facts.kube import ACCELERATOR_LABEL
from tests.helpers import minimal_values, run_stack

# The AWS provider's GPU label and its known GPU types, as in kubernetes/autoscaler at tag
# cluster-autoscaler-1.36.1 (commit 35e8a280425c76a4040f57ae0fa232a952c02024),
# cluster-autoscaler/cloudprovider/aws/aws_cloud_provider.go (git blob 5648b5f15207d9117dc43a03c0b1eade9080543a):
# `GPULabel = "k8s.amazonaws.com/accelerator"` and `availableGPUTypes`. The autoscaler reads the
# label's presence for GPU readiness (processors/customresources/gpu_processor.go) and reports a
# value outside this list as "not-listed" in its metrics (utils/gpu/gpu.go, validateGpuType).
UPSTREAM_GPU_LABEL = "k8s.amazonaws.com/accelerator"
UPSTREAM_AVAILABLE_GPU_TYPES = frozenset(
    {
        "nvidia-tesla-k80",
        "nvidia-tesla-p100",
        "nvidia-tesla-v100",
        "nvidia-tesla-t4",
        "nvidia-tesla-a100",
        "nvidia-a10g",
        "nvidia-l4",
        "nvidia-l40s",
    }
)


def upstream_name(model: str) -> str | None:
    """The upstream entry for a GPU model ("A100" -> "nvidia-tesla-a100"), if the list has one."""
    found = [
        t for t in UPSTREAM_AVAILABLE_GPU_TYPES if t.removeprefix("nvidia-").removeprefix("tesla-") == model.lower()
    ]
    assert len(found) <= 1
    return found[0] if found else None


def test_the_label_is_the_autoscalers_gpu_label():
    assert ACCELERATOR_LABEL == UPSTREAM_GPU_LABEL


@pytest.mark.parametrize("name", catalog.GPU_TYPES)
def test_each_gpu_type_carries_the_name_the_autoscaler_knows_its_gpu_by(name):
    it = catalog.BUILTIN[name]
    assert it.gpu_model and it.accelerator, name
    known = upstream_name(it.gpu_model)
    if known is not None:
        assert it.accelerator == known
    else:
        # A GPU the autoscaler does not list (H100, H200): the list's newer naming, and not
        # mistaken for a listed one.
        assert it.accelerator == f"nvidia-{it.gpu_model.lower()}"
        assert it.accelerator not in UPSTREAM_AVAILABLE_GPU_TYPES


def test_the_catalogs_v100_and_a100_types_use_the_listed_names():
    listed = {
        n: catalog.BUILTIN[n].accelerator
        for n in catalog.GPU_TYPES
        if catalog.BUILTIN[n].accelerator in UPSTREAM_AVAILABLE_GPU_TYPES
    }
    assert set(listed) == {"p3.2xlarge", "p3.8xlarge", "p3.16xlarge", "p3dn.24xlarge", "p4d.24xlarge", "p4de.24xlarge"}
    assert catalog.BUILTIN["p4d.24xlarge"].accelerator == "nvidia-tesla-a100"
    assert catalog.BUILTIN["p3dn.24xlarge"].accelerator == "nvidia-tesla-v100"
    assert {t.accelerator for t in catalog.BUILTIN.values() if not t.is_gpu} == {None}
    # The ml. types share the EC2 rows' facts.
    assert catalog.SAGEMAKER["ml.p4d.24xlarge"].accelerator == "nvidia-tesla-a100"


def test_every_gpu_group_and_its_scale_from_zero_template_carry_the_catalog_value():
    groups = [
        {"name": n.split(".")[0], "instanceType": n, "maxSize": 1}
        for n in ("p3dn.24xlarge", "p4d.24xlarge", "p5.48xlarge")
    ]
    plan = run_stack(minimal_values(gpuNodeGroups=groups))
    seen = {}
    for ng in plan.of_type("aws:eks/nodeGroup:NodeGroup"):
        value = ng.inputs["labels"][ACCELERATOR_LABEL]
        assert value == catalog.BUILTIN[ng.inputs["instanceTypes"][0]].accelerator
        seen[ng.inputs["labels"]["gputraining/node-group"]] = value
    assert seen == {"p3dn": "nvidia-tesla-v100", "p4d": "nvidia-tesla-a100", "p5": "nvidia-h100"}
    tag_key = f"k8s.io/cluster-autoscaler/node-template/label/{ACCELERATOR_LABEL}"
    tags = {
        t.parent["name"]: t.inputs["tag"]["value"]
        for t in plan.of_type("aws:autoscaling/tag:Tag")
        if t.inputs["tag"]["key"] == tag_key
    }
    assert tags == {"gpu-p3dn": "nvidia-tesla-v100", "gpu-p4d": "nvidia-tesla-a100", "gpu-p5": "nvidia-h100"}
