#!/usr/bin/env sh
# Creates trainer/.venv from the exact lock and installs trainyard_trainer into it (editable): one command,
#   trainer/setup.sh            (or: npm run trainer:setup)
# `trainer/setup.sh --art` also creates trainer/.venv-art from requirements-art.lock: openpipe-art==0.5.17, the
# oracle of the parity test (its own venv: ART pins transformers<=4.57.3, the trainer runs 5.x).
# PYTHON picks the interpreter (default python3.11, else python3). torch is pinned to 2.13.0: pip takes the CPU
# build from a local wheel directory or the CUDA build from PyPI, whichever the machine's pip configuration offers.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$(command -v python3.11 || command -v python3)}
install() { # venv lock
  "$python" -m venv "$1"
  "$1/bin/pip" install --quiet --disable-pip-version-check --no-compile -r "$2"
}
install "$here/.venv" "$here/requirements.lock"
"$here/.venv/bin/pip" install --quiet --disable-pip-version-check --no-compile --no-deps --no-build-isolation -e "$here"
echo "trainer installed: $here/.venv/bin/python -m trainyard_trainer"
if [ "${1:-}" = "--art" ]; then
  install "$here/.venv-art" "$here/requirements-art.lock"
  echo "ART oracle installed: $here/.venv-art/bin/python"
fi
