#!/usr/bin/env sh
# The trainer's GPU checks in one call of a lent machine (docs/benchmarks.md, "Trainer"): the CUDA tests, then
# bench/trainer.py at the 0.5B/4k and 1.5B/8k shapes with each variant in the same process, so that "before" and
# "after" share the machine, the data and the warm-up. Results go to $OUT (else /tmp/gpu-check).
#
# The device image has torch but not the lock's transformers and peft. Before the call, in the repository root here:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl transformers==5.23.0 peft==0.21.2
# and call `sh bench/gpu-check.sh` carrying `.whl`. VARIANTS overrides the variants (bench/trainer.py --variants).
# About 9 minutes on an H200, compiling included.
set -u
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/trainer" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch, transformers, peft; print(torch.__version__, transformers.__version__, peft.__version__)' | tee -a "$out/gpu.txt"
variants=${VARIANTS:-"before=--compile layers --adamw default;fused_adamw=--compile layers;graphs=--compile graphs"}
(cd trainer && timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py) > "$out/cuda-tests.txt" 2>&1
tail -n 3 "$out/cuda-tests.txt"
for shape in qwen2.5-0.5b qwen2.5-1.5b; do timeout 60 python3 bench/optimizer.py --device cuda --shape $shape; done | tee "$out/optimizer.jsonl"
timeout 200 python3 bench/trainer.py --shape qwen2.5-0.5b --device cuda --batch fixed --seq-len 4096 --groups 2 --group-size 4 \
  --repeat 2 --no-baseline --variants "$variants" > "$out/bench-0.5b.jsonl" 2> "$out/bench-0.5b.err"
cat "$out/bench-0.5b.jsonl"
timeout 200 python3 bench/trainer.py --shape qwen2.5-1.5b --device cuda --batch fixed --seq-len 8192 --groups 2 --group-size 2 \
  --repeat 2 --no-baseline --variants "$variants" > "$out/bench-1.5b.jsonl" 2> "$out/bench-1.5b.err"
cat "$out/bench-1.5b.jsonl"
grep -h '"failed"\|Error' "$out"/bench-*.err | tail -n 20
