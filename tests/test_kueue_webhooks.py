"""Kueue's webhooks, rendered from the vendored chart with the stack's values by the real helm (as
the offline plan renders it), see exactly the namespaces the stack queues jobs in, and nothing of
the system namespaces or the stack's own services.

Kueue's chart puts a webhook in front of every job kind it knows, most with ``failurePolicy: Fail``:
while Kueue is down, or before its certificate is in place, whatever such a webhook sees cannot be
created. Its default namespace selector leaves out only kube-system and Kueue's namespace, and the
Pod, Deployment and StatefulSet integrations are on by default. The test evaluates every webhook's
namespace selector and rules against the stack's namespaces and every object the stack creates (its
manifests, every object of its Helm releases, the pods of its workloads, and the EKS add-ons'
workloads in their namespaces), and shows what the chart's defaults would do instead.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from facts import versions
from facts.operators import KINDS, REPLICA_SPECS
from infra import invariants, releases
from stacks import queues
from stacks.config import load
from tests.helpers import HELM, dev_values, render_kueue, run_stack, team_values

pytestmark = pytest.mark.skipif(
    not HELM.exists(), reason="no helm: run `.venv/bin/python scripts/k8s_tools.py` (scripts/test.sh does)"
)

NAME_LABEL = "kubernetes.io/metadata.name"
SYSTEM = ("kube-system", "kube-public", "kube-node-lease", "default")
# The namespaces of the stack's services: the operators, CloudWatch (the observability add-on), Kueue.
SERVICES = ("mpi-operator", "kubeflow", "amazon-cloudwatch", queues.KUEUE_NAMESPACE)
# What the EKS managed add-ons run (not in the plan: EKS installs them), by namespace.
ADDONS = {
    "kube-system": [
        ("apps/v1", "DaemonSet", n)
        for n in (
            "aws-node",
            "kube-proxy",
            "eks-pod-identity-agent",
            "efs-csi-node",
            "fsx-csi-node",
            "eks-node-monitoring-agent",
            "dcgm-server",
        )
    ]
    + [("apps/v1", "Deployment", n) for n in ("coredns", "efs-csi-controller", "fsx-csi-controller")],
    "amazon-cloudwatch": [("apps/v1", "DaemonSet", n) for n in ("cloudwatch-agent", "fluent-bit", "dcgm-exporter")]
    + [("apps/v1", "Deployment", "amazon-cloudwatch-observability-controller-manager")],
}
# Kinds whose objects make pods in their namespace.
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", *REPLICA_SPECS)
# The webhook paths of Kueue's integrations (the chart names each after its kind).
INTEGRATION_OF = {
    **{k.plural: k.integration for k in KINDS},  # the operators' kinds (facts/operators.py)
    "jobs": "batch/job",
    "pods": "pod",
    "deployments": "deployment",
    "statefulsets": "statefulset",
}


def resource_of(api_version: str, kind: str) -> tuple[str, str]:
    group = api_version.split("/")[0] if "/" in api_version else ""
    plural = {"Policy": "policies"}.get(kind, kind.lower() + ("es" if kind.endswith("s") else "s"))
    return group, plural


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A label selector against labels (no selector: everything)."""
    return selector is None or invariants.selects(selector, labels)


