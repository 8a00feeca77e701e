"""What Kueue writes into a job does not become drift on the next refreshed `pulumi up`.

Every `preview` and `up` refreshes first (Pulumi.yaml: `options: refresh: always`), and a job's
`spec` is replace-on-change with delete-before-replace (components/training_jobs.py): a diff in a running
job's spec would delete it and start the training again. Kueue edits the jobs it manages:

- its webhook suspends a job when it is created (`runPolicy.suspend`, or `spec.suspend` for a
  batch Job: jobframework.ApplyDefaultForSuspend);
- on admission it unsuspends it and merges into every pod template what the admission gives the
  pod set (jobframework's getPodSetsInfoFromStatus): the flavor's node labels (as nodeSelector)
  and tolerations, the `kueue.x-k8s.io/podset` label, the queue labels when the
  AssignQueueLabelsForPods gate is on, and the annotations of admission checks such as the
  ProvisioningRequest one (pkg/podset/podset.go at v0.19.2, ``PodSetInfo.Merge``: a label,
  annotation or nodeSelector key the template already has with another value is a conflict and
  the job is not admitted; new keys are added; tolerations are appended unless an equal one is
  there, ``tolerations.Equal``: key, effect, value and operator, an empty operator being Equal);
- on eviction it restores the templates as they were (``RestorePodSpec``).

pulumi-kubernetes computes the diff between the new inputs and the refreshed live object pruned to
the shape of the old inputs (provider/pkg/provider/util.go, ``pruneMap`` and ``pruneSlice``; read
at v4.31.0, v4.32.0 and main of July 2026, the same in each, the newest source available here: the
project pins 4.34.2, released later; map keys the inputs lack are dropped, list elements are
matched by index and cut at the inputs' length; provider.go's Diff). Both rules are restated here
and applied to every job the plans emit. Edits by other controllers (the operators' defaulting)
are not covered.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from facts.kube import GPU_RESOURCE, NODE_GROUP_LABEL
from jobs.pod import QUEUE_LABEL
from jobs.trainjob_merge import replica_sets
from stacks.queues.admission import REPLICA_SPECS
from tests.helpers import minimal_values, run_stack, team_values

# ---------------------------------------------------------------------------------------------
# The two rules, restated
# ---------------------------------------------------------------------------------------------


def prune(live: Any, inputs: Any) -> Any:
    """pulumi-kubernetes' pruneMap/pruneSlice: ``live`` cut to the shape of ``inputs``."""
    if isinstance(live, dict) and isinstance(inputs, dict):
        return {k: prune(v, inputs[k]) if type(v) is type(inputs[k]) else v for k, v in live.items() if k in inputs}
    if isinstance(live, list) and isinstance(inputs, list):
        if not live or not inputs:
            return []
        if type(live[0]) is not type(inputs[0]):
            return copy.deepcopy(live)
        return [prune(v, t) if v is not None and t is not None else v for v, t in zip(live, inputs)]
    return live


