"""The fabric rule: did NCCL use EFA, and did the EFA devices carry the traffic? Standard library only, no imports of
the project: the decision that the fabric check (fabric_check.py, in the job's guard), the MPI launcher's check
(mpi_fabric.py) and burn-in's loopback test (components/scripts/burn_in_decisions.py) share. The inputs and verdicts
are described in fabric_check.py; ``one_node`` is burn-in's reading of a test on a single node.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass

OK, FALLBACK, DEAD_INTERFACE, UNKNOWN = "ok", "fallback", "dead-interface", "unknown"
INFINIBAND = "/sys/class/infiniband"
COUNTER_SECONDS = 30.0  # between the two readings of the counters, once NCCL has chosen its network
WINDOW_SECONDS = 900.0  # how long the check waits for NCCL's network choice after the worker starts
NCCL_DIR = "/tmp/gputraining-nccl"
NCCL_FILE = NCCL_DIR + "/%h.%p.log"  # NCCL_DEBUG_FILE: %h the host, %p the pid (NCCL's own escapes)
MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>: ?")
USING = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.IGNORECASE)
# aws-ofi-nccl 1.x: "Selected Provider is efa (found 4 nics)"; newer: "Selected provider is efa, fabric is efa (...)"
PROVIDER = re.compile(r"NET/OFI Selected Provider is ([^\s,]+)", re.IGNORECASE)
VIA = re.compile(r"via NET/([^/\n]+)/", re.IGNORECASE)
EFA_NETWORKS = ("aws libfabric", "libfabric", "ofi")


@dataclass(frozen=True)
class Network:
    """What NCCL's lines say: the networks it chose (``Using network X``, ``via NET/X``) and the libfabric
    providers aws-ofi-nccl selected."""

    networks: tuple[str, ...]
    providers: tuple[str, ...]
    evidence: str  # the first line that told, for the reason

    @property
    def seen(self) -> bool:
        return bool(self.networks or self.providers)


@dataclass(frozen=True)
class Verdict:
    state: str
    reason: str

    @property
    def failed(self) -> bool:
        return self.state in (FALLBACK, DEAD_INTERFACE)


def read_network(lines: list[str]) -> Network:
    networks: list[str] = []
    providers: list[str] = []
    evidence = ""
    for raw in lines:
        line = MPI_PREFIX.sub("", raw.rstrip("\n"))
        for pattern, found in ((USING, networks), (PROVIDER, providers), (VIA, networks)):
            match = pattern.search(line)
            if match:
                value = match.group(1).strip().lower()
                if value not in found:
                    found.append(value)
                evidence = evidence or line.strip()
    return Network(tuple(networks), tuple(providers), evidence)


def byte_counters(root: str = INFINIBAND) -> dict[str, int]:
    """Device -> the sum of its ports' ``*_bytes`` hardware counters (a device without them: 0)."""
    out: dict[str, int] = {}
    for device in sorted(glob.glob(os.path.join(root, "*"))):
        total = 0
        for counter in glob.glob(os.path.join(device, "ports", "*", "hw_counters", "*_bytes")):
            try:
                with open(counter) as source:
                    total += int(source.read().strip() or 0)
            except (OSError, ValueError):
                continue
        out[os.path.basename(device)] = total
    return out


def network_verdict(net: Network) -> Verdict | None:
    """The verdict from NCCL's lines alone, or None when they say EFA (the counters decide then)."""
    if not net.seen:
        return Verdict(UNKNOWN, "NCCL printed no network choice (not initialised yet, or NCCL_DEBUG below INFO)")
    others = [n for n in net.networks if n not in EFA_NETWORKS]
    if others:
        return Verdict(FALLBACK, f'NCCL used network {", ".join(others)!s}, not EFA ("{net.evidence}")')
    wrong = [p for p in net.providers if p != "efa"]
    if wrong:
        return Verdict(FALLBACK, f"aws-ofi-nccl's libfabric provider is {', '.join(wrong)}, not efa")
    return None  # libfabric with efa, or with no provider line: the EFA counters tell


def counter_verdict(before: dict[str, int], after: dict[str, int], expected: int, seconds: float) -> Verdict:
    devices = sorted(set(before) & set(after))
    if not devices:
        return Verdict(FALLBACK, f"NCCL chose EFA but the pod sees no EFA device under {INFINIBAND}")
    moved = [d for d in devices if after[d] > before[d]]
    still = [d for d in devices if d not in moved]
    if not moved:
        return Verdict(
            FALLBACK, f"NCCL chose EFA but none of the {len(devices)} EFA devices carried traffic in {seconds:g}s"
        )
    if still:
        return Verdict(
            DEAD_INTERFACE,
            f"{len(still)} of {len(devices)} EFA devices carried no traffic in {seconds:g}s while the others did: "
            + ", ".join(still),
        )
    if expected and len(devices) < expected:
        return Verdict(DEAD_INTERFACE, f"the node shows {len(devices)} EFA devices, the pod requested {expected}")
    moved_bytes = sum(after[d] - before[d] for d in devices)
    return Verdict(OK, f"NCCL on EFA; all {len(devices)} devices carried traffic ({moved_bytes} bytes in {seconds:g}s)")


def decide(lines: list[str], before: dict[str, int], after: dict[str, int], expected: int, seconds: float) -> Verdict:
    """The node's verdict from NCCL's lines and two readings of the EFA counters ``seconds`` apart."""
    by_lines = network_verdict(read_network(lines))
    return by_lines if by_lines is not None else counter_verdict(before, after, expected, seconds)


P2P = re.compile(r"via (P2P|SHM)/", re.IGNORECASE)


def one_node(lines: list[str]) -> Verdict:
    """The rule on a test inside one node (burn-in's loopback): NCCL's channels there go over NVLink/PCIe (``via
    P2P/...``) or shared memory (``via SHM/...``), not the network, and NCCL still prints the network it would use
    (``Using network Socket`` in a container without the EFA devices is normal). So the network choice proves nothing
    and fails nothing: UNKNOWN, with what NCCL said. Only channels ``via NET/...`` inside one node are judged by the
    network rule (NCCL found no P2P or SHM path between the node's GPUs and went through its network)."""
    net = read_network(lines)
    through_net = [line for line in lines if VIA.search(line)]
    if through_net:
        verdict = network_verdict(read_network(through_net))
        if verdict is not None:
            return verdict
        return Verdict(OK, "one node, but NCCL's channels went through the network (EFA)")
    local = "P2P/SHM channels" if any(P2P.search(line) for line in lines) else "no channel lines"
    chose = ", ".join(net.networks + net.providers) or "none printed"
    return Verdict(UNKNOWN, f"one node: {local}, the network is not used (NCCL's network: {chose})")
