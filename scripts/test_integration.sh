#!/usr/bin/env bash
# The integration tests: torchrun against a real etcd on 127.0.0.1, with the environment the training
# operator gives the dev stack's PyTorchJobs (tests/integration). Installs torch (CPU), etcd 3.5 and
# python-etcd into .venv on top of the dev requirements, unpacks SageMaker's training toolkit into
# .tools (test_sagemaker_toolkit.py), then runs them:
#   bash scripts/test_integration.sh [pytest args]
set -euo pipefail
case "${1:-}" in -h|--help)
  cat <<'EOF'
usage: bash scripts/test_integration.sh [PYTEST ARGS]

Install the integration requirements (torch CPU, etcd, python-etcd) into .venv and SageMaker's
training toolkit source into .tools (first run only), then run tests/integration with pytest.
EOF
  exit 0;;
esac
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python -c "import torch, etcd" 2>/dev/null ||
  echo "set-up: installing requirements-integration.txt (PyTorch CPU, etcd, python-etcd) into .venv (pip; several minutes the first time)..." >&2
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-integration.txt
# sagemaker-training builds a C extension, so it is not installed: the test reads its pure-Python source
# from the sdist (its TOOLKIT_VERSION must match), downloaded and unpacked once.
smt_version=5.1.4
smt_sha256=4b6147670ccee4b14cbd86dbfdf416fcfffe486b3ef7ac8d1caf6bc361386121  # PyPI sdist of 5.1.4
smt=.tools/sagemaker-training
if [ ! -f "$smt/sagemaker_training-$smt_version/PKG-INFO" ]; then
  echo "set-up: fetching the source of sagemaker-training $smt_version into $smt (pip download)" >&2
  mkdir -p "$smt"
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: -d "$smt" "sagemaker-training==$smt_version"
  echo "$smt_sha256  $smt/sagemaker_training-$smt_version.tar.gz" | sha256sum -c --quiet
  tar -xzf "$smt/sagemaker_training-$smt_version.tar.gz" -C "$smt"
fi
exec .venv/bin/python -m pytest tests/integration -p no:cacheprovider "$@"
