"""Token traces of one unit: read per unit and page of steps (never a whole trace table), aligned by
step, the divergence of coupled models, and the Gumbel values recomputed from the noise key.

Benz et al., "Evaluation of Large Language Models via Coupled Token Generation", Section 3: coupled
models share the noise of every step, so they agree until their distributions differ enough.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from engine import store
from engine.config import MODES
from engine.errors import UserError


def trace_steps(db: str | os.PathLike, run_id: str, prompt_id: str, repeat: int, mode: str,
                models: list[str], max_steps: int = 300, step_offset: int = 0) -> pd.DataFrame:
    """Token traces of one unit for ``models``, steps [step_offset, step_offset + max_steps):
    model, step, token_id, token_text, prob, top_ids, top_probs, top_gumbels, seed."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {list(MODES)}")
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


def divergence_summary(db: str | os.PathLike, run_id: str, models: tuple[str, ...], mode: str = "coupled") -> pd.DataFrame:
    """Per unit (prompt_id, repeat) of a run: the first step where the chosen models' tokens differ
    (or one of them has stopped), NULL when they never differ, and the longest trace length.
    Aggregated in SQL (one pass over the run's traces, nothing loaded per token)."""
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {list(MODES)}")
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
