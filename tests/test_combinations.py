"""Features together: stack configs across the axes that meet in real use, every pair of values at
least once (pairwise covering, allpairspy), each planned and checked against the whole-stack
invariants of ``infra/invariants.py``.

The axes: queues (off, shared, teams), ProvisioningRequests (unset, false, true), the autoscaler, how
the main GPU group is sized (autoscaled, fixed, a Capacity Block with a window, one sized by hand),
spot, the GPU type (p4d and p5 with three network layers, p5.4xlarge without a topology, p6-b200 with
four), a SageMaker job beside, the job kind, etcd's members, the main job's topology placement, burn-in
(on, off, with the loopback test, or off for the main group alone), alerts (off, or on: alarms and a
dashboard per GPU job), and the operator (legacy, or Kubeflow Trainer v2 with the main job as a TrainJob
where its kind can move). Every stack
also has a second, autoscaled p4d group with a job of its own, as a platform team's would.

A combination that is meant to be refused (a ProvisioningRequest check without the autoscaler, spot
on a Capacity Block, ...) is left out of the covering by ``refused_because``; each such reason is
checked once to be a clear refusal naming its key.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from allpairspy import AllPairs

from facts import catalog
from facts.versions import NCCL_TESTS_IMAGE
from infra import invariants
from stacks import alerts
from stacks.config import ConfigError, load
from tests import cloudwatch_eval as cw
from tests.helpers import NS, minimal_values, run_stack

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/train:1.0"
AZ = "us-west-2b"
AXES: dict[str, list[Any]] = {
    "queues": ["off", "shared", "teams"],
    "provisioning": ["default", False, True],
    "autoscaling": [True, False],
    "sizing": ["autoscaled", "fixed", "block-window", "block-sized"],
    "spot": [False, True],
    "gpu": ["p4d.24xlarge", "p5.48xlarge", "p5.4xlarge", "p6-b200.48xlarge"],
    "sagemaker": [False, True],
    "kind": ["mpi", "nccl-test", "pytorch-elastic", "paddle", "paddle-ps", "data-stage", "tensorboard"],
    "etcd": [1, 3],
    "placement": ["default", "required", "preferred-layer-1", "none"],
    "burn_in": ["on", "off", "loopback", "main-off"],
    "alerts": [False, True],
    # Kubeflow Trainer v2 installed, and the main job moved to a TrainJob where its kind can move (pytorch-elastic,
    # then at a fixed size on c10d; mpi and nccl-test: docs/trainer.md); the other kinds stay on their legacy operator.
    "operator": ["legacy", "trainer"],
}
# The GPU types whose EFA groups have a Kueue Topology (the main group's; the second group is p4d).
TOPOLOGY_TYPES = {n for n in AXES["gpu"] if catalog.BUILTIN[n].network_layers}
NAMES = list(AXES)


def refused_because(c: dict[str, Any]) -> str | None:
    """Why the stack refuses combination ``c`` (a partial one too), or None when it must plan."""
    if c.get("provisioning") is True and c.get("queues") == "off":
        return "provisioningRequests without queues"
    if c.get("provisioning") is True and c.get("autoscaling") is False:
        return "provisioningRequests without the autoscaler"
    # The second group (p4d, autoscaled, EFA) always has a Topology: Kueue would never see its nodes.
    if c.get("provisioning") is False and c.get("queues") not in (None, "off") and c.get("autoscaling") is not False:
        return "provisioningRequests false with an autoscaled Topology group"
    if c.get("placement") not in (None, "default", "none") and c.get("queues") == "off":
        return "placement without queues"
    if c.get("placement") not in (None, "default", "none") and c.get("gpu") not in (None, *TOPOLOGY_TYPES):
        return "placement on a group without a Topology"
    if c.get("spot") and str(c.get("sizing", "")).startswith("block"):
        return "spot on a Capacity Block"
    return None


def _filter(row: list[Any]) -> bool:
    return refused_because(dict(zip(NAMES, row))) is None


def _pairs(c: dict[str, Any]) -> set[tuple[str, Any, str, Any]]:
    return {(a, c[a], b, c[b]) for i, a in enumerate(NAMES) for b in NAMES[i + 1 :] if a in c and b in c}


def _wanted_pairs() -> set[tuple[str, Any, str, Any]]:
    return {
        (a, va, b, vb)
        for i, a in enumerate(NAMES)
        for b in NAMES[i + 1 :]
        for va in AXES[a]
        for vb in AXES[b]
        if refused_because({a: va, b: vb}) is None
    }


def combinations() -> list[dict[str, Any]]:
    """allpairspy's covering, completed: with a filter it can leave a pair out, so each missing pair
    gets a combination of its own (the first one's other values, where the stack accepts them)."""
    out = [dict(zip(NAMES, row)) for row in AllPairs(list(AXES.values()), filter_func=_filter)]
    covered = set().union(*(_pairs(c) for c in out))
    for a, va, b, vb in sorted(_wanted_pairs() - covered, key=str):
        if (a, va, b, vb) in covered:
            continue
        extra = next(c for c in ({**base, a: va, b: vb} for base in out) if refused_because(c) is None)
        out.append(extra)
        covered |= _pairs(extra)
    return out


def _main_group(c: dict[str, Any]) -> dict[str, Any]:
    g: dict[str, Any] = {"name": "main", "instanceType": c["gpu"], "maxSize": 2}
    sizing = c["sizing"]
    if sizing == "autoscaled":
        g.update(minSize=0, desiredSize=0 if c["autoscaling"] else 2)
    elif sizing == "fixed":
        g.update(minSize=2, desiredSize=2, autoscale=False)
    else:
        g.update(capacityType="capacity-block", capacityReservationId="cr-0123456789abcdef0")
        if sizing == "block-window":
            g["capacity"] = {"start": "2030-01-01T11:30:00Z", "end": "2030-01-03T11:30:00Z"}
        else:
            g["desiredSize"] = 2
    if c["spot"]:
        g["capacityType"] = "spot"
    if c["burn_in"] == "main-off":
        g["burnIn"] = False
    return g


def _job(kind: str, group: str, name: str, **extra: Any) -> dict[str, Any]:
    run = {"image": IMAGE, "command": ["python", "/efs/train.py"], "volumes": [{"name": "efs", "mountPath": "/efs"}]}
    specs: dict[str, dict[str, Any]] = {
        "mpi": {"kind": "mpi", "nodeGroup": group, "nodes": 2, **run},
        "nccl-test": {"kind": "nccl-test", "nodeGroup": group, "nodes": 2},
        "pytorch-elastic": {
            "kind": "pytorch-elastic",
            "nodeGroup": group,
            "minNodes": 1,
            "maxNodes": 2,
            "rendezvous": "etcd",
            **run,
            "command": ["torchrun"],
        },
        "paddle": {"kind": "paddle", "nodeGroup": group, "nodes": 2, **run},
        "paddle-ps": {"kind": "paddle", "mode": "ps", "pservers": 1, "nodeGroup": group, "nodes": 2, **run},
        "data-stage": {"kind": "data-stage", "source": "s3://my-training-data/coco/", "volume": "fsx", "path": "coco"},
        "tensorboard": {"kind": "tensorboard", "volume": "efs", "logPath": "logs/run"},
    }
    return {"name": name, **copy.deepcopy(specs[kind]), **extra}


def _sagemaker_job(group: str) -> dict[str, Any]:
    return {
        "name": "sm-train",
        "kind": "pytorch-elastic",
        "runtime": "sagemaker",
        "nodeGroup": group,
        "nodes": 2,
        "image": (
            "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
        ),
        "command": ["torchrun"],
        "args": ["/opt/ml/input/data/efs/code/train/main.py"],
        "rendezvous": "c10d",
        "volumes": [{"name": "efs", "mountPath": "/opt/ml/input/data/efs"}],
        "sagemaker": {"outputPath": "s3://my-training-output/sm-train/"},
    }


def values_for(c: dict[str, Any]) -> dict[str, Any]:
    """The stack config of combination ``c``."""
    groups = [
        _main_group(c),
        {
            "name": "p4d",
            "instanceType": "p4d.24xlarge",
            "minSize": 0,
            "desiredSize": 0 if c["autoscaling"] else 2,
            "maxSize": 2,
        },
    ]
    placement = {
        "default": {},
        "required": {"placement": "required"},
        "preferred-layer-1": {"placement": "preferred", "placementLayer": 1},
        "none": {"placement": "none"},
    }[c["placement"]]
    main = _job(c["kind"], "main", "main-job", **(placement if c["kind"] not in ("data-stage", "tensorboard") else {}))
    if c["operator"] == "trainer" and c["kind"] == "pytorch-elastic":
        del main["minNodes"], main["maxNodes"]
        main.update(nodes=2, rendezvous="c10d", operator="trainer")
    if c["operator"] == "trainer" and c["kind"] in ("mpi", "nccl-test"):
        # On Trainer an MPI job's workers run the group's MPI runtime's image (jobs/trainjob_mpi.py).
        main.update(operator="trainer", **({"image": NCCL_TESTS_IMAGE} if c["kind"] == "mpi" else {}))
    jobs = [main, _job("nccl-test", "p4d", "p4d-nccl")]
    queues: dict[str, Any] = {"enabled": c["queues"] != "off"}
    if c["queues"] == "teams":
        queues["teams"] = [
            {"name": "vision", "quotas": [{"nodeGroup": "main", "nodes": 1}]},
            {"name": "nlp", "quotas": [{"nodeGroup": "p4d", "nodes": 1}]},
        ]
        jobs.append(_job("nccl-test", "p4d", "nlp-nccl", team="nlp", nodes=1))
    if c["sagemaker"]:
        jobs.append(_sagemaker_job("main" if _sagemaker_type(c["gpu"]) else "p4d"))
    return minimal_values(
        services={"trainer": c["operator"] == "trainer"},
        gpuAvailabilityZone=AZ,
        gpuNodeGroups=groups,
        queues=queues,
        autoscaling={"enabled": c["autoscaling"]}
        | ({} if c["provisioning"] == "default" else {"provisioningRequests": c["provisioning"]}),
        etcd={"replicas": c["etcd"]},
        burnIn={"enabled": c["burn_in"] != "off", "loopbackTest": c["burn_in"] == "loopback"},
        jobs=jobs,
        alerts={"enabled": c["alerts"]},
    )


def _sagemaker_type(instance_type: str) -> bool:
    return f"ml.{instance_type}" in catalog.SAGEMAKER_TYPES


def _id(c: dict[str, Any]) -> str:
    return "-".join(str(c[n]) for n in NAMES)


COMBINATIONS = combinations()


def test_the_combinations_cover_every_pair_of_values():
    """Every pair of values of two axes that the stack accepts together is in some combination."""
    seen = set().union(*(_pairs(c) for c in COMBINATIONS))
    wanted = _wanted_pairs()
    assert len(wanted) > 300 and not wanted - seen, sorted(wanted - seen, key=str)[:5]
    assert len(COMBINATIONS) < 70  # pairwise, not the product (3 x 3 x 2 x 4 x 2 x 4 x 2 x 7 x 2 x 4 x 4)


@pytest.mark.parametrize("combination", COMBINATIONS, ids=_id)
def test_every_combination_plans_and_keeps_the_invariants(combination):
    values = values_for(combination)
    try:
        cfg = load(values, "gpu-training", "test")
    except ConfigError as err:  # a combination a team would use, refused: the features do not compose
        pytest.fail(f"refused: {err}")
    plan = run_stack(values)
    violations = invariants.check(plan, cfg)
    assert not violations, "\n".join(map(str, violations))
    # On Trainer, the main pytorch-elastic, mpi or nccl-test job is a TrainJob (its pods checked above through its
    # runtime: an MPI job's launcher and workers).
    moved = combination["operator"] == "trainer" and combination["kind"] in ("pytorch-elastic", "mpi", "nccl-test")
    assert len([o for o in plan.kubernetes_objects() if o["kind"] == "TrainJob"]) == int(moved)
    # Burn-in as configured: the groups that have it join with a startup taint, the others do not.
    nodes = invariants.view(plan, cfg).nodes
    assert {g.name: bool(nodes[g.name].startup_taints) for g in cfg.gpu_node_groups} == {
        g.name: cfg.burn_in_on(g) for g in cfg.gpu_node_groups
    }
    _alerts_as_configured(plan, cfg)


def _alerts_as_configured(plan: Any, cfg: Any) -> None:
    """Alerts on: the alarms the alert plan derives (an idle alarm per GPU job on the cluster among them)
    and a dashboard per such job, of CloudWatch's structure; off: none."""
    wanted = alerts.plan(cfg)
    names = {r.inputs.get("name") for r in plan.records if r.type == "aws:cloudwatch/metricAlarm:MetricAlarm"}
    assert names == {a.name for a in wanted.alarms}
    assert bool(names) == cfg.alerts.enabled
    watched = alerts.watched_jobs(cfg)
    assert {f"{cfg.cluster_name}-{j.name}-gpu-idle" for j in watched if cfg.alerts.enabled} <= names
    queues_board = bool(alerts.cluster_queues(cfg))  # and one of the queues when they are on
    assert len(wanted.dashboards) == ((len(watched) + queues_board) if cfg.alerts.enabled else 0)
    for body in wanted.dashboards.values():
        assert cw.dashboard_problems(body) == []


REFUSED = [
    ({"queues": "off", "provisioning": True}, "autoscaling.provisioningRequests"),
    ({"autoscaling": False, "provisioning": True}, "autoscaling.provisioningRequests"),
    ({"sizing": "block-window", "spot": True}, "capacityType"),
    ({"queues": "shared", "provisioning": False}, "autoscaling.provisioningRequests"),
    ({"placement": "required", "queues": "off"}, "placement"),
    ({"placement": "required", "queues": "shared", "gpu": "p5.4xlarge"}, "placement"),
]


@pytest.mark.parametrize("over,key", REFUSED, ids=[r[1] + "-" + "-".join(map(str, r[0].values())) for r in REFUSED])
def test_what_the_covering_leaves_out_is_refused_with_its_key(over, key):
    base = {n: values[0] for n, values in AXES.items()}
    c = {**base, **over}
    assert refused_because(c) is not None
    with pytest.raises(ConfigError) as err:
        load(values_for(c), "gpu-training", "test")
    assert f"{NS}:" in str(err.value) and key in str(err.value)
