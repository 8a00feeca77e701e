"""Topology-aware placement of a job's pods: Kueue's pod-set annotations on the job object a kind
builds, for a queued job on a node group with a network topology (``facts/topology.py``).

Every pod set on such a group (the group's flavor has a Topology) carries a topology annotation:
Kueue admits a pod set without one on a Topology flavor only when every flavor of its ClusterQueue
has a Topology (kueue v0.19.2 scheduler/flavorassigner/tas_flavorassigner.go, "supports only
TopologyAwareScheduling"), so ``placement: none`` is written as unconstrained rather than left out.
The workers ask for the job's placement; a second pod set on the same group (an MPI launcher, a
single PaddleJob parameter server) is grouped with them (``podset-group-name``) so that it lands in
the same domain, where Kueue allows it: exactly two pod sets, one of a single pod. Otherwise each
pod set asks for the same level on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from facts import topology
from facts.kube import NODE_GROUP_LABEL
from facts.operators import REPLICA_SPECS
from jobs.base import GpuJob, JobBase, Manifest
from jobs.pod import QUEUE_LABEL
from jobs.targets import JobsContext, JobTarget

WORKER_ROLE = "Worker"


@dataclass(frozen=True)
class Placement:
    """What a job asks Kueue for: ``required``/``preferred`` at ``layer``, or ``none``."""

    mode: str
    layer: int  # 0 with mode none

    @property
    def label(self) -> str | None:
        return topology.layer_label(self.layer) if self.layer else None

    @property
    def text(self) -> str:
        return "none (unconstrained)" if self.mode == "none" else f"{self.mode} {self.label}"


def placement_of(spec: GpuJob, target: JobTarget) -> Placement | None:
    """The placement ``spec`` asks for on ``target``; None on a group without a topology."""
    if not target.network_layers:
        return None
    mode = spec.placement or topology.DEFAULT_PLACEMENT
    if mode == "none":
        return Placement("none", 0)
    return Placement(mode, min(spec.placement_layer or target.network_layers, target.network_layers))


def _annotations(p: Placement, group: str | None) -> dict[str, str]:
    if p.mode == "none":
        return {topology.UNCONSTRAINED_ANNOTATION: "true"}
    out = {topology.LEVEL_ANNOTATIONS[p.mode]: str(p.label)}
    if group is not None:
        out[topology.GROUP_ANNOTATION] = group
    return out


def annotate(manifest: Manifest, spec: JobBase, ctx: JobsContext) -> Manifest:
    """``manifest`` with the topology annotations on the pod templates of its pod sets on the
    job's group, when it is a queued job object of a group with a topology; else unchanged."""
    if not isinstance(spec, GpuJob) or manifest.get("kind") not in REPLICA_SPECS:
        return manifest
    if QUEUE_LABEL not in ((manifest.get("metadata") or {}).get("labels") or {}):
        return manifest
    target = ctx.targets.get(spec.node_group or "")
    if target is None:
        return manifest
    p = placement_of(spec, target)
    if p is None:
        return manifest
    replicas: dict[str, Any] = manifest["spec"][REPLICA_SPECS[manifest["kind"]]]
    on_group = {
        role: rs
        for role, rs in replicas.items()
        if ((rs.get("template") or {}).get("spec") or {}).get("nodeSelector", {}).get(NODE_GROUP_LABEL) == target.group
    }
    grouped = (
        p.mode != "none"
        and len(on_group) == 2
        and WORKER_ROLE in on_group
        and any(int(rs.get("replicas", 1)) == 1 for rs in on_group.values())
    )
    # Kueue refuses a group name that is a number; the job's name starts with a letter.
    group = f"{spec.name}-together" if grouped else None
    for rs in on_group.values():
        meta = rs["template"].setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **_annotations(p, group)}
    return manifest
