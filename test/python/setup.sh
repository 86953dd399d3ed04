#!/bin/sh
# Creates test/python/.venv from requirements.lock (exact pins, no other packages), unless a venv made
# from this very lock is already there. PYTHON picks the interpreter (default python3; needs 3.11+:
# openpipe-art 0.5.17, the newest release that installs on 3.11, requires it).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
python=${PYTHON:-python3}
stamp=$(cksum < "$here/requirements.lock")
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.lock-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed for the client tests (set PYTHON)")'
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$here/requirements.lock"
"$venv/bin/python" -m pip check --disable-pip-version-check
echo "$stamp" > "$venv/.lock-stamp"
