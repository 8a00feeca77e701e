"""Integration test: the etcd StatefulSet of five members and of one heals by itself, with real etcd 3.5.

As tests/integration/test_etcd_members.py (three members), with the dev stack planned with
``etcd.replicas`` 5 and as it is (one member):

(a) five members, two lost at once: a quorum is left, they rejoin; keys kept, writable;
(b) five members, three lost at once: the two survivors have no leader; the cluster heals within the
    bound, keeps the keys the survivors had and takes writes;
(c) one member (dev), lost: it starts a cluster of its own again and takes writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "torch",
    reason="torch is not installed: run `bash scripts/test_integration.sh`, "
    "which installs requirements-integration.txt",
)

from tests.integration.etcd_helpers import (
    JOIN_TIME,
    heal,
    heal_bound,
    healthy_and_writable,
    local_etcd,
    lost_keys,
    plan_etcd,
    write_keys,
)
from tests.integration.etcd_local import LocalEtcd

FIVE = 5


@pytest.fixture(scope="module")
def objects5(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return plan_etcd(tmp_path_factory, FIVE)


@pytest.fixture()
def five(tmp_path: Path, objects5: list[dict[str, Any]]) -> Iterator[LocalEtcd]:
    for etcd in local_etcd(tmp_path, objects5, FIVE):
        etcd.start_all()
        heal(etcd, JOIN_TIME * FIVE, "five members started together")
        yield etcd


def test_a_five_members_lose_two_at_once_and_rejoin(five: LocalEtcd) -> None:
    """(a) Two of five lost at once leave a quorum: both rejoin through it; keys kept."""
    keys = write_keys(five, "/five-two")
    five.lose([3, 4])
    healthy_and_writable(five, JOIN_TIME * FIVE, "two of five lost at once")
    assert all("rejoins the cluster" in five.members[i].init_log.read_text() for i in (3, 4))
    assert not lost_keys(five, keys, "/five-two")


def test_b_five_members_lose_three_at_once_and_heal(five: LocalEtcd) -> None:
    """(b) Three of five lost at once: the two survivors have no leader; one empty member restores the
    quorum under its old entry, the survivors elect a leader, the others rejoin; keys kept."""
    keys = write_keys(five, "/five-three")
    five.lose([0, 2, 4])
    healthy_and_writable(five, heal_bound(five), "three of five lost at once")
    restored = [i for i in (0, 2, 4) if "restores the quorum" in five.members[i].init_log.read_text()]
    assert restored == [0], f"exactly the lowest-ordinal empty member should restore the quorum, not {restored}"
    assert not lost_keys(five, keys, "/five-three"), "keys the survivors had were lost"


def test_c_the_single_member_starts_again_empty(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """(c) The dev stack's one member: lost, it starts a cluster of its own again and takes writes."""
    for etcd in local_etcd(tmp_path, plan_etcd(tmp_path_factory, None), 1):
        etcd.start_all()
        healthy_and_writable(etcd, JOIN_TIME, "one member started")
        etcd.lose([0])
        healthy_and_writable(etcd, JOIN_TIME, "the one member lost")
