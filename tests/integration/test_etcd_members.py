"""Integration test: the etcd StatefulSet heals by itself from any loss of members, with real etcd 3.5.

The dev stack with ``etcd.replicas`` 3 (as prod runs it) is planned, and its etcd StatefulSet is run
here as its pods run it (tests/integration/etcd_local.py: the ``member`` sidecar from the plan's
ConfigMap until its startup probe passes, then ``etcd --config-file``; restarts with the kubelet's
back-off, the liveness probe; one loopback address per member). Every scenario ends with every member
healthy, in one cluster, and writable, within a bound made of the member script's rendered settings.

(a) lose one (a replaced pod: its emptyDir wiped): it rejoins under a new member id, the keys are kept;
(b) a roll: all three replaced one after another, each once the one before is healthy again (what the
    PodDisruptionBudget lets a node-group update do); rendezvous keys are kept and a torchrun
    rendezvous of the dev job works after;
(c) what the member script prevents: the rendered flags as they are (``new``, the static member list)
    on an empty data dir do not make a member of the running cluster;
(d) lose two of three at once (one node held both): the survivor keeps its data, the cluster heals
    within the bound, keeps the keys the survivor had, takes writes, and a new rendezvous works;
(e) lose all three at once: a new cluster (a new cluster id), healthy and writable;
(f) a survivor cut off while the two others are lost: those start a new cluster; when the survivor is
    back it gives up its old data and joins them.

Five members and one: tests/integration/test_etcd_sizes.py.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "torch",
    reason="torch is not installed: run `bash scripts/test_integration.sh`, "
    "which installs requirements-integration.txt",
)

from tests.integration.elastic_helpers import (
    LOCAL_NPROC,
    RUN_TIMEOUT,
    EtcdServer,
    Launcher,
    job_nodes,
    job_problems,
    operator_pod_env,
    report,
    require_elastic_jobs,
    wait_all,
)
from tests.integration.etcd_helpers import (
    check_rendezvous,
    cluster_id,
    heal,
    heal_bound,
    healthy_and_writable,
    local_etcd,
    lost_keys,
    member_ids,
    plan_etcd,
    v2_keys,
    write_keys,
)
from tests.integration.etcd_local import BACKOFF_FIRST, LocalEtcd

REPLICAS = 3


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return plan_etcd(tmp_path_factory, REPLICAS)


@pytest.fixture()
def etcd(tmp_path: Path, objects: list[dict[str, Any]]) -> Iterator[LocalEtcd]:
    yield from local_etcd(tmp_path, objects, REPLICAS)


# -- (a)-(c): one member at a time ------------------------------------------------------------------------


def test_a_replaced_member_rejoins(etcd: LocalEtcd) -> None:
    """(a) Start three members together; replace one; all three are healthy members again, keys kept."""
    etcd.start_all()
    heal(etcd, 30, "three members started together")
    keys = write_keys(etcd, "/lose-one")
    before = member_ids(etcd)
    etcd.replace(1)
    healthy_and_writable(etcd, 30, "etcd-1 replaced")
    after = member_ids(etcd)
    assert set(after) == set(before)
    assert after["etcd-1"] != before["etcd-1"], "the replaced member should have rejoined under a new member id"
    assert "rejoins the cluster" in etcd.members[1].init_log.read_text()
    assert not lost_keys(etcd, keys, "/lose-one")


def test_b_roll_keeps_rendezvous_keys_and_rendezvous_works(
    tmp_path: Path, objects: list[dict[str, Any]], etcd: LocalEtcd
) -> None:
    """(b) An elastic job's rendezvous keys survive replacing every member in turn; torchrun works after."""
    pytest.importorskip("etcd", reason="python-etcd is not installed: run `bash scripts/test_integration.sh`")
    etcd.start_all()
    job = copy.deepcopy(require_elastic_jobs(objects, "the dev plan with three etcd members")[0])
    name = job["metadata"]["name"]
    expected_world = job_nodes(job) * LOCAL_NPROC

    def run_job(label: str, endpoint_member: int) -> None:
        launch = Launcher(tmp_path / label, EtcdServer(etcd.endpoint(endpoint_member), etcd))
        try:
            nodes = launch.start_job(job, f"{label}-{uuid.uuid4().hex[:8]}")
            codes = wait_all(nodes, RUN_TIMEOUT)
            problems = job_problems(name, nodes, codes, expected_world)
            assert not problems, report(
                f"{label}: {name} on the three-member etcd failed (env {operator_pod_env(job)})", problems, nodes
            )
        finally:
            launch.close()

    run_job("before", 0)
    keys = v2_keys(etcd, 0, "/torchelastic")
    assert keys, "the rendezvous left no keys under /torchelastic"
    ids = member_ids(etcd)
    for i in range(REPLICAS):
        etcd.replace(i)  # waits until the new member is healthy, as the PDB makes a drain wait
        heal(etcd, 30, f"after replacing etcd-{i}")
    assert all(ids[m] != new for m, new in member_ids(etcd).items()), "every member was replaced"
    # Keys with a TTL (the agents' keep-alives) expire meanwhile, as they would without a roll.
    now = time.time()
    expected = {k: v for k, (v, expires) in keys.items() if expires is None or expires > now + 5}
    assert any(expires is None or expires > now + 3600 for _, expires in keys.values()), (
        "no long-lived rendezvous key to follow through the roll"
    )
    for i in range(REPLICAS):
        values = {k: v for k, (v, _) in v2_keys(etcd, i, "/torchelastic").items()}
        lost = {k: v for k, v in expected.items() if values.get(k) != v}
        assert not lost, f"etcd-{i} lost or changed rendezvous keys in the roll: {lost}"
    # The same job again (a second run of it would close on the first's state: a new rdzv id, as a re-run
    # gets by bumping `run`), now against another member.
    job["spec"]["elasticPolicy"]["rdzvId"] = f"{job['spec']['elasticPolicy'].get('rdzvId', name)}-after-roll"
    run_job("after", 2)