def webhooks(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for o in objects:
        if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            out += [{**w, "configuration": o["kind"]} for w in o["webhooks"]]
    return out


def intercepts(hook: dict[str, Any], namespace: str | None, group: str, resource: str) -> bool:
    """Whether ``hook`` is called for a create of ``resource`` in ``namespace`` (None: cluster-scoped)."""
    if namespace is not None and not selects(hook.get("namespaceSelector"), {NAME_LABEL: namespace}):
        return False
    for rule in hook.get("rules", []):
        if not ({"CREATE", "*"} & set(rule.get("operations", []))):
            continue
        if (group in rule["apiGroups"] or "*" in rule["apiGroups"]) and (
            resource in rule["resources"] or "*" in rule["resources"]
        ):
            return True
    return False


@pytest.fixture(scope="module", params=["dev", "teams"])
def stack(request) -> dict[str, Any]:
    """A plan, its rendered releases, and every namespaced object the stack creates with its pods."""
    values, name = (dev_values(), "dev") if request.param == "dev" else (team_values(), "test")
    plan = (
        request.getfixturevalue("dev_plan") if name == "dev" else run_stack(values, stack=name)
    )  # (dev: shared, read only)
    queue_plan = queues.plan_for(load(values, "gpu-training", name))
    rendered = releases.render(plan, versions.KUBERNETES_DEFAULT)
    assert rendered.note is None
    (kueue,) = [r for r in plan.of_type(releases.RELEASE) if r.inputs["name"] == "kueue"]
    release_ns = {r.inputs["name"]: r.inputs.get("namespace") or "default" for r in plan.of_type(releases.RELEASE)}
    objects: list[tuple[str | None, str, str, str]] = []  # (namespace, apiVersion, kind, name)
    it = iter(rendered.objects)
    for name, names in rendered.per_release.items():
        for _ in names:
            o = next(it)
            cluster_scoped = (
                o["kind"]
                in ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "APIService", "PriorityClass")
                or "Webhook" in o["kind"]
            )
            ns = None if cluster_scoped else o["metadata"].get("namespace") or release_ns[name]
            objects.append((ns, o["apiVersion"], o["kind"], o["metadata"]["name"]))
    for o in plan.kubernetes_objects():
        objects.append((o["metadata"].get("namespace"), o["apiVersion"], o["kind"], o["metadata"]["name"]))
    for ns, items in ADDONS.items():
        objects += [(ns, api, kind, name) for api, kind, name in items]
    objects += [
        (ns, "v1", "Pod", f"{name}-pod") for ns, _, kind, name in list(objects) if kind in WORKLOADS and ns is not None
    ]
    config = yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    return {"plan": plan, "rendered": rendered.objects, "objects": objects, "config": config, "queues": queue_plan}


def namespaces_seen(hooks: list[dict[str, Any]], universe: list[str]) -> dict[str, set[str]]:
    return {
        h["name"]: {ns for ns in universe if selects(h.get("namespaceSelector"), {NAME_LABEL: ns})}
        for h in hooks
        if "namespaceSelector" in h
    }


def test_every_job_webhook_sees_exactly_the_job_namespaces(stack):
    managed = set(stack["queues"].managed_namespaces)
    universe = [*SYSTEM, *SERVICES, *sorted(managed), "someone-elses"]
    hooks = webhooks(stack["rendered"])
    assert len(hooks) > 40
    seen = namespaces_seen(hooks, universe)
    assert seen and all(v == managed for v in seen.values()), {k: v for k, v in seen.items() if v != managed}
    # The webhooks without a namespace selector are Kueue's own kinds (queues, flavors, workloads).
    for h in hooks:
        if "namespaceSelector" not in h:
            assert {g for r in h["rules"] for g in r["apiGroups"]} == {"kueue.x-k8s.io"}, h["name"]
    assert stack["config"]["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"] == list(
        stack["queues"].managed_namespaces
    )


