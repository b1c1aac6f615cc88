"""Repeated draws of rank-sets (Chatzi et al., Section 5, Fig. 1, 3, 9, 10): the Rank-sets page's
"Repeated draws" tab. With prompt ids each draw takes whole prompts (docs/METHODS.md 7.2), otherwise the
paper's balanced draws of rows.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from engine.analysis.comparisons import (
    cluster_ids,
    model_indices,
    model_list,
    ranking_comparisons,
    restrict_models,
    win_indicators,
)
from engine.analysis.result_base import ToDict
from engine.errors import UserError
from engine.stats import ranking as R
from engine.stats.clusters import cluster_codes

# the paper's alpha grid (Appendix D, footnote 8)
PAPER_ALPHAS = (0.4, 0.3, 0.25, 0.2, 0.15, 0.1, 0.075, 0.05, 0.025, 0.01)


@dataclass(frozen=True)
class RankSetProb(ToDict):
    """One rank-set [lower, upper] of a model and how often the draws gave it (paper Fig. 10)."""

    lower: int
    upper: int
    prob: float


@dataclass(frozen=True)
class CurvePoint(ToDict):
    """One method at one alpha over the draws: mean rank-set size, and how often its sets intersect /
    cover the same draw's baseline sets (:func:`summarise_draws`)."""

    alpha: float
    size: float
    intersection: float
    coverage: float


@dataclass(frozen=True)
class DrawsExperiment(ToDict):
    """:func:`draws_experiment`'s rank-sets, keyed by method (baseline, human, judge:J, ppr:J), for its
    alphas in order: ``lower`` / ``upper`` (A, reps, k) int arrays, ``lam`` the PPR lambda of each
    draw (reps,), ``N`` / ``n`` the mean judge-only / human-labelled rows per draw, ``unit`` what a
    draw resamples. ``to_dict()`` gives the arrays as nested lists."""

    lower: dict[str, np.ndarray]
    upper: dict[str, np.ndarray]
    lam: dict[str, np.ndarray]
    N: int
    n: int
    unit: str

    def to_dict(self) -> dict:
        return {
            "lower": {m: v.tolist() for m, v in self.lower.items()},
            "upper": {m: v.tolist() for m, v in self.upper.items()},
            "lambda": {m: v.tolist() for m, v in self.lam.items()},
            "N": self.N,
            "n": self.n,
            "unit": self.unit,
        }


@dataclass(frozen=True)
class DrawsSummary(ToDict):
    """:func:`summarise_draws`: per method, one :class:`CurvePoint` per alpha (in the given order)."""

    curve: dict[str, list[CurvePoint]]


@dataclass(frozen=True)
class RankSetDraws(ToDict):
    """Repeated draws of rank-sets (:func:`rankset_draws`), keyed by method (baseline, human, judge,
    ppr).

    ``position_prob[method]``: (k, k) P(rank position r in the rank-set of model m) at ``alpha`` (paper
    Fig. 9); ``rankset_prob[method][model]``: the distribution of that model's rank-sets (Fig. 10);
    ``curve[method]``: one :class:`CurvePoint` per alpha (descending)."""

    models: list[str]
    alpha: float
    n: int  # mean human-labelled rows per draw
    N: int  # mean judge-only rows per draw
    covariance: str
    procedure: str
    unit: str  # what a draw resamples (rows balanced per pair, or whole prompts)
    position_prob: dict[str, list[list[float]]]
    rankset_prob: dict[str, dict[str, list[RankSetProb]]]
    curve: dict[str, list[CurvePoint]]


@dataclass(frozen=True)
class RankSetDrawsView:
    """The Rank-sets page's "Repeated draws" tab: the draws and their curves as one long table
    (method, alpha, size, intersection, coverage)."""

    result: RankSetDraws
    curve: pd.DataFrame


def pair_ids(first: np.ndarray, second: np.ndarray, k: int) -> np.ndarray:
    """Unordered pair id min(a, b) * k + max(a, b) of every comparison."""
    return np.minimum(first, second) * k + np.maximum(first, second)


