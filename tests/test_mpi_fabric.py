"""The fabric check of MPI jobs, in the launcher (jobs/scripts/mpi_fabric.py, jobs/mpi.py; docs/performance.md,
"MPI jobs"): one verdict per host from the recorded NCCL logs (tests/data/nccl_logs) as mpirun forwards them, and the
real launcher script around a fake mpirun that replays them and answers the counter run from fake sysfs trees.

The prefixes: NCCL's own ``<host>:<pid>:<tid> [<cudaDev>] NCCL INFO`` (NCCL src/debug.cc, ncclDebugLog) and, with
mpirun's --tag-output, Open MPI's ``[<jobid>,<rank>]<stdout>:`` before it (Open MPI mpirun(1), --tag-output)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from facts import job_signals
from tests.fake_kube_api import FakeKubeApi, serve
from tests.helpers import ROOT, built, job_spec
from tests.helpers import one_job_problem as one

sys.path.insert(0, str(ROOT / "jobs" / "scripts"))
import fabric_check as fc  # noqa: E402
import mpi_fabric as mf  # noqa: E402

LOGS = ROOT / "tests" / "data" / "nccl_logs"


def tagged(name: str) -> list[str]:
    """A recorded log as mpirun --tag-output forwards it (lines already tagged kept as they are)."""
    out = []
    for i, line in enumerate((LOGS / name).read_text().splitlines()):
        out.append(line if fc.MPI_PREFIX.match(line) else f"[1,{i % 16}]<stdout>:{line}")
    return out


def counters(hosts: list[str], devices: int, value: int, still: dict[str, set[int]] | None = None) -> dict:
    still = still or {}
    return {h: {f"rdmap{16 + d}s0": 1000 if d in still.get(h, set()) else value for d in range(devices)} for h in hosts}


def test_the_host_is_read_from_nccls_prefix_behind_mpiruns():
    assert mf.host_of("[1,7]<stdout>:ip-172-32-38-1:21471:22316 [7] NCCL INFO Ring 00 : 7 -> 8") == "ip-172-32-38-1"
    assert mf.host_of("8h200-2:6831:6840 [0] NCCL INFO Using network Libfabric") == "8h200-2"
    assert mf.host_of("[1,0]<stdout>:#       size         count      type") is None


def test_a_tag_inside_a_line_starts_a_new_one():
    check = mf.LauncherCheck(mf.parse(["--fabric", "warn", "--hosts", "1", "--mpirun", "/m", "--", "x"]), {}, print)
    check.feed("[1,0]<stdout>:vm:1:1 [0] NCCL INFO Using network Libfabric[1,1]<stdout>:vm:2:2 [1] NCCL INFO x\n")
    assert [mf.host_of(x) for x in check.seen()] == ["vm", "vm"]
    assert fc.read_network(check.seen()).networks == ("libfabric",)


def test_each_host_of_a_healthy_efa_run_is_ok():
    lines = tagged("efa_p4d.log")
    hosts = ["ip-10-216-178-255", "ip-10-216-179-119"]
    verdicts = mf.host_verdicts(lines, counters(hosts, 4, 1000), counters(hosts, 4, 9000), 4, 30)
    assert sorted(verdicts) == hosts and {v.state for v in verdicts.values()} == {fc.OK}


def test_the_socket_fallback_is_found_on_its_host():
    verdicts = mf.host_verdicts(tagged("socket_fallback_mpi.log"), {}, {}, 4, 30)
    assert list(verdicts) == ["test-nccl-worker-0"]
    assert verdicts["test-nccl-worker-0"].state == fc.FALLBACK and "socket" in verdicts["test-nccl-worker-0"].reason


def test_a_dead_interface_is_named_on_its_host_only():
    lines = tagged("efa_one_nic_lost.log")
    hosts = sorted({mf.host_of(x) for x in lines} - {None})  # type: ignore[arg-type]
    lost = "ip-172-32-36-209"  # its own lines name no network (only P2P and "No NIC info"): the job's choice stands
    after = counters(hosts, 4, 5000, {lost: {0}})
    verdicts = mf.host_verdicts(lines, counters(hosts, 4, 1000), after, 4, 30)
    assert verdicts[lost].state == fc.DEAD_INTERFACE and "rdmap16s0" in verdicts[lost].reason
    assert all(v.state == fc.OK for h, v in verdicts.items() if h != lost)


def test_a_host_that_answers_the_counters_but_carried_nothing_is_a_fallback():
    lines = tagged("efa_libfabric_h200.log")
    before = counters(["8h200-2", "8h200-3", "8h200-4"], 2, 1000)
    after = {**counters(["8h200-2", "8h200-3"], 2, 2000), **counters(["8h200-4"], 2, 1000)}
    verdicts = mf.host_verdicts(lines, before, after, 2, 30)
    assert verdicts["8h200-4"].state == fc.FALLBACK and verdicts["8h200-2"].state == fc.OK


def test_counter_lines_are_parsed_per_host_and_device():
    root = "/sys/class/infiniband"
    text = "\n".join(
        [
            f"{mf.COUNTER_TAG} w-0 {root}/rdmap16s0/ports/1/hw_counters/tx_bytes 10",
            f"{mf.COUNTER_TAG} w-0 {root}/rdmap16s0/ports/1/hw_counters/rx_bytes 5",
            f"[1,1]<stdout>:{mf.COUNTER_TAG} w-1 {root}/rdmap17s0/ports/1/hw_counters/tx_bytes 7",
            "Warning: Permanently added 'w-1' (ED25519) to the list of known hosts.",
            f"{mf.COUNTER_TAG} w-1 /elsewhere/rdmap17s0/ports/1/hw_counters/tx_bytes 99",
        ]
    )
    assert mf.parse_counters(text, root) == {"w-0": {"rdmap16s0": 15}, "w-1": {"rdmap17s0": 7}}
    answered = f"{mf.COUNTER_TAG} w-2 answered\n"  # a host without EFA devices: answered, nothing under the root
    assert mf.parse_counters(answered + text, root)["w-2"] == {}


def test_a_host_whose_counters_could_not_be_read_is_judged_by_its_lines_and_not_failed():
    lines = tagged("efa_p4d.log")
    hosts = ["ip-10-216-178-255", "ip-10-216-179-119"]
    before = counters(hosts, 4, 1000)
    after = counters(hosts[:1], 4, 9000)  # the second reading did not reach the other host
    verdicts = mf.host_verdicts(lines, before, after, 4, 30)
    assert verdicts[hosts[0]].state == fc.OK and "carried traffic" in verdicts[hosts[0]].reason
    assert verdicts[hosts[1]].state == fc.OK and "could not be read" in verdicts[hosts[1]].reason
    answered_empty = {**after, hosts[1]: {}}  # it answered, and shows no EFA device: a fall-back
    assert mf.host_verdicts(lines, before, answered_empty, 4, 30)[hosts[1]].state == fc.FALLBACK


def test_a_run_that_ends_before_the_check_keeps_its_exit_code(tmp_path, monkeypatch, capsys):
    run = launcher_run(tmp_path, monkeypatch, capsys, "enforce", "socket_fallback_mpi.log", run_seconds=0)
    assert run["code"] == 0 and run["term"] == ""  # reported, not failed afterwards
    assert [s[job_signals.SIGNAL_KEY] for s in run["signals"]] == ["fabric_fallback"]


def test_the_counter_run_is_one_process_per_node_through_the_same_mpirun():
    cmd = mf.counter_command("/opt/amazon/openmpi/bin/mpirun", 2, fc.INFINIBAND)
    assert cmd[:4] == ["/opt/amazon/openmpi/bin/mpirun", "--allow-run-as-root", "-np", "2"]
    assert cmd[cmd.index("--map-by") + 1] == "ppr:1:node" and cmd[-3:-1] == ["/bin/sh", "-c"]


# -- the real launcher script around a fake mpirun ---------------------------------------------------------------

FAKE_MPIRUN = """#!{python}
import json, os, subprocess, sys, time
cfg = json.load(open(os.environ["FAKE_MPI"]))
if "ppr:1:node" in sys.argv:  # the counter run: the real script once per host, on that host's fake sysfs
    calls = cfg["dir"] + "/calls"
    n = int(open(calls).read()) + 1 if os.path.exists(calls) else 1
    open(calls, "w").write(str(n))
    for host in cfg["hosts"]:
        tree = cfg["dir"] + "/" + host
        for d in range(cfg["devices"]):
            c = tree + "/rdmap%ds0/ports/1/hw_counters" % (16 + d)
            os.makedirs(c, exist_ok=True)
            still = d in cfg["still"].get(host, [])
            open(c + "/tx_bytes", "w").write(str(1000 + (0 if still else n * 4096)))
        link = cfg["root"]
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(tree, link)
        env = dict(os.environ, FAKE_HOST=host, PATH=cfg["dir"] + "/bin:" + os.environ["PATH"])
        subprocess.run(sys.argv[-3:], env=env, check=True)
    sys.exit(0)
