"""The plan's Kubernetes check (infra/api_checks/kube_*.py): every object as the API server would take
it. Each rule is broken once, in a copy of an object the dev plan emits, and must fire with the
object, the field, the value, the rule and its source; dev, prod and the examples pass it (the
examples through tests/test_examples.py, which runs the plan command); the largest queues the config
allows validate, one size more is refused at load (and by the CRD, were it let through).
"""

from __future__ import annotations

import copy
import io
from collections.abc import Callable
from typing import Any

import pytest

from facts import versions
from infra import plan as plan_mod
from infra import releases
from infra.api_checks import kube_check, kube_crds, kube_objects, kube_rules
from stacks.config import ConfigError
from stacks.queues import queue_checks
from tests.helpers import ROOT, load_values, minimal_values, program_modules, run_stack, yaml_objects

# ---------------------------------------------------------------------------------------------
# The rules themselves, at their edges (apimachinery v0.36.3)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "good", "bad"),
    [
        (kube_rules.is_dns1123_label, ["a", "a-1", "x" * 63], ["", "A", "-a", "a-", "a.b", "x" * 64, "a\n"]),
        (kube_rules.is_dns1123_subdomain, ["a.b-c", "x" * 253], ["a..b", ".a", "A.b", "a_b", "x" * 254]),
        (kube_rules.is_dns1035_label, ["a1", "svc-x"], ["1a", "a.b", "x" * 64]),
        (kube_rules.is_path_segment_name, ["system:kueue", "a.b"], [".", "..", "a/b", "a%b"]),
        (
            kube_rules.is_qualified_name,
            ["a", "A_b.c", "example.com/Key", f"{'x' * 253}/{'y' * 63}"],
            ["", "/a", "a/", "a/b/c", "Example.com/a", "-a", "x" * 64, f"{'x' * 254}/a", "a b"],
        ),
        (kube_rules.is_label_value, ["", "v", "A-b_c.d", "x" * 63], ["-v", "v-", "a b", "x" * 64, "a/b"]),
        (kube_rules.is_annotation_key, ["Example.COM/Key"], ["a/b/c", "a b"]),
        (kube_rules.is_valid_port_name, ["http", "a1", "x" * 15], ["", "HTTP", "123", "a--b", "-a", "x" * 16, "a_b"]),
        (kube_rules.is_relaxed_env_var_name, ["A", "a.b-c", "1A", "with space", "$x"], ["", "A=B", "tab\t", "é"]),
        (kube_rules.is_config_map_key, ["a", "a.b_c-D", "x" * 253], ["", ".", "..", "..a", "a b", "a/b", "x" * 254]),
    ],
)
def test_each_rule_at_its_edges(rule: Callable[[str], list[str]], good: list[str], bad: list[str]):
    assert [v for v in good if rule(v)] == []
    assert [v for v in bad if not rule(v)] == []


