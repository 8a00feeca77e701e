"""The GPU jobs of the plan's summary: one line per enabled GPU job (its name, kind, the object it is
made of, where it runs, how many nodes and GPUs, its queue and whether Kueue admits it at once),
and with ``--verbose`` its hang detection and checkpoints in words (jobs/resilience.py).

What a line says comes from the plan itself where it can: the Kubernetes object carrying the job's
label (``gputraining/job``) gives the kind it is sent as and its LocalQueue
(``kueue.x-k8s.io/queue-name``); the queue plan (stacks/queues) says who waits for whom."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from facts import operators
from infra import offline
from jobs import resilience, trainjob
from jobs.base import GpuJob
from jobs.pod import JOB_LABEL, QUEUE_LABEL
from stacks import config as stack_config
from stacks import queues
from stacks.config.fleet_jobs import fleet_groups
from stacks.config.job_entries import sagemaker_jobs

_OPERATOR_KINDS = frozenset(k.kind for k in operators.KINDS)
_HEAD = "GPU jobs"
_COLUMNS = ("kind", "sent as", "runs on", "nodes x GPUs", "queue", "hang, checkpoints")
_WIDTHS = (16, 11, 15, 12, 26)


@dataclass(frozen=True)
class JobRow:
    name: str
    kind: str
    sent_as: str  # the API kind: MPIJob, PyTorchJob, PaddleJob, SageMaker TrainingJob
    runs_on: str  # the node group, or the ml. instance type
    size: str  # "2 x 8": nodes x GPUs a node ("1-2 x 8" for an elastic job)
    queue: str  # "gpu: admitted at once", "gpu: waits for nccl-p4d", "-" (no queue)
    resilience: str  # hang detection, checkpoints: "on, on", "off, off", "n/a, n/a"


def gpu_jobs(cfg: stack_config.StackConfig) -> list[GpuJob]:
    return [j for j in cfg.jobs if j.enabled and isinstance(j, GpuJob)]


def job_objects(records: Sequence[offline.Record]) -> dict[str, dict]:
    """The operator object (MPIJob, PyTorchJob, PaddleJob) of each job, by the job's name."""
    out: dict[str, dict] = {}
    for r in records:
        labels = (r.inputs.get("metadata") or {}).get("labels") or {}
        if r.custom and r.inputs.get("kind") in _OPERATOR_KINDS and JOB_LABEL in labels:
            out[str(labels[JOB_LABEL])] = r.inputs
    return out


def verdicts(cfg: stack_config.StackConfig) -> dict[str, str]:
    """Per queued job, whether Kueue admits it at once on empty queues or which jobs it waits for."""
    plan = queues.plan_for(cfg)
    if plan is None:
        return {}
    admissions = plan.admissions()
    admitted = [a.demand for a in admissions if a.at_once]
    out = {}
    for a in admissions:
        if a.at_once:
            out[a.demand.job] = "admitted at once"
            continue
        ahead = [d.job for d in admitted if d.flavor == a.demand.flavor]
        out[a.demand.job] = f"waits for {', '.join(ahead)}" if ahead else "waits for quota"
    return out


def _nodes(job: GpuJob) -> str:
    low, high = getattr(job, "elastic_min", job.nodes), getattr(job, "elastic_max", job.nodes)
    return f"{low}-{high}" if low != high else str(high)


def _on_off(text: str) -> str:
    """ "on", "off" or "n/a" of resilience.describe's words."""
    return next((word for word in ("on", "off") if text == word or text.startswith(word + ":")), "n/a")


def rows(cfg: stack_config.StackConfig, records: Sequence[offline.Record]) -> list[JobRow]:
    objects, waits = job_objects(records), verdicts(cfg)
    on_sagemaker = {s.job: s for s in sagemaker_jobs(cfg.jobs, cfg.gpu_node_groups, cfg.region, cfg.cluster_name, {})}
    groups = {g.name: g for g in cfg.gpu_node_groups}
    fleet_types = {name: g.instance for name, g in fleet_groups(cfg.fleet).items()}
    out = []
    for j in gpu_jobs(cfg):
        hang, saved = (_on_off(text) for text in resilience.describe(j))
        sm = on_sagemaker.get(j.name)
        if sm is not None:
            size = f"{sm.instance_count} x {sm.gpus_per_instance}"
            row = JobRow(j.name, j.kind, "SageMaker", sm.instance_type, size, "-", f"{hang}, {saved}")
        else:
            obj = objects.get(j.name, {})
            queue = ((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
            group = groups.get(j.node_group or "")
            fleet_type = fleet_types.get(j.node_group or "")  # a job of the fleet: its GPU type's
            gpus = group.instance.gpus if group is not None else fleet_type.gpus if fleet_type is not None else "?"
            verdict = f"{queue}: {waits.get(j.name, 'to a worker' if fleet_type else 'queued')}" if queue else "-"
            size = f"{_nodes(j)} x {gpus}"
            row = JobRow(
                j.name, j.kind, str(obj.get("kind", "?")), str(j.node_group), size, verdict, f"{hang}, {saved}"
            )
        out.append(row)
    return out


def _line(first: str, cells: Sequence[str]) -> str:
    """``first`` in the name column, then the cells in theirs (the last one as long as it is)."""
    padded = [f"{c:<{w}}" for c, w in zip(cells, _WIDTHS, strict=False)] + list(cells[len(_WIDTHS) :])
    return f"{first:<25}" + " ".join(padded).rstrip()


def lines(cfg: stack_config.StackConfig, records: Sequence[offline.Record], verbose: bool = False) -> list[str]:
    """The GPU jobs table: a header and one line per job; ``verbose`` adds each job's hang detection
    and checkpoints in words (docs/hangs-and-resume.md)."""
    found = rows(cfg, records)
    if not found:
        return []
    out = ["", _line(f"{_HEAD} ({len(found)}):", _COLUMNS)]
    by_name = {j.name: j for j in gpu_jobs(cfg)}
    for row in found:
        out.append(_line(f"  {row.name}", (row.kind, row.sent_as, row.runs_on, row.size, row.queue, row.resilience)))
        if verbose:
            hang, saved = resilience.describe(by_name[row.name])
            out += [f"  {'':<22} hang detection {hang}", f"  {'':<22} checkpoints {saved}"]
    return out + legacy_line(cfg, found)


def legacy_line(cfg: stack_config.StackConfig, found: Sequence[JobRow]) -> list[str]:
    """The jobs sent as a legacy API (the training operator's v1 kinds, MPIJob v2beta1), in one line:
    Kubeflow Trainer v2 is upstream's path (docs/trainer.md)."""
    on_eks = {r.name for r in found if r.sent_as != "SageMaker"}
    legacy = []
    for j in gpu_jobs(cfg):
        api, old = trainjob.api_of(j)
        if j.name in on_eks and api is not None and old:
            legacy.append(f"{j.name} ({api.kind} {api.api_version})")
    if not legacy:
        return []
    return [f"  on a legacy API (Kubeflow Trainer v2 is upstream's path: docs/trainer.md): {', '.join(legacy)}"]
