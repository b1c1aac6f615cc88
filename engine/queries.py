"""Read-side queries for the dashboard (and the CLI): small, parameterised, paginated.

Every function opens the database read-only for one short batch (``store.reader``) and returns
plain values (DataFrames, dicts). Nothing here writes, nothing keeps a connection, nothing loads a
whole trace table: traces are read per unit (run, prompt, repeat, mode) and at most ``max_steps``
steps at a time, so a 1M-token-trace database draws as fast as a small one.

Analyses are not re-implemented here: benchmark and multi-generation statistics come from
``engine.stats_io``, win-rates from ``engine.stats.winrates``, rank-sets from ``engine.ranking_io``
/ ``engine.stats.ranking``. When one of those modules is missing, :class:`Unavailable` says which
(the dashboard turns it into an empty state).
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from engine import store
from engine.errors import UserError


class Unavailable(UserError):
    """A feature the dashboard needs is not available (a missing engine module or no data yet)."""


def optional_module(name: str, what: str):
    """Import ``name`` or raise :class:`Unavailable` saying which feature needs it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise Unavailable(f"{what} needs the engine module {name} ({exc}); it is not available in this build") from None


# --------------------------------------------------------------------------- database state

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


def overview(db: str | os.PathLike) -> dict[str, int]:
    """Row count of every table; all zeros when the database does not exist yet."""
    if not db_exists(db):
        return {ddl.split("EXISTS", 1)[1].split("(", 1)[0].strip(): 0 for ddl in store.SCHEMA}
    return store.table_counts(db)


def runs(db: str | os.PathLike) -> pd.DataFrame:
    """Every run, newest first: run_id, created_at, dataset_id, status, n_units, n_generations,
    models, modes, repeats, temperature, max_new_tokens, seed, warnings."""
    cols = ["run_id", "created_at", "dataset_id", "status", "n_units", "n_generations", "models",
            "modes", "repeats", "temperature", "max_new_tokens", "seed", "key_mode", "warnings"]
    if not db_exists(db):
        return pd.DataFrame(columns=cols)
    df = store.query_df(db, """
        SELECT r.run_id, r.created_at, r.dataset_id, r.status, r.n_units, r.key_mode,
               CAST(r.config AS VARCHAR) AS config, CAST(r.warnings AS VARCHAR) AS warnings,
               coalesce(g.n, 0) AS n_generations, g.models, g.modes
        FROM runs r LEFT JOIN (
            SELECT run_id, count(*) AS n, list(DISTINCT model ORDER BY model) AS models,
                   list(DISTINCT mode ORDER BY mode) AS modes
            FROM generations GROUP BY run_id) g USING (run_id)
        ORDER BY r.created_at DESC, r.run_id""")
    conf = [json.loads(c) if isinstance(c, str) and c else {} for c in df.pop("config")]
    for key, col in (("repeats", "repeats"), ("temperature", "temperature"),
                     ("max_new_tokens", "max_new_tokens"), ("seed", "seed")):
        df[col] = [c.get(key) if isinstance(c, dict) else None for c in conf]
    df["models"] = [list(m) if m is not None and len(m) else (c.get("models") if isinstance(c, dict) else None)
                    for m, c in zip(df["models"], conf)]
    df["modes"] = [list(m) if m is not None and len(m) else (c.get("modes") if isinstance(c, dict) else None)
                   for m, c in zip(df["modes"], conf)]
    return df[cols]


def models_table(db: str | os.PathLike) -> pd.DataFrame:
    """Stored models (name, variant, vocab_id, vocab_size, source) with their generation counts."""
    if not db_exists(db):
        return pd.DataFrame(columns=["name", "variant", "vocab_id", "vocab_size", "source", "n_generations"])
    return store.query_df(db, """
        SELECT m.name, m.variant, m.vocab_id, m.vocab_size, m.source, coalesce(g.n, 0) AS n_generations
        FROM models m LEFT JOIN (SELECT model, count(*) AS n FROM generations GROUP BY model) g
             ON g.model = m.name
        ORDER BY m.name""")


