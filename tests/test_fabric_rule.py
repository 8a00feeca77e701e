"""The fabric rule shared by the guard's check, the MPI launcher's check and burn-in's loopback test
(jobs/scripts/fabric_rule.py): its reading of one node's test (recorded single-node logs, tests/data/nccl_logs), the
loopback decision of burn-in with it, the files that ship it, and aws-ofi-nccl's newer provider line."""

from __future__ import annotations

import sys

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
