#!/usr/bin/env bash
# The integration tests: torchrun against a real etcd on 127.0.0.1, with the environment the training
# operator gives the dev stack's PyTorchJobs (tests/integration). Installs torch (CPU), etcd 3.5 and
# python-etcd into .venv on top of the dev requirements, then runs them:
#   bash scripts/test_integration.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-integration.txt
exec .venv/bin/python -m pytest tests/integration -p no:cacheprovider "$@"