def datasets_table(db: str | os.PathLike) -> pd.DataFrame:
    """Stored datasets (dataset_id, kind, n_prompts, source, subjects)."""
    if not db_exists(db):
        return pd.DataFrame(columns=["dataset_id", "kind", "n_prompts", "n_subjects", "source"])
    return store.query_df(db, """
        SELECT d.dataset_id, d.kind, d.n_prompts, coalesce(p.n_subjects, 0) AS n_subjects, d.source
        FROM datasets d LEFT JOIN (SELECT dataset_id, count(DISTINCT subject) AS n_subjects
                                   FROM prompts GROUP BY dataset_id) p USING (dataset_id)
        ORDER BY d.dataset_id""")


def comparison_sets(db: str | os.PathLike) -> pd.DataFrame:
    """Stored comparison sets (engine.tasks.comparisons.list_comparison_sets), empty when no database."""
    cols = ["name", "source", "created_at", "n_rows", "n_human", "n_judge", "n_models"]
    if not db_exists(db):
        return pd.DataFrame(columns=cols)
    comps = optional_module("engine.tasks.comparisons", "listing comparison sets")
    return comps.list_comparison_sets(db)


def judgment_sources(db: str | os.PathLike) -> pd.DataFrame:
    """LLM-judge verdict groups: (run_id, judge, mode, n, n_models, n_unparsed)."""
    if not db_exists(db):
        return pd.DataFrame(columns=["run_id", "judge", "mode", "n", "n_models", "n_unparsed"])
    return store.query_df(db, """
        SELECT run_id, judge, mode, count(*) AS n,
               count(DISTINCT model_a) + 0 AS n_models, count(*) FILTER (WHERE winner IS NULL) AS n_unparsed
        FROM judgments GROUP BY run_id, judge, mode ORDER BY run_id, judge, mode""")


# --------------------------------------------------------------------------- runs, prompts, units

def run_options(db: str | os.PathLike, run_id: str) -> dict:
    """What a run holds: models, modes, repeats (sorted list) and the number of prompts."""
    with store.reader(db) as con:
        if con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]).fetchone()[0] == 0 and \
                con.execute("SELECT count(*) FROM generations WHERE run_id = ?", [run_id]).fetchone()[0] == 0:
            known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id LIMIT 20").fetchall()]
            raise UserError(f"unknown run {run_id!r}; stored runs: {known}")
        models = [r[0] for r in con.execute(
            "SELECT DISTINCT model FROM generations WHERE run_id = ? ORDER BY model", [run_id]).fetchall()]
        modes = [r[0] for r in con.execute(
            "SELECT DISTINCT mode FROM generations WHERE run_id = ? ORDER BY mode", [run_id]).fetchall()]
        repeats = [int(r[0]) for r in con.execute(
            "SELECT DISTINCT repeat FROM generations WHERE run_id = ? ORDER BY repeat", [run_id]).fetchall()]
        n_prompts = con.execute("SELECT count(DISTINCT prompt_id) FROM generations WHERE run_id = ?",
                                [run_id]).fetchone()[0]
    return {"models": models, "modes": modes, "repeats": repeats, "n_prompts": int(n_prompts)}


def run_prompts(db: str | os.PathLike, run_id: str, search: str | None = None, limit: int = 500,
                offset: int = 0) -> pd.DataFrame:
    """Prompts with generations in ``run_id`` (dataset order): prompt_id, idx, subject, question, gold.

    ``search`` filters by a case-insensitive substring of the prompt id or question (a parameter,
    never SQL); ``limit``/``offset`` paginate.
    """
    limit, offset = int(limit), int(offset)
    if limit < 1 or offset < 0:
        raise UserError(f"limit must be >= 1 and offset >= 0, got {limit}, {offset}")
    sql = """
        SELECT g.prompt_id, p.idx, p.subject, p.question, p.gold
        FROM (SELECT DISTINCT prompt_id FROM generations WHERE run_id = ?) g
        LEFT JOIN runs r ON r.run_id = ?
        LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = g.prompt_id"""
    params: list = [run_id, run_id]
    if search:
        sql += " WHERE contains(lower(g.prompt_id), ?) OR contains(lower(coalesce(p.question, '')), ?)"
        params += [search.lower(), search.lower()]
    sql += " ORDER BY p.idx NULLS LAST, g.prompt_id LIMIT ? OFFSET ?"
    return store.query_df(db, sql, params + [limit, offset])


