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
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "torch",
    reason="torch is not installed: run `bash scripts/test_integration.sh`, which installs requirements-integration.txt",
)

from tests.integration.elastic_helpers import (
    LOCAL_NPROC,
    RUN_TIMEOUT,
    EtcdServer,
    Launcher,
    PlanError,
    find_object,
    job_nodes,
    job_problems,
    operator_pod_env,
    plan_with_config,
    report,
    require_elastic_jobs,
    wait_all,
)
from tests.integration.etcd_local import BACKOFF_FIRST, LocalEtcd, http

REPLICAS = 3
# Seconds per member for etcd to start, join and elect, on top of what the member script waits: etcd lets
# one member join at a time, 5s after the one before is connected (etcd's HealthInterval).
JOIN_TIME = 15.0
RENDEZVOUS_TIMEOUT = 90


def _plan(tmp_path_factory: pytest.TempPathFactory, replicas: int | None) -> list[dict[str, Any]]:
    def config(values: dict[str, Any]) -> None:
        if replicas is not None:
            values.setdefault("etcd", {})["replicas"] = replicas

    try:
        return plan_with_config(tmp_path_factory.mktemp(f"plan-etcd{replicas or ''}"), lambda jobs: None, config)
    except PlanError as err:
        pytest.fail(f"the offline plan of the dev stack with etcd.replicas {replicas} failed: {err}")


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _plan(tmp_path_factory, REPLICAS)


def _local(tmp_path: Path, objects: list[dict[str, Any]], replicas: int) -> Iterator[LocalEtcd]:
    sts = find_object(objects, "StatefulSet", "etcd")
    assert sts is not None, "the plan has no etcd StatefulSet"
    assert sts["spec"]["replicas"] == replicas
    cluster = LocalEtcd(sts, objects, tmp_path / "etcd")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture()
def etcd(tmp_path: Path, objects: list[dict[str, Any]]) -> Iterator[LocalEtcd]:
    yield from _local(tmp_path, objects, REPLICAS)


# -- what the cluster says ----------------------------------------------------------------------------


def _all_healthy(etcd: LocalEtcd) -> list[str]:
    problems = []
    for i, m in enumerate(etcd.members):
        if not etcd.healthy(i):
            problems.append(f"{m.name} is not healthy")
    if problems:
        return problems
    for i, m in enumerate(etcd.members):
        names = sorted(x.get("name", "") for x in etcd.member_list(i))
        if names != sorted(x.name for x in etcd.members):
            problems.append(f"{m.name} lists members {names}")
    if len({_cluster_id(etcd, i) for i in range(len(etcd.members))}) != 1:
        problems.append(
            f"the members are in different clusters: {[_cluster_id(etcd, i) for i in range(len(etcd.members))]}"
        )
    return problems


def _heal(etcd: LocalEtcd, timeout: float, what: str) -> float:
    """Wait until every member is healthy in one cluster; the seconds it took."""
    started = time.monotonic()
    while (problems := _all_healthy(etcd)) and time.monotonic() - started < timeout:
        time.sleep(0.5)
    assert not problems, "\n".join(
        [
            f"{what}: not healed within {timeout:.0f}s:",
            *problems,
            *(etcd.diagnosis(i) for i in range(len(etcd.members))),
        ]
    )
    return time.monotonic() - started


def _heal_bound(etcd: LocalEtcd, after: str = "wait-for-peers") -> float:
    """How long healing may take: what the member script waits (its rendered setting ``after``), then joins."""
    return float(etcd.member_setting(after)) + JOIN_TIME * len(etcd.members)


def _cluster_id(etcd: LocalEtcd, i: int) -> str:
    status, body = http(f"http://{etcd.endpoint(i)}/v3/cluster/member/list", {})
    assert status == 200, (status, body)
    return str(body["header"]["cluster_id"])


def _ids(etcd: LocalEtcd) -> dict[str, str]:
    return {m["name"]: m["ID"] for m in etcd.member_list(0)}