def test_c_the_rendered_flags_alone_do_not_rejoin(tmp_path: Path, etcd: LocalEtcd) -> None:
    """(c) What the member script prevents: etcd started from the rendered flags (``new``, the static list) on
    an empty data dir, as a replaced member would be without the script, never becomes a member of the cluster."""
    etcd.start_all()
    heal(etcd, 30, "three members started together")
    m = etcd.members[1]
    etcd.stop(1)
    config_path = next((m.root / "volumes").glob("*/etcd.json"))
    command = etcd.argv(1, etcd.init)
    flags = command[command.index("--") + 1 :]
    config = {
        **json.loads(config_path.read_text()),
        **{k: v for k, v in (f[2:].split("=", 1) for f in flags) if k.startswith("initial-cluster")},
    }
    assert config["initial-cluster-state"] == "new"
    config["data-dir"] = str(tmp_path / "empty-data")
    config_path.write_text(json.dumps(config))
    proc = subprocess.Popen(
        [etcd.binary, f"--config-file={config_path}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline and proc.poll() is None:
            assert not etcd.healthy(1), "etcd from the static flags alone became healthy"
            time.sleep(0.5)
    finally:
        proc.kill()
        out = proc.communicate(timeout=10)[0].decode(errors="replace")
    assert not etcd.healthy(1)
    assert "cluster ID mismatch" in out or "already been bootstrapped" in out, out[-2000:]


# -- (d)-(h): more than one at once -----------------------------------------------------------------------


def test_d_two_of_three_lost_at_once_heal_and_keep_the_survivors_keys(
    etcd: LocalEtcd, objects: list[dict[str, Any]]
) -> None:
    """(d) One node held two members: both die at once and come back empty. The survivor alone has no
    leader; within the bound the cluster is healthy again, keeps the keys, takes writes, and rendezvous works."""
    etcd.start_all()
    heal(etcd, 30, "three members started together")
    keys = write_keys(etcd, "/lose-two")
    cluster = cluster_id(etcd, 2)
    etcd.lose([0, 1])
    took = healthy_and_writable(etcd, heal_bound(etcd), "etcd-0 and etcd-1 lost at once")
    assert cluster_id(etcd, 0) == cluster, "the survivor's cluster should have been restored, not replaced"
    assert not lost_keys(etcd, keys, "/lose-two"), "keys the survivor had were lost"
    assert "restores the quorum" in etcd.members[0].init_log.read_text()
    check_rendezvous(etcd, objects, 1)
    print(f"healed in {took:.1f}s")


def test_e_all_three_lost_at_once_start_a_new_cluster(etcd: LocalEtcd) -> None:
    """(e) All three die at once and come back empty: a new cluster (new id), healthy and writable."""
    etcd.start_all()
    heal(etcd, 30, "three members started together")
    cluster = cluster_id(etcd, 0)
    etcd.lose([0, 1, 2])
    healthy_and_writable(etcd, heal_bound(etcd), "all three lost at once")
    assert cluster_id(etcd, 0) != cluster


def test_f_a_cut_off_survivor_joins_the_new_cluster(etcd: LocalEtcd) -> None:
    """(f) etcd-2 is cut off (its pod frozen) while etcd-0 and etcd-1 are lost: they wait for it, then start a
    new cluster. Back, etcd-2 has no leader while its peers are healthy: it gives up its data and joins them."""
    etcd.start_all()
    heal(etcd, 30, "three members started together")
    old = cluster_id(etcd, 2)
    etcd.freeze(2)
    etcd.lose([0, 1])
    for i in (0, 1):
        etcd.wait_healthy(i, timeout=heal_bound(etcd))
    assert cluster_id(etcd, 0) != old, "the empty members should have started a new cluster"
    etcd.thaw(2)
    healthy_and_writable(
        etcd, heal_bound(etcd, "stuck-after") + BACKOFF_FIRST, "etcd-2 back after the others started anew"
    )
    assert "starts again empty" in etcd.members[2].init_log.read_text()
