#!/bin/sh
# npm run test:clients: the ART, weave and openai Python suites against a real trainyard on loopback.
# Extra arguments go to pytest (e.g. `npm run test:clients -- -k weave`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/setup.sh"
cd "$here/../.."
exec "$here/.venv/bin/python" -m pytest -p no:cacheprovider -q "$@" test/python
