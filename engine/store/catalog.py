"""Transitional alias: the browsing reads live in :mod:`engine.store.generations` (and ``some_runs``
in :mod:`engine.store.runs`). Remove once engine/analysis/overview.py imports those modules."""

from engine.store.generations import (  # noqa: F401
    datasets_with_counts,
    generation_rows,
    models_with_counts,
    prompt_row,
    run_contents,
    run_prompts,
    runs_with_counts,
    unit_rows,
)
from engine.store.runs import some_runs  # noqa: F401
