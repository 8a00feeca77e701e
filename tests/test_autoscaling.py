"""GPU capacity on demand: the Cluster Autoscaler grows the GPU groups from zero for waiting jobs.

The scale-from-zero test builds, for every GPU group, the node the autoscaler imagines for a group at
zero (from the ASG tags the plan registers, as cluster-autoscaler 1.36's buildNodeFromTemplate does:
labels and taints from `k8s.io/cluster-autoscaler/node-template/...` tags, extended resources from
the resources tags, CPU, memory and GPUs from the instance type, and the generic zone and
instance-type labels) and checks that every pod of every job fits it: node selector, tolerations,
requests.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.node_group import NODE_TEMPLATE
from facts import catalog, versions
from infra.invariants import tolerates
from stacks.config import ConfigError
from tests.helpers import NS, dev_values, minimal_values, run_stack
from tests.scheduling import NODE_GROUP

TAG = "aws:autoscaling/tag:Tag"
TEMPLATE = NODE_TEMPLATE + "/"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"


@pytest.fixture(scope="module")
def plan(dev_plan):
    return dev_plan  # (shared: read only)


def template_nodes(plan) -> dict[str, dict[str, Any]]:
    """Node group name (config) -> the node the autoscaler builds for it at zero."""
    groups = {r.inputs["labels"]["gputraining/node-group"]: r for r in plan.of_type(NODE_GROUP)}
    az = plan.outputs["gpuAvailabilityZone"]
    nodes = {}
    for name, ng in groups.items():
        component = ng.parent["name"]
        tags = {
            t.inputs["tag"]["key"]: t.inputs["tag"]["value"] for t in plan.of_type(TAG) if t.parent["name"] == component
        }
        if not tags:
            continue
        it = catalog.get(ng.inputs["instanceTypes"][0])
        labels = {k[len(TEMPLATE + "label/") :]: v for k, v in tags.items() if k.startswith(TEMPLATE + "label/")}
        labels.update(
            {
                "topology.kubernetes.io/zone": az,
                "node.kubernetes.io/instance-type": it.name,
                "kubernetes.io/os": "linux",
            }
        )
        taints = []
        for k, v in tags.items():
            if k.startswith(TEMPLATE + "taint/"):
                value, effect = v.rsplit(":", 1)
                taints.append({"key": k[len(TEMPLATE + "taint/") :], "value": value, "effect": effect})
        resources = {"cpu": it.vcpus * 1000, "memory": it.memory_mib, "nvidia.com/gpu": it.gpus}
        for k, v in tags.items():
            if k.startswith(TEMPLATE + "resources/"):
                resources[k[len(TEMPLATE + "resources/") :]] = _amount(k.rsplit("/", 1)[-1], v)
        nodes[name] = {"labels": labels, "taints": taints, "resources": resources, "tags": tags}
    return nodes


def _amount(resource: str, value: str) -> int:
    """Quantities as integers: cpu in millicores, memory and huge pages in MiB, counts as counts."""
    value = str(value)
    if value.endswith("Mi"):
        return int(value[:-2])
    if value.endswith("Gi"):
        return int(value[:-2]) * 1024
    if value.endswith("m"):
        return int(value[:-1])
    return int(float(value) * (1000 if resource == "cpu" else 1))


def fits(pod: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """Why ``pod`` does not fit ``node`` (empty: it fits)."""
    why = [f"nodeSelector {k}={v}" for k, v in (pod.get("nodeSelector") or {}).items() if node["labels"].get(k) != v]
    why += [
        f"taint {t['key']}"
        for t in node["taints"]
        if t["effect"] in ("NoSchedule", "NoExecute") and not tolerates(pod.get("tolerations") or [], t)
    ]
    want: dict[str, int] = {}
    for c in pod["containers"]:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            want[k] = want.get(k, 0) + _amount(k, v)
    why += [
        f"{k}: wants {v}, template has {node['resources'].get(k, 0)}"
        for k, v in want.items()
        if v > node["resources"].get(k, 0)
    ]
    return why


def gpu_pods(plan) -> list[tuple[str, str, dict[str, Any]]]:
    """(job, group, pod spec) of every pod that runs on a GPU group."""
    out = []
    for obj in plan.kubernetes_objects():
        spec = obj.get("spec") or {}
        for key in ("mpiReplicaSpecs", "pytorchReplicaSpecs", "paddleReplicaSpecs"):
            for replica in (spec.get(key) or {}).values():
                pod = replica["template"]["spec"]
                out.append((obj["metadata"]["name"], pod["nodeSelector"]["gputraining/node-group"], pod))
    return out


def test_every_job_pod_fits_its_groups_scale_from_zero_template(plan):
    nodes = template_nodes(plan)
    pods = gpu_pods(plan)
    assert {g for _, g, _ in pods} <= set(nodes) and len(pods) >= 3
    for job, group, pod in pods:
        assert fits(pod, nodes[group]) == [], (job, group)


def test_the_check_fails_without_the_efa_and_huge_page_tags(plan):
    nodes = template_nodes(plan)
    node = nodes["p4d"]
    for resource in ("vpc.amazonaws.com/efa", "hugepages-2Mi"):
        broken = {**node, "resources": {k: v for k, v in node["resources"].items() if k != resource}}
        assert any(resource in w for _, g, pod in gpu_pods(plan) if g == "p4d" for w in fits(pod, broken)), resource
    untainted = {**node, "taints": [*node["taints"], {"key": "team", "value": "x", "effect": "NoSchedule"}]}
    assert any("taint team" in w for _, g, pod in gpu_pods(plan) if g == "p4d" for w in fits(pod, untainted))


def test_template_tags_carry_the_accelerator_label_and_the_groups_facts(plan):
    node = template_nodes(plan)["p4d"]
    assert (
        node["labels"]["k8s.amazonaws.com/accelerator"]
        == "nvidia-tesla-a100"
        == catalog.get("p4d.24xlarge").accelerator
    )
    assert node["tags"]["gputraining/autoscale"] == "true"
    assert node["resources"]["vpc.amazonaws.com/efa"] == catalog.get("p4d.24xlarge").efa_interfaces
    assert node["resources"]["hugepages-2Mi"] == 5128 * 2
    # The real nodes carry the same label (the autoscaler waits for their device plugin).
    (ng,) = [r for r in plan.of_type(NODE_GROUP) if r.name == "gpu-p4d-mng"]
    assert ng.inputs["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-tesla-a100"
    (p3dn,) = [r for r in plan.of_type(NODE_GROUP) if r.name == "gpu-p3dn-mng"]
    assert p3dn.inputs["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-tesla-v100"
    assert template_nodes(plan)["p3dn"]["labels"]["k8s.amazonaws.com/accelerator"] == "nvidia-tesla-v100"


def test_pulumi_leaves_the_desired_size_of_autoscaled_groups_alone(plan):
    for ng in plan.of_type(NODE_GROUP):
        assert ng.options.get("ignoreChanges") == ["scalingConfig.desiredSize"], ng.name
    # The system group is not autoscaled: no discovery tag on it, and Pulumi sizes it.
    assert not [t for t in plan.of_type(TAG) if t.parent["name"] == "system"]


def test_the_autoscaler_runs_on_system_nodes_with_the_clusters_image_and_discovers_only_tagged_groups(plan):
    (release,) = [r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "cluster-autoscaler"]
    values = release.inputs["values"]
    assert release.inputs["chart"] == versions.CLUSTER_AUTOSCALER_CHART.file
    assert values["image"]["tag"] == versions.CLUSTER_AUTOSCALER_IMAGE_TAG["1.36"] == "v1.36.1"
    assert values["autoDiscovery"]["tags"] == ["gputraining/autoscale", "k8s.io/cluster-autoscaler/gpu-training-dev"]
    assert values["nodeSelector"] == {"gputraining/node-group": "system"}
    assert values["extraArgs"]["scale-down-unneeded-time"] == "10m"


def test_the_autoscaler_role_has_the_least_privilege_its_docs_list(plan):
    (policy,) = [r for r in plan.of_type(ROLE_POLICY) if r.parent["name"] == "cluster-autoscaler"]
    doc = json.loads(policy.inputs["policy"])
    read, scale = doc["Statement"]
    assert "autoscaling:SetDesiredCapacity" not in read["Action"] and "eks:DescribeNodegroup" in read["Action"]
    assert scale["Action"] == ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]
    assert scale["Condition"] == {
        "StringEquals": {
            "aws:ResourceTag/k8s.io/cluster-autoscaler/gpu-training-dev": "owned",
            "aws:ResourceTag/gputraining/autoscale": "true",
        }
    }
    assert "FullAccess" not in json.dumps(doc)
    (assoc,) = [
        r
        for r in plan.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
        if r.parent["name"] == "cluster-autoscaler"
    ]
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == ("kube-system", "cluster-autoscaler")


def test_autoscale_off_per_group_and_for_the_stack():
    values = dev_values()
    values[f"{NS}:gpuNodeGroups"][1]["autoscale"] = False
    plan = run_stack(values, stack="dev")
    assert set(template_nodes(plan)) == {"p4d"}
    (p3dn,) = [r for r in plan.of_type(NODE_GROUP) if r.name == "gpu-p3dn-mng"]
    assert "ignoreChanges" not in p3dn.options
    values = minimal_values(autoscaling={"enabled": False})
    plan = run_stack(values)
    assert not plan.of_type(TAG) and not plan.of_type("gputraining:components:ClusterAutoscaler")


@pytest.mark.parametrize("key,value", [("scaleDownUnneededTime", "ten minutes"), ("scaleDownDelayAfterAdd", "5")])
def test_durations_are_checked(key, value):
    with pytest.raises(ConfigError) as info:
        run_stack(minimal_values(autoscaling={key: value}))
    assert [p.key for p in info.value.problems] == [f"{NS}:autoscaling.{key}"]


# ----------------------------------------------------------------------------------------------
# Who the autoscaler may scale: its policy evaluated against each group's ASG tags
# ----------------------------------------------------------------------------------------------


# The tags EKS itself puts on the Auto Scaling group of every managed node group (EKS user guide,
# "Managed node groups": "Amazon EKS tags managed node group resources so that they are configured
# to use the Kubernetes Cluster Autoscaler"), the system group's included.
def eks_asg_tags(cluster: str, nodegroup: str) -> dict[str, str]:
    return {
        "eks:cluster-name": cluster,
        "eks:nodegroup-name": nodegroup,
        "k8s.io/cluster-autoscaler/enabled": "true",
        f"k8s.io/cluster-autoscaler/{cluster}": "owned",
    }


def allowed(statements: list[dict[str, Any]], action: str, asg_tags: dict[str, str]) -> bool:
    """A small IAM evaluator for one identity policy: is ``action`` on an Auto Scaling group with
    these tags allowed? Explicit Deny wins, then any matching Allow; no match is an implicit deny.
    Knows the condition operators the stack uses (StringEquals, StringLike) and refuses others."""
    import fnmatch

    def matches(stmt: dict[str, Any]) -> bool:
        actions = stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]
        if not any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in actions):
            return False
        resources = stmt["Resource"] if isinstance(stmt["Resource"], list) else [stmt["Resource"]]
        if "*" not in resources:
            return False  # every statement of this policy is on "*"; an ARN would need the group's ARN
        for operator, keys in (stmt.get("Condition") or {}).items():
            if operator not in ("StringEquals", "StringLike"):
                raise AssertionError(f"the evaluator does not know {operator}")
            for key, want in keys.items():
                prefix = "aws:resourcetag/"
                assert key.lower().startswith(prefix), key
                have = asg_tags.get(key[len(prefix) :])  # tag keys are case-sensitive
                wants = want if isinstance(want, list) else [want]
                if have is None:
                    return False
                if operator == "StringEquals" and have not in wants:
                    return False
                if operator == "StringLike" and not any(fnmatch.fnmatchcase(have, w) for w in wants):
                    return False
        return True

    hits = [s for s in statements if matches(s)]
    return not any(s["Effect"] == "Deny" for s in hits) and any(s["Effect"] == "Allow" for s in hits)


def asg_tags_by_group(plan, cluster: str) -> dict[str, dict[str, str]]:
    """Config group name -> the tags its ASG ends up with: EKS's own plus the ones the plan adds."""
    out = {}
    # The system group is pulumi-eks' ManagedNodeGroup, the GPU groups EKS's NodeGroup resource.
    for ng in plan.of_type(NODE_GROUP) + plan.of_type("eks:index:ManagedNodeGroup"):
        group = ng.inputs["labels"]["gputraining/node-group"]
        tags = eks_asg_tags(cluster, ng.inputs.get("nodeGroupName") or ng.name)
        tags.update(
            {
                t.inputs["tag"]["key"]: t.inputs["tag"]["value"]
                for t in plan.of_type(TAG)
                if t.parent["name"] == ng.parent["name"]
            }
        )
        out[group] = tags
    return out


