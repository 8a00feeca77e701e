"""Training-job builders and the TrainingJobs component.

Every kind is built on an EFA type (p4d.24xlarge: 8 GPUs, 4 EFA, RDMA) and on non-EFA targets
(p3.16xlarge, and p3dn.24xlarge with EFA switched off), and the emitted objects are checked for
what the node group derives; custom resources are validated against the CRDs the stack installs
(the vendored operator manifests, strict, with the operators' own rules: tests/crd_validation.py)
and core objects against the Kubernetes schema.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pulumi
import pulumi_kubernetes as k8s
import pytest

import jobs as J
from components.training_jobs import TrainingJobs, TrainingJobsArgs
from facts import catalog, versions
from facts.kube import GPU_TAINT, NODE_GROUP_LABEL
from infra import offline
from jobs.targets import job_targets
from tests import crd_validation
from tests.crd_validation import CRD_FILES
from tests.helpers import CLAIMS, GROUP_TYPE, REPLICA_KEY, ROOT, SYSTEM_SELECTOR, TRAIN_IMAGE, built, make_ctx, replicas
from tests.helpers import TARGET_AZ as AZ
from tests.helpers import TARGET_GROUPS as GROUPS
from tests.helpers import job_spec as spec

EFA_GROUPS = ["p4d"]
NON_EFA_GROUPS = ["p3", "p3dn"]
TEST_GROUPS = EFA_GROUPS + NON_EFA_GROUPS


def only(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, [m["kind"] for m in manifests]
    return found[0]


def pod_specs(manifest: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    if manifest["kind"] in REPLICA_KEY:
        for role, rs in replicas(manifest).items():
            yield role, rs["template"]["spec"]
    elif manifest["kind"] in ("Job", "Deployment"):
        yield manifest["kind"], manifest["spec"]["template"]["spec"]


def gpu_containers(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    found = [
        c
        for _, pod in pod_specs(manifest)
        for c in pod["containers"]
        if "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
    ]
    assert found, f"{manifest['kind']} has no GPU container"
    return found


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


GPU_KIND_MANIFEST = {"mpi": "MPIJob", "nccl-test": "MPIJob", "pytorch-elastic": "PyTorchJob", "paddle": "PaddleJob"}
gpu_kinds = pytest.mark.parametrize("kind", list(GPU_KIND_MANIFEST))
all_groups = pytest.mark.parametrize("group", TEST_GROUPS)


# ----------------------------------------------------------------------------------------------
# Targets
# ----------------------------------------------------------------------------------------------


def test_targets_carry_the_catalog_numbers_and_the_group_placement():
    targets = job_targets(GROUPS, AZ)
    p4d, p3, p3dn, p3dn_efa = (
        catalog.get(t) for t in ("p4d.24xlarge", "p3.16xlarge", "p3dn.24xlarge", "p3dn.24xlarge")
    )
    assert (targets["p4d"].gpus, targets["p4d"].efa_interfaces, targets["p4d"].efa_rdma) == (
        p4d.gpus,
        p4d.efa_interfaces,
        True,
    )
    assert (targets["p3"].gpus, targets["p3"].efa_interfaces, targets["p3"].efa_rdma) == (p3.gpus, 0, False)
    # EFA switched off on the group: no EFA even though the type has it.
    assert (targets["p3dn"].efa_interfaces, targets["p3dn"].efa_rdma) == (0, False)
    # p3dn has EFA but no GPUDirect RDMA.
    assert (targets["p3dn-efa"].efa_interfaces, targets["p3dn-efa"].efa_rdma) == (p3dn_efa.efa_interfaces, False)
    assert targets["p4d"].node_selector == {NODE_GROUP_LABEL: "p4d", "topology.kubernetes.io/zone": AZ}
    assert targets["p4d"].max_nodes == 4
    assert {"key": "team", "operator": "Equal", "value": "vision", "effect": "NoSchedule"} in targets["p4d"].tolerations
    assert targets["p3"].tolerations == [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": GPU_TAINT["effect"]}]


def test_a_target_cannot_claim_more_efa_than_the_type_has():
    with pytest.raises(ValueError, match="EFA"):
        J.JobTarget.from_instance("x", catalog.get("p3.16xlarge"), efa_interfaces=1, max_nodes=1, availability_zone=AZ)
    with pytest.raises(ValueError, match="no GPU"):
        J.JobTarget.from_instance("x", catalog.get("c5.2xlarge"), efa_interfaces=0, max_nodes=1, availability_zone=AZ)


# ----------------------------------------------------------------------------------------------
# What every GPU kind derives from its target
# ----------------------------------------------------------------------------------------------


@gpu_kinds
@all_groups
def test_workers_request_the_whole_node_gpus_of_the_type(kind, group):
    (cr,) = built(kind, group)
    assert cr["kind"] == GPU_KIND_MANIFEST[kind]
    workers = gpu_containers(cr)
    assert workers, "no GPU container"
    for c in workers:
        assert c["resources"]["limits"]["nvidia.com/gpu"] == GROUP_TYPE[group].gpus
        assert c["resources"]["requests"]["nvidia.com/gpu"] == GROUP_TYPE[group].gpus


@gpu_kinds
def test_efa_workers_get_efa_interfaces_hugepages_ipc_lock_and_libfabric_env(kind):
    (cr,) = built(kind, "p4d")
    it = catalog.get("p4d.24xlarge")
    for c in gpu_containers(cr):
        limits, requests = c["resources"]["limits"], c["resources"]["requests"]
        assert limits["vpc.amazonaws.com/efa"] == requests["vpc.amazonaws.com/efa"] == it.efa_interfaces == 4
        assert limits["hugepages-2Mi"] == requests["hugepages-2Mi"] == "5120Mi"
        assert "memory" in requests, "hugepages need a memory or cpu request"
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        env = env_of(c)
        assert env["FI_PROVIDER"] == "efa"
        assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"
        assert env["FI_EFA_FORK_SAFE"] == "1"


@gpu_kinds
@pytest.mark.parametrize("group", NON_EFA_GROUPS)
def test_non_efa_targets_get_none_of_the_efa_settings(kind, group):
    (cr,) = built(kind, group)
    text = json.dumps(cr)
    for marker in ("vpc.amazonaws.com/efa", "hugepages-2Mi", "IPC_LOCK", "FI_PROVIDER", "FI_EFA_", "securityContext"):
        assert marker not in text, marker


@gpu_kinds
def test_efa_without_rdma_leaves_out_device_rdma(kind):
    (cr,) = built(kind, "p3dn-efa")
    for c in gpu_containers(cr):
        assert c["resources"]["limits"]["vpc.amazonaws.com/efa"] == catalog.get("p3dn.24xlarge").efa_interfaces == 1
        env = env_of(c)
        assert env["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in env


@gpu_kinds
def test_efa_false_runs_an_efa_group_without_efa(kind):
    (cr,) = built(kind, "p4d", efa=False)
    assert "vpc.amazonaws.com/efa" not in json.dumps(cr) and "FI_PROVIDER" not in json.dumps(cr)
    assert all(c["resources"]["limits"]["nvidia.com/gpu"] == 8 for c in gpu_containers(cr))


@gpu_kinds
@all_groups
def test_every_pod_tolerates_the_gpu_taint_and_sits_on_the_group_in_its_az(kind, group):
    (cr,) = built(kind, group)
    roles = dict(pod_specs(cr))
    assert roles
    for role, pod in roles.items():
        assert pod["nodeSelector"] == {NODE_GROUP_LABEL: group, "topology.kubernetes.io/zone": AZ}, role
        gpu = [t for t in pod["tolerations"] if t["key"] == GPU_TAINT["key"]]
        assert gpu and gpu[0]["effect"] == GPU_TAINT["effect"] and gpu[0]["operator"] in ("Exists", "Equal"), role
    if group == "p4d":  # the group's own taint is tolerated too
        assert all(any(t["key"] == "team" for t in pod["tolerations"]) for pod in roles.values())


@gpu_kinds
@all_groups
def test_gpu_workers_have_a_memory_backed_dev_shm(kind, group):
    (cr,) = built(kind, group)
    for _, pod in pod_specs(cr):
        for c in pod["containers"]:
            if c in gpu_containers(cr):
                (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
                (vol,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
                assert vol["emptyDir"]["medium"] == "Memory"


@pytest.mark.parametrize("kind", ["mpi", "pytorch-elastic", "paddle"])
@all_groups
def test_volumes_mount_the_stacks_claims(kind, group):
    job = spec(kind, group)
    *shipped, cr = J.build_manifests(job, make_ctx())  # python-etcd's ConfigMap first, on etcd
    for c in gpu_containers(cr):
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        for v in job.volumes:
            assert mounts[v.name]["mountPath"] == v.mount_path
            assert mounts[v.name].get("readOnly", False) == v.read_only
    for role, pod in pod_specs(cr):
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod.get("volumes", [])
            if "persistentVolumeClaim" in v
        }
        if role != "Launcher":
            assert claims == {v.name: CLAIMS[v.name] for v in job.volumes}, role


@pytest.mark.parametrize("kind", ["mpi", "pytorch-elastic", "paddle"])
def test_env_is_plain_text_and_secrets_only_by_reference(kind):
    (cr,) = built(kind)
    for c in gpu_containers(cr):
        env = env_of(c)
        assert env["EPOCHS"] == "2" and env["AMP"] == "true"
        assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
    assert "NCCL_DEBUG" not in json.dumps(cr), "only nccl-test turns NCCL debug on by itself"


def test_a_job_can_set_nccl_debug_itself():
    (cr,) = built("pytorch-elastic", env={"NCCL_DEBUG": "INFO"})
    assert all(env_of(c)["NCCL_DEBUG"] == "INFO" for c in gpu_containers(cr))


def test_disabled_jobs_emit_nothing():
    for kind in J.JOB_KINDS:
        assert J.build_manifests(spec(kind, enabled=False), make_ctx()) == []


def test_a_context_without_the_group_or_claim_is_an_error():
    with pytest.raises(J.JobBuildError, match="node group 'nope'"):
        built("mpi", nodeGroup="nope")
    with pytest.raises(J.JobBuildError, match="volume 'efs'"):
        built("mpi", ctx=make_ctx(claims={"fsx": "fsx-claim"}))


# ----------------------------------------------------------------------------------------------
# MPI and nccl-test
# ----------------------------------------------------------------------------------------------


def flag_values(cmd: list[str], flag: str) -> list[str]:
    return [cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == flag]


def mpirun_of(launcher: dict[str, Any]) -> list[str]:
    """The mpirun command of a launcher (nccl-test runs it behind its gate, after "--")."""
    cmd = launcher["command"]
    return cmd[cmd.index("--") + 1 :] if cmd[0] == "/bin/bash" else cmd


@pytest.mark.parametrize("kind", ["mpi", "nccl-test"])
@all_groups
def test_mpijob_launcher_and_workers(kind, group):
    job = spec(kind, group)
    (cr,) = J.build_manifests(job, make_ctx())
    gpus = GROUP_TYPE[group].gpus
    assert cr["apiVersion"] == "kubeflow.org/v2beta1"
    assert cr["spec"]["slotsPerWorker"] == gpus
    rs = replicas(cr)
    assert set(rs) == {"Launcher", "Worker"}
    assert rs["Launcher"]["replicas"] == 1
    assert rs["Worker"]["replicas"] == job.nodes >= 1
    assert cr["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    (launcher,) = rs["Launcher"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in json.dumps(launcher), "the launcher requests no GPU"
    cmd = mpirun_of(launcher)
    assert cmd[0] == "/opt/amazon/openmpi/bin/mpirun" == job.mpirun
    assert flag_values(cmd, "-np") == [str(job.nodes * gpus)]
    assert flag_values(cmd, "--bind-to") == ["none"]
    forwarded = set(flag_values(cmd, "-x"))
    assert {"PATH", "LD_LIBRARY_PATH"} <= forwarded
    assert set(env_of(launcher)) <= forwarded, "every env var reaches the ranks"
    assert cmd[-len(job.command) - len(job.args) :] == job.command + job.args
    (worker,) = rs["Worker"]["template"]["spec"]["containers"]
    assert worker["command"] == list(J.SSHD_COMMAND)
    assert worker["image"] == launcher["image"] == job.image


def test_mpi_forwards_efa_and_user_env_with_x():
    (cr,) = built("mpi", "p4d")
    (launcher,) = replicas(cr)["Launcher"]["template"]["spec"]["containers"]
    forwarded = flag_values(mpirun_of(launcher), "-x")
    for name in ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "FI_EFA_FORK_SAFE", "EPOCHS", "AMP", "WANDB_API_KEY"):
        assert name in forwarded
    assert env_of(launcher)["FI_PROVIDER"] == "efa"
    # The user's mpirun arguments come before the program.
    cmd = mpirun_of(launcher)
    assert cmd.index("^ucx") < cmd.index("/workspace/train_maskrcnn.py")


@pytest.mark.parametrize("nodes", [1, 3, 4])
def test_np_follows_nodes(nodes):
    (cr,) = built("mpi", "p4d", nodes=nodes)
    (launcher,) = replicas(cr)["Launcher"]["template"]["spec"]["containers"]
    assert flag_values(mpirun_of(launcher), "-np") == [str(nodes * 8)]
    assert replicas(cr)["Worker"]["replicas"] == nodes


@pytest.mark.parametrize("group", ["p4d", "p3"])
def test_nccl_test_runs_all_reduce_perf_with_nccl_debug_info(group):
    job = spec("nccl-test", group)
    (cr,) = J.build_manifests(job, make_ctx())
    (launcher,) = replicas(cr)["Launcher"]["template"]["spec"]["containers"]
    cmd = mpirun_of(launcher)
    assert cmd[-9:] == [J.NCCL_ALL_REDUCE_PERF, "-b", "8", "-e", "2G", "-f", "2", "-g", "1"]
    assert env_of(launcher)["NCCL_DEBUG"] == "INFO" and "NCCL_DEBUG" in flag_values(cmd, "-x")
    assert job.nodes == 2, "two nodes by default: the test is about the traffic between them"


def test_nccl_test_default_image_is_pinned():
    job = spec("nccl-test", "p4d")
    assert job.image == J.NCCL_TESTS_IMAGE
    for image in (J.NCCL_TESTS_IMAGE, J.AWS_CLI_IMAGE, J.TENSORBOARD_IMAGE):
        tag = image.rsplit("/", 1)[-1].split(":", 1)
        assert len(tag) == 2 and tag[1] and tag[1] != "latest", image


# ----------------------------------------------------------------------------------------------
# PyTorch elastic
# ----------------------------------------------------------------------------------------------


@all_groups
def test_pytorchjob_workers_and_elastic_policy_on_etcd(group):
    job = spec("pytorch-elastic", group)
    *shipped, cr = J.build_manifests(job, make_ctx())  # python-etcd's ConfigMap first, on etcd
    assert (cr["apiVersion"], cr["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    rs = replicas(cr)
    assert set(rs) == {"Worker"}, "no Master with elasticPolicy"
    # Elastic: it starts with maxNodes workers and goes on down to minNodes.
    assert rs["Worker"]["replicas"] == job.elastic_max == 3
    (container,) = rs["Worker"]["template"]["spec"]["containers"]
    assert container["name"] == "pytorch"
    assert container["command"] == job.command and container["args"] == job.args
    assert cr["spec"]["nprocPerNode"] == str(GROUP_TYPE[group].gpus)
    assert cr["spec"]["elasticPolicy"] == {
        "rdzvBackend": "etcd",
        "rdzvId": job.rendezvous_id,
        "rdzvHost": "etcd.training.svc",
        "rdzvPort": 2379,
        "minReplicas": 1,
        "maxReplicas": 3,
        "maxRestarts": 10,
    }
    assert "nProcPerNode" not in cr["spec"]["elasticPolicy"]


def test_pytorch_rendezvous_follows_the_etcd_endpoint_and_backend():
    (cr,) = built(
        "pytorch-elastic", ctx=make_ctx(etcd_endpoint="etcd-client.rdzv.svc.cluster.local:32379"), rendezvous="etcd-v2"
    )
    policy = cr["spec"]["elasticPolicy"]
    assert (policy["rdzvBackend"], policy["rdzvHost"], policy["rdzvPort"]) == (
        "etcd-v2",
        "etcd-client.rdzv.svc.cluster.local",
        32379,
    )
    (cr,) = built("pytorch-elastic", ctx=make_ctx(etcd_endpoint=None), rendezvous="c10d")
    assert cr["spec"]["elasticPolicy"]["rdzvBackend"] == "c10d"
    assert "rdzvHost" not in cr["spec"]["elasticPolicy"] and "rdzvPort" not in cr["spec"]["elasticPolicy"]
    with pytest.raises(J.JobBuildError, match="etcd"):
        built("pytorch-elastic", ctx=make_ctx(etcd_endpoint=None))


def test_pytorch_min_max_default_to_nodes():
    job = J.PyTorchElasticSpec.model_validate(
        {
            "name": "fixed",
            "kind": "pytorch-elastic",
            "nodeGroup": "p4d",
            "nodes": 3,
            "image": TRAIN_IMAGE,
            "command": ["torchrun", "x.py"],
        }
    )
    *shipped, cr = J.build_manifests(job, make_ctx())  # python-etcd's ConfigMap first, on etcd
    policy = cr["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"], replicas(cr)["Worker"]["replicas"]) == (3, 3, 3)
    job = J.PyTorchElasticSpec.model_validate(
        {
            "name": "e",
            "kind": "pytorch-elastic",
            "nodeGroup": "p4d",
            "minNodes": 2,
            "maxNodes": 4,
            "image": TRAIN_IMAGE,
            "command": ["t"],
        }
    )
    assert (job.nodes, job.elastic_min, job.elastic_max) == (2, 2, 4)


# ----------------------------------------------------------------------------------------------
# Paddle
# ----------------------------------------------------------------------------------------------


def paddle_webhook_errors(cr: dict[str, Any]) -> list[str]:
    """training-operator v1.9.4 pkg/webhooks/paddlepaddle: keys Master/Worker, a container named
    'paddle' with an image in every replica, a DNS-1035 name (validate_cr has no Paddle rules)."""
    errs = []
    if not J.DNS1035_LABEL.match(cr["metadata"]["name"]):
        errs.append("name")
    for key, rs in cr["spec"]["paddleReplicaSpecs"].items():
        containers = rs["template"]["spec"]["containers"]
        if key not in ("Master", "Worker"):
            errs.append(f"key {key}")
        if not any(c["name"] == "paddle" for c in containers) or not all(c.get("image") for c in containers):
            errs.append(f"{key} containers")
        if rs.get("replicas", 1) < 1:
            errs.append(f"{key} replicas")
    return errs


@all_groups
def test_paddle_ps_mode_has_parameter_servers_and_gpu_trainers(group):
    job = spec("paddle", group)
    (cr,) = J.build_manifests(job, make_ctx())
    assert (cr["apiVersion"], cr["kind"]) == ("kubeflow.org/v1", "PaddleJob")
    rs = replicas(cr)
    assert set(rs) == {"Master", "Worker"}
    assert rs["Master"]["replicas"] == job.pservers == 2
    assert rs["Worker"]["replicas"] == job.nodes == 2
    (ps,) = rs["Master"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in json.dumps(ps) and "vpc.amazonaws.com/efa" not in json.dumps(ps)
    (trainer,) = rs["Worker"]["template"]["spec"]["containers"]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == GROUP_TYPE[group].gpus
    assert paddle_webhook_errors(cr) == []


@all_groups
def test_paddle_collective_mode_has_workers_only(group):
    (cr,) = built("paddle", group, mode="collective", pservers=None)
    assert set(replicas(cr)) == {"Worker"}
    (trainer,) = replicas(cr)["Worker"]["template"]["spec"]["containers"]
    assert trainer["name"] == "paddle"
    assert paddle_webhook_errors(cr) == []


def test_paddle_webhook_check_is_not_vacuous():
    (cr,) = built("paddle")
    bad = copy.deepcopy(cr)
    bad["spec"]["paddleReplicaSpecs"]["PS"] = bad["spec"]["paddleReplicaSpecs"].pop("Master")
    bad["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    assert sorted(paddle_webhook_errors(bad)) == ["Worker containers", "key PS"]


# ----------------------------------------------------------------------------------------------
# data-stage and tensorboard (system nodes)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("group", TEST_GROUPS)
def test_data_stage_is_a_job_on_system_nodes_with_its_own_service_account(group):
    # The target groups do not matter to system jobs: same objects whichever GPU groups exist.
    ctx = make_ctx(targets={group: make_ctx().targets[group]})
    manifests = built("data-stage", ctx=ctx)
    assert [m["kind"] for m in manifests] == ["ServiceAccount", "Job"]
    sa, job = manifests
    assert sa["metadata"] == {**sa["metadata"], "name": "stage-coco", "namespace": "training"}
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert pod["nodeSelector"] == SYSTEM_SELECTOR and "tolerations" not in pod
    (c,) = pod["containers"]
    assert c["image"] == J.AWS_CLI_IMAGE
    assert c["command"][:5] == ["aws", "s3", "sync", "s3://ml-datasets/coco/2017/", "/mnt/fsx/coco/2017/"]
    assert {"name": "fsx", "mountPath": "/mnt/fsx"} in c["volumeMounts"]
    assert pod["volumes"] == [{"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}}]
    assert env_of(c)["AWS_REGION"] == "us-west-2"
    assert "nvidia.com/gpu" not in json.dumps(job)
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    assert "ttlSecondsAfterFinished" not in job["spec"], "a self-deleting Job would be recreated by the next up"


def test_data_stage_policy_reads_only_the_bucket_prefix():
    policy = spec("data-stage").pod_identity_policy("aws")
    statements = {s["Sid"]: s for s in policy["Statement"]}
    assert set(statements) == {"ListPrefix", "ReadPrefix"}
    assert statements["ListPrefix"]["Action"] == "s3:ListBucket"
    assert statements["ListPrefix"]["Resource"] == "arn:aws:s3:::ml-datasets"
    assert statements["ListPrefix"]["Condition"] == {"StringLike": {"s3:prefix": ["coco/2017/", "coco/2017/*"]}}
    assert statements["ReadPrefix"] == {
        "Sid": "ReadPrefix",
        "Effect": "Allow",
        "Action": "s3:GetObject",
        "Resource": "arn:aws:s3:::ml-datasets/coco/2017/*",
    }
    assert "*" not in json.dumps([s["Action"] for s in policy["Statement"]])
    whole = spec("data-stage", source="s3://ml-datasets").pod_identity_policy("aws-us-gov")
    assert [s["Resource"] for s in whole["Statement"]] == [
        "arn:aws-us-gov:s3:::ml-datasets",
        "arn:aws-us-gov:s3:::ml-datasets/*",
    ]
    assert "Condition" not in whole["Statement"][0]


@pytest.mark.parametrize("expose, service_type", [(False, "ClusterIP"), (True, "LoadBalancer")])
def test_tensorboard_reads_the_log_path_and_is_cluster_internal_unless_exposed(expose, service_type):
    manifests = built("tensorboard", expose=expose)
    deployment, service = only(manifests, "Deployment"), only(manifests, "Service")
    pod = deployment["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"][:3] == ["tensorboard", "--logdir", "/mnt/efs/runs/maskrcnn"]
    assert {"name": "efs", "mountPath": "/mnt/efs", "readOnly": True} in c["volumeMounts"]
    assert pod["volumes"] == [{"name": "efs", "persistentVolumeClaim": {"claimName": "efs-claim"}}]
    assert pod["nodeSelector"] == SYSTEM_SELECTOR
    assert service["spec"]["type"] == service_type
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["port"] == J.TENSORBOARD_PORT


def test_pod_hostnames():
    assert spec("mpi", nodes=3).pod_hostnames() == ["maskrcnn-worker-2", "maskrcnn-launcher"]
    assert spec("pytorch-elastic").pod_hostnames() == ["imagenet-worker-2"]  # maxNodes 3
    assert spec("paddle").pod_hostnames() == ["ctr-worker-1", "ctr-master-1"]
    assert spec("tensorboard").pod_hostnames() == []


# ----------------------------------------------------------------------------------------------
# Upstream CRDs and the Kubernetes schema
# ----------------------------------------------------------------------------------------------

K8S_VERSION = "1.33"
CORE_KINDS = {("v1", "ServiceAccount"), ("batch/v1", "Job"), ("apps/v1", "Deployment"), ("v1", "Service")}


def every_manifest() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for group in TEST_GROUPS + ["p3dn-efa"]:
        for kind in J.JOB_KINDS:
            variants = [{}]
            if kind == "paddle":
                variants.append({"mode": "collective", "pservers": None})
            if kind == "pytorch-elastic":
                variants.append({"rendezvous": "c10d"})
            if kind == "tensorboard":
                variants.append({"expose": True})
            for over in variants:
                for m in built(kind, group, **over):
                    out.append(
                        (
                            f"{kind}-{group}-{m['kind']}"
                            + ("-" + "-".join(f"{k}={v}" for k, v in over.items()) if over else ""),
                            m,
                        )
                    )
    return out


MANIFESTS = every_manifest()
CUSTOM = [(label, m) for label, m in MANIFESTS if (m["apiVersion"], m["kind"]) in CRD_FILES]
CORE = [(label, m) for label, m in MANIFESTS if (m["apiVersion"], m["kind"]) in CORE_KINDS]


def test_every_emitted_object_is_a_known_custom_or_core_kind():
    assert len(CUSTOM) + len(CORE) == len(MANIFESTS)
    assert {m["kind"] for _, m in CUSTOM} == {"MPIJob", "PyTorchJob", "PaddleJob"}
    assert {m["kind"] for _, m in CORE} == {"ServiceAccount", "Job", "Deployment", "Service"}


@pytest.fixture(scope="module")
def validator():
    crds = {key: crd_validation.crd_in(path, key[1]) for key, path in CRD_FILES.items()}

    def check(cr: dict[str, Any]) -> list[str]:
        return crd_validation.errors(cr, crds[(cr["apiVersion"], cr["kind"])])

    return check


@pytest.mark.parametrize("label, cr", CUSTOM, ids=[label for label, _ in CUSTOM])
def test_custom_resources_validate_against_the_installed_crds(validator, label, cr):
    assert validator(cr) == []
    if cr["kind"] == "PaddleJob":
        assert paddle_webhook_errors(cr) == []


def test_crd_validation_catches_what_it_should(validator):
    """The validator is not vacuous: a typo'd field, a Worker without replicas, a PyTorch container
    with another name, an int32 out of range, a wrong enum value, a second Master and a Paddle
    container with another name all fail, each with its path."""
    (mpi,) = built("mpi")
    typo = copy.deepcopy(mpi)
    typo["spec"]["slotPerWorker"] = typo["spec"].pop("slotsPerWorker")
    assert any("slotPerWorker" in e for e in validator(typo))
    no_replicas = copy.deepcopy(mpi)
    del no_replicas["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert any("[Worker].replicas" in e and "greater than or equal to 1" in e for e in validator(no_replicas))
    wide = copy.deepcopy(mpi)
    wide["spec"]["runPolicy"]["backoffLimit"] = 2**31
    assert any(e.startswith("spec.runPolicy.backoffLimit:") for e in validator(wide))
    policy = copy.deepcopy(mpi)
    policy["spec"]["runPolicy"]["cleanPodPolicy"] = "Sometimes"
    assert any("cleanPodPolicy" in e for e in validator(policy))
    (torch,) = built("pytorch-elastic")
    renamed = copy.deepcopy(torch)
    renamed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    assert any("name 'pytorch'" in e for e in validator(renamed))
    masters = copy.deepcopy(torch)
    masters["spec"]["pytorchReplicaSpecs"]["Master"] = {
        **copy.deepcopy(masters["spec"]["pytorchReplicaSpecs"]["Worker"]),
        "replicas": 2,
    }
    assert any("[Master].replicas: Forbidden" in e for e in validator(masters))
    (paddle,) = built("paddle")
    trainer = copy.deepcopy(paddle)
    trainer["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    assert any("name 'paddle'" in e for e in validator(trainer))


def test_the_crds_come_from_the_repository():
    """No test reads outside the repository: the CRDs are the ones the stack installs."""
    for path in CRD_FILES.values():
        assert ROOT in path.parents and path.is_file()


def k8s_validate(obj: dict[str, Any], version: str = K8S_VERSION) -> None:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as err:  # pragma: no cover - the failure message
        pytest.fail(f"{obj['kind']}/{obj['metadata'].get('name')}: {err.message} at {list(err.path)}")


@pytest.fixture(scope="module")
def core_schema():
    # kubernetes-validate bundles the schemas (a dev requirement).
    return k8s_validate


@pytest.mark.parametrize("label, obj", CORE, ids=[label for label, _ in CORE])
def test_core_objects_validate_against_the_kubernetes_schema(core_schema, label, obj):
    core_schema(obj)
    for version in versions.KUBERNETES_SUPPORTED:  # and the versions the stack deploys
        core_schema(obj, version)


@pytest.mark.parametrize("label, cr", CUSTOM, ids=[label for label, _ in CUSTOM])
def test_custom_resource_pod_templates_are_valid_pods(core_schema, label, cr):
    for role, rs in replicas(cr).items():
        template = rs["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{cr['metadata']['name']}-{role.lower()}-0", **template["metadata"]},
            "spec": template["spec"],
        }
        core_schema(pod)


def test_kubernetes_schema_check_is_not_vacuous(core_schema):
    (_, job) = built("data-stage")
    bad = copy.deepcopy(job)
    bad["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


# ----------------------------------------------------------------------------------------------
# The component under the offline engine
# ----------------------------------------------------------------------------------------------

COMPONENT = "gputraining:components:TrainingJobs"
ROLE = "aws:iam/role:Role"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


@pytest.fixture(scope="module")
def component_plan():
    jobs = [spec(kind) for kind in J.JOB_KINDS] + [spec("mpi", name="parked", enabled=False)]
    ctx = make_ctx()
    seen: dict[str, Any] = {}

    def program() -> dict[str, Any]:
        provider = k8s.Provider("k8s", kubeconfig="{}", opts=pulumi.ResourceOptions())
        namespace = k8s.core.v1.Namespace(
            "training", metadata={"name": "training"}, opts=pulumi.ResourceOptions(provider=provider)
        )
        component = TrainingJobs(
            "jobs",
            TrainingJobsArgs(jobs=jobs, context=ctx, tags={"env": "test"}, depends_on=[namespace]),
            opts=pulumi.ResourceOptions(providers=[provider]),
        )
        seen.update(provider=provider, component=component)
        return {"jobs": component.job_names}

    plan = offline.run(program, {"aws:region": "us-west-2"}, project="gpu-training", stack="test")
    return plan, seen, jobs, ctx


def test_component_registers_every_enabled_job_and_nothing_for_disabled_ones(component_plan):
    plan, _, jobs, ctx = component_plan
    objects = [o for o in plan.kubernetes_objects() if o["kind"] != "Namespace"]
    assert Counter(o["kind"] for o in objects) == Counter(
        # The ConfigMap: python-etcd, shipped with the elastic job on the stack's etcd (jobs/python_etcd.py).
        {"MPIJob": 2, "PyTorchJob": 1, "ConfigMap": 1, "PaddleJob": 1, "ServiceAccount": 1, "Job": 1}
        | {"Deployment": 1, "Service": 1}
    )
    assert "parked" not in {o["metadata"]["name"] for o in objects}
    # What is registered is exactly what the builders produce (camelCase keys intact).
    expected = [m for j in jobs for m in J.build_manifests(j, ctx)]
    key = lambda m: (m["kind"], m["metadata"]["name"])  # noqa: E731
    assert sorted(map(json.dumps, map(_sorted, sorted(objects, key=key)))) == sorted(
        map(json.dumps, map(_sorted, sorted(expected, key=key)))
    )
    assert plan.outputs["jobs"] == [j.name for j in jobs if j.enabled]


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def test_component_children_are_parented_and_use_the_given_provider(component_plan):
    plan, seen, _, _ = component_plan
    (component,) = plan.of_type(COMPONENT)
    assert component.parent is None
    children = plan.children_of(COMPONENT, "jobs")
    assert {r.type for r in children} >= {
        "kubernetes:kubeflow.org/v2beta1:MPIJob",
        "kubernetes:kubeflow.org/v1:PyTorchJob",
        "kubernetes:kubeflow.org/v1:PaddleJob",
        "kubernetes:batch/v1:Job",
        "kubernetes:apps/v1:Deployment",
        "kubernetes:core/v1:Service",
        "kubernetes:core/v1:ServiceAccount",
        ROLE,
        ROLE_POLICY,
        ASSOCIATION,
    }
    others = [r for r in plan.records if r not in children and r.type != COMPONENT]
    assert {r.type for r in others} == {"pulumi:providers:kubernetes", "kubernetes:core/v1:Namespace"}, (
        "no provider of its own"
    )
    k8s_children = [
        res
        for created in seen["component"].resources.values()
        for res in created
        if res.pulumi_resource_type.startswith("kubernetes:")
    ]
    assert k8s_children and all(res._provider is seen["provider"] for res in k8s_children)
    for r in children:
        if r.type.startswith("kubernetes:"):
            assert {"type": "kubernetes:core/v1:Namespace", "name": "training"} in r.depends_on, r.name


def test_data_stage_role_is_trusted_by_pod_identity_and_reads_only_its_prefix(component_plan):
    plan, _, _, _ = component_plan
    (role,) = plan.of_type(ROLE)
    assert role.inputs["namePrefix"] == "stage-coco-stage-" and len(role.inputs["namePrefix"]) <= 38
    trust = json.loads(role.inputs["assumeRolePolicy"])
    (statement,) = trust["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    (policy,) = plan.of_type(ROLE_POLICY)
    assert policy.inputs["role"] == role.id
    document = json.loads(policy.inputs["policy"])
    assert document == spec("data-stage").pod_identity_policy("aws")
    resources = [s["Resource"] for s in document["Statement"]]
    assert resources == ["arn:aws:s3:::ml-datasets", "arn:aws:s3:::ml-datasets/coco/2017/*"]


def test_data_stage_service_account_is_bound_through_a_pod_identity_association(component_plan):
    plan, _, _, _ = component_plan
    (association,) = plan.of_type(ASSOCIATION)
    (role,) = plan.of_type(ROLE)
    assert association.inputs["clusterName"] == "gpu-training-test"
    assert association.inputs["namespace"] == "training"
    assert association.inputs["serviceAccount"] == "stage-coco"
    # The mocks name the role's ARN after the role resource: the association binds that role.
    assert re.fullmatch(
        rf"arn:aws:iam::{offline.ACCOUNT_ID}:role/{re.escape(role.name)}-[0-9a-f]+", association.inputs["roleArn"]
    )
    sa = plan.named("kubernetes:core/v1:ServiceAccount", "jobs-stage-coco-serviceaccount")
    assert sa.inputs["metadata"]["name"] == association.inputs["serviceAccount"]
    job = plan.named("kubernetes:batch/v1:Job", "jobs-stage-coco-job")
    deps = {(d["type"], d["name"]) for d in job.depends_on}
    assert {
        (ASSOCIATION, association.name),
        (ROLE_POLICY, policy_name(plan)),
        ("kubernetes:core/v1:ServiceAccount", sa.name),
    } <= deps
    assert job.inputs["spec"]["template"]["spec"]["serviceAccountName"] == "stage-coco"


def policy_name(plan: offline.PlanResult) -> str:
    (policy,) = plan.of_type(ROLE_POLICY)
    return policy.name


def test_component_without_data_stage_creates_no_aws_resources():
    jobs = [spec("nccl-test"), spec("tensorboard")]

    def program() -> dict[str, Any]:
        provider = k8s.Provider("k8s", kubeconfig="{}")
        TrainingJobs(
            "jobs", TrainingJobsArgs(jobs=jobs, context=make_ctx()), opts=pulumi.ResourceOptions(provider=provider)
        )
        return {}

    plan = offline.run(program, {"aws:region": "us-west-2"}, project="gpu-training", stack="test")
    assert not [r for r in plan.records if r.type.startswith("aws:")]
    assert sorted(o["kind"] for o in plan.kubernetes_objects()) == ["Deployment", "MPIJob", "Service"]
    assert all(
        r.parent == {"type": COMPONENT, "name": "jobs"}
        for r in plan.records
        if r.type.startswith("kubernetes:") and not r.type.startswith("pulumi:")
    )


def test_a_changed_training_job_is_replaced_not_patched(monkeypatch):
    """The operators ignore spec changes of a running job: custom resources are replaced on any
    spec change, deleted first (their names are fixed)."""
    original = k8s.apiextensions.CustomResource
    seen: list[pulumi.ResourceOptions] = []

    def spy(name, *args, opts=None, **kwargs):
        seen.append(opts)
        return original(name, *args, opts=opts, **kwargs)

    monkeypatch.setattr(k8s.apiextensions, "CustomResource", spy)

    def program() -> dict[str, Any]:
        provider = k8s.Provider("k8s", kubeconfig="{}")
        TrainingJobs(
            "jobs",
            TrainingJobsArgs(jobs=[spec("mpi"), spec("pytorch-elastic")], context=make_ctx()),
            opts=pulumi.ResourceOptions(provider=provider),
        )
        return {}

    offline.run(program, {"aws:region": "us-west-2"}, project="gpu-training", stack="test")
    assert len(seen) == 2
    assert all(o.replace_on_changes == ["spec"] and o.delete_before_replace for o in seen)
