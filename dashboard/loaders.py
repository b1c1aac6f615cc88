"""One typed, cached loader per view. Each wraps the engine function it shows, imported directly
(so "find usages" and the import graph see every call), as a function of the view's parameters.

The cache key is (database path, modification time of the file and its WAL, parameters): a write
by a job invalidates it. Loaders raise UserError (missing data, bad choice); pages show it with
:func:`dashboard.widgets.safe`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import duckdb
import pandas as pd
import streamlit as st

from engine import config
from engine.analysis import accuracy_ranks as _accuracy_ranks
from engine.analysis import benchmark as _benchmark
from engine.analysis import comparisons as _comparisons
from engine.analysis import multigen as _multigen
from engine.analysis import overview as _overview
from engine.analysis import race as _race
from engine.analysis import ranksets as _ranksets
from engine.analysis import sequential as _sequential
from engine.analysis import summary as _summary
from engine.analysis import traces as _traces
from engine.analysis import winrates as _winrates
from engine.errors import UserError
from engine.report import build as _report
from engine.tasks import labels as _labels

P = ParamSpec("P")
R = TypeVar("R")


def db_path() -> Path:
    """The database the dashboard reads: $COUPLED_EVAL_DB or engine.config.DEFAULT_DB."""
    return Path(os.environ.get("COUPLED_EVAL_DB", str(config.DEFAULT_DB)))


def _view(fn: Callable[Concatenate[Any, P], R]) -> Callable[P, R]:
    """``fn(db, *args)`` -> a loader ``(*args) -> R`` cached on the database signature and the args."""

    def load(sig: tuple[str, float], *args: Any, **kwargs: Any) -> R:
        return fn(sig[0], *args, **kwargs)

    # st.cache_data keys a function on its module, qualified name and source: one name per view
    load.__qualname__ = load.__name__ = f"load_{fn.__module__.rsplit('.', 1)[-1]}_{fn.__name__}"
    cached = st.cache_data(show_spinner=False, max_entries=512, ttl=3600)(load)

    @functools.wraps(fn)
    def view(*args: P.args, **kwargs: P.kwargs) -> R:
        return cached(_overview.db_signature(db_path()), *args, **kwargs)

    return view


# Home and Generate
overview = _view(_overview.overview)
_stored_runs = _view(_overview.runs)


def runs() -> pd.DataFrame:
    """Every run (cached on the database) with dead drivers marked as failed now (not cached)."""
    return _overview.mark_stale(_stored_runs(), db_path())


models_table = _view(_overview.models_table)
datasets_table = _view(_overview.datasets_table)
comparison_sets = _view(_comparisons.comparison_sets)
run_summary = _view(_summary.run_summary)
latest_scored_run = _view(_summary.latest_scored_run)
scored_runs = _view(_summary.scored_runs)


def overview_live() -> _overview.Overview:
    """Table counts for the live Home counters; while the writer holds the file (a chunk being
    committed) the last counts are kept instead of showing zeros."""
    try:
        counts = overview()
    except (
        duckdb.Error,
        OSError,
        UserError,
    ):  # a busy database (writer lock) must not blank the counters
        return st.session_state.get("_last_counts", _overview.Overview())
    st.session_state["_last_counts"] = counts
    return counts


def scored_runs_live() -> list[str]:
    """Scored runs, newest first, for the live Home fragment (the last list while the writer is busy)."""
    try:
        runs_ = scored_runs()
    except (duckdb.Error, OSError, UserError):
        return st.session_state.get("_last_scored_runs", [])
    st.session_state["_last_scored_runs"] = runs_
    return runs_


def summary_problem(run: str) -> str | None:
    """Why Home cannot show ``run``'s headline findings (the analysis' one-line error, e.g. scores
    without gold answers), or None when it can (or the database is busy: the next poll tells)."""
    try:
        run_summary(run)
    except UserError as exc:
        return str(exc)
    except (duckdb.Error, OSError):
        return None
    return None


def summary_of(run: str | None = None) -> _summary.RunSummary | None:
    """The headline findings of ``run`` (default: the newest scored run); None when nothing is
    scored yet, or while the database is busy or the run is being rescored (the next poll shows it)."""
    try:
        run = run or latest_scored_run()
        return run_summary(run) if run else None
    except (duckdb.Error, OSError, UserError):
        return None


# Token traces
run_options = _view(_overview.run_options)
run_prompts = _view(_overview.run_prompts)
prompt_info = _view(_overview.prompt_info)
unit_generations = _view(_overview.unit_generations)
trace_view = _view(_traces.trace_view)
divergence_summary = _view(_traces.divergence_summary)
# Benchmark comparison and data map
benchmark_choices = _view(_benchmark.benchmark_choices)
benchmark = _view(_benchmark.benchmark)
multigen = _view(_multigen.multigen)
cluster_methods = _view(_multigen.cluster_methods)
default_rule = _view(_multigen.default_rule)
prompts_generations = _view(_multigen.prompts_generations)
# Win-rates and rank-sets
winrate_sources = _view(_comparisons.winrate_sources)
comparison_sources = _view(
    _comparisons.comparison_sources
)  # Arena built-in + sets + verdicts, each once
comparison_models = _view(_comparisons.comparison_models)
winrates = _view(_winrates.winrates_view)
ranksets = _view(_ranksets.ranksets_view)
rankset_draws = _view(_ranksets.rankset_draws_view)
accuracy_ranksets = _view(_accuracy_ranks.accuracy_ranksets)
paired_accuracy = _view(_accuracy_ranks.paired_accuracy)
# Sequential (anytime-valid) evaluation: replay over orders, one order's path
sequential_replay = _view(_sequential.sequential_replay)
sequential_paths = _view(_sequential.sequential_paths)
live_paths = _view(_sequential.live_paths)
live_stop = _view(_sequential.live_stop)
sequential_runs = _view(_sequential.sequential_runs)
# Racing many models (Generate: the live race; Benchmark: a stored run replayed as a race)
race_runs = _view(_race.race_runs)
race_state = _view(_race.race_state)
race_replay = _view(_race.race_replay)
# The shareable report (Home and Benchmark: "Download report")
report_html = _view(_report.run_report_html)


def arena_available() -> bool:
    return _comparisons.arena_dir() is not None


@dataclass(frozen=True)
class AvailableModel:
    """A registered model the Generate page offers: its name and variant."""

    name: str
    variant: str


@st.cache_data(show_spinner=False, ttl=600)
def available_models() -> list[AvailableModel]:
    """The model registry (name, variant); [] when the model package is missing. Reads the registry
    only: no torch and no tokenizer is loaded on the page (a vocabulary check belongs to the run)."""
    from engine.models.registry import list_models

    return [AvailableModel(name=s.name, variant=s.variant) for s in list_models()]


@st.cache_data(show_spinner=False, ttl=600)
def backends() -> dict[str, str]:
    """Generation backend -> "" when usable in this environment, else why not (with the install hint)."""
    from engine import config
    from engine.generation.backends import backend_available

    return {b: why for b in config.BACKENDS for ok, why in [backend_available(b)]}


@st.cache_data(show_spinner=False, ttl=600)
def available_datasets() -> list[str]:
    from engine.tasks.datasets import list_datasets

    return list(list_datasets())


# Judge audit and a run's PPR rank-sets (refreshed as labels arrive: the label count is in the cache key)
from engine.analysis import judge_audit as _judge_audit  # noqa: E402
from engine.analysis import run_ranksets as _run_ranksets  # noqa: E402
from engine.analysis import run_units as _run_units  # noqa: E402
from engine.analysis import set_audit as _set_audit  # noqa: E402

audit_sources = _view(_run_units.audit_sources)
judge_audit = _view(_judge_audit.judge_audit)
set_audit_sources = _view(_set_audit.set_audit_sources)
set_judge_audit = _view(_set_audit.set_judge_audit)

# Per-subject / per-task results with simultaneous intervals (the Benchmark page's section)
from engine.analysis import slices as _slices  # noqa: E402

slice_comparison = _view(_slices.slice_comparison)
# The release gate (the Benchmark page's "Release gate" tab; `engine gate` from the CLI)
from engine.analysis import gate as _gate  # noqa: E402

release_gate = _view(_gate.gate)
# Per-category win-rates of a stored set (the Win-rates page's "By category" tab)
from engine.analysis import winrate_slices as _winrate_slices  # noqa: E402

set_categories = _view(_winrate_slices.set_categories)
winrate_slices = _view(_winrate_slices.winrate_slices)
_run_ranksets_view = _view(_run_ranksets.run_ranksets)


def run_label_count(run: str) -> int:
    """Uncached on purpose: a few-millisecond count whose change re-keys the run's cached views."""
    return _run_units.label_count(db_path(), run)


