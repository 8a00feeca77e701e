"""The MPI part of the model of Trainer v2.2.1's merge (``jobs/trainjob_merge.py``): what the MPI plugin and the
JobSet builder do to a TrainJob on an MPI runtime (``jobs/trainjob_mpi.py``), and the hostfile it writes.

kubeflow/trainer at tag v2.2.1:

- ``pkg/runtime/framework/plugins/mpi/mpi.go``, ``EnforceMLPolicy``: the ``node`` pod set's count is
  ``trainer.numNodes`` (less one with ``runLauncherAsNode``, not the stack's case); ``numProcPerNode`` is
  ``trainer.numProcPerNode``; both ``launcher`` and ``node`` get the volume ``mpi-ssh-auth`` (the Secret
  ``<job>-mpi-ssh-auth``: id_rsa, id_rsa.pub, authorized_keys) mounted at ``sshAuthMountPath`` in their ``node``
  container; the launcher also gets ``mpi-hostfile`` (the ConfigMap ``<job>-mpi-hostfile``) at /etc/mpi and the
  OpenMPI env: OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile, OMPI_MCA_orte_keep_fqdn_hostnames=true,
  OMPI_MCA_orte_set_default_slots=<numProcPerNode>, OMPI_MCA_plm_rsh_args="-o ConnectionAttempts=10";
- ``buildHostFileConfigMap``: a line ``<endpoint> slots=<numProcPerNode>`` per ``node`` pod, the endpoints being
  ``<job>-node-0-<i>.<job>`` (``plugins/jobset/jobset.go``, ``IdentifyPodNetwork``; the subdomain is the job's
  name);
- ``plugins/jobset/builder.go``, ``Builder.Trainer``: the trainer step (the launcher) has one replica, its ``node``
  container takes ``trainer.image``, ``command``, ``args``, ``resourcesPerNode`` (replacing) and ``env``
  (upserted); ``plugins/jobset/jobset.go``, ``Build``: every replicated job's parallelism and completions are its
  pod set's count (1 for the launcher).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from jobs import trainjob

MPI = "mpi"
LAUNCHER = "launcher"
SSH_VOLUME, HOSTFILE_VOLUME = "mpi-ssh-auth", "mpi-hostfile"
HOSTFILE_DIR, HOSTFILE = "/etc/mpi", "hostfile"
OMPI_HOSTFILE = "OMPI_MCA_orte_default_hostfile"
OMPI_FQDN = "OMPI_MCA_orte_keep_fqdn_hostnames"
OMPI_SLOTS = "OMPI_MCA_orte_set_default_slots"
OMPI_RSH = "OMPI_MCA_plm_rsh_args"
OMPI_ENV = (OMPI_HOSTFILE, OMPI_FQDN, OMPI_SLOTS, OMPI_RSH)


def upsert(items: list[dict[str, Any]], new: list[dict[str, Any]], key: str = "name") -> list[dict[str, Any]]:
    """Trainer's upsert (pkg/apply): the same key replaced in place, a new one appended."""
    out = copy.deepcopy(items)
    for item in new:
        at = next((i for i, o in enumerate(out) if o[key] == item[key]), None)
        if at is None:
            out.append(copy.deepcopy(item))
        else:
            out[at] = copy.deepcopy(item)
    return out


def _ssh_volume(name: str) -> dict[str, Any]:
    items = [("ssh-privatekey", "id_rsa"), ("ssh-publickey", "id_rsa.pub"), ("ssh-publickey", "authorized_keys")]
    return {
        "name": SSH_VOLUME,
        "secret": {"secretName": f"{name}-mpi-ssh-auth", "items": [{"key": k, "path": p} for k, p in items]},
    }


def _hostfile_volume(name: str) -> dict[str, Any]:
    items = [{"key": HOSTFILE, "path": HOSTFILE, "mode": 0o444}]
    return {"name": HOSTFILE_VOLUME, "configMap": {"name": f"{name}-mpi-hostfile", "items": items}}


def procs_per_node(policy: Mapping[str, Any], trainer: Mapping[str, Any]) -> int:
    return int(trainer.get("numProcPerNode", policy[MPI].get("numProcPerNode", 1)))


