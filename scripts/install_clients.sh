#!/usr/bin/env bash
# Create a separate virtual environment with the evaluation harnesses that talk to `engine serve`
# (the real clients of tests/clients/): lm-evaluation-harness and Inspect AI.
#
# Why separate: they are test tools, not runtime dependencies; lm-eval pulls ~90 packages (boto3,
# nltk, sacrebleu, scikit-learn, ...) that the product never imports, and inspect-ai installed in
# .venv would change what `engine import harness` does there (it reads Inspect logs with
# inspect_ai.log when present, with the standard library otherwise: the main suite tests the
# default). The clients run as subprocesses of the tests in .venv, as a user runs them.
# The shared packages keep the main venv's pins (requirements.txt as constraints): the same torch
# and transformers, so lm-eval's own `hf` model computes the same log-likelihoods as the server.
#
# Usage: scripts/install_clients.sh [--dry-run]
#   CLIENTS_VENV=/path/to/venv scripts/install_clients.sh   (default .venv-clients at the project root)
#   REUSE_TORCH_FROM=.venv    hard-link torch from that venv when it is the same build (scripts/test.sh)
# Packages are not byte-compiled at install (scripts/venv_lib.sh): of the ~140 packages only the
# modules the clients import are ever run, and Python compiles those at their first import
# (installing with compilation took 2.5x the CPU: docs/BENCHMARKS.md, "Real-client tests").
# Then (from the project root): .venv/bin/python -m pytest tests/clients -q -p no:xdist
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${CLIENTS_VENV:-.venv-clients}

# lm-eval: [api] for local-completions / local-chat-completions, [hf] for its own `hf` model (the
# reference of the multiple-choice test); inspect-ai's openai-api provider needs the openai client.
PKGS=("lm-eval[api,hf]==0.4.13" inspect-ai==0.3.285 openai==3.54.0 torch==2.13.0+cpu transformers==5.23.0)

if [ "${1:-}" = --dry-run ]; then
  echo "# venv: $VENV; constraints: requirements.txt"
  printf '%s\n' "${PKGS[@]}"
  exit 0
elif [ -n "${1:-}" ]; then
  echo "install_clients.sh: unknown option $1; allowed: --dry-run" >&2
  exit 2
fi

source scripts/venv_lib.sh  # venv_install: uv where it can be had, else pip
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# REUSE_TORCH_FROM=.venv: when that venv holds the same torch build, hard-link its files here instead
# of unpacking the wheel again (~750 MB); the installer then sees torch installed. A later change in either
# venv writes new files, never the shared ones (as scripts/install_vllm.sh does).
if [ -n "${REUSE_TORCH_FROM:-}" ] && [ -x "$REUSE_TORCH_FROM/bin/python" ]; then
  HAVE=$("$REUSE_TORCH_FROM/bin/python" -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null || true)
  SRC=$("$REUSE_TORCH_FROM/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  DST=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  if [ "$HAVE" = 2.13.0+cpu ] && [ ! -e "$DST/torch" ]; then
    for d in torch functorch torchgen "torch-$HAVE.dist-info"; do
      [ -e "$SRC/$d" ] && cp -al "$SRC/$d" "$DST/$d"
    done
    echo "torch $HAVE hard-linked from $REUSE_TORCH_FROM"
  fi
fi
# torch's CPU wheel first (an unpinned torch pulls gigabytes of CUDA packages), then the rest with
# requirements.txt as constraints so that no resolution swaps torch or the main venv's pins.
venv_install "$VENV" -q torch==2.13.0+cpu
venv_install "$VENV" -q -c requirements.txt -c <(echo torch==2.13.0+cpu) "${PKGS[@]}"
"$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as md
import torch
assert torch.__version__.split("+")[0] == "2.13.0", f"torch {torch.__version__} is not 2.13.0"
print(", ".join(f"{p} {md.version(p)}" for p in ("lm_eval", "inspect_ai", "openai", "transformers", "torch")))
PYEOF
