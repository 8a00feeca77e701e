"""The admission policy on team namespaces (components/team_policy.py), as the stack emits it.

Its CEL is run with cel-python (a CEL implementation; the API server's is cel-go) the way the API
server runs a ValidatingAdmissionPolicy: the match conditions first (all true, or the policy does not
apply), then the variables in their order (as ``variables.<name>``), then every validation. A
validation that is false refuses with its messageExpression (its message if that has none); one that
errors refuses too (``failurePolicy: Fail``), so an error on a pod that must be admitted fails here.

- every pod template the stack emits is admitted, as a Pod and inside its job: the team jobs of
  every GPU kind, every documented example of every kind (docs/jobs.md), and the pods the training
  operator makes of a PyTorchJob (its init container);
- pods that must be refused are, each by exactly the rule that names the field, in containers, init
  containers and ephemeral containers, and inside every job kind; the values baseline allows pass;
- an update that leaves the spec alone is not checked; one that adds an ephemeral container is;
- the binding selects every team namespace the stack creates and no other, and the team namespaces
  and the jobs come after it;
- both objects are valid Kubernetes objects (kubernetes-validate, strict) and every expression is
  plain CEL as Kubernetes compiles it: it parses, names only the variables Kubernetes declares (and
  the policy's own, declared before use), calls only standard functions, and its list literals are
  homogeneous (Kubernetes' CEL environment requires it).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from types import SimpleNamespace
from typing import Any, cast

import celpy
import kubernetes_validate
import pytest
from celpy import celtypes
from celpy.celparser import CELParser
from lark import Token, Tree

from components import team_policy as tp
from facts import versions
from facts.operators import KINDS
from infra.api_checks import kube_crds
from infra.invariants import selects
from stacks import queues
from stacks.config.cross_checks import RESERVED_NAMESPACES
from stacks.queues.admission import REPLICA_SPECS
from tests.helpers import ALL_JOBS, TEAM_JOBS, TEAMS, run_stack, team_values, with_doc_jobs

POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
NAMESPACE = "kubernetes:core/v1:Namespace"
TEAM_NS = "vision"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1.0"
# Team jobs of every GPU kind next to test_queues' (nccl-test, pytorch-elastic, data-stage,
# tensorboard): an MPI job with volumes, a PaddleJob, and an NCCL test without EFA.
MORE_TEAM_JOBS = [
    {
        "name": "vision-mpi",
        "kind": "mpi",
        "nodeGroup": "p4d",
        "nodes": 2,
        "team": "vision",
        "image": IMAGE,
        "command": ["python3", "train.py"],
        "volumes": [{"name": "fsx", "mountPath": "/fsx", "readOnly": True}, {"name": "efs", "mountPath": "/efs"}],
    },
    {
        "name": "nlp-paddle",
        "kind": "paddle",
        "nodeGroup": "p4d",
        "nodes": 1,
        "team": "nlp",
        "image": IMAGE,
        "command": ["python", "train.py"],
    },
    {"name": "nlp-sockets", "kind": "nccl-test", "nodeGroup": "p4d", "nodes": 1, "team": "nlp", "efa": False},
]
# What the training operator (v1.9) adds to a PyTorchJob's worker pods: its default init container
# (pkg/controller.v1/pytorch/initcontainer.go), which waits for the master's DNS name.
INIT_PYTORCH = {
    "name": "init-pytorch",
    "image": "alpine:3.10",
    "imagePullPolicy": "IfNotPresent",
    "resources": {"limits": {"cpu": "100m", "memory": "20Mi"}, "requests": {"cpu": "50m", "memory": "10Mi"}},
    "command": ["sh", "-c", "until nslookup master; do echo waiting for master; sleep 2; done;"],
}
TEMPLATE_KINDS = ("Job", "Deployment")  # kinds with one pod template at spec.template


@pytest.fixture(scope="module")
def team_plan():
    return run_stack(team_values(jobs=TEAM_JOBS + MORE_TEAM_JOBS))


@pytest.fixture(scope="module")
def docs_plan():
    return run_stack(with_doc_jobs(ALL_JOBS), stack="docs")


@pytest.fixture(scope="module")
def policy(team_plan) -> dict[str, Any]:
    (record,) = team_plan.of_type(POLICY)
    return record.inputs


@pytest.fixture(scope="module")
def binding(team_plan) -> dict[str, Any]:
    (record,) = team_plan.of_type(BINDING)
    return record.inputs


# ---------------------------------------------------------------------------------------------
# Running the policy as the API server does
# ---------------------------------------------------------------------------------------------

# cel-python's environment with the parser the plan's CRD check keeps (its LALR tables read from the plan cache,
# not built again: CELParser() after this takes the same parser; tests/test_api_checks.py checks it is cel-python's).
_ENV = kube_crds._environment()


@cache
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression))


def _cel(expression: str, activation: dict[str, Any]) -> Any:
    return _program(expression).evaluate(activation)


API_VERSIONS = {
    "Pod": "v1",
    "Job": "batch/v1",
    "MPIJob": "kubeflow.org/v2beta1",
    "PyTorchJob": "kubeflow.org/v1",
    "PaddleJob": "kubeflow.org/v1",
}


def _request(obj: dict[str, Any], operation: str, sub_resource: str = "") -> dict[str, Any]:
    group, _, version = API_VERSIONS[obj["kind"]].rpartition("/")
    req = {
        "operation": operation,
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "namespace": obj["metadata"].get("namespace", TEAM_NS),
        "name": obj["metadata"].get("name", ""),
    }
    if sub_resource:
        req["subResource"] = sub_resource
    return req


def admit(
    policy: dict[str, Any],
    obj: dict[str, Any],
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    sub_resource: str = "",
) -> list[str] | None:
    """What the policy says of a request: None when its match conditions leave it out, else the
    messages of the validations that refuse it ([] = admitted). A CEL error raises (the API server
    would refuse the request with it)."""
    spec = policy["spec"]
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(_request(obj, operation, sub_resource)),
    }
    for condition in spec.get("matchConditions") or []:
        held = _cel(condition["expression"], activation)
        assert isinstance(held, celtypes.BoolType), (condition["name"], held)
        if not held:
            return None
    variables: dict[Any, Any] = {}
    for v in spec.get("variables") or []:
        variables[celtypes.StringType(v["name"])] = _cel(
            v["expression"], {**activation, "variables": celtypes.MapType(variables)}
        )
    activation["variables"] = celtypes.MapType(variables)
    refusals = []
    for validation in spec["validations"]:
        passed = _cel(validation["expression"], activation)
        assert isinstance(passed, celtypes.BoolType), (validation["message"], passed)
        if not passed:
            message = (
                _cel(validation["messageExpression"], activation)
                if "messageExpression" in validation
                else validation["message"]
            )
            assert isinstance(message, str), (validation["message"], message)
            refusals.append(str(message))
    return refusals


def template_count(policy: dict[str, Any], obj: dict[str, Any]) -> int:
    """How many pod templates the policy sees in ``obj`` (its ``templates`` variable)."""
    (expression,) = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "templates"]
    activation = {"object": celpy.json_to_cel(obj), "request": celpy.json_to_cel(_request(obj, "CREATE"))}
    return len(_cel(expression, activation))


# ---------------------------------------------------------------------------------------------
# The pods of the stack
# ---------------------------------------------------------------------------------------------


def templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod templates of a job (or Deployment): role -> template."""
    if obj["kind"] in TEMPLATE_KINDS:
        return {"main": obj["spec"]["template"]}
    return {role: rs["template"] for role, rs in obj["spec"][REPLICA_SPECS[obj["kind"]]].items()}


