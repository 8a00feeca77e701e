#!/usr/bin/env bash
# Create or refresh .venv with the dev requirements. Re-installs only when a requirements file changed.
# Says what it does, one line per step on stderr (a first run takes about a minute); silent when all is done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
  echo "set-up: creating .venv with $("$PY" --version 2>&1)" >&2
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "set-up: installing requirements-dev.txt into .venv (pip; a minute or so the first time)" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
  echo "$want" > "$stamp"
fi
