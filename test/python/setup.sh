#!/bin/sh
# Creates test/python/.venv from requirements.lock (exact pins, no other packages), unless a venv made
# from this very lock is already there. PYTHON picks the interpreter (default python3; needs 3.11+:
# openpipe-art 0.5.17, the newest release that installs on 3.11, requires it).
# `setup.sh weave-0.52` (or weave-0.53) makes test/python/.venv-weave-0.52 from weave-0.52.lock instead:
# an older weave generation that run.sh runs the weave cases with; `setup.sh openai-3` makes
# test/python/.venv-openai-3 from openai-3.lock: the newest openai release, which run.sh runs test_openai.py with.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
case "${1:-}" in
  "") lock="$here/requirements.lock"; venv="$here/.venv" ;;
  weave-0.52 | weave-0.53 | openai-3) lock="$here/$1.lock"; venv="$here/.venv-$1" ;;
  *) echo "setup.sh: unknown generation $1 (expected weave-0.52, weave-0.53 or openai-3)" >&2; exit 2 ;;
esac
stamp=$(cksum < "$lock")
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.lock-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed for the client tests (set PYTHON)")'
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps -r "$lock"
"$venv/bin/python" -m pip check --disable-pip-version-check
echo "$stamp" > "$venv/.lock-stamp"