def _keys(etcd: LocalEtcd, i: int, prefix: str) -> dict[str, tuple[str, float | None]]:
    """Every v2 key under ``prefix`` as member ``i`` serves it (the rendezvous uses the v2 API): its value
    and, for a key with a TTL, when it expires (seconds since the epoch)."""
    status, body = http(f"http://{etcd.endpoint(i)}/v2/keys{prefix}?recursive=true&quorum=true")
    if status == 404:
        return {}
    assert status == 200, (status, body)
    out: dict[str, tuple[str, float | None]] = {}

    def walk(node: dict[str, Any]) -> None:
        if node.get("dir"):
            for child in node.get("nodes", []):
                walk(child)
        else:
            expires = time.time() + float(node["ttl"]) if "ttl" in node else None
            out[node["key"]] = (node.get("value", ""), expires)

    walk(body["node"])
    return out


def _put(etcd: LocalEtcd, i: int, key: str, value: str) -> None:
    request = urllib.request.Request(
        f"http://{etcd.endpoint(i)}/v2/keys{key}", data=f"value={value}".encode(), method="PUT"
    )
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as resp:
        assert resp.status in (200, 201), resp.status


def _write_keys(etcd: LocalEtcd, prefix: str, count: int = 5) -> dict[str, str]:
    """Keys written through member 0 and seen by every member (so any survivor has them)."""
    keys = {f"{prefix}/k{n}": uuid.uuid4().hex for n in range(count)}
    for key, value in keys.items():
        _put(etcd, 0, key, value)
    deadline = time.monotonic() + 10
    for i in range(len(etcd.members)):
        while time.monotonic() < deadline:
            status, body = http(f"http://{etcd.endpoint(i)}/v2/keys{prefix}?recursive=true")
            if status == 200 and len(body["node"].get("nodes", [])) == count:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"etcd-{i} does not serve the {count} keys written under {prefix}")
    return keys


def _lost_keys(etcd: LocalEtcd, keys: dict[str, str], prefix: str) -> dict[str, str]:
    lost: dict[str, str] = {}
    for i in range(len(etcd.members)):
        values = {k: v for k, (v, _) in _keys(etcd, i, prefix).items()}
        lost.update({f"etcd-{i}:{k}": v for k, v in keys.items() if values.get(k) != v})
    return lost


def _writable(etcd: LocalEtcd) -> None:
    """A write through every member reads back from every member (a quorum read)."""
    for i in range(len(etcd.members)):
        key, value = f"/healed/w{i}", uuid.uuid4().hex
        _put(etcd, i, key, value)
        for j in range(len(etcd.members)):
            assert _keys(etcd, j, key) == {key: (value, None)}, (
                f"etcd-{j} does not read back {key} written through etcd-{i}"
            )


_RENDEZVOUS = """
import json, sys
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

backend, endpoint, run_id, conf = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
params = RendezvousParameters(backend=backend, endpoint=endpoint, run_id=run_id, min_nodes=1, max_nodes=1, local_addr="127.0.0.1", **conf)
handler = get_rendezvous_handler(params)
info = handler.next_rendezvous()
rank, world = (info.rank, info.world_size) if hasattr(info, "rank") else (info[1], info[2])
print(json.dumps({"rank": rank, "world_size": world}))
handler.shutdown()
"""


def _rendezvous(etcd: LocalEtcd, objects: list[dict[str, Any]], i: int) -> None:
    """A torchrun rendezvous (torch's own handler, the dev job's backend and rdzvConf, a new run id) through member ``i``."""
    pytest.importorskip("etcd", reason="python-etcd is not installed: run `bash scripts/test_integration.sh`")
    env = operator_pod_env(require_elastic_jobs(objects, "the dev plan")[0])
    conf = dict(item.split("=", 1) for item in filter(None, env.get("PET_RDZV_CONF", "").split(",")))
    argv = [
        sys.executable,
        "-c",
        _RENDEZVOUS,
        env["PET_RDZV_BACKEND"],
        etcd.endpoint(i),
        f"healed-{uuid.uuid4().hex[:8]}",
        json.dumps(conf),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=RENDEZVOUS_TIMEOUT)
    assert proc.returncode == 0, f"the rendezvous through etcd-{i} failed:\n{proc.stderr[-3000:]}"
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"rank": 0, "world_size": 1}, proc.stdout


