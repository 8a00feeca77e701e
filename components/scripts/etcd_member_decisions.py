"""What an etcd member does, given what its peers show: the pure decisions of the member sidecar
(``etcd_member.py``, shipped beside this module in the same ConfigMap; it imports this module from its
own directory and does the looking, the member changes and the process control).

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

Standard library only and no I/O: tests/test_etcd_member_script.py feeds it what the peers would show.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional, Union

RESTORE_FALLBACK = 3  # after this many --wait-for-peers an empty member restores even if not among the first
DECIDING = "deciding"  # the member's state: empty, looking for a cluster
STARTED = "started"  # etcd's config file is written: etcd is starting or running


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
