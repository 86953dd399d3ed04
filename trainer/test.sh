#!/usr/bin/env sh
# The trainer's test suite (npm run test:trainer): makes the venvs from the locks when missing or stale, then runs pytest.
# Needs `npm ci` in the repository for the end-to-end test (it starts trainyard and trainyard-worker).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/setup.sh" --art
cd "$here"
exec "$here/.venv/bin/python" -m pytest -q "$@"