def enforce(replicated: list[dict[str, Any]], policy: Mapping[str, Any], trainer: Mapping[str, Any], name: str) -> None:
    """The MPI plugin's EnforceMLPolicy and the pod counts (JobSet ``Build``) on the JobSet's replicated jobs."""
    slots = procs_per_node(policy, trainer)
    for rj in replicated:
        count = int(trainer.get("numNodes", policy.get("numNodes", 1))) if rj["name"] == trainjob.NODE else 1
        rj["replicas"] = 1
        rj["template"]["spec"]["parallelism"] = rj["template"]["spec"]["completions"] = count
        pod = rj["template"]["spec"]["template"]["spec"]
        volumes = [_ssh_volume(name)] + ([_hostfile_volume(name)] if rj["name"] == LAUNCHER else [])
        pod["volumes"] = upsert(pod.get("volumes") or [], volumes)
        for c in pod["containers"]:
            if c["name"] != trainjob.NODE:
                continue
            mounts = [{"name": SSH_VOLUME, "mountPath": policy[MPI].get("sshAuthMountPath", "/root/.ssh")}]
            if rj["name"] == LAUNCHER:
                mounts.append({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR})
                c["env"] = upsert(
                    c.get("env") or [],
                    [
                        {"name": OMPI_HOSTFILE, "value": f"{HOSTFILE_DIR}/{HOSTFILE}"},
                        {"name": OMPI_FQDN, "value": "true"},
                        {"name": OMPI_SLOTS, "value": str(slots)},
                        {"name": OMPI_RSH, "value": "-o ConnectionAttempts=10"},
                    ],
                )
            c["volumeMounts"] = upsert(c.get("volumeMounts") or [], mounts, "mountPath")


def trainer_step(rj: dict[str, Any], trainer: Mapping[str, Any]) -> None:
    """``Builder.Trainer`` on the launcher: its ``node`` container takes the TrainJob's image, command, args,
    resourcesPerNode (replacing) and env (upserted)."""
    for c in rj["template"]["spec"]["template"]["spec"]["containers"]:
        if c["name"] != trainjob.NODE:
            continue
        for field in ("image", "command", "args"):
            if field in trainer:
                c[field] = copy.deepcopy(trainer[field])
        if trainer.get("resourcesPerNode"):
            c["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
        c["env"] = upsert(c.get("env") or [], list(trainer.get("env") or []))


def hostfile(job: Mapping[str, Any], policy: Mapping[str, Any]) -> str:
    """The hostfile Trainer writes for ``job`` (``buildHostFileConfigMap``): one line per ``node`` pod."""
    name, trainer = job["metadata"]["name"], job["spec"].get("trainer") or {}
    slots = procs_per_node(policy, trainer)
    count = int(trainer.get("numNodes", policy.get("numNodes", 1)))
    return "".join(f"{name}-{trainjob.NODE}-0-{i}.{name} slots={slots}\n" for i in range(count))


# What differs between an MPIJob's pods and a TrainJob's on the MPI runtime, and why (anything else has no reason).
MPI_REASONS = {
    "container.name": "Trainer's containers are named `node` (pkg/constants: Node, also in the launcher); the MPIJob's "
    "`launcher` and `worker`",
    **{
        f"container.env.{n}": "set by Trainer's MPI plugin on the launcher (mpi.go EnforceMLPolicy); mpi-operator sets "
        "its own OpenMPI env on its launcher at run time"
        for n in OMPI_ENV
    },
    f"spec.volumes.{SSH_VOLUME}": "Trainer's SSH keys Secret (<job>-mpi-ssh-auth, mpi.go buildSSHAuthSecret); "
    "mpi-operator mounts its own <job>-ssh at run time",
    f"spec.volumes.{HOSTFILE_VOLUME}": "Trainer's hostfile ConfigMap (<job>-mpi-hostfile); mpi-operator mounts its "
    "<job>-config at run time",
    f"container.volumeMounts.{SSH_VOLUME}": "the SSH keys at sshAuthMountPath (/root/.ssh, where mpi-operator puts "
    "them)",
    f"container.volumeMounts.{HOSTFILE_VOLUME}": "the hostfile at /etc/mpi (mpi-operator's place too)",
    "container.terminationMessagePolicy": "the runtime's: the progress guard's message on failure for every job",
    "spec.terminationGracePeriodSeconds": "the runtime's (a TrainJob cannot patch it): the default checkpoint grace "
    "period for every job",
    "spec.restartPolicy": "the runtime's, as the MPIJob's replica restartPolicy (launcher OnFailure, workers Never), "
    "which mpi-operator sets on its pods at run time",
}
