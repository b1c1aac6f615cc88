"""Overview of what is stored: table counts, runs, models, datasets, and one run's prompts and units.

Every function opens the database read-only for one short batch (``store.reader``) and returns
plain values (DataFrames, lists) or frozen records (:class:`Overview`); nothing keeps a connection.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from engine import store
from engine.analysis.result_base import ToDict
from engine.errors import UserError
from engine.store import generations
from engine.store import runs as stored_runs


def db_signature(db: str | os.PathLike) -> tuple[str, float]:
    """(path, modification time of the file and its WAL): a small cache key that changes on writes."""
    p = Path(db)
    mt = 0.0
    for f in (p, p.with_name(p.name + ".wal")):
        try:
            mt = max(mt, f.stat().st_mtime)
        except OSError:
            pass
    return str(p.resolve()), mt


def db_exists(db: str | os.PathLike) -> bool:
    return Path(db).exists()


@dataclass(frozen=True)
class Overview(ToDict):
    """Row count of every table (:func:`overview`), one field per table in ``store.TABLES`` order
    (a test checks the two agree); all zeros by default (no database yet)."""

    meta: int = 0
    runs: int = 0
    models: int = 0
    datasets: int = 0
    prompts: int = 0
    generations: int = 0
    token_traces: int = 0
    scores: int = 0
    judgments: int = 0
    comparison_sets: int = 0
    comparisons: int = 0
    clusters: int = 0
    served: int = 0  # v5: the requests of served runs (engine serve)


def overview(db: str | os.PathLike) -> Overview:
    """Row count of every table; all zeros when the database does not exist yet."""
    if not db_exists(db):
        return Overview()
    return Overview(**store.table_counts(db))


def resume_command(run_id: str, conf: dict, db: str | os.PathLike) -> str:
    """The command that continues a run: the one that started it (stored by the CLI), else one
    rebuilt from its stored settings (the same settings + ``--run-id`` resume it)."""
    if conf.get("command"):
        return shlex.join(conf["command"])
    if not conf.get("models"):
        return ""
    args = [
        "python",
        "-m",
        "engine",
        "generate",
        "--models",
        *conf["models"],
        "--dataset",
        str(conf.get("dataset_id")),
        "--repeats",
        str(conf.get("repeats")),
        "--modes",
        *(conf.get("modes") or []),
        "--seed",
        str(conf.get("seed")),
        "--temperature",
        str(conf.get("temperature")),
        "--top-k",
        str(conf.get("top_k")),
        "--top-p",
        str(conf.get("top_p")),
        "--max-new-tokens",
        str(conf.get("max_new_tokens")),
        "--traces",
        "on" if conf.get("record_traces") else "off",
        "--trace-top-k",
        str(conf.get("trace_top_k")),
        "--run-id",
        run_id,
        "--db",
        str(db),
    ]
    return shlex.join(args)


def mark_stale(runs_df: pd.DataFrame, db: str | os.PathLike) -> pd.DataFrame:
    """Runs stored as 'running' whose driver is gone (killed, crashed: no live process holds the
    run's lock, engine.store.runlock) shown as 'failed' with ``stale`` True. Not cacheable: a dead
    driver changes no file, so this is checked on every call (a few small file reads)."""
    from engine.store.runlock import is_stale

    df = runs_df.copy()
    df["stale"] = [s == "running" and is_stale(db, r) for r, s in zip(df["run_id"], df["status"])]
    df.loc[df["stale"], "status"] = "failed"
    return df


def _listed(values) -> list | None:
    """A list from DuckDB's list column, or None for NULL / NA / an empty list."""
    if values is None or isinstance(values, str) or not hasattr(values, "__len__"):
        return None
    return list(values) or None


def runs(db: str | os.PathLike) -> pd.DataFrame:
    """Every run, newest first: run_id, created_at, dataset_id, status (as stored), n_units,
    n_generations, models, modes, repeats, temperature, max_new_tokens, seed, warnings, and the
    command that resumes it (empty for a finished run). Dead drivers: :func:`mark_stale`."""
    cols = [
        "run_id",
        "created_at",
        "dataset_id",
        "status",
        "n_units",
        "n_generations",
        "models",
        "modes",
        "repeats",
        "temperature",
        "max_new_tokens",
        "seed",
        "key_mode",
        "warnings",
        "resume_command",
    ]
    if not db_exists(db):
        return pd.DataFrame(columns=cols)
    df = generations.runs_with_counts(db)
    conf = [json.loads(c) if isinstance(c, str) and c else {} for c in df.pop("config")]
    for key, col in (
        ("repeats", "repeats"),
        ("temperature", "temperature"),
        ("max_new_tokens", "max_new_tokens"),
        ("seed", "seed"),
    ):
        df[col] = [c.get(key) if isinstance(c, dict) else None for c in conf]
    # a run with no generation yet (its driver died before the first chunk) has NA lists: the config's
    # then
    df["models"] = [
        _listed(m) or (c.get("models") if isinstance(c, dict) else None)
        for m, c in zip(df["models"], conf)
    ]
    df["modes"] = [
        _listed(m) or (c.get("modes") if isinstance(c, dict) else None)
        for m, c in zip(df["modes"], conf)
    ]
    df["resume_command"] = [
        resume_command(r, c, db) if s != "done" else ""
        for r, c, s in zip(df["run_id"], conf, df["status"])
    ]
    return df[cols]


def models_table(db: str | os.PathLike) -> pd.DataFrame:
    """Stored models (name, variant, vocab_id, vocab_size, source) with their generation counts."""
    if not db_exists(db):
        return pd.DataFrame(
            columns=["name", "variant", "vocab_id", "vocab_size", "source", "n_generations"]
        )
    return generations.models_with_counts(db)


def datasets_table(db: str | os.PathLike) -> pd.DataFrame:
    """Stored datasets (dataset_id, kind, n_prompts, source, subjects)."""
    if not db_exists(db):
        return pd.DataFrame(columns=["dataset_id", "kind", "n_prompts", "n_subjects", "source"])
    return generations.datasets_with_counts(db)


@dataclass(frozen=True)
class RunOptions:
    """What a run holds (sorted): its models, modes and repeats, and the number of prompts."""

    models: list[str]
    modes: list[str]
    repeats: list[int]
    n_prompts: int

    def to_dict(self) -> dict:
        return asdict(self)


def run_options(db: str | os.PathLike, run_id: str) -> RunOptions:
    """What a run holds: models, modes, repeats (sorted list) and the number of prompts."""
    contents = generations.run_contents(db, run_id)
    if contents is None:
        raise UserError(f"unknown run {run_id!r}; stored runs: {stored_runs.some_runs(db)}")
    return RunOptions(*contents)


def run_prompts(
    db: str | os.PathLike, run_id: str, search: str | None = None, limit: int = 500, offset: int = 0
) -> pd.DataFrame:
    """Prompts with generations in ``run_id`` (dataset order): prompt_id, idx, subject, question, gold.

    ``search`` filters by a case-insensitive substring of the prompt id or question (a parameter,
    never SQL); ``limit``/``offset`` paginate.
    """
    limit, offset = int(limit), int(offset)
    if limit < 1 or offset < 0:
        raise UserError(f"limit must be >= 1 and offset >= 0, got {limit}, {offset}")
    return generations.run_prompts(db, run_id, search, limit, offset)


@dataclass(frozen=True)
class PromptInfo:
    """One prompt of a run's dataset; ``choices`` {letter: text} for multiple choice, else None."""

    prompt_id: str
    subject: str | None
    question: str | None
    choices: dict[str, str] | None
    gold: str | None
    user_prompt: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def prompt_info(db: str | os.PathLike, run_id: str, prompt_id: str) -> PromptInfo | None:
    """The prompt row of a run's dataset (question, choices, gold, user_prompt, subject); None if
    unknown."""
    df = generations.prompt_row(db, run_id, prompt_id)
    if df.empty:
        return None
    row = df.iloc[0].to_dict()
    choices = json.loads(row["choices"]) if isinstance(row["choices"], str) and row["choices"] else None
    return PromptInfo(
        prompt_id=str(row["prompt_id"]),
        subject=row.get("subject"),
        question=row.get("question"),
        choices=choices,
        gold=row.get("gold"),
        user_prompt=row.get("user_prompt"),
    )


def unit_generations(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int) -> pd.DataFrame:
    """Every generation of one unit (all models, both modes): model, mode, text, n_tokens,
    finish_reason, seed, extracted, score (the 'paper' rule if scored, else any rule)."""
    return generations.unit_rows(db, run_id, prompt_id, repeat)


def generations_page(
    db: str | os.PathLike, run_id: str, limit: int = 200, offset: int = 0
) -> pd.DataFrame:
    """One page of a run's generations (for browsing and CSV export)."""
    return generations.generation_rows(db, run_id, limit, offset)
