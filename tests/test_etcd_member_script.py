"""The etcd members' start-up and watch decisions (components/scripts/etcd_member_decisions.py, which
the member script components/scripts/etcd_member.py imports), without etcd.

The decisions' pure functions are fed what the peers would show (``Peer``: its etcd healthy or not or not
answering, the cluster it lists, its member script's state and offer) and must answer what a member
does: rejoin, restore the quorum under its old entry, start or adopt a new cluster, or wait; and, once
running, whether it must give up its data. tests/integration/test_etcd_members.py runs the same script
with real etcd.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from components.etcd import MEMBER_DECISIONS


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("etcd_member_decisions", MEMBER_DECISIONS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


em = _load()
WAIT = 10.0


def layout(n: int):
    return em.Layout.parse(",".join(f"etcd-{i}=http://etcd-{i}.peers:2380" for i in range(n)))


def cluster(cid: str, *members: int, unstarted: tuple[int, ...] = ()):
    entries = [em.Entry(f"id{i}", f"etcd-{i}", (f"http://etcd-{i}.peers:2380",)) for i in members]
    entries += [em.Entry(f"new{i}", "", (f"http://etcd-{i}.peers:2380",)) for i in unstarted]
    return em.Cluster(cid, tuple(entries))


def healthy(i: int, c) -> object:
    return em.Peer(f"etcd-{i}", True, c, em.STARTED)


def leaderless(i: int, c) -> object:
    return em.Peer(f"etcd-{i}", False, c, em.STARTED)


def deciding(i: int) -> object:
    return em.Peer(f"etcd-{i}", None, None, em.DECIDING)


def missing(i: int) -> object:
    return em.Peer(f"etcd-{i}")


def coming(i: int) -> object:
    return em.Peer(f"etcd-{i}", None, None, em.STARTED)


def start(n: int, me: int, peers: list, waited: float = 0.0):
    return em.decide_start(layout(n), f"etcd-{me}", peers, waited, WAIT)


# -- small pieces -------------------------------------------------------------------------------------------


def test_quorum_of_one_three_and_five_members() -> None:
    assert [em.quorum(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_flags_become_config_keys_with_their_types() -> None:
    assert em.parse_etcd_flags(["--name=etcd-0", "--enable-v2=true", "--snapshot-count=100", "--debug"]) == {
        "name": "etcd-0",
        "enable-v2": True,
        "snapshot-count": 100,
        "debug": True,
    }
    with pytest.raises(SystemExit):
        em.parse_etcd_flags(["name=etcd-0"])


def test_a_member_entry_is_named_by_its_peer_url_even_before_it_started() -> None:
    c = cluster("c", 0, unstarted=(2,))
    assert layout(3).names_in(c) == ["etcd-0", "etcd-2"]
    assert layout(3).name_of(em.Entry("x", "", ("http://elsewhere:2380",))) == "x"


def test_of_two_clusters_the_bigger_wins_then_the_one_with_the_lowest_ordinal() -> None:
    lay = layout(5)
    big, small = cluster("b", 1, 2, 3), cluster("a", 0, 4)
    assert em.best_cluster(lay, [small, big]) is big
    low, high = cluster("z", 0, 3), cluster("a", 1, 2)
    assert em.best_cluster(lay, [high, low]) is low


# -- start: rejoin, adopt ------------------------------------------------------------------------------------


def test_a_healthy_peer_means_rejoin_through_it() -> None:
    c = cluster("c", 0, 1, 2)
    action = start(3, 1, [healthy(0, c), healthy(2, c)])
    assert isinstance(action, em.Rejoin) and action.via == "etcd-0" and action.cluster is c


def test_of_two_healthy_clusters_a_member_rejoins_the_winner() -> None:
    small, big = cluster("s", 0), cluster("b", 1, 2)
    action = start(3, 2, [healthy(0, small), healthy(1, big)])
    assert isinstance(action, em.Rejoin) and action.via == "etcd-1"


def test_a_healthy_peer_that_does_not_list_its_cluster_is_waited_for() -> None:
    action = start(3, 2, [em.Peer("etcd-0", True, None, em.STARTED), deciding(1)], waited=100)
    assert isinstance(action, em.Wait)


def test_an_offer_that_lists_the_member_is_adopted_and_one_that_does_not_is_waited_for() -> None:
    offer = em.Offer("tok-1", "etcd-0=http://etcd-0.peers:2380,etcd-1=http://etcd-1.peers:2380")
    starting = em.Peer("etcd-0", False, cluster("n", 0, 1), em.STARTED, offer)
    action = start(3, 1, [starting, deciding(2)])
    assert isinstance(action, em.Adopt) and action.offer == offer and action.via == "etcd-0"
    assert isinstance(start(3, 2, [starting, deciding(1)]), em.Wait)
    assert isinstance(start(3, 2, [starting, deciding(1)], waited=WAIT), em.Wait), (
        "a member starting a cluster is no survivor"
    )


# -- start: a lost majority ----------------------------------------------------------------------------------


def test_two_of_three_lost_the_lowest_empty_member_restores_the_quorum_at_once() -> None:
    old = cluster("old", 0, 1, 2)
    action = start(3, 0, [deciding(1), leaderless(2, old)])
    assert isinstance(action, em.Restore) and action.cluster is old
    assert isinstance(start(3, 1, [deciding(0), leaderless(2, old)]), em.Wait)


def test_once_a_restorer_is_starting_the_others_wait_for_the_leader() -> None:
    old = cluster("old", 0, 1, 2)
    action = start(3, 1, [coming(0), leaderless(2, old)], waited=2 * WAIT)
    assert isinstance(action, em.Wait) and "quorum starting" in action.reason


def test_three_of_five_lost_exactly_one_restores() -> None:
    old = cluster("old", 0, 1, 2, 3, 4)
    peers = {i: deciding(i) for i in (0, 2, 4)} | {1: leaderless(1, old), 3: leaderless(3, old)}
    decisions = {me: start(5, me, [p for i, p in peers.items() if i != me]) for me in (0, 2, 4)}
    assert [me for me, a in decisions.items() if isinstance(a, em.Restore)] == [0]


def test_survivors_with_a_member_not_answering_are_waited_for_then_restored() -> None:
    old = cluster("old", 0, 1, 2)
    peers = [missing(1), leaderless(2, old)]
    assert isinstance(start(3, 0, peers, waited=WAIT - 1), em.Wait)
    assert isinstance(start(3, 0, peers, waited=WAIT), em.Restore)


def test_a_member_the_survivors_do_not_list_waits() -> None:
    action = start(3, 1, [deciding(0), leaderless(2, cluster("old", 0, 2))], waited=100)
    assert isinstance(action, em.Wait)
    assert isinstance(start(3, 0, [deciding(1), leaderless(2, cluster("old", 0, 2))]), em.Restore)


def test_a_member_not_first_restores_too_when_the_first_never_comes() -> None:
    old = cluster("old", 0, 1, 2)
    peers = [deciding(0), leaderless(2, old)]
    assert isinstance(start(3, 1, peers, waited=em.RESTORE_FALLBACK * WAIT - 1), em.Wait)
    assert isinstance(start(3, 1, peers, waited=em.RESTORE_FALLBACK * WAIT), em.Restore)


def test_a_survivor_that_does_not_list_its_cluster_is_waited_for() -> None:
    assert isinstance(start(3, 0, [deciding(1), em.Peer("etcd-2", False, None, em.STARTED)], waited=100), em.Wait)


# -- start: all lost ---------------------------------------------------------------------------------------


def test_all_empty_the_lowest_starts_a_cluster_with_all_and_the_others_wait() -> None:
    action = start(3, 0, [deciding(1), deciding(2)])
    assert isinstance(action, em.Bootstrap) and action.members == ("etcd-0", "etcd-1", "etcd-2")
    assert isinstance(start(3, 1, [deciding(0), deciding(2)]), em.Wait)


def test_a_quorum_of_empty_members_starts_without_the_missing_one_after_the_wait() -> None:
    peers = [missing(0), deciding(2)]
    assert isinstance(start(3, 1, peers, waited=WAIT - 1), em.Wait)
    action = start(3, 1, peers, waited=WAIT)
    assert isinstance(action, em.Bootstrap) and action.members == ("etcd-1", "etcd-2")


def test_fewer_empty_members_than_a_quorum_never_start_a_cluster() -> None:
    assert isinstance(start(3, 2, [missing(0), missing(1)], waited=1000), em.Wait)
    assert isinstance(start(5, 0, [deciding(1), missing(2), missing(3), missing(4)], waited=1000), em.Wait)


def test_a_member_starting_etcd_is_waited_for() -> None:
    assert isinstance(start(3, 1, [coming(0), deciding(2)], waited=WAIT - 1), em.Wait)


def test_a_single_member_starts_at_once() -> None:
    action = start(1, 0, [])
    assert isinstance(action, em.Bootstrap) and action.members == ("etcd-0",)


# -- watch ---------------------------------------------------------------------------------------------------


def watch(
    n: int, mine, peers: list, running: bool = True, unhealthy_for: float = 0.0, absent_for: float = 0.0, pending=None
):
    own = em.Own(mine, running, unhealthy_for, absent_for, pending)
    return em.decide_watch(layout(n), own, peers, 20.0, 300.0)


def test_a_healthy_member_of_the_only_cluster_keeps_going() -> None:
    c = cluster("c", 0, 1, 2)
    assert watch(3, healthy(0, c), [healthy(1, c), healthy(2, c)]) is None
    assert watch(1, healthy(0, cluster("c", 0)), []) is None


def test_of_two_healthy_clusters_the_losing_side_starts_again() -> None:
    small, big = cluster("s", 0), cluster("b", 1, 2)
    assert watch(3, healthy(0, small), [healthy(1, big), healthy(2, big)]) is not None
    assert watch(3, healthy(1, big), [healthy(0, small), healthy(2, big)]) is None


def test_a_member_without_a_leader_while_a_peer_is_healthy_starts_again_after_stuck_after() -> None:
    new, old = cluster("new", 0, 1), cluster("old", 0, 1, 2)
    peers = [healthy(0, new), healthy(1, new)]
    assert watch(3, leaderless(2, old), peers, unhealthy_for=19) is None
    assert watch(3, leaderless(2, old), peers, unhealthy_for=20) is not None


def test_a_member_whose_etcd_does_not_run_waits_for_the_kubelet_up_to_lost_after() -> None:
    peers = [healthy(0, cluster("c", 0, 1, 2)), healthy(1, cluster("c", 0, 1, 2))]
    assert watch(3, missing(2), peers, running=False, unhealthy_for=100, absent_for=299) is None
    assert watch(3, missing(2), peers, running=False, unhealthy_for=300, absent_for=300) is not None


def test_survivors_waiting_for_the_others_keep_their_data_until_lost_after() -> None:
    old = cluster("old", 0, 1, 2)
    assert watch(3, leaderless(0, old), [deciding(1), missing(2)], unhealthy_for=299) is None
    assert watch(3, leaderless(0, old), [deciding(1), missing(2)], unhealthy_for=300) is not None


def test_a_member_whose_etcd_has_not_started_joins_again_when_the_cluster_changed_meanwhile() -> None:
    c = cluster("c", 0, 1, 2, 3, unstarted=(4,))
    urls = frozenset(u for e in c.entries for u in e.peer_urls)
    peers = [healthy(0, c), healthy(1, c), healthy(3, c), deciding(2)]
    assert watch(5, missing(4), peers, running=False, pending=urls) is None
    assert watch(5, missing(4), peers, running=False, pending=urls - {"http://etcd-2.peers:2380"}) is not None
    assert watch(5, missing(4), peers, running=True, pending=urls - {"http://etcd-2.peers:2380"}) is None, (
        "a running etcd has its list"
    )