def with_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in (*TEMPLATE_KINDS, *REPLICA_SPECS)]


def pod_of(template: dict[str, Any], name: str, namespace: str = TEAM_NS) -> dict[str, Any]:
    meta = {**copy.deepcopy(template.get("metadata") or {}), "name": name, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template["spec"])}


def stack_pods(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod the stack's jobs make, in a team namespace, with what the operators add."""
    pods = []
    for obj in with_pods(objects):
        for role, template in templates(obj).items():
            pod = pod_of(template, f"{obj['metadata']['name']}-{role.lower()}-0")
            pods.append(pod)
            if obj["kind"] == "PyTorchJob":
                made = copy.deepcopy(pod)
                made["metadata"]["name"] += "-operator"
                made["spec"]["initContainers"] = [*made["spec"].get("initContainers", []), dict(INIT_PYTORCH)]
                pods.append(made)
    return pods


def in_team_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = TEAM_NS
    return out


@pytest.fixture(scope="module")
def team_objects(team_plan) -> list[dict[str, Any]]:
    return team_plan.kubernetes_objects()


@pytest.fixture(scope="module")
def all_stack_objects(team_objects, docs_plan) -> list[dict[str, Any]]:
    return [o for o in team_objects + docs_plan.kubernetes_objects() if o["metadata"].get("namespace") == "training"]


def test_the_plans_have_pods_of_every_kind(all_stack_objects):
    kinds = {o["kind"] for o in with_pods(all_stack_objects)}
    assert kinds == {"MPIJob", "PyTorchJob", "PaddleJob", "Job", "Deployment"}
    labels = {
        (t.get("metadata") or {}).get("labels", {}).get("gputraining/job-kind")
        for o in with_pods(all_stack_objects)
        for t in templates(o).values()
    }
    assert labels == {"mpi", "pytorch-elastic", "nccl-test", "data-stage", "paddle", "tensorboard"}


def test_every_pod_of_the_stack_is_admitted(policy, all_stack_objects):
    pods = stack_pods(all_stack_objects)
    assert len(pods) > 30
    refused = {p["metadata"]["name"]: admit(policy, p) for p in pods}
    assert len(refused) == len(pods)
    assert refused == {name: [] for name in refused}


def test_every_job_of_the_stack_is_admitted_with_every_template_seen(policy, all_stack_objects):
    jobs = [in_team_namespace(o) for o in with_pods(all_stack_objects) if o["kind"] in API_VERSIONS]
    assert {j["kind"] for j in jobs} == {"MPIJob", "PyTorchJob", "PaddleJob", "Job"}
    for job in jobs:
        assert admit(policy, job) == [], job["metadata"]["name"]
        assert template_count(policy, job) == len(templates(job)), job["metadata"]["name"]


def test_the_capability_allowance_is_what_the_stack_adds(policy, all_stack_objects):
    """IPC_LOCK, the one capability beyond baseline, is there because the EFA workers add it."""
    added = {
        cap
        for pod in stack_pods(all_stack_objects)
        for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        for cap in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
    }
    assert added == {"IPC_LOCK"} == set(tp.EFA_CAPABILITIES)
    assert not set(tp.EFA_CAPABILITIES) & set(tp.BASELINE_CAPABILITIES)


# ---------------------------------------------------------------------------------------------
# What is refused, and what baseline allows
# ---------------------------------------------------------------------------------------------


def rule_text(name: str) -> tuple[str, str]:
    """(what the rule looks at, its message) of a rule of the policy."""
    (rule,) = [r for r in tp.rules([*tp.BASELINE_CAPABILITIES, *tp.EFA_CAPABILITIES]) if r.name == name]
    return rule.over, rule.text


def expected(name: str, item: str = "") -> str:
    over, text = rule_text(name)
    return text if over == "template" else f'{over} "{item}": {text}'


@pytest.fixture(scope="module")
def worker(team_objects) -> dict[str, Any]:
    """An EFA worker pod of a team job (IPC_LOCK and all)."""
    (job,) = [o for o in team_objects if o["kind"] == "MPIJob" and o["metadata"]["name"] == "vision-nccl"]
    pod = pod_of(job["spec"]["mpiReplicaSpecs"]["Worker"]["template"], "vision-nccl-worker-0")
    assert pod["spec"]["containers"][0]["name"] == "worker"
    assert pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    return pod


def sc(pod: dict[str, Any], container: int = 0, where: str = "containers") -> dict[str, Any]:
    return pod["spec"][where][container].setdefault("securityContext", {})


def pod_sc(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"].setdefault("securityContext", {})


def init(pod: dict[str, Any], security: dict[str, Any]) -> None:
    pod["spec"]["initContainers"] = [{"name": "setup", "image": "busybox:1.36", "securityContext": security}]


def caps(pod: dict[str, Any], *add: str) -> None:
    sc(pod).setdefault("capabilities", {})["add"] = ["IPC_LOCK", *add]


def volume(pod: dict[str, Any], v: dict[str, Any]) -> None:
    pod["spec"].setdefault("volumes", []).append({"name": "node", **v})


# (case, change to the worker pod, the rule that refuses it, the container or volume it names, the
# field its message must name)
REFUSED: list[tuple[str, Callable[[dict[str, Any]], None], str, str, str]] = [
    ("privileged", lambda p: sc(p).update(privileged=True), "privileged", "worker", "securityContext.privileged"),
    ("privileged-init", lambda p: init(p, {"privileged": True}), "privileged", "setup", "securityContext.privileged"),
    ("host-network", lambda p: p["spec"].update(hostNetwork=True), "host-network", "", "spec.hostNetwork"),
    ("host-pid", lambda p: p["spec"].update(hostPID=True), "host-pid", "", "spec.hostPID"),
    ("host-ipc", lambda p: p["spec"].update(hostIPC=True), "host-ipc", "", "spec.hostIPC"),
    ("host-path", lambda p: volume(p, {"hostPath": {"path": "/"}}), "host-path", "node", "hostPath"),
    (
        "git-repo",
        lambda p: volume(p, {"gitRepo": {"repository": "https://example.com/x.git"}}),
        "git-repo",
        "node",
        "gitRepo",
    ),
    ("sys-admin", lambda p: caps(p, "SYS_ADMIN"), "capabilities", "worker", "securityContext.capabilities.add"),
    (
        "sys-admin-init",
        lambda p: init(p, {"capabilities": {"add": ["SYS_ADMIN"]}}),
        "capabilities",
        "setup",
        "securityContext.capabilities.add",
    ),
    ("all-capabilities", lambda p: caps(p, "ALL"), "capabilities", "worker", "securityContext.capabilities.add"),
    ("net-raw", lambda p: caps(p, "NET_RAW"), "capabilities", "worker", "securityContext.capabilities.add"),
    (
        "host-port",
        lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 22, "hostPort": 2222}]),
        "host-ports",
        "worker",
        "hostPort",
    ),
    ("proc-mount", lambda p: sc(p).update(procMount="Unmasked"), "proc-mount", "worker", "securityContext.procMount"),
    (
        "seccomp-pod",
        lambda p: pod_sc(p).update(seccompProfile={"type": "Unconfined"}),
        "pod-seccomp",
        "",
        "spec.securityContext.seccompProfile",
    ),
    (
        "seccomp",
        lambda p: sc(p).update(seccompProfile={"type": "Unconfined"}),
        "seccomp",
        "worker",
        "securityContext.seccompProfile",
    ),
    (
        "apparmor-pod",
        lambda p: pod_sc(p).update(appArmorProfile={"type": "Unconfined"}),
        "pod-apparmor",
        "",
        "spec.securityContext.appArmorProfile",
    ),
    (
        "apparmor",
        lambda p: sc(p).update(appArmorProfile={"type": "Unconfined"}),
        "apparmor",
        "worker",
        "securityContext.appArmorProfile",
    ),
    (
        "apparmor-annotation",
        lambda p: p["metadata"].setdefault("annotations", {}).update({f"{tp.APPARMOR_ANNOTATION}worker": "unconfined"}),
        "apparmor-annotations",
        "",
        "container.apparmor.security.beta.kubernetes.io",
    ),
    (
        "selinux-pod",
        lambda p: pod_sc(p).update(seLinuxOptions={"type": "spc_t"}),
        "pod-selinux",
        "",
        "spec.securityContext.seLinuxOptions",
    ),
    (
        "selinux-user",
        lambda p: sc(p).update(seLinuxOptions={"user": "system_u"}),
        "selinux",
        "worker",
        "securityContext.seLinuxOptions",
    ),
    (
        "sysctl",
        lambda p: pod_sc(p).update(sysctls=[{"name": "net.core.somaxconn", "value": "1024"}]),
        "sysctls",
        "",
        "spec.securityContext.sysctls",
    ),
    (
        "host-process-pod",
        lambda p: pod_sc(p).update(windowsOptions={"hostProcess": True}),
        "host-process",
        "",
        "windowsOptions.hostProcess",
    ),
    (
        "host-process",
        lambda p: sc(p).update(windowsOptions={"hostProcess": True}),
        "container-host-process",
        "worker",
        "windowsOptions.hostProcess",
    ),
    (
        "probe-host",
        lambda p: p["spec"]["containers"][0].update(
            livenessProbe={"httpGet": {"host": "169.254.169.254", "path": "/", "port": 80}}
        ),
        "probe-host",
        "worker",
        "httpGet.host",
    ),
    (
        "pre-stop-host",
        lambda p: p["spec"]["containers"][0].update(
            lifecycle={"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 22}}}
        ),
        "probe-host",
        "worker",
        "tcpSocket.host",
    ),
]


