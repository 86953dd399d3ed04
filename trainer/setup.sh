#!/usr/bin/env sh
# Creates trainer/.venv from the exact lock and installs trainyard_trainer into it (editable): one command,
#   trainer/setup.sh            (or: npm run trainer:setup)
# PYTHON picks the interpreter (default python3.11, else python3). torch is pinned to 2.13.0: pip takes the CPU
# build from a local wheel directory or the CUDA build from PyPI, whichever the machine's pip configuration offers.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$(command -v python3.11 || command -v python3)}
venv=${TRAINER_VENV:-$here/.venv}
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.lock"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$here"
echo "trainer installed: $venv/bin/python -m trainyard_trainer"