def prompt_info(db: str | os.PathLike, run_id: str, prompt_id: str) -> dict:
    """The prompt row of a run's dataset (question, choices, gold, user_prompt, subject); {} if unknown."""
    df = store.query_df(db, """
        SELECT p.prompt_id, p.subject, p.question, CAST(p.choices AS VARCHAR) AS choices, p.gold, p.user_prompt
        FROM runs r JOIN prompts p ON p.dataset_id = r.dataset_id
        WHERE r.run_id = ? AND p.prompt_id = ?""", [run_id, prompt_id])
    if df.empty:
        return {}
    row = df.iloc[0].to_dict()
    row["choices"] = json.loads(row["choices"]) if isinstance(row["choices"], str) and row["choices"] else None
    return row


def unit_generations(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int) -> pd.DataFrame:
    """Every generation of one unit (all models, both modes): model, mode, text, n_tokens,
    finish_reason, seed, extracted, score (the 'paper' rule if scored, else any rule)."""
    return store.query_df(db, """
        SELECT g.model, g.mode, g.text, g.n_tokens, g.finish_reason, CAST(g.seed AS VARCHAR) AS seed,
               s.rule, s.extracted, s.score
        FROM generations g
        LEFT JOIN (SELECT *, row_number() OVER (PARTITION BY run_id, model, prompt_id, repeat, mode
                                                 ORDER BY rule <> 'paper', rule) AS rk
                   FROM scores WHERE run_id = ? AND prompt_id = ? AND repeat = ?) s
             ON s.model = g.model AND s.mode = g.mode AND s.rk = 1
        WHERE g.run_id = ? AND g.prompt_id = ? AND g.repeat = ?
        ORDER BY g.mode, g.model""", [run_id, prompt_id, int(repeat), run_id, prompt_id, int(repeat)])


def generations_page(db: str | os.PathLike, run_id: str, limit: int = 200, offset: int = 0) -> pd.DataFrame:
    """One page of a run's generations (for browsing and CSV export)."""
    return store.query_df(db, """
        SELECT model, prompt_id, repeat, mode, n_tokens, finish_reason, text FROM generations
        WHERE run_id = ? ORDER BY prompt_id, repeat, mode, model LIMIT ? OFFSET ?""",
                          [run_id, int(limit), int(offset)])


# --------------------------------------------------------------------------- token traces

def trace_steps(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, mode: str,
                models: list[str], max_steps: int = 300, step_offset: int = 0) -> pd.DataFrame:
    """Token traces of one unit for ``models``, steps [step_offset, step_offset + max_steps):
    model, step, token_id, token_text, prob, top_ids, top_probs, top_gumbels, seed."""
    if mode not in store.MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {list(store.MODES)}")
    if not models:
        return pd.DataFrame(columns=["model", "step", "token_id", "token_text", "prob", "top_ids",
                                     "top_probs", "top_gumbels", "seed"])
    return store.query_df(db, """
        SELECT t.model, t.step, t.token_id, t.token_text, t.prob, t.top_ids, t.top_probs, t.top_gumbels,
               CAST(g.seed AS VARCHAR) AS seed
        FROM token_traces t
        LEFT JOIN generations g ON g.run_id = t.run_id AND g.model = t.model AND g.prompt_id = t.prompt_id
             AND g.repeat = t.repeat AND g.mode = t.mode
        WHERE t.run_id = ? AND t.prompt_id = ? AND t.repeat = ? AND t.mode = ? AND list_contains(?, t.model)
              AND t.step >= ? AND t.step < ?
        ORDER BY t.step, t.model""",
                          [run_id, prompt_id, int(repeat), mode, list(models), int(step_offset),
                           int(step_offset) + int(max_steps)])


def unit_trace_length(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, mode: str) -> int:
    """The longest trace (steps) of one unit over its models (for paging)."""
    with store.reader(db) as con:
        n = con.execute("""SELECT coalesce(max(step) + 1, 0) FROM token_traces
                           WHERE run_id = ? AND prompt_id = ? AND repeat = ? AND mode = ?""",
                        [run_id, prompt_id, int(repeat), mode]).fetchone()[0]
    return int(n)


def _run_key_mode(db, run_id: str) -> str | None:
    df = store.query_df(db, "SELECT key_mode FROM runs WHERE run_id = ?", [run_id])
    return None if df.empty else df.iloc[0, 0]


