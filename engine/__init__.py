"""Coupled Eval engine: coupled token generation, scoring, statistics and the DuckDB store.

This package never imports Streamlit. Everything the dashboard shows can be computed from the
CLI: ``python -m engine --help``.
"""

__version__ = "0.1.0"