def _healthy_and_writable(etcd: LocalEtcd, timeout: float, what: str) -> float:
    took = _heal(etcd, timeout, what)
    _writable(etcd)
    return took


# -- (a)-(c): one member at a time ------------------------------------------------------------------------


def test_a_replaced_member_rejoins(etcd: LocalEtcd) -> None:
    """(a) Start three members together; replace one; all three are healthy members again, keys kept."""
    etcd.start_all()
    _heal(etcd, 30, "three members started together")
    keys = _write_keys(etcd, "/lose-one")
    before = _ids(etcd)
    etcd.replace(1)
    _healthy_and_writable(etcd, 30, "etcd-1 replaced")
    after = _ids(etcd)
    assert set(after) == set(before)
    assert after["etcd-1"] != before["etcd-1"], "the replaced member should have rejoined under a new member id"
    assert "rejoins the cluster" in etcd.members[1].init_log.read_text()
    assert not _lost_keys(etcd, keys, "/lose-one")


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
    keys = _keys(etcd, 0, "/torchelastic")
    assert keys, "the rendezvous left no keys under /torchelastic"
    ids = _ids(etcd)
    for i in range(REPLICAS):
        etcd.replace(i)  # waits until the new member is healthy, as the PDB makes a drain wait
        _heal(etcd, 30, f"after replacing etcd-{i}")
    assert all(ids[m] != new for m, new in _ids(etcd).items()), "every member was replaced"
    # Keys with a TTL (the agents' keep-alives) expire meanwhile, as they would without a roll.
    now = time.time()
    expected = {k: v for k, (v, expires) in keys.items() if expires is None or expires > now + 5}
    assert any(expires is None or expires > now + 3600 for _, expires in keys.values()), (
        "no long-lived rendezvous key to follow through the roll"
    )
    for i in range(REPLICAS):
        values = {k: v for k, (v, _) in _keys(etcd, i, "/torchelastic").items()}
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
    _heal(etcd, 30, "three members started together")
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
    _heal(etcd, 30, "three members started together")
    keys = _write_keys(etcd, "/lose-two")
    cluster = _cluster_id(etcd, 2)
    etcd.lose([0, 1])
    took = _healthy_and_writable(etcd, _heal_bound(etcd), "etcd-0 and etcd-1 lost at once")
    assert _cluster_id(etcd, 0) == cluster, "the survivor's cluster should have been restored, not replaced"
    assert not _lost_keys(etcd, keys, "/lose-two"), "keys the survivor had were lost"
    assert "restores the quorum" in etcd.members[0].init_log.read_text()
    _rendezvous(etcd, objects, 1)
    print(f"healed in {took:.1f}s")


def test_e_all_three_lost_at_once_start_a_new_cluster(etcd: LocalEtcd) -> None:
    """(e) All three die at once and come back empty: a new cluster (new id), healthy and writable."""
    etcd.start_all()
    _heal(etcd, 30, "three members started together")
    cluster = _cluster_id(etcd, 0)
    etcd.lose([0, 1, 2])
    _healthy_and_writable(etcd, _heal_bound(etcd), "all three lost at once")
    assert _cluster_id(etcd, 0) != cluster


def test_f_a_cut_off_survivor_joins_the_new_cluster(etcd: LocalEtcd) -> None:
    """(f) etcd-2 is cut off (its pod frozen) while etcd-0 and etcd-1 are lost: they wait for it, then start a
    new cluster. Back, etcd-2 has no leader while its peers are healthy: it gives up its data and joins them."""
    etcd.start_all()
    _heal(etcd, 30, "three members started together")
    old = _cluster_id(etcd, 2)
    etcd.freeze(2)
    etcd.lose([0, 1])
    for i in (0, 1):
        etcd.wait_healthy(i, timeout=_heal_bound(etcd))
    assert _cluster_id(etcd, 0) != old, "the empty members should have started a new cluster"
    etcd.thaw(2)
    _healthy_and_writable(
        etcd, _heal_bound(etcd, "stuck-after") + BACKOFF_FIRST, "etcd-2 back after the others started anew"
    )
    assert "starts again empty" in etcd.members[2].init_log.read_text()