def recompute_gumbels(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int,
                      steps: pd.DataFrame) -> pd.DataFrame | None:
    """Recompute, from the noise key, the Gumbel value of every chosen token in ``steps``.

    Only for runs keyed by token id (shared vocabulary): g = engine.sampling.noise.gumbel(seed, unit_key(prompt,
    repeat), step, token_id). Returns ``steps`` with a ``gumbel`` column, or None when the run uses
    byte-string keys (which need the tokenizer) or engine.sampling.noise is unavailable.
    """
    if steps.empty or _run_key_mode(db, run_id) not in ("token_id", None):
        return None
    try:
        import torch
        from engine.sampling import noise
    except ImportError:
        return None
    out = steps.copy()
    out["gumbel"] = np.nan
    out["top_gumbels_recomputed"] = None
    ukey = noise.unit_key(str(prompt_id), int(repeat))
    for seed, part in out.groupby("seed", sort=False):
        if seed is None or (isinstance(seed, float) and np.isnan(seed)):
            continue
        tops = [list(t) if t is not None and not isinstance(t, float) else [] for t in part["top_ids"]]
        width = max((len(t) for t in tops), default=0)
        # (S, 1 + K) token ids per step: the chosen token, then its top-K alternatives (padded
        # with the chosen id). Noise is evaluated on the (S, U) grid of the unique ids and
        # gathered, so the cost stays O(S * U) with U small.
        ids = np.array([[c] + t + [c] * (width - len(t)) for c, t in zip(part["token_id"], tops)], dtype=np.int64)
        uniq, inv = np.unique(ids, return_inverse=True)
        inv = torch.from_numpy(inv.reshape(ids.shape))  # (S, 1 + K)
        step_t = torch.tensor(part["step"].to_numpy(dtype=np.int64))  # (S,)
        g = noise.gumbel(int(seed), torch.full((len(part),), ukey, dtype=torch.int64), step_t,
                         torch.from_numpy(uniq))  # (S, U)
        picked = g.gather(1, inv).numpy().astype(np.float64)  # (S, 1 + K)
        out.loc[part.index, "gumbel"] = picked[:, 0]
        out.loc[part.index, "top_gumbels_recomputed"] = pd.Series(
            [row[1:1 + len(t)].tolist() for row, t in zip(picked, tops)], index=part.index, dtype=object)
    return out


def gumbel_check(steps: pd.DataFrame) -> float | None:
    """Largest |stored − recomputed| Gumbel value over the alternatives (None if nothing to compare):
    a check that the stored traces and the keyed noise agree."""
    if "top_gumbels_recomputed" not in steps or "top_gumbels" not in steps:
        return None
    diffs = [np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)))
             for a, b in zip(steps["top_gumbels"], steps["top_gumbels_recomputed"])
             if a is not None and b is not None and not isinstance(a, float) and len(a) and len(a) == len(b)]
    return float(max(diffs)) if diffs else None


def align_traces(steps: pd.DataFrame, models: list[str]) -> dict:
    """Align the traces of several models of one unit by step.

    Returns:
        dict with ``table`` (one row per step: step, then per model ``<m>`` token text and
        ``<m>:prob``), ``agree`` (bool per step: every model generated the same token id at that
        step), ``first_divergence`` (the first step where they differ, None if never within the
        shown steps), ``n_agree`` and ``n_steps``.
    """
    if steps.empty:
        return {"table": pd.DataFrame(columns=["step"]), "agree": [], "first_divergence": None,
                "n_agree": 0, "n_steps": 0}
    tok = steps.pivot_table(index="step", columns="model", values="token_id", aggfunc="first")
    txt = steps.pivot_table(index="step", columns="model", values="token_text", aggfunc="first")
    prob = steps.pivot_table(index="step", columns="model", values="prob", aggfunc="first")
    present = [m for m in models if m in tok.columns]
    tok = tok.reindex(columns=present)
    agree = (tok.nunique(axis=1, dropna=False) == 1) & tok.notna().all(axis=1)
    table = pd.DataFrame({"step": tok.index})
    for m in present:
        table[m] = txt[m].reindex(tok.index).to_numpy()
        table[f"{m}:prob"] = prob[m].reindex(tok.index).to_numpy()
    table["agree"] = agree.to_numpy()
    first = None if bool(agree.all()) else int(tok.index[~agree.to_numpy()][0])
    return {"table": table, "agree": agree.tolist(), "first_divergence": first,
            "n_agree": int(agree.sum()), "n_steps": int(len(agree))}


