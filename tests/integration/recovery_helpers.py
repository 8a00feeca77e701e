"""What the hang, resume and recovery integration tests share (test_hang_and_resume.py, test_recovery_as_shipped.py):
the ``pytorch`` container of a rendered PyTorchJob run here as a "pod" (its command, args, env and volume mounts,
ConfigMaps written out as the kubelet projects them), an interpreter that stands in for AWS's training image,
and a CPU burner for the runs under load.

Not a test module: test modules import it (no test module imports another).

The image's interpreter (``image_python``): AWS's pytorch-training images have torch and urllib3 but neither
python-etcd nor dnspython (facts/images.py; aws/deep-learning-containers docker/pytorch/<minor>/cuda/uv.lock).
This venv has both (requirements-integration.txt), so the pods run a venv made here (``python -m venv
--without-pip``) whose site-packages links every entry of this venv's except ``etcd``, ``dns`` and their
dist-info folders: ``import etcd`` fails in it unless the pod's PYTHONPATH reaches the ConfigMap the stack ships.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tests.integration.elastic_helpers import Node, find_object, local_overrides

RESUME_PREFIX = "RESUME "  # resume_worker.PREFIX
HIDDEN = ("etcd", "dns")  # import names the image lacks
HIDDEN_DIST = ("python_etcd-", "dnspython-")


def image_python(root: Path) -> Path:
    """The interpreter of a venv that has this venv's packages but python-etcd and dnspython (made once per root)."""
    venv = root / "image-venv"
    python = venv / "bin" / "python"
    if python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    for entry in ours.iterdir():
        if entry.name in HIDDEN or entry.name.startswith(HIDDEN_DIST) or (theirs / entry.name).exists():
            continue
        (theirs / entry.name).symlink_to(entry)
    probe = subprocess.run(
        [str(python), "-c", "import torch, urllib3\ntry:\n import etcd\nexcept ImportError:\n print('no etcd')"],
        env={"PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.stdout.strip() == "no etcd", f"the image's interpreter is not torch without python-etcd: {probe}"
    return python


class Pod:
    """The pytorch container of one Worker pod, run here: rendered command, args and env, mounts as folders."""

    def __init__(self, job: Mapping[str, Any], objects: list[dict[str, Any]], shared: Path, python: Path):
        template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        self.container = next(c for c in template["containers"] if c["name"] == "pytorch")
        self.volumes = {v["name"]: v for v in template.get("volumes") or []}
        self.objects = objects
        self.shared = shared  # the stack's file systems: one folder per claim, shared by every pod
        self.namespace = job["metadata"]["namespace"]
        self.python = python

    def config_map(self, volume: Mapping[str, Any], folder: Path) -> None:
        """The ConfigMap's keys as files, at their ``items`` paths when the volume lists them (as the kubelet)."""
        cm = find_object(self.objects, "ConfigMap", volume["configMap"]["name"], self.namespace)
        assert cm is not None, f"the plan has no ConfigMap {volume['configMap']['name']}"
        items = volume["configMap"].get("items")
        paths = {i["key"]: i["path"] for i in items} if items else {k: k for k in cm["data"]}
        for key, path in paths.items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(cm["data"][key])

    def mounts(self, pod_dir: Path) -> dict[str, Path]:
        """mountPath -> the folder that stands for it."""
        out = {}
        for m in self.container.get("volumeMounts") or []:
            v = self.volumes[m["name"]]
            if "configMap" in v:
                folder = pod_dir / "configmaps" / m["name"]
                folder.mkdir(parents=True, exist_ok=True)
                self.config_map(v, folder)
            elif "persistentVolumeClaim" in v:
                folder = self.shared / v["persistentVolumeClaim"]["claimName"] / m.get("subPath", "")
                folder.mkdir(parents=True, exist_ok=True)  # the kubelet creates a missing subPath
            else:
                folder = pod_dir / "volumes" / m["name"]
                folder.mkdir(parents=True, exist_ok=True)
            out[m["mountPath"]] = folder
        return out

    @staticmethod
    def local(text: str, mounts: Mapping[str, Path]) -> str:
        """A path in the container (or a PYTHONPATH of such paths) as the path of its folder here."""
        if ":" in text and all(part.startswith("/") for part in text.split(":")):
            return ":".join(Pod.local(part, mounts) for part in text.split(":"))
        for mount, folder in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if text == mount or text.startswith(mount.rstrip("/") + "/"):
                return str(folder) + text[len(mount.rstrip("/")) :]
        return text

    def argv_env(self, pod_dir: Path, pod_env: Mapping[str, str], etcd: Any) -> tuple[list[str], dict[str, str]]:
        mounts = self.mounts(pod_dir)
        line = [*self.container.get("command", []), *self.container.get("args", [])]
        assert line[0] == "torchrun", f"the pytorch container runs {line[:1]}, not torchrun"
        argv = [str(self.python), "-m", "torch.distributed.run"] + [self.local(a, mounts) for a in line[1:]]
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PET_", "TORCHELASTIC_", "TORCH_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")
        }
        env = {k: self.local(v, mounts) for k, v in pod_env.items()}
        overrides = local_overrides(etcd) if etcd is not None else {}
        return argv, {**inherited, **env, **overrides, "TMPDIR": str(pod_dir)}


class Cluster:
    """The pods of one job, started and stopped here, against one etcd (None: c10d on "worker 0", 127.0.0.1)."""

    def __init__(self, root: Path, job: dict[str, Any], objects: list[dict[str, Any]], etcd: Any, python: Path):
        self.root, self.job, self.etcd = root, job, etcd
        self.pod = Pod(job, objects, root / "fs", python)
        self.env: dict[str, str] = {}  # the operator's env of the pods
        self.overrides: dict[str, str] = {}  # more local changes (c10d on loopback)
        self.nodes: list[Node] = []

    def start(self, label: str, extra: Mapping[str, str] | None = None) -> Node:
        pod_dir = self.root / label
        pod_dir.mkdir(parents=True, exist_ok=True)
        argv, env = self.pod.argv_env(pod_dir, self.env, self.etcd)
        env = {**env, **self.overrides, **(extra or {})}
        node = Node(label, self.job["metadata"]["name"], argv, env, pod_dir / "torchrun.log")
        self.nodes.append(node.start())
        return node

    def start_job(self, run: str, extra: Mapping[str, str] | None = None) -> list[Node]:
        replicas = int(self.job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])
        return [self.start(f"{run}-worker-{i}", extra) for i in range(replicas)]

    def checkpoint_dir(self) -> Path:
        """The job's checkpoint folder (CHECKPOINT_DIR) as it is here."""
        mounts = self.pod.mounts(self.root / "probe")
        return Path(Pod.local(self.env["CHECKPOINT_DIR"], mounts))

    def close(self) -> None:
        for n in self.nodes:
            if n.returncode is None:
                n.kill()


