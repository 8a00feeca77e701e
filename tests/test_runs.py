"""Jobs that run, fail and re-run like real jobs: a rendezvous id per run, bounded retries, mpirun by
absolute path, huge pages the nodes really offer, and the NCCL health gate run for real (bash + awk)
on a published nccl-tests log and on fixtures."""

from __future__ import annotations

import base64
import email
import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import jobs as J
from facts import catalog
from facts.kube import EFA_HUGEPAGES_2MI_PAGES, NODE_GROUP_LABEL
from jobs.nccl_test import GATE_SCRIPT, default_min_bus_bandwidth
from stacks.config import ConfigError
from tests.helpers import built, job_spec, make_ctx, minimal_values, replicas, run_stack

GATE = Path(J.__file__).parent / "scripts" / "nccl_gate.sh"
DATA = Path(__file__).parent / "data" / "nccl"
# A real run, as AWS published it (tests/data/nccl/SOURCES.md).
PUBLISHED_LOG = DATA / "all_reduce_perf-p4d-2x8-efa4.log"
RUN_KINDS = ["mpi", "nccl-test", "pytorch-elastic", "paddle", "data-stage"]


# ----------------------------------------------------------------------------------------------
# Rendezvous per run
# ----------------------------------------------------------------------------------------------


def rdzv_id(**over: Any) -> str:
    (cr,) = built("pytorch-elastic", **over)
    return cr["spec"]["elasticPolicy"]["rdzvId"]


def test_the_rendezvous_id_names_the_job_and_the_run():
    assert re.fullmatch(r"imagenet-1-[0-9a-f]{8}", rdzv_id())
    assert re.fullmatch(r"imagenet-7-[0-9a-f]{8}", rdzv_id(run=7))


def test_the_rendezvous_id_is_unique_per_run_per_job_and_per_spec_and_stable_otherwise():
    base = rdzv_id()
    assert rdzv_id() == base, "the same spec gives the same id (a plain pulumi up changes nothing)"
    assert rdzv_id(run=2) != base, "bumping run gives a new rendezvous"
    assert rdzv_id(name="imagenet-b") != base, "two jobs never share one world"
    assert rdzv_id(args=["--epochs", "1"]) != base, "a changed spec is a new run"


def test_bumping_run_changes_every_run_kinds_spec():
    """A changed spec is what makes `pulumi up` replace the job (replaceOnChanges: spec)."""
    for kind in RUN_KINDS:
        before = [m["spec"] for m in built(kind) if "spec" in m]
        after = [m["spec"] for m in built(kind, run=2) if "spec" in m]
        assert before != after, kind


def test_elastic_jobs_start_with_max_nodes_and_shrink_to_min():
    (cr,) = built("pytorch-elastic", minNodes=1, maxNodes=3)
    policy = cr["spec"]["elasticPolicy"]
    assert replicas(cr)["Worker"]["replicas"] == policy["maxReplicas"] == 3 and policy["minReplicas"] == 1


def test_rendezvous_etcd_or_c10d():
    (cr,) = built("pytorch-elastic", rendezvous="c10d", ctx=make_ctx(etcd_endpoint=None))
    assert cr["spec"]["elasticPolicy"]["rdzvBackend"] == "c10d" and cr["spec"]["elasticPolicy"]["rdzvId"]
    with pytest.raises(Exception, match="rendezvous"):
        job_spec("pytorch-elastic", rendezvous="zookeeper")


# ----------------------------------------------------------------------------------------------
# Bounded retries, deadlines, clean-up
# ----------------------------------------------------------------------------------------------


