#!/usr/bin/env sh
# The trainer's test suite (npm run test:trainer): creates the venvs from the locks when missing, then runs pytest.
# Needs `npm ci` in the repository for the end-to-end test (it starts trainyard and trainyard-worker).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$here/.venv/bin/python" ] || [ ! -x "$here/.venv-art/bin/python" ]; then
  sh "$here/setup.sh" --art
fi
cd "$here"
exec "$here/.venv/bin/python" -m pytest -q "$@"
