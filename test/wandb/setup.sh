#!/bin/sh
# Creates test/wandb/.venv from requirements.lock (exact pins, the wandb SDK and pytest), unless a venv
# made from this very lock is already there. PYTHON picks the interpreter (default python3).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
python=${PYTHON:-python3}
stamp=$(cksum < "$here/requirements.lock")
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.lock-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps -r "$here/requirements.lock"
"$venv/bin/python" -m pip check --disable-pip-version-check
echo "$stamp" > "$venv/.lock-stamp"