def run_policy(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [m for m in manifests if m["kind"] in ("MPIJob", "PyTorchJob", "PaddleJob", "Job")]
    return (
        job["spec"]["runPolicy"] if job["kind"] != "Job" else {k: v for k, v in job["spec"].items() if k != "template"}
    )


@pytest.mark.parametrize("kind", RUN_KINDS)
def test_every_run_kind_has_bounded_retries_by_default(kind):
    policy = run_policy(built(kind))
    assert policy["backoffLimit"] == 3
    assert "activeDeadlineSeconds" not in policy and "ttlSecondsAfterFinished" not in policy


@pytest.mark.parametrize("kind", RUN_KINDS)
def test_retries_deadline_and_ttl_come_from_config(kind):
    policy = run_policy(built(kind, backoffLimit=0, activeDeadlineSeconds=7200, ttlSecondsAfterFinished=86400))
    assert (policy["backoffLimit"], policy["activeDeadlineSeconds"], policy["ttlSecondsAfterFinished"]) == (
        0,
        7200,
        86400,
    )


@pytest.mark.parametrize("kind", ["pytorch-elastic", "paddle", "mpi"])
def test_finished_or_failed_kubeflow_jobs_free_their_gpu_nodes(kind):
    assert run_policy(built(kind))["cleanPodPolicy"] == "Running"


def test_negative_retries_and_zero_deadline_are_refused():
    with pytest.raises(Exception, match="backoffLimit"):
        job_spec("mpi", backoffLimit=-1)
    with pytest.raises(Exception, match="activeDeadlineSeconds"):
        job_spec("paddle", activeDeadlineSeconds=0)


# ----------------------------------------------------------------------------------------------
# mpirun by absolute path
# ----------------------------------------------------------------------------------------------


def launcher_of(cr: dict[str, Any]) -> dict[str, Any]:
    (c,) = replicas(cr)["Launcher"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("kind", ["mpi", "nccl-test"])
def test_mpirun_is_called_by_absolute_path(kind):
    (cr,) = built(kind)
    cmd = launcher_of(cr)["command"]
    mpirun = cmd[cmd.index("--") + 1 :] if cmd[0] == "/bin/bash" else cmd
    assert mpirun[0] == "/opt/amazon/openmpi/bin/mpirun"
    (cr,) = built(kind, mpirun="/usr/local/bin/mpirun")
    assert "/usr/local/bin/mpirun" in launcher_of(cr)["command"]


@pytest.mark.parametrize("bad", ["mpirun", "/opt/mpi/bin/", "/opt/my mpi/mpirun"])
def test_mpirun_must_be_an_absolute_path(bad):
    values = minimal_values(
        jobs=[{"name": "m", "kind": "mpi", "nodeGroup": "p4d", "image": "x/y:1", "command": ["a"], "mpirun": bad}]
    )
    with pytest.raises(ConfigError) as info:
        run_stack(values)
    assert [p.key for p in info.value.problems] == ["gpu-training:jobs[m].mpirun"]


# ----------------------------------------------------------------------------------------------
# Huge pages: what a job requests, its group offers
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_plan_with_every_group_used(dev_plan):
    return dev_plan  # (shared: read only)


def _user_data_pages(record_inputs: dict[str, Any]) -> int:
    text = base64.b64decode(record_inputs["userData"]).decode()
    message = email.message_from_string(text)
    assert message.is_multipart(), "EKS merges only MIME multi-part user data"
    (part,) = [p for p in message.walk() if p.get_content_type() == "text/x-shellscript"]
    script = part.get_payload()
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    m = re.search(r"^want=(\d+)$", script, re.M)
    assert m, script
    return int(m.group(1))


def _mi(quantity: str) -> int:
    assert quantity.endswith("Mi"), quantity
    return int(quantity[:-2])


def test_efa_groups_reserve_huge_pages_and_others_do_not(dev_plan_with_every_group_used):
    plan = dev_plan_with_every_group_used
    for lt in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        efa = bool(lt.inputs.get("networkInterfaces"))
        assert ("userData" in lt.inputs) == efa, lt.name
        if efa:
            assert _user_data_pages(lt.inputs) == EFA_HUGEPAGES_2MI_PAGES


def test_every_job_pod_requests_no_more_huge_pages_than_its_group_offers(dev_plan_with_every_group_used):
    plan = dev_plan_with_every_group_used
    offered: dict[str, int] = {}
    for lt in plan.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        group = lt.name.removeprefix("gpu-").removesuffix("-lt")
        offered[group] = _user_data_pages(lt.inputs) * 2 if "userData" in lt.inputs else 0
    checked = 0
    for obj in plan.kubernetes_objects():
        for pod in _pod_specs(obj):
            group = (pod.get("nodeSelector") or {}).get(NODE_GROUP_LABEL)
            for c in pod["containers"]:
                want = (c.get("resources") or {}).get("requests", {}).get("hugepages-2Mi")
                if want:
                    assert _mi(want) <= offered[group], (obj["metadata"]["name"], group)
                    checked += 1
    assert checked >= 2, "the dev jobs request huge pages on the p4d group"


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    for key in ("mpiReplicaSpecs", "pytorchReplicaSpecs", "paddleReplicaSpecs"):
        if key in spec:
            return [r["template"]["spec"] for r in spec[key].values()]
    if "template" in spec and "containers" in (spec["template"].get("spec") or {}):  # not a runtime's JobSet template
        return [spec["template"]["spec"]]
    return []


# ----------------------------------------------------------------------------------------------
# The NCCL health gate, run for real
# ----------------------------------------------------------------------------------------------


def test_the_logs_are_the_ones_their_sources_name():
    """Each log the gate tests read is in the repository, with the checksum SOURCES.md records."""
    rows = re.findall(r"^\| `([^`]+\.log)` \|.*\| `([0-9a-f]{64})` \|$", (DATA / "SOURCES.md").read_text(), re.M)
    assert {name for name, _ in rows} == {p.name for p in DATA.glob("*.log")}
    for name, digest in rows:
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
    assert PUBLISHED_LOG.name in dict(rows)


needs_bash = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("awk") is None, reason="needs bash and awk"
)


def gate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(GATE), *args], capture_output=True, text=True, timeout=30)


@needs_bash
def test_the_published_p4d_log_passes_at_the_p4d_default_and_shows_its_peak():
    minimum = default_min_bus_bandwidth(2, 4, catalog.get("p4d.24xlarge").network_gbps)
    assert minimum == 17.5
    out = gate("check", str(PUBLISHED_LOG), "1", f"{minimum:g}")
    assert out.returncode == 0, out.stdout
    assert "28 sizes, peak bus bandwidth 42.04 GB/s" in out.stdout and "average 8.23785" in out.stdout
    assert "NCCL selected the EFA provider" in out.stdout


