"""What the elastic-rendezvous integration tests share (test_elastic_rendezvous.py, test_elastic_c10d.py,
test_etcd_members.py): the environment the Kubeflow training operator v1.9.4 gives a PyTorchJob's pods
(``operator_pod_env``), the offline plan of the dev stack (as a user runs it, or of an edited copy of
its config), the etcd StatefulSet started as its pods run it, and torchrun agents standing in for pods.

Not a test module: the test modules import it (no test module imports another). It imports no torch:
the agents it starts do.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.etcd_local import LocalEtcd
from tests.integration.etcd_local import http as etcd_http

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("allreduce_worker.py")
STACK = "dev"
WORKER_PREFIX = "ALLREDUCE "  # allreduce_worker.PREFIX (not imported: the worker imports torch.distributed)

# Processes per node on the CPU. The job asks for 8 (the GPUs of a p4d.24xlarge); one per node is
# enough for a multi-node world and keeps 4 nodes at once within this machine's 2 cores.
LOCAL_NPROC = 1

# Time limits (seconds). Every subprocess has one; a passing run of the module takes about a minute.
PLAN_TIMEOUT = 120
ETCD_START_TIMEOUT = 15
RUN_TIMEOUT = 45  # one job run, from the agents' start to their exit

# training-operator v1.9.4: pkg/apis/kubeflow.org/v1/pytorch_types.go L23-29.
OPERATOR_CONTAINER = "pytorch"
OPERATOR_PORT_NAME = "pytorchjob-port"
OPERATOR_DEFAULT_PORT = 23456

NODE_TOKEN_VAR = "ELASTIC_IT_NODE_TOKEN"  # marks every process of one node, to kill the node as a whole


# ---------------------------------------------------------------------------------------------
# The environment the training operator gives a PyTorchJob's pods
# ---------------------------------------------------------------------------------------------


def operator_pod_env(job: Mapping[str, Any]) -> dict[str, str]:
    """The environment Kubeflow training-operator v1.9.4 gives the ``pytorch`` container of every Worker pod.

    A transcription of the operator's Go code at tag v1.9.4 (kubeflow/trainer, commit 4445c12a):

    - defaults, pkg/apis/kubeflow.org/v1/pytorch_defaults.go: replicas 1 and the container port
      ``pytorchjob-port`` 23456 (SetDefaults_PyTorchJob L86-90); minReplicas/maxReplicas from each other,
      or both from Worker.replicas (setElasticPolicy L38-55); spec.nprocPerNode ``auto`` unless it or the
      deprecated elasticPolicy.nProcPerNode is set (setDefaultNprocPerNode L68-74);
    - the webhook (pkg/webhooks/pytorch/pytorchjob_webhook.go L95-106) requires a Worker and forbids
      elasticPolicy.nProcPerNode together with spec.nprocPerNode;
    - pkg/controller.v1/pytorch/envvar.go setPodEnv L43-127: the container's own env, then
      PYTHONUNBUFFERED=1 (L56-60), then PET_NPROC_PER_NODE = spec.nprocPerNode (L99-104), then the
      elastic variables (L109-116);
    - pkg/controller.v1/pytorch/elastic.go Generate L68-122, in this order: PET_RDZV_ENDPOINT =
      ``rdzvHost`` (default ``<job>-worker-0``) ``:`` ``rdzvPort`` (default the ``pytorchjob-port``
      container port) (L146-169); PET_RDZV_BACKEND = rdzvBackend, default ``c10d`` (L186-197);
      PET_NNODES = ``min:max`` (L124-144); PET_MAX_RESTARTS if maxRestarts is set (L93-98);
      PET_NPROC_PER_NODE if elasticPolicy.nProcPerNode is set (L99-104); PET_RDZV_ID **only if rdzvId is
      set** (L105-110); PET_RDZV_CONF = ``k1=v1,k2=v2`` from rdzvConf (L171-184; an empty list makes
      the Go code slice ``val[:-1]`` and panic); PET_STANDALONE = ``""`` if standalone (L114-119).

    The kubelet gives a container the last value of a name listed twice, so later entries win. Jobs
    with a Master (MASTER_ADDR, WORLD_SIZE, RANK and an init container) are not modelled.
    """
    name = job["metadata"]["name"]
    spec = copy.deepcopy(job["spec"])
    worker, policy = _elastic_worker(name, spec)
    container = _operator_container(name, worker)
    # setPodEnv.
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        if "value" in item:  # valueFrom entries are the kubelet's business; none is a PET_* variable here
            env[item["name"]] = str(item["value"])
    env["PYTHONUNBUFFERED"] = "1"
    nproc = _default_nproc(name, spec, policy)
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = str(nproc)
    env.update(_elastic_env(name, policy, worker.get("replicas", 1), container))
    return env


def _elastic_worker(name: str, spec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Worker replica spec and the elasticPolicy, refusing the jobs the webhook refuses or that are
    not modelled here."""
    replica_specs = spec.get("pytorchReplicaSpecs") or {}
    if "Master" in replica_specs:
        raise NotImplementedError(f"PyTorchJob {name}: a Master replica is not modelled here")
    worker = replica_specs.get("Worker")
    if worker is None:
        raise ValueError(f"PyTorchJob {name}: the webhook requires a Worker replica spec with elasticPolicy")
    policy = spec.get("elasticPolicy")
    if policy is None:
        raise ValueError(f"PyTorchJob {name}: no elasticPolicy, so the operator sets no rendezvous variables")
    return worker, policy


