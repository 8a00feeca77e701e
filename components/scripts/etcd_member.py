"""The ``member`` container of every pod of the stack's etcd StatefulSet: how the member starts, and
what it does when its cluster is lost.

Members keep their data in an emptyDir, so a replaced pod (a drained or repaired node, a rolling update)
comes back empty under the same name, and a node that held two of three members takes the quorum with
it. This script runs for the pod's whole life as a sidecar (an init container with ``restartPolicy:
Always``): it writes etcd's config file (``--config-file``) before etcd starts (etcd waits for the
sidecar's startup probe, ``GET /started``), then watches. On ``--listen-url`` it shows its state
(``GET /member``: deciding or started, and the new cluster it starts, if any), so the members see which
of them are empty and still deciding.

How it decides (start, and when to start again empty) is ``etcd_member_decisions.py``, beside it in the
same ConfigMap and mount (``python3 DIR/etcd_member.py`` puts DIR on ``sys.path``); this script does
the looking (HTTP), the member changes, the config file, the process control and the main loop.

It stops etcd with SIGTERM (the pod shares its process namespace); the kubelet starts etcd again.

Usage (the StatefulSet's ``member`` container; the etcd flags after ``--`` become the config file's keys):

    etcd_member.py --config-file PATH --peer-client-urls NAME=URL,... --member-urls NAME=URL,...
        --listen-url URL [--wait-for-peers S] [--stuck-after S] [--lost-after S] -- --name=... --data-dir=... ...

Standard library only: it runs in a plain Python image (the etcd image has no shell since 3.5.7).
The etcd v3 JSON gateway (``/v3/cluster/member/*``) is etcd's own HTTP form of ``etcdctl member``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import urlsplit

from etcd_member_decisions import (
    DECIDING,
    STARTED,
    Action,
    Adopt,
    Bootstrap,
    Cluster,
    Entry,
    Layout,
    Offer,
    Own,
    Peer,
    Rejoin,
    Restore,
    Wait,
    decide_start,
    decide_watch,
    parse_etcd_flags,
    urls_map,
)

HTTP_TIMEOUT = 2.0  # a peer that does not answer within this is not there (cut off, stopped, not started)
CHANGE_TIMEOUT = 15.0  # a member change waits for the cluster to commit it (etcd gives up after about 7s)
START_POLL = 1.0  # seconds between looks at the peers while deciding
WATCH_POLL = 2.0  # seconds between looks while etcd runs
STOP_GRACE = 30.0  # seconds etcd has to stop after SIGTERM before SIGKILL


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} etcd-member: {message}", file=sys.stderr, flush=True)


# -- talking to etcd and to the other members -------------------------------------------------------


def _open(request: urllib.request.Request, timeout: float = HTTP_TIMEOUT, answer_on_error: bool = False) -> Any:
    """The decoded JSON answer. With ``answer_on_error`` an error status with a JSON body (etcd's 503
    /health without a leader) is an answer too; otherwise it raises (HTTPError is an OSError)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # in-cluster: never a proxy
    try:
        with opener.open(request, timeout=timeout) as resp:
            return json.loads(resp.read().decode() or "{}")
    except urllib.error.HTTPError as err:
        if not answer_on_error:
            raise
        return json.loads(err.read().decode(errors="replace") or "{}")


