"""The ``jobs`` list of the stack config: parsing and every check, each problem naming its key."""

from __future__ import annotations

from typing import Any

import pytest

import jobs as J
from jobs.targets import job_targets
from stacks.config import ConfigError
from tests.helpers import JOB_GROUPS, TRAIN_IMAGE, dev_values
from tests.helpers import JOBS_KEY as KEY
from tests.helpers import elastic_job as elastic
from tests.helpers import one_job_problem as one
from tests.helpers import parse_job_list as parse


def mpi(**over: Any) -> dict[str, Any]:
    return {
        "name": "maskrcnn",
        "kind": "mpi",
        "nodeGroup": "p4d",
        "nodes": 2,
        "image": TRAIN_IMAGE,
        "command": ["python", "train.py"],
        **over,
    }


def paddle(**over: Any) -> dict[str, Any]:
    return {
        "name": "ctr",
        "kind": "paddle",
        "nodeGroup": "p4d",
        "image": TRAIN_IMAGE,
        "command": ["python", "train.py"],
        **over,
    }


def stage(**over: Any) -> dict[str, Any]:
    return {
        "name": "stage-coco",
        "kind": "data-stage",
        "source": "s3://ml-datasets/coco",
        "volume": "fsx",
        "path": "coco",
        **over,
    }


def tensorboard(**over: Any) -> dict[str, Any]:
    return {"name": "tb", "kind": "tensorboard", "volume": "efs", "logPath": "runs", **over}


def nccl(**over: Any) -> dict[str, Any]:
    return {"name": "nccl", "kind": "nccl-test", "nodeGroup": "p4d", **over}


# ----------------------------------------------------------------------------------------------
# What parses
# ----------------------------------------------------------------------------------------------


def test_a_few_lines_per_kind_parse_with_defaults():
    specs, problems = parse([mpi(), nccl(), elastic(minNodes=1, maxNodes=2), paddle(), stage(), tensorboard()])
    assert problems == []
    assert [type(s) for s in specs] == [
        J.MpiJobSpec,
        J.NcclTestSpec,
        J.PyTorchElasticSpec,
        J.PaddleSpec,
        J.DataStageSpec,
        J.TensorboardSpec,
    ]
    m, n, e, p, d, t = specs
    assert (n.image, n.nodes, n.command) == (J.NCCL_TESTS_IMAGE, 2, [J.NCCL_ALL_REDUCE_PERF])
    assert (e.rendezvous, e.nodes, e.elastic_min, e.elastic_max, e.max_restarts) == ("etcd", 1, 1, 2, 3)
    assert (p.mode, p.parameter_servers) == ("collective", 0)
    assert (d.image, d.bucket, d.prefix) == (J.AWS_CLI_IMAGE, "ml-datasets", "coco")
    assert (t.image, t.expose) == (J.TENSORBOARD_IMAGE, False)
    assert all(s.enabled for s in specs)
    assert m.worker_command == list(J.SSHD_COMMAND) and m.volumes == [] and m.efa is None


def test_the_kind_picks_the_model():
    (n, s), problems = parse([nccl(), stage()])
    assert problems == []
    assert isinstance(n, J.NcclTestSpec) and isinstance(s, J.DataStageSpec)


def test_every_kind_is_registered_with_its_own_kind_value():
    for kind, model in J.JOB_KINDS.items():
        assert model.model_fields["kind"].annotation.__args__ == (kind,)


def test_no_jobs_is_fine():
    assert parse(None) == ([], [])
    assert parse([]) == ([], [])


def test_disabled_jobs_are_parsed_but_flagged_off_and_not_checked_against_the_stack():
    # Its node group is gone and its operator is off: no problem while it is disabled.
    specs, problems = parse([mpi(enabled=False, nodeGroup="gone")], operators=set())
    assert problems == []
    assert len(specs) == 1 and specs[0].enabled is False
    p = one([mpi(enabled=True, nodeGroup="gone")])
    assert p.key == f"{KEY}[maskrcnn].nodeGroup"
    # Checks of the job on its own still apply.
    p = one([mpi(enabled=False, name="Bad_Name")])
    assert p.key == f"{KEY}[0].name"


