"""Analysis layer of pairwise comparisons: stored data -> engine.stats -> a frozen result.

Pairwise comparisons as one normalised DataFrame (prompt_id, model_a, model_b, human_winner,
judge_winner; winners 'a' | 'b' | 'tie' or None; then the optional repeat, mode, labeller, labelled_at,
presented, None where unknown) from any source: a CSV file, Chatbot Arena JSON
lines, a stored comparison set, or a run's LLM-judge verdicts. Shared by win-rates and rank-sets.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from engine import store
from engine.analysis.overview import db_exists
from engine.analysis.result_base import ToDict
from engine.errors import Unavailable, UserError
from engine.filehash import sha256_file
from engine.stats import ranking as R
from engine.stats.comparisons import A_WINS, B_WINS, Comparisons, outcome_codes
from engine.store import comparisons as SC
from engine.store import verdicts as VS
from engine.store.arena import read_arena
from engine.store.comparison_files import OPTIONAL_COLUMNS, read_comparisons_file

CSV_COLUMNS = ("model_a", "model_b", "human_winner", "judge_winner")
# The 12 Chatbot Arena models of the PPR paper (Chatzi et al., 2024): 14,947 comparisons.
ARENA_PAPER_MODELS = (
    "gpt-4",
    "claude-v1",
    "claude-instant-v1",
    "gpt-3.5-turbo",
    "vicuna-13b",
    "palm-2",
    "koala-13b",
    "RWKV-4-Raven-14B",
    "oasst-pythia-12b",
    "alpaca-13b",
    "chatglm-6b",
    "fastchat-t5-3b",
)
ARENA_JUDGES = ("gpt-4-0125-preview", "claude-3-opus-20240229", "gpt-3.5-turbo")


def default_models(available: list[str], limit: int = 12) -> list[str]:
    """The models a ranking starts with: the paper's 12 when all of them are available (Arena),
    else the first ``limit`` of ``available``."""
    if set(ARENA_PAPER_MODELS) <= set(available):
        return list(ARENA_PAPER_MODELS)
    return list(available[:limit])


def load_comparisons(
    comparisons: str | Path | None = None,
    *,
    human: str | Path | None = None,
    judge: str | Path | None = None,
    db: str | Path | None = None,
    set_name: str | None = None,
    models: list[str] | None = None,
) -> pd.DataFrame:
    """Comparisons from exactly one source: a CSV file, Arena JSON lines (human and/or judge), or a
    stored set.

    ``models`` keeps only the comparisons between the listed models (UserError if one never
    appears).
    """
    given = [comparisons is not None, human is not None or judge is not None, set_name is not None]
    if sum(given) != 1:
        raise UserError(
            "give exactly one source: --comparisons FILE, --human/--judge FILE (Arena JSON lines), "
            "or --set NAME"
        )
    if comparisons is not None:
        df = read_comparisons_file(comparisons)
    elif set_name is not None:
        df = SC.read_set(db if db is not None else store.DEFAULT_DB, set_name)
    else:
        df = read_arena(human, judge)
    return restrict_models(df, models)


def model_list(df: pd.DataFrame, models: list[str] | None) -> list[str]:
    return list(models) if models else sorted(set(df.model_a) | set(df.model_b))


def restrict_models(df: pd.DataFrame, models: list[str] | None) -> pd.DataFrame:
    """Only the comparisons between ``models`` (all rows when None); UserError if a model is absent or
    duplicated."""
    if not models:
        return df
    if len(set(models)) != len(models):
        raise UserError(f"--models lists a model twice: {models}")
    present = set(df.model_a) | set(df.model_b)
    absent = [m for m in models if m not in present]
    if absent:
        raise UserError(
            f"model(s) {absent} appear in no comparison; present: {', '.join(sorted(present))}"
        )
    keep = set(models)
    out = df[df.model_a.isin(keep) & df.model_b.isin(keep)].reset_index(drop=True)
    if out.empty:
        raise UserError(f"no comparison involves only the models {sorted(keep)}")
    return out


def model_indices(df: pd.DataFrame, models: list[str]) -> tuple[np.ndarray, np.ndarray]:
    pos = {m: i for i, m in enumerate(models)}
    return (df.model_a.map(pos).to_numpy(dtype=np.int64), df.model_b.map(pos).to_numpy(dtype=np.int64))


def to_comparisons(df: pd.DataFrame, models: list[str] | None = None) -> Comparisons:
    """The normalised table (prompt_id, model_a, model_b, human_winner, judge_winner, and the optional
    repeat, mode, labeller, labelled_at, presented: carried as ``extra`` where some row has one) as the
    one comparison type of engine.stats (models: ``models`` or every model of ``df``, sorted)."""
    extra = {c: df[c].tolist() for c in OPTIONAL_COLUMNS if c in df and df[c].notna().any()}
    return Comparisons.from_labels(
        model_list(df, models),
        df.model_a.tolist(),
        df.model_b.tolist(),
        df.human_winner.tolist(),
        df.judge_winner.tolist(),
        df.prompt_id.tolist() if "prompt_id" in df else None,
        extra,
    )


def win_indicators(winners: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """'a' -> (w, w') = (1, 0); 'b' -> (0, 1); 'tie' or none -> (0, 0) (engine.stats.comparisons'
    codes)."""
    c = outcome_codes(winners.tolist())
    return (c == A_WINS).astype(float), (c == B_WINS).astype(float)


def require_models(models: list[str], first, second, what: str) -> None:
    c = R.comparison_counts(first, second, len(models))
    if np.any(c == 0):
        missing = [models[i] for i in np.flatnonzero(c == 0)]
        raise UserError(
            f"model(s) {missing} never appear in the {what}; every model needs at least one "
            f"comparison there (restrict with --models)"
        )


def cluster_ids(df: pd.DataFrame) -> np.ndarray | None:
    """The prompt ids of the rows as the cluster ids of docs/METHODS.md 7.2, or None when no row has one
    (then every row is its own cluster). Rows without an id are each their own cluster."""
    if "prompt_id" not in df or df["prompt_id"].isna().all():
        return None
    return df["prompt_id"].to_numpy(dtype=object)


def clustering_note(n_clusters: int, per_row: bool, n_rows: int) -> str:
    """The one line every clustered result carries."""
    if per_row:
        return f"no prompt ids: each row is its own cluster ({n_rows:,} rows)"
    return f"intervals clustered by prompt ({n_clusters:,} prompts, {n_rows:,} rows)"


def comparison_groups(first: np.ndarray, second: np.ndarray, models: list[str]) -> list[list[str]]:
    """Connected components of the comparison graph (models = nodes, an edge where two models were
    compared).

    Returns:
        the groups of model names, largest first; one group when the graph is connected.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    k = len(models)
    g = coo_matrix((np.ones(len(first)), (np.asarray(first), np.asarray(second))), shape=(k, k))
    n, lab = connected_components(g, directed=False)
    groups = [[models[i] for i in np.flatnonzero(lab == c)] for c in range(n)]
    return sorted(groups, key=lambda x: (-len(x), x))


