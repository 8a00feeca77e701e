"""What Kueue v0.19.2's MultiKueue does, as the fleet (stacks/fleet.py) relies on it. Sources are files of
kubernetes-sigs/kueue at tag v0.19.2 (the bare mirror: `git show v0.19.2:<path>`).

The calls the manager's MultiKueue controller makes on a worker cluster, through the kubeconfig of the
worker's MultiKueueCluster, for the job kinds this project emits (batch Job, MPIJob, PyTorchJob,
PaddleJob). The worker's ClusterRole grants exactly these (tests/test_fleet_rbac.py evaluates it):

- Workloads: the remote client watches and lists them by the origin label
  (pkg/controller/admissionchecks/multikueue/multikueuecluster.go: establishWatch `c.Watch(..., MatchingLabels
  {MultiKueueOriginLabel})`, the garbage collector `remoteCl.List(ctx, wls, MatchingLabels{...})` and
  `remoteCl.Delete`), reads one (workload.go `getClient().Get`), creates the copy (workload.go
  `getClient().Create(ctx, clone)`), updates it (`remoteClient.Update`, to drop a finalizer; `getClient().Update`
  on eviction), deletes it (`remoteClient.Delete`) and opens its preemption gate (`Status().Update`).
- The job objects: each adapter gets, creates and deletes the remote job
  (pkg/controller/jobs/job/job_multikueue_adapter.go, jobs/mpijob/mpijob_multikueue_adapter.go,
  jobs/kubeflow/kubeflowjob/kubeflowjob_multikueue_adapter.go: `remoteClient.Get/Create/Delete`), and the
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
INTEGRATIONS = ("batch/job", "kubeflow.org/mpijob", "kubeflow.org/pytorchjob", "kubeflow.org/paddlejob")

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