def test_annotation_size_counts_keys_and_values_in_bytes():
    limit = kube_rules.TOTAL_ANNOTATION_SIZE_LIMIT_B
    assert kube_rules.annotations_size({"k": "v" * (limit - 1)}) == []
    assert kube_rules.annotations_size({"k": "v" * limit})
    assert kube_rules.annotations_size({"k": "é" * (limit // 2)})  # 2 bytes each


# ---------------------------------------------------------------------------------------------
# Every rule broken once in an object of the dev plan
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_objects(dev_plan_command: Any) -> list[dict[str, Any]]:
    """The objects of the dev plan as the plan command wrote them (the program's and the Helm releases')."""
    out = []
    for name in ("manifests.yaml", "releases.yaml"):
        out += yaml_objects((dev_plan_command.out / name).read_text())
    return out


def _one(objects: list[dict[str, Any]], kind: str, where: Callable[[dict[str, Any]], bool] = lambda o: True) -> dict:
    return copy.deepcopy(next(o for o in objects if o["kind"] == kind and where(o)))


def _pod_spec(o: dict[str, Any]) -> dict[str, Any]:
    return o["spec"]["template"]["spec"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A breaker that sets ``value`` at a dotted path (``[i]`` for list items)."""

    def breaker(o: dict[str, Any]) -> None:
        node: Any = o
        parts = path.replace("[", ".[").split(".")
        for part in parts[:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node.setdefault(part, {})
        last = parts[-1]
        if last.startswith("["):
            node[int(last[1:-1])] = value
        else:
            node[last] = value

    return breaker


def _deployment(o: dict[str, Any]) -> bool:
    return bool(_pod_spec(o)["containers"][0].get("ports")) and bool(_pod_spec(o).get("volumes"))


BIG = "x" * ((1 << 20) + 1)  # one byte over MaxSecretSize
# kind, which object, how to break it, the field, the rule (in its words), the source named.
BREAKS = [
    ("Namespace", None, _set("metadata.name", "Team_A"), "metadata.name", "RFC 1123 label", "generic.go"),
    ("Service", None, _set("metadata.name", "1svc"), "metadata.name", "DNS-1035 label", "ValidateServiceName"),
    ("ConfigMap", None, _set("metadata.name", "Etcd"), "metadata.name", "RFC 1123 subdomain", "NameIsDNSSubdomain"),
    ("ClusterRole", None, _set("metadata.name", "a/b"), "metadata.name", "may not contain '/'", "ValidateRBACName"),
    ("ConfigMap", None, _set("metadata.namespace", "Training"), "metadata.namespace", "label", "ValidateNamespaceName"),
    ("ConfigMap", None, _set("metadata.labels", {"bad key": "v"}), "metadata.labels[bad key]", "name part", "kube.go"),
    (
        "ConfigMap",
        None,
        _set("metadata.labels", {"k": "-v"}),
        "metadata.labels[k]",
        "a label value",
        "IsValidLabelValue",
    ),
    (
        "ConfigMap",
        None,
        _set("metadata.annotations", {"a/b/c": "v"}),
        "metadata.annotations[a/b/c]",
        "'/'",
        "objectmeta.go",
    ),
    (
        "ConfigMap",
        None,
        _set("metadata.annotations", {"k": "v" * (256 << 10)}),
        "metadata.annotations",
        "more than TotalAnnotationSizeLimitB 262144",
        "objectmeta.go",
    ),
    ("ConfigMap", None, _set("data", {"big": BIG}), "data", "at most 1048576 bytes", "ValidateConfigMap"),
    ("ConfigMap", None, _set("data", {"a b": "v"}), "data[a b]", "valid config key", "IsConfigMapKey"),
    ("Secret", None, _set("stringData", {"big": BIG}), "data", "at most 1048576 bytes", "ValidateSecret"),
    (
        "Deployment",
        _deployment,
        _set("spec.template.spec.containers[0].name", "Main"),
        "spec.template.spec.containers[0].name",
        "RFC 1123 label",
        "validateContainerCommon",
    ),
    (
        "Deployment",
        _deployment,
        _set("spec.template.spec.containers[0].ports[0].name", "metrics-endpoint"),
        "spec.template.spec.containers[0].ports[0].name",
        "must be no more than 15 characters",
        "IsValidPortName",
    ),
    (
        "Deployment",
        _deployment,
        _set("spec.template.spec.containers[0].env", [{"name": "A=B", "value": "1"}]),
        "spec.template.spec.containers[0].env[0].name",
        "other than '='",
        "IsRelaxedEnvVarName",
    ),
    (
        "Deployment",
        _deployment,
        _set("spec.template.spec.volumes[0].name", "certs_dir"),
        "spec.template.spec.volumes[0].name",
        "RFC 1123 label",
        "ValidateVolumes",
    ),
    (
        "Deployment",
        _deployment,
        _set("spec.template.spec.containers[0].resources", {"limits": {"a/b/c": "1"}}),
        "spec.template.spec.containers[0].resources.limits[a/b/c]",
        "'/'",
        "validateResourceName",
    ),
    (
        "Deployment",
        _deployment,
        _set("spec.template.spec.tolerations", [{"key": "bad key", "operator": "Exists"}]),
        "spec.template.spec.tolerations[0].key",
        "name part",
        "ValidateTolerations",
    ),
    (
        "Deployment",
        _deployment,
        _set("spec.template.spec.nodeSelector", {"k": "x" * 64}),
        "spec.template.spec.nodeSelector[k]",
        "no more than 63",
        "ValidatePodSpec",
    ),
    (
        "Deployment",
        _deployment,
        _set("spec.template.metadata.labels", {"app": "a b"}),
        "spec.template.metadata.labels[app]",
        "a label value",
        "IsValidLabelValue",
    ),
    (
        "Deployment",
        _deployment,
        _set("spec.selector.matchLabels", {"-": "v"}),
        "spec.selector.matchLabels[-]",
        "name part",
        "ValidateLabelSelector",
    ),
    (
        "Service",
        None,
        _set("spec.ports[0].name", "HTTPS"),
        "spec.ports[0].name",
        "RFC 1123 label",
        "validateServicePort",
    ),
    (
        "Service",
        lambda o: len(o["spec"]["ports"]) > 1,
        _set("spec.ports[1].name", ""),
        "spec.ports[1].name",
        "required when a Service has more than one port",
        "validateServicePort",
    ),
    (
        "Service",
        None,
        _set("spec.ports[0].targetPort", "web--tls"),
        "spec.ports[0].targetPort",
        "consecutive hyphens",
        "IsValidPortName",
    ),
    (
        "MPIJob",
        None,
        _set("spec.mpiReplicaSpecs.Worker.template.spec.containers[0].name", "Worker"),
        "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].name",
        "RFC 1123 label",
        "validateContainerCommon",
    ),
    (
        "ResourceFlavor",
        None,
        _set("spec.nodeLabels", {"gputraining/node-group": "p4d!"}),
        "spec.nodeLabels[gputraining/node-group]",
        "a label value",
        "pods' nodeSelector",
    ),
]


@pytest.mark.parametrize(
    ("kind", "which", "breaker", "field", "rule", "source"), BREAKS, ids=[f"{b[0]}:{b[3]}" for b in BREAKS]
)
def test_each_api_server_rule_fires(dev_objects, kind, which, breaker, field, rule, source):
    obj = _one(dev_objects, kind, which or (lambda o: True))
    assert kube_objects.refusals(obj) == [], "the object must be clean before it is broken"
    breaker(obj)
    found = [r for r in kube_objects.refusals(obj) if r.field == field]
    assert found, kube_objects.refusals(obj)
    text = str(found[0])
    assert text.startswith(f"{kube_objects.object_id(obj)}: {field} = ")
    assert rule in found[0].rule and source in found[0].source, text


# ---------------------------------------------------------------------------------------------
# Custom objects against their CRDs
# ---------------------------------------------------------------------------------------------


def _crd_refusals(objects: list[dict[str, Any]], obj: dict[str, Any]) -> list[str]:
    return [str(r) for r in kube_crds.CrdIndex(objects).refusals(obj)]


def test_every_custom_object_of_dev_is_checked_against_its_crd(dev_objects):
    custom = [o for o in dev_objects if kube_crds.group_of(o["apiVersion"]) not in kube_crds.BUILTIN_GROUPS]
    assert {o["kind"] for o in custom} >= {"ClusterQueue", "ResourceFlavor", "Topology", "MPIJob", "PyTorchJob"}
    index = kube_crds.CrdIndex(dev_objects)
    assert all((kube_crds.group_of(o["apiVersion"]), o["kind"]) in index.by_kind for o in custom)  # the plan's own
    assert [str(r) for o in custom for r in index.refusals(o)] == []


def test_crd_max_items_fires(dev_objects):
    cq = _one(dev_objects, "ClusterQueue")
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    flavors += [dict(copy.deepcopy(flavors[0]), name=f"extra{i}") for i in range(65 - len(flavors))]
    assert _crd_refusals(dev_objects, cq) == [
        "ClusterQueue/gpu: spec.resourceGroups[0].flavors = 65 items: maxItems 64 (maxItems, CRD "
        "clusterqueues.kueue.x-k8s.io v1beta2 openAPIV3Schema)"
    ]


def test_crd_cel_rule_fires(dev_objects):
    flavor = _one(dev_objects, "ResourceFlavor", lambda o: "topologyName" in o["spec"])
    flavor["spec"]["nodeLabels"] = {}
    [refusal] = _crd_refusals(dev_objects, flavor)
    assert refusal.startswith(f"ResourceFlavor/{flavor['metadata']['name']}: spec = ")
    assert "at least one nodeLabel is required when topology is set" in refusal
    assert "x-kubernetes-validations '!has(self.topologyName) || self.nodeLabels.size() >= 1'" in refusal


def test_crd_transition_rules_do_not_run_on_create(dev_objects):
    # Topology's `self == oldSelf` on spec.levels would fail with no oldSelf; only updates run it.
    topology = _one(dev_objects, "Topology")
    assert _crd_refusals(dev_objects, topology) == []
    topology["spec"]["levels"] = topology["spec"]["levels"] * 2  # a level twice: the create-time rule
    [refusal] = _crd_refusals(dev_objects, topology)
    assert (
        refusal.startswith(f"Topology/{topology['metadata']['name']}: spec.levels = ")
        and ": must be unique (" in refusal
    )


def test_crd_refuses_a_field_it_would_prune_and_a_wrong_type(dev_objects):
    job = _one(dev_objects, "MPIJob")
    job["spec"]["slotPerWorker"] = 8
    job["spec"]["runPolicy"]["backoffLimit"] = "3"
    refusals = _crd_refusals(dev_objects, job)
    assert any("spec.slotPerWorker = slotPerWorker: a field the schema does not declare" in r for r in refusals)
    assert any("spec.runPolicy.backoffLimit = '3': '3' is not of type 'integer'" in r for r in refusals)


def test_a_custom_object_without_its_crd_is_refused(dev_objects):
    job = _one(dev_objects, "PyTorchJob")
    objects = [o for o in dev_objects if o["kind"] != "CustomResourceDefinition"]
    [refusal] = _crd_refusals(objects, job)
    assert "no CustomResourceDefinition of the plan defines kubeflow.org/PyTorchJob" in refusal


def test_the_vendored_kueue_crds_stand_in_only_when_the_chart_is_not_rendered(dev_objects):
    rendered = kube_crds.CrdIndex(dev_objects).crd_of("kueue.x-k8s.io", "ClusterQueue")
    vendored = kube_crds.CrdIndex([]).crd_of("kueue.x-k8s.io", "ClusterQueue")
    assert rendered is not None and vendored is not None and rendered is not vendored
    assert rendered["spec"]["versions"] == vendored["spec"]["versions"]
    assert kube_crds.CrdIndex([]).crd_of("kubeflow.org", "MPIJob") is None  # only Kueue's are vendored so


def test_each_crd_version_is_compiled_once(dev_objects):
    kube_check.check(dev_objects)
    compiled = dict(kube_crds._compiled)
    kube_check.check(copy.deepcopy(dev_objects))
    assert kube_crds._compiled == compiled and len(compiled) >= 8


# ---------------------------------------------------------------------------------------------
# The plan command
# ---------------------------------------------------------------------------------------------


def test_dev_plan_checks_every_object_and_accepts_them(dev_plan_command, dev_objects):
    assert dev_plan_command.code == plan_mod.EXIT_OK, dev_plan_command.stderr
    line = f"Kubernetes API rules: {len(dev_objects)} objects checked — all accepted\n"
    assert line in dev_plan_command.stdout


def test_prod_plan_accepted():
    stdout, stderr = io.StringIO(), io.StringIO()
    assert plan_mod.run_cli("prod", None, stdout=stdout, stderr=stderr) == plan_mod.EXIT_OK, stderr.getvalue()
    assert "objects checked — all accepted" in stdout.getvalue()


def test_a_refusal_fails_the_plan_naming_the_object_field_value_rule_and_source(monkeypatch, dev_objects):
    bad = _one(dev_objects, "ConfigMap")
    bad["metadata"]["labels"] = {"app": "-bad"}
    checks = plan_mod.api_checks
    monkeypatch.setattr(plan_mod, "api_checks", lambda objects: checks([*objects, bad]))
    stdout, stderr = io.StringIO(), io.StringIO()
    assert plan_mod.run_cli("dev", None, stdout=stdout, stderr=stderr) == plan_mod.EXIT_FAILED
    who = kube_objects.object_id(bad)
    assert (
        f"error: {who}: metadata.labels[app] = '-bad': a label value: empty or alphanumerics, '-', '_' or '.', "
        f"alphanumeric at both ends (IsValidLabelValue, {kube_rules.CONTENT})\n"
    ) in stderr.getvalue()
    assert "objects checked — 1 refused (1 problem)\n" in stdout.getvalue()


def test_the_pulumi_program_does_not_load_the_checks():
    assert sorted(m for m in program_modules() if m.startswith(("infra.api_checks", "celpy", "lark"))) == []
    assert "infra.program" in program_modules()


# ---------------------------------------------------------------------------------------------
# Sizes: the config refuses what the CRDs refuse; the largest it allows validates
# ---------------------------------------------------------------------------------------------


def _max_at(crd_file: str, path: list[str], keyword: str) -> int:
    (doc,) = yaml_objects((ROOT / versions.KUEUE_CRDS / crd_file).read_text())
    node = next(v for v in doc["spec"]["versions"] if v["name"] == "v1beta2")["schema"]["openAPIV3Schema"]
    for step in path:
        node = node["items"] if step == "[]" else node["properties"][step]
    return int(node[keyword])


def test_the_config_limits_are_the_crds():
    flavors = _max_at("kueue.x-k8s.io_clusterqueues.yaml", ["spec", "resourceGroups", "[]", "flavors"], "maxItems")
    on_flavors = _max_at(
        "kueue.x-k8s.io_clusterqueues.yaml",
        ["spec", "admissionChecksStrategy", "admissionChecks", "[]", "onFlavors"],
        "maxItems",
    )
    assert queue_checks.MAX_FLAVORS_PER_RESOURCE_GROUP == flavors == on_flavors == 64
    labels = _max_at("kueue.x-k8s.io_resourceflavors.yaml", ["spec", "nodeLabels"], "maxProperties")
    tolerations = _max_at("kueue.x-k8s.io_resourceflavors.yaml", ["spec", "tolerations"], "maxItems")
    assert (queue_checks.MAX_FLAVOR_NODE_LABELS, queue_checks.MAX_FLAVOR_TOLERATIONS) == (labels, tolerations) == (8, 8)
    # Limits the config cannot reach: one resource group of the fixed covered resources, at most 4
    # network layers and the hostname in a Topology.
    assert _max_at("kueue.x-k8s.io_clusterqueues.yaml", ["spec", "resourceGroups"], "maxItems") == 16
    assert _max_at("kueue.x-k8s.io_topologies.yaml", ["spec", "levels"], "maxItems") == 16


def _groups(n: int, labels: int = 0, taints: int = 0) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = [
        {"name": f"g{i}", "instanceType": "p4d.24xlarge", "minSize": 0, "maxSize": 1} for i in range(n)
    ]
    groups[0]["labels"] = {f"team.example.com/l{j}": "x" for j in range(labels)}
    groups[0]["taints"] = [{"key": f"example.com/t{j}", "value": "x", "effect": "NoSchedule"} for j in range(taints)]
    return groups


def _largest(**over: Any) -> dict[str, Any]:
    """The largest queues the config allows: 64 groups, one with 8 node labels and 8 tolerations on
    its flavor, a team's queue beside the shared one, the ProvisioningRequest check on every flavor."""
    values = {
        "gpuNodeGroups": _groups(64, labels=6, taints=7),  # + the node-group and accelerator labels, the GPU taint
        "queues": {"enabled": True, "teams": [{"name": "vision", "quotas": [{"nodeGroup": "g1", "nodes": 1}]}]},
        "autoscaling": {"enabled": True, "provisioningRequests": True},
    }
    return minimal_values(**{**values, **over})


@pytest.fixture(scope="module")
def largest_objects() -> list[dict[str, Any]]:
    result = run_stack(_largest())
    return result.kubernetes_objects() + releases.render(result, "1.36").objects


def test_the_largest_queues_the_config_allows_validate(largest_objects):
    report = kube_check.check(largest_objects)
    assert [str(r) for r in report.refusals] == []
    queues = [o for o in largest_objects if o["kind"] == "ClusterQueue"]
    assert len(queues) == 2
    for cq in queues:
        assert len(cq["spec"]["resourceGroups"][0]["flavors"]) == 64
        assert len(cq["spec"]["admissionChecksStrategy"]["admissionChecks"][0]["onFlavors"]) == 64
    flavor = next(o for o in largest_objects if o["kind"] == "ResourceFlavor" and o["metadata"]["name"] == "g0")
    assert (len(flavor["spec"]["nodeLabels"]), len(flavor["spec"]["tolerations"])) == (8, 8)


def test_one_group_more_is_refused_at_load_and_by_the_crd(largest_objects):
    with pytest.raises(ConfigError) as err:
        load_values(_largest(gpuNodeGroups=_groups(65)))
    [problem] = err.value.problems
    assert problem.key == "gpu-training:gpuNodeGroups"
    assert "65 GPU node groups are too many with queues" in problem.message
    assert "clusterqueues.kueue.x-k8s.io, spec.resourceGroups[].flavors) takes at most 64" in problem.message
    # Let through, the ClusterQueue with a 65th flavor is what the API server refuses.
    cq = copy.deepcopy(next(o for o in largest_objects if o["kind"] == "ClusterQueue"))
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    flavors.append(dict(copy.deepcopy(flavors[-1]), name="g64"))
    refusals = [str(r) for r in kube_crds.CrdIndex(largest_objects).refusals(cq)]
    assert refusals == [
        f"ClusterQueue/{cq['metadata']['name']}: spec.resourceGroups[0].flavors = 65 items: maxItems 64 (maxItems, "
        "CRD clusterqueues.kueue.x-k8s.io v1beta2 openAPIV3Schema)"
    ]


def test_without_queues_more_groups_are_no_queue_problem():
    load_values(minimal_values(gpuNodeGroups=_groups(65), queues={"enabled": False}))


def test_a_ninth_flavor_node_label_is_refused_at_load():
    values = minimal_values(gpuNodeGroups=_groups(1, labels=7), queues={"enabled": True})
    with pytest.raises(ConfigError) as err:
        load_values(values)
    [problem] = err.value.problems
    assert problem.key == "gpu-training:gpuNodeGroups[g0].labels"
    assert "7 labels are too many with queues" in problem.message and "9 node labels" in problem.message
    assert "resourceflavors.kueue.x-k8s.io, spec.nodeLabels) takes at most 8; use at most 6" in problem.message
    values["gpu-training:gpuNodeGroups"][0]["labels"].popitem()
    load_values(values)
    load_values(minimal_values(gpuNodeGroups=_groups(1, labels=7), queues={"enabled": False}))


def test_the_kept_cel_parser_parses_as_cel_pythons_own(monkeypatch, dev_objects):
    """The parser kube_crds keeps in .cache/cel/ is cel-python's, same grammar and options: every CEL
    rule of the plan's CRDs parses to the same tree with both."""
    from celpy.celparser import CELParser

    kube_crds._environment()
    kept = CELParser.CEL_PARSER
    assert kept is not None
    monkeypatch.setattr(CELParser, "CEL_PARSER", None)
    own = CELParser()  # builds cel-python's own
    rules = {
        r.rule
        for crd in dev_objects
        if crd["kind"] == "CustomResourceDefinition"
        for v in crd["spec"]["versions"]
        for r in kube_crds.cel_rules(v["schema"]["openAPIV3Schema"])
    }
    assert len(rules) >= 10
    for rule in rules:
        assert kept.parse(rule) == own.parse(rule), rule


def test_without_helm_the_vendored_kueue_crds_check_the_queues(monkeypatch, tmp_path):
    """No helm (the releases not rendered): the queue objects are checked against Kueue's vendored CRDs."""
    monkeypatch.setattr(releases, "HELM", tmp_path / "no-helm")
    stdout, stderr = io.StringIO(), io.StringIO()
    assert plan_mod.run_cli("dev", None, stdout=stdout, stderr=stderr) == plan_mod.EXIT_OK, stderr.getvalue()
    assert "Helm release(s) not rendered" in stdout.getvalue() and "objects checked — all accepted" in stdout.getvalue()