def call(client_url: str, path: str, body: dict[str, Any], timeout: float = HTTP_TIMEOUT) -> Any:
    """POST to etcd's v3 JSON gateway (``etcdctl member ...`` over HTTP)."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(client_url.rstrip("/") + path, data=data, method="POST", headers={"Content-Type": "application/json"})
    return _open(request, timeout)


def _entries(members: list[dict[str, Any]]) -> tuple[Entry, ...]:
    return tuple(Entry(str(m["ID"]), str(m.get("name") or ""), tuple(m.get("peerURLs") or ())) for m in members)


def member_list(client_url: str) -> Cluster:
    answer = call(client_url, "/v3/cluster/member/list", {})
    return Cluster(str(answer["header"]["cluster_id"]), _entries(answer.get("members", [])))


def look_at_etcd(name: str, client_url: str) -> Peer:
    """A member's etcd: whether it answers, has a leader (/health), and the cluster it lists."""
    try:
        health = _open(urllib.request.Request(client_url.rstrip("/") + "/health"), answer_on_error=True)
    except (OSError, ValueError):
        return Peer(name)
    if not isinstance(health, dict):
        return Peer(name, False)
    try:
        cluster: Optional[Cluster] = member_list(client_url)
    except (OSError, ValueError, KeyError, TypeError):
        cluster = None
    return Peer(name, str(health.get("health")) == "true", cluster)


def look_at_script(member_url: str) -> tuple[Optional[str], Optional[Offer]]:
    """A member script's state and offer (None, None: it does not answer)."""
    try:
        answer = _open(urllib.request.Request(member_url.rstrip("/") + "/member"))
        offer = answer.get("offer")
        return str(answer["state"]), Offer(str(offer["token"]), str(offer["initial-cluster"])) if offer else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, None


def look_at_peer(name: str, client_url: str, member_url: str) -> Peer:
    etcd = look_at_etcd(name, client_url)
    return Peer(name, etcd.healthy, etcd.cluster, *look_at_script(member_url))


def rejoin(peer: str, name: str, peer_urls: list[str], layout: Layout) -> str:
    """Replace this member's stale entry through ``peer``; the ``initial-cluster`` to start with."""
    for entry in member_list(peer).entries:
        if entry.name == name or set(entry.peer_urls) & set(peer_urls):
            log(f"removing stale member {entry.name or '(not started)'} {entry.id} {list(entry.peer_urls)}")
            call(peer, "/v3/cluster/member/remove", {"ID": entry.id}, CHANGE_TIMEOUT)
    added = call(peer, "/v3/cluster/member/add", {"peerURLs": peer_urls}, CHANGE_TIMEOUT)
    new_id = str(added["member"]["ID"])
    log(f"added {name} as member {new_id}")
    entries = _entries(added.get("members", []))
    return ",".join(f"{name if e.id == new_id else layout.name_of(e)}={url}" for e in entries for url in e.peer_urls)


# -- this member ------------------------------------------------------------------------------------


@dataclass
class Member:
    """This member: its flags, the StatefulSet's layout, and where its peers answer."""

    args: argparse.Namespace
    flags: dict[str, Any]
    layout: Layout
    client_urls: dict[str, str]  # member name -> etcd client URL
    member_urls: dict[str, str]  # member name -> member script URL
    state: str = DECIDING
    offer: Optional[Offer] = None  # the new cluster it starts, shown to the others until its etcd is healthy
    written_at: float = field(default_factory=time.monotonic)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Member:
        flags = parse_etcd_flags(args.etcd_flags)
        clients = {n: urls[0] for n, urls in urls_map(args.peer_client_urls).items()}
        members = {n: urls[0] for n, urls in urls_map(args.member_urls).items()}
        return cls(args, flags, Layout.parse(str(flags["initial-cluster"])), clients, members)

    @property
    def name(self) -> str:
        return str(self.flags["name"])

    @property
    def data_dir(self) -> str:
        return str(self.flags["data-dir"])

    @property
    def peer_urls(self) -> list[str]:
        return [u for u in str(self.flags["initial-advertise-peer-urls"]).split(",") if u]

    @property
    def others(self) -> list[str]:
        return [n for n in self.layout.names if n != self.name]

    def peers(self) -> list[Peer]:
        """What every other member shows, looked at in parallel (one that does not answer costs HTTP_TIMEOUT)."""
        if not self.others:
            return []
        with ThreadPoolExecutor(max_workers=len(self.others)) as pool:
            return list(pool.map(lambda n: look_at_peer(n, self.client_urls[n], self.member_urls[n]), self.others))

    def mine(self) -> Peer:
        return look_at_etcd(self.name, self.client_urls[self.name])