@pytest.mark.parametrize("case, change, rule, item, field", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_pod_that_reaches_the_node_is_refused_by_the_rule_naming_the_field(
    policy, worker, case, change, rule, item, field
):
    pod = copy.deepcopy(worker)
    change(pod)
    assert admit(policy, pod) == [expected(rule, item)]
    assert field in expected(rule, item)


def test_every_rule_has_a_refused_case():
    assert {r.name for r in tp.rules(tp.BASELINE_CAPABILITIES)} == {case[2] for case in REFUSED}


# Values the baseline profile allows: the policy must not refuse them.
ALLOWED: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("not-privileged", lambda p: sc(p).update(privileged=False, allowPrivilegeEscalation=False)),
    ("no-host-namespaces", lambda p: p["spec"].update(hostNetwork=False, hostPID=False, hostIPC=False)),
    ("default-capabilities", lambda p: caps(p, "CHOWN", "NET_BIND_SERVICE")),
    ("dropped-capabilities", lambda p: sc(p)["capabilities"].update(drop=["ALL"])),
    ("host-port-0", lambda p: p["spec"]["containers"][0].update(ports=[{"containerPort": 22, "hostPort": 0}])),
    ("proc-mount-default", lambda p: sc(p).update(procMount="Default")),
    ("seccomp-runtime-default", lambda p: pod_sc(p).update(seccompProfile={"type": "RuntimeDefault"})),
    (
        "apparmor-localhost",
        lambda p: sc(p).update(appArmorProfile={"type": "Localhost", "localhostProfile": "training"}),
    ),
    (
        "apparmor-annotation",
        lambda p: (
            p["metadata"].setdefault("annotations", {}).update({f"{tp.APPARMOR_ANNOTATION}worker": "runtime/default"})
        ),
    ),
    ("selinux-container-type", lambda p: sc(p).update(seLinuxOptions={"type": "container_t", "level": "s0:c1,c2"})),
    ("safe-sysctl", lambda p: pod_sc(p).update(sysctls=[{"name": "net.ipv4.ping_group_range", "value": "0 1000"}])),
    ("probe-without-host", lambda p: p["spec"]["containers"][0].update(readinessProbe={"tcpSocket": {"port": 22}})),
    ("user-namespace", lambda p: p["spec"].update(hostUsers=False)),
    ("other-volumes", lambda p: volume(p, {"configMap": {"name": "x"}})),
]