def autoscaler_statements(plan) -> list[dict[str, Any]]:
    (policy,) = [r for r in plan.of_type(ROLE_POLICY) if r.parent["name"] == "cluster-autoscaler"]
    return json.loads(policy.inputs["policy"])["Statement"]


WRITE_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")


def test_the_autoscaler_may_resize_only_the_autoscaled_gpu_groups_not_the_system_group(plan):
    cluster = plan.outputs["clusterName"]
    statements = autoscaler_statements(plan)
    tags = asg_tags_by_group(plan, cluster)
    assert set(tags) == {"system", "p4d", "p3dn"}
    for action in WRITE_ACTIONS:
        assert not allowed(statements, action, tags["system"]), action
        assert allowed(statements, action, tags["p4d"]), action
        assert allowed(statements, action, tags["p3dn"]), action
        # Another cluster's autoscaled group (same project tag, other cluster tag): no.
        other = {k.replace(cluster, "other-cluster"): v for k, v in tags["p4d"].items()}
        assert not allowed(statements, action, other), action
    # Reading stays open: the autoscaler lists every group to find its own.
    assert allowed(statements, "autoscaling:DescribeAutoScalingGroups", tags["system"])
    assert allowed(statements, "eks:DescribeNodegroup", {})
    # The evaluator is not vacuous: with the cluster condition alone (the earlier policy), the
    # system group was in reach.
    cluster_only = [
        {**s, "Condition": {"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster}": "owned"}}}
        if "Condition" in s
        else s
        for s in statements
    ]
    assert allowed(cluster_only, "autoscaling:SetDesiredCapacity", tags["system"])


def test_a_group_with_autoscale_off_is_out_of_the_autoscalers_reach():
    values = dev_values()
    values[f"{NS}:gpuNodeGroups"][1]["autoscale"] = False  # p3dn
    plan = run_stack(values, stack="dev")
    tags = asg_tags_by_group(plan, plan.outputs["clusterName"])
    statements = autoscaler_statements(plan)
    assert allowed(statements, "autoscaling:SetDesiredCapacity", tags["p4d"])
    assert not allowed(statements, "autoscaling:SetDesiredCapacity", tags["p3dn"])
    assert not allowed(statements, "autoscaling:TerminateInstanceInAutoScalingGroup", tags["p3dn"])
