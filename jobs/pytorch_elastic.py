"""``pytorch-elastic``: PyTorch DDP with TorchElastic as a ``kubeflow.org/v1`` PyTorchJob with
``elasticPolicy``, rendezvousing on the stack's etcd (or c10d). The training operator sets the
PET_* variables torchrun reads (rendezvous backend, endpoint and id, nnodes min:max, nproc per
node, max restarts).

The rendezvous id is unique per job and per run (``<name>-<run>-<spec hash>``): torchrun's default
id is ``none``, under which every job on the stack's etcd would meet in one world, and a second run
would find the first run's closed rendezvous (``RendezvousClosedError``). The job starts
``maxNodes`` workers; elastic means it keeps going down to ``minNodes`` when nodes are lost."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from facts.instance_types import InstanceType
from facts.operators import PYTORCHJOB, TRAINING_OPERATOR
from facts.problems import Problem
from jobs import launchers, pod, python_etcd
from jobs import slow_node as slow_node_spec
from jobs.base import Int32, Manifest
from jobs.launchers import Derived
from jobs.resilience import GUARD_PATH, GUARD_PYTHON, ResilientJob
from jobs.sagemaker import PortableJob
from jobs.targets import GroupFacts, JobBuildError, JobEnvironment, JobsContext
from jobs.trainjob import OnTrainer

TRAINING_API_VERSION = PYTORCHJOB.api_version  # the training operator's (facts/operators.py)
# The backends that rendezvous on the stack's etcd; PyTorch's code for both imports python-etcd.
ETCD_BACKENDS = ("etcd", "etcd-v2")
# The port of c10d's rendezvous on worker 0: the training operator's default `pytorchjob-port`
# (pkg/apis/kubeflow.org/v1/pytorch_defaults.go; the stack sets no port of its own).
PYTORCHJOB_PORT = 23456
# What torchrun gives its workers (TORCH_ELASTIC_SHUTDOWN_TIMEOUT, read by torch 2.13; older torchruns wait a fixed
# 30 s) between SIGTERM and SIGKILL when the pod is stopped: the pod's grace period less this margin, for torchrun's own
# exit.
SHUTDOWN_MARGIN = 10
# c10d: each rendezvous round gets a new TCPStore for the workers (rank 0's, on a free port) instead of the one
# torchrun keeps for the whole run on the agent that hosted round 0: that store holds the earlier rounds'
# keys (MASTER_ADDR among them), so a restarted group could read stale addresses and hang in
# init_process_group or fail with DistStoreError, depending on which node came back first. torch 2.13
# torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, DynamicRendezvousHandler.use_agent_store
# and next_rendezvous ("opt-out option of TCPStore sharing": RendezvousStoreInfo.build per round).
C10D_OWN_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


class PyTorchElasticSpec(PortableJob, ResilientJob, OnTrainer):
    """PyTorch DDP with TorchElastic as a PyTorchJob with elasticPolicy. ``nodes`` is the number of
    workers to start with; min/max default to it (fixed size) and ``nodes`` defaults to minNodes.
    With ``runtime: sagemaker``, a SageMaker training job whose framework container starts torchrun
    on every instance (``sagemaker_torch_distributed_enabled``), on maxNodes instances."""

    OPERATOR = TRAINING_OPERATOR
    # `operator: trainer`: a TrainJob on the group's torch runtime (jobs/trainjob.py), fixed size only.
    TRAINER_FRAMEWORK = "torch"
    RESERVED_ENV = {**ResilientJob.RESERVED_ENV, **launchers.torchrun_env()}
    LAUNCHERS = (("torchrun",), ("python", "-m", "torch.distributed.run"))
    LAUNCHER_TEXT = "[torchrun, /path/train.py, --name, value...] (SageMaker's container sets torchrun's own options)"

    kind: Literal["pytorch-elastic"] = Field(description="`pytorch-elastic`")
    image: str = Field(description="the training image (with the etcd backends the stack ships `python-etcd`)")
    command: list[str] = Field(min_length=1, description="the entry point, e.g. `[torchrun, /workspace/train.py]`")
    min_nodes: Int32 | None = Field(None, ge=1, description="fewest nodes the job keeps running with (default: nodes)")
    max_nodes: Int32 | None = Field(None, ge=1, description="most nodes (default: nodes)")
    max_restarts: Int32 = Field(3, ge=0, description="restarts of the worker group torchrun allows")
    resources_per_node: dict[str, dict[str, str | int]] | None = Field(
        None,
        description="with `operator: trainer` on a group without EFA only: the TrainJob's "
        "`trainer.resourcesPerNode`, which replaces the runtime's resources (refused on EFA groups)",
    )
    rendezvous: Literal["etcd", "etcd-v2", "c10d"] = Field(
        "etcd",
        description=(
            "rendezvous backend: `etcd`/`etcd-v2` on the stack's etcd (the stack ships `python-etcd` to the workers) "
            "or `c10d` on worker 0"
        ),
    )

    slow_node: slow_node_spec.SlowNode | None = Field(
        None,
        description=(
            "slow-node detection (docs/performance.md): the ranks write their step times to GPUTRAINING_STEP_FILE; a "
            "node `factor` times slower than the others for `windows` windows is reported, tainted and, for an "
            "elastic job or one with checkpoints, left (its pod deleted)"
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _nodes_default_to_min(cls, data: Any) -> Any:
        if isinstance(data, dict) and "nodes" not in data:
            low = data.get("minNodes", data.get("min_nodes"))
            if isinstance(low, int) and not isinstance(low, bool):
                data = {**data, "nodes": low}
        return data

    @property
    def elastic_min(self) -> int:
        return self.min_nodes if self.min_nodes is not None else self.nodes

    @property
    def elastic_max(self) -> int:
        return self.max_nodes if self.max_nodes is not None else max(self.nodes, self.elastic_min)

    def max_workers(self) -> int:
        return max(self.elastic_max, self.nodes)

    def entry_line(self) -> list[str]:
        return list(self.command) + list(self.args)

    def node_checks(self) -> list[str]:
        """The slow-node check's guard options; the job restarts without a slow node when it can go on without it
        (elastic: minNodes below maxNodes) or resume (checkpoints)."""
        if self.slow_node is None or self.runtime != "eks":
            return []
        return slow_node_spec.guard_options(
            self.slow_node, self.elastic_min < self.elastic_max or self.checkpoints is not None
        )

    def sagemaker_distribution(self, instance: InstanceType, environment: Mapping[str, str]) -> dict[str, Any]:
        return {"sagemaker_torch_distributed_enabled": True}

    @property
    def rendezvous_id(self) -> str:
        """Unique per job, per run and per spec: ``<name>-<run>-<first 8 hex of the spec's sha256>``
        (the SageMaker-only fields are left out: they do not change the EKS job)."""
        return f"{self.name}-{self.run}-{self.spec_digest(exclude=frozenset({'runtime', 'sagemaker'}))}"

    def pod_hostnames(self) -> list[str]:
        return [f"{self.name}-worker-{self.max_workers() - 1}"]

    def check(self, key: str, problems: list[Problem]) -> None:
        super().check(key, problems)
        low, high = self.elastic_min, self.elastic_max
        if low > high:
            problems.append(Problem(f"{key}.minNodes", f"{low} is greater than maxNodes {high}"))
        elif not low <= self.nodes <= high:
            problems.append(
                Problem(
                    f"{key}.nodes",
                    f"{self.nodes} is outside minNodes..maxNodes ({low}..{high}); the job starts with this many nodes",
                )
            )
        self._check_secret_pythonpath(key, problems)
        if self.slow_node is not None:
            for name, message in slow_node_spec.problems_of(self.slow_node):
                problems.append(Problem(f"{key}.slowNode.{name}", message))
            if self.runtime != "eks":
                problems.append(
                    Problem(
                        f"{key}.slowNode", "is not allowed with runtime 'sagemaker': it runs in the job's pods on EKS"
                    )
                )
            elif self.max_workers() < 2:
                problems.append(Problem(f"{key}.slowNode", "needs a job of 2 nodes or more: it compares the nodes"))

    def trainer_problems(self) -> list[tuple[str, str]]:
        out = super().trainer_problems()
        if self.elastic_min != self.elastic_max:
            out.append(
                (
                    "minNodes",
                    f"a range ({self.elastic_min}..{self.elastic_max}) is not allowed with operator 'trainer': Trainer "
                    "v2.2 has no elastic training (it removed ElasticPolicy, kubeflow/trainer#3235; "
                    "kubeflow/trainer#2903); give a fixed size (nodes) or keep the job on the training operator",
                )
            )
        if self.rendezvous in ETCD_BACKENDS:
            out.append(
                (
                    "rendezvous",
                    f"{self.rendezvous!r} is not allowed with operator 'trainer': Trainer's torch runtime has torchrun "
                    "meet on node 0 (PET_MASTER_ADDR/PET_MASTER_PORT, trainer v2.2.1 "
                    "pkg/runtime/framework/plugins/torch/torch.go); set rendezvous: c10d",
                )
            )
        return out

    def derived_env(self) -> dict[str, str]:
        env = self._worker_env()
        if self.on_trainer:  # the training operator sets it from elasticPolicy; Trainer's torch plugin does not
            env["PET_MAX_RESTARTS"] = str(self.max_restarts)
        return env

    def _check_secret_pythonpath(self, key: str, problems: list[Problem]) -> None:
        """On the stack's etcd the container's PYTHONPATH starts with the shipped python-etcd
        (jobs/python_etcd.py) followed by the job's own; a value from a Secret cannot be joined to it."""
        if self.runtime == "eks" and self.rendezvous in ETCD_BACKENDS and python_etcd.PYTHONPATH in self.secret_env:
            problems.append(
                Problem(
                    f"{key}.secretEnv.{python_etcd.PYTHONPATH}",
                    f"is not allowed with rendezvous {self.rendezvous!r}: the stack puts its python-etcd "
                    f"({python_etcd.MOUNT}) first on PYTHONPATH and appends the job's own from `env`; set PYTHONPATH "
                    "in `env`",
                )
            )

    def read_only_mounts(self) -> list[tuple[str, str]]:
        found = super().read_only_mounts()
        if self.runtime == "eks" and self.rendezvous in ETCD_BACKENDS:
            found.append((python_etcd.MOUNT, "the shipped python-etcd (a ConfigMap, mounted read-only)"))
        return found

    def check_environment(self, key: str, problems: list[Problem], env: JobEnvironment) -> None:
        if self.runtime == "eks" and self.rendezvous in ETCD_BACKENDS and not env.etcd_enabled:
            problems.append(
                Problem(
                    f"{key}.rendezvous",
                    f"{self.rendezvous!r} needs the stack's etcd, which is disabled; enable etcd or use rendezvous "
                    "'c10d'",
                )
            )
        super().check_environment(key, problems, env)

    def check_group(self, key: str, problems: list[Problem], group: GroupFacts) -> None:
        super().check_group(key, problems, group)
        if self.elastic_max > group.max_size:
            problems.append(
                Problem(
                    f"{key}.maxNodes",
                    f"{self.elastic_max} is more than node group {group.name!r} can hold (maxSize {group.max_size})",
                )
            )
        self._check_torchrun_options(key, problems, group)

    def _check_torchrun_options(self, key: str, problems: list[Problem], group: GroupFacts) -> None:
        """torchrun's options in command/args against the PET_* variables the training operator
        sets (``jobs/launchers.py``)."""
        found = launchers.launches(self.entry_line(), launchers.torchrun_start)
        if not found:
            return
        gpus, it = group.instance.gpus, group.instance.name
        operator = "the training operator sets it as"
        endpoint = (
            f"{self.name}-worker-0:{PYTORCHJOB_PORT}"
            if self.rendezvous == "c10d"
            else "the stack's etcd (rdzvHost:rdzvPort)"
        )
        derived = {
            "nproc_per_node": Derived(
                str(gpus),
                f"the GPUs of one {it} node of group {group.name!r}; {operator} PET_NPROC_PER_NODE",
                launchers.ranks_without_gpu(gpus),
            ),
            "nnodes": Derived(f"{self.elastic_min}:{self.elastic_max}", f"minNodes:maxNodes; {operator} PET_NNODES"),
            "rdzv_backend": Derived(self.rendezvous, f"rendezvous; {operator} PET_RDZV_BACKEND"),
            "rdzv_endpoint": Derived(endpoint, f"{operator} PET_RDZV_ENDPOINT"),
            "rdzv_id": Derived(self.rendezvous_id, f"one per job, run and spec; {operator} PET_RDZV_ID"),
            "max_restarts": Derived(str(self.max_restarts), f"maxRestarts; {operator} PET_MAX_RESTARTS"),
            "standalone": Derived(
                f"a {self.rendezvous} rendezvous across the job's nodes",
                "--standalone would rendezvous on localhost, each node alone",
            ),
        }
        for launch in found:
            launchers.derived_option_problems(
                launchers.torchrun_options(launch.line, launch.start),
                derived,
                "torchrun",
                launchers.torchrun_label,
                self._key_in(key, launch.script_at),
                problems,
            )

    def _key_in(self, key: str, script_at: int | None) -> Callable[[int], str]:
        """The key of an option at ``at`` of command + args, or of the shell script (at ``script_at``) that holds it."""
        return lambda at: self.line_key(key, at if script_at is None else script_at)

    def line_key(self, key: str, at: int) -> str:
        """The key of item ``at`` of command + args."""
        commands = len(self.command)
        return f"{key}.command[{at}]" if at < commands else f"{key}.args[{at - commands}]"

    def worker_line(self, efa_interfaces: int = 0) -> tuple[list[str], list[str]]:
        """The ``pytorch`` container's command and args: the job's own, or with the progress guard
        (``jobs/resilience.py``) around each worker: torchrun starts the guard as its training script
        (``python -u progress_guard.py``) and the guard starts the job's script with the same interpreter."""
        if not self.guarded(efa_interfaces):
            return list(self.command), list(self.args)
        line = self.entry_line()
        start = launchers.torchrun_start(line)
        if start is None:  # not torchrun: the guard wraps the whole command
            return self.guard_command(list(self.command), efa_interfaces), list(self.args)
        at, options = launchers.torchrun_script(line, start)
        given = {w.option: w.at for w in options}
        guard = [*self.guard_options(efa_interfaces), "--same-python", "--"]
        if "no_python" in given:  # torchrun runs the command as it is: the guard starts it as it is
            return [*line[:at], GUARD_PYTHON, GUARD_PATH, *guard[:-2], "--"], list(line[at:])
        if "module" in given:  # `-m module`: the guard runs `python -u -m module`
            head = [a for i, a in enumerate(line[:at]) if i != given["module"]]
            return [*head, GUARD_PATH, *guard, "-m"], list(line[at:])
        return [*line[:at], GUARD_PATH, *guard], list(line[at:])

    def _worker_env(self) -> dict[str, str]:
        """Env of the workers besides the job's: the checkpoint directory, torchrun's time to stop them, and
        with c10d a rendezvous store of its own (C10D_OWN_STORE)."""
        env = self.resilience_env()
        if self.checkpoints is not None:
            env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(self.checkpoints.grace_period_seconds - SHUTDOWN_MARGIN)
        if self.rendezvous == "c10d":
            env.update(C10D_OWN_STORE)
        return env

    def build(self, ctx: JobsContext) -> list[Manifest]:
        w = pod.gpu_worker(self, ctx, self.derived_env())
        # The training operator requires a container named "pytorch"; it sets PET_* (rendezvous,
        # nnodes min:max, nproc per node, max restarts) for torchrun / torch.distributed.run.
        command, args = self.worker_line(w.efa_interfaces)
        container = w.container("pytorch", command, args)
        worker_pod = w.pod_spec([container])
        self.equip(worker_pod, container, ctx)
        shipped: list[Manifest] = []
        if self.rendezvous in ETCD_BACKENDS:  # torchrun's agent imports python-etcd: the stack ships it
            python_etcd.equip(self.name, worker_pod, container)
            shipped.append(python_etcd.config_map(self.name, ctx.namespace, pod.labels(self)))
        policy: dict[str, Any] = {
            "rdzvBackend": self.rendezvous,
            "rdzvId": self.rendezvous_id,
            "minReplicas": self.elastic_min,
            "maxReplicas": self.elastic_max,
            "maxRestarts": self.max_restarts,
        }
        if self.rendezvous in ETCD_BACKENDS:
            if not ctx.etcd_endpoint:
                raise JobBuildError(
                    f"job {self.name!r}: rendezvous {self.rendezvous!r} needs the stack's etcd, which is off"
                )
            policy["rdzvHost"], policy["rdzvPort"] = etcd_host_port(ctx.etcd_endpoint)
        # c10d: the operator points the rendezvous at <name>-worker-0.
        return [
            *self.guard_config_map(ctx),
            *shipped,
            {
                "apiVersion": TRAINING_API_VERSION,
                "kind": PYTORCHJOB.kind,
                "metadata": pod.metadata(self, ctx),
                "spec": {
                    "nprocPerNode": str(w.target.gpus),
                    "elasticPolicy": policy,
                    # Running: a finished or failed job frees its GPU nodes at once.
                    "runPolicy": {"cleanPodPolicy": "Running", **self.bounds()},
                    # Only Worker replicas: elasticPolicy rendezvous needs no Master. It starts with
                    # maxNodes workers and goes on while at least minNodes are left.
                    PYTORCHJOB.replica_specs: {
                        "Worker": {
                            "replicas": self.elastic_max,
                            "restartPolicy": "OnFailure",
                            "template": pod.template(self, worker_pod, "worker", ctx),
                        }
                    },
                },
            },
        ]


def etcd_host_port(endpoint: str) -> tuple[str, int]:
    """``host:port`` (with or without a scheme) split for elasticPolicy's rdzvHost/rdzvPort."""
    text = endpoint.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise JobBuildError(f"etcd endpoint {endpoint!r} is not host:port")
    return host, int(port)