@pytest.mark.parametrize("case, change", ALLOWED, ids=[c[0] for c in ALLOWED])
def test_what_baseline_allows_is_admitted(policy, worker, case, change):
    pod = copy.deepcopy(worker)
    change(pod)
    assert admit(policy, pod) == []


# A refused change inside every job kind's templates, each template in turn (the rule, and the
# container it names, are the same as in a pod).
JOB_CASES = [c for c in REFUSED if c[0] in ("privileged", "host-network", "sys-admin", "host-path")]


@pytest.mark.parametrize("kind", ["MPIJob", "PyTorchJob", "PaddleJob", "Job"])
@pytest.mark.parametrize("case, change, rule, item, field", JOB_CASES, ids=[c[0] for c in JOB_CASES])
def test_a_job_whose_template_reaches_the_node_is_refused_at_apply(
    policy, all_stack_objects, kind, case, change, rule, item, field
):
    job = in_team_namespace(next(o for o in with_pods(all_stack_objects) if o["kind"] == kind))
    for role in templates(job):
        bad = copy.deepcopy(job)
        template = templates(bad)[role]
        change(template)
        named = template["spec"]["containers"][0]["name"] if item == "worker" else item
        assert admit(policy, bad) == [expected(rule, named)], (kind, role)


# ---------------------------------------------------------------------------------------------
# Updates
# ---------------------------------------------------------------------------------------------