for line in cfg["lines"]:
    print(line, flush=True)
time.sleep(cfg["run_seconds"])
print("# Avg bus bandwidth    : 42.0", flush=True)
"""


# The launcher runs that last as long as the fake mpirun's 4-20 s of replayed work (mostly waiting, little CPU):
# real runs of the launcher, in bash scripts/test_slow.sh with the project's other real runs.
SECONDS_LONG = pytest.mark.real_run


def launcher_run(tmp_path: Path, monkeypatch, capsys, mode: str, log: str, **over: Any) -> dict[str, Any]:
    lines = tagged(log)
    hosts = sorted({mf.host_of(x) for x in lines} - {None})  # type: ignore[type-var]
    cfg = {"dir": str(tmp_path), "hosts": hosts, "devices": 4, "still": {}, "root": str(tmp_path / "ib")}
    cfg.update({"lines": lines, "run_seconds": 20, **over})
    (tmp_path / "bin").mkdir()
    hostname = tmp_path / "bin" / "hostname"
    hostname.write_text('#!/bin/sh\necho "$FAKE_HOST.ec2.internal"\n')  # NCCL keeps the name up to its first dot
    mpirun = tmp_path / "mpirun"
    mpirun.write_text(FAKE_MPIRUN.format(python=sys.executable))
    for f in (hostname, mpirun):
        f.chmod(0o755)
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("FAKE_MPI", str(tmp_path / "cfg.json"))
    monkeypatch.setattr(mf, "TERMINATION_LOG", str(tmp_path / "termination-log"))
    monkeypatch.setattr(mf, "STOP_GRACE", 5.0)
    fake = FakeKubeApi()
    argv = ["--fabric", mode, "--efa-interfaces", "4", "--hosts", str(len(hosts)), "--job", "hvd"]
    argv += ["--mpirun", str(mpirun), "--", str(mpirun), "-np", "16", "all_reduce_perf"]
    with serve(fake, tmp_path / "sa") as api_env:
        env = {**os.environ, **api_env, "POD_NAME": "hvd-launcher-x", "POD_NAMESPACE": "ml"}
        env.update({"GPUTRAINING_INFINIBAND": cfg["root"], "GPUTRAINING_FABRIC_WINDOW": "8"})
        env["GPUTRAINING_FABRIC_COUNTER_SECONDS"] = "0.5"
        started = time.monotonic()
        code = mf.supervise(mf.parse(argv), env)
        took = time.monotonic() - started
    out = capsys.readouterr()
    signals = [json.loads(x) for x in out.out.splitlines() if job_signals.SIGNAL_KEY in x]
    term = tmp_path / "termination-log"
    return {
        "code": code,
        "took": took,
        "events": fake.of("POST", "/events"),
        "signals": signals,
        "err": out.err,
        "out": out.out,
        "term": term.read_text() if term.exists() else "",
    }


@SECONDS_LONG
def test_enforce_stops_a_socket_fallback_fast_with_the_reason_and_an_event(tmp_path, monkeypatch, capsys):
    run = launcher_run(tmp_path, monkeypatch, capsys, "enforce", "socket_fallback_mpi.log")
    assert run["code"] == mf.FABRIC_EXIT and run["took"] < 15  # mpirun would have run 20 s
    assert "test-nccl-worker-0" in run["term"] and "Socket" in run["term"].replace("socket", "Socket")
    [(path, event)] = run["events"]
    assert path == "/api/v1/namespaces/ml/events" and event["reason"] == "FabricFallback"
    assert event["involvedObject"]["name"] == "hvd-launcher-x" and "stopping the job" in event["message"]
    assert [s[job_signals.SIGNAL_KEY] for s in run["signals"]] == ["fabric_fallback"]
    assert "Using network Socket" in run["out"]  # mpirun's output still reaches the launcher's log


@SECONDS_LONG
def test_a_healthy_run_is_not_stopped_and_says_fabric_ok_per_host(tmp_path, monkeypatch, capsys):
    run = launcher_run(tmp_path, monkeypatch, capsys, "enforce", "efa_p4d.log", run_seconds=4)
    assert run["code"] == 0 and run["events"] == [] and run["term"] == ""
    assert sorted(s["node"] for s in run["signals"]) == ["ip-10-216-178-255", "ip-10-216-179-119"]
    assert {s[job_signals.SIGNAL_KEY] for s in run["signals"]} == {"fabric_ok"}
    assert all("all 4 devices carried traffic" in s["reason"] for s in run["signals"])  # the counters were read
    assert "Avg bus bandwidth" in run["out"]


@SECONDS_LONG
def test_warn_reports_a_dead_interface_and_lets_the_job_finish(tmp_path, monkeypatch, capsys):
    run = launcher_run(
        tmp_path, monkeypatch, capsys, "warn", "efa_p4d.log", run_seconds=4, still={"ip-10-216-179-119": [2]}
    )
    assert run["code"] == 0 and run["term"] == "", run["err"]
    assert len(run["events"]) == 1, run["err"]
    [(_, event)] = run["events"]
    assert event["reason"] == "FabricDeadInterface" and event["message"].startswith("ip-10-216-179-119: ")
    assert "the job goes on" in event["message"]


# -- the job spec -------------------------------------------------------------------------------------------------


def mpijob(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in manifests if m["kind"] == "MPIJob")


def test_an_mpi_job_on_efa_with_two_nodes_runs_the_check_in_its_launcher():
    manifests = built("mpi", "p4d", fabric=None)
    specs = mpijob(manifests)["spec"]["mpiReplicaSpecs"]
    launcher = specs["Launcher"]["template"]["spec"]
    command = launcher["containers"][0]["command"]
    assert command[:2] == ["python3", "/opt/gputraining/mpi_fabric.py"]
    assert command[command.index("--fabric") + 1] == "enforce" and command[command.index("--hosts") + 1] == "2"
    mpirun = command[command.index("--") + 1 :]
    assert mpirun[0] == command[command.index("--mpirun") + 1] and "-np" in mpirun
    assert launcher["serviceAccountName"] == "maskrcnn-guard"
    env = {e["name"] for e in launcher["containers"][0]["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env
    config_map = next(m for m in manifests if m["kind"] == "ConfigMap")
    assert config_map["data"]["mpi_fabric.py"] == (ROOT / "jobs" / "scripts" / "mpi_fabric.py").read_text()
    worker_command = " ".join(specs["Worker"]["template"]["spec"]["containers"][0]["command"])
    assert "--fabric" not in " ".join(mpirun) and "--fabric" not in worker_command  # the ranks do not run it


@pytest.mark.parametrize(("over", "mode"), [({}, "enforce"), ({"fabric": "warn"}, "warn"), ({"fabric": "off"}, "off")])
def test_the_mpi_mode_follows_the_key(over, mode):
    spec = job_spec("mpi", "p4d", **{"fabric": None, **over})
    specs = mpijob(built("mpi", "p4d", **{"fabric": None, **over}))["spec"]["mpiReplicaSpecs"]
    command = specs["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert spec.fabric_mode(4) == mode
    assert ("mpi_fabric.py" in " ".join(command)) == (mode != "off")


def test_fabric_on_an_mpi_job_without_efa_is_refused():
    job = {"name": "hvd", "kind": "mpi", "nodeGroup": "p3", "nodes": 2, "image": "horovod/horovod:0.28.1"}
    problem = one([{**job, "command": ["python", "t.py"], "fabric": "warn"}])
    assert problem.key.endswith("[hvd].fabric") and "'warn' needs a job on EFA" in problem.message


def launcher_env(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    launcher = mpijob(manifests)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in launcher["env"]}


def test_the_ranks_get_nccls_init_and_net_lines_forwarded_unless_the_job_sets_nccl_debug():
    manifests = built("mpi", "p4d", fabric=None)
    env = launcher_env(manifests)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
    command = mpijob(manifests)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    forwarded = [command[i + 1] for i, arg in enumerate(command) if arg == "-x"]
    assert "NCCL_DEBUG" in forwarded and "NCCL_DEBUG_SUBSYS" in forwarded  # mpirun -x: the ranks see them
    own = launcher_env(built("mpi", "p4d", fabric=None, env={"NCCL_DEBUG": "WARN"}))
    assert own["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG_SUBSYS" not in own
    assert "NCCL_DEBUG" not in launcher_env(built("mpi", "p4d", fabric="off"))
