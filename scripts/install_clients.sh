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

source scripts/venv_lib.sh  # venv_install (uv where it can be had, else pip), venv_reuse_torch
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
venv_reuse_torch "$VENV" 2.13.0+cpu  # REUSE_TORCH_FROM=.venv (scripts/test.sh)
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
