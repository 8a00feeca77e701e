"""Integration test: the etcd StatefulSet survives what a node-group update does to it, with real etcd 3.5.

The dev stack with ``etcd.replicas: 3`` (as prod runs it) is planned, and its etcd StatefulSet is run
here as its pods run it (tests/integration/etcd_local.py: the member init container's script from the
plan's ConfigMap, then ``etcd --config-file``; one loopback address per member). Then:

(a) three members start together; one is replaced (its emptyDir wiped, as when its pod lands on a new
    node) and comes back: all three healthy, three members, the replaced one under a new member id;
(b) an elastic job's rendezvous leaves its keys in etcd; all three members are replaced one after
    another, each only once the one before is healthy again (what the PodDisruptionBudget lets a
    node-group update do); the keys read back the same from every member, and a new torchrun
    rendezvous of the dev job on the rolled cluster succeeds;
(c) without the init container's rejoin (the old ``--initial-cluster-state=new`` on an empty data
    dir) a replaced member exits with "has already been bootstrapped": the test would catch a
    regression.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any, Optional

import pytest

pytest.importorskip("torch", reason="torch is not installed: run `bash scripts/test_integration.sh`, which installs requirements-integration.txt")

from tests.integration.etcd_local import LocalEtcd, http
from tests.integration.test_elastic_rendezvous import (
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

REPLICAS = 3


def _three_members(config: dict[str, Any]) -> None:
    config.setdefault("etcd", {})["replicas"] = REPLICAS


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    try:
        return plan_with_config(tmp_path_factory.mktemp("plan-etcd3"), lambda jobs: None, _three_members)
    except PlanError as err:
        pytest.fail(f"the offline plan of the dev stack with etcd.replicas {REPLICAS} failed: {err}")


@pytest.fixture()
def etcd(tmp_path: Path, objects: list[dict[str, Any]]):
    sts = find_object(objects, "StatefulSet", "etcd")
    assert sts is not None, "the plan has no etcd StatefulSet"
    assert sts["spec"]["replicas"] == REPLICAS
    cluster = LocalEtcd(sts, objects, tmp_path / "etcd")
    try:
        yield cluster
    finally:
        cluster.close()


def _all_healthy(etcd: LocalEtcd) -> list[str]:
    problems = []
    for i, m in enumerate(etcd.members):
        if not etcd.healthy(i):
            problems.append(f"{m.name} is not healthy")
    for i, m in enumerate(etcd.members):
        names = sorted(x.get("name", "") for x in etcd.member_list(i))
        if names != sorted(x.name for x in etcd.members):
            problems.append(f"{m.name} lists members {names}")
    return problems


def _ids(etcd: LocalEtcd) -> dict[str, str]:
    return {m["name"]: m["ID"] for m in etcd.member_list(0)}


def _keys(etcd: LocalEtcd, i: int, prefix: str) -> dict[str, tuple[str, Optional[float]]]:
    """Every v2 key under ``prefix`` as member ``i`` serves it (the rendezvous uses the v2 API): its value
    and, for a key with a TTL, when it expires (seconds since the epoch)."""
    status, body = http(f"http://{etcd.endpoint(i)}/v2/keys{prefix}?recursive=true&quorum=true")
    assert status == 200, (status, body)
    out: dict[str, tuple[str, Optional[float]]] = {}

    def walk(node: dict[str, Any]) -> None:
        if node.get("dir"):
            for child in node.get("nodes", []):
                walk(child)
        else:
            expires = time.time() + float(node["ttl"]) if "ttl" in node else None
            out[node["key"]] = (node.get("value", ""), expires)

    walk(body["node"])
    return out


def test_a_replaced_member_rejoins(etcd: LocalEtcd) -> None:
    """(a) Start three members together; replace one; all three are healthy members again."""
    etcd.start_all()
    assert not _all_healthy(etcd)
    before = _ids(etcd)
    etcd.replace(1)
    deadline = time.monotonic() + 30
    while (problems := _all_healthy(etcd)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not problems, "\n".join(problems + [etcd.diagnosis(i) for i in range(REPLICAS)])
    after = _ids(etcd)
    assert set(after) == set(before)
    assert after["etcd-1"] != before["etcd-1"], "the replaced member should have rejoined under a new member id"
    assert "rejoins the cluster" in etcd.members[1].init_log.read_text()


def test_b_roll_keeps_rendezvous_keys_and_rendezvous_works(tmp_path: Path, objects: list[dict[str, Any]], etcd: LocalEtcd) -> None:
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
            assert not problems, report(f"{label}: {name} on the three-member etcd failed (env {operator_pod_env(job)})", problems, nodes)
        finally:
            launch.close()

    run_job("before", 0)
    keys = _keys(etcd, 0, "/torchelastic")
    assert keys, "the rendezvous left no keys under /torchelastic"
    ids = _ids(etcd)
    for i in range(REPLICAS):
        etcd.replace(i)  # waits until the new member is healthy, as the PDB makes a drain wait
        problems = _all_healthy(etcd)
        assert not problems, "\n".join([f"after replacing etcd-{i}:", *problems, *(etcd.diagnosis(j) for j in range(REPLICAS))])
    assert all(ids[m] != new for m, new in _ids(etcd).items()), "every member was replaced"
    # Keys with a TTL (the agents' keep-alives) expire meanwhile, as they would without a roll.
    now = time.time()
    expected = {k: v for k, (v, expires) in keys.items() if expires is None or expires > now + 5}
    assert any(expires is None or expires > now + 3600 for _, expires in keys.values()), "no long-lived rendezvous key to follow through the roll"
    for i in range(REPLICAS):
        values = {k: v for k, (v, _) in _keys(etcd, i, "/torchelastic").items()}
        lost = {k: v for k, v in expected.items() if values.get(k) != v}
        assert not lost, f"etcd-{i} lost or changed rendezvous keys in the roll: {lost}"
    # The same job again (a second run of it would close on the first's state: a new rdzv id, as a re-run
    # gets by bumping `run`), now against another member.
    job["spec"]["elasticPolicy"]["rdzvId"] = f"{job['spec']['elasticPolicy'].get('rdzvId', name)}-after-roll"
    run_job("after", 2)


def test_c_without_rejoin_a_replaced_member_cannot_start(tmp_path: Path, etcd: LocalEtcd) -> None:
    """(c) What the init container prevents: the old start (state ``new``, empty data dir) of a replaced member fails."""
    etcd.start_all()
    m = etcd.members[1]
    etcd.stop(1)
    config_path = next((m.root / "volumes").glob("*/etcd.json"))
    config = json.loads(config_path.read_text())
    data_dir = Path(config["data-dir"])
    config["initial-cluster-state"] = "new"
    config["data-dir"] = str(tmp_path / "empty-data")
    config_path.write_text(json.dumps(config))
    proc = subprocess.run([etcd.binary, f"--config-file={config_path}"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0
    assert "already been bootstrapped" in proc.stderr + proc.stdout, (proc.stderr + proc.stdout)[-2000:]
    assert data_dir.exists()
