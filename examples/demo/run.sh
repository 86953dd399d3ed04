#!/bin/sh
# npm run demo: makes the environments the demo needs (each from its exact lock, only when missing or stale),
# then runs examples/demo/demo.py with ART's venv. Arguments go to demo.py (--help lists them).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
for arg in "$@"; do
  case "$arg" in -h | --help) exec python3 "$root/examples/demo/demo.py" --help ;; esac
done
sh "$root/test/realloop/setup.sh"
exec "$root/test/realloop/.venv-art/bin/python" "$root/examples/demo/demo.py" "$@"