def test_an_update_that_leaves_the_spec_alone_is_not_checked(policy, worker):
    """The Job controller removes its finalizer from every pod, Kueue relabels: such updates of a
    pod that predates the policy must go through."""
    old = copy.deepcopy(worker)
    old["spec"]["hostNetwork"] = True
    old["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    assert admit(policy, new, "UPDATE", old) is None
    assert admit(policy, old) == [expected("host-network")]


def test_an_ephemeral_container_is_checked(policy, worker):
    debug = {"name": "debug", "image": "busybox:1.36", "targetContainerName": "worker"}
    new = copy.deepcopy(worker)
    new["spec"]["ephemeralContainers"] = [dict(debug)]
    assert admit(policy, new, "UPDATE", worker, "ephemeralcontainers") == []
    new["spec"]["ephemeralContainers"][0]["securityContext"] = {
        "privileged": True,
        "capabilities": {"add": ["SYS_PTRACE"]},
    }
    assert admit(policy, new, "UPDATE", worker, "ephemeralcontainers") == [
        expected("privileged", "debug"),
        expected("capabilities", "debug"),
    ]


def test_kueue_admitting_a_team_job_is_an_update_that_passes(policy, team_objects):
    """Kueue unsuspends a job and adds its flavor's node labels to the templates."""
    (job,) = [
        in_team_namespace(o) for o in team_objects if o["kind"] == "MPIJob" and o["metadata"]["name"] == "vision-nccl"
    ]
    old = copy.deepcopy(job)
    old["spec"].setdefault("runPolicy", {})["suspend"] = True
    new = copy.deepcopy(job)
    new["spec"].setdefault("runPolicy", {})["suspend"] = False
    for template in templates(new).values():
        template["spec"].setdefault("nodeSelector", {})["kueue.x-k8s.io/flavor"] = "p4d"
    assert admit(policy, new, "UPDATE", old) == []


# ---------------------------------------------------------------------------------------------
# Where it applies
# ---------------------------------------------------------------------------------------------


def namespace_labels(ns: dict[str, Any]) -> dict[str, str]:
    """A namespace's labels as the API server has them (it adds its name as a label)."""
    return {**(ns["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": ns["metadata"]["name"]}


def test_the_binding_denies_in_every_team_namespace_and_nowhere_else(team_plan, binding, policy):
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    created = [r.inputs for r in team_plan.of_type(NAMESPACE)]
    teams = {
        queues.team_namespace(SimpleNamespace(name=t["name"], namespace=t.get("namespace")))
        for t in cast(list[dict[str, Any]], TEAMS)
    }
    assert teams == {"vision", "team-nlp"}
    assert {ns["metadata"]["name"] for ns in created if selects(selector, namespace_labels(ns))} == teams
    others = [ns["metadata"]["name"] for ns in created if ns["metadata"]["name"] not in teams]
    assert "training" in others
    for name in [*others, *RESERVED_NAMESPACES]:  # the system namespaces the stack does not create: their name only
        labels = namespace_labels(
            next((ns for ns in created if ns["metadata"]["name"] == name), {"metadata": {"name": name}})
        )
        assert not selects(selector, labels), name


def test_the_policy_is_in_force_before_a_team_namespace_or_a_job_exists(team_plan):
    bound = {"type": BINDING, "name": "queues-team-pods-binding"}
    team_namespaces = [
        r for r in team_plan.of_type(NAMESPACE) if tp.TEAM_LABEL in (r.inputs["metadata"].get("labels") or {})
    ]
    assert len(team_namespaces) == 2
    for r in team_namespaces:
        assert bound in r.depends_on, r.name
    # The stack's own jobs live in the training namespace, which the policy does not select (above): they wait
    # for what they name (namespace, operator, queue), not for the policy. A team's jobs go to its namespace.
    jobs = [r for r in team_plan.records if r.type.split(":")[-1] in (*REPLICA_SPECS, "Job")]
    assert jobs
    names = {r.inputs["metadata"]["name"] for r in team_namespaces}
    for r in jobs:
        assert r.inputs["metadata"]["namespace"] not in names, r.name


def test_the_policy_looks_at_pods_and_every_job_kind_a_team_may_create(policy, team_plan):
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    resources = {(g, res) for r in rules for g in r["apiGroups"] for res in r["resources"]}
    crds = {
        (r.inputs["spec"]["group"], r.inputs["spec"]["names"]["plural"])
        for r in team_plan.records
        if r.inputs.get("kind") == "CustomResourceDefinition"
    }
    # Every CRD of the operators' groups the stack installs is one of their kinds (facts/operators.py).
    # (A TrainJob's pod templates are its runtime's: its pods are checked as pods, and Trainer is off here.)
    kinds = [k for k in KINDS if k.replica_specs is not None]
    job_kinds = {c for c in crds if c[0] in {k.group for k in kinds}}
    assert (
        job_kinds
        == {(k.group, k.plural) for k in kinds}
        >= {("kubeflow.org", "mpijobs"), ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "paddlejobs")}
    )
    assert resources == {("", "pods"), ("", "pods/ephemeralcontainers"), ("batch", "jobs"), *job_kinds}
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in rules)
    assert tp.JOB_REPLICA_SPECS == REPLICA_SPECS


def test_no_teams_no_policy(dev_plan):
    assert not dev_plan.of_type(POLICY) and not dev_plan.of_type(BINDING)


# ---------------------------------------------------------------------------------------------
# Valid objects, plain CEL
# ---------------------------------------------------------------------------------------------


def test_both_objects_validate_against_the_kubernetes_schema(policy, binding):
    for obj in (policy, binding):
        for version in versions.KUBERNETES_SUPPORTED:
            kubernetes_validate.validate(obj, version, strict=True)
    misspelt = copy.deepcopy(binding)
    misspelt["spec"]["validationAction"] = misspelt["spec"].pop("validationActions")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misspelt, versions.KUBERNETES_DEFAULT, strict=True)