@needs_bash
@needs_bash
def test_one_efa_interface_on_p4d_fails_the_default(tmp_path):
    """The published log with its bandwidth scaled to AWS's 1-EFA figure on 2 x p4d (5.89 GB/s)."""
    factor = 5.89 / 42.04
    lines = []
    for line in PUBLISHED_LOG.read_text().splitlines():
        prefix, sep, rest = line.partition("<stdout>:")
        cells = rest.split()
        if sep and len(cells) == 12 and cells[0].isdigit():
            for c in (5, 6, 9, 10):  # algbw, busbw out-of-place and in-place (old layout)
                cells[c] = f"{float(cells[c]) * factor:.2f}"
            line = prefix + sep + " " + " ".join(cells)
        lines.append(line)
    log = tmp_path / "efa1.log"
    log.write_text("\n".join(lines) + "\n")
    p4d = catalog.get("p4d.24xlarge")
    out = gate("check", str(log), "1", f"{default_min_bus_bandwidth(2, 4, p4d.network_gbps):g}")
    assert out.returncode == 1 and "peak bus bandwidth 5.89 GB/s is below minBusBandwidthGBps 17.5" in out.stdout


def test_the_published_log_fails_a_higher_threshold():
    out = gate("check", str(PUBLISHED_LOG), "1", "45")
    assert out.returncode == 1 and "below minBusBandwidthGBps 45" in out.stdout


@needs_bash
def test_the_socket_fallback_fails_on_an_efa_group_even_without_a_bandwidth_floor():
    out = gate("check", str(DATA / "all_reduce_perf-2.16-sockets.log"), "1", "0")
    assert out.returncode == 1
    assert "did not use the EFA provider" in out.stdout and "fell back to sockets" in out.stdout
    assert "peak bus bandwidth 2.38 GB/s" in out.stdout


@needs_bash
def test_the_socket_fallback_passes_where_efa_is_not_expected():
    out = gate("check", str(DATA / "all_reduce_perf-2.16-sockets.log"), "0", "0")
    assert out.returncode == 0, out.stdout


@needs_bash
def test_the_new_column_layout_is_parsed():
    out = gate("check", str(DATA / "all_reduce_perf-2.16-efa.log"), "1", "25")
    assert out.returncode == 0, out.stdout
    assert "29 sizes, peak bus bandwidth 42.00 GB/s (at 2147483648 bytes)" in out.stdout


@needs_bash
def test_a_log_without_results_fails(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("NCCL INFO NET/OFI Selected provider is efa\nmpirun: connection refused\n")
    out = gate("check", str(log), "1", "0")
    assert out.returncode == 1 and "no nccl-tests result rows" in out.stdout


@needs_bash
@pytest.mark.parametrize("fixture,code", [("all_reduce_perf-2.16-efa.log", 0), ("all_reduce_perf-2.16-sockets.log", 1)])
def test_the_emitted_launcher_command_runs_the_gate(fixture, code):
    """The launcher's command exactly as emitted, with mpirun swapped for printing a log."""
    (cr,) = built("nccl-test")
    cmd = launcher_of(cr)["command"]
    assert cmd[:3] == ["/bin/bash", "-c", GATE_SCRIPT] and cmd[4:8] == ["run", "1", "17.5", "--"]
    runnable = ["bash", *cmd[1:8], "cat", str(DATA / fixture)]
    out = subprocess.run(runnable, capture_output=True, text=True, timeout=30)
    assert out.returncode == code, out.stdout
    assert "nccl-gate:" in out.stdout and "Avg bus bandwidth" in out.stdout, "the test's own output is kept in the log"


@needs_bash
def test_a_failing_test_fails_the_job_with_its_own_status():
    out = subprocess.run(
        ["bash", str(GATE), "run", "1", "25", "--", "bash", "-c", "echo boom; exit 3"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 3 and "exited with status 3" in out.stdout


@pytest.mark.parametrize(
    "over,expected",
    [
        ({}, ("1", "17.5")),
        ({"efa": False}, ("0", "0")),
        ({"nodes": 1}, ("0", "0")),
        ({"minBusBandwidthGBps": 30.5}, ("1", "30.5")),
    ],
)
def test_the_gate_arguments_follow_the_group_and_the_config(over, expected):
    (cr,) = built("nccl-test", **over)
    cmd = launcher_of(cr)["command"]
    assert tuple(cmd[5:7]) == expected


def test_default_thresholds_per_type():
    p5 = catalog.get("p5.48xlarge")
    assert default_min_bus_bandwidth(2, p5.efa_interfaces, p5.network_gbps) == 140.0
    p3dn = catalog.get("p3dn.24xlarge")
    assert default_min_bus_bandwidth(4, 1, p3dn.network_gbps) == 4.38
    assert default_min_bus_bandwidth(1, 4, 400) == 0 and default_min_bus_bandwidth(2, 0, 400) == 0
