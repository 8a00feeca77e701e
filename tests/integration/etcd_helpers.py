"""What the etcd-member integration tests share (test_etcd_members.py, test_etcd_sizes.py): the dev
stack planned with a given ``etcd.replicas``, its etcd StatefulSet run here (etcd_local.LocalEtcd), and
what the cluster says: every member healthy in one cluster, keys kept, writes taken, a rendezvous working.

Not a test module: the test modules import it (no test module imports another).
"""

from __future__ import annotations

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

from tests.integration.elastic_helpers import (
    PlanError,
    find_object,
    operator_pod_env,
    plan_with_config,
    require_elastic_jobs,
)
from tests.integration.etcd_local import LocalEtcd, http

# Seconds per member for etcd to start, join and elect, on top of what the member script waits: etcd lets
# one member join at a time, 5s after the one before is connected (etcd's HealthInterval).
JOIN_TIME = 15.0
RENDEZVOUS_TIMEOUT = 90


def plan_etcd(tmp_path_factory: pytest.TempPathFactory, replicas: int | None) -> list[dict[str, Any]]:
    def config(values: dict[str, Any]) -> None:
        if replicas is not None:
            values.setdefault("etcd", {})["replicas"] = replicas

    try:
        return plan_with_config(tmp_path_factory.mktemp(f"plan-etcd{replicas or ''}"), lambda jobs: None, config)
    except PlanError as err:
        pytest.fail(f"the offline plan of the dev stack with etcd.replicas {replicas} failed: {err}")


def local_etcd(tmp_path: Path, objects: list[dict[str, Any]], replicas: int) -> Iterator[LocalEtcd]:
    sts = find_object(objects, "StatefulSet", "etcd")
    assert sts is not None, "the plan has no etcd StatefulSet"
    assert sts["spec"]["replicas"] == replicas
    cluster = LocalEtcd(sts, objects, tmp_path / "etcd")
    try:
        yield cluster
    finally:
        cluster.close()


# -- what the cluster says ----------------------------------------------------------------------------


def all_healthy(etcd: LocalEtcd) -> list[str]:
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
    if len({cluster_id(etcd, i) for i in range(len(etcd.members))}) != 1:
        problems.append(
            f"the members are in different clusters: {[cluster_id(etcd, i) for i in range(len(etcd.members))]}"
        )
    return problems


def heal(etcd: LocalEtcd, timeout: float, what: str) -> float:
    """Wait until every member is healthy in one cluster; the seconds it took."""
    started = time.monotonic()
    while (problems := all_healthy(etcd)) and time.monotonic() - started < timeout:
        time.sleep(0.5)
    assert not problems, "\n".join(
        [
            f"{what}: not healed within {timeout:.0f}s:",
            *problems,
            *(etcd.diagnosis(i) for i in range(len(etcd.members))),
        ]
    )
    return time.monotonic() - started


def heal_bound(etcd: LocalEtcd, after: str = "wait-for-peers") -> float:
    """How long healing may take: what the member script waits (its rendered setting ``after``), then joins."""
    return float(etcd.member_setting(after)) + JOIN_TIME * len(etcd.members)


def cluster_id(etcd: LocalEtcd, i: int) -> str:
    status, body = http(f"http://{etcd.endpoint(i)}/v3/cluster/member/list", {})
    assert status == 200, (status, body)
    return str(body["header"]["cluster_id"])


def member_ids(etcd: LocalEtcd) -> dict[str, str]:
    return {m["name"]: m["ID"] for m in etcd.member_list(0)}


def v2_keys(etcd: LocalEtcd, i: int, prefix: str) -> dict[str, tuple[str, float | None]]:
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


def put_key(etcd: LocalEtcd, i: int, key: str, value: str) -> None:
    request = urllib.request.Request(
        f"http://{etcd.endpoint(i)}/v2/keys{key}", data=f"value={value}".encode(), method="PUT"
    )
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as resp:
        assert resp.status in (200, 201), resp.status


def write_keys(etcd: LocalEtcd, prefix: str, count: int = 5) -> dict[str, str]:
    """Keys written through member 0 and seen by every member (so any survivor has them)."""
    keys = {f"{prefix}/k{n}": uuid.uuid4().hex for n in range(count)}
    for key, value in keys.items():
        put_key(etcd, 0, key, value)
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


def lost_keys(etcd: LocalEtcd, keys: dict[str, str], prefix: str) -> dict[str, str]:
    lost: dict[str, str] = {}
    for i in range(len(etcd.members)):
        values = {k: v for k, (v, _) in v2_keys(etcd, i, prefix).items()}
        lost.update({f"etcd-{i}:{k}": v for k, v in keys.items() if values.get(k) != v})
    return lost


def check_writable(etcd: LocalEtcd) -> None:
    """A write through every member reads back from every member (a quorum read)."""
    for i in range(len(etcd.members)):
        key, value = f"/healed/w{i}", uuid.uuid4().hex
        put_key(etcd, i, key, value)
        for j in range(len(etcd.members)):
            assert v2_keys(etcd, j, key) == {key: (value, None)}, (
                f"etcd-{j} does not read back {key} written through etcd-{i}"
            )


_RENDEZVOUS = """
import json, sys
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler

backend, endpoint, run_id, conf = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
params = RendezvousParameters(
    backend=backend, endpoint=endpoint, run_id=run_id, min_nodes=1, max_nodes=1, local_addr="127.0.0.1", **conf
)
handler = get_rendezvous_handler(params)
info = handler.next_rendezvous()
rank, world = (info.rank, info.world_size) if hasattr(info, "rank") else (info[1], info[2])
print(json.dumps({"rank": rank, "world_size": world}))
handler.shutdown()
"""


def check_rendezvous(etcd: LocalEtcd, objects: list[dict[str, Any]], i: int) -> None:
    """A torchrun rendezvous (torch's own handler, the dev job's backend and rdzvConf, a new run id) through
    member ``i``."""
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


def healthy_and_writable(etcd: LocalEtcd, timeout: float, what: str) -> float:
    took = heal(etcd, timeout, what)
    check_writable(etcd)
    return took
