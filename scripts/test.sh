#!/usr/bin/env bash
# Set up (first run only), check the code and run the tests: bash scripts/test.sh [pytest args]
# ruff (lint + format) and mypy must be clean; then the fast test suite. The tests that run the
# project's commands for real (marker real_run: the walkthroughs' scripts/plan.sh, the scaling
# benchmark) have their own command, bash scripts/test_slow.sh, as the integration tests with real
# torchrun and etcd have theirs: bash scripts/test_integration.sh. .ci/run runs all three.
# Says what it checks, one `test.sh:` line per step on stderr.
set -euo pipefail
case "${1:-}" in -h|--help)
  cat <<'EOF'
usage: bash scripts/test.sh [PYTEST ARGS]

Set up .venv and helm/kubectl (first run only), run ruff (lint, format) and mypy, then the fast
test suite (pytest, tests/integration excluded) with PYTEST ARGS. (That docs/config.md's key tables
are the generated ones is one of its tests.)
EOF
  exit 0;;
esac
cd "$(dirname "$0")/.."
step() { echo "test.sh: $*" >&2; }
bash scripts/bootstrap.sh
.venv/bin/python scripts/k8s_tools.py   # real helm + kubectl for the render tests (.tools/bin)
step "ruff check, ruff format --check"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# mypy keeps what it learnt in .mypy_cache/ (mypy's default): a run with it takes a second or so; a run
# without it (a fresh clone) checks everything, a few minutes of CPU, so it says it is still at work.
if [ -d .mypy_cache ]; then
  step "mypy"
else
  step "mypy: no .mypy_cache yet, so a full check (a few minutes the first time; a second or so after)"
fi
start=$SECONDS
# The ticker waits on its own sleep, so that killing it ends the sleep too (nothing left holding the output).
( trap 'kill "${nap:-}" 2>/dev/null; exit 0' TERM
  while :; do sleep 30 & nap=$!; wait "$nap"; step "mypy: still checking ($((SECONDS - start)) s)"; done ) &
ticker=$!
status=0
.venv/bin/mypy || status=$?
kill "$ticker" 2>/dev/null || true
wait "$ticker" 2>/dev/null || true
[ "$status" -eq 0 ] || exit "$status"
step "pytest (tests/ but tests/integration and the real_run tests)"
# One worker per core (at most 8; they share the plans they make: tests/plan_memo.py); pass -n 0 to run
# in this process (a debugger, -x on the first failure in order). Work stealing: a worker that runs out
# takes tests queued for another, so a few long tests (the combinations) do not leave one core idle
# at the end.
exec .venv/bin/python -m pytest -n auto --maxprocesses 8 --dist worksteal --ignore=tests/integration -m "not real_run" "$@"
