#!/usr/bin/env bash
# Set up (first run only) and run the offline plan of a stack: bash scripts/plan.sh [stack] [--out DIR] [--verbose]
set -euo pipefail
case "${1:-}" in -h|--help)
  cat <<'EOF'
usage: bash scripts/plan.sh [STACK] [--out DIR] [--config-file PATH] [--verbose]

Set up .venv and helm (first run only: one `set-up:` line per step on stderr), then plan STACK
(default: dev) offline, without AWS or the Pulumi CLI: .venv/bin/python -m infra plan --stack STACK.
  --out DIR            also write the plan's files (resources.json, manifests.yaml, ...) to DIR
  --config-file PATH   read the stack's config from PATH instead of Pulumi.STACK.yaml
  --verbose            print the detail behind the one-screen summary
Exit 0: planned; 1: an invariant or API check failed; 2: invalid config.
EOF
  exit 0;;
esac
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python scripts/k8s_tools.py   # helm, to render the Helm releases into the plan
stack=dev
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then stack=$1; shift; fi   # the first argument, unless an option
exec .venv/bin/python -m infra plan --stack "$stack" "$@"
