"""A model of how Kubeflow Trainer v2.2.1 makes a TrainJob's JobSet of its ClusterTrainingRuntime, for the
TrainJobs the stack writes (a torch runtime with one ``node`` replicated job), and the comparison of the pods
it gives with those of the job's legacy object.

What Trainer does, in order (kubeflow/trainer at tag v2.2.1):

1. ``pkg/runtime/core/trainingruntime.go``, ``newRuntimeInfo`` and ``mergeRuntimePatches``: the runtime's
   JobSet template, each of the TrainJob's ``runtimePatches`` merged into the replicated job of its name as a
   strategic merge patch of a ``batchv1.JobTemplateSpec`` (lists merged by their patch keys: volumes and
   containers by name, volume mounts by mountPath, env by name);
2. ``pkg/runtime/framework/plugins/torch/torch.go``, ``EnforceMLPolicy``: the trainer pod set's count is
   ``trainer.numNodes``; the ``node`` container gets ``trainer.env`` (upserted), then PET_NNODES,
   PET_NPROC_PER_NODE (``trainer.numProcPerNode``, else "auto"), PET_NODE_RANK (the Job's completion index),
   PET_MASTER_ADDR (``<name>-node-0-0.<name>``), PET_MASTER_PORT (29500) and the container port 29500;
3. ``pkg/runtime/framework/plugins/jobset/jobset.go``, ``Build``: each replicated job's parallelism and
   completions are its pod set's count; the plugins' env and ports upserted into the containers;
4. ``pkg/runtime/framework/plugins/jobset/builder.go``, ``Builder.Trainer``: the trainer job has one replica,
   its ``node`` container takes ``trainer.image``, ``command`` and ``args``, and ``trainer.resourcesPerNode``,
   when given, *replaces* the container's resources (``WithResources``): what drops the EFA devices.

Upsert (``pkg/apply``, ``UpsertEnvVars``, ``UpsertPort``): an entry of the same name (port) is replaced in
place, a new one appended.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs import trainjob, trainjob_runtimes
from jobs import trainjob_merge_mpi as mpi_model
from jobs.base import Manifest
from jobs.targets import JobBuildError, JobTarget
from jobs.trainjob_merge_mpi import upsert

# Trainer's torch plugin (pkg/constants/constants.go at v2.2.1).
TORCH_PORT = 29500
PET_NNODES, PET_NPROC, PET_RANK, PET_ADDR, PET_PORT = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
TORCH_ENV = (PET_NNODES, PET_NPROC, PET_RANK, PET_ADDR, PET_PORT)
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# The strategic-merge keys of the lists the stack's patches hold (k8s.io/api core/v1 types.go patchMergeKey).
MERGE_KEYS = {
    "volumes": "name",
    "containers": "name",
    "initContainers": "name",
    "volumeMounts": "mountPath",
    "env": "name",
}


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    """``patch`` merged into ``base`` as a strategic merge patch does for the fields above: maps merged key by key,
    keyed lists merged entry by entry, any other value replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for k, v in patch.items():
            out[k] = strategic_merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return out
    key = MERGE_KEYS.get(field)
    if key and isinstance(base, list) and isinstance(patch, list):
        out_list = copy.deepcopy(base)
        for item in patch:
            at = next((i for i, b in enumerate(out_list) if b.get(key) == item.get(key)), None)
            if at is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[at] = strategic_merge(out_list[at], item)
        return out_list
    return copy.deepcopy(patch)


