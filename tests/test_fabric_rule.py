"""The fabric rule shared by the guard's check, the MPI launcher's check and burn-in's loopback test
(jobs/scripts/fabric_rule.py): its reading of one node's test (recorded single-node logs, tests/data/nccl_logs), the
loopback decision of burn-in with it, the files that ship it, and aws-ofi-nccl's newer provider line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from components import burn_in
from jobs import resilience
from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "jobs" / "scripts"))
sys.path.insert(0, str(ROOT / "components" / "scripts"))
import burn_in_decisions as bd  # noqa: E402
import fabric_rule as fr  # noqa: E402

LOGS = ROOT / "tests" / "data" / "nccl_logs"
NCCL = ROOT / "tests" / "data" / "nccl"
# What all_reduce_perf prints at its end (nccl-tests src/common.cu), appended to the NCCL excerpts below.
RESULT = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 120.5\n"


def lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


def test_one_node_over_p2p_is_not_judged_and_says_so():
    verdict = fr.one_node(lines("single_node_p2p.log"))
    assert verdict.state == fr.UNKNOWN and not verdict.failed and "P2P/SHM" in verdict.reason


def test_one_node_naming_socket_as_its_network_is_not_a_failure():
    verdict = fr.one_node(lines("single_node_socket.log"))
    assert verdict.state == fr.UNKNOWN and not verdict.failed and "socket" in verdict.reason
    # the same lines between nodes are the fall-back the jobs' checks stop
    assert fr.network_verdict(fr.read_network(lines("single_node_socket.log"))).state == fr.FALLBACK  # type: ignore[union-attr]


def test_one_node_whose_channels_go_through_sockets_fails():
    through = [x for x in (NCCL / "all_reduce_perf-2.16-sockets.log").read_text().splitlines() if "via NET/Socket" in x]
    assert through, "the recorded sockets log has a channel via NET/Socket"
    verdict = fr.one_node(through)
    assert verdict.state == fr.FALLBACK and verdict.failed


def test_burn_in_passes_a_healthy_single_node_and_notes_the_fabric_rule():
    for name in ("single_node_p2p.log", "single_node_socket.log"):
        ok, what = bd.loopback_result((LOGS / name).read_text() + RESULT)
        assert ok, what
        assert "120.5 GB/s" in what and "one node" in what


def test_burn_in_fails_a_loopback_that_went_through_sockets():
    log = (NCCL / "all_reduce_perf-2.16-sockets.log").read_text()
    via = "\n".join(x for x in log.splitlines() if "NCCL INFO" in x)
    ok, what = bd.loopback_result(via + "\n" + RESULT)
    assert not ok and "not EFA" in what


def test_the_newer_provider_line_reads_as_efa():
    # aws-ofi-nccl's newer wording (tests/data/nccl/all_reduce_perf-2.16-efa.log): a comma after the provider
    net = fr.read_network(["w-0:50:65 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 4 nics)"])
    assert net.providers == ("efa",) and fr.network_verdict(net) is None
    tcp = fr.read_network(["w-0:50:65 [0] NCCL INFO NET/OFI Selected provider is tcp, fabric is 172.31.0.0/16"])
    assert fr.network_verdict(tcp).state == fr.FALLBACK  # type: ignore[union-attr]


def test_the_rule_ships_with_the_guard_and_with_burn_in():
    text = (ROOT / "jobs" / "scripts" / "fabric_rule.py").read_text()
    assert resilience.GUARD_FILES["fabric_rule.py"] == text
    assert resilience.GUARD_FILES["mpi_fabric.py"] == (ROOT / "jobs" / "scripts" / "mpi_fabric.py").read_text()
    group = burn_in.GroupExpectation("p4d", "ng", "p4d.24xlarge", 8, "A100", 4, loopback=True)
    assert burn_in.files([group])["fabric_rule.py"] == text
    spec = burn_in.pod_spec(burn_in.BurnInArgs("c", "us-west-2", [group], "python", "aws", loopback_image="nccl"))
    loopback = next(c for c in spec["initContainers"] if c["name"] == "loopback")
    env = {e["name"]: e.get("value") for e in loopback["env"]}
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


# -- nccl-test's gate: the same rule in awk (the nccl-tests images are not known to carry python3) ------------------

GATE = ROOT / "jobs" / "scripts" / "nccl_gate.sh"
# A result table in nccl-tests' layout (>= 2.13; the gate finds the columns by the header), for the excerpts.
TABLE = (
    "# size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
    "1073741824 268435456 float sum -1 536774 2.00 2.00 0 541545 1.98 1.98 0\n"
)
RECORDED = sorted([*LOGS.glob("*.log"), *NCCL.glob("*.log")])


def python_fails(text: str) -> bool:
    """The rule as the MPI launcher applies it to lines alone (mpi_fabric.lines_only): any host not on EFA, or none
    that printed NCCL's choice."""
    sys.path.insert(0, str(ROOT / "jobs" / "scripts"))
    import fabric_check as fc
    import mpi_fabric as mf

    verdicts = mf.lines_only(text.splitlines())
    return not verdicts or any(v.state != fc.OK for v in verdicts.values())


@pytest.mark.parametrize("log", RECORDED, ids=lambda p: p.name)
def test_the_gate_and_the_rule_agree_on_every_recorded_log(log, tmp_path):
    text = log.read_text()
    if "busbw" not in text:
        text += TABLE
    (tmp_path / "log").write_text(text)
    out = subprocess.run(["bash", str(GATE), "check", str(tmp_path / "log"), "1", "0"], capture_output=True, text=True)
    gate_fails = "did not use the EFA provider" in out.stdout
    assert gate_fails or "NCCL selected the EFA provider" in out.stdout, out.stdout
    assert gate_fails == python_fails(text), out.stdout


def test_the_gate_names_the_host_that_fell_back(tmp_path):
    efa = (LOGS / "efa_p4d.log").read_text()
    socket = "ip-10-216-179-119:416603:416647 [2] NCCL INFO Channel 00/0 : 1[1] -> 9[1] [send] via NET/Socket/0\n"
    (tmp_path / "log").write_text(efa + socket + TABLE)
    out = subprocess.run(["bash", str(GATE), "check", str(tmp_path / "log"), "1", "0"], capture_output=True, text=True)
    assert out.returncode == 1 and "not EFA on ip-10-216-179-119: socket" in out.stdout
    assert python_fails(efa + socket) and not python_fails(efa)