def connectivity_warning(groups: list[list[str]]) -> str | None:
    """A warning naming the groups when the comparison graph is not connected, else None."""
    if len(groups) < 2:
        return None
    shown = "; ".join("{" + ", ".join(g) + "}" for g in groups)
    return (
        f"the comparisons form {len(groups)} groups never compared with each other: {shown}. Strengths, "
        "win-rates against the field and ranks ACROSS groups are not identified (only within a group); "
        "compare models across the groups or restrict --models to one group"
    )


def json_float(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


def comparison_sets(db: str | os.PathLike) -> pd.DataFrame:
    """Stored comparison sets (engine.store.comparisons.list_sets), empty when no database."""
    cols = ["name", "source", "created_at", "n_rows", "n_human", "n_judge", "n_models"]
    if not db_exists(db):
        return pd.DataFrame(columns=cols)
    return SC.list_sets(db)


def judgment_sources(db: str | os.PathLike) -> pd.DataFrame:
    """LLM-judge verdict groups: (run_id, judge, mode, n, n_models, n_unparsed)."""
    if not db_exists(db):
        return pd.DataFrame(columns=["run_id", "judge", "mode", "n", "n_models", "n_unparsed"])
    return VS.judgment_groups(db)


def comparisons_for(
    db: str | os.PathLike, source: str, name: str, mode: str | None = None, judge: str | None = None
) -> pd.DataFrame:
    """Normalised pairwise rows (prompt_id, model_a, model_b, human_winner, judge_winner).

    source 'set': stored comparison set ``name``; source 'judgments': LLM-judge verdicts of run
    ``name`` (optionally one ``judge`` and ``mode``) as judge_winner (both presentation orders
    count as separate comparisons).
    """
    if source == "set":
        return SC.set_rows(db, name)
    if source == "judgments":
        return VS.judgment_rows(db, name, mode, judge)
    raise UserError(f"unknown comparison source {source!r}; allowed: 'set', 'judgments'")


@dataclass(frozen=True)
class WinrateSources:
    """Stored comparison set names, and the LLM-judge verdict groups (records of run_id, judge, mode,
    n, n_models, n_unparsed)."""

    sets: list[str]
    judgments: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"sets": list(self.sets), "judgments": list(self.judgments)}


