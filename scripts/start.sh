#!/usr/bin/env bash
# Install into .venv and start the dashboard on the packaged default
# (SmolLM2-135M-Instruct family, the built-in demo dataset, data/coupled_eval.duckdb).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python -m streamlit run app.py "$@"
