"""Multiple generations per prompt: P(correct), the score's within/between variance and CI,
semantic consistency and the data map.

Zhang et al., "Beyond the Singular: The Essential Role of Multiple Generations in Effective
Benchmark Evaluation and Analysis", Sections 3-4 (the estimator and its variance decomposition,
the data map of P(correct) vs semantic consistency).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from engine import store
from engine.config import MODES
from engine.errors import UserError
from engine.stats import multigen as mg


def multigen_summary(db: str | os.PathLike, run: str, model: str, mode: str = "coupled", rule: str = "paper",
                     method: str = "answer", subject: str | None = None, p_max: float = 0.1,
                     s_min: float = -0.8, n_bootstrap: int = 2000, seed: int = 0) -> dict:
    """Multiple-generation analysis of one model's k generations per prompt (METHODS.md section 5).

    Clusters come from the ``clusters`` table (``method``); for method 'answer' without stored
    clusters, generations are clustered by identical extracted answers (``scores.extracted``).

    Returns:
        dict with run, model, mode, rule, method, clusters_source, n, k, score (μ̂, variance
        decomposition, CI), bootstrap (over prompts), single_generation (scores, spread),
        p_correct_distribution ({values, counts}), consistency_mean, n_flagged, thresholds, prompts (list of {prompt_id,
        subject, p_correct, consistency, flagged}).
    """
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {list(MODES)}")
    with store.reader(db) as con:
        sql = """SELECT s.prompt_id, s.repeat, s.score, s.extracted, coalesce(p.idx, 0) AS idx, p.subject,
                        c.cluster_id
                 FROM scores s
                 LEFT JOIN runs r ON r.run_id = s.run_id
                 LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = s.prompt_id
                 LEFT JOIN clusters c ON c.run_id = s.run_id AND c.model = s.model AND c.prompt_id = s.prompt_id
                      AND c.repeat = s.repeat AND c.mode = s.mode AND c.method = ?
                 WHERE s.run_id = ? AND s.model = ? AND s.mode = ? AND s.rule = ?"""
        params: list = [method, run, model, mode, rule]
        if subject is not None:
            sql += " AND p.subject = ?"
            params.append(subject)
        df = con.execute(sql, params).df()
        if df.empty:
            avail = con.execute("SELECT DISTINCT run_id, model, mode, rule FROM scores ORDER BY ALL").fetchall()
            raise UserError(f"no scores for run={run!r} model={model!r} mode={mode!r} rule={rule!r}"
                            + (f" subject={subject!r}" if subject else "")
                            + f"; available (run, model, mode, rule): {avail[:20]}")
    df = df.sort_values(["idx", "prompt_id", "repeat"])
    wide = df.pivot_table(index=["idx", "prompt_id"], columns="repeat", values="score", aggfunc="first").dropna()
    if wide.empty:
        raise UserError("no prompt has a score for every repeat")
    keep = wide.index.get_level_values("prompt_id")
    Y = wide.to_numpy(dtype=np.float64)  # (n, k)
    if df["cluster_id"].notna().any():
        cl = df.pivot_table(index=["idx", "prompt_id"], columns="repeat", values="cluster_id", aggfunc="first")
        cl = cl.reindex(index=wide.index, columns=wide.columns)
        if cl.isna().any().any():
            raise UserError(f"clusters of method {method!r} are missing for some generations; re-run clustering")
        C, source = cl.to_numpy(dtype=np.int64), f"clusters table (method {method})"
    elif method == "answer":
        codes, _ = pd.factorize(df["extracted"].fillna("<none>"))
        df = df.assign(code=codes)
        cl = df.pivot_table(index=["idx", "prompt_id"], columns="repeat", values="code", aggfunc="first")
        C, source = cl.reindex(index=wide.index, columns=wide.columns).to_numpy(dtype=np.int64), \
            f"identical extracted answers (scores.extracted, rule {rule})"
    else:
        raise UserError(f"no clusters of method {method!r} stored for this run/model/mode; "
                        "run the clustering first, or use method 'answer'")
    p = mg.p_correct(Y)
    S = mg.semantic_consistency(C)
    flags = mg.data_map_flags(p, S, p_max=p_max, s_min=s_min)
    subj = df.drop_duplicates("prompt_id").set_index("prompt_id")["subject"].reindex(keep)
    values, counts = np.unique(np.round(p, 9), return_counts=True)  # p takes the values j/k
    return {
        "run": run, "model": model, "mode": mode, "rule": rule, "method": method, "subject": subject,
        "clusters_source": source, "n": int(Y.shape[0]), "k": int(Y.shape[1]),
        "score": mg.score_variance(Y),
        "score_method": "t CI with Var(mu) = sigma_hat^2/n; unbiased within/between components (METHODS 5)",
        "bootstrap": mg.bootstrap_score_ci(Y, np.random.default_rng(seed), n_resamples=n_bootstrap),
        "single_generation": mg.single_generation_scores(Y),
        "p_correct_distribution": {"values": values.tolist(), "counts": counts.tolist()},
        "consistency_mean": float(S.mean()),
        "thresholds": {"p_max": p_max, "s_min": s_min},
        "n_flagged": int(flags.sum()),
        "prompts": [{"prompt_id": pid, "subject": (None if pd.isna(sj) else sj), "p_correct": float(pi),
                     "consistency": float(si), "flagged": bool(fi)}
                    for pid, sj, pi, si, fi in zip(keep, subj.to_numpy(), p, S, flags)],
    }


def multigen(db: str | os.PathLike, run: str, model: str, mode: str = "coupled", rule: str = "paper",
             method: str = "answer", subject: str | None = None, p_max: float = 0.1,
             s_min: float = -0.8, seed: int = 0) -> dict:
    """The multiple-generation analysis and data map (:func:`multigen_summary`)."""
    return multigen_summary(db, run, model, mode=mode, rule=rule, method=method, subject=subject,
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
