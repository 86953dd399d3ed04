#!/usr/bin/env sh
# Creates trainer/.venv from the exact lock and installs trainyard_trainer into it (editable): one command,
#   trainer/setup.sh            (or: npm run trainer:setup)
# `trainer/setup.sh --art` also creates trainer/.venv-art from requirements-art.lock: openpipe-art==0.5.17, the
# oracle of the parity test (its own venv: ART pins transformers<=4.57.3, the trainer runs 5.x).
# A venv that is already there and was made from the same lock (and pyproject.toml) is kept as it is; one made
# from another is made again. PYTHON picks the interpreter (default python3.11, else python3). torch is pinned to
# 2.13.0: pip takes the CPU build from a local wheel directory or the CUDA build from PyPI, whichever the machine's
# pip configuration offers.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$(command -v python3.11 || command -v python3)}
fresh() { # venv lock: whether the venv exists and was made from this lock and pyproject.toml
  [ -x "$1/bin/python" ] && [ "$(cat "$1/.lock-stamp" 2>/dev/null)" = "$(cat "$2" "$here/pyproject.toml" | cksum)" ]
}
install() { # venv lock [extra pip arguments]
  venv=$1 lock=$2
  shift 2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-compile -r "$lock"
  [ $# -eq 0 ] || "$venv/bin/pip" install --quiet --disable-pip-version-check --no-compile "$@"
  cat "$lock" "$here/pyproject.toml" | cksum > "$venv/.lock-stamp"
}
if ! fresh "$here/.venv" "$here/requirements.lock"; then
  install "$here/.venv" "$here/requirements.lock" --no-deps --no-build-isolation -e "$here"
fi
echo "trainer installed: $here/.venv/bin/python -m trainyard_trainer"
if [ "${1:-}" = "--art" ]; then
  fresh "$here/.venv-art" "$here/requirements-art.lock" || install "$here/.venv-art" "$here/requirements-art.lock"
  echo "ART oracle installed: $here/.venv-art/bin/python"
fi
