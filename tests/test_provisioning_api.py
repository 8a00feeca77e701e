"""Kueue and the ProvisioningRequest API (issue 24, item 2).

Kueue looks for the ProvisioningRequest API once, when it starts (kueue v0.19.2 cmd/kueue/main.go:
"Skipping provisioning controller setup: Provisioning Requests not supported"), unlike its job
integrations, which wait for their CRDs. So the stack installs the API whenever Kueue runs next to
the Cluster Autoscaler, creates the Kueue release after it, and puts the list of such APIs on
Kueue's pod template: a change of the list restarts Kueue. Turning
`autoscaling.provisioningRequests` on or off then changes only the autoscaler's flag and the queue
objects, never what Kueue saw at its start.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.queues import APIS_AT_START_ANNOTATION
from infra import releases
from stacks import queues
from tests.helpers import dev_values, minimal_values, render_kueue, run_stack

CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"


def _release(plan, name: str):
    (found,) = [r for r in plan.of_type(releases.RELEASE) if r.inputs["name"] == name]
    return found


def _pr_crd(plan):
    found = [r for r in plan.of_type(CRD) if r.inputs["metadata"]["name"] == queues.PROVISIONING_REQUEST_API]
    return found[0] if found else None


def _annotation(plan) -> str:
    return _release(plan, "kueue").inputs["values"]["controllerManager"]["manager"]["podAnnotations"][
        APIS_AT_START_ANNOTATION
    ]


def _with_provisioning(on: bool) -> dict[str, Any]:
    """dev with the option set; its groups without EFA, so that they have no Topology (which would
    need the check, and `false` is refused then: tests/test_topology.py)."""
    values = dev_values()
    values["gpu-training:autoscaling"] = {**values.get("gpu-training:autoscaling", {}), "provisioningRequests": on}
    values["gpu-training:gpuNodeGroups"] = [{**g, "efa": False} for g in values["gpu-training:gpuNodeGroups"]]
    return values


@pytest.fixture(scope="module")
def toggled() -> dict[bool, Any]:
    return {on: run_stack(_with_provisioning(on), stack="dev") for on in (False, True)}


def test_kueue_is_created_after_the_provisioning_request_api(toggled):
    for on, plan in toggled.items():
        crd = _pr_crd(plan)
        assert crd is not None, on
        kueue = _release(plan, "kueue")
        assert {"type": crd.type, "name": crd.name} in kueue.depends_on, on
        assert _annotation(plan) == queues.PROVISIONING_REQUEST_API


def test_toggling_provisioning_requests_changes_the_autoscaler_and_the_queues_not_what_kueue_started_with(toggled):
    off, on = toggled[False], toggled[True]
    assert _release(off, "kueue").inputs == _release(on, "kueue").inputs  # no restart needed, either way
    assert _pr_crd(off).inputs == _pr_crd(on).inputs  # the API stays when the option goes off
    flags = [
        _release(p, "cluster-autoscaler").inputs["values"]["extraArgs"].get("enable-provisioning-requests")
        for p in (off, on)
    ]
    assert flags == [None, "true"]
    checks = [[o for o in p.kubernetes_objects() if o["kind"] == "AdmissionCheck"] for p in (off, on)]
    assert [len(c) for c in checks] == [0, 1]


def test_when_the_api_comes_or_goes_kueue_restarts():
    # All groups fixed: no autoscaler, no ProvisioningRequest API; one autoscaled group brings both.
    fixed = minimal_values(
        gpuNodeGroups=[
            {
                "name": "p4d",
                "instanceType": "p4d.24xlarge",
                "minSize": 1,
                "desiredSize": 1,
                "maxSize": 1,
                "autoscale": False,
            }
        ]
    )
    scaled = minimal_values()
    before, after = run_stack(fixed), run_stack(scaled)
    assert _pr_crd(before) is None and _annotation(before) == "none"
    assert _pr_crd(after) is not None and _annotation(after) == queues.PROVISIONING_REQUEST_API


def test_the_annotation_is_on_the_pod_template_the_chart_renders(toggled):
    """The real chart (helm template) puts the value on the Deployment's pod template, where a change
    makes Kubernetes roll the controller."""
    docs = render_kueue(_release(toggled[True], "kueue").inputs["values"])
    (dep,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "kueue-controller-manager"]
    assert (
        dep["spec"]["template"]["metadata"]["annotations"][APIS_AT_START_ANNOTATION] == queues.PROVISIONING_REQUEST_API
    )
