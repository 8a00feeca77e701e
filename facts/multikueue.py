"""What Kueue v0.19.2's MultiKueue does, as the fleet (stacks/fleet.py) relies on it. Sources are files of
kubernetes-sigs/kueue at tag v0.19.2 (the bare mirror: `git show v0.19.2:<path>`).

The calls the manager's MultiKueue controller makes on a worker cluster, through the kubeconfig of the
worker's MultiKueueCluster, for the job kinds this project emits (batch Job, MPIJob, PyTorchJob,
PaddleJob, TrainJob). The worker's ClusterRole grants exactly these (tests/test_fleet_rbac.py evaluates it):

- Workloads: the remote client watches and lists them by the origin label
  (pkg/controller/admissionchecks/multikueue/multikueuecluster.go: establishWatch `c.Watch(..., MatchingLabels
  {MultiKueueOriginLabel})`, the garbage collector `remoteCl.List(ctx, wls, MatchingLabels{...})` and
  `remoteCl.Delete`), reads one (workload.go `getClient().Get`), creates the copy (workload.go
  `getClient().Create(ctx, clone)`), updates it (`remoteClient.Update`, to drop a finalizer; `getClient().Update`
  on eviction), deletes it (`remoteClient.Delete`) and opens its preemption gate (`Status().Update`).
- The job objects: each adapter gets, creates and deletes the remote job
  (pkg/controller/jobs/job/job_multikueue_adapter.go, jobs/mpijob/mpijob_multikueue_adapter.go,
  jobs/kubeflow/kubeflowjob/kubeflowjob_multikueue_adapter.go, jobs/trainjob/trainjob_multikueue_adapter.go:
  `remoteClient.Get/Create/Delete`), and the
  watcher lists and watches them (their `GetEmptyList`, used by multikueuecluster.go's establishWatcher).
  The remote job's status is read from the object itself (no `/status` read).
- Not needed: ClusterQueues and LocalQueues on the worker are watched only with the
  MultiKueueManagerQuotaAutomation gate (multikueuecluster.go `startQueueWatchers`, called under
  `features.Enabled(features.MultiKueueManagerQuotaAutomation)`; the fleet leaves it off, quotaManagement
  Manual); a batch Job is patched only for elastic jobs (job_multikueue_adapter.go `syncElasticJob`, gated by
  ElasticJobsViaWorkloadSlices, off). Kueue's sample role
  (site/static/examples/multikueue/create-multikueue-kubeconfig.sh) grants more: pods, statefulsets,
  leaderworkersets, jobsets, the queues, `/status` reads, patch on workloads.
"""

from __future__ import annotations

from typing import NamedTuple


class Call(NamedTuple):
    api_group: str
    resource: str
    verb: str
    source: str


_WL = "kueue.x-k8s.io"
_MC = "pkg/controller/admissionchecks/multikueue/multikueuecluster.go"
_WLGO = "pkg/controller/admissionchecks/multikueue/workload.go"

# The job kinds a fleet dispatches: (apiGroup, resource, adapter source).
JOB_RESOURCES: tuple[tuple[str, str, str], ...] = (
    ("batch", "jobs", "pkg/controller/jobs/job/job_multikueue_adapter.go"),
    ("kubeflow.org", "mpijobs", "pkg/controller/jobs/mpijob/mpijob_multikueue_adapter.go"),
    ("kubeflow.org", "pytorchjobs", "pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_multikueue_adapter.go"),
    ("kubeflow.org", "paddlejobs", "pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_multikueue_adapter.go"),
    # Trainer v2's TrainJob (when the stacks run Trainer v2): the same Get, Create, Delete and list/watch.
    ("trainer.kubeflow.org", "trainjobs", "pkg/controller/jobs/trainjob/trainjob_multikueue_adapter.go"),
)

WORKER_CALLS: tuple[Call, ...] = (
    Call(_WL, "workloads", "watch", f"{_MC} establishWatch"),
    Call(_WL, "workloads", "list", f"{_MC} remoteCl.List (garbage collection)"),
    Call(_WL, "workloads", "get", f"{_WLGO} getClient().Get"),
    Call(_WL, "workloads", "create", f"{_WLGO} getClient().Create(ctx, clone)"),
    Call(_WL, "workloads", "update", f"{_WLGO} remoteClient.Update"),
    Call(_WL, "workloads", "delete", f"{_WLGO} remoteClient.Delete; {_MC} remoteCl.Delete"),
    Call(_WL, "workloads/status", "update", f"{_WLGO} getClient().Status().Update (preemption gate)"),
    *(
        Call(group, resource, verb, f"{source} remoteClient.{verb.title()}")
        for group, resource, source in JOB_RESOURCES
        for verb in ("get", "create", "delete")
    ),
    *(
        Call(group, resource, verb, f"{source} GetEmptyList; {_MC} establishWatcher")
        for group, resource, source in JOB_RESOURCES
        for verb in ("list", "watch")
    ),
)

# Kueue's integrations the manager needs for those kinds (apis/config/v1beta2 framework names).
INTEGRATIONS = (
    "batch/job",
    "kubeflow.org/mpijob",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/paddlejob",
    "trainer.kubeflow.org/trainjob",
)

CONTROLLER_NAME = "kueue.x-k8s.io/multikueue"  # apis/kueue/v1beta2/multikueue_types.go MultiKueueControllerName
# The Incremental dispatcher (pkg/controller/workloaddispatcher/incrementaldispatcher.go): DefaultStepSize
# workers more per round of incrementalDispatcherRoundTimeout; in MultiKueueConfig order with the
# MultiKueueIncrementalDispatcherRespectConfigOrder gate (beta, on by default since 0.19:
# pkg/features/kube_features.go), else sorted by name.
INCREMENTAL_STEP = 3
INCREMENTAL_ROUND_MINUTES = 5
# How long a workload admitted on a worker whose connection is lost keeps its admission check Ready
# before it is evicted and requeued on the manager (apis/config/v1beta2/configuration_types.go
# WorkerLostTimeout; its default DefaultMultiKueueWorkerLostTimeout in apis/config/v1beta2/defaults.go).
WORKER_LOST_TIMEOUT_MINUTES = 15

# The manager's Kueue Configuration `multiKueue` section (apis/config/v1beta2/configuration_types.go
# MultiKueue at v0.19.2), pinned here rather than left to Kueue's defaults (apis/config/v1beta2/defaults.go)
# so that docs/fleet.md's day-two behaviour does not change with a Kueue upgrade:
# - gcInterval: how often the garbage collector deletes a worker's objects whose manager-side Workload is
#   gone (Kueue's default, 1 minute: a removed job's pods stop within about that);
# - workerLostTimeout: how long a job on an unreachable worker keeps its admission before it is queued
#   again for the others (Kueue's default, 15 minutes: longer than an EKS control-plane update's blip);
# - origin: the label value marking what this manager created on a worker (the garbage collector deletes
#   only its own): the manager's cluster name instead of the shared default "multikueue".
GC_INTERVAL = "1m"
WORKER_LOST_TIMEOUT = f"{WORKER_LOST_TIMEOUT_MINUTES}m"
ORIGIN_MAX = 63  # a label value


def multikueue_config(origin: str, dispatcher_name: str) -> dict[str, str]:
    """The manager's `multiKueue` section."""
    return {
        "gcInterval": GC_INTERVAL,
        "origin": origin[:ORIGIN_MAX].rstrip("-._"),
        "workerLostTimeout": WORKER_LOST_TIMEOUT,
        "dispatcherName": dispatcher_name,
    }
