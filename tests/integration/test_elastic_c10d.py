"""Integration test: the dev stack's elastic example with ``rendezvous: c10d`` (the one change to it), no python-etcd.

With ``c10d`` training-operator v1.9.4 points PET_RDZV_ENDPOINT at ``<name>-worker-0`` and
the container's port 23456 (elastic_helpers.operator_pod_env), and torch's c10d backend lets
the agent whose host the endpoint names host the store. Here the job's nodes are torchrun agents on
this machine with the endpoint on 127.0.0.1: each agent is then a candidate host, the first to bind
the port hosts the store and the others join it as clients (c10d_rendezvous_backend._create_tcp_store).
``import etcd`` fails in the agents, as in AWS's image: c10d never needs it. The stack gives c10d jobs
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (a store per rendezvous round), which the agents get here too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
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
    WORKER,
    Node,
    PlanError,
    elastic_job_configs,
    job_nodes,
    job_problems,
    operator_pod_env,
    pet_env,
    plan_with_config,
    report,
    require_elastic_jobs,
    wait_all,
)

OPERATOR_PORT = 23456  # training-operator v1.9.4: the default pytorchjob-port


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _without_python_etcd(folder: Path) -> str:
    """A folder whose ``etcd`` package fails to import, as python-etcd is missing from the image."""
    package = folder / "etcd"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise ModuleNotFoundError("python-etcd is not in the image", name="etcd")\n')
    return str(folder)


def _on_c10d(jobs: list[dict[str, Any]]) -> None:
    for job in elastic_job_configs(jobs)[:1]:
        job["rendezvous"] = "c10d"


def test_the_dev_example_on_c10d_rendezvous(tmp_path: Path) -> None:
    try:
        objects = plan_with_config(tmp_path / "plan", _on_c10d)
    except PlanError as err:
        pytest.fail(f"the offline plan of the dev stack with rendezvous c10d failed: {err}")
    (job,) = require_elastic_jobs(objects, "the dev plan")
    name = job["metadata"]["name"]
    pod_env = operator_pod_env(job)
    assert (pod_env["PET_RDZV_BACKEND"], pod_env["PET_RDZV_ENDPOINT"]) == (
        "c10d",
        f"{name}-worker-0:{OPERATOR_PORT}",
    ), pet_env(pod_env)
    assert pod_env.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") == "1" and "PYTHONPATH" not in pod_env, pod_env

    hidden = _without_python_etcd(tmp_path / "no-python-etcd")
    probe = subprocess.run(
        [sys.executable, "-c", "import etcd"],
        env={**os.environ, "PYTHONPATH": hidden},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert probe.returncode != 0 and "python-etcd is not in the image" in probe.stderr, (
        "the agents would still find python-etcd"
    )

    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PET_", "TORCHELASTIC_")) and k not in ("MASTER_ADDR", "MASTER_PORT")
    }
    local = {
        "PET_RDZV_ENDPOINT": f"127.0.0.1:{_free_port()}",  # <name>-worker-0 is this machine
        "PET_NPROC_PER_NODE": str(LOCAL_NPROC),
        "PET_LOCAL_ADDR": "127.0.0.1",
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONPATH": hidden,
    }
    marker = f"c10d-{uuid.uuid4().hex[:8]}"
    nodes: list[Node] = []
    try:
        for i in range(job_nodes(job)):
            node_dir = tmp_path / f"{name}-worker-{i}"
            node_dir.mkdir()
            argv = [sys.executable, "-m", "torch.distributed.run", str(WORKER), "--job", name, "--run-marker", marker]
            env = {**inherited, **pod_env, **local, "TMPDIR": str(node_dir)}
            nodes.append(Node(f"{name}-worker-{i}", name, argv, env, node_dir / "torchrun.log").start())
        codes = wait_all(nodes, RUN_TIMEOUT)
    finally:
        for node in nodes:
            if node.returncode is None:
                node.kill()
    problems = job_problems(name, nodes, codes, job_nodes(job) * LOCAL_NPROC)
    assert not problems, report(
        f"{name} did not rendezvous with c10d",
        problems,
        nodes,
        [f"operator env {pet_env(pod_env)}; local {local}"],
    )
