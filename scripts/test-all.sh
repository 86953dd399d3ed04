#!/usr/bin/env bash
# npm test: every suite the project has, one after the other, on the embedded database.
#   test:ts       the TypeScript suite (vitest; with TEST_DATABASE_URL set it runs against that server)
#   test:trainer  the reference trainer (pytest; makes trainer/.venv from its lock on the first run)
#   test:clients  the real ART, weave, openai and OpenTelemetry Python clients against a running trainyard
#                 (test/python/.venv; weave 0.52 and 0.53 and the newest openai in venvs of their own)
#   test:wandb    the real wandb SDK (artifacts, SFT data, runs) against a running trainyard (test/wandb/.venv)
#   test:ui       the web UI in headless Chromium (needs Debian's `chromium` package)
#   test:fuzz     schemathesis over openapi/openapi.json against a running trainyard (test/fuzz/.venv)
#   test:realloop the RL loop with real parts: a vLLM engine (engine/.venv), the worker and reference trainer,
#                 ART 0.5.23 on Python 3.12 (test/realloop/.venv-art)
# Every suite runs even when an earlier one failed; the exit status is non-zero when any failed.
# A failed suite's last lines are printed again at the very end, so that a log cut to its tail (CI's)
# still shows why it failed, not only the suites that ran after it; so is how long each suite took.
# TRAINYARD_SUITES="ts ui" runs a subset.
set -uo pipefail
cd "$(dirname "$0")/.."

suites=${TRAINYARD_SUITES:-"ts trainer clients wandb ui fuzz realloop"}
passed=0
failed=0
failures=""
timings=""
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for suite in $suites; do
  echo
  echo "=== npm run test:${suite}"
  started=$SECONDS
  if npm run --silent "test:${suite}" 2>&1 | tee "${logs}/${suite}.log"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures="${failures} ${suite}"
  fi
  timings="${timings} ${suite} $((SECONDS - started))s,"
done
for suite in $failures; do
  echo
  echo "=== why test:${suite} failed (its last 80 lines again)"
  tail -n 80 "${logs}/${suite}.log"
done
echo
[ -n "$failures" ] && echo "failed suites:${failures}"
echo "time per suite:${timings%,}"
echo "suites: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