# ----------------------------------------------------------------------------------------------
# Shape: types, unknown keys, kinds
# ----------------------------------------------------------------------------------------------


def test_jobs_must_be_a_list_of_maps():
    p = one({"name": "x"})
    assert (p.key, "expected a list of jobs" in p.message) == (KEY, True)
    p = one(["mpi"])
    assert p.key == f"{KEY}[0]" and "'mpi' is not allowed" in p.message and "map" in p.message


def test_kind_is_required_and_must_be_known():
    p = one([{"name": "x"}])
    assert p.key == f"{KEY}[x].kind" and "is required" in p.message and "'nccl-test'" in p.message
    p = one([{"name": "x", "kind": "tfjob"}])
    assert p.key == f"{KEY}[x].kind" and "'tfjob' is not a job kind" in p.message and "'pytorch-elastic'" in p.message


def test_unknown_keys_are_reported():
    p = one([mpi(gpus=8)])
    assert p.key == f"{KEY}[maskrcnn].gpus" and p.message.startswith("unknown key 'gpus'")
    p = one([stage(nodeGroup="p4d")])
    assert p.key == f"{KEY}[stage-coco].nodeGroup" and p.message.startswith("unknown key 'nodeGroup'")


def test_wrong_types_are_reported_with_the_value():
    p = one([mpi(nodes="many")])
    assert p.key == f"{KEY}[maskrcnn].nodes" and "'many' is not allowed" in p.message
    p = one([nccl(args=["-b", 8])])  # an unquoted YAML number
    assert p.key == f"{KEY}[nccl].args[1]" and "8 is not allowed" in p.message and "string" in p.message
    p = one([mpi(nodes=0)])
    assert p.key == f"{KEY}[maskrcnn].nodes" and "0 is not allowed" in p.message


def test_required_fields():
    p = one([{"name": "x", "kind": "mpi", "nodeGroup": "p4d", "image": TRAIN_IMAGE}])
    assert (p.key, p.message) == (f"{KEY}[x].command", "is required")


def test_derived_settings_cannot_be_typed():
    p = one([mpi(slotsPerWorker=8)])
    assert p.key == f"{KEY}[maskrcnn].slotsPerWorker" and "derived" in p.message and "remove it" in p.message
    p = one([elastic(nprocPerNode=8)])
    assert p.key == f"{KEY}[imagenet].nprocPerNode" and "derived" in p.message


# ----------------------------------------------------------------------------------------------
# Node groups, nodes, GPU/EFA
# ----------------------------------------------------------------------------------------------


def test_unknown_node_group_lists_the_known_ones():
    p = one([mpi(nodeGroup="p5")])
    assert p.key == f"{KEY}[maskrcnn].nodeGroup"
    assert "'p5' is not a GPU node group" in p.message and "'big', 'p3', 'p3dn', 'p4d'" in p.message
    p = one([mpi(nodeGroup="p5")], groups={})
    assert "add one under gpuNodeGroups" in p.message


def test_more_nodes_than_the_group_can_hold():
    p = one([mpi(), mpi(name="second"), mpi(name="third", nodes=5)])
    assert str(p) == "gpu-training:jobs[third].nodes: 5 is more than node group 'p4d' can hold (maxSize 2)"


def test_efa_true_on_a_group_without_efa():
    p = one([mpi(nodeGroup="p3", efa=True)])
    assert p.key == f"{KEY}[maskrcnn].efa" and "p3.16xlarge has no EFA" in p.message
    p = one([mpi(nodeGroup="p3dn", efa=True)])
    assert p.key == f"{KEY}[maskrcnn].efa" and "efa setting is off" in p.message
    assert parse([mpi(efa=True), mpi(name="sockets", efa=False)])[1] == []


def test_nccl_test_default_image_cannot_run_on_v100():
    p = one([nccl(nodeGroup="p3")])
    assert p.key == f"{KEY}[nccl].image" and "V100" in p.message and "p3.16xlarge" in p.message
    # With an image built for sm_70 it runs (without EFA: the sockets baseline).
    assert parse([nccl(nodeGroup="p3", image="example.com/nccl-tests:sm70-2.16.9")])[1] == []
    assert parse([nccl(nodeGroup="big")])[1] == []


