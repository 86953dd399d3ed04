#!/bin/sh
# npm run test:realloop: the RL loop with real parts only (vLLM engine, trainyard, trainyard-worker with the
# reference trainer, ART 0.5.23) on loopback. Makes its environments first (test/realloop/setup.sh).
# Extra arguments go to pytest.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/setup.sh"
cd "$here"
exec "$here/.venv-art/bin/python" -m pytest -p no:cacheprovider -q -s "$@" .