def run_ranksets(run: str, judge: str, **kwargs: Any) -> _run_ranksets.RunRankSets:
    """:func:`engine.analysis.run_ranksets.run_ranksets`, cached on the database and the run's label
    count."""
    return _run_ranksets_view(run, judge, label_count=run_label_count(run), **kwargs)


# Label (the sample's state lives in its label log and is read live by dashboard.label_view, not cached)
label_choices = _view(_labels.label_choices)
label_set_choices = _view(_labels.label_set_choices)
label_block = _view(_labels.block_view)


def label_sample(sample_id: str) -> dict[str, Any]:
    """The recorded label sample ``sample_id`` (read live; its file is written once and cached on its
    mtime by the store)."""
    return _labels.get_sample(db_path(), sample_id)


def label_unit(sample_id: str, idx: int) -> _labels.LabelUnit:
    """Unit ``idx`` of a label sample, from its cached block of ``engine.tasks.labels.BLOCK`` units."""
    return label_block(sample_id, idx // _labels.BLOCK)[idx]


def prefetch_label_block(sample_id: str, idx: int, n: int) -> None:
    """Near the end of a block, read the next one (the page calls this after drawing the unit)."""
    nxt = idx // _labels.BLOCK + 1
    if idx % _labels.BLOCK >= _labels.BLOCK - 10 and nxt * _labels.BLOCK < n:
        label_block(sample_id, nxt)