# ----------------------------------------------------------------------------------------------
# Elastic
# ----------------------------------------------------------------------------------------------


def test_elastic_min_greater_than_max():
    p = one([elastic(nodes=1, minNodes=2, maxNodes=1)])
    assert (p.key, p.message) == (f"{KEY}[imagenet].minNodes", "2 is greater than maxNodes 1")


def test_elastic_max_more_than_the_group():
    p = one([elastic(minNodes=1, maxNodes=3)])
    assert (p.key, p.message) == (f"{KEY}[imagenet].maxNodes", "3 is more than node group 'p4d' can hold (maxSize 2)")


def test_elastic_nodes_start_within_min_max():
    p = one([elastic(nodes=1, minNodes=2, maxNodes=2)])
    assert p.key == f"{KEY}[imagenet].nodes" and "outside minNodes..maxNodes (2..2)" in p.message
    (job,), problems = parse([elastic(minNodes=2, maxNodes=2)])
    assert problems == [] and job.nodes == 2


def test_etcd_rendezvous_needs_etcd():
    p = one([elastic()], etcd=False)
    assert (
        p.key == f"{KEY}[imagenet].rendezvous"
        and "'etcd' needs the stack's etcd" in p.message
        and "'c10d'" in p.message
    )
    assert parse([elastic(rendezvous="c10d")], etcd=False)[1] == []
    p = one([elastic(rendezvous="zookeeper")])
    assert p.key == f"{KEY}[imagenet].rendezvous" and "'zookeeper' is not allowed" in p.message


# ----------------------------------------------------------------------------------------------
# Names
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["MaskRCNN", "1job", "mask_rcnn", "job-", "a" * 64, ""])
def test_names_must_be_dns_1035_labels(name):
    p = one([mpi(name=name)])
    assert p.key == f"{KEY}[0].name" and "not a valid Kubernetes name" in p.message


def test_worker_hostnames_must_fit_63_characters():
    # MPIJob: <name>-worker-<nodes-1>; 54 + len("-worker-1") == 63 fits, 55 does not.
    assert parse([mpi(name="m" * 54)])[1] == []
    p = one([mpi(name="m" * 55)])
    assert p.key == f"{KEY}[{'m' * 55}].name"
    assert f"'{'m' * 55}-worker-1' 64 characters long" in p.message and "at most 54 characters" in p.message
    # PyTorchJob: the last elastic worker counts (maxNodes 12 -> worker-11).
    assert parse([elastic(name="e" * 53, nodeGroup="big", minNodes=1, maxNodes=12)])[1] == []
    p = one([elastic(name="e" * 54, nodeGroup="big", minNodes=1, maxNodes=12)])
    assert p.key == f"{KEY}[{'e' * 54}].name" and "-worker-11" in p.message
    # PaddleJob: parameter servers are <name>-master-<i>.
    assert parse([paddle(name="p" * 53, nodes=1, mode="ps", pservers=11, nodeGroup="big")])[1] == []
    p = one([paddle(name="p" * 54, nodes=1, mode="ps", pservers=11, nodeGroup="big")])
    assert "-master-10" in p.message


def test_duplicate_job_names():
    p = one([mpi(), nccl(), mpi(nodes=1)])
    assert (p.key, p.message) == (f"{KEY}[2].name", "'maskrcnn' is used by jobs[0] too; job names must be unique")


# ----------------------------------------------------------------------------------------------
# Operators
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "job, operator",
    [(mpi(), "mpi"), (nccl(), "mpi"), (elastic(), "training"), (paddle(), "training")],
    ids=["mpi", "nccl-test", "pytorch-elastic", "paddle"],
)
def test_a_kind_whose_operator_is_disabled(job, operator):
    other = {"mpi", "training"} - {operator}
    p = one([job], operators=other)
    assert p.key == f"{KEY}[{job['name']}].kind"
    assert f"({operator!r}), which is not enabled" in p.message and f"enabled operators: {other.pop()}" in p.message
    assert parse([job], operators={operator})[1] == []


