"""The fabric check (jobs/scripts/fabric_check.py, jobs/fabric.py; docs/performance.md): its decision on recorded
NCCL logs (tests/data/nccl_logs, SOURCES.md) and fake sysfs trees of p4d, p5 and p6-b200 nodes, the watch as the
guard runs it against a fake API, the signal lines, and the `fabric` key of a job spec."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from facts import catalog, job_signals
from jobs import resilience
from tests.fake_kube_api import FakeKubeApi, serve
from tests.helpers import ROOT, built, job_spec, make_ctx
from tests.helpers import elastic_job as elastic
from tests.helpers import one_job_problem as one

sys.path.insert(0, str(ROOT / "jobs" / "scripts"))
import fabric_check as fc  # noqa: E402
import job_signal  # noqa: E402

LOGS = ROOT / "tests" / "data" / "nccl_logs"
# The EFA devices of each type as DescribeInstanceTypes lists them (facts/catalog.py): p4d 4, p5 32, p6-b200 8.
TYPES = ("p4d.24xlarge", "p5.48xlarge", "p6-b200.48xlarge")


def sysfs(root: Path, devices: int, moved: dict[int, int] | None = None, base: int = 1000) -> Path:
    """A /sys/class/infiniband tree of ``devices`` EFA devices (rdmap<n>s0, port 1, the EFA driver's byte
    counters); device i's counters stand at ``base + moved.get(i, 0)``."""
    moved = moved or {}
    for i in range(devices):
        counters = root / f"rdmap{16 + i}s0" / "ports" / "1" / "hw_counters"
        counters.mkdir(parents=True, exist_ok=True)
        extra = moved.get(i, 0)
        for name, value in (("tx_bytes", base + extra), ("rx_bytes", base), ("rdma_read_bytes", base), ("tx_pkts", 5)):
            (counters / name).write_text(f"{value}\n")
        (counters / "lifespan").write_text("10\n")
    return root


def readings(tmp: Path, devices: int, still: tuple[int, ...] = ()) -> tuple[dict[str, int], dict[str, int]]:
    before = fc.byte_counters(str(sysfs(tmp / "before", devices)))
    after = fc.byte_counters(str(sysfs(tmp / "after", devices, {i: 4096 for i in range(devices) if i not in still})))
    return before, after


