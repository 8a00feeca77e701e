#!/usr/bin/env bash
# Create or refresh .venv with the dev requirements. Re-installs only when a requirements file changed.
# Says what it does, one line per step on stderr (a first run takes about a minute); silent when all is done.
set -euo pipefail
case "${1:-}" in -h|--help)
  cat <<'EOF'
usage: bash scripts/bootstrap.sh

Create .venv (with $PYTHON, default python3) and install requirements-dev.txt into it; on later runs
re-install only when requirements.txt or requirements-dev.txt changed, and say nothing.
EOF
  exit 0;;
esac
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
  echo "set-up: creating .venv with $("$PY" --version 2>&1)" >&2
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  pinned=$(cat requirements.txt requirements-dev.txt | grep -c '^[A-Za-z0-9]' || true)
  echo "set-up: installing requirements-dev.txt ($pinned pinned packages) into .venv (pip; a minute or so the first time)..." >&2
  started=$SECONDS
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
  echo "$want" > "$stamp"
  echo "set-up: .venv ready ($((SECONDS - started)) s)" >&2
fi