def _same_toleration(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def norm(t: dict[str, Any]) -> tuple:
        return (t.get("key", ""), t.get("effect", ""), t.get("operator") or "Equal", t.get("value", ""))

    return norm(a) == norm(b)


class Conflict(Exception):
    pass


def _merge_map(mine: dict[str, str], theirs: dict[str, str], what: str) -> dict[str, str]:
    """utilmaps.HaveConflict, then utilmaps.Copy: a key with another value is a conflict."""
    for key, value in theirs.items():
        if key in mine and mine[key] != value:
            raise Conflict(f"{what} {key}: {mine[key]} != {value}")
    return {**mine, **theirs}


def kueue_merge(template: dict[str, Any], info: dict[str, Any]) -> None:
    """Kueue's podset.Merge of a PodSetInfo into a pod template, in place: labels, annotations and
    nodeSelector merged, the info's tolerations appended unless an equal one is there."""
    meta, spec = template.setdefault("metadata", {}), template.setdefault("spec", {})
    for where, key, what in (
        (meta, "labels", "labels"),
        (meta, "annotations", "annotations"),
        (spec, "nodeSelector", "nodeSelector"),
    ):
        merged = _merge_map(where.get(key) or {}, info.get(what) or {}, what)
        if merged:
            where[key] = merged
    tolerations = list(spec.get("tolerations") or [])
    for t in info.get("tolerations") or []:
        if not any(_same_toleration(t, mine) for mine in tolerations):
            tolerations.append(dict(t))
    spec["tolerations"] = tolerations


def podset_info(flavor: dict[str, Any], podset: str, local_queue: str, cluster_queue: str) -> dict[str, Any]:
    """What admission merges into a pod set (jobframework's getPodSetsInfoFromStatus at v0.19.2):
    the flavor's node labels and tolerations, the podset label, the queue labels (feature gate
    AssignQueueLabelsForPods), and the ProvisioningRequest admission check's PodSetUpdate
    annotations (cluster-autoscaler's ProvisioningRequestPodAnnotationKey and
    ProvisioningClassPodAnnotationKey), the one admission check the stack configures."""
    return {
        "nodeSelector": dict(flavor.get("nodeLabels") or {}),
        "tolerations": list(flavor.get("tolerations") or []),
        "labels": {
            "kueue.x-k8s.io/podset": podset,
            "kueue.x-k8s.io/local-queue-name": local_queue,
            "kueue.x-k8s.io/cluster-queue-name": cluster_queue,
        },
        "annotations": {
            "autoscaling.x-k8s.io/consume-provisioning-request": f"{podset}-provreq",
            "autoscaling.x-k8s.io/provisioning-class-name": "check-capacity.autoscaling.x-k8s.io",
        },
    }


def fits(template: dict[str, Any], flavor: dict[str, Any]) -> bool:
    """Kueue's flavor selection by node labels: for each of the flavor's labels, the pod either
    does not select on that key or selects the same value."""
    selector = template.get("spec", {}).get("nodeSelector") or {}
    return all(selector.get(k, v) == v for k, v in flavor.get("nodeLabels", {}).items())


# ---------------------------------------------------------------------------------------------
# The jobs of the plans
# ---------------------------------------------------------------------------------------------


def templates(job: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The job's pod sets: Kueue's name for each (the replica type in lower case; "main" for a
    batch Job) and its pod template."""
    if job["kind"] == "Job":
        yield "main", job["spec"]["template"]
    else:
        for role, replica in job["spec"][REPLICA_SPECS[job["kind"]]].items():
            yield role.lower(), replica["template"]


def suspend_path(job: dict[str, Any]) -> tuple[str, ...]:
    return ("spec", "suspend") if job["kind"] == "Job" else ("spec", "runPolicy", "suspend")


def suspended(job: dict[str, Any], value: bool) -> dict[str, Any]:
    """A copy of ``job`` as the cluster holds it with its suspend flag at ``value``."""
    live = copy.deepcopy(job)
    target = live["spec"] if job["kind"] == "Job" else live["spec"].setdefault("runPolicy", {})
    target["suspend"] = value
    return live


def lookup(obj: dict[str, Any], path: tuple[str, ...]) -> Any | None:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def managed_jobs(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if (o.get("metadata", {}).get("labels") or {}).get(QUEUE_LABEL)]


def flavors(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ResourceFlavor"}


def gpu_pods(template: dict[str, Any]) -> bool:
    return any(GPU_RESOURCE in (c.get("resources") or {}).get("limits", {}) for c in template["spec"]["containers"])


PADDLE = {
    "name": "ctr",
    "kind": "paddle",
    "nodeGroup": "p4d",
    "image": "nvcr.io/x/y:1",
    "command": ["python", "train.py"],
    "mode": "ps",
}


@pytest.fixture(scope="module")
def team_objects() -> list[dict[str, Any]]:
    return run_stack(team_values()).kubernetes_objects()


@pytest.fixture(scope="module")
def paddle_objects() -> list[dict[str, Any]]:
    return run_stack(minimal_values(jobs=[PADDLE])).kubernetes_objects()


# The dev stack's jobs, the team stack's (every team, a data-stage Job) and a PaddleJob; prod
# enables no job.
@pytest.fixture(params=["dev", "team", "paddle"])
def objects(request) -> list[dict[str, Any]]:
    if request.param == "dev":
        return request.getfixturevalue("dev_plan").kubernetes_objects()
    return request.getfixturevalue(f"{request.param}_objects")


def test_the_program_never_sets_a_managed_jobs_suspend_flag(objects):
    """Kueue's webhook sets it on create and its controller flips it on admission: a value from the
    program would differ from the live one while the job waits, and the refreshed diff would
    replace the waiting job."""
    jobs = managed_jobs(objects)
    assert jobs
    assert {j["metadata"]["name"]: lookup(j, suspend_path(j)) for j in jobs} == {
        j["metadata"]["name"]: None for j in jobs
    }


def test_every_pod_template_is_admitted_on_its_groups_flavor_without_drift(objects):
    jobs, by_name = managed_jobs(objects), flavors(objects)
    assert jobs and by_name
    cluster_queue = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
        for o in objects
        if o["kind"] == "LocalQueue"
    }
    for job in jobs:
        local_queue = job["metadata"]["labels"][QUEUE_LABEL]
        queues = (local_queue, cluster_queue[(job["metadata"]["namespace"], local_queue)])
        if job["kind"] == "TrainJob":
            _trainjob_without_drift(job, objects, by_name)
            continue
        for i, (podset, template) in enumerate(templates(job)):
            fitting = [name for name, f in by_name.items() if fits(template, f)]
            if gpu_pods(template):
                group = template["spec"]["nodeSelector"][NODE_GROUP_LABEL]
                assert fitting == [group], (job["metadata"]["name"], fitting)  # its group's flavor, and only that
            assert fitting, f"{job['metadata']['name']}: no flavor fits {template['spec'].get('nodeSelector')}"
            for name in fitting:
                waiting = suspended(job, True)  # created: the webhook suspended it
                assert prune(waiting, job) == job, job["metadata"]["name"]
                admitted = suspended(job, False)  # admitted on this flavor
                kueue_merge(
                    list(templates(admitted))[i][1], podset_info(by_name[name], podset, *queues)
                )  # Conflict: never admitted
                assert prune(admitted, job) == job, (job["metadata"]["name"], name)


def _trainjob_without_drift(job: dict[str, Any], objects: list[dict[str, Any]], by_name: dict[str, Any]) -> None:
    """Kueue writes no pod template of a TrainJob: on admission it adds a runtime patch of its own (manager
    kueue.x-k8s.io/manager, after the stack's: pkg/controller/jobs/trainjob at v0.19.2, RunWithPodSetsInfo) and
    flips spec.suspend, both pruned away (the list cut at the inputs' length, the key absent from them). Its pods
    (the runtime's, as Trainer makes them: jobs/trainjob_merge.py) fit their group's flavor and only that."""
    runtimes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterTrainingRuntime"}
    for template in (r["template"] for r in replica_sets(job, runtimes).values()):
        group = template["spec"]["nodeSelector"][NODE_GROUP_LABEL]
        assert [name for name, f in by_name.items() if fits(template, f)] == [group]
    admitted = copy.deepcopy(job)
    admitted["spec"]["suspend"] = False
    admitted["spec"]["runtimePatches"].append({"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {}})
    assert prune(admitted, job) == job, job["metadata"]["name"]


def test_the_kinds_kueue_manages_are_all_covered(dev_plan, team_objects, paddle_objects):
    kinds = {
        j["kind"] for objs in (dev_plan.kubernetes_objects(), team_objects, paddle_objects) for j in managed_jobs(objs)
    }
    assert kinds == {"MPIJob", "PyTorchJob", "PaddleJob", "TrainJob"}
    # The stack's batch Jobs (data staging) carry no queue name: Kueue leaves them alone (its
    # manageJobsWithoutQueueName is off), so it never suspends them.
    team_jobs = [o for o in team_objects if o["kind"] == "Job"]
    assert team_jobs and not managed_jobs(team_jobs)


# ---------------------------------------------------------------------------------------------
# The restated rules, on cases that show they can fail
# ---------------------------------------------------------------------------------------------


def test_the_rules_see_drift_where_there_is_some():
    job = {
        "kind": "Job",
        "spec": {
            "suspend": False,
            "template": {
                "spec": {
                    "nodeSelector": {"g": "a"},
                    "tolerations": [{"key": "x", "operator": "Exists"}],
                    "containers": [],
                }
            },
        },
    }
    flavor = {
        "nodeLabels": {"g": "a", "accel": "v100"},
        "tolerations": [{"key": "y", "operator": "Exists"}, {"key": "x", "operator": "Exists"}],
    }
    live = copy.deepcopy(job)
    kueue_merge(
        live["spec"]["template"],
        {
            "nodeSelector": flavor["nodeLabels"],
            "tolerations": flavor["tolerations"],
            "labels": {"kueue.x-k8s.io/podset": "main"},
        },
    )
    assert live["spec"]["template"]["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "main"}
    assert live["spec"]["template"]["spec"]["nodeSelector"] == {"g": "a", "accel": "v100"}
    assert [t["key"] for t in live["spec"]["template"]["spec"]["tolerations"]] == ["x", "y"]  # appended, no duplicate
    assert prune(live, job) == job
    live["spec"]["suspend"] = True  # a program that sets suspend: the job while it waits
    assert prune(live, job) != job
    prepended = copy.deepcopy(job)
    prepended["spec"]["template"]["spec"]["tolerations"].insert(0, {"key": "y", "operator": "Exists"})
    assert prune(prepended, job) != job  # were the flavor's put first, the refreshed diff would show it
    with pytest.raises(Conflict):
        kueue_merge(copy.deepcopy(job)["spec"]["template"], {"nodeSelector": {"g": "b"}})
    labelled = copy.deepcopy(job)["spec"]["template"]
    labelled["metadata"] = {"labels": {"kueue.x-k8s.io/podset": "mine"}}
    with pytest.raises(Conflict):  # a template label Kueue also sets, with another value
        kueue_merge(labelled, {"labels": {"kueue.x-k8s.io/podset": "main"}})
    assert not fits(job["spec"]["template"], {"nodeLabels": {"g": "b"}})
