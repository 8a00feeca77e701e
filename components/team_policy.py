"""TeamPodPolicy: a ValidatingAdmissionPolicy (CEL, built into Kubernetes since 1.30) that keeps the
pods of team namespaces inside their containers. A team's role may create MPIJobs, PyTorchJobs,
PaddleJobs and Jobs, and the operators create pods from whatever pod templates they carry: without
this, a privileged or host-network pod would own its GPU node, and with host networking the node
role's credentials (GPU nodes keep pods away from the instance metadata service with an IMDS hop
limit of 1, which host networking walks around).

The policy is Pod Security's ``baseline`` profile (the pod-security-admission checks of Kubernetes
1.36, restated in CEL) with one relaxation:

- kept: no host namespaces (``hostNetwork``, ``hostPID``, ``hostIPC``); no privileged containers; no
  Windows HostProcess; no ``hostPath`` or ``gitRepo`` volumes (git runs on the node); no host ports
  other than 0; no ``host`` in probes and lifecycle handlers (the kubelet would connect from the
  node); seccomp and AppArmor only ``RuntimeDefault`` or ``Localhost`` (never ``Unconfined``), the
  AppArmor annotations only ``runtime/default`` or ``localhost/*``; SELinux only the container
  types, never a user or role; only the namespaced ("safe") sysctls; capabilities added only from
  the baseline's default set.
- relaxed: ``IPC_LOCK`` may be added too. The stack's EFA workers add it (libfabric pins memory for
  RDMA; ``jobs/pod.py``), and ``baseline`` refuses it.
- stricter: ``procMount`` must stay ``Default`` even in a user-namespace pod (``hostUsers: false``),
  where baseline would let it be ``Unmasked``; no job of the stack needs either.
- not checked, as in baseline: ``allowPrivilegeEscalation``, ``runAsNonRoot``, volume types beyond
  the two above (restricted-profile rules: without privileged containers or added capabilities, a
  setuid binary gains nothing beyond the container's bounding set, and the stack's images, sshd
  for MPI among them, run as root); ``securityContext.ulimits`` (baseline from Kubernetes 1.37, a field
  1.36 does not have).

What it looks at: Pods (created, updated, and their ephemeral containers) and the pod templates of
Jobs, MPIJobs, PyTorchJobs and PaddleJobs, so that a refused job is refused at ``kubectl apply``
instead of being queued and admitted by Kueue and then never getting its pods. An update is
checked only when it changes the spec: a pod or job that predates the policy can still have its
labels, annotations and finalizers changed (the Job controller removes its finalizer from every
pod), as Pod Security admission also lets such updates through.

The binding selects namespaces by the label the Queues component puts on team namespaces
(``gputraining/team``); nothing else (the training namespace, the system namespaces) is checked.
The policy's expressions use only ``has()``, ``all``/``exists``/``filter``/``map`` and string
functions, no optional syntax (``?.``), so that they are both Kubernetes CEL and what the tests
evaluate them with (cel-python).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from facts.kube import PART_OF, TEAM_LABEL
from facts.operators import KINDS, REPLICA_SPECS

API_VERSION = "admissionregistration.k8s.io/v1"
NAME = "gputraining-team-pods"  # the policy's and the binding's name
# Pod Security baseline: capabilities a container may add (check_capabilities_baseline.go).
BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
# What the stack's EFA workers add beyond that (jobs/pod.py, gpu_worker_container).
EFA_CAPABILITIES = ("IPC_LOCK",)
# Pod Security baseline: the namespaced sysctls (check_sysctls.go, as of Kubernetes 1.29).
SAFE_SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
)
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
PROFILE_TYPES = ("RuntimeDefault", "Localhost")  # seccompProfile.type and appArmorProfile.type
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
# The job kinds whose pod templates are checked too, every kind of the operators (facts/operators.py):
# kind -> its replica specs (a map of role to {template}); a batch Job has one template.
JOB_REPLICA_SPECS = REPLICA_SPECS
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HANDLERS = ("postStart", "preStop")
OPERATIONS = ["CREATE", "UPDATE"]


@dataclass(frozen=True)
class Rule:
    """One validation: ``bad`` is CEL that is true for an item breaking the rule. ``over`` is what
    it looks at: ``template`` (a pod template ``t``, with ``t.spec``), ``container`` or ``volume``
    (``x``, one of any template's); the message of an item rule names the offending item."""

    name: str
    over: str
    bad: str
    text: str  # the refusal, naming the field


def lit(text: str) -> str:
    """A CEL string literal."""
    assert "'" not in text and "\\" not in text, text
    return f"'{text}'"


def one_of(values: Sequence[str]) -> str:
    return "[" + ", ".join(lit(v) for v in values) + "]"


def has_path(base: str, *path: str) -> str:
    """CEL: every field of ``path`` is set under ``base`` (``has(a.b) && has(a.b.c)``)."""
    out, cur = [], base
    for part in path:
        cur = f"{cur}.{part}"
        out.append(f"has({cur})")
    return " && ".join(out)


def set_true(base: str, *path: str) -> str:
    return f"{has_path(base, *path)} && {base}.{'.'.join(path)}"


def not_in(base: str, path: Sequence[str], allowed: Sequence[str]) -> str:
    """CEL: the field is set to a value outside ``allowed``."""
    return f"{has_path(base, *path)} && !({base}.{'.'.join(path)} in {one_of(allowed)})"


def _selinux_bad(options: str) -> str:
    return (
        f"({not_in(options, ['type'], SELINUX_TYPES)})"
        f" || ({has_path(options, 'user')} && {options}.user != '')"
        f" || ({has_path(options, 'role')} && {options}.role != '')"
    )


def _host_in_handlers(c: str) -> str:
    """CEL: a probe or lifecycle handler of container ``c`` names a host."""
    handlers = [[probe] for probe in PROBES] + [["lifecycle", h] for h in HANDLERS]
    paths = [[*h, action, "host"] for h in handlers for action in ("httpGet", "tcpSocket")]
    return " || ".join(f"({has_path(c, *path)} && {c}.{'.'.join(path)} != '')" for path in paths)


def _apparmor_annotation_bad(t: str) -> str:
    a = f"{t}.metadata.annotations"
    allowed = f"{a}[k] == 'runtime/default' || {a}[k].startsWith('localhost/')"
    return (
        f"{has_path(t, 'metadata', 'annotations')} && {a}.exists(k, k.startsWith({lit(APPARMOR_ANNOTATION)}) && "
        f"!({allowed}))"
    )


NEVER = "is not allowed in a team namespace"
_SELINUX_TEXT = f"may set no user or role, and type only to one of {', '.join(t for t in SELINUX_TYPES if t)}"
_PROFILE_TEXT = f"may only be {' or '.join(PROFILE_TYPES)}"


def rules(capabilities: Sequence[str]) -> list[Rule]:
    """Every rule of the policy (see the module docstring for the choice); ``capabilities``: what a
    container may add."""
    return [*_pod_rules(), *_volume_rules(), *_container_rules(capabilities)]


def _pod_rules() -> list[Rule]:
    """The rules on a pod template's spec and metadata (``t``)."""
    s, psc, never = "t.spec", "t.spec.securityContext", NEVER
    return [
        Rule(
            "host-network",
            "template",
            set_true(s, "hostNetwork"),
            f"spec.hostNetwork: true {never} (the node network, and the node role credentials)",
        ),
        Rule("host-pid", "template", set_true(s, "hostPID"), f"spec.hostPID: true {never} (the node processes)"),
        Rule("host-ipc", "template", set_true(s, "hostIPC"), f"spec.hostIPC: true {never} (the node IPC namespace)"),
        Rule(
            "host-process",
            "template",
            set_true(s, "securityContext", "windowsOptions", "hostProcess"),
            f"spec.securityContext.windowsOptions.hostProcess {never}",
        ),
        Rule(
            "sysctls",
            "template",
            f"{has_path(s, 'securityContext', 'sysctls')} && {psc}.sysctls.exists(y, !(y.name in "
            f"{one_of(SAFE_SYSCTLS)}))",
            f"spec.securityContext.sysctls may only set the namespaced sysctls ({', '.join(SAFE_SYSCTLS)})",
        ),
        Rule(
            "pod-seccomp",
            "template",
            not_in(s, ["securityContext", "seccompProfile", "type"], PROFILE_TYPES),
            f"spec.securityContext.seccompProfile.type {_PROFILE_TEXT}",
        ),
        Rule(
            "pod-apparmor",
            "template",
            not_in(s, ["securityContext", "appArmorProfile", "type"], PROFILE_TYPES),
            f"spec.securityContext.appArmorProfile.type {_PROFILE_TEXT}",
        ),
        Rule(
            "pod-selinux",
            "template",
            f"{has_path(s, 'securityContext', 'seLinuxOptions')} && ({_selinux_bad(psc + '.seLinuxOptions')})",
            f"spec.securityContext.seLinuxOptions {_SELINUX_TEXT}",
        ),
        Rule(
            "apparmor-annotations",
            "template",
            _apparmor_annotation_bad("t"),
            f"metadata.annotations[{APPARMOR_ANNOTATION}*] may only be runtime/default or localhost/<profile>",
        ),
    ]


def _volume_rules() -> list[Rule]:
    """The rules on a volume (``x``)."""
    v, never = "x", NEVER
    return [
        Rule("host-path", "volume", has_path(v, "hostPath"), f"hostPath {never} (the node file system)"),
        Rule(
            "git-repo",
            "volume",
            has_path(v, "gitRepo"),
            f"gitRepo {never} (git runs on the node; clone in an init container instead)",
        ),
    ]


def _container_rules(capabilities: Sequence[str]) -> list[Rule]:
    """The rules on a container, init container or ephemeral container (``x``)."""
    c, sc, never = "x", "x.securityContext", NEVER
    return [
        Rule(
            "privileged",
            "container",
            set_true(c, "securityContext", "privileged"),
            f"securityContext.privileged: true {never} (the whole node)",
        ),
        Rule(
            "capabilities",
            "container",
            f"{has_path(c, 'securityContext', 'capabilities', 'add')} && {sc}.capabilities.add.exists(y, !(y in "
            f"{one_of(capabilities)}))",
            f"securityContext.capabilities.add may only hold {', '.join(capabilities)}",
        ),
        Rule(
            "host-ports",
            "container",
            f"has({c}.ports) && {c}.ports.exists(p, has(p.hostPort) && p.hostPort != 0)",
            f"ports[].hostPort other than 0 {never} (a port of the node)",
        ),
        Rule(
            "probe-host",
            "container",
            _host_in_handlers(c),
            f"httpGet.host or tcpSocket.host in a probe or lifecycle handler {never} (the kubelet would connect to it "
            "from the node)",
        ),
        Rule(
            "proc-mount",
            "container",
            f"{has_path(c, 'securityContext', 'procMount')} && {sc}.procMount != 'Default'",
            "securityContext.procMount may only be Default",
        ),
        Rule(
            "container-host-process",
            "container",
            set_true(c, "securityContext", "windowsOptions", "hostProcess"),
            f"securityContext.windowsOptions.hostProcess {never}",
        ),
        Rule(
            "seccomp",
            "container",
            not_in(c, ["securityContext", "seccompProfile", "type"], PROFILE_TYPES),
            f"securityContext.seccompProfile.type {_PROFILE_TEXT}",
        ),
        Rule(
            "apparmor",
            "container",
            not_in(c, ["securityContext", "appArmorProfile", "type"], PROFILE_TYPES),
            f"securityContext.appArmorProfile.type {_PROFILE_TEXT}",
        ),
        Rule(
            "selinux",
            "container",
            f"{has_path(c, 'securityContext', 'seLinuxOptions')} && ({_selinux_bad(sc + '.seLinuxOptions')})",
            f"securityContext.seLinuxOptions {_SELINUX_TEXT}",
        ),
    ]


def _or_empty(base: str, name: str) -> str:
    return f"(has({base}.{name}) ? {base}.{name} : [])"


def _templates() -> str:
    """CEL: the pod templates of the object (a Pod is its own), those with a spec."""
    kind = "request.kind.kind"
    branches = [f"{kind} == 'Pod' ? [object]", f"{kind} == 'Job' ? [object.spec.template]"]
    for k, specs in JOB_REPLICA_SPECS.items():
        m = f"object.spec.{specs}"
        branches.append(
            f"{kind} == {lit(k)} ? (has({m}) ? {m}.filter(r, has({m}[r].template)).map(r, {m}[r].template) : [])"
        )
    return "(" + " : ".join(branches) + " : []).filter(t, has(t.spec))"


VARIABLES = {
    "templates": _templates(),
    # Per template, its containers of every kind; per template, its volumes.
    "containers": "variables.templates.map(t, "
    + " + ".join(_or_empty("t.spec", name) for name in CONTAINER_LISTS)
    + ")",
    "volumes": "variables.templates.map(t, " + _or_empty("t.spec", "volumes") + ")",
}
_ITEMS = {"container": "variables.containers", "volume": "variables.volumes"}
# Only a create, or an update that changes the spec (see the module docstring).
MATCH_CONDITIONS = [
    {
        "name": "creates-or-changes-the-spec",
        "expression": "request.operation != 'UPDATE' || object.spec != oldObject.spec",
    }
]


def validation(rule: Rule) -> dict[str, Any]:
    """The policy's validation of ``rule``: the expression, a message naming the field and, for a
    container or volume, a messageExpression naming the first offending one."""
    if rule.over == "template":
        return {"expression": f"variables.templates.all(t, !({rule.bad}))", "message": rule.text, "reason": "Forbidden"}
    items = _ITEMS[rule.over]
    first = f"{items}.map(l, l.filter(x, {rule.bad})).filter(l, size(l) > 0)[0][0].name"
    return {
        "expression": f"{items}.all(l, l.all(x, !({rule.bad})))",
        "message": rule.text,
        "messageExpression": " + ".join([lit(f'{rule.over} "'), first, lit(f'": {rule.text}')]),
        "reason": "Forbidden",
    }


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/part-of": PART_OF}


@dataclass
class TeamPodPolicyArgs:
    """Inputs of ``TeamPodPolicy``."""

    team_label: str = TEAM_LABEL  # the label every team namespace carries (the binding selects on it)
    extra_capabilities: Sequence[str] = EFA_CAPABILITIES  # what a container may add beyond baseline's default set
    depends_on: list[pulumi.Resource] = field(default_factory=list)  # what must exist first (the cluster)


def policy_manifest(args: TeamPodPolicyArgs) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy."""
    resource_rules: list[dict[str, Any]] = [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": OPERATIONS,
            "resources": ["pods", "pods/ephemeralcontainers"],
        },
        {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": OPERATIONS, "resources": ["jobs"]},
    ]
    # The kinds with pod templates of their own (a TrainJob's are its runtime's: its pods are checked as pods).
    kinds = [k for k in KINDS if k.kind in JOB_REPLICA_SPECS]
    for group in dict.fromkeys(k.group for k in kinds):
        resources = [k.plural for k in kinds if k.group == group]
        resource_rules.append(
            {"apiGroups": [group], "apiVersions": ["*"], "operations": OPERATIONS, "resources": resources}
        )
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": NAME, "labels": _labels()},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": resource_rules},
            "matchConditions": [dict(m) for m in MATCH_CONDITIONS],
            "variables": [{"name": k, "expression": v} for k, v in VARIABLES.items()],
            "validations": [validation(r) for r in rules([*BASELINE_CAPABILITIES, *args.extra_capabilities])],
        },
    }


def binding_manifest(args: TeamPodPolicyArgs) -> dict[str, Any]:
    """The binding: the policy, refusing (Deny), in every namespace with the team label."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": NAME, "labels": _labels()},
        "spec": {
            "policyName": NAME,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchExpressions": [{"key": args.team_label, "operator": "Exists"}]}
            },
        },
    }


class TeamPodPolicy(pulumi.ComponentResource):
    """The policy and its binding; the Kubernetes provider comes through ``opts`` (or the parent)."""

    def __init__(self, name: str, args: TeamPodPolicyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gputraining:components:TeamPodPolicy", name, None, opts)
        policy = policy_manifest(args)
        self.policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy",
            metadata=policy["metadata"],
            spec=policy["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )
        binding = binding_manifest(args)
        self.binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-binding",
            metadata=binding["metadata"],
            spec=binding["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.policy]),
        )
        self.register_outputs({"policy": NAME, "teamLabel": args.team_label})