# --------------------------------------------------------------------------- benchmark

def benchmark_choices(db: str | os.PathLike) -> dict:
    """Options for the benchmark page: runs with scores, their models, rules and subjects."""
    if not db_exists(db):
        return {"runs": [], "models": {}, "rules": {}, "subjects": {}}
    df = store.query_df(db, """
        SELECT s.run_id, list(DISTINCT s.model ORDER BY s.model) AS models,
               list(DISTINCT s.rule ORDER BY s.rule) AS rules, list(DISTINCT s.mode ORDER BY s.mode) AS modes
        FROM scores s GROUP BY s.run_id ORDER BY s.run_id""")
    subj = store.query_df(db, """
        SELECT r.run_id, p.subject, count(*) AS n FROM runs r JOIN prompts p ON p.dataset_id = r.dataset_id
        WHERE r.run_id IN (SELECT DISTINCT run_id FROM scores) AND p.subject IS NOT NULL
        GROUP BY ALL ORDER BY r.run_id, p.subject""")
    return {"runs": df["run_id"].tolist(),
            "models": {r: list(m) for r, m in zip(df["run_id"], df["models"])},
            "rules": {r: list(m) for r, m in zip(df["run_id"], df["rules"])},
            "modes": {r: list(m) for r, m in zip(df["run_id"], df["modes"])},
            "subjects": {r: g["subject"].tolist() for r, g in subj.groupby("run_id")}}


def benchmark(db: str | os.PathLike, model_a: str, model_b: str, subject: str | None = None,
              target_error: float | None = None, run: str | None = None, rule: str = "paper",
              n_resamples: int = 1000, seed: int = 0) -> dict:
    """The benchmark comparison of two models (engine.stats_io.benchmark_compare)."""
    sio = optional_module("engine.stats_io", "the benchmark comparison")
    try:
        return sio.benchmark_compare(db, model_a, model_b, subject=subject, target_error=target_error,
                                     n_resamples=n_resamples, seed=seed, run=run, rule=rule)
    except UserError as exc:
        if target_error is None and "target error must be > 0" in str(exc):
            raise UserError("the estimation error is 0 at every sample size (the pool is too small, or the "
                            "two models' scores never differ), so there is no default error level: "
                            "give a target error > 0") from None
        raise


# --------------------------------------------------------------------------- data map

def multigen(db: str | os.PathLike, run: str, model: str, mode: str = "coupled", rule: str = "paper",
             method: str = "answer", subject: str | None = None, p_max: float = 0.1,
             s_min: float = -0.8, seed: int = 0) -> dict:
    """The multiple-generation analysis and data map (engine.stats_io.multigen_summary)."""
    sio = optional_module("engine.stats_io", "the data map")
    return sio.multigen_summary(db, run, model, mode=mode, rule=rule, method=method, subject=subject,
                                p_max=p_max, s_min=s_min, seed=seed)


def cluster_methods(db: str | os.PathLike, run: str) -> list[str]:
    """Clustering methods stored for a run ('answer' is always possible from the scores)."""
    df = store.query_df(db, "SELECT DISTINCT method FROM clusters WHERE run_id = ? ORDER BY method", [run])
    return sorted({"answer", *df["method"].tolist()})


def prompts_generations(db: str | os.PathLike, run: str, model: str, mode: str, prompt_ids: list[str],
                        rule: str = "paper", limit: int = 2000) -> pd.DataFrame:
    """Generations of ``prompt_ids`` (one model and mode) with gold answer, extraction and score."""
    if not prompt_ids:
        return pd.DataFrame(columns=["prompt_id", "question", "gold", "repeat", "extracted", "score", "text"])
    return store.query_df(db, """
        SELECT g.prompt_id, p.question, p.gold, g.repeat, s.extracted, s.score, g.text
        FROM generations g
        LEFT JOIN runs r ON r.run_id = g.run_id
        LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = g.prompt_id
        LEFT JOIN scores s ON s.run_id = g.run_id AND s.model = g.model AND s.prompt_id = g.prompt_id
             AND s.repeat = g.repeat AND s.mode = g.mode AND s.rule = ?
        WHERE g.run_id = ? AND g.model = ? AND g.mode = ? AND list_contains(?, g.prompt_id)
        ORDER BY p.idx NULLS LAST, g.prompt_id, g.repeat LIMIT ?""",
                          [rule, run, model, mode, list(prompt_ids), int(limit)])


