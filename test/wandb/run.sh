#!/bin/sh
# The wandb SDK suite: the real wandb package against a real trainyard, inside a network namespace that
# has only loopback (unshare -rn), so neither the Python SDK nor its wandb-core process can reach any
# other host. Extra arguments go to pytest.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
sh "$here/setup.sh"
cd "$here/../.."
if ! unshare -rn true 2>/dev/null; then
  echo "test/wandb/run.sh: unshare -rn (a user and network namespace) is not permitted here; the suite needs it to keep wandb-core on loopback" >&2
  exit 2
fi
exec unshare -rn sh -c 'ip link set lo up && exec "$0" -m pytest -p no:cacheprovider -q -c "$1/pytest.ini" --rootdir "$1" "$@"' "$here/.venv/bin/python" "$here" "$@"
