#!/bin/sh
# The wandb SDK suite: the real wandb package against a real trainyard, inside a network namespace that
# has only loopback (unshare -rn), so neither the Python SDK nor its wandb-core process can reach any
# other host. Then the ART tests (art/) in the same kind of namespace, once with each tested ART release
# and its own venv: 0.5.17 on Python 3.11 (test/python/.venv) and 0.5.23 on Python 3.12
# (test/realloop/.venv-art), both with wandb; their worker runs the reference trainer (trainer/.venv).
# WANDB_ART_RELEASES picks the releases (default "0.5.17 0.5.23"; empty skips the ART tests).
# Extra arguments go to the first pytest run only (a selection such as `-k sft` would leave the other
# runs with nothing to run).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
releases=${WANDB_ART_RELEASES-0.5.17 0.5.23}
sh "$here/setup.sh"
for release in $releases; do
  case "$release" in
    0.5.17) sh "$root/test/python/setup.sh" ;;
    0.5.23) sh "$root/test/realloop/setup.sh" art ;;
    *) echo "test/wandb/run.sh: no venv for ART $release (tested: 0.5.17 0.5.23)" >&2; exit 2 ;;
  esac
done
[ -z "$releases" ] || sh "$root/trainer/setup.sh"
cd "$root"
if ! unshare -rn true 2>/dev/null; then
  echo "test/wandb/run.sh: unshare -rn (a user and network namespace) is not permitted here; the suite needs it to keep wandb-core on loopback" >&2
  exit 2
fi

# pytest with the given interpreter and arguments, in a namespace of its own that has only loopback.
pytest_on_loopback() {
  python=$1
  shift
  unshare -rn sh -c 'ip link set lo up && dir=$1 && shift && exec "$0" -m pytest -p no:cacheprovider -q -c "$dir/pytest.ini" --rootdir "$dir" "$@"' "$python" "$here" "$@"
}

status=0
pytest_on_loopback "$here/.venv/bin/python" "$here" "$@" || status=1
# The tiny model is built once for both releases.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export TINY_MODEL_DIR="$scratch/tiny-model"
for release in $releases; do
  case "$release" in
    0.5.17) python="$root/test/python/.venv/bin/python" ;;
    0.5.23) python="$root/test/realloop/.venv-art/bin/python" ;;
  esac
  echo "== ART $release with wandb ($("$python" -c 'import wandb; print(wandb.__version__)'))"
  pytest_on_loopback "$python" "$here/art" || status=1
done
exit $status