def balanced_draws(
    pairs: np.ndarray, per_pair: int, labelled_per_pair: int, reps: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``reps`` random subsets with ``per_pair`` comparisons of every pair, the first
    ``labelled_per_pair`` of each labelled.

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
            raise UserError(
                f"a pair has only {len(members)} comparisons; per-pair draw size {per_pair} is too large"
            )
        keys = rng.random((reps, len(members)))  # (reps, m): a random permutation per draw
        cols.append(members[np.argsort(keys, axis=1)[:, :per_pair]])
        lab.append(np.arange(per_pair) < labelled_per_pair)
    return np.concatenate(cols, axis=1), np.concatenate(lab)


def prompt_draws(
    codes: np.ndarray, total: int, labelled: int, reps: int, rng: np.random.Generator
) -> list[tuple[np.ndarray, np.ndarray]]:
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
            raise UserError(
                f"n = {labelled} human-labelled rows leave no judge-only prompt in a draw of {total} "
                "rows"
            )
        idx = np.concatenate([order[starts[c] : starts[c + 1]] for c in perm[:m]])
        lab = np.repeat(np.arange(m) < nl, size[:m])
        out.append((idx, lab))
    return out


def draws_experiment(
    first: np.ndarray,
    second: np.ndarray,
    human: tuple[np.ndarray, np.ndarray],
    judges: dict[str, tuple[np.ndarray, np.ndarray]],
    k: int,
    n: int,
    reps: int,
    alphas,
    covariance: str,
    rng: np.random.Generator,
    total: int | None = None,
    lam: float | str = "auto",
    procedure: str = "chi2",
    n_draws: int = 10_000,
    cluster=None,
) -> DrawsExperiment:
    """Rank-sets of every method over ``reps`` balanced random draws (paper Section 5 / Fig. 1).

    Methods: "baseline" (humans on all N + n), "human" (humans on n), and per judge J:
    "judge:J" (J on all N + n) and "ppr:J" (J on the N unlabelled + humans and J on the n).
    ``total`` = N + n (default: the largest balanced size, n_pairs x the smallest pair count).
    ``procedure``: "chi2" (Algorithm 2, the paper's experiment; default here) or "maxt" / "marginal"
    (``n_draws`` standard normals per repetition, shared by every method and alpha of that draw).

    Returns:
        :class:`DrawsExperiment` (lower / upper: {method: (A, reps, k) int arrays}, lam: {method:
        (reps,)}, N, n, unit) for the alphas in order.
    """
    alphas = np.atleast_1d(np.asarray(alphas, float))
    R.check_alpha(alphas)
    pairs = pair_ids(first, second, k)
    counts = np.unique(pairs, return_counts=True)[1]
    n_pairs = len(counts)
    per_pair = counts.min() if total is None else total // n_pairs
    lab_per_pair = max(1, int(round(n / n_pairs)))
    if lab_per_pair >= per_pair:
        raise UserError(
            f"n = {n} means {lab_per_pair} human-labelled comparisons per pair, but each draw has only "
            f"{per_pair} per pair (N + n = {per_pair * n_pairs}; the least compared pair has "
            f"{counts.min()}): lower n or restrict the models"
        )
    if cluster is None:  # rows independent: the paper's balanced draws of comparisons
        idx, lab0 = balanced_draws(pairs, int(per_pair), lab_per_pair, reps, rng)
        draws = [(idx[r], lab0) for r in range(reps)]
    else:  # prompts are the unit: draw whole prompts (docs/METHODS.md 7.2), about the same sizes
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
            t, sg, lm = R.ppr_theta_sigma(
                fu,
                su,
                jw_s[~lab],
                jw2_s[~lab],
                fl,
                sl,
                hw[lab],
                hw2[lab],
                jw_s[lab],
                jw2_s[lab],
                k,
                lam=lam,
                covariance=covariance,
                cluster_N=cl_u,
                cluster_n=cl_l,
            )
            add(f"ppr:{name}", t, sg)
            lams.setdefault(f"ppr:{name}", []).append(lm)
    return DrawsExperiment(
        lower={m: np.stack(v, axis=1) for m, v in out_lo.items()},  # (A, reps, k)
        upper={m: np.stack(v, axis=1) for m, v in out_up.items()},
        lam={m: np.asarray(v) for m, v in lams.items()},
        N=int(np.mean([(~lb).sum() for _, lb in draws])),
        n=int(np.mean([lb.sum() for _, lb in draws])),
        unit="rows (balanced per pair)"
        if cluster is None
        else "prompts (all comparisons of a prompt together)",
    )


def summarise_draws(res: DrawsExperiment, alphas) -> DrawsSummary:
    """Per method and alpha: mean rank-set size, baseline intersection and coverage probability (vs
    same-draw BASELINE)."""
    alphas = list(np.atleast_1d(alphas))
    bl, bu = res.lower["baseline"], res.upper["baseline"]
    out = {}
    for m in res.lower:
        lo, up = res.lower[m], res.upper[m]
        out[m] = [
            CurvePoint(
                alpha=float(a),
                size=float(R.rankset_size(lo[i], up[i]).mean()),
                intersection=float(R.rankset_intersects(lo[i], up[i], bl[i], bu[i]).mean()),
                coverage=float(R.rankset_covers(lo[i], up[i], bl[i], bu[i]).mean()),
            )
            for i, a in enumerate(alphas)
        ]
    return DrawsSummary(curve=out)


def rankset_draws(
    df_human: pd.DataFrame,
    df_judge: pd.DataFrame | None = None,
    n: int = 990,
    reps: int = 200,
    alpha: float = 0.05,
    covariance: str = "delta",
    seed: int = 0,
    alphas=PAPER_ALPHAS,
    models: list[str] | None = None,
    total: int | None = None,
    procedure: str = "maxt",
) -> RankSetDraws:
    """Dashboard view of repeated draws: per-model rank-position probabilities and size-vs-intersection
    curves.

    ``df_human`` holds the comparisons with human labels (``human_winner``); the judge labels come
    from its ``judge_winner`` column, or from ``df_judge`` (line-aligned: same rows, same
    models; its ``judge_winner`` column). Only rows with both labels are used.

    Returns:
        :class:`RankSetDraws` with methods baseline, human, judge, ppr.
    """
    R.check_covariance(covariance)
    if df_judge is not None:
        if len(df_judge) != len(df_human) or not (
            (df_judge.model_a.to_numpy() == df_human.model_a.to_numpy()).all()
            and (df_judge.model_b.to_numpy() == df_human.model_b.to_numpy()).all()
        ):
            raise UserError(
                "human and judge comparisons are not line-aligned (different rows or models)"
            )
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
    res = draws_experiment(
        first,
        second,
        win_indicators(df.human_winner),
        {"judge": win_indicators(df.judge_winner)},
        len(models),
        n,
        reps,
        alphas_all,
        covariance,
        np.random.default_rng(seed),
        total,
        procedure=procedure,
        cluster=cluster_ids(df),
    )
    ai = alphas_all.index(float(alpha))
    names = {"baseline": "baseline", "human": "human", "judge:judge": "judge", "ppr:judge": "ppr"}
    curve = summarise_draws(res, alphas_all).curve
    return RankSetDraws(
        models=models,
        alpha=float(alpha),
        n=res.n,
        N=res.N,
        covariance=covariance,
        procedure=procedure,
        unit=res.unit,
        position_prob={
            names[m]: R.rank_position_probabilities(res.lower[m][ai], res.upper[m][ai]).tolist()
            for m in res.lower
        },
        rankset_prob={
            names[m]: {
                mod: [RankSetProb(lower=lo, upper=up, prob=pr) for (lo, up), pr in d.items()]
                for mod, d in zip(models, R.rankset_distribution(res.lower[m][ai], res.upper[m][ai]))
            }
            for m in res.lower
        },
        curve={names[m]: v for m, v in curve.items()},
    )


def rankset_draws_view(
    db: str | os.PathLike,
    source: str,
    name: str,
    n: int,
    reps: int,
    alpha: float,
    covariance: str = "delta",
    seed: int = 0,
    models: tuple[str, ...] | None = None,
    procedure: str = "maxt",
) -> RankSetDrawsView:
    """Repeated draws (:func:`rankset_draws`): rank-position probabilities per method and the size vs
    baseline-intersection curve as a long table (method, alpha, size, intersection, coverage)."""
    df = ranking_comparisons(db, source, name)
    res = rankset_draws(
        df,
        n=int(n),
        reps=int(reps),
        alpha=float(alpha),
        covariance=covariance,
        seed=int(seed),
        models=list(models) if models else None,
        procedure=procedure,
    )
    curve = pd.DataFrame([{"method": m, **asdict(pt)} for m, pts in res.curve.items() for pt in pts])
    return RankSetDrawsView(result=res, curve=curve)
