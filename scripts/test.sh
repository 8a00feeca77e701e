#!/usr/bin/env bash
# Set up (first run only), check the code and run the tests: bash scripts/test.sh [pytest args]
# ruff (lint + format) and mypy must be clean; then the fast test suite. The integration tests with
# real torchrun and etcd have their own command: bash scripts/test_integration.sh
set -euo pipefail
case "${1:-}" in -h|--help)
  cat <<'EOF'
usage: bash scripts/test.sh [PYTEST ARGS]

Set up .venv and helm/kubectl (first run only), run ruff (lint, format), mypy and the config
reference check, then the fast test suite (pytest, tests/integration excluded) with PYTEST ARGS.
EOF
  exit 0;;
esac
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python scripts/k8s_tools.py   # real helm + kubectl for the render tests (.tools/bin)
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# (the files of pyproject.toml's [tool.mypy] files, less its exclude)
[ -d .mypy_cache ] || echo "mypy: type-checking $(find facts jobs providers components stacks infra scripts __main__.py -name '*.py' \( -not -path 'components/scripts/*' -o -name etcd_member.py -o -name burn_in.py \) | wc -l) files (first run builds its cache in .mypy_cache, a few minutes; later runs take seconds)..." >&2
.venv/bin/mypy
.venv/bin/python scripts/config_reference.py --check
# One worker per core (at most 8: each plans the shared dev and prod stacks once); pass -n 0 to run
# in this process (a debugger, -x on the first failure in order). Work stealing: a worker that runs out
# takes tests queued for another, so a few long tests (the walkthroughs, the combinations) do not leave
# one core idle at the end.
exec .venv/bin/python -m pytest -n auto --maxprocesses 8 --dist worksteal --ignore=tests/integration "$@"