def winrate_sources(db: str | os.PathLike) -> WinrateSources:
    """Sources of pairwise comparisons: stored sets and LLM-judge verdict groups."""
    sets = comparison_sets(db)
    judg = judgment_sources(db)
    return WinrateSources(
        sets=sets["name"].tolist() if not sets.empty else [],
        judgments=judg.to_dict("records") if not judg.empty else [],
    )


def arena_dir() -> Path | None:
    """../shared/data/arena when present (COUPLED_EVAL_SHARED overrides ../shared)."""
    shared = Path(os.environ.get("COUPLED_EVAL_SHARED", store.PROJECT_ROOT.parent / "shared"))
    p = shared / "data" / "arena"
    return p if (p / "human.json").exists() else None


def ranking_comparisons(
    db: str | os.PathLike, source: str, name: str, judge: str | None = None, mode: str | None = None
) -> pd.DataFrame:
    """Comparisons for the rank-set page: source 'set' (stored set ``name``), 'arena' (human.json
    with judge file ``name`` from ../shared/data/arena) or 'judgments' (the verdicts of run ``name``:
    :func:`run_verdict_comparisons`, ``judge`` and ``mode``)."""
    if source == "set":
        return SC.read_set(db, name)
    if source == "judgments":
        return run_verdict_comparisons(db, name, judge, mode)
    if source == "arena":
        d = arena_dir()
        if d is None:
            raise Unavailable(
                "the Chatbot Arena files (../shared/data/arena) are not present on this machine"
            )
        if name not in ARENA_JUDGES:
            raise UserError(f"unknown Arena judge {name!r}; allowed: {', '.join(ARENA_JUDGES)}")
        h, j = d / "human.json", d / f"{name}.json"
        return _read_arena_cached(str(h), h.stat().st_mtime, str(j), j.stat().st_mtime).copy()
    raise UserError(f"unknown comparison source {source!r}; allowed: 'set', 'arena', 'judgments'")


def run_verdict_comparisons(
    db: str | os.PathLike, run: str, judge: str | None, mode: str | None
) -> pd.DataFrame:
    """A run's LLM-judge verdicts as rank-set comparisons (judge labels only, for judge-only rank-sets):
    one row per verdict (both presentation orders are rows), prompt ids kept, so the intervals are
    clustered by prompt; unparseable verdicts have no label. ``mode`` None: coupled when the run has
    it (the two modes judge the same pairs twice and are not pooled). UserError when there is none."""
    if mode is None:
        groups = judgment_sources(db)
        modes = set(groups.loc[groups["run_id"] == run, "mode"])
        mode = next((m for m in store.MODES if m in modes), None)
    df = VS.judgment_rows(db, run, mode, judge) if mode is not None else pd.DataFrame()
    if df.empty:
        raise UserError(
            f"no judge verdicts on run {run!r}"
            + (f" by {judge!r}" if judge else "")
            + (f" in mode {mode!r}" if mode else "")
            + "; judge the run first "
            "(python -m engine judge --run RUN --judge MODEL)"
        )
    return df


@functools.lru_cache(maxsize=4)
def _read_arena_cached(human: str, human_mtime: float, judge: str, judge_mtime: float) -> pd.DataFrame:
    """The built-in Arena files, validated once per process (keyed on path and modification time)."""
    return read_arena(human, judge)


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, mtime: float, size: int) -> str:
    """sha256_file, once per (path, modification time, size) in a process."""
    return sha256_file(path)


def _content_key(paths: list[Path]) -> tuple[str, ...]:
    return tuple(_file_sha256(str(p), p.stat().st_mtime, p.stat().st_size) for p in paths)


