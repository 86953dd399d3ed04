#!/bin/sh
# npm run test:clients: the ART, weave and openai Python suites against a real trainyard on loopback,
# then the weave cases again with each older weave generation (WEAVE_GENERATIONS, default both):
# the newest 0.52.x, whose HTTP binding sends JSON without a Content-Type, and the newest 0.53.x forced
# to that legacy binding; then test_openai.py with the newest openai release (OPENAI_GENERATIONS,
# default openai-3: ART pins openai 2.x, users of the SDK alone take the newest). Extra arguments go to
# the first pytest run only (e.g. `npm run test:clients -- -k weave`), so that a selection such as
# `-k art` cannot leave the later runs with no test (exit 5).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/setup.sh"
cd "$here/../.."
"$here/.venv/bin/python" -m pytest -p no:cacheprovider -q "$@" test/python
for generation in ${WEAVE_GENERATIONS-weave-0.52 weave-0.53}; do
  sh "$here/setup.sh" "$generation"
  echo "== test_weave.py with $generation"
  # These releases have one write path (call/upsert_batch), so the calls_complete cases would repeat it.
  WEAVE_USE_STAINLESS_SERVER=false "$here/.venv-$generation/bin/python" -m pytest -p no:cacheprovider -q -k "not calls_complete" test/python/test_weave.py
done
for generation in ${OPENAI_GENERATIONS-openai-3}; do
  sh "$here/setup.sh" "$generation"
  echo "== test_openai.py with $generation"
  "$here/.venv-$generation/bin/python" -m pytest -p no:cacheprovider -q test/python/test_openai.py
done