def jobset(runtime: Manifest, job: Manifest) -> Manifest:
    """The JobSet Trainer v2.2.1 makes of ``job`` on ``runtime`` (a torch runtime with a ``node`` trainer job)."""
    template = copy.deepcopy(runtime["spec"]["template"])
    labels: dict[str, str] = dict(template.get("metadata", {}).get("labels") or {})
    annotations: dict[str, str] = {}
    for p in job["spec"].get("runtimePatches") or []:
        patch = ((p.get("trainingRuntimeSpec") or {}).get("template")) or {}
        labels.update((patch.get("metadata") or {}).get("labels") or {})
        annotations.update((patch.get("metadata") or {}).get("annotations") or {})
        for rj in (patch.get("spec") or {}).get("replicatedJobs") or []:
            for have in template["spec"]["replicatedJobs"]:
                if have["name"] == rj["name"] and rj.get("template"):
                    have["template"] = strategic_merge(have["template"], rj["template"])
    trainer = job["spec"].get("trainer") or {}
    name = job["metadata"]["name"]
    if mpi_model.MPI in runtime["spec"]["mlPolicy"]:
        mpi_model.enforce(template["spec"]["replicatedJobs"], runtime["spec"]["mlPolicy"], trainer, name)
    for rj in template["spec"]["replicatedJobs"]:
        if (rj["template"].get("metadata") or {}).get("labels", {}).get(trainjob.ANCESTOR_LABEL) != "trainer":
            continue
        if mpi_model.MPI in runtime["spec"]["mlPolicy"]:
            mpi_model.trainer_step(rj, trainer)
            continue
        count = trainer.get("numNodes", runtime["spec"]["mlPolicy"].get("numNodes", 1))
        rj["replicas"] = 1
        rj["template"]["spec"]["parallelism"] = rj["template"]["spec"]["completions"] = count
        for c in rj["template"]["spec"]["template"]["spec"]["containers"]:
            if c["name"] != trainjob.NODE:
                continue
            _torch(c, trainer, name, count)
            for field in ("image", "command", "args"):
                if field in trainer:
                    c[field] = copy.deepcopy(trainer[field])
            if trainer.get("resourcesPerNode"):
                c["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
    meta = {"name": name, "namespace": job["metadata"].get("namespace"), "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": template["spec"]}


def _torch(container: dict[str, Any], trainer: Mapping[str, Any], name: str, count: int) -> None:
    """The torch plugin's env and port on the ``node`` container."""
    nproc = trainer.get("numProcPerNode", "auto")
    env = upsert(container.get("env") or [], list(trainer.get("env") or []))
    env = upsert(
        env,
        [
            {"name": PET_NNODES, "value": str(count)},
            {"name": PET_NPROC, "value": str(nproc)},
            {"name": PET_RANK, "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
            {"name": PET_ADDR, "value": f"{name}-{trainjob.NODE}-0-0.{name}"},
            {"name": PET_PORT, "value": str(TORCH_PORT)},
        ],
    )
    container["env"] = env
    container["ports"] = upsert(container.get("ports") or [], [{"containerPort": TORCH_PORT}], "containerPort")


def replica_sets(job: Manifest, runtimes: Mapping[str, Manifest]) -> dict[str, dict[str, Any]]:
    """A TrainJob's pod sets as a legacy kind's replica specs (``{"node": {replicas, template}}``), on its runtime
    among ``runtimes`` (by name); none when the runtime is not there."""
    runtime = runtimes.get(job["spec"]["runtimeRef"]["name"])
    if runtime is None:
        return {}
    out = {}
    for rj in jobset(runtime, job)["spec"]["replicatedJobs"]:
        spec = rj["template"]["spec"]
        out[rj["name"]] = {"replicas": int(spec.get("parallelism", 1)), "template": spec["template"]}
    return out


def stack_replica_sets(job: Manifest, targets: Mapping[str, JobTarget]) -> dict[str, dict[str, Any]]:
    """A TrainJob's pod sets (``{"node": {replicas, template}, ...}``; an MPI job's launcher too) on its runtime
    made of ``targets``."""
    name = job["spec"]["runtimeRef"]["name"]
    runtimes = {r["metadata"]["name"]: r for r in trainjob_runtimes.runtimes(targets)}
    if name not in runtimes:
        raise JobBuildError(f"TrainJob {job['metadata']['name']!r}: no runtime {name!r} in this stack")
    return replica_sets(job, runtimes)


def node_template(job: Manifest, targets: Mapping[str, JobTarget]) -> tuple[int, dict[str, Any]]:
    """(node count, pod template) of a TrainJob the stack writes, on its runtime made of ``targets``."""
    name = job["spec"]["runtimeRef"]["name"]
    runtime = next((r for r in trainjob_runtimes.runtimes(targets) if r["metadata"]["name"] == name), None)
    if runtime is None:
        raise JobBuildError(f"TrainJob {job['metadata']['name']!r}: no runtime {name!r} in this stack")
    rjs = {rj["name"]: rj for rj in jobset(runtime, job)["spec"]["replicatedJobs"]}
    rj = rjs[trainjob.NODE]
    return int(rj["template"]["spec"]["parallelism"]), rj["template"]["spec"]["template"]


# ---------------------------------------------------------------------------------------------
# The pods both ways
# ---------------------------------------------------------------------------------------------

# What differs between a legacy worker and a TrainJob's node, and why (anything else is a difference
# with no reason: the comparison fails).
REASONS = {
    "container.name": "Trainer's trainer container is named `node` (pkg/constants: Node); the training operator's "
    "`pytorch`",
    "container.ports": "Trainer's torch plugin opens 29500 for the rendezvous on node 0 (the training operator adds "
    "its own port at run time)",
    "container.env.PET_NNODES": "set by Trainer's torch plugin (the training operator sets its own at run time)",
    "container.env.PET_NPROC_PER_NODE": "set by Trainer's torch plugin from trainer.numProcPerNode (the "
    "PyTorchJob's nprocPerNode, the group's GPUs)",
    "container.env.PET_NODE_RANK": "set by Trainer's torch plugin (the Job's completion index)",
    "container.env.PET_MASTER_ADDR": "set by Trainer's torch plugin: torchrun meets on node 0",
    "container.env.PET_MASTER_PORT": "set by Trainer's torch plugin (29500)",
    "container.env.PET_MAX_RESTARTS": "the stack's, on the TrainJob: the training operator sets it from "
    "elasticPolicy.maxRestarts at run time, Trainer's torch plugin does not",
    "container.terminationMessagePolicy": "the runtime's: the progress guard's message on failure for every job",
    "spec.terminationGracePeriodSeconds": "the runtime's (a TrainJob cannot patch it): the default checkpoint "
    "grace period for every job",
    "spec.restartPolicy": "the runtime's OnFailure; the training operator sets the replica's restartPolicy "
    "(OnFailure) on its pods at run time",
}


@dataclass(frozen=True)
class Difference:
    what: str  # "container.env.PET_NNODES"
    legacy: Any
    trainer: Any
    reason: str | None  # None: not explained


def _by(items: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return {i[key]: i for i in items}


def compare(legacy: dict[str, Any], trainer: dict[str, Any]) -> list[Difference]:
    """Where a legacy worker pod template and a TrainJob's node pod template differ, each with its reason."""
    out: list[Difference] = []

    def differ(what: str, a: Any, b: Any) -> None:
        if a != b:
            out.append(Difference(what, a, b, REASONS.get(what)))

    (lc,), (tc,) = legacy["spec"]["containers"], trainer["spec"]["containers"]
    for f in sorted(set(lc) | set(tc)):
        if f == "env":
            le, te = _by(lc.get("env") or [], "name"), _by(tc.get("env") or [], "name")
            for n in sorted(set(le) | set(te)):
                differ(f"container.env.{n}", le.get(n), te.get(n))
        elif f == "volumeMounts":
            differ("container.volumeMounts", _by(lc[f], "mountPath"), _by(tc.get(f) or [], "mountPath"))
        else:
            differ(f"container.{f}", lc.get(f), tc.get(f))
    ls, ts = legacy["spec"], trainer["spec"]
    for f in sorted((set(ls) | set(ts)) - {"containers"}):
        if f == "volumes":
            differ("spec.volumes", _by(ls.get(f) or [], "name"), _by(ts.get(f) or [], "name"))
        else:
            differ(f"spec.{f}", ls.get(f), ts.get(f))
    lm, tm = legacy.get("metadata") or {}, trainer.get("metadata") or {}
    differ("metadata.labels", lm.get("labels"), tm.get("labels"))
    differ("metadata.annotations", lm.get("annotations"), tm.get("annotations"))
    return out


def _without(items: list[dict[str, Any]], names: set[str]) -> list[dict[str, Any]]:
    return [i for i in items if i.get("name") not in names]


def compare_mpi(legacy: dict[str, Any], trainer: dict[str, Any]) -> list[Difference]:
    """``compare`` for an MPIJob's launcher or worker and the TrainJob's pod of the same role: the volumes and mounts
    Trainer's MPI plugin adds are differences of their own (each with its reason), the rest compared as above."""
    trainer = copy.deepcopy(trainer)
    added = {mpi_model.SSH_VOLUME, mpi_model.HOSTFILE_VOLUME}
    out: list[Difference] = []
    spec = trainer["spec"]
    for v in spec.get("volumes") or []:
        if v["name"] in added:
            what = f"spec.volumes.{v['name']}"
            out.append(Difference(what, None, v, mpi_model.MPI_REASONS.get(what)))
    spec["volumes"] = _without(spec.get("volumes") or [], added)
    if not spec["volumes"]:
        del spec["volumes"]
    (container,) = spec["containers"]
    for m in container.get("volumeMounts") or []:
        if m["name"] in added:
            what = f"container.volumeMounts.{m['name']}"
            out.append(Difference(what, None, m, mpi_model.MPI_REASONS.get(what)))
    container["volumeMounts"] = _without(container.get("volumeMounts") or [], added)
    if not container["volumeMounts"]:
        del container["volumeMounts"]
    found = compare(legacy, trainer)
    return out + [Difference(d.what, d.legacy, d.trainer, mpi_model.MPI_REASONS.get(d.what)) for d in found]