# --------------------------------------------------------------------------- pairwise comparisons

def comparisons_for(db: str | os.PathLike, source: str, name: str, mode: str | None = None,
                    judge: str | None = None) -> pd.DataFrame:
    """Normalised pairwise rows (prompt_id, model_a, model_b, human_winner, judge_winner).

    source 'set': stored comparison set ``name``; source 'judgments': LLM-judge verdicts of run
    ``name`` (optionally one ``judge`` and ``mode``) as judge_winner (both presentation orders
    count as separate comparisons).
    """
    if source == "set":
        return store.query_df(db, """SELECT prompt_id, model_a, model_b, human_winner, judge_winner
                                     FROM comparisons WHERE set_name = ? ORDER BY row_idx""", [name])
    if source == "judgments":
        sql = """SELECT prompt_id, model_a, model_b, NULL::VARCHAR AS human_winner, winner AS judge_winner
                 FROM judgments WHERE run_id = ?"""
        params: list = [name]
        if mode is not None:
            sql += " AND mode = ?"
            params.append(mode)
        if judge is not None:
            sql += " AND judge = ?"
            params.append(judge)
        return store.query_df(db, sql + " ORDER BY prompt_id, repeat, model_a, model_b, presented", params)
    raise UserError(f"unknown comparison source {source!r}; allowed: 'set', 'judgments'")


# --------------------------------------------------------------------------- composed views (one cached call per page)

def trace_view(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, mode: str,
               models: tuple[str, ...], step_offset: int = 0, max_steps: int = 120) -> dict:
    """Everything the token-trace view draws for one unit and mode: the steps (with recomputed
    Gumbel values where possible), the alignment, the total trace length and whether the Gumbel
    values were recomputed."""
    steps = trace_steps(db, run_id, prompt_id, repeat, mode, list(models), max_steps=max_steps,
                        step_offset=step_offset)
    with_g = recompute_gumbels(db, run_id, prompt_id, repeat, steps)
    al = align_traces(steps, list(models))
    return {"steps": with_g if with_g is not None else steps, "alignment": al,
            "gumbel_recomputed": with_g is not None,
            "gumbel_check": gumbel_check(with_g) if with_g is not None else None,
            "length": unit_trace_length(db, run_id, prompt_id, repeat, mode),
            "token_names": token_names(db, run_id, steps)}


def token_names(db: str | os.PathLike, run_id: str, steps: pd.DataFrame, limit: int = 2000) -> dict[int, str]:
    """Text of the alternative token ids shown in ``steps``, looked up among the tokens the run's
    models generated (no tokenizer needed); ids never generated in the run stay unnamed."""
    ids: set[int] = set()
    for col in ("top_ids",):
        if col in steps:
            for v in steps[col]:
                if v is not None and not (isinstance(v, float)):
                    ids.update(int(i) for i in v)
    ids -= set(int(i) for i in steps.get("token_id", []))
    names = {int(i): str(t) for i, t in zip(steps.get("token_id", []), steps.get("token_text", []))}
    if ids:
        found = store.query_df(db, """SELECT token_id, any_value(token_text) AS token_text FROM token_traces
                                      WHERE run_id = ? AND list_contains(?, token_id) GROUP BY token_id LIMIT ?""",
                               [run_id, sorted(ids)[:limit], int(limit)])
        names.update({int(i): str(t) for i, t in zip(found["token_id"], found["token_text"])})
    return names


def _ranks(values: dict) -> dict:
    order = sorted((v if v is not None else -1.0, m) for m, v in values.items())[::-1]
    return {m: i + 1 for i, (_, m) in enumerate(order)}


def winrate_sources(db: str | os.PathLike) -> dict:
    """Sources of pairwise comparisons: stored sets and LLM-judge verdict groups."""
    sets = comparison_sets(db)
    judg = judgment_sources(db)
    return {"sets": sets["name"].tolist() if not sets.empty else [],
            "judgments": judg.to_dict("records") if not judg.empty else []}