def has_data(data_dir: str) -> bool:
    """Whether the member has data: etcd itself starts from its write-ahead log when one exists."""
    wal = os.path.join(data_dir, "member", "wal")
    return os.path.isdir(wal) and any(f.endswith(".wal") for f in os.listdir(wal))


def wipe(data_dir: str) -> None:
    """Empty the data dir (the emptyDir's mount point itself stays)."""
    for entry in os.listdir(data_dir) if os.path.isdir(data_dir) else []:
        path = os.path.join(data_dir, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def write_config(path: str, config: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(config, f, indent=2)  # JSON is YAML: etcd reads it as its config file
    os.replace(tmp, path)


def etcd_pids(config_file: str) -> list[int]:
    """The etcd processes started with this config file (the pod shares one process namespace)."""
    marker = f"--config-file={config_file}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"etcd" and marker in argv:
            pids.append(int(entry))
    return pids


def stop_etcd(config_file: str) -> bool:
    """SIGTERM etcd and wait until it is gone (SIGKILL after STOP_GRACE); False if it cannot be signalled."""
    deadline = time.monotonic() + STOP_GRACE
    sig = signal.SIGTERM
    while pids := etcd_pids(config_file):
        if time.monotonic() >= deadline:
            sig = signal.SIGKILL
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError as err:
                log(f"cannot stop etcd (pid {pid}): {err}")
                return False
        time.sleep(0.5)
    return True


# -- start and watch --------------------------------------------------------------------------------


def start_config(m: Member) -> dict[str, Any]:
    """etcd's config for an empty member: look at the peers until the decision is not to wait."""
    started, last = time.monotonic(), ""
    while True:
        action = decide_start(m.layout, m.name, m.peers(), time.monotonic() - started, m.args.wait_for_peers)
        if isinstance(action, Wait):
            if action.reason != last:
                log(f"{m.name} waits: {action.reason}")
                last = action.reason
            time.sleep(START_POLL)
            continue
        try:
            return config_for(m, action)
        except (OSError, ValueError, KeyError) as err:
            # etcd refuses a change that would cost the quorum, or another member is changing too.
            log(f"{type(action).__name__.lower()} failed ({err}); looking again")
            time.sleep(START_POLL * 3)


def config_for(m: Member, action: Action) -> dict[str, Any]:
    """etcd's config for what was decided: the flags, with the member list, start state and token it needs."""
    if isinstance(action, Rejoin):
        cluster, state, token = rejoin(m.client_urls[action.via], m.name, m.peer_urls, m.layout), "existing", None
        log(f"{m.name} rejoins the cluster through {action.via} ({action.reason}): {cluster}")
    elif isinstance(action, Restore):
        own = set(m.peer_urls)
        cluster = ",".join(f"{m.name if own & set(e.peer_urls) else m.layout.name_of(e)}={u}" for e in action.cluster.entries for u in e.peer_urls)
        state, token = "existing", None
        log(f"{m.name} restores the quorum under its old entry ({action.reason}): {cluster}")
    elif isinstance(action, Bootstrap):
        cluster = ",".join(f"{n}={u}" for n in action.members for u in (m.peer_urls if n == m.name else m.layout.urls(n)))
        state, token = "new", f"{m.flags.get('initial-cluster-token', 'etcd')}-{secrets.token_hex(6)}"
        m.offer = Offer(token, cluster)
        log(f"{m.name} starts a new cluster ({action.reason}), token {token}: {cluster}")
    else:
        assert isinstance(action, Adopt), action
        cluster, state, token = action.offer.initial_cluster, "new", action.offer.token
        log(f"{m.name} starts the new cluster of {action.via}, token {token}: {cluster}")
    config = {**m.flags, "initial-cluster": cluster, "initial-cluster-state": state}
    if token is not None:
        config["initial-cluster-token"] = token
    return config


def start(m: Member) -> None:
    """Write etcd's config file at the container's start: as it is when etcd runs on it or there is data,
    else as ``start_config`` decides."""
    config_file = m.args.config_file
    if os.path.exists(config_file) and etcd_pids(config_file):
        log(f"{m.name}: etcd is running (this container restarted): watching")
        m.state, m.written_at = STARTED, time.monotonic()
    elif has_data(m.data_dir):
        log(f"{m.name} has data in {m.data_dir}: starting as it is")
        if not os.path.exists(config_file):
            write_config(config_file, m.flags)
        m.state, m.written_at = STARTED, time.monotonic()
    else:
        start_empty(m)


def start_empty(m: Member) -> None:
    m.state, m.offer = DECIDING, None
    write_config(m.args.config_file, start_config(m))
    m.state, m.written_at = STARTED, time.monotonic()


def abandon(m: Member, reason: str) -> None:
    """Give up this member's data and start again (etcd cannot start while its config file is missing)."""
    log(f"{m.name} starts again empty: {reason}")
    config_file = m.args.config_file
    kept = open(config_file).read() if os.path.exists(config_file) else None
    if kept is not None:
        os.remove(config_file)
    if not stop_etcd(config_file):
        if kept is not None:
            write_config(config_file, json.loads(kept))
        return
    wipe(m.data_dir)
    start_empty(m)


def pending_members(m: Member) -> Optional[frozenset[str]]:
    """The peer URLs of the ``existing`` member list etcd is to start with, while it has no data yet."""
    try:
        with open(m.args.config_file) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    if has_data(m.data_dir) or config.get("initial-cluster-state") != "existing":
        return None
    return frozenset(u for urls in urls_map(str(config.get("initial-cluster", ""))).values() for u in urls)


def watch(m: Member) -> None:
    """Look at this member and its peers every WATCH_POLL seconds; start again when ``decide_watch`` says so."""
    last_healthy = last_running = m.written_at
    while True:
        time.sleep(WATCH_POLL)
        mine, running, now = m.mine(), bool(etcd_pids(m.args.config_file)), time.monotonic()
        if mine.healthy:
            m.offer = None
        last_healthy = now if mine.healthy else max(last_healthy, m.written_at)
        last_running = now if running else max(last_running, m.written_at)
        own = Own(mine, running, now - last_healthy, now - last_running, pending_members(m))
        reason = decide_watch(m.layout, own, m.peers(), m.args.stuck_after, m.args.lost_after)
        if reason:
            abandon(m, reason)
            last_healthy = last_running = m.written_at


def serve(m: Member, listen_url: str) -> None:
    """Answer ``GET /member`` (this member's name and state) and ``GET /started`` (the startup probe)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            if self.path == "/member":
                offer = {"token": m.offer.token, "initial-cluster": m.offer.initial_cluster} if m.offer else None
                self._reply(200, {"name": m.name, "state": m.state, "offer": offer})
            elif self.path == "/started":
                self._reply(200 if m.state == STARTED else 503, {"state": m.state})
            else:
                self._reply(404, {})

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            pass

    url = urlsplit(listen_url)
    server = ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 80), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--config-file", required=True, help="where to write etcd's config file")
    parser.add_argument("--peer-client-urls", required=True, help="NAME=CLIENT_URL,... of every member")
    parser.add_argument("--member-urls", required=True, help="NAME=URL,... where every member's script answers")
    parser.add_argument("--listen-url", required=True, help="where this member's script answers (GET /member, /started)")
    parser.add_argument("--wait-for-peers", type=float, default=10.0, help="seconds to wait for members that do not answer before deciding")
    parser.add_argument("--stuck-after", type=float, default=20.0, help="seconds without a leader, while a peer is healthy, before starting again")
    parser.add_argument("--lost-after", type=float, default=300.0, help="seconds without a leader anywhere (or etcd not running) before starting again")
    parser.add_argument("etcd_flags", nargs="*", help="the etcd flags, after --")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    m = Member.from_args(parse_args(argv))
    serve(m, m.args.listen_url)
    start(m)
    watch(m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
