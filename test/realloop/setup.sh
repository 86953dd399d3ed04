#!/bin/sh
# Makes the environments of the real-loop test, each from an exact lock, each only when missing or stale:
#   test/realloop/.venv-art   openpipe-art 0.5.23 (the newest ART; 0.5.20+ need Python 3.12) and pytest
#   engine/.venv              the inference engine (engine/setup.sh)
#   trainer/.venv             the reference trainer (trainer/setup.sh), which also builds the tiny model
# `setup.sh art` makes only the first (the wandb suite runs ART 0.5.23 from it, test/wandb/run.sh).
# Python 3.12 is PYTHON312 if set, else python3.12 on PATH, else the newest 3.12 that pyenv has.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

find_python312() {
  if [ -n "${PYTHON312:-}" ]; then echo "$PYTHON312"; return; fi
  if python3.12 -c '' 2>/dev/null; then command -v python3.12; return; fi
  if command -v pyenv >/dev/null 2>&1; then
    version=$(pyenv versions --bare 2>/dev/null | grep '^3\.12\.' | sort -t. -k3 -n | tail -n 1)
    if [ -n "$version" ] && [ -x "$(pyenv root)/versions/$version/bin/python3.12" ]; then
      echo "$(pyenv root)/versions/$version/bin/python3.12"
      return
    fi
  fi
  echo "test/realloop/setup.sh: no Python 3.12 found (ART 0.5.20+ need it): set PYTHON312, put python3.12 on PATH or install it with pyenv" >&2
  exit 1
}

venv="$here/.venv-art"
stamp=$(cksum < "$here/requirements-art.lock")
if ! { [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.lock-stamp" 2>/dev/null)" = "$stamp" ]; }; then
  python=$(find_python312)
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps -r "$here/requirements-art.lock"
  "$venv/bin/python" -m pip check --disable-pip-version-check
  echo "$stamp" > "$venv/.lock-stamp"
fi
[ "${1:-}" = art ] && exit 0
sh "$root/engine/setup.sh"
sh "$root/trainer/setup.sh"
