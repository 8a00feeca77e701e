"""The ``member`` container of every pod of the stack's etcd StatefulSet: how the member starts, and
what it does when its cluster is lost.

Members keep their data in an emptyDir, so a replaced pod (a drained or repaired node, a rolling update)
comes back empty under the same name, and a node that held two of three members takes the quorum with
it. This script runs for the pod's whole life as a sidecar (an init container with ``restartPolicy:
Always``): it writes etcd's config file (``--config-file``) before etcd starts (etcd waits for the
sidecar's startup probe, ``GET /started``), then watches. On ``--listen-url`` it shows its state
(``GET /member``: deciding or started, and the new cluster it starts, if any), so the members see which
of them are empty and still deciding.

Start (no data; with data, or with etcd already running on its config, the member starts as it is):

- a peer is healthy (its cluster has a leader): **rejoin** through it: remove this member's stale entry
  (same name or peer URL), ``member add`` it back, start as ``existing``; the data comes from the leader;
- peers answer without a leader (a majority was lost; they keep their data): **restore** the quorum.
  The lowest-ordinal empty members, just as many as the quorum lacks, start as ``existing`` under their
  old entries (the survivors' member list). The survivors elect a leader among themselves (an empty
  member votes but is never a candidate), it sends them the data, and the rest rejoin. With exactly a
  quorum alive every survivor must vote, so the most up-to-date one wins and no survivor has to drop an
  entry it applied; the keys the survivors had are kept;
- no etcd answers anywhere and a quorum of members is empty and deciding: **start a new cluster**. The
  lowest-ordinal of them starts it with the empty members it sees and a new ``initial-cluster-token``
  (a new cluster id, so a member of an old cluster can never mix with it), and shows that offer; the
  members it lists start the same cluster, any other rejoins once it is healthy.

A member decides at once when every peer is accounted for (its etcd answers, or it is deciding too);
while a peer does not answer (a survivor restarting or cut off) it waits ``--wait-for-peers`` seconds.

Watch (after start): the member gives up its data and starts again as above (etcd's config file is
removed first, so etcd cannot start in between; etcd is stopped, the data dir wiped) when

- its etcd is healthy but another cluster of the StatefulSet's members wins (the one with more members,
  then the one with the lowest ordinal, then the lower cluster id);
- its etcd has run without a leader ``--stuck-after`` seconds (or not run ``--lost-after`` seconds)
  while a peer is healthy: a survivor that was cut off while the others started anew, or a member that
  cannot catch up;
- its etcd has not started yet and the healthy cluster's member list is no longer the one its config
  names (another member joined or left meanwhile: etcd would refuse to start);
- no member has had a leader for ``--lost-after`` seconds: all start over empty.

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
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Union
from urllib.parse import urlsplit

HTTP_TIMEOUT = 2.0  # a peer that does not answer within this is not there (cut off, stopped, not started)
CHANGE_TIMEOUT = 15.0  # a member change waits for the cluster to commit it (etcd gives up after about 7s)
START_POLL = 1.0  # seconds between looks at the peers while deciding
WATCH_POLL = 2.0  # seconds between looks while etcd runs
STOP_GRACE = 30.0  # seconds etcd has to stop after SIGTERM before SIGKILL
RESTORE_FALLBACK = 3  # after this many --wait-for-peers an empty member restores even if not among the first
DECIDING = "deciding"  # the member's state: empty, looking for a cluster
STARTED = "started"  # etcd's config file is written: etcd is starting or running


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} etcd-member: {message}", file=sys.stderr, flush=True)


# -- etcd flags and the static member list ----------------------------------------------------------


def parse_etcd_flags(flags: list[str]) -> dict[str, Any]:
    """``--key=value`` / ``--key`` flags as etcd config-file keys (etcd names both alike)."""
    config: dict[str, Any] = {}
    for flag in flags:
        if not flag.startswith("--"):
            raise SystemExit(f"etcd-member: expected an etcd flag --key[=value], got {flag!r}")
        key, sep, value = flag[2:].partition("=")
        if not sep:
            config[key] = True
        elif value in ("true", "false"):
            config[key] = value == "true"
        elif value.isdigit():
            config[key] = int(value)
        else:
            config[key] = value
    return config


def urls_map(text: str) -> dict[str, list[str]]:
    """``a=u1,a=u2,b=u3`` as {a: [u1, u2], b: [u3]} (etcd's --initial-cluster format)."""
    out: dict[str, list[str]] = {}
    for item in filter(None, text.split(",")):
        name, _, url = item.partition("=")
        out.setdefault(name, []).append(url)
    return out


def quorum(size: int) -> int:
    return size // 2 + 1


# -- what a member sees (pure data) -----------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One entry of a cluster's member list; ``name`` is empty for a member added but not started."""

    id: str
    name: str
    peer_urls: tuple[str, ...]


@dataclass(frozen=True)
class Cluster:
    """An etcd cluster as one of its members lists it: its id and member entries."""

    id: str
    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class Offer:
    """A new cluster a member is starting: the others it lists start with the same list and token."""

    token: str
    initial_cluster: str

    @property
    def members(self) -> list[str]:
        return list(urls_map(self.initial_cluster))


@dataclass(frozen=True)
class Peer:
    """What another member of the StatefulSet shows: its etcd (``healthy`` None: etcd does not answer,
    else whether it has a leader), the cluster its etcd lists, and its member script's state and offer
    (``script`` None: the script does not answer)."""

    name: str
    healthy: Optional[bool] = None
    cluster: Optional[Cluster] = None
    script: Optional[str] = None
    offer: Optional[Offer] = None

    @property
    def deciding(self) -> bool:
        return self.healthy is None and self.script == DECIDING

    @property
    def coming(self) -> bool:
        """Its etcd is starting: its config file is written but etcd does not answer (yet), or it starts a new cluster."""
        return (self.healthy is None and self.script == STARTED) or (self.offer is not None and not self.healthy)

    @property
    def survivor(self) -> bool:
        """Its etcd answers without a leader, and not because it is starting a new cluster."""
        return self.healthy is False and self.offer is None


@dataclass(frozen=True)
class Layout:
    """The StatefulSet's members in ordinal order, with their peer URLs (the static --initial-cluster)."""

    members: tuple[tuple[str, tuple[str, ...]], ...]

    @classmethod
    def parse(cls, initial_cluster: str) -> Layout:
        return cls(tuple((n, tuple(urls)) for n, urls in urls_map(initial_cluster).items()))

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.members]

    def ordinal(self, name: str) -> int:
        names = self.names
        return names.index(name) if name in names else len(names)

    def urls(self, name: str) -> tuple[str, ...]:
        return dict(self.members).get(name, ())

    def name_of(self, entry: Entry) -> str:
        """The StatefulSet member an entry stands for, by its peer URL (an entry not started has no name)."""
        for name, urls in self.members:
            if set(urls) & set(entry.peer_urls):
                return name
        return entry.name or entry.id

    def names_in(self, cluster: Cluster) -> list[str]:
        return [self.name_of(e) for e in cluster.entries]


