"""Analysis layer of rank-sets: stored data -> engine.stats -> a frozen result.

Rank-sets with a 1 - alpha coverage guarantee from human labels, judge labels, or both (PPR).

Chatzi et al., "Prediction-Powered Ranking of Large Language Models", NeurIPS 2024: Algorithm 1
(PPR), Algorithm 3 (one source), Algorithm 4 (the trace-optimal lambda), Section 5 (repeated
balanced draws, Fig. 1, 3, 9, 10).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

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
from engine.analysis.rankset_draws import (  # noqa: E402,F401  (re-exported: the repeated draws live there)
    PAPER_ALPHAS,
    CurvePoint,
    DrawsExperiment,
    DrawsSummary,
    RankSetDraws,
    RankSetDrawsView,
    RankSetProb,
    balanced_draws,
    draws_experiment,
    pair_ids,
    prompt_draws,
    rankset_draws,
    rankset_draws_view,
    summarise_draws,
)
from engine.analysis.result_base import ToDict
from engine.config import PPR_DEFAULT_HUMAN_LABELS
from engine.config import RANK_METHODS as METHODS
from engine.errors import UserError
from engine.stats import ranking as R


@dataclass(frozen=True)
class RankSets:
    """Rank-sets of one method (:func:`ranksets_for`); ``to_dict()`` gives the ``ranksets --json`` keys
    (``lam`` is written as "lambda"; ``critical_values`` only for max-t / marginal)."""

    models: list[str]
    method: str
    theta: dict[str, float]  # strict win-rate against a uniformly random other model
    theta_ci: dict[str, list[float]]  # marginal (1 - alpha) normal interval from the covariance in use
    sigma: list[list[float]]
    lam: float | None  # PPR's lambda
    ranksets: dict[str, list[int]]  # [lower, upper], rank 1 = best
    rank: dict[str, int]  # lower end of the rank-set
    procedure: str
    alpha: float
    calibration: str | None  # max-t critical value: "wild" (bootstrap-t) | "normal"; None for chi2
    covariance: str
    covariance_detail: str
    clustering: str
    n_clusters: int
    per_row_clusters: bool
    n: int  # human-labelled comparisons used
    N: int  # judge-only comparisons used
    human_labels: int | None
    notes: list[str]
    warnings: list[AnalysisWarning]
    critical_values: list[float | None] | None = None

    def to_dict(self) -> dict:
        d = {("lambda" if f.name == "lam" else f.name): getattr(self, f.name) for f in fields(self)}
        if d["critical_values"] is None:
            del d["critical_values"]
        return d


@dataclass(frozen=True)
class LabelCounts(ToDict):
    """The comparisons a method used: ``n`` with a human label, ``N`` judge-only."""

    n: int
    N: int


@dataclass(frozen=True)
class RankSetsView:
    """The Rank-sets page's first tab (:func:`ranksets_view`): the chosen method's :class:`RankSets`,
    its table (model, rank, lower, upper, theta, theta_low, theta_high; best first), for PPR the same
    columns + method for PPR and human-only on the same human labels (``compare``; None otherwise), and
    the labels each method used (``counts``, keyed by method)."""

    result: RankSets
    table: pd.DataFrame
    compare: pd.DataFrame | None
    counts: dict[str, LabelCounts]


def _keep_human_labels(
    df: pd.DataFrame, method: str, human_labels: int | None, seed: int
) -> tuple[pd.DataFrame, int | None, list[str]]:
    """Apply ``human_labels`` (or PPR's default when every row carries both labels); the notes say what
    was kept."""
    notes: list[str] = []
    has_h = df.human_winner.notna().to_numpy()
    has_j = df.judge_winner.notna().to_numpy()
    if (
        human_labels is None
        and method == "ppr"
        and has_h.any()
        and not (has_j & ~has_h).any()
        and has_h.sum() > PPR_DEFAULT_HUMAN_LABELS
    ):
        human_labels = PPR_DEFAULT_HUMAN_LABELS
        notes.append(
            f"every comparison carries a human label: kept the human labels of {human_labels:,} random "
            f"comparisons (seed {seed}; the paper's setting; change with --human-labels), the other "
            f"{int(has_h.sum()) - human_labels:,} are judge-only"
        )
    if human_labels is not None:
        if int(human_labels) < 1:
            raise UserError(f"--human-labels must be >= 1; got {human_labels}")
        if int(human_labels) < int(has_h.sum()):
            df = keep_human_labels(df, int(human_labels), seed)
        elif not notes:
            notes.append(
                f"{int(human_labels):,} human labels asked for (--human-labels): all "
                f"{int(has_h.sum()):,} available are kept"
            )
    return df, human_labels, notes


def _ppr_inputs(
    df: pd.DataFrame, has_h: np.ndarray, has_j: np.ndarray, models: list[str], first, second
):
    """PPR's labelled (human + judge) and unlabelled (judge-only) sets, checked."""
    bad = has_h & ~has_j
    if bad.any():
        rows_txt = ", ".join(str(i + 1) for i in np.flatnonzero(bad)[:10])
        raise UserError(
            f"PPR needs a judge label on every human-labelled comparison; {int(bad.sum())} "
            f"have none (rows {rows_txt}{' ...' if bad.sum() > 10 else ''})"
        )
    lab, unl = has_h, has_j & ~has_h
    if not lab.any() or not unl.any():
        raise UserError(
            f"PPR needs human-labelled comparisons (found {int(lab.sum())}) and comparisons "
            f"labelled by the judge only (found {int(unl.sum())}); when every row has both labels, "
            "keep some human labels with --human-labels N"
        )
    require_models(models, first[lab], second[lab], "labelled set (human labels)")
    require_models(models, first[unl], second[unl], "unlabelled set (judge-only labels)")
    return lab, unl


def _covariance_detail(covariance: str, clustered: bool, per_row: bool) -> str:
    if covariance == "paper":
        return (
            "paper: A A^T / n^2 (the published formula, too small; reproduction only), rows independent"
        )
    if not clustered:
        return "delta: count-normalised A A^T / (c c^T), " + (
            "no prompt ids: each row is its own cluster" if per_row else "one comparison per prompt"
        )
    return "delta, cluster-robust by prompt: (A G)(A G)^T / (c c^T), residuals summed within each prompt"


def _estimate(
    df: pd.DataFrame,
    method: str,
    models: list[str],
    first,
    second,
    cl,
    covariance: str,
    lam,
    n_draws: int,
):
    """theta, Sigma (and lambda) of Algorithm 3 or PPR; n, N, the rows used, and a function giving
    the wild bootstrap-t null draws of the same estimator."""
    k = len(models)
    has_h = df.human_winner.notna().to_numpy()
    has_j = df.judge_winner.notna().to_numpy()
    lam_out = None
    if method in ("human", "judge"):
        rows = has_h if method == "human" else has_j
        if not rows.any():
            other = "judge" if method == "human" else "human"
            hint = (
                f"; they have {other} labels only: use those (--method {other})"
                if (has_j if method == "human" else has_h).any()
                else ""
            )
            raise UserError(f"no comparison has a {method} label{hint}")
        col = "human_winner" if method == "human" else "judge_winner"
        w, w2 = win_indicators(df[col][rows])
        require_models(models, first[rows], second[rows], f"{method}-labelled comparisons")
        theta, sigma = R.onesource_theta_sigma(
            first[rows], second[rows], w, w2, k, covariance, cluster=None if cl is None else cl[rows]
        )
        n, N = (int(rows.sum()), 0) if method == "human" else (0, int(rows.sum()))
        used = rows
        wild = lambda rng: R.wild_draws_onesource(
            first[rows], second[rows], w, w2, k, None if cl is None else cl[rows], rng, n_draws
        )
    else:
        lab, unl = _ppr_inputs(df, has_h, has_j, models, first, second)
        w, w2 = win_indicators(df.human_winner[lab])
        wh, wh2 = win_indicators(df.judge_winner[lab])
        whN, wh2N = win_indicators(df.judge_winner[unl])
        theta, sigma, lam_out = R.ppr_theta_sigma(
            first[unl],
            second[unl],
            whN,
            wh2N,
            first[lab],
            second[lab],
            w,
            w2,
            wh,
            wh2,
            k,
            lam=lam,
            covariance=covariance,
            cluster_N=None if cl is None else cl[unl],
            cluster_n=None if cl is None else cl[lab],
        )
        n, N = int(lab.sum()), int(unl.sum())
        used = lab | unl
        wild = lambda rng: R.wild_draws_ppr(
            first[unl],
            second[unl],
            whN,
            wh2N,
            first[lab],
            second[lab],
            w,
            w2,
            wh,
            wh2,
            k,
            float(lam_out),
            None if cl is None else cl[unl],
            None if cl is None else cl[lab],
            rng,
            n_draws,
        )
    return theta, sigma, lam_out, n, N, used, wild


def _warnings(
    method: str, covariance: str, n_clusters: int, connectivity: str | None
) -> list[AnalysisWarning]:
    warn = [AnalysisWarning(Notice.CONNECTIVITY, connectivity)] if connectivity else []
    small = None if covariance == "paper" else small_sample_warning(n_clusters)
    if small:
        warn.append(small)
    if method == "judge":
        warn.append(
            AnalysisWarning(
                Notice.JUDGE_ONLY,
                "judge-only rank-sets rank the JUDGE's preferences: they inherit "
                "its biases and need not cover the human ranking (use PPR with some human labels "
                "for that)",
            )
        )
    return warn


def ranksets_for(
    df: pd.DataFrame,
    method: str,
    alpha: float,
    covariance: str = "delta",
    lam: float | str = "auto",
    models: list[str] | None = None,
    procedure: str = "maxt",
    seed: int = 0,
    human_labels: int | None = None,
    n_draws: int = 10_000,
) -> RankSets:
    """Rank-sets of one method on a comparisons DataFrame, as the ``ranksets`` CLI JSON.

    method "human" / "judge": Algorithm 3 on the rows with that label. "ppr": Algorithm 1 with
    D_n = rows with a human label (they also need a judge label) and D_N = rows with only a judge
    label. ``human_labels`` = N keeps the human labels of N random rows (seeded by ``seed``), the
    others become judge-only; for PPR on data where every row carries both labels (the Arena
    files) the default is ``config.PPR_DEFAULT_HUMAN_LABELS`` (the paper's setting), said in
    ``notes``. Covariance "delta" is cluster-robust by prompt when the rows carry prompt ids
    (docs/METHODS.md 7.3: residual columns summed within a prompt). Rank-sets by ``procedure``:
    "maxt" (simultaneous max-t step-down, default; ``n_draws`` normal draws seeded by ``seed``),
    "marginal", or "chi2" (the paper's Algorithm 2).

    Returns:
        :class:`RankSets` (``to_dict()`` is the CLI's JSON).
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
    df, human_labels, notes = _keep_human_labels(df, method, human_labels, seed)
    first, second = model_indices(df, models)
    cl = cluster_ids(df)
    if cl is not None and pd.Series(cl).value_counts().max() == 1:
        cl = None  # one comparison per prompt: the clustered formula IS the plain one (kept bit-exact)
    if covariance == "paper":
        cl = None
    theta, sigma, lam_out, n, N, used, wild = _estimate(
        df, method, models, first, second, cl, covariance, lam, n_draws
    )
    rng = np.random.default_rng(seed)
    null, n_cl = None, int(used.sum()) if cl is None else int(pd.Series(cl[used]).nunique())
    if (
        procedure != "chi2"
        and covariance == "delta"
        and n_cl <= R.WILD_MAX_CLUSTERS
        and k <= R.WILD_MAX_MODELS
    ):
        null = wild(
            np.random.default_rng([seed, 3])
        )  # small C: calibrate for estimating Sigma (docs/REPRODUCTION.md)
    rs = R.rank_sets(theta, sigma, alpha, procedure=procedure, rng=rng, n_draws=n_draws, null_draws=null)
    n_rows = int(used.sum())
    all_ids = cluster_ids(df)
    n_clusters = n_rows if all_ids is None else int(pd.Series(all_ids[used]).nunique(dropna=False))
    per_row = all_ids is None or covariance == "paper"
    if covariance == "paper":  # the paper's formula ignores prompts: say so, not "clustered by prompt"
        n_clusters = n_rows
    detail = _covariance_detail(covariance, cl is not None, per_row)
    z = stats.norm.ppf(1 - alpha / 2)
    se = np.sqrt(np.maximum(np.diag(sigma), 0.0))
    warn = _warnings(
        method,
        covariance,
        n_clusters,
        connectivity_warning(comparison_groups(first[used], second[used], models)),
    )
    crit = None
    if "critical_values" in rs:
        crit = [
            float(c) if np.isfinite(c) else None
            for c in (rs["critical_values"] if procedure == "maxt" else [])
        ]
    return RankSets(
        models=models,
        method=method,
        theta={m: float(t) for m, t in zip(models, theta)},
        theta_ci={m: theta_interval(float(t), float(z * e)) for m, t, e in zip(models, theta, se)},
        sigma=sigma.tolist(),
        lam=None if lam_out is None else float(lam_out),
        ranksets={m: [int(a), int(b)] for m, a, b in zip(models, rs["lower"], rs["upper"])},
        rank={m: int(x) for m, x in zip(models, R.rank_column(rs["lower"]))},
        procedure=procedure,
        alpha=alpha,
        calibration=rs.get("calibration"),
        covariance=covariance,
        covariance_detail=detail,
        clustering=(
            f"rows treated as independent ({n_rows:,} rows; the paper's covariance ignores prompt ids)"
            if covariance == "paper"
            else clustering_note(n_clusters, per_row, n_rows)
        ),
        n_clusters=n_clusters,
        per_row_clusters=per_row,
        n=n,
        N=N,
        human_labels=None if human_labels is None else int(n),
        notes=notes,
        warnings=warn,
        critical_values=crit,
    )


def theta_interval(theta: float, half: float) -> list[float]:
    """The marginal interval θ̂ ± half of a win-rate, intersected with [0, 1]: θ is a probability, so
    the intersection covers it exactly when the interval did (coverage unchanged). PPR's θ̂ = a − b
    (a judge estimate minus a rectifier) can itself leave [0, 1] with few labels; it is left as it is
    (unbiased), and an interval wholly outside [0, 1] becomes the nearest end, [0, 0] or [1, 1]."""
    return [min(max(theta - half, 0.0), 1.0), max(min(theta + half, 1.0), 0.0)]


THETA_TEXT = (
    "theta = the model's strict win-rate against a uniformly random other model (P(its output is "
    "preferred); ties count as a non-win); interval = marginal (1 - alpha) normal interval from the "
    "covariance in use, intersected with [0, 1] (theta is a probability)"
)


def parse_lambda(value: str | float) -> float | str:
    """'auto' or a number in [0, 1] (UserError otherwise)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        lam = float(value)
    except (TypeError, ValueError):
        raise UserError(
            f"lambda (--lambda) must be 'auto' or a number in [0, 1]; got {value!r}"
        ) from None
    if not 0.0 <= lam <= 1.0:
        raise UserError(f"lambda (--lambda) must be 'auto' or a number in [0, 1]; got {value!r}")
    return lam


def parse_alpha(value: str | float) -> float:
    """A number in (0, 1) (UserError otherwise): :func:`engine.stats.maxt.check_alpha`."""
    return float(R.check_alpha(value))


def ranksets_view(
    db: str | os.PathLike,
    source: str,
    name: str,
    method: str,
    alpha: float,
    covariance: str = "delta",
    models: tuple[str, ...] | None = None,
    n_human: int | None = None,
    seed: int = 0,
    procedure: str = "maxt",
    judge: str | None = None,
    mode: str | None = None,
) -> RankSetsView:
    """Rank-sets of one method (:func:`ranksets_for`) with a table of the results, and for PPR the
    human-only rank-sets on the SAME human labels (same n, same seeded rows) to compare with.

    ``n_human``: keep the human labels of only this many random comparisons (seeded; see
    :func:`keep_human_labels`); None = every human label (PPR on rows that all carry both labels:
    the default of :func:`ranksets_for`).

    ``judge`` and ``mode``: source 'judgments' only (the run's verdicts by that judge in that mode).

    Returns:
        :class:`RankSetsView`.
    """
    df = ranking_comparisons(db, source, name, judge, mode)
    if models:
        df = df[df.model_a.isin(models) & df.model_b.isin(models)].reset_index(drop=True)
    mlist = list(models) if models else None
    res = ranksets_for(
        df,
        method,
        alpha,
        covariance=covariance,
        models=mlist,
        procedure=procedure,
        seed=seed,
        human_labels=n_human if method != "judge" else None,
    )
    results = {method: res}
    if method == "ppr":
        results["human"] = ranksets_for(
            df,
            "human",
            alpha,
            covariance=covariance,
            models=mlist,
            procedure=procedure,
            seed=seed,
            human_labels=res.n,
        )

    def table(r: RankSets) -> pd.DataFrame:
        return (
            pd.DataFrame(
                [
                    {
                        "model": m,
                        "rank": r.rank[m],
                        "lower": lo,
                        "upper": up,
                        "theta": r.theta[m],
                        "theta_low": r.theta_ci[m][0],
                        "theta_high": r.theta_ci[m][1],
                    }
                    for m, (lo, up) in r.ranksets.items()
                ]
            )
            .sort_values(["lower", "upper", "theta"], ascending=[True, True, False])
            .reset_index(drop=True)
        )

    main = table(res)
    compare = None
    if len(results) > 1:
        names = {
            "ppr": f"PPR (n = {res.n:,} human + N = {res.N:,} judge-only)",
            "human": f"human only (the same n = {results['human'].n:,} human labels)",
        }
        order = main["model"].tolist()
        compare = pd.concat(
            [
                table(r).set_index("model").loc[order].reset_index().assign(method=names[m])
                for m, r in results.items()
            ],
            ignore_index=True,
        )
    return RankSetsView(
        result=res,
        table=main,
        compare=compare,
        counts={m: LabelCounts(n=r.n, N=r.N) for m, r in results.items()},
    )