def records(node: Node, phase: str | None = None) -> list[dict[str, Any]]:
    """The lines resume_worker.py printed, optionally of one phase."""
    found = [
        json.loads(line[len(RESUME_PREFIX) :]) for line in node.output.splitlines() if line.startswith(RESUME_PREFIX)
    ]
    return [r for r in found if phase is None or r["phase"] == phase]


def story(nodes: list[Node]) -> str:
    """What each node did, for failure messages."""
    parts = []
    for n in nodes:
        lines = [
            line
            for line in n.output.splitlines()
            if line.startswith((RESUME_PREFIX, "progress-guard")) or "restart" in line.lower() or "Error" in line
        ]
        tail = [line for line in n.output.splitlines() if line.strip()][-8:]
        parts.append(f"--- {n.label} (exit {n.returncode}):\n" + "\n".join([*lines[-40:], "  ...", *tail]))
    return "\n".join(parts)


@contextlib.contextmanager
def busy_cores(seconds: float) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One spinning process per core, each ending by itself after ``seconds`` (and stopped by the caller)."""
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 2)]
    try:
        yield burners
    finally:
        for b in burners:
            b.kill()
            b.wait(timeout=10)


def wait_for(predicate: Any, timeout: float, nodes: list[Node]) -> bool:
    """Poll ``predicate()`` until it holds, a node ends, or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if any(n.returncode is not None for n in nodes):
            return bool(predicate())
        time.sleep(0.2)
    return False