def _operator_container(name: str, worker: Mapping[str, Any]) -> dict[str, Any]:
    containers = worker["template"]["spec"]["containers"]
    container = next((c for c in containers if c.get("name") == OPERATOR_CONTAINER), None)
    if container is None:
        raise ValueError(f"PyTorchJob {name}: the operator needs a container named {OPERATOR_CONTAINER!r}")
    return container


def _default_nproc(name: str, spec: Mapping[str, Any], policy: Mapping[str, Any]) -> Any:
    """spec.nprocPerNode after setDefaultNprocPerNode (None if only elasticPolicy.nProcPerNode is set)."""
    nproc = spec.get("nprocPerNode")
    if policy.get("nProcPerNode") is not None and nproc is not None:
        raise ValueError(f"PyTorchJob {name}: the webhook forbids elasticPolicy.nProcPerNode with spec.nprocPerNode")
    if nproc is None and policy.get("nProcPerNode") is None:
        nproc = "auto"
    return nproc


def _nnodes(policy: Mapping[str, Any], replicas: Any) -> str:
    """PET_NNODES, ``min:max`` after setElasticPolicy's defaults."""
    low, high = policy.get("minReplicas"), policy.get("maxReplicas")
    if low is None and high is None:
        low = high = replicas
    elif low is None:
        low = high
    elif high is None:
        high = low
    return f"{low}:{high}"