def test_every_validation_refuses_as_forbidden_and_names_what_it_refuses(policy):
    """A message for each; a container or volume rule names the offending one (messageExpression)."""
    for v in policy["spec"]["validations"]:
        assert v["reason"] == "Forbidden" and v["message"], v
        per_item = "variables.containers" in v["expression"] or "variables.volumes" in v["expression"]
        assert per_item == ("messageExpression" in v), v["message"]


# Kubernetes declares these for a ValidatingAdmissionPolicy (request, object, oldObject,
# namespaceObject, params, authorizer) next to the policy's own `variables`.
K8S_VARIABLES = {"object", "oldObject", "request", "namespaceObject", "params", "authorizer", "variables"}
MACROS = {"all", "exists", "exists_one", "map", "filter"}
STANDARD_FUNCTIONS = {"has", "size"}
STANDARD_METHODS = MACROS | {"startsWith", "endsWith", "contains", "matches", "size"}


def expressions(policy: dict[str, Any]) -> list[str]:
    spec = policy["spec"]
    out = [c["expression"] for c in spec["matchConditions"]] + [v["expression"] for v in spec["variables"]]
    for v in spec["validations"]:
        out += [v["expression"], *([v["messageExpression"]] if "messageExpression" in v else [])]
    return out


def _name(node: Any) -> str:
    (token,) = [c for c in node.children if isinstance(c, Token)]
    return str(token)


