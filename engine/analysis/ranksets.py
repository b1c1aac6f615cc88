"""Rank-sets with a 1 - alpha coverage guarantee from human labels, judge labels, or both (PPR).

Chatzi et al., "Prediction-Powered Ranking of Large Language Models", NeurIPS 2024: Algorithm 1
(PPR), Algorithm 3 (one source), Algorithm 4 (the trace-optimal lambda), Section 5 (repeated
balanced draws, Fig. 1, 3, 9, 10).
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
from scipy import stats

from engine.analysis.comparisons import (
    cluster_ids,
    clustering_note,
    comparison_groups,
    connectivity_warning,
    keep_human_labels,
    model_indices,
    model_list,
    ranking_comparisons,
    require_models,
    restrict_models,
    win_indicators,
)
from engine.analysis.notices import AnalysisWarning, Notice, small_sample_warning
from engine.config import PPR_DEFAULT_HUMAN_LABELS
from engine.config import RANK_METHODS as METHODS
from engine.errors import UserError
from engine.stats import ranking as R
from engine.stats.clusters import cluster_codes

# the paper's alpha grid (Appendix D, footnote 8)
PAPER_ALPHAS = (0.4, 0.3, 0.25, 0.2, 0.15, 0.1, 0.075, 0.05, 0.025, 0.01)


def ranksets_for(df: pd.DataFrame, method: str, alpha: float, covariance: str = "delta",
                 lam: float | str = "auto", models: list[str] | None = None, procedure: str = "maxt",
                 seed: int = 0, human_labels: int | None = None, n_draws: int = 10_000) -> dict:
    """Rank-sets of one method on a comparisons DataFrame, as the ``ranksets`` CLI JSON.

    method "human" / "judge": Algorithm 3 on the rows with that label. "ppr": Algorithm 1 with
    D_n = rows with a human label (they also need a judge label) and D_N = rows with only a judge
    label. ``human_labels`` = N keeps the human labels of N random rows (seeded by ``seed``), the
    others become judge-only; for PPR on data where every row carries both labels (the Arena
    files) the default is ``config.PPR_DEFAULT_HUMAN_LABELS`` (the paper's setting), said in
    ``notes``. Covariance "delta" is cluster-robust by prompt when the rows carry prompt ids
    (METHODS.md 7.3: residual columns summed within a prompt). Rank-sets by ``procedure``:
    "maxt" (simultaneous max-t step-down, default; ``n_draws`` normal draws seeded by ``seed``),
    "marginal", or "chi2" (the paper's Algorithm 2).

    Returns:
        {"models", "theta", "theta_ci", "sigma", "lambda", "ranksets", "rank", "procedure",
         "covariance", "covariance_detail", "clustering", "n_clusters", "per_row_clusters", "alpha",
         "n", "N", "human_labels", "notes", "warnings", ["critical_values"]}.
    """
    if method not in METHODS:
        raise UserError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    R.check_covariance(covariance)
    if procedure not in R.PROCEDURES:
        raise UserError(f"unknown rank-set procedure {procedure!r}; allowed: {', '.join(R.PROCEDURES)}")
    alpha = parse_alpha(alpha)
    lam = parse_lambda(lam)
    df = restrict_models(df, models)
    models = model_list(df, models)
    k = len(models)
    if k < 2:
        raise UserError(f"need at least two models to rank; found {models}")
    notes: list[str] = []
    has_h = df.human_winner.notna().to_numpy()
    has_j = df.judge_winner.notna().to_numpy()
    if human_labels is None and method == "ppr" and has_h.any() and not (has_j & ~has_h).any() \
            and has_h.sum() > PPR_DEFAULT_HUMAN_LABELS:
        human_labels = PPR_DEFAULT_HUMAN_LABELS
        notes.append(f"every comparison carries a human label: kept the human labels of {human_labels:,} random "
                     f"comparisons (seed {seed}; the paper's setting; change with --human-labels), the other "
                     f"{int(has_h.sum()) - human_labels:,} are judge-only")
    if human_labels is not None:
        if int(human_labels) < 1:
            raise UserError(f"--human-labels must be >= 1; got {human_labels}")
        if int(human_labels) < int(has_h.sum()):
            df = keep_human_labels(df, int(human_labels), seed)
            has_h = df.human_winner.notna().to_numpy()
        elif not notes:
            notes.append(f"{int(human_labels):,} human labels asked for (--human-labels): all {int(has_h.sum()):,} "
                         "available are kept")
    first, second = model_indices(df, models)
    cl = cluster_ids(df)
    if cl is not None and pd.Series(cl).value_counts().max() == 1:
        cl = None  # one comparison per prompt: the clustered formula IS the plain one (kept bit-exact)
    if covariance == "paper":
        cl = None
    lam_out = None
    if method in ("human", "judge"):
        rows = has_h if method == "human" else has_j
        if not rows.any():
            raise UserError(f"no comparison has a {method} label")
        col = "human_winner" if method == "human" else "judge_winner"
        w, w2 = win_indicators(df[col][rows])
        require_models(models, first[rows], second[rows], f"{method}-labelled comparisons")
        theta, sigma = R.onesource_theta_sigma(first[rows], second[rows], w, w2, k, covariance,
                                               cluster=None if cl is None else cl[rows])
        n, N = (int(rows.sum()), 0) if method == "human" else (0, int(rows.sum()))
        used = rows
        wild = (lambda rng: R.wild_draws_onesource(first[rows], second[rows], w, w2, k,
                                                   None if cl is None else cl[rows], rng, n_draws))
    else:
        bad = has_h & ~has_j
        if bad.any():
            rows_txt = ", ".join(str(i + 1) for i in np.flatnonzero(bad)[:10])
            raise UserError(f"PPR needs a judge label on every human-labelled comparison; {int(bad.sum())} "
                            f"have none (rows {rows_txt}{' ...' if bad.sum() > 10 else ''})")
        lab, unl = has_h, has_j & ~has_h
        if not lab.any() or not unl.any():
            raise UserError(f"PPR needs human-labelled comparisons (found {int(lab.sum())}) and comparisons "
                            f"labelled by the judge only (found {int(unl.sum())}); when every row has both labels, "
                            "keep some human labels with --human-labels N")
        require_models(models, first[lab], second[lab], "labelled set (human labels)")
        require_models(models, first[unl], second[unl], "unlabelled set (judge-only labels)")
        w, w2 = win_indicators(df.human_winner[lab])
        wh, wh2 = win_indicators(df.judge_winner[lab])
        whN, wh2N = win_indicators(df.judge_winner[unl])
        theta, sigma, lam_out = R.ppr_theta_sigma(first[unl], second[unl], whN, wh2N, first[lab], second[lab],
                                                  w, w2, wh, wh2, k, lam=lam, covariance=covariance,
                                                  cluster_N=None if cl is None else cl[unl],
                                                  cluster_n=None if cl is None else cl[lab])
        n, N = int(lab.sum()), int(unl.sum())
        used = lab | unl
        wild = (lambda rng: R.wild_draws_ppr(first[unl], second[unl], whN, wh2N, first[lab], second[lab], w, w2, wh,
                                             wh2, k, float(lam_out), None if cl is None else cl[unl],
                                             None if cl is None else cl[lab], rng, n_draws))
    rng = np.random.default_rng(seed)
    null, n_cl = None, int(used.sum()) if cl is None else int(pd.Series(cl[used]).nunique())
    if (procedure != "chi2" and covariance == "delta" and n_cl <= R.WILD_MAX_CLUSTERS
            and k <= R.WILD_MAX_MODELS):
        null = wild(np.random.default_rng([seed, 3]))  # small C: calibrate for estimating Sigma (docs/REPRODUCTION.md)
    rs = R.rank_sets(theta, sigma, alpha, procedure=procedure, rng=rng, n_draws=n_draws, null_draws=null)
    n_rows = int(used.sum())
    all_ids = cluster_ids(df)
    n_clusters = n_rows if all_ids is None else int(pd.Series(all_ids[used]).nunique(dropna=False))
    per_row = all_ids is None or covariance == "paper"
    if covariance == "paper":  # the paper's formula ignores prompts: say so, not "clustered by prompt"
        n_clusters = n_rows
        detail = "paper: A A^T / n^2 (the published formula, too small; reproduction only), rows independent"
    elif cl is None:
        detail = ("delta: count-normalised A A^T / (c c^T), " +
                  ("no prompt ids: each row is its own cluster" if per_row else "one comparison per prompt"))
    else:
        detail = "delta, cluster-robust by prompt: (A G)(A G)^T / (c c^T), residuals summed within each prompt"
    z = stats.norm.ppf(1 - alpha / 2)
    se = np.sqrt(np.maximum(np.diag(sigma), 0.0))
    conn = connectivity_warning(comparison_groups(first[used], second[used], models))
    warn = [AnalysisWarning(Notice.CONNECTIVITY, conn)] if conn else []
    small = None if covariance == "paper" else small_sample_warning(n_clusters)
    if small:
        warn.append(small)
    if method == "judge":
        warn.append(AnalysisWarning(Notice.JUDGE_ONLY, "judge-only rank-sets rank the JUDGE's preferences: they inherit "
                                    "its biases and need not cover the human ranking (use PPR with some human labels "
                                    "for that)"))
    out = {"models": models, "method": method,
           "theta": {m: float(t) for m, t in zip(models, theta)},
           "theta_ci": {m: [float(t - z * e), float(t + z * e)] for m, t, e in zip(models, theta, se)},
           "sigma": sigma.tolist(),
           "lambda": None if lam_out is None else float(lam_out),
           "ranksets": {m: [int(a), int(b)] for m, a, b in zip(models, rs["lower"], rs["upper"])},
           "rank": {m: int(x) for m, x in zip(models, R.rank_column(rs["lower"]))},
           "procedure": procedure, "alpha": alpha, "calibration": rs.get("calibration"),
           "covariance": covariance, "covariance_detail": detail,
           "clustering": (f"rows treated as independent ({n_rows:,} rows; the paper's covariance ignores prompt ids)"
                          if covariance == "paper" else clustering_note(n_clusters, per_row, n_rows)),
           "n_clusters": n_clusters,
           "per_row_clusters": per_row, "n": n, "N": N, "human_labels": None if human_labels is None else int(n),
           "notes": notes, "warnings": warn}
    if "critical_values" in rs:
        out["critical_values"] = [float(c) if np.isfinite(c) else None for c in
                                  (rs["critical_values"] if procedure == "maxt" else [])]
    return out


THETA_TEXT = ("theta = the model's strict win-rate against a uniformly random other model (P(its output is "
              "preferred); ties count as a non-win); interval = marginal (1 - alpha) normal interval from the "
              "covariance in use")


def parse_lambda(value: str | float) -> float | str:
    """'auto' or a number in [0, 1] (UserError otherwise)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        lam = float(value)
    except (TypeError, ValueError):
        raise UserError(f"lambda (--lambda) must be 'auto' or a number in [0, 1]; got {value!r}") from None
    if not 0.0 <= lam <= 1.0:
        raise UserError(f"lambda (--lambda) must be 'auto' or a number in [0, 1]; got {value!r}")
    return lam


def parse_alpha(value: str | float) -> float:
    """A number in (0, 1) (UserError otherwise)."""
    try:
        a = float(value)
    except (TypeError, ValueError):
        raise UserError(f"alpha must be a number in (0, 1); got {value!r}") from None
    if not 0.0 < a < 1.0:
        raise UserError(f"alpha must be in (0, 1); got {value!r}")
    return a


def pair_ids(first: np.ndarray, second: np.ndarray, k: int) -> np.ndarray:
    """Unordered pair id min(a, b) * k + max(a, b) of every comparison."""
    return np.minimum(first, second) * k + np.maximum(first, second)


def balanced_draws(pairs: np.ndarray, per_pair: int, labelled_per_pair: int, reps: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``reps`` random subsets with ``per_pair`` comparisons of every pair, the first ``labelled_per_pair`` of each labelled.

    The paper's protocol (Section 5): N + n instances with an equal number per pair, of which a
    random n (also equal per pair) get human labels. Sampling is without replacement within a
    draw.

    Args:
        pairs: (P,) pair id of every pool comparison; per_pair, labelled_per_pair: counts.
    Returns:
        idx (reps, n_pairs * per_pair) pool indices, labelled (n_pairs * per_pair,) mask (same
        for every draw: the columns are laid out pair by pair).
    """
    uniq = np.unique(pairs)
    cols, lab = [], []
    for p in uniq:
        members = np.flatnonzero(pairs == p)
        if len(members) < per_pair:
            raise UserError(f"a pair has only {len(members)} comparisons; per-pair draw size {per_pair} is too large")
        keys = rng.random((reps, len(members)))  # (reps, m): a random permutation per draw
        cols.append(members[np.argsort(keys, axis=1)[:, :per_pair]])
        lab.append(np.arange(per_pair) < labelled_per_pair)
    return np.concatenate(cols, axis=1), np.concatenate(lab)


def prompt_draws(codes: np.ndarray, total: int, labelled: int, reps: int,
                 rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """``reps`` random draws of whole prompts (clusters): prompts in random order until ``total`` rows,
    the first prompts until ``labelled`` rows human-labelled (all comparisons of a prompt stay together).

    Args:
        codes: (P,) prompt code of every pool comparison.
    Returns:
        per draw (idx, labelled mask), both of the draw's length.
    """
    C = int(codes.max()) + 1
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=C))])
    out = []
    for _ in range(reps):
        perm = rng.permutation(C)
        size = np.diff(starts)[perm]
        cum = np.cumsum(size)
        m = int(np.searchsorted(cum, total)) + 1  # prompts needed to reach ``total`` rows
        nl = int(np.searchsorted(cum, labelled)) + 1
        if nl >= m:
            raise UserError(f"n = {labelled} human-labelled rows leave no judge-only prompt in a draw of {total} rows")
        idx = np.concatenate([order[starts[c]:starts[c + 1]] for c in perm[:m]])
        lab = np.repeat(np.arange(m) < nl, size[:m])
        out.append((idx, lab))
    return out


def draws_experiment(first: np.ndarray, second: np.ndarray, human: tuple[np.ndarray, np.ndarray],
                     judges: dict[str, tuple[np.ndarray, np.ndarray]], k: int, n: int, reps: int,
                     alphas, covariance: str, rng: np.random.Generator,
                     total: int | None = None, lam: float | str = "auto", procedure: str = "chi2",
                     n_draws: int = 10_000, cluster=None) -> dict:
    """Rank-sets of every method over ``reps`` balanced random draws (paper Section 5 / Fig. 1).

    Methods: "baseline" (humans on all N + n), "human" (humans on n), and per judge J:
    "judge:J" (J on all N + n) and "ppr:J" (J on the N unlabelled + humans and J on the n).
    ``total`` = N + n (default: the largest balanced size, n_pairs x the smallest pair count).
    ``procedure``: "chi2" (Algorithm 2, the paper's experiment; default here) or "maxt" / "marginal"
    (``n_draws`` standard normals per repetition, shared by every method and alpha of that draw).

    Returns:
        {"lower"/"upper": {method: (A, reps, k) int arrays}, "lambda": {method: (reps,)},
         "N": int, "n": int} for the alphas in order.
    """
    alphas = np.atleast_1d(np.asarray(alphas, float))
    R.check_alpha(alphas)
    pairs = pair_ids(first, second, k)
    counts = np.unique(pairs, return_counts=True)[1]
    n_pairs = len(counts)
    per_pair = counts.min() if total is None else total // n_pairs
    lab_per_pair = max(1, int(round(n / n_pairs)))
    if lab_per_pair >= per_pair:
        raise UserError(f"n = {n} means {lab_per_pair} human-labelled comparisons per pair, but each draw has only "
                        f"{per_pair} per pair (N + n = {per_pair * n_pairs}; the least compared pair has "
                        f"{counts.min()}): lower n or restrict the models")
    if cluster is None:  # rows independent: the paper's balanced draws of comparisons
        idx, lab0 = balanced_draws(pairs, int(per_pair), lab_per_pair, reps, rng)
        draws = [(idx[r], lab0) for r in range(reps)]
    else:  # prompts are the unit: draw whole prompts (METHODS.md 7.2), about the same sizes
        codes = cluster_codes(cluster, first.shape[0])[0]  # a row without a prompt id is its own prompt
        draws = prompt_draws(codes, int(per_pair * n_pairs), lab_per_pair * n_pairs, reps, rng)
    out_lo: dict[str, list] = {}
    out_up: dict[str, list] = {}
    lams: dict[str, list] = {}

    if procedure not in R.PROCEDURES:
        raise UserError(f"unknown rank-set procedure {procedure!r}; allowed: {', '.join(R.PROCEDURES)}")
    normals = None

    def add(name, theta, sigma):
        if procedure == "chi2":
            lo, up = R.ranksets(theta, sigma, alphas)
        else:
            fn = R.ranksets_maxt if procedure == "maxt" else R.ranksets_marginal
            sets = [fn(theta, sigma, float(a), normals=normals) for a in alphas]
            lo = np.stack([x["lower"] for x in sets])  # (A, k)
            up = np.stack([x["upper"] for x in sets])
        out_lo.setdefault(name, []).append(lo)
        out_up.setdefault(name, []).append(up)

    w, w2 = human
    ids = None if cluster is None or covariance == "paper" else np.asarray(cluster, object)
    for sel, lab in draws:
        if procedure != "chi2":
            normals = R.maxt_normals(k, n_draws, rng)
        f, s = first[sel], second[sel]
        fl, sl, fu, su = f[lab], s[lab], f[~lab], s[~lab]
        hw, hw2 = w[sel], w2[sel]
        cs = None if ids is None else ids[sel]
        cl_l, cl_u = (None, None) if cs is None else (cs[lab], cs[~lab])
        add("baseline", *R.onesource_theta_sigma(f, s, hw, hw2, k, covariance, cluster=cs))
        add("human", *R.onesource_theta_sigma(fl, sl, hw[lab], hw2[lab], k, covariance, cluster=cl_l))
        for name, (jw, jw2) in judges.items():
            jw_s, jw2_s = jw[sel], jw2[sel]
            add(f"judge:{name}", *R.onesource_theta_sigma(f, s, jw_s, jw2_s, k, covariance, cluster=cs))
            t, sg, lm = R.ppr_theta_sigma(fu, su, jw_s[~lab], jw2_s[~lab], fl, sl, hw[lab], hw2[lab],
                                          jw_s[lab], jw2_s[lab], k, lam=lam, covariance=covariance,
                                          cluster_N=cl_u, cluster_n=cl_l)
            add(f"ppr:{name}", t, sg)
            lams.setdefault(f"ppr:{name}", []).append(lm)
    return {"lower": {m: np.stack(v, axis=1) for m, v in out_lo.items()},  # (A, reps, k)
            "upper": {m: np.stack(v, axis=1) for m, v in out_up.items()},
            "lambda": {m: np.asarray(v) for m, v in lams.items()},
            "N": int(np.mean([(~lb).sum() for _, lb in draws])), "n": int(np.mean([lb.sum() for _, lb in draws])),
            "unit": "rows (balanced per pair)" if cluster is None else "prompts (all comparisons of a prompt together)"}


def summarise_draws(res: dict, alphas) -> dict:
    """Per method and alpha: mean rank-set size, baseline intersection and coverage probability (vs same-draw BASELINE)."""
    alphas = list(np.atleast_1d(alphas))
    bl, bu = res["lower"]["baseline"], res["upper"]["baseline"]
    out = {}
    for m in res["lower"]:
        lo, up = res["lower"][m], res["upper"][m]
        out[m] = [{"alpha": float(a),
                   "size": float(R.rankset_size(lo[i], up[i]).mean()),
                   "intersection": float(R.rankset_intersects(lo[i], up[i], bl[i], bu[i]).mean()),
                   "coverage": float(R.rankset_covers(lo[i], up[i], bl[i], bu[i]).mean())}
                  for i, a in enumerate(alphas)]
    return out


def rankset_draws(df_human: pd.DataFrame, df_judge: pd.DataFrame | None = None, n: int = 990, reps: int = 200,
                  alpha: float = 0.05, covariance: str = "delta", seed: int = 0,
                  alphas=PAPER_ALPHAS, models: list[str] | None = None, total: int | None = None,
                  procedure: str = "maxt") -> dict:
    """Dashboard view of repeated draws: per-model rank-position probabilities and size-vs-intersection curves.

    ``df_human`` holds the comparisons with human labels (``human_winner``); the judge labels come
    from its ``judge_winner`` column, or from ``df_judge`` (line-aligned: same rows, same
    models; its ``judge_winner`` column). Only rows with both labels are used.

    Returns:
        {"models", "alpha", "n", "N", "covariance",
         "position_prob": {method: [[P(rank r in set of model m)]]} (k x k, at ``alpha``; paper Fig. 9),
         "rankset_prob": {method: {model: [{"lower", "upper", "prob"}, ...]}} (at ``alpha``; Fig. 10),
         "curve": {method: [{"alpha", "size", "intersection", "coverage"}, ...]}} with methods
         baseline, human, judge, ppr.
    """
    R.check_covariance(covariance)
    if df_judge is not None:
        if len(df_judge) != len(df_human) or not (
                (df_judge.model_a.to_numpy() == df_human.model_a.to_numpy()).all()
                and (df_judge.model_b.to_numpy() == df_human.model_b.to_numpy()).all()):
            raise UserError("human and judge comparisons are not line-aligned (different rows or models)")
        df = df_human.assign(judge_winner=df_judge.judge_winner.to_numpy())
    else:
        df = df_human
    df = df[df.human_winner.notna() & df.judge_winner.notna()].reset_index(drop=True)
    if df.empty:
        raise UserError("no comparison has both a human and a judge label")
    df = restrict_models(df, models)
    models = model_list(df, models)
    first, second = model_indices(df, models)
    alphas_all = sorted(set(float(a) for a in alphas) | {float(alpha)}, reverse=True)
    res = draws_experiment(first, second, win_indicators(df.human_winner), {"judge": win_indicators(df.judge_winner)},
                           len(models), n, reps, alphas_all, covariance, np.random.default_rng(seed), total,
                           procedure=procedure, cluster=cluster_ids(df))
    ai = alphas_all.index(float(alpha))
    names = {"baseline": "baseline", "human": "human", "judge:judge": "judge", "ppr:judge": "ppr"}
    curve = summarise_draws(res, alphas_all)
    return {"models": models, "alpha": float(alpha), "n": res["n"], "N": res["N"], "covariance": covariance,
            "procedure": procedure, "unit": res["unit"],
            "position_prob": {names[m]: R.rank_position_probabilities(res["lower"][m][ai], res["upper"][m][ai]).tolist()
                              for m in res["lower"]},
            "rankset_prob": {names[m]: {mod: [{"lower": lo, "upper": up, "prob": pr} for (lo, up), pr in d.items()]
                                        for mod, d in zip(models, R.rankset_distribution(res["lower"][m][ai],
                                                                                         res["upper"][m][ai]))}
                             for m in res["lower"]},
            "curve": {names[m]: v for m, v in curve.items()}}


def ranksets_view(db: str | os.PathLike, source: str, name: str, method: str, alpha: float,
                  covariance: str = "delta", models: tuple[str, ...] | None = None,
                  n_human: int | None = None, seed: int = 0, procedure: str = "maxt") -> dict:
    """Rank-sets of one method (:func:`ranksets_for`) with a table of the results, and for PPR the
    human-only rank-sets on the SAME human labels (same n, same seeded rows) to compare with.

    ``n_human``: keep the human labels of only this many random comparisons (seeded; see
    :func:`keep_human_labels`); None = every human label (PPR on rows that all carry both labels:
    the default of :func:`ranksets_for`).

    Returns:
        {"result": ranksets_for dict, "table": model, rank, lower, upper, theta, theta_low,
         theta_high (best first), "compare": the same columns + method for PPR and human-only (PPR
         only, else None), "counts": {method: {"n": human labels used, "N": judge-only rows}}}.
    """
    df = ranking_comparisons(db, source, name)
    if models:
        df = df[df.model_a.isin(models) & df.model_b.isin(models)].reset_index(drop=True)
    mlist = list(models) if models else None
    kw = dict(covariance=covariance, models=mlist, procedure=procedure, seed=seed)
    res = ranksets_for(df, method, alpha, human_labels=n_human if method != "judge" else None, **kw)
    results = {method: res}
    if method == "ppr":
        results["human"] = ranksets_for(df, "human", alpha, human_labels=res["n"], **kw)

    def table(r):
        return pd.DataFrame([{"model": m, "rank": r["rank"][m], "lower": lo, "upper": up, "theta": r["theta"][m],
                              "theta_low": r["theta_ci"][m][0], "theta_high": r["theta_ci"][m][1]}
                             for m, (lo, up) in r["ranksets"].items()]).sort_values(
            ["lower", "upper", "theta"], ascending=[True, True, False]).reset_index(drop=True)

    main = table(res)
    compare = None
    if len(results) > 1:
        names = {"ppr": f"PPR (n = {res['n']:,} human + N = {res['N']:,} judge-only)",
                 "human": f"human only (the same n = {results['human']['n']:,} human labels)"}
        order = main["model"].tolist()
        compare = pd.concat([table(r).set_index("model").loc[order].reset_index().assign(method=names[m])
                             for m, r in results.items()], ignore_index=True)
    return {"result": res, "table": main, "compare": compare,
            "counts": {m: {"n": r["n"], "N": r["N"]} for m, r in results.items()}}


def rankset_draws_view(db: str | os.PathLike, source: str, name: str, n: int, reps: int, alpha: float,
                       covariance: str = "delta", seed: int = 0, models: tuple[str, ...] | None = None,
                       procedure: str = "maxt") -> dict:
    """Repeated draws (:func:`rankset_draws`): rank-position probabilities per method and
    the size vs baseline-intersection curve as a long table (method, alpha, size, intersection, coverage)."""
    df = ranking_comparisons(db, source, name)
    res = rankset_draws(df, n=int(n), reps=int(reps), alpha=float(alpha), covariance=covariance,
                        seed=int(seed), models=list(models) if models else None, procedure=procedure)
    curve = pd.DataFrame([{"method": m, **pt} for m, pts in res["curve"].items() for pt in pts])
    return {"result": res, "curve": curve}