# -- decisions (pure) -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wait:
    reason: str


@dataclass(frozen=True)
class Rejoin:
    via: str  # the healthy peer to go through
    cluster: Cluster
    reason: str


@dataclass(frozen=True)
class Restore:
    cluster: Cluster  # the survivors' cluster: start as ``existing`` under this member's entry in it
    reason: str


@dataclass(frozen=True)
class Bootstrap:
    members: tuple[str, ...]  # the empty members to start the new cluster with, this one first
    reason: str


@dataclass(frozen=True)
class Adopt:
    via: str  # the member that starts a new cluster listing this one
    offer: Offer
    reason: str


Action = Union[Wait, Rejoin, Restore, Bootstrap, Adopt]


def cluster_rank(layout: Layout, cluster: Cluster) -> tuple[int, int, str]:
    """The order of clusters when there are two: more members first, then the lowest ordinal, then the id."""
    return (-len(cluster.entries), min((layout.ordinal(n) for n in layout.names_in(cluster)), default=len(layout.names)), cluster.id)


def healthy_clusters(peers: list[Peer]) -> dict[str, Cluster]:
    return {p.cluster.id: p.cluster for p in peers if p.healthy and p.cluster is not None}


def best_cluster(layout: Layout, clusters: list[Cluster]) -> Cluster:
    return min(clusters, key=lambda c: cluster_rank(layout, c))


def decide_start(layout: Layout, me: str, peers: list[Peer], waited: float, wait: float) -> Action:
    """How an empty member starts, given what its peers show after ``waited`` of ``wait`` seconds."""
    healthy = healthy_clusters(peers)
    if healthy:
        cluster = best_cluster(layout, list(healthy.values()))
        via = min((p.name for p in peers if p.healthy and p.cluster and p.cluster.id == cluster.id), key=layout.ordinal)
        return Rejoin(via, cluster, f"{via} is healthy in cluster {cluster.id}")
    if any(p.healthy for p in peers):
        return Wait("a peer is healthy but did not list its cluster")
    offers = sorted((p for p in peers if p.offer is not None and me in p.offer.members), key=lambda p: layout.ordinal(p.name))
    if offers and offers[0].offer is not None:
        return Adopt(offers[0].name, offers[0].offer, f"{offers[0].name} starts a new cluster with {', '.join(offers[0].offer.members)}")
    settled = all(p.healthy is not None or p.deciding for p in peers)  # every peer is accounted for
    patient = settled or waited >= wait
    survivors = [p for p in peers if p.survivor]
    if survivors:
        return _restore_or_wait(layout, me, peers, survivors, patient, waited >= RESTORE_FALLBACK * wait)
    return _bootstrap_or_wait(layout, me, peers, patient, waited >= wait)