def winrates_view(db: str | os.PathLike, source: str, name: str, label: str = "human",
                  judge: str | None = None, reps: int = 200, seed: int = 0,
                  compare_name: str | None = None) -> dict:
    """Win-rate analysis (engine.ranking_io.winrates_for) of a stored set or of a run's judge verdicts.

    For judge verdicts of a run with both modes, ``coupled`` and ``independent`` are each analysed
    and compared per pair (z-test); the average win-rates and their ranks are returned side by side
    as ``table`` (like the paper's Table 1). For a stored set, ``coupled`` holds the analysis; with
    ``compare_name`` (e.g. the set of the independent generations' verdicts) that set is analysed
    as ``independent`` and compared with it per pair.
    """
    rio = optional_module("engine.ranking_io", "the win-rate analysis")
    out: dict = {}
    if source == "judgments":
        label = "judge"
        dfs = {m: comparisons_for(db, "judgments", name, mode=m, judge=judge) for m in store.MODES}
        dfs = {m: d for m, d in dfs.items() if not d.empty and d["judge_winner"].notna().any()}
        if not dfs:
            raise UserError(f"run {name!r} has no parsed judge verdicts" + (f" by {judge!r}" if judge else ""))
        models = sorted(set().union(*[set(d.model_a) | set(d.model_b) for d in dfs.values()]))
        for m, d in dfs.items():
            other = [o for o in dfs if o != m]
            out[m] = rio.winrates_for(d, label=label, seed=seed, reps=reps, models=models,
                                      compare=dfs[other[0]] if other and m == "coupled" else None)
    else:
        d = comparisons_for(db, "set", name)
        if d.empty:
            raise UserError(f"comparison set {name!r} is empty or unknown")
        if compare_name:
            c = comparisons_for(db, "set", compare_name)
            if c.empty:
                raise UserError(f"comparison set {compare_name!r} is empty or unknown")
            models = sorted(set(d.model_a) | set(d.model_b) | set(c.model_a) | set(c.model_b))
            out["coupled"] = rio.winrates_for(d, label=label, seed=seed, reps=reps, models=models, compare=c)
            out["independent"] = rio.winrates_for(c, label=label, seed=seed, reps=reps, models=models)
        else:
            out["coupled"] = rio.winrates_for(d, label=label, seed=seed, reps=reps)
    rows = []
    first = next(iter(out.values()))
    for m in first["models"]:
        row = {"model": m}
        for mode, res in out.items():
            a = res["average"][m]
            row[f"{mode}_winrate"] = a["winrate"]
            row[f"{mode}_ci_low"], row[f"{mode}_ci_high"] = a["ci"]
        rows.append(row)
    table = pd.DataFrame(rows)
    for mode in out:
        table[f"{mode}_rank"] = table["model"].map(_ranks(dict(zip(table["model"], table[f"{mode}_winrate"]))))
    pairs = []
    if "compare" in first:
        for m, opp in first["compare"].items():
            for m2, v in opp.items():
                pairs.append({"pair": f"{m} > {m2}", "model": m, "opponent": m2, "coupled": v["winrate"],
                              "independent": v["winrate_other"], "z": v["z"], "p": v["p"], "stars": v["stars"]})
    else:
        for m, opp in first["matrix"].items():
            for m2, v in opp.items():
                pairs.append({"pair": f"{m} > {m2}", "model": m, "opponent": m2, "coupled": v})
    return {"results": out, "table": table.sort_values(f"{next(iter(out))}_rank"), "pairs": pd.DataFrame(pairs),
            "label": label}


def matrix_of(res: dict, key: str = "matrix") -> tuple[list[str], np.ndarray]:
    """A (k, k) array (NaN on the diagonal) from a winrates_for dict-of-dicts entry."""
    models = res["models"]
    M = np.full((len(models), len(models)), np.nan)
    for i, m in enumerate(models):
        for j, m2 in enumerate(models):
            v = res[key].get(m, {}).get(m2)
            if i != j and v is not None:
                M[i, j] = v
    return models, M


ARENA_JUDGES = ("gpt-4-0125-preview", "claude-3-opus-20240229", "gpt-3.5-turbo")


def arena_dir() -> Path | None:
    """../shared/data/arena when present (COUPLED_EVAL_SHARED overrides ../shared)."""
    shared = Path(os.environ.get("COUPLED_EVAL_SHARED", store.PROJECT_ROOT.parent / "shared"))
    p = shared / "data" / "arena"
    return p if (p / "human.json").exists() else None