def _first_ident(tree: Tree) -> str | None:
    found = [st for st in tree.iter_subtrees_topdown() if st.data == "ident"]
    return _name(found[0]) if found else None


def cel_names(expression: str) -> tuple[set[str], set[str], set[str], list[list[str]]]:
    """(free identifiers, global functions, methods, per list literal the kinds of its elements)."""
    tree = CELParser().parse(expression)
    idents, functions, methods, bound, lists = set(), set(), set(), set(), []
    for st in tree.iter_subtrees():
        if st.data == "ident":
            idents.add(_name(st))
        elif st.data == "ident_arg":
            functions.add(_name(st))
        elif st.data == "member_dot_arg":
            method = _name(st)
            methods.add(method)
            if method in MACROS:
                (args,) = [c for c in st.children if isinstance(c, Tree) and c.data == "exprlist"]
                bound.add(_first_ident(args.children[0]) or "")
        elif st.data == "list_lit":
            elements = st.children[0].children if st.children else []
            lists.append(
                [
                    next((t.type for t in e.scan_values(lambda v: isinstance(v, Token))), "")
                    if _is_literal(e)
                    else "expr"
                    for e in elements
                ]
            )
    return idents - bound, functions, methods, lists


def _is_literal(expr: Tree) -> bool:
    return any(st.data == "literal" for st in expr.iter_subtrees()) and not any(
        st.data in ("ident", "ident_arg", "member_dot") for st in expr.iter_subtrees()
    )