def _survivors_cluster(layout: Layout, survivors: list[Peer]) -> Cluster:
    """The cluster most survivors list (a tie: the one of the lowest-ordinal survivor)."""
    counts = Counter(p.cluster.id for p in survivors if p.cluster)
    ranked = sorted((p for p in survivors if p.cluster), key=lambda p: (-counts[p.cluster.id if p.cluster else ""], layout.ordinal(p.name)))
    cluster = ranked[0].cluster
    assert cluster is not None
    return cluster


def _restore_or_wait(layout: Layout, me: str, peers: list[Peer], survivors: list[Peer], patient: bool, overdue: bool) -> Action:
    names = sorted((p.name for p in survivors), key=layout.ordinal)
    if any(p.cluster is None for p in survivors):
        return Wait(f"{', '.join(names)} answer without a leader but do not list their cluster yet")
    if not patient:
        return Wait(f"{', '.join(names)} have no leader; waiting for the members that do not answer")
    cluster = _survivors_cluster(layout, survivors)
    members = layout.names_in(cluster)
    if me not in members:
        return Wait(f"{me} is not in cluster {cluster.id} of {', '.join(names)}; waiting until it has a leader again")
    alive = {p.name for p in survivors if p.cluster and p.cluster.id == cluster.id} | {p.name for p in peers if p.coming}
    need = quorum(len(members)) - len([n for n in members if n in alive])
    if need <= 0:
        return Wait(f"cluster {cluster.id} has a quorum starting; waiting for its leader")
    empty = sorted({p.name for p in peers if p.deciding} | {me}, key=layout.ordinal)
    first = [n for n in empty if n in members][:need]
    if me in first or overdue:
        return Restore(cluster, f"{', '.join(names)} of cluster {cluster.id} have no leader; {need} more member(s) make its quorum")
    return Wait(f"{', '.join(first)} restore the quorum of cluster {cluster.id}")


def _bootstrap_or_wait(layout: Layout, me: str, peers: list[Peer], patient: bool, overdue: bool) -> Action:
    coming = sorted((p.name for p in peers if p.coming), key=layout.ordinal)
    if coming and not overdue:
        return Wait(f"{', '.join(coming)} are starting etcd")
    if not patient:
        return Wait("no etcd answers; waiting for the members that do not answer")
    empty = sorted({p.name for p in peers if p.deciding} | {me}, key=layout.ordinal)
    if len(empty) < quorum(len(layout.names)):
        return Wait(f"no etcd answers and only {', '.join(empty)} are empty: a new cluster needs {quorum(len(layout.names))}")
    if empty[0] != me:
        return Wait(f"{empty[0]} starts a new cluster")
    return Bootstrap(tuple(empty), f"no etcd answers and {', '.join(empty)} are empty")


@dataclass(frozen=True)
class Own:
    """What a running member knows of itself: what its etcd shows, whether the etcd process exists, the
    seconds since it was last healthy and last running (or since its config was written), and the peer
    URLs of the ``existing`` member list etcd is still to start with (None: etcd has data, or starts ``new``)."""

    etcd: Peer
    running: bool
    unhealthy_for: float = 0.0
    absent_for: float = 0.0
    pending: Optional[frozenset[str]] = None


def decide_watch(layout: Layout, own: Own, peers: list[Peer], stuck_after: float, lost_after: float) -> Optional[str]:
    """Why a running member must give up its data and start again (None: it keeps going)."""
    healthy = healthy_clusters(peers)
    mine = own.etcd
    if mine.healthy and mine.cluster is not None:
        best = best_cluster(layout, [mine.cluster, *healthy.values()])
        if best.id != mine.cluster.id:
            return f"two clusters: {best.id} ({', '.join(layout.names_in(best))}) wins over this member's {mine.cluster.id}"
        return None
    if not healthy:
        return f"no member has had a leader for {own.unhealthy_for:.0f}s" if own.unhealthy_for >= lost_after else None
    best = best_cluster(layout, list(healthy.values()))
    urls = frozenset(u for e in best.entries for u in e.peer_urls)
    if own.pending is not None and not own.running and own.pending != urls:
        return f"cluster {best.id} changed before etcd started: it has {', '.join(layout.names_in(best))}"
    if own.running and own.unhealthy_for >= stuck_after:
        return f"etcd has had no leader for {own.unhealthy_for:.0f}s while cluster {best.id} ({', '.join(layout.names_in(best))}) is healthy"
    if not own.running and own.absent_for >= lost_after:
        return f"etcd has not run for {own.absent_for:.0f}s while cluster {best.id} is healthy"
    return None


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