def test_system_kinds_need_no_operator():
    assert parse([stage(), tensorboard()], operators=set())[1] == []


# ----------------------------------------------------------------------------------------------
# Volumes
# ----------------------------------------------------------------------------------------------


def test_unknown_volume_name():
    p = one([mpi(volumes=[{"name": "lustre", "mountPath": "/data"}])])
    assert (
        p.key == f"{KEY}[maskrcnn].volumes[0].name"
        and "'lustre' is not allowed" in p.message
        and "'fsx' or 'efs'" in p.message
    )


def test_volume_whose_store_is_disabled():
    p = one(
        [mpi(volumes=[{"name": "efs", "mountPath": "/efs"}, {"name": "fsx", "mountPath": "/fsx"}])], volumes={"efs"}
    )
    assert p.key == f"{KEY}[maskrcnn].volumes[1].name"
    assert p.message == "'fsx' is not available: its store is not enabled in this stack (enabled stores: efs)"
    p = one([stage()], volumes=set())
    assert p.key == f"{KEY}[stage-coco].volume" and "enabled stores: none" in p.message
    p = one([tensorboard()], volumes={"fsx"})
    assert p.key == f"{KEY}[tb].volume" and "'efs' is not available" in p.message


def test_mount_paths():
    p = one([mpi(volumes=[{"name": "fsx", "mountPath": "fsx"}])])
    assert p.key == f"{KEY}[maskrcnn].volumes[0].mountPath" and "absolute path" in p.message
    p = one([mpi(volumes=[{"name": "fsx", "mountPath": "/dev/shm"}])])
    assert p.key == f"{KEY}[maskrcnn].volumes[0].mountPath" and "/dev/shm" in p.message
    p = one([mpi(volumes=[{"name": "fsx", "mountPath": "/data"}, {"name": "efs", "mountPath": "/data/"}])])
    assert p.key == f"{KEY}[maskrcnn].volumes[1].mountPath" and "volumes[0]" in p.message
    p = one([mpi(volumes=[{"name": "fsx", "mountPath": "/a"}, {"name": "fsx", "mountPath": "/b"}])])
    assert p.key == f"{KEY}[maskrcnn].volumes[1].name" and "mounted by volumes[0]" in p.message


def test_data_stage_source_and_paths():
    p = one([stage(source="https://ml-datasets.s3.amazonaws.com/coco")])
    assert p.key == f"{KEY}[stage-coco].source" and "is not an S3 URI" in p.message
    p = one([stage(path="../../etc")])
    assert p.key == f"{KEY}[stage-coco].path" and "without '..'" in p.message
    p = one([tensorboard(logPath="runs/../../x")])
    assert p.key == f"{KEY}[tb].logPath"
    p = one([stage(sourceRegion="Oregon")])
    assert p.key == f"{KEY}[stage-coco].sourceRegion"


def test_paddle_pservers_only_in_ps_mode():
    p = one([paddle(pservers=2)])
    assert (p.key, p.message) == (f"{KEY}[ctr].pservers", "2 is only used with mode 'ps' (mode is 'collective')")
    (job,), problems = parse([paddle(mode="ps")])
    assert problems == [] and job.parameter_servers == 1


# ----------------------------------------------------------------------------------------------
# Env, secrets, images
# ----------------------------------------------------------------------------------------------


def test_secrets_only_by_reference():
    p = one([mpi(secretEnv={"TOKEN": "hunter2"})])
    assert p.key == f"{KEY}[maskrcnn].secretEnv.TOKEN"
    p = one([mpi(secretEnv={"TOKEN": {"secret": "Not_Valid", "key": "token"}})])
    assert p.key == f"{KEY}[maskrcnn].secretEnv.TOKEN.secret"
    p = one([mpi(secretEnv={"TOKEN": {"secret": "wandb", "key": "a key"}})])
    assert p.key == f"{KEY}[maskrcnn].secretEnv.TOKEN.key"
    p = one([mpi(env={"TOKEN": "x"}, secretEnv={"TOKEN": {"secret": "wandb", "key": "k"}})])
    assert p.key == f"{KEY}[maskrcnn].secretEnv.TOKEN" and "env too" in p.message