def test_every_expression_is_plain_cel_as_kubernetes_compiles_it(policy):
    declared: list[str] = []
    for v in policy["spec"]["variables"]:  # a variable uses only those declared before it
        used = {n.split(".", 1)[1] for n in _variable_refs(v["expression"])}
        assert used <= set(declared), (v["name"], used)
        declared.append(v["name"])
    for expression in expressions(policy):
        free, functions, methods, lists = cel_names(expression)
        assert free <= K8S_VARIABLES, (free, expression)
        assert functions <= STANDARD_FUNCTIONS and methods <= STANDARD_METHODS, expression
        for elements in lists:  # HomogeneousAggregateLiterals
            assert len(elements) <= 1 or len(set(elements)) == 1 and elements[0] != "expr", (elements, expression)
        assert {n.split(".", 1)[1] for n in _variable_refs(expression)} <= set(declared), expression
        assert ".?" not in expression and "?." not in expression and "orValue" not in expression


def _variable_refs(expression: str) -> set[str]:
    tree = CELParser().parse(expression)
    out = set()
    for st in tree.iter_subtrees():
        if st.data == "member_dot":
            inner, field = st.children[0], st.children[-1]
            plain = isinstance(inner, Tree) and not any(t.data.startswith("member_") for t in inner.iter_subtrees())
            if plain and _first_ident(inner) == "variables":
                out.add(f"variables.{field}")
    return out


def test_the_cel_checks_can_fail():
    """The static checks see an undeclared name, a non-standard function and a mixed list."""
    free, functions, methods, lists = cel_names("foo.all(x, x in [1, 'a']) && bar(object) && object.spec.flatten()")
    assert free == {"foo", "object"} and functions == {"bar"} and "flatten" in methods
    assert lists == [["INT_LIT", "STRING_LIT"]]
    assert _variable_refs("variables.nope.all(t, true)") == {"variables.nope"}
    with pytest.raises(Exception):
        CELParser().parse("object.?spec.orValue(1)")  # optional syntax: not what cel-python (or this policy) speaks
