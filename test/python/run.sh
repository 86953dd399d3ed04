#!/bin/sh
# npm run test:clients: the ART, weave and openai Python suites against a real trainyard on loopback,
# then the weave cases again with each older weave generation (WEAVE_GENERATIONS, default both):
# the newest 0.52.x, whose HTTP binding sends JSON without a Content-Type, and the newest 0.53.x forced
# to that legacy binding; then test_openai.py with the newest openai release (OPENAI_GENERATIONS,
# default openai-3: ART pins openai 2.x, users of the SDK alone take the newest). Extra arguments go to
# the first pytest run only (e.g. `npm run test:clients -- -k weave`), so that a selection such as
# `-k art` cannot leave the later runs with no test (exit 5).
# Each pytest run starts a stack of its own (conftest.py), and the runs spend most of their time waiting
# on the SDKs' flush intervals, so the other generations run beside the first; their output is printed
# after the first run's. Their exit status counts as the first run's does.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
generations="${WEAVE_GENERATIONS-weave-0.52 weave-0.53} ${OPENAI_GENERATIONS-openai-3}"
sh "$here/setup.sh"
for generation in $generations; do sh "$here/setup.sh" "$generation"; done
cd "$here/../.."
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# One generation's run: the weave cases, or test_openai.py with the newest openai.
run_generation() {
  case "$1" in
    # These releases have one write path (call/upsert_batch), so the calls_complete cases would repeat it.
    weave-*) WEAVE_USE_STAINLESS_SERVER=false "$here/.venv-$1/bin/python" -m pytest -p no:cacheprovider -q -k "not calls_complete" test/python/test_weave.py ;;
    *) "$here/.venv-$1/bin/python" -m pytest -p no:cacheprovider -q test/python/test_openai.py ;;
  esac
}
for generation in $generations; do
  run_generation "$generation" > "$logs/$generation.log" 2>&1 &
  echo $! > "$logs/$generation.pid"
done
status=0
"$here/.venv/bin/python" -m pytest -p no:cacheprovider -q "$@" test/python || status=$?
for generation in $generations; do
  case "$generation" in weave-*) echo "== test_weave.py with $generation" ;; *) echo "== test_openai.py with $generation" ;; esac
  generation_status=0
  wait "$(cat "$logs/$generation.pid")" || generation_status=$?
  cat "$logs/$generation.log"
  [ "$generation_status" -eq 0 ] || status=$generation_status
done
exit "$status"
