"""Burn-in decisions: whether a new GPU node is what its instance type must be, from the outputs of
the real tools, and what to do with a node. Pure functions over text and numbers (no I/O):
``burn_in.py`` runs the tools on the node and feeds their outputs here; tests feed recorded outputs
(tests/data/burn_in/, each with its source).

What a node must show, against what its group expects (``Expected``: the catalog's GPU count and
model, the EFA interfaces its launch template gives it):

- every GPU, of the model: ``nvidia-smi --query-gpu=index,name,pci.bus_id,ecc.errors.uncorrected.volatile.total
  --format=csv,noheader`` lists one row per GPU the driver can reach; a GPU that fell off the bus is not
  listed, and nvidia-smi says ``Unable to determine the device handle for GPU <bus id>: ...`` (``GPU is
  lost``, ``Unknown Error``) and exits non-zero;
- no uncorrectable ECC error since the driver loaded (the volatile count; ``[N/A]`` where ECC is off);
- no Xid in the kernel log since boot (``NVRM: Xid (PCI:<bus id>): <n>, ...``) but those NVIDIA's Xid
  catalog puts on the application (13, 31, 43, 45): a fresh node runs no application, so any other
  Xid is the hardware or the driver;
- every EFA interface: the devices of /sys/class/infiniband bound to the ``efa`` driver;
- optionally, a short NCCL all-reduce over the node's own GPUs (nccl-tests ``all_reduce_perf``) that
  finishes with no value out of bounds.

Only tools the check can run: nvidia-smi comes with the node's driver (the NVIDIA container runtime
mounts the driver's utilities into the container), the kernel log and sysfs from the host. ``fi_info``
(libfabric, under /opt/amazon/efa on the host) and ``dcgmi`` (DCGM, not part of the driver) are neither
in the check's image (python slim) nor among what the runtime mounts, so the check does not run them
and does not claim them.

A node that was in service before it got the taint (the ``up`` that turns burn-in on for a running
group: EKS puts the group's new taint on its running nodes too) is not judged on its history: the ECC
counts since the driver loaded and the Xids since boot are its past jobs' and weeks old; only what it
shows now (GPUs, model, EFA interfaces, the loopback test) counts (``history=False``).

The verdict's label value (``failed-<reasons>`` or ``passed``) follows Kubernetes' label value rules:
at most 63 characters of [A-Za-z0-9._-], beginning and ending with an alphanumeric.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# The fabric rule the jobs' checks use (jobs/scripts/fabric_rule.py in the repo), shipped beside this file.
import fabric_rule

# Xids NVIDIA's catalog attributes to the application, not the GPU: graphics engine exception (13),
# MMU fault (31), GPU stopped processing (43), preemptive cleanup (45).
APPLICATION_XIDS = frozenset({13, 31, 43, 45})
LABEL_MAX = 63

_LOST = re.compile(r"Unable to determine the device handle for (?:GPU\s*)?(?P<bus>[0-9A-Fa-f:.]+)\s*:\s*(?P<why>.*)")
_XID = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9A-Fa-f:.]+)\): (?P<xid>\d+),?\s*(?P<rest>.*)")
_OUT_OF_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(?P<n>\d+)")
_BUSBW = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<bw>[0-9.]+)")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Expected:
    """What a node of a group must have."""

    gpus: int
    gpu_model: str  # the catalog's model, e.g. "A100": one word of nvidia-smi's product name
    efa: int  # EFA interfaces the group's launch template attaches (0: none)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    bus_id: str
    uncorrected_ecc: int | None  # None: ECC not reported ([N/A])


@dataclass(frozen=True)
class Finding:
    """One thing wrong with the node: a short code (for the label) and what it means."""

    code: str
    message: str


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def label(self) -> str:
        if self.passed:
            return "passed"
        return label_value("failed-" + ".".join(dict.fromkeys(f.code for f in self.findings)))

    @property
    def message(self) -> str:
        if self.passed:
            return "burn-in passed: " + "; ".join(self.notes)
        return "burn-in failed: " + "; ".join(f.message for f in self.findings)


def label_value(text: str) -> str:
    """``text`` as a valid label value: other characters become '-', cut to 63, alphanumeric at both ends."""
    value = _LABEL_BAD.sub("-", text)[:LABEL_MAX]
    return value.strip("-_.") or "failed"


# -- the tools' outputs --------------------------------------------------------------------------


def parse_gpus(csv_text: str) -> list[Gpu]:
    """The rows of ``nvidia-smi --query-gpu=index,name,pci.bus_id,ecc.errors.uncorrected.volatile.total
    --format=csv,noheader``; lines that are not rows (error messages) are skipped."""
    gpus = []
    for line in csv_text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        ecc = int(cells[3]) if cells[3].isdigit() else None
        gpus.append(Gpu(int(cells[0]), cells[1], cells[2], ecc))
    return gpus


def lost_gpus(text: str) -> list[tuple[str, str]]:
    """(bus id, why) of every GPU nvidia-smi could not reach."""
    return [(m["bus"], m["why"].strip()) for m in map(_LOST.search, text.splitlines()) if m]


def xids(kernel_log: Iterable[str]) -> list[tuple[str, int, str]]:
    """(bus id, Xid, text) of every Xid line of the kernel log (dmesg or /dev/kmsg records)."""
    out = []
    for line in kernel_log:
        m = _XID.search(line)
        if m:
            out.append((m["bus"], int(m["xid"]), m["rest"].strip()))
    return out


def efa_devices(sysfs: Sequence[tuple[str, str]]) -> list[str]:
    """The EFA devices among /sys/class/infiniband's entries, given as (device, its driver's name:
    the last part of the device/driver link)."""
    return sorted(name for name, driver in sysfs if driver == "efa")


def loopback_result(log: str) -> tuple[bool, str]:
    """Whether an ``all_reduce_perf`` log finished with no value out of bounds, and what it measured; and the fabric
    rule on one node (fabric_rule.one_node): the node's own GPUs talk over P2P/SHM, so the network NCCL names (Socket,
    in a container without the EFA devices) fails nothing; only channels through a network other than EFA do."""
    bounds = _OUT_OF_BOUNDS.search(log)
    busbw = _BUSBW.search(log)
    if bounds is None:
        return False, "the NCCL loopback test did not finish (no 'Out of bounds values' line)"
    if int(bounds["n"]) != 0:
        return False, f"the NCCL loopback test found {bounds['n']} value(s) out of bounds"
    fabric = fabric_rule.one_node(log.splitlines())
    if fabric.failed:
        return False, f"the NCCL loopback test went through the network, not EFA: {fabric.reason}"
    bandwidth = busbw["bw"] if busbw else "?"
    return True, f"NCCL loopback all-reduce {bandwidth} GB/s average bus bandwidth ({fabric.reason})"


# -- the verdict ---------------------------------------------------------------------------------


def _model_matches(name: str, model: str) -> bool:
    return model.upper() in re.split(r"[\s\-]+", name.upper())


def gpu_findings(expected: Expected, smi_output: str, history: bool = True) -> list[Finding]:
    """What the GPU listing shows wrong: GPUs lost, missing, of another model, with uncorrectable ECC errors
    (with ``history``: the volatile count is since the driver loaded)."""
    found: list[Finding] = []
    gpus = parse_gpus(smi_output)
    for bus, why in lost_gpus(smi_output):
        found.append(Finding("gpu-lost", f"GPU {bus} cannot be reached ({why})"))
    if len(gpus) != expected.gpus:
        found.append(Finding("gpu-count", f"{len(gpus)} GPU(s) answer, the instance type has {expected.gpus}"))
    others = sorted({g.name for g in gpus if not _model_matches(g.name, expected.gpu_model)})
    if others:
        found.append(Finding("gpu-model", f"GPU model {', '.join(others)}, expected {expected.gpu_model}"))
    for g in gpus if history else ():
        if g.uncorrected_ecc:
            found.append(Finding("ecc", f"GPU {g.index} ({g.bus_id}): {g.uncorrected_ecc} uncorrectable ECC error(s)"))
    return found


def decide(
    expected: Expected,
    smi_output: str,
    kernel_log: Iterable[str] = (),
    sysfs_infiniband: Sequence[tuple[str, str]] = (),
    loopback_log: str | None = None,
    history: bool = True,
) -> Verdict:
    """The node's verdict from what the tools showed (``loopback_log`` None: the test was not run).
    ``history`` False: a node that served jobs before, judged on its present state (no ECC counts, no Xids)."""
    found = gpu_findings(expected, smi_output, history)
    notes = [f"{len(parse_gpus(smi_output))} x {expected.gpu_model}"]
    if history:
        for bus, xid, text in xids(kernel_log):
            if xid not in APPLICATION_XIDS:
                found.append(Finding(f"xid-{xid}", f"Xid {xid} on GPU {bus}: {text}"))
    else:
        notes.append("in service before the taint: ECC counts and Xids since boot not judged")
    efa = efa_devices(sysfs_infiniband)
    if len(efa) < expected.efa:
        present = ", ".join(efa) or "none"
        found.append(Finding("efa-count", f"{len(efa)} EFA interface(s) present ({present}), expected {expected.efa}"))
    elif expected.efa:
        notes.append(f"{len(efa)} EFA")
    if loopback_log is not None:
        ok, what = loopback_result(loopback_log)
        if ok:
            notes.append(what)
        else:
            found.append(Finding("loopback", what))
    return Verdict(tuple(found), tuple(notes))


# -- what to do with a node ----------------------------------------------------------------------

# Verdict labels of a node that has taken work: passed, released unchecked, or seen working untainted.
IN_SERVICE_LABELS = frozenset({"passed", "in-service", "skipped-in-use", "skipped-in-service"})
# A node older than this when the check first looks at it was in service before its group got burn-in
# (a new node's check starts a minute or two after it joins): judged on its present state only.
FRESH_SECONDS = 30 * 60

NOTHING, RELEASE_IN_USE, RELEASE_IN_SERVICE, CHECK, CHECK_PRESENT = (
    "nothing",
    "release-in-use",
    "release-in-service",
    "check",
    "check-present",
)


def next_step(tainted: bool, label: str, age_seconds: float, working: Sequence[str]) -> str:
    """What the gate does with a node: nothing (no taint), release it unchecked (it has served work:
    the taint came with the node group's update), or check it (with its history when it is new)."""
    if not tainted:
        return NOTHING
    if label in IN_SERVICE_LABELS:
        return RELEASE_IN_SERVICE
    if working:
        return RELEASE_IN_USE
    return CHECK if age_seconds < FRESH_SECONDS else CHECK_PRESENT


def recent(times: Iterable[float], now: float, window: float) -> list[float]:
    """The replacement times within ``window`` seconds before ``now``, oldest first."""
    return sorted(t for t in times if now - window < t <= now)


def may_replace(times: Iterable[float], now: float, limit: int, window: float) -> bool:
    """Whether one more of a group's nodes may be replaced: fewer than ``limit`` in the last ``window``
    seconds. A check that fails every node of a type (a driver's new output, a benign Xid) would
    otherwise terminate and relaunch instances forever."""
    return len(recent(times, now, window)) < limit