def ranking_comparisons(db: str | os.PathLike, source: str, name: str) -> pd.DataFrame:
    """Comparisons for the rank-set page: source 'set' (stored set ``name``) or 'arena' (human.json
    with judge file ``name`` from ../shared/data/arena)."""
    if source == "set":
        comps = optional_module("engine.tasks.comparisons", "reading comparison sets")
        return comps.read_comparison_set(db, name)
    if source == "arena":
        d = arena_dir()
        if d is None:
            raise Unavailable("the Chatbot Arena files (../shared/data/arena) are not present on this machine")
        if name not in ARENA_JUDGES:
            raise UserError(f"unknown Arena judge {name!r}; allowed: {', '.join(ARENA_JUDGES)}")
        comps = optional_module("engine.tasks.comparisons", "reading Arena files")
        return comps.read_arena(d / "human.json", d / f"{name}.json")
    raise UserError(f"unknown comparison source {source!r}; allowed: 'set', 'arena'")


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


def ranksets_view(db: str | os.PathLike, source: str, name: str, method: str, alpha: float,
                  covariance: str = "delta", models: tuple[str, ...] | None = None,
                  n_human: int | None = None, seed: int = 0) -> dict:
    """Rank-sets of one method (engine.ranking_io.ranksets_for) with a table of the results.

    ``n_human``: use the human labels of only this many random comparisons (see
    :func:`keep_human_labels`); None = every human label.
    """
    rio = optional_module("engine.ranking_io", "rank-sets")
    df = ranking_comparisons(db, source, name)
    if models:
        df = df[df.model_a.isin(models) & df.model_b.isin(models)].reset_index(drop=True)
    if n_human is not None:
        df = keep_human_labels(df, int(n_human), seed)
    res = rio.ranksets_for(df, method, alpha, covariance=covariance, models=list(models) if models else None)
    table = pd.DataFrame([{"model": m, "theta": res["theta"][m], "lower": lo, "upper": up}
                          for m, (lo, up) in res["ranksets"].items()]).sort_values(["lower", "upper", "theta"],
                                                                                    ascending=[True, True, False])
    return {"result": res, "table": table}


def rankset_draws_view(db: str | os.PathLike, source: str, name: str, n: int, reps: int, alpha: float,
                       covariance: str = "delta", seed: int = 0, models: tuple[str, ...] | None = None) -> dict:
    """Repeated draws (engine.ranking_io.rankset_draws): rank-position probabilities per method and
    the size vs baseline-intersection curve as a long table (method, alpha, size, intersection, coverage)."""
    rio = optional_module("engine.ranking_io", "rank-set draws")
    df = ranking_comparisons(db, source, name)
    res = rio.rankset_draws(df, n=int(n), reps=int(reps), alpha=float(alpha), covariance=covariance,
                            seed=int(seed), models=list(models) if models else None)
    curve = pd.DataFrame([{"method": m, **pt} for m, pts in res["curve"].items() for pt in pts])
    return {"result": res, "curve": curve}


def comparison_models(db: str | os.PathLike, source: str, name: str) -> list[str]:
    """Models of a comparison source, most compared first."""
    df = ranking_comparisons(db, source, name)
    counts = pd.concat([df.model_a, df.model_b]).value_counts()
    return [str(m) for m in counts.index]


def divergence_summary(db: str | os.PathLike, run_id: str, models: tuple[str, ...], mode: str = "coupled") -> pd.DataFrame:
    """Per unit (prompt_id, repeat) of a run: the first step where the chosen models' tokens differ
    (or one of them has stopped), NULL when they never differ, and the longest trace length.
    Aggregated in SQL (one pass over the run's traces, nothing loaded per token)."""
    if mode not in store.MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {list(store.MODES)}")
    if len(models) < 2:
        raise UserError(f"choose at least two models to compare, got {list(models)}")
    return store.query_df(db, """
        WITH t AS (SELECT prompt_id, repeat, step, count(DISTINCT token_id) AS n_tokens, count(*) AS n_models
                   FROM token_traces WHERE run_id = ? AND mode = ? AND list_contains(?, model)
                   GROUP BY prompt_id, repeat, step)
        SELECT prompt_id, repeat,
               min(step) FILTER (WHERE n_tokens > 1 OR n_models < ?) AS first_divergence,
               max(step) + 1 AS n_steps
        FROM t GROUP BY prompt_id, repeat ORDER BY prompt_id, repeat""",
                          [run_id, mode, list(models), len(models)])
