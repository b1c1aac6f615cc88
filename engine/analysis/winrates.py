"""Win-rates: pairwise win-rate matrix with Wilson CIs, average win-rates, Bradley-Terry (Davidson
ties) and Elo with bootstrap CIs, and coupled vs independent per-pair z-tests.

Benz et al., "Evaluation of Large Language Models via Coupled Token Generation", Section 5 and
Table 1 (win-rates of coupled vs independent generations under an LLM judge).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from engine import store
from engine.analysis.comparisons import comparisons_for, json_float, model_indices, model_list, restrict_models
from engine.config import RANK_LABELS as LABELS
from engine.errors import UserError
from engine.stats import winrates as WR


def _outcome_codes(winners: pd.Series) -> np.ndarray:
    v = winners.to_numpy(dtype=object)
    return np.where(v == "a", WR.A_WINS, np.where(v == "b", WR.B_WINS, WR.TIE)).astype(np.int64)


def winrates_for(df: pd.DataFrame, label: str = "human", seed: int = 0, reps: int = 200,
                 models: list[str] | None = None, compare: pd.DataFrame | None = None) -> dict:
    """The ``winrates`` CLI JSON: win-rate matrix (Wilson 95% CIs), ties, average win-rates (delta-method CI),
    Bradley-Terry (Davidson ties) and Elo with percentile-bootstrap CIs; with ``compare`` (e.g. the
    independent-generation set), a per-pair two-proportion z-test of the win-rates of ``df`` vs ``compare``.
    """
    if label not in LABELS:
        raise UserError(f"unknown label {label!r}; allowed: {', '.join(LABELS)}")
    col = f"{label}_winner"
    rows = df[col].notna()
    if not rows.any():
        raise UserError(f"no comparison has a {label} label")
    d = restrict_models(df[rows].reset_index(drop=True), models)
    if compare is not None and models:
        compare = compare[compare.model_a.isin(set(models)) & compare.model_b.isin(set(models))]
    models = model_list(d if compare is None else pd.concat([d, compare]), models)
    k = len(models)
    a, b = model_indices(d, models)
    out = _outcome_codes(d[col])
    W, T, n = WR.winrate_matrix(a, b, out, k)
    wins, _, _ = WR.pairwise_counts(a, b, out, k)
    lo, hi = WR.wilson_interval(wins, n)
    avg, alo, ahi = WR.average_winrate(W, n)
    rng = np.random.default_rng(seed)
    beta, nu = WR.davidson_fit(a, b, out, k)
    blo, bhi, _ = WR.bootstrap_ci(lambda *x: WR.davidson_fit(*x)[0], a, b, out, k, rng, reps=reps)
    elo = WR.elo_ratings(a, b, out, k)
    elo_lo, elo_hi, elo_draws = WR.bootstrap_ci(WR.elo_ratings, a, b, out, k, rng, reps=reps)

    def mat(M):
        return {m: {m2: json_float(M[i, j]) for j, m2 in enumerate(models) if j != i} for i, m in enumerate(models)}

    res = {
        "models": models, "label": label, "n": int(len(d)),
        "matrix": mat(W), "ties": mat(T), "counts": {m: {m2: int(n[i, j]) for j, m2 in enumerate(models) if j != i}
                                                     for i, m in enumerate(models)},
        "ci": {m: {m2: [json_float(lo[i, j]), json_float(hi[i, j])] for j, m2 in enumerate(models) if j != i}
               for i, m in enumerate(models)},
        "ci_method": "wilson 95%",
        "average": {m: {"winrate": json_float(avg[i]), "ci": [json_float(alo[i]), json_float(ahi[i])]}
                    for i, m in enumerate(models)},
        "average_ci_method": "delta method (per-pair binomials, independent) 95%",
        "tie_rate": json_float(np.mean(out == WR.TIE)),
        "bradley_terry": {"model": "davidson (ties)", "beta": {m: float(x) for m, x in zip(models, beta)},
                          "nu": nu, "ci": {m: [float(x), float(y)] for m, x, y in zip(models, blo, bhi)},
                          "ci_method": f"percentile bootstrap over comparisons, {reps} resamples, seed {seed}"},
        # the online rating depends on the file order; the bootstrap resamples reshuffle it, so the
        # CI is for the order-free rating (its median is reported next to the in-order one)
        "elo": {"K": 4.0, "rating": {m: float(x) for m, x in zip(models, elo)},
                "rating_bootstrap_median": {m: float(x) for m, x in zip(models, np.median(elo_draws, axis=0))},
                "ci": {m: [float(x), float(y)] for m, x, y in zip(models, elo_lo, elo_hi)},
                "ci_method": f"percentile bootstrap over comparisons (reshuffled order), {reps} resamples, seed {seed}; "
                             "'rating' is the online rating in file order"},
    }
    if compare is not None:
        c = compare[compare[col].notna()]
        if c.empty:
            raise UserError(f"the comparison file has no {label} labels")
        unknown = sorted((set(c.model_a) | set(c.model_b)) - set(models))
        if unknown:
            raise UserError(f"model(s) {unknown} of the comparison file are not in --models")
        ca, cb = model_indices(c, models)
        cw, _, cn = WR.pairwise_counts(ca, cb, _outcome_codes(c[col]), k)
        z, p = WR.two_proportion_ztest(wins, n, cw, cn)
        stars = WR.significance_stars(p)
        with np.errstate(invalid="ignore", divide="ignore"):
            W2 = np.where(cn > 0, cw / np.maximum(cn, 1), np.nan)
        res["compare"] = {
            m: {m2: {"winrate": json_float(W[i, j]), "winrate_other": json_float(W2[i, j]),
                     "z": json_float(z[i, j]), "p": json_float(p[i, j]), "stars": str(stars[i, j])}
                for j, m2 in enumerate(models) if j != i} for i, m in enumerate(models)}
        res["compare_test"] = "two-tailed pooled two-proportion z-test; stars **** p<1e-4, *** <1e-3, ** <1e-2, * <0.05"
    return res


def _ranks(values: dict) -> dict:
    order = sorted((v if v is not None else -1.0, m) for m, v in values.items())[::-1]
    return {m: i + 1 for i, (_, m) in enumerate(order)}


def winrates_view(db: str | os.PathLike, source: str, name: str, label: str = "human",
                  judge: str | None = None, reps: int = 200, seed: int = 0,
                  compare_name: str | None = None) -> dict:
    """Win-rate analysis (:func:`winrates_for`) of a stored set or of a run's judge verdicts.

    For judge verdicts of a run with both modes, ``coupled`` and ``independent`` are each analysed
    and compared per pair (z-test); the average win-rates and their ranks are returned side by side
    as ``table`` (like the paper's Table 1). For a stored set, ``coupled`` holds the analysis; with
    ``compare_name`` (e.g. the set of the independent generations' verdicts) that set is analysed
    as ``independent`` and compared with it per pair.
    """
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
            out[m] = winrates_for(d, label=label, seed=seed, reps=reps, models=models,
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
            out["coupled"] = winrates_for(d, label=label, seed=seed, reps=reps, models=models, compare=c)
            out["independent"] = winrates_for(c, label=label, seed=seed, reps=reps, models=models)
        else:
            out["coupled"] = winrates_for(d, label=label, seed=seed, reps=reps)
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