def _rdzv_endpoint(name: str, policy: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
    ports.setdefault(OPERATOR_PORT_NAME, OPERATOR_DEFAULT_PORT)
    host = policy.get("rdzvHost")
    port = policy.get("rdzvPort")
    return (
        f"{host if host is not None else f'{name}-worker-0'}:{port if port is not None else ports[OPERATOR_PORT_NAME]}"
    )


def _elastic_env(name: str, policy: Mapping[str, Any], replicas: Any, container: Mapping[str, Any]) -> dict[str, str]:
    """ElasticEnvVarGenerator.Generate, in its order."""
    env = {"PET_RDZV_ENDPOINT": _rdzv_endpoint(name, policy, container)}
    backend = policy.get("rdzvBackend")
    env["PET_RDZV_BACKEND"] = backend if backend is not None else "c10d"
    env["PET_NNODES"] = _nnodes(policy, replicas)
    if policy.get("maxRestarts") is not None:
        env["PET_MAX_RESTARTS"] = str(int(policy["maxRestarts"]))
    if policy.get("nProcPerNode") is not None:
        env["PET_NPROC_PER_NODE"] = str(int(policy["nProcPerNode"]))
    if policy.get("rdzvId") is not None:
        env["PET_RDZV_ID"] = str(policy["rdzvId"])
    conf = policy.get("rdzvConf")
    if conf is not None:
        if not conf:
            raise ValueError(
                f"PyTorchJob {name}: an empty elasticPolicy.rdzvConf makes operator v1.9.4 panic (val[:len(val)-1])"
            )
        env["PET_RDZV_CONF"] = ",".join(f"{c.get('key', '')}={c.get('value', '')}" for c in conf)
    if policy.get("standalone"):
        env["PET_STANDALONE"] = ""
    return env


def pet_env(env: Mapping[str, str]) -> dict[str, str]:
    """Only the PET_* variables (what torchrun reads), sorted, for messages."""
    return {k: env[k] for k in sorted(env) if k.startswith("PET_")}


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


class PlanError(Exception):
    """The offline plan refused the config or failed; the message is what it printed."""


def plan_dev_cli(out: Path) -> list[dict[str, Any]]:
    """The Kubernetes objects of the dev stack, from the plan's command line as a user runs it."""
    cmd = [sys.executable, "-m", "infra", "plan", "--stack", STACK, "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=PLAN_TIMEOUT)
    if proc.returncode != 0:
        raise PlanError(f"`{' '.join(cmd[1:])}` exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return [doc for doc in yaml.safe_load_all((out / "manifests.yaml").read_text()) if doc]


# Runs in a subprocess from the project root: only infra.plan.plan(stack, root) is relied on.
_PLAN_SNIPPET = """
import json, sys
from pathlib import Path
try:
    from infra.plan import plan
    _, result = plan(sys.argv[1], root=Path(sys.argv[2]))
    objects = result.kubernetes_objects()
except Exception as err:
    print(f"{type(err).__name__}: {err}", file=sys.stderr)
    sys.exit(2)
json.dump(objects, sys.stdout)
"""


def on_stack_etcd(jobs: list[dict[str, Any]]) -> None:
    """The first enabled elastic job on the stack's etcd (the default backend; the dev example's as shipped)."""
    for job in elastic_job_configs(jobs)[:1]:
        job.pop("rendezvous", None)


def plan_with_config(
    workdir: Path,
    change: Callable[[list[dict[str, Any]]], None],
    config: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """The Kubernetes objects of the dev stack, its elastic job ``on_stack_etcd``, with its ``jobs`` list
    changed by ``change``.

    Copies Pulumi.yaml and Pulumi.dev.yaml into ``workdir``, lets ``change`` edit the jobs list of the
    copy (and ``config``, if given, the whole ``config`` map, keys without the project prefix) and plans
    it with ``infra.plan.plan("dev", root=workdir)``; the project's files stay as they are.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    (workdir / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    stack_doc = yaml.safe_load((ROOT / f"Pulumi.{STACK}.yaml").read_text())
    jobs = stack_doc["config"].setdefault(f"{project['name']}:jobs", [])
    on_stack_etcd(jobs)
    change(jobs)
    if config is not None:
        prefix = f"{project['name']}:"
        plain = {k.removeprefix(prefix): v for k, v in stack_doc["config"].items()}
        config(plain)
        stack_doc["config"] = {(k if ":" in k else prefix + k): v for k, v in plain.items()}
    (workdir / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(stack_doc, sort_keys=False))
    proc = subprocess.run(
        [sys.executable, "-c", _PLAN_SNIPPET, STACK, str(workdir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PLAN_TIMEOUT,
    )
    if proc.returncode != 0:
        raise PlanError(proc.stderr.strip()[-2000:])
    return json.loads(proc.stdout)


def elastic_job_configs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The enabled ``pytorch-elastic`` entries of a stack's jobs list."""
    return [j for j in jobs if j.get("kind") == "pytorch-elastic" and j.get("enabled", True) is not False]


def elastic_pytorch_jobs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The PyTorchJobs (kubeflow.org/v1) with an elasticPolicy among the plan's objects."""
    return [
        o
        for o in objects
        if o.get("kind") == "PyTorchJob"
        and o.get("apiVersion") == "kubeflow.org/v1"
        and (o.get("spec") or {}).get("elasticPolicy") is not None
    ]


def require_elastic_jobs(objects: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    """The elastic PyTorchJobs of a plan; fails the test, saying why, when there is none."""
    jobs = elastic_pytorch_jobs(objects)
    if not jobs:
        pytest.fail(
            f"{what} emits no PyTorchJob (kubeflow.org/v1) with spec.elasticPolicy: this test needs an enabled "
            f"`kind: pytorch-elastic` job in Pulumi.{STACK}.yaml (gpu-training:jobs)"
        )
    for job in jobs:
        command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].get("command") or []
        launcher = " ".join(command[:3])
        assert command[:1] == ["torchrun"] or launcher.endswith("-m torch.distributed.run"), (
            f"PyTorchJob {job['metadata']['name']} runs {command!r}: the PET_* "
            "variables the operator sets are read only by torchrun"
        )
    return jobs


def find_object(
    objects: list[dict[str, Any]], kind: str, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """The object of this kind and name (and namespace, if given) in the plan, if any."""
    for o in objects:
        meta = o.get("metadata") or {}
        if (
            o.get("kind") == kind
            and meta.get("name") == name
            and (namespace is None or meta.get("namespace") == namespace)
        ):
            return o
    return None


def rendezvous_target(pod_env: Mapping[str, str], objects: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    """The etcd StatefulSet and its container port that PET_RDZV_ENDPOINT reaches through a Service of the plan.

    Checks the chain the rewrite to a local etcd stands for: ``<service>.<namespace>.svc:<port>`` names a
    Service of the plan, which selects the pods of the StatefulSet named ``etcd``, and whose port leads to
    a container port of that StatefulSet.
    """
    endpoint = pod_env["PET_RDZV_ENDPOINT"]
    host, _, port_text = endpoint.rpartition(":")
    parts = host.split(".")
    assert len(parts) >= 3 and parts[2] == "svc", (
        f"PET_RDZV_ENDPOINT {endpoint!r} is not <service>.<namespace>.svc:<port>"
    )
    service = find_object(objects, "Service", parts[0], parts[1])
    assert service is not None, (
        f"PET_RDZV_ENDPOINT {endpoint!r} names Service {parts[1]}/{parts[0]}, which the plan does not create"
    )
    sts = find_object(objects, "StatefulSet", "etcd", parts[1])
    assert sts is not None, (
        f"the plan has no StatefulSet etcd in namespace {parts[1]!r} for PET_RDZV_ENDPOINT {endpoint!r}"
    )
    labels = sts["spec"]["template"]["metadata"].get("labels") or {}
    selector = service["spec"].get("selector") or {}
    assert selector and all(labels.get(k) == v for k, v in selector.items()), (
        f"Service {parts[0]} (selector {selector}) does not select the etcd StatefulSet's pods (labels {labels})"
    )
    sport = next((p for p in service["spec"].get("ports") or [] if p.get("port") == int(port_text)), None)
    assert sport is not None, f"Service {parts[0]} has no port {port_text} (PET_RDZV_ENDPOINT {endpoint!r})"
    target = sport.get("targetPort", sport["port"])
    container = _etcd_container(sts)
    for p in container.get("ports") or []:
        if target in (p.get("name"), p.get("containerPort")):
            return sts, int(p["containerPort"])
    raise AssertionError(
        f"Service {parts[0]} port {port_text} targets {target!r}, which is no port of the etcd container"
    )


# ---------------------------------------------------------------------------------------------
# etcd, started with the StatefulSet's own arguments
# ---------------------------------------------------------------------------------------------


def _etcd_container(sts: Mapping[str, Any]) -> dict[str, Any]:
    containers = sts["spec"]["template"]["spec"]["containers"]
    return next((c for c in containers if c.get("name") == "etcd"), containers[0])


@dataclass
class EtcdServer:
    """A running etcd StatefulSet (tests/integration/etcd_local.py) and the client endpoint of member 0."""

    endpoint: str
    cluster: LocalEtcd

    def stop(self) -> None:
        self.cluster.close()


def start_etcd(sts: Mapping[str, Any], objects: list[dict[str, Any]], client_port: int, workdir: Path) -> EtcdServer:
    """Start the etcd StatefulSet as its pods run it (init container, then etcd) on loopback; wait until
    every member is healthy and serves the v2 API.

    ``client_port`` is the container port the rendezvous Service leads to; member 0's is the endpoint.
    """
    cluster = LocalEtcd(sts, objects, workdir)
    assert cluster.client_port == client_port, (
        f"the rendezvous Service leads to port {client_port}, etcd's client port is {cluster.client_port}"
    )
    try:
        cluster.start_all()
        config = json.loads(next((cluster.members[0].root / "volumes").glob("*/etcd.json")).read_text())
        assert config.get("enable-v2") is True, (
            f"the etcd StatefulSet does not enable the v2 API that torch's etcd rendezvous uses: {config}"
        )
        status, _ = etcd_http(f"http://{cluster.endpoint(0)}/v2/keys/")
        assert status == 200, f"etcd does not serve the v2 API (status {status})"
    except BaseException:
        cluster.close()
        raise
    return EtcdServer(cluster.endpoint(0), cluster)


# ---------------------------------------------------------------------------------------------
# Nodes: one torchrun agent each
# ---------------------------------------------------------------------------------------------


def local_overrides(etcd: EtcdServer) -> dict[str, str]:
    """The only changes to the operator's environment, each because this is one CPU machine, not EKS."""
    return {
        # etcd.training.svc:2379 is the Service in front of the etcd StatefulSet (rendezvous_target checks
        # that); that etcd runs here on loopback.
        "PET_RDZV_ENDPOINT": etcd.endpoint,
        # The job asks for 8 processes per node, one per GPU of a p4d.24xlarge; see LOCAL_NPROC.
        "PET_NPROC_PER_NODE": str(LOCAL_NPROC),
        # Rank 0's agent publishes MASTER_ADDR = local_addr or socket.getfqdn() (the pod's name in EKS).
        "PET_LOCAL_ADDR": "127.0.0.1",
        # gloo chooses its network interface from the hostname; keep it on loopback.
        "GLOO_SOCKET_IFNAME": "lo",
    }


def pids_with_token(token: str) -> list[int]:
    """Processes whose environment carries this node's token: the agent and every worker it started."""
    needle = f"{NODE_TOKEN_VAR}={token}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@dataclass
class Node:
    """One torchrun agent standing in for one pod of a PyTorchJob; its output goes to ``log``."""

    label: str
    job: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    process: subprocess.Popen[bytes] | None = None
    killed: bool = False

    def start(self) -> Node:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                self.argv,
                env={**self.env, NODE_TOKEN_VAR: self.token},
                cwd=self.log.parent,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def kill(self) -> None:
        """SIGKILL the agent and all its workers at once, as when a pod dies.

        torchrun starts each worker in a session of its own, so the agent's process group is not enough:
        every process carrying this node's token goes.
        """
        self.killed = True
        for _ in range(5):
            pids = pids_with_token(self.token)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)

    def wait(self, deadline: float) -> int | None:
        """The agent's exit code, or None if it is still running at ``deadline`` (time.monotonic)."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return None

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def records(self, phase: str | None = None) -> list[dict[str, Any]]:
        """The lines the workers printed (allreduce_worker.report), optionally of one phase."""
        found = [
            json.loads(line[len(WORKER_PREFIX) :])
            for line in self.output.splitlines()
            if line.startswith(WORKER_PREFIX)
        ]
        return [r for r in found if phase is None or r["phase"] == phase]

    def diagnosis(self) -> str:
        """What went on in this node, in a few lines, for failure messages."""
        text = self.output
        run_ids = sorted(set(re.findall(r"/torchelastic/p2p/run_([^/'\"]+)/", text)))
        rounds = re.findall(r"Rendezvous version (\d+) is complete", text)
        errors = sorted(set(re.findall(r"\b(Rendezvous\w*Error|ChildFailedError)\b", text)))
        stops = len(re.findall(r"closing signal SIGTERM", text))
        waits = len(re.findall(r"Added self to waiting list", text))
        rc = (
            "killed by the test"
            if self.killed
            else ("still running" if self.returncode is None else f"exit {self.returncode}")
        )
        lines = [
            f"  {self.label} ({self.job}, {rc}): etcd run ids {run_ids or '?'}; "
            f"rendezvous rounds completed {rounds or 'none'}; "
            f"waited for a round {waits}x; worker groups stopped {stops}x; errors {errors or 'none'}"
        ]
        if "in lease_worker" in text and "Not a file" in text:
            lines.append(
                "    (the agent's run-id lease thread died at start: etcd answers 'Not a "
                "file' to python-etcd's refresh of the run-id directory)"
            )
        for r in self.records():
            lines.append(
                f"    worker {r['phase']}: run_id={r['run_id']} job={r['job']} rank={r['rank']}/{r['world_size']} "
                f"restart_count={r['restart_count']} peer_jobs={r['peer_jobs']} ok={r['ok']}"
            )
        if not self.records():
            tail = [line for line in text.splitlines() if line.strip()][-6:]
            lines += [f"    | {line[:200]}" for line in tail]
        return "\n".join(lines)


class Launcher:
    """Starts nodes against one etcd and makes sure none outlives the test."""

    def __init__(self, workdir: Path, etcd: EtcdServer):
        self.workdir = workdir
        self.etcd = etcd
        self.nodes: list[Node] = []

    def start(self, label: str, job: str, pod_env: Mapping[str, str], marker: str, sleep_until: float = 0.0) -> Node:
        """Start one agent: ``python -m torch.distributed.run allreduce_worker.py ...`` with the pod's env.

        The pod runs ``torchrun <the job's script and args>``; here the same launcher runs the tiny
        all-reduce script instead, with no rendezvous flags: torchrun takes each ``--x-y`` default from
        ``PET_X_Y`` (torch/distributed/argparse_util.py, class env).
        """
        node_dir = self.workdir / label
        node_dir.mkdir(parents=True, exist_ok=True)
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PET_", "TORCHELASTIC_")) and k not in ("MASTER_ADDR", "MASTER_PORT")
        }
        env = {**inherited, **pod_env, **local_overrides(self.etcd), "TMPDIR": str(node_dir)}
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            str(WORKER),
            "--job",
            job,
            "--run-marker",
            marker,
            "--sleep-until",
            f"{sleep_until:.3f}",
        ]
        node = Node(label, job, argv, env, node_dir / "torchrun.log").start()
        self.nodes.append(node)
        return node

    def start_job(self, job: Mapping[str, Any], marker: str, sleep_until: float = 0.0) -> list[Node]:
        """Start one node per Worker the job can scale to (elasticPolicy max), all with the same env."""
        name = job["metadata"]["name"]
        pod_env = operator_pod_env(job)
        return [self.start(f"{name}-worker-{i}", name, pod_env, marker, sleep_until) for i in range(job_nodes(job))]

    def close(self) -> None:
        for node in self.nodes:
            if (node.process is not None and node.process.poll() is None) or pids_with_token(node.token):
                node.kill()


def job_nodes(job: Mapping[str, Any]) -> int:
    """Nodes to run for a job: the Worker pods the operator creates (``Worker.replicas``), which must be
    the elastic maximum (PET_NNODES max): an elastic job starts big and shrinks when nodes go."""
    high = int(operator_pod_env(job)["PET_NNODES"].split(":")[-1])
    workers = int(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])
    assert workers == high, f"PyTorchJob {job['metadata']['name']} starts {workers} worker(s), not its maximum {high}"
    assert high >= 2, (
        f"PyTorchJob {job['metadata']['name']} allows at most {high} node(s): "
        f"PET_NNODES {operator_pod_env(job)['PET_NNODES']!r}"
    )
    return high


def wait_all(nodes: list[Node], timeout: float) -> dict[str, int | None]:
    """Wait for the agents to exit; label -> exit code (None: still running after ``timeout``, then killed)."""
    deadline = time.monotonic() + timeout
    codes = {n.label: n.wait(deadline) for n in nodes}
    for n in nodes:
        if codes[n.label] is None:
            n.kill()
    return codes


def job_problems(job: str, nodes: list[Node], codes: Mapping[str, int | None], expected_world: int) -> list[str]:
    """What is wrong with one job's run: agents that failed, and a final world that is not the job's own."""
    problems = []
    for n in nodes:
        if codes.get(n.label) != 0:
            problems.append(
                f"{n.label}: torchrun {'timed out' if codes.get(n.label) is None else f'exited {codes.get(n.label)}'}"
            )
    # A worker prints "done" once, after its last all-reduce, and exits 0 only if its checks passed; a
    # node killed or restarted before that prints none, so these are the workers of the completed world.
    done = [r for n in nodes for r in n.records("done")]
    worlds = {r["world_size"] for r in done}
    ranks = sorted(r["rank"] for r in done)
    if any(not r["ok"] for n in nodes for r in n.records()):
        problems.append(f"{job}: a worker saw a world that is not its job's alone, or a wrong all-reduce sum")
    if worlds != {expected_world} or ranks != list(range(expected_world)):
        problems.append(
            f"{job}: finished workers report world sizes {sorted(worlds)} and ranks {ranks}; "
            f"expected world {expected_world}, ranks 0..{expected_world - 1}"
        )
    if len({r["run_id"] for r in done}) > 1:
        problems.append(f"{job}: finished workers report different run ids {sorted({r['run_id'] for r in done})}")
    return problems


def report(title: str, problems: list[str], nodes: list[Node], notes: list[str] | None = None) -> str:
    """A failure message: the problems, notes, and what each node did."""
    parts = [title, *[f"- {p}" for p in problems], *(notes or []), "nodes:", *[n.diagnosis() for n in nodes]]
    return "\n".join(parts)