def test_env_names_and_derived_env():
    p = one([mpi(env={"my-var": "1"})])
    assert p.key == f"{KEY}[maskrcnn].env.my-var" and "environment variable name" in p.message
    p = one([mpi(env={"FI_PROVIDER": "sockets"})])
    assert p.key == f"{KEY}[maskrcnn].env.FI_PROVIDER" and "derived from the node group" in p.message
    p = one([nccl(env={"NCCL_DEBUG": "WARN"})])
    assert p.key == f"{KEY}[nccl].env.NCCL_DEBUG" and "always INFO" in p.message
    assert parse([mpi(env={"NCCL_DEBUG": "INFO", "EPOCHS": 3, "AMP": True})])[1] == []


@pytest.mark.parametrize(
    "image", ["nvcr.io/nvidia/pytorch", "pytorch/pytorch:latest", "localhost:5000/train", "two words:1"]
)
def test_images_must_be_pinned(image):
    p = one([mpi(image=image)])
    assert p.key == f"{KEY}[maskrcnn].image" and repr(image) in p.message


def test_pinned_images_pass():
    digest = "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64
    assert parse([mpi(image="localhost:5000/train:v1"), mpi(name="b", image=digest)])[1] == []


# ----------------------------------------------------------------------------------------------
# All together
# ----------------------------------------------------------------------------------------------


def test_every_problem_is_reported_at_once():
    raw = [
        mpi(nodes=3),  # more than p4d holds
        elastic(minNodes=3, maxNodes=2, nodes=2),  # min > max
        nccl(name="Bad"),  # name
        stage(volume="fsx"),  # store disabled
        {"name": "x", "kind": "jax"},  # kind
        mpi(),  # duplicate name
    ]
    specs, problems = parse(raw, volumes={"efs"})
    keys = [p.key for p in problems]
    assert keys == [
        f"{KEY}[0].nodes",
        f"{KEY}[imagenet].minNodes",
        f"{KEY}[2].name",
        f"{KEY}[stage-coco].volume",
        f"{KEY}[x].kind",
        f"{KEY}[5].name",
    ]
    assert len(specs) == 5  # all but the unknown kind parsed
    message = str(ConfigError(problems))
    assert "6 problem(s)" in message and f"{KEY}[stage-coco].volume: 'fsx' is not available" in message


def test_targets_for_the_parsed_jobs_build_clean_manifests():
    """Parsed config -> targets -> manifests: what the stack will do."""
    specs, problems = parse([mpi(), nccl(), elastic(), paddle(mode="ps"), stage(), tensorboard()])
    assert problems == []
    ctx = J.JobsContext(
        namespace="training",
        targets=job_targets(JOB_GROUPS.values(), "us-west-2a"),
        claims={"fsx": "fsx", "efs": "efs"},
        etcd_endpoint="etcd.training.svc:2379",
        system_node_selector={"gputraining/node-group": "system"},
        cluster_name="c",
    )
    kinds = [m["kind"] for s in specs for m in J.build_manifests(s, ctx)]
    # The elastic job on the stack's etcd ships python-etcd in a ConfigMap (jobs/python_etcd.py); the mpi job on EFA
    # with 2 nodes runs the fabric check in its launcher: the guard's ConfigMap and account (tests/test_mpi_fabric.py).
    assert kinds == [
        *("ConfigMap", "ServiceAccount", "Role", "RoleBinding", "MPIJob"),
        *("MPIJob", "ConfigMap", "PyTorchJob", "PaddleJob"),
        *("ServiceAccount", "Job", "Deployment", "Service"),
    ]


def test_a_job_on_a_group_that_failed_its_own_checks_adds_no_second_problem():
    from stacks import config as stack_config

    values = dev_values()
    groups = values["gpu-training:gpuNodeGroups"]
    groups[0] = {**groups[0], "maxSize": 0}  # p4d: invalid on its own; two dev jobs run on it
    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(values, "gpu-training", "dev")
    assert [p.key for p in err.value.problems] == ["gpu-training:gpuNodeGroups[p4d].maxSize"]
