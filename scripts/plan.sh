#!/usr/bin/env bash
# Set up (first run only) and run the offline plan of a stack: bash scripts/plan.sh [stack] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python scripts/k8s_tools.py   # helm, to render the Helm releases into the plan
stack=${1:-dev}
shift || true
exec .venv/bin/python -m infra plan --stack "$stack" "$@"