@dataclass(frozen=True)
class ComparisonSource(ToDict):
    """One source of pairwise comparisons (:func:`comparison_sources`): ``source`` 'arena' | 'set' |
    'judgments'; ``name`` the judge file stem, set name or run id; ``judge`` (judgments only); ``label``
    for a selector; ``also_stored_as`` the stored sets with the same content, listed under this one."""

    source: str
    name: str
    judge: str | None
    label: str
    also_stored_as: list[str]


def comparison_sources(db: str | os.PathLike) -> list[ComparisonSource]:
    """Every source of pairwise comparisons, each once: the built-in Chatbot Arena files (human +
    one judge, when ../shared is present), stored comparison sets, and LLM-judge verdicts of runs.

    A stored set imported from the same files as a built-in Arena source (same SHA-256 of the human
    and judge files, in the set's metadata), or with the same content as an earlier set, is not
    listed again: the kept entry names its copies (``also_stored_as``).

    Order: runs' verdicts, stored sets, built-in Arena files.

    Returns:
        :class:`ComparisonSource` in that order.
    """
    out: list[dict] = []
    by_key: dict[tuple[str, ...], dict] = {}
    d = arena_dir()
    if d is not None:
        for j in ARENA_JUDGES:
            if not (d / f"{j}.json").exists():
                continue
            entry: dict[str, Any] = {
                "source": "arena",
                "name": j,
                "judge": None,
                "also_stored_as": [],
                "label": f"Chatbot Arena (built-in) · human + judge {j}",
            }
            by_key[_content_key([d / "human.json", d / f"{j}.json"])] = entry
            out.append(entry)
    sets = comparison_sets(db)
    for rec in sets.to_dict("records"):
        try:
            meta = json.loads(rec.get("meta") or "{}")
        except (TypeError, ValueError):
            meta = {}
        key = tuple(meta.get("sha256") or ())
        if key and key in by_key:
            by_key[key]["also_stored_as"].append(rec["name"])
            continue
        entry = {
            "source": "set",
            "name": rec["name"],
            "judge": None,
            "also_stored_as": [],
            "label": f"stored set · {rec['name']} ({int(rec['n_rows']):,} rows: "
            f"{int(rec['n_human']):,} human, {int(rec['n_judge']):,} judge labels)",
        }
        if key:
            by_key[key] = entry
        out.append(entry)
    for e in out:
        if e["also_stored_as"]:
            e["label"] += f" (also stored as {', '.join(e['also_stored_as'])})"
    judg = judgment_sources(db)
    runs = [
        {
            "source": "judgments",
            "name": rec["run_id"],
            "judge": rec["judge"],
            "also_stored_as": [],
            "label": f"run {rec['run_id']} · LLM judge {rec['judge']}",
        }
        for rec in judg.drop_duplicates(["run_id", "judge"]).to_dict("records")
    ]
    # the user's own data first (runs' verdicts, stored sets), the built-in Arena files last
    ordered = (
        runs + [e for e in out if e["source"] == "set"] + [e for e in out if e["source"] == "arena"]
    )
    return [
        ComparisonSource(
            source=e["source"],
            name=e["name"],
            judge=e["judge"],
            label=e["label"],
            also_stored_as=list(e["also_stored_as"]),
        )
        for e in ordered
    ]


def keep_human_labels(df: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """Keep the human label on ``n`` random rows (seeded) of those that have one and drop it elsewhere:
    when every comparison carries both labels (as in the Arena files), this makes the labelled set
    D_n (human + judge) and the unlabelled set D_N (judge only) for PPR."""
    has = np.flatnonzero(df["human_winner"].notna().to_numpy())
    if n >= len(has):
        return df
    keep = np.random.default_rng(seed).choice(has, size=int(n), replace=False)
    mask = np.zeros(len(df), dtype=bool)
    mask[keep] = True
    return df.assign(human_winner=df["human_winner"].where(mask, None))


def comparison_models(
    db: str | os.PathLike, source: str, name: str, judge: str | None = None, mode: str | None = None
) -> list[str]:
    """Models of a comparison source, most compared first."""
    df = ranking_comparisons(db, source, name, judge, mode)
    counts = pd.concat([df.model_a, df.model_b]).value_counts()
    return [str(m) for m in counts.index]