def log(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def test_every_recorded_log_has_its_source():
    listed = (LOGS / "SOURCES.md").read_text()
    for path in LOGS.glob("*.log"):
        assert f"| {path.name} |" in listed and "https://" in listed.split(f"| {path.name} |")[1].split("\n")[0]


@pytest.mark.parametrize("name", ["efa_p4d.log", "efa_libfabric_h200.log"])
def test_nccl_on_efa_with_every_device_moving_is_ok(tmp_path, name):
    before, after = readings(tmp_path, 4)
    verdict = fc.decide(log(name), before, after, 4, 30)
    assert verdict.state == fc.OK and "all 4 devices carried traffic" in verdict.reason


def test_the_socket_fallback_is_found_even_with_counters_moving(tmp_path):
    before, after = readings(tmp_path, 4)
    verdict = fc.decide(log("socket_fallback_mpi.log"), before, after, 4, 30)
    assert verdict.state == fc.FALLBACK and "socket" in verdict.reason and "Using network Socket" in verdict.reason


def test_a_dead_interface_is_named(tmp_path):
    before, after = readings(tmp_path, 4, still=(2,))
    verdict = fc.decide(log("efa_one_nic_lost.log"), before, after, 4, 30)
    assert verdict.state == fc.DEAD_INTERFACE and verdict.reason.endswith("rdmap18s0")
    assert verdict.failed


def test_a_libfabric_provider_other_than_efa_is_a_fallback(tmp_path):
    before, after = readings(tmp_path, 4)
    # aws-ofi-nccl's line with the provider it would print for libfabric's tcp provider (FI_PROVIDER=tcp).
    lines = ["h:1:2 [0] NCCL INFO NET/OFI Selected Provider is tcp", "h:1:2 [0] NCCL INFO Using network Libfabric"]
    assert fc.decide(lines, before, after, 4, 30).state == fc.FALLBACK


def test_no_network_line_is_unknown_and_not_a_failure(tmp_path):
    before, after = readings(tmp_path, 4)
    verdict = fc.decide(["h:1:1 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"], before, after, 4, 30)
    assert verdict.state == fc.UNKNOWN and not verdict.failed


@pytest.mark.parametrize("type_name", TYPES)
def test_fake_sysfs_of_each_type(tmp_path, type_name):
    devices = catalog.get(type_name).efa_interfaces
    lines = log("efa_p4d.log")
    before, after = readings(tmp_path / "all", devices)
    assert len(before) == devices and fc.decide(lines, before, after, devices, 30).state == fc.OK
    before, after = readings(tmp_path / "one", devices, still=(devices - 1,))
    dead = fc.decide(lines, before, after, devices, 30)
    assert dead.state == fc.DEAD_INTERFACE and f"1 of {devices} EFA devices" in dead.reason
    before, after = readings(tmp_path / "none", devices, still=tuple(range(devices)))
    assert fc.decide(lines, before, after, devices, 30).state == fc.FALLBACK
    before, after = readings(tmp_path / "fewer", devices - 1)
    assert fc.decide(lines, before, after, devices, 30).state == fc.DEAD_INTERFACE
    assert fc.decide(lines, {}, {}, devices, 30).state == fc.FALLBACK  # no device in the pod at all


def test_the_worker_gets_nccl_info_for_init_and_net_in_a_file_unless_the_job_sets_nccl_debug():
    added, pattern = fc.nccl_env({})
    assert added == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": fc.NCCL_FILE, "NCCL_DEBUG_SUBSYS": "INIT,NET"}
    assert pattern == fc.NCCL_FILE
    assert fc.nccl_env({"NCCL_DEBUG": "INFO"}) == ({}, None)  # its own setting: the guard reads the output
    assert fc.nccl_env({"NCCL_DEBUG": "WARN"})[0]["NCCL_DEBUG"] == "INFO"  # WARN lines: relayed from the file
    assert fc.nccl_env({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/l/%h"}) == ({}, "/l/%h")


def test_nccl_warnings_reach_the_log_when_the_job_asked_for_warn(tmp_path, capsys):
    watch = fc.FabricWatch(
        "warn", 4, {"NCCL_DEBUG": "WARN", "NCCL_DEBUG_FILE": str(tmp_path / "%h.%p.log")}, "j", print
    )
    watch.child_env()
    (tmp_path / "h.1.log").write_text("h:1:2 [0] NCCL INFO Using network Socket\nh:1:2 [0] NCCL WARN NET/OFI gone\n")
    watch.relay_warnings(lambda s: None, rounds=2)
    assert capsys.readouterr().err == "h:1:2 [0] NCCL WARN NET/OFI gone\n"  # once, and no INFO line


def test_signal_lines_follow_the_contract():
    line = json.loads(job_signal.signal_line("fabric_fallback", "bert", "ml", 1, node="n1", empty=None))
    assert line == {
        job_signals.SIGNAL_KEY: "fabric_fallback",
        "job": "bert",
        "namespace": "ml",
        "value": 1,
        "node": "n1",
    }
    with pytest.raises(ValueError, match="not a signal"):
        job_signal.signal_line("fabric_bad", "bert", "ml", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def watch_run(tmp_path: Path, mode: str, log_name: str, capsys) -> tuple[Any, FakeKubeApi, list[dict]]:
    """The watch as the guard runs it on a p4d node: NCCL's file written, the counters moving meanwhile."""
    root = sysfs(tmp_path / "sys", 4)
    fake = FakeKubeApi()
    clock = Clock()
    nccl = tmp_path / "nccl"

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        written = nccl / "host.42.log"
        if clock.now >= 3 and not written.exists():  # NCCL initialises 3 s in
            written.write_text((LOGS / log_name).read_text())
        elif written.exists():  # traffic from then on
            sysfs(root, 4, {i: int(clock.now) for i in range(4)})

    with serve(fake, tmp_path / "sa") as api_env:
        env = {**api_env, "NODE_NAME": "ip-10-1-1-1", "POD_NAME": "bert-worker-1", "POD_NAMESPACE": "ml"}
        watch = fc.FabricWatch(mode, 4, env, "bert", lambda text: None, root=str(root))
        watch.env = {**env, "NCCL_DEBUG_FILE": str(nccl / "%h.%p.log")}
        watch.child_env()
        verdict = watch.run(sleep, lambda: clock.now)
    signals = [json.loads(x) for x in capsys.readouterr().out.splitlines() if job_signals.SIGNAL_KEY in x]
    return (verdict, watch), fake, signals


def test_enforce_on_a_fallback_records_an_event_a_signal_and_asks_to_stop(tmp_path, capsys):
    (verdict, watch), fake, signals = watch_run(tmp_path, "enforce", "socket_fallback_mpi.log", capsys)
    assert verdict.state == fc.FALLBACK and watch.failure and "ip-10-1-1-1" in watch.failure
    [(path, event)] = fake.of("POST", "/events")
    assert path == "/api/v1/namespaces/ml/events" and event["reason"] == "FabricFallback"
    assert event["involvedObject"] == {"kind": "Pod", "name": "bert-worker-1", "apiVersion": "v1", "namespace": "ml"}
    assert [s[job_signals.SIGNAL_KEY] for s in signals] == ["fabric_fallback"] and signals[0]["node"] == "ip-10-1-1-1"


def test_warn_reports_and_lets_the_job_go_on(tmp_path, capsys):
    (verdict, watch), fake, signals = watch_run(tmp_path, "warn", "socket_fallback_mpi.log", capsys)
    assert verdict.failed and watch.failure is None
    assert "the job goes on" in fake.of("POST", "/events")[0][1]["message"] and len(signals) == 1


def test_a_healthy_node_says_fabric_ok_and_records_no_event(tmp_path, capsys):
    (verdict, watch), fake, signals = watch_run(tmp_path, "enforce", "efa_p4d.log", capsys)
    assert verdict.state == fc.OK and watch.failure is None and fake.of("POST") == []
    assert [s[job_signals.SIGNAL_KEY] for s in signals] == ["fabric_ok"]


# -- the job spec ------------------------------------------------------------------------------


def worker_container(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    job = next(m for m in manifests if m["kind"] == "PyTorchJob")
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]


def test_an_elastic_job_on_efa_with_two_nodes_gets_the_check_enforced_by_default():
    manifests = built("pytorch-elastic", "p4d", fabric=None)
    pod = worker_container(manifests)
    command = pod["containers"][0]["command"]
    assert command[command.index("--fabric") + 1] == "enforce" and "--efa-interfaces" in command
    assert pod["serviceAccountName"] == "imagenet-guard"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    config_map = next(m for m in manifests if m["kind"] == "ConfigMap")
    assert config_map["data"]["job_signals.py"] == Path(job_signals.__file__).read_text()
    for name in ("progress_guard.py", "fabric_check.py", "job_signal.py", "kube_api.py"):
        assert config_map["data"][name] == (ROOT / "jobs" / "scripts" / name).read_text()
    role = next(m for m in manifests if m["kind"] == "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


@pytest.mark.parametrize(
    ("group", "over", "mode"),
    [
        ("p4d", {}, "enforce"),
        ("p3", {}, "off"),  # no EFA on the group
        ("p3dn", {}, "off"),  # the group's EFA is off
        ("p4d", {"efa": False}, "off"),
        ("p4d", {"nodes": 1, "minNodes": 1, "maxNodes": 1}, "off"),  # one node: NCCL stays inside it
        ("p4d", {"fabric": "warn"}, "warn"),
        ("p4d", {"fabric": "off"}, "off"),
    ],
)
def test_the_mode_follows_the_group_the_nodes_and_the_key(group, over, mode):
    spec = job_spec("pytorch-elastic", group, **{"fabric": None, **over})
    assert isinstance(spec, resilience.ResilientJob)
    assert spec.fabric_mode(spec.efa_of(make_ctx())) == mode


def test_an_mpi_job_runs_the_check_in_its_launcher_not_its_ranks():
    # tests/test_mpi_fabric.py has the launcher's side
    spec = job_spec("mpi", "p4d", fabric=None)
    assert isinstance(spec, resilience.ResilientJob) and spec.fabric is None and spec.fabric_mode(4) == "enforce"
    assert "--fabric" not in spec.rank_command()


def test_fabric_on_a_group_without_efa_is_refused():
    problem = one([elastic(nodeGroup="p3", nodes=2, fabric="enforce")])
    assert problem.key.endswith("[imagenet].fabric") and "'enforce' needs a job on EFA" in problem.message


def test_a_bad_fabric_value_names_the_choices():
    problem = one([elastic(nodes=2, fabric="strict")])
    assert problem.key.endswith("jobs[imagenet].fabric")
    assert "enforce" in problem.message and "'strict'" in problem.message
