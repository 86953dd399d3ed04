#!/usr/bin/env sh
# The trainer's GPU checks in one call of a lent machine (docs/benchmarks.md, "Trainer"): the CUDA tests, then
# bench/trainer.py at the 0.5B/4k and 1.5B/8k shapes with each variant in the same process, so that "before" and
# "after" share the machine, the data and the warm-up, bench/optimizer.py, and the 8B shape if time is left. Results go to
# $OUT (else /tmp/gpu-check): eight files, what a device call brings back at most.
#
# The device image has torch but not the lock's transformers and peft. Before the call, in the repository root here:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl transformers==5.23.0 peft==0.21.2
# and call `sh bench/gpu-check.sh` carrying `.whl`, with a timeout_s above BUDGET (seconds for the whole script, 560 by
# default). Steps run in the order of what is least known; each is cut to what is left of the budget, and one with under
# 30 s left is skipped. On a fresh H200 the first compile of a model's layers took about 100 s (0.5B), and the CUDA tests
# other than the graphs one took over 110 s. VARIANTS overrides the variants (bench/trainer.py --variants);
# TORCH_LOGS=perf_hints,recompiles puts in the logs inductor's reason for any CUDA graph it skips, and dynamo's for each
# recompile.
set -u
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
started=$(date +%s)
budget=${BUDGET:-560}
step() {  # step SECONDS COMMAND...: COMMAND under a timeout of SECONDS or what is left of the budget, whichever is less
  left=$((budget - $(date +%s) + started))
  limit=$1; shift
  if [ "$left" -lt 30 ]; then echo "skipped, ${left}s left: $*"; return 1; fi
  [ "$left" -lt "$limit" ] && limit=$left
  timeout "$limit" "$@"
}
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/trainer" PYTHONUNBUFFERED=1 TORCH_LOGS=perf_hints,recompiles
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch, transformers, peft, torch._inductor.config as c; print(torch.__version__, transformers.__version__, peft.__version__, "graph_partition", c.graph_partition)' | tee -a "$out/gpu.txt"
# The random models are built (in bf16, on the GPU) and written while the graphs test runs.
python3 -c 'import sys; sys.path.insert(0, "bench"); import trainer; trainer.build("/tmp/m-0.5b", "qwen2.5-0.5b"); trainer.build("/tmp/m-1.5b", "qwen2.5-1.5b")' > /tmp/build.txt 2>&1 &
build=$!
variants=${VARIANTS:-"fused_adamw=--compile layers;graphs=--compile graphs"}
# The graphs test; if it crashes: the generated code's lines where it did, and the test again with inductor's graph
# partitioning off (one CUDA graph per whole forward or backward), which the benchmarks then keep if it passes there.
graphs_test() {
  (cd trainer && step "$@" python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k graphs) > /tmp/graphs-test.txt 2>&1
  cat /tmp/graphs-test.txt >> "$out/cuda-tests.txt"
  grep -h "passed\|failed\|Fatal\|skipped, " /tmp/graphs-test.txt
  sed -n 's|.*File "\(/tmp/torchinductor[^"]*\)", line \([0-9]*\) in call.*|\1 \2|p' /tmp/graphs-test.txt | head -n 1 | while read -r file line; do
    echo "== crashed at $file:$line"; sed -n "$((line - 8)),$((line + 1))p" "$file"; done | tee -a "$out/cuda-tests.txt"
  grep -q " passed" /tmp/graphs-test.txt
}
echo "== graphs test" > "$out/cuda-tests.txt"
if ! graphs_test 200 && grep -q "Fatal Python error" /tmp/graphs-test.txt; then
  echo "== graphs test, TORCHINDUCTOR_GRAPH_PARTITION=0" | tee -a "$out/cuda-tests.txt"
  graphs_test 150 env TORCHINDUCTOR_GRAPH_PARTITION=0 && export TORCHINDUCTOR_GRAPH_PARTITION=0
fi
wait $build
tail -n 3 /tmp/build.txt >> "$out/gpu.txt"
step 200 python3 bench/trainer.py --shape qwen2.5-0.5b --model-dir /tmp/m-0.5b --device cuda --batch fixed --seq-len 4096 --groups 2 --group-size 4 \
  --repeat 2 --no-baseline --variants "$variants" > "$out/bench-0.5b.jsonl" 2> "$out/bench-0.5b.err"
grep -h '"done"\|"failed"\|Fatal' "$out/bench-0.5b.err" "$out/bench-0.5b.jsonl"
cd trainer
echo "== the other CUDA tests" >> "$out/cuda-tests.txt"
step 150 python3 -m pytest -q -p no:cacheprovider --durations=3 tests/test_cuda.py -k "not graphs" >> "$out/cuda-tests.txt" 2>&1
cd ..
grep -h "passed\|failed\|Fatal\|skipped, " "$out/cuda-tests.txt"
step 200 python3 bench/trainer.py --shape qwen2.5-1.5b --model-dir /tmp/m-1.5b --device cuda --batch fixed --seq-len 8192 --groups 2 --group-size 2 \
  --repeat 2 --no-baseline --variants "$variants" > "$out/bench-1.5b.jsonl" 2> "$out/bench-1.5b.err"
grep -h '"done"\|"failed"\|Fatal' "$out/bench-1.5b.err" "$out/bench-1.5b.jsonl"
for shape in qwen2.5-0.5b qwen2.5-1.5b; do step 30 python3 bench/optimizer.py --device cuda --shape $shape; done | tee -a "$out/gpu.txt"
# The 8B shape with what is left: its 16 GB of random weights are drawn on the GPU and written once.
step 300 python3 bench/trainer.py --shape llama3.1-8b --model-dir /tmp/m-8b --device cuda --batch fixed --seq-len 8192 --groups 2 --group-size 2 \
  --repeat 2 --no-baseline --variants "$variants" > "$out/bench-8b.jsonl" 2> "$out/bench-8b.err"
grep -h '"done"\|"failed"\|Fatal' "$out/bench-8b.err" "$out/bench-8b.jsonl"
grep -h "skipping cudagraphs" "$out"/bench-*.err "$out/cuda-tests.txt" | sort | uniq -c | sort -rn | head -n 12
echo "gpu-check took $(($(date +%s) - started)) s"
