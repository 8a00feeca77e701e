#!/usr/bin/env bash
# The tests that run the project's commands for real, each in processes of its own (marker real_run,
# pytest.ini): the walkthroughs of docs/walkthroughs.md (scripts/plan.sh and `python -m infra diff`
# as a reader types them) and the scaling benchmark. Seconds of CPU each, so they are not in the fast
# command (bash scripts/test.sh): bash scripts/test_slow.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python scripts/k8s_tools.py   # real helm + kubectl, as the plans of the walkthroughs use them
exec .venv/bin/python -m pytest -n auto --maxprocesses 8 --dist worksteal --ignore=tests/integration -m real_run "$@"