def test_the_stacks_own_services_are_untouched(stack):
    """Nothing in a system or service namespace meets a webhook at all. In the job namespaces the
    stack's own services (etcd, TensorBoard, data-stage and their pods, claims, ...) meet only
    webhooks that cannot refuse them (``failurePolicy: Ignore``) of frameworks Kueue runs as no-ops
    there (not integrations), or Kueue's Job webhook, which leaves a Job naming no queue alone (the
    training namespace has no `default` LocalQueue for it to be put in)."""
    hooks = webhooks(stack["rendered"])
    integrations = set(stack["config"]["integrations"]["frameworks"])
    managed = set(stack["queues"].managed_namespaces)
    queued = {*REPLICA_SPECS, "TrainJob"}  # (a TrainJob is queued too; its pod templates are its runtime's)
    checked = set()
    for ns, api, kind, name in stack["objects"]:
        if ns is None:
            continue
        group, resource = resource_of(api, kind)
        meeting = [h for h in hooks if intercepts(h, ns, group, resource)]
        if ns not in managed:
            assert not meeting, f"{ns}/{kind}/{name} meets {[h['name'] for h in meeting]}"
            continue
        checked.add(kind)
        for h in meeting:
            if kind in queued:
                assert INTEGRATION_OF[resource] in integrations and h["failurePolicy"] == "Fail", (
                    kind,
                    name,
                    h["name"],
                )
            elif resource == "jobs":
                assert h["failurePolicy"] == "Fail"  # the chart's Job webhooks, whatever the integrations
            else:
                assert h["failurePolicy"] == "Ignore", (ns, kind, name, h["name"])
                assert INTEGRATION_OF.get(resource) not in integrations, (kind, h["name"])
    assert {"StatefulSet", "Pod", "MPIJob", "PyTorchJob", "PersistentVolumeClaim"} <= checked
    local = [q for q in stack["queues"].local_queues if q.name == queues.TEAM_LOCAL_QUEUE]
    assert all(q.namespace != stack["plan"].outputs["trainingNamespace"] for q in local)
    assert not {"pod", "deployment", "statefulset"} & integrations


def test_the_teams_case_covers_tensorboard_and_data_stage():
    plan = run_stack(team_values())
    kinds = {(o["kind"], o["metadata"]["name"]) for o in plan.kubernetes_objects()}
    assert {("Deployment", "board"), ("Job", "stage"), ("StatefulSet", "etcd")} <= kinds


def test_the_charts_defaults_would_reach_the_system_and_service_namespaces():
    """Without the stack's values the job webhooks (Fail) reach every namespace but kube-system and
    Kueue's own, and the Pod, Deployment and StatefulSet webhooks are Fail too."""
    hooks = webhooks(render_kueue(None))
    universe = [*SYSTEM, *SERVICES, "training"]
    seen = namespaces_seen(hooks, universe)
    assert seen["vmpijob.kb.io"] == set(universe) - {"kube-system", queues.KUEUE_NAMESPACE}
    by_name = {h["name"]: h for h in hooks}
    for name in ("mpod.kb.io", "mdeployment.kb.io", "mstatefulset.kb.io"):
        assert by_name[name]["failurePolicy"] == "Fail"


def test_the_package_names_the_promoted_images():
    """The vendored package has the release packaging's overrides: the promoted registry, the
    release tag and IfNotPresent (the chart in git names a staging image, pullPolicy Always)."""
    objs = render_kueue({"enableKueueViz": True})
    images = {}
    for o in objs:
        if o["kind"] == "Deployment":
            for c in o["spec"]["template"]["spec"]["containers"]:
                images[c["image"]] = c.get("imagePullPolicy")
    assert images == {
        f"{versions.KUEUE_IMAGE_REPOSITORY}:{versions.KUEUE_VERSION}": "IfNotPresent",
        f"registry.k8s.io/kueue/kueueviz-backend:{versions.KUEUE_VERSION}": "IfNotPresent",
        f"registry.k8s.io/kueue/kueueviz-frontend:{versions.KUEUE_VERSION}": "IfNotPresent",
    }


def test_kueue_runs_on_the_system_nodes_with_the_stacks_config(stack):
    (dep,) = [
        o
        for o in stack["rendered"]
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "kueue-controller-manager"
    ]
    spec = dep["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gputraining/node-group": "system"}
    (cm,) = [
        o for o in stack["rendered"] if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kueue-manager-config"
    ]
    assert (
        yaml.safe_load(cm["data"]["controller_manager_config.yaml"])["managedJobsNamespaceSelector"]
        == stack["config"]["managedJobsNamespaceSelector"]
    )
