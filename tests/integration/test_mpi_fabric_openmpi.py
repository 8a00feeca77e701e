"""Integration test: the MPI launcher's fabric check (jobs/scripts/mpi_fabric.py) around a real Open MPI ``mpirun``
(the pinned wheel scripts/test_integration.sh installs into .venv, or the system's), with the launcher command as
the MPIJob renders it.

Local overrides, each because this is one CPU machine without NCCL or EFA: mpirun is .venv's (or /usr/bin's), not AWS's
/opt/amazon/openmpi one; ``-np`` is 2 (with --oversubscribe) and ``--hosts`` 1 (one host here); each rank prints NCCL's
init lines itself, in NCCL's own format (``<host>:<pid>:<tid> [<dev>] NCCL INFO ...``, NCCL src/debug.cc) with the
real host name, taken from the recorded logs (tests/data/nccl_logs); ``--tag-output`` is added so the lines carry
Open MPI's ``[1,<rank>]<stdout>:`` prefix too; the EFA counters come from a fake sysfs tree that the counter run
(the real second mpirun, one process per node) reads. The Kubernetes API is tests/fake_kube_api.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jobs as J
from facts import job_signals
from tests.fake_kube_api import FakeKubeApi, serve
from tests.helpers import ROOT, job_spec, make_ctx

# scripts/test_integration.sh installs Open MPI into .venv (requirements-integration.txt: openmpi); a system
# mpirun (Debian's openmpi-bin, 4.1) is used when .venv has none.
MPIRUN = shutil.which("mpirun", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")

sys.path.insert(0, str(ROOT / "jobs" / "scripts"))
import mpi_fabric as mf  # noqa: E402

RANK = """import os, socket, sys, threading, time
host = socket.gethostname().split(".")[0]
rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
for text in sys.argv[2:]:
    print(f"{host}:{os.getpid()}:{threading.get_native_id()} [{rank}] NCCL INFO {text}", flush=True)
time.sleep(float(sys.argv[1]))
print(f"rank {rank} done", flush=True)
"""
EFA_LINES = ["NET/OFI Selected Provider is efa (found 4 nics)", "Using network Libfabric"]
SOCKET_LINES = ["NET/Socket : Using [0]eth0:10.0.64.23<0>", "Using network Socket"]


def rendered_launcher() -> tuple[list[str], dict[str, str]]:
    manifests = J.build_manifests(job_spec("mpi", "p4d", fabric=None), make_ctx())
    job = next(m for m in manifests if m["kind"] == "MPIJob")
    config_map = next(m for m in manifests if m["kind"] == "ConfigMap")
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    return command, config_map["data"]


def run(tmp_path: Path, monkeypatch, capsys, lines: list[str], seconds: float) -> dict[str, Any]:
    assert MPIRUN is not None, "no mpirun: bash scripts/test_integration.sh installs Open MPI into .venv"
    command, shipped = rendered_launcher()
    assert shipped["mpi_fabric.py"] == (ROOT / "jobs" / "scripts" / "mpi_fabric.py").read_text()
    at = command.index("--")
    options, mpirun = command[2:at], command[at + 1 :]
    options[options.index("--hosts") + 1] = "1"
    options[options.index("--mpirun") + 1] = str(MPIRUN)
    rank = tmp_path / "rank.py"
    rank.write_text(RANK)
    np_at = mpirun.index("-np")
    ranks = [str(MPIRUN), "--allow-run-as-root", "--oversubscribe", "--tag-output", "-np", "2"]
    ranks += mpirun[np_at + 2 : mpirun.index("--map-by") + 2]  # --bind-to none --map-by slot, as rendered
    ranks += [sys.executable, str(rank), str(seconds), *lines]
    root = tmp_path / "ib"
    moving = threading.Event()

    def traffic() -> None:  # the node's 4 EFA devices carry bytes while the job runs
        n = 0
        while not moving.is_set():
            for d in range(4):
                counters = root / f"rdmap{16 + d}s0" / "ports" / "1" / "hw_counters"
                counters.mkdir(parents=True, exist_ok=True)
                (counters / "tx_bytes").write_text(f"{1000 + n * 4096}\n")
            n += 1
            time.sleep(0.2)

    threading.Thread(target=traffic, daemon=True).start()
    monkeypatch.setattr(mf, "TERMINATION_LOG", str(tmp_path / "termination-log"))
    monkeypatch.setattr(mf, "STOP_GRACE", 5.0)
    fake = FakeKubeApi()
    with serve(fake, tmp_path / "sa") as api_env:
        env = {**api_env, "POD_NAME": "maskrcnn-launcher-x", "POD_NAMESPACE": "training"}
        env.update({"GPUTRAINING_INFINIBAND": str(root), "GPUTRAINING_FABRIC_WINDOW": "20"})
        env["GPUTRAINING_FABRIC_COUNTER_SECONDS"] = "1"
        started = time.monotonic()
        code = mf.supervise(mf.parse([*options, "--", *ranks]), env)
        took = time.monotonic() - started
    moving.set()
    out = capsys.readouterr()
    term = tmp_path / "termination-log"
    return {
        "code": code,
        "took": took,
        "out": out.out,
        "err": out.err,
        "events": fake.of("POST", "/events"),
        "signals": [json.loads(x) for x in out.out.splitlines() if job_signals.SIGNAL_KEY in x],
        "term": term.read_text() if term.exists() else "",
    }


def test_a_healthy_run_under_real_mpirun_is_not_stopped(tmp_path, monkeypatch, capsys):
    result = run(tmp_path, monkeypatch, capsys, EFA_LINES, 8)
    assert result["code"] == 0, result["err"]
    assert result["out"].count("done") == 2 and result["events"] == [] and result["term"] == ""
    [signal] = result["signals"]
    assert signal[job_signals.SIGNAL_KEY] == "fabric_ok" and "all 4 devices carried traffic" in signal["reason"]


def test_enforce_stops_a_socket_fallback_under_real_mpirun(tmp_path, monkeypatch, capsys):
    result = run(tmp_path, monkeypatch, capsys, SOCKET_LINES, 60)
    assert result["code"] == mf.FABRIC_EXIT and result["took"] < 45, result["err"]
    assert "done" not in result["out"] and "fabric check failed on" in result["term"]
    [(_, event)] = result["events"]
    assert event["reason"] == "FabricFallback" and "stopping the job" in event["message"]
