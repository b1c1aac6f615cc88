#!/usr/bin/env bash
# One-call GPU check (docs/BENCHMARKS.md, GPU check), for whoever is lent a GPU: within the device tool's 10-minute
# command limit, with at most 64 MiB of carried wheels (.whl/, see docs/BENCHMARKS.md "GPU check").
#
#   1. the CUDA noise-kernel tests: the compiled Triton kernel bit-identical to the torch reference
#      (same GPU) and to the CPU reference except counted float32 rounding midpoints; the single-read
#      kernel (gumbel_argmax_logits, keyed.draw's path without top-k / top-p / trace) giving the torch
#      formula's tokens (tests/test_noise_kernel.py, tests/test_keyed_draw.py);
#   2. the transformers backend on CUDA against CPU on a tiny model: identical tokens
#      (tests/test_cuda_backend.py);
#   3. the generation benchmark at the Llama-3.2-1B shape (random bf16 weights), hf (reference noise)
#      and hf-triton (the fused kernel: the default on CUDA), with the roofline fraction; vllm and
#      vllm-plain where vLLM is installed (else "skipped");
#   4. the served path (engine serve, docs/SERVE.md): the server on CUDA gives the CPU server's tokens for
#      the same requests (tests/test_serve_cuda.py); where vLLM is installed, `--backend vllm` gives the
#      transformers backend's tokens and couples two models (tests/vllm/test_vllm_serve.py). The server
#      needs starlette and uvicorn: where the image lacks them, carry their wheels in .whl/ with duckdb
#      (pip download --no-deps -d .whl starlette==1.10.0 uvicorn==0.54.0 h11 anyio sniffio).
#
# Usage (repo root, on the GPU machine):  OUT=/some/dir HBM_GBPS=3350 bash scripts/gpu_check.sh
#   (HBM_GBPS: the roofline's memory bandwidth: H100 SXM 3350, H200 4800)
# Writes $OUT/gpu_check.log, $OUT/gen_1b.json, $OUT/gen_1b.md; exit status != 0 when a test failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
HBM=${HBM_GBPS:-3350}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
PY=${PYTHON:-python3}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then  # carried wheels (duckdb: engine.generation imports the store)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/gpu_check.log"
status=0
timeout 240 "$PY" -m pytest -q -p no:cacheprovider -p no:xdist tests/test_noise_kernel.py tests/test_keyed_draw.py \
  tests/test_cuda_backend.py tests/test_serve_cuda.py 2>&1 | tee -a "$OUT/gpu_check.log" || status=1
if "$PY" -c "import vllm" >/dev/null 2>&1; then
  timeout 300 "$PY" -m pytest -q -p no:cacheprovider -p no:xdist tests/vllm/test_vllm_serve.py 2>&1 \
    | tee -a "$OUT/gpu_check.log" || status=1
else
  echo "served path on vLLM: skipped (vLLM is not installed)" | tee -a "$OUT/gpu_check.log"
fi
timeout 300 "$PY" bench/bench_gpu_generation.py --device cuda --hbm-gbps "$HBM" --models llama-3.2-1b \
  --backends hf,hf-triton,vllm,vllm-plain --json "$OUT/gen_1b.json" --md "$OUT/gen_1b.md" 2>&1 \
  | tee -a "$OUT/gpu_check.log" || status=1
exit $status
