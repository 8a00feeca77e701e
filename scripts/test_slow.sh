#!/usr/bin/env bash
# The tests that run the project's commands for real, each in processes of its own (marker real_run,
# pytest.ini): the walkthroughs of docs/walkthroughs.md (scripts/plan.sh and `python -m infra diff`
# as a reader types them), scripts/compare.sh, the scaling benchmark and the MPI launcher's fabric check
# around a fake mpirun. Seconds each (of CPU, or of the real time a run lasts), so they are not in the
# fast command (bash scripts/test.sh): bash scripts/test_slow.sh [pytest args]
set -euo pipefail
case "${1:-}" in -h|--help)
  cat <<'EOF'
usage: bash scripts/test_slow.sh [PYTEST ARGS]

Set up .venv and helm/kubectl (first run only), then run the tests marked real_run (the docs'
walkthroughs and pages run as a reader types them, scripts/compare.sh, the scaling benchmark, the MPI
launcher's fabric check around a fake mpirun) with PYTEST ARGS.
EOF
  exit 0;;
esac
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python scripts/k8s_tools.py   # real helm + kubectl, as the plans of the walkthroughs use them
exec .venv/bin/python -m pytest -n auto --maxprocesses 8 --dist worksteal --ignore=tests/integration -m real_run "$@"
