"""Analysis layer of accuracy rank-sets: stored data -> engine.stats -> a frozen result.

Accuracy rank-sets over k models from per-question scores: "which model is really best on this
benchmark", with the uncertainty that leaderboards leave out.

theta_m = mean over questions of model m's mean score over repeats (the accuracy); questions are the
clusters (repeats of one question are dependent; different questions independent), so with the
(Q, k) matrix M of per-question means, Sigma = Cov(M) / Q (sample covariance over questions, ddof 1)
estimates Cov(theta_hat) including the correlation between models answering the same questions.
Rank-sets: simultaneous max-t with step-down (engine.stats.ranking.ranksets_maxt; docs/METHODS.md
7.3): P(every model's true rank lies in its set) >= 1 - alpha, asymptotically in Q. The critical
value comes from the wild cluster bootstrap-t over questions (engine.stats.maxt.wild_draws_means),
as for the win-rate rank-sets: the normal draws, which treat Sigma as known, under-cover with few
questions (4 tied models, 40 questions: 0.941 at nominal 0.95 and 0.886 at 0.90, 2 MC SE below;
the wild calibration 0.948 / 0.905: docs/REPRODUCTION.md, "Accuracy rank-sets with few questions").

Works on any scored run, imported harness runs included (their scores are the harness's own).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from scipy import stats as _st

from engine.analysis.stats_records import PairedDiff
from engine.errors import UserError
from engine.stats.maxt import CALIBRATIONS, WILD_MAX_CLUSTERS, WILD_MAX_MODELS, wild_draws_means
from engine.stats.multigen import proportion_interval
from engine.stats.ranking import ranksets_maxt
from engine.store.scores import imported_facts, per_question_scores, question_means

LEVEL = 0.95


@dataclass(frozen=True)
class ModelAccuracy:
    model: str
    accuracy: float
    ci_low: float  # t interval over questions (questions as clusters), clipped to [0, 1]
    ci_high: float
    se: float
    rank_low: int  # rank-set [rank_low, rank_high], 1 = best
    rank_high: int
    harness_accuracy: float | None  # what the harness reported (imported runs), else None


@dataclass(frozen=True)
class AccuracyRankSets:
    run: str
    mode: str
    alpha: float
    n_questions: int
    n_repeats: int
    n_draws: int
    seed: int
    critical_values: tuple[float, ...]
    models: tuple[ModelAccuracy, ...]  # sorted by accuracy, best first
    imported: bool
    calibration: str = "wild"  # max-t critical value: "wild" (bootstrap-t over questions) | "normal"

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "mode": self.mode,
            "alpha": self.alpha,
            "n_questions": self.n_questions,
            "n_repeats": self.n_repeats,
            "n_draws": self.n_draws,
            "seed": self.seed,
            "critical_values": list(self.critical_values),
            "calibration": self.calibration,
            "imported": self.imported,
            "models": [vars(m).copy() for m in self.models],
        }

    def frame(self):
        """One row per model (best first): accuracy, CI, rank-set and the harness's number when
        imported."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "model": m.model,
                    "accuracy": m.accuracy,
                    "ci_low": m.ci_low,
                    "ci_high": m.ci_high,
                    "rank-set": f"[{m.rank_low}, {m.rank_high}]",
                    **({"harness reported": m.harness_accuracy} if self.imported else {}),
                }
                for m in self.models
            ]
        )

    def figure_frame(self):
        """:meth:`frame` with each rank-set's ends as numbers (lower, upper), as the rank-set figures
        read them."""
        return self.frame().assign(
            lower=[m.rank_low for m in self.models], upper=[m.rank_high for m in self.models]
        )


def per_question_matrix(
    db: str | os.PathLike, run: str, mode: str | None = None, rule: str | None = None
) -> tuple[list[str], np.ndarray, int, str]:
    """(models, M (Q, k) per-question mean scores on the questions every model has, repeats, mode)."""
    df = per_question_scores(db, run, rule)
    if df.empty:
        raise UserError(f"run {run!r} has no scores")
    modes = sorted(df["mode"].unique())
    mode = mode or ("coupled" if "coupled" in modes else modes[0])
    if mode not in modes:
        raise UserError(f"run {run!r} has no {mode!r} scores; modes: {', '.join(modes)}")
    df = df[df["mode"] == mode]
    wide = question_means(df).dropna()
    return [str(c) for c in wide.columns], wide.to_numpy(dtype=float), int(df["repeat"].nunique()), mode


def rank_accuracies(
    M: np.ndarray,
    alpha: float,
    rng: np.random.Generator,
    n_draws: int = 10_000,
    calibration: str | None = None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """theta = column means of M (Q, k); Sigma = Cov(M) / Q (questions as clusters); max-t rank-sets.

    ``calibration``: "wild" (the wild cluster bootstrap-t over questions, Sigma re-estimated per
    draw: covers with few questions) or "normal" (Z ~ N(0, Sigma), METHODS 7.3 as written);
    None: wild up to engine.stats.maxt.WILD_MAX_CLUSTERS questions and WILD_MAX_MODELS models
    (its cost is n_draws x Q x k^2), else normal (its error is O(1/Q)).

    Returns:
        theta (k,), sigma (k, k), and engine.stats.ranking.ranksets_maxt's dict (lower, upper,
        critical_values, calibration, ...).
    """
    Q, k = M.shape
    theta = M.mean(axis=0)  # (k,)
    sigma = np.atleast_2d(np.cov(M, rowvar=False, ddof=1)) / Q  # (k, k)
    if calibration is None:
        calibration = "wild" if Q <= WILD_MAX_CLUSTERS and k <= WILD_MAX_MODELS else "normal"
    if calibration not in CALIBRATIONS:
        raise UserError(f"unknown calibration {calibration!r}; allowed: {', '.join(CALIBRATIONS)}")
    null = wild_draws_means(M, rng, n_draws) if calibration == "wild" else None  # (D, k, k)
    return theta, sigma, ranksets_maxt(theta, sigma, alpha, rng=rng, n_draws=n_draws, null_draws=null)


def accuracy_ranksets(
    db: str | os.PathLike,
    run: str,
    alpha: float = 1 - LEVEL,
    mode: str | None = None,
    rule: str | None = None,
    n_draws: int = 10_000,
    seed: int = 0,
) -> AccuracyRankSets:
    """Accuracy per model with a question-clustered t interval, and max-t rank-sets over the models.

    Args:
        db: database.  run: a scored run (generated or imported).  alpha: rank-set error level.
        mode: 'coupled' / 'independent' (default: coupled when present).  rule: scoring rule
            (default: the run's only rule; 'harness' for imports).
        n_draws, seed: the max-t critical value's draws (wild bootstrap-t weights; normal draws
            above engine.stats.maxt.WILD_MAX_CLUSTERS questions or WILD_MAX_MODELS models).
    Raises:
        UserError: fewer than 2 models or 2 questions common to all models.
    """
    models, M, repeats, mode = per_question_matrix(db, run, mode, rule)
    Q, k = M.shape
    if k < 2:
        raise UserError(f"run {run!r} has {k} model(s) with scores; rank-sets need at least 2")
    if Q < 2:
        raise UserError(f"run {run!r}: only {Q} question(s) scored for every model; need at least 2")
    theta, sigma, rs = rank_accuracies(M, alpha, np.random.default_rng(seed), n_draws)
    se = np.sqrt(np.diag(sigma))
    facts = imported_facts(db, run) or {}
    headline = facts.get("headline") or {}
    rows = []
    for i, m in enumerate(models):
        # the one per-model accuracy interval of summary and the Benchmark page: Clopper-Pearson for one
        # 0/1 score per question, else t over questions (engine.stats.multigen.proportion_interval)
        lo, hi = proportion_interval(M[:, i], repeats, LEVEL)
        rows.append(
            ModelAccuracy(
                m,
                float(theta[i]),
                lo,
                hi,
                float(se[i]),
                int(rs["lower"][i]),
                int(rs["upper"][i]),
                None if m not in headline else float(headline[m]),
            )
        )
    rows.sort(key=lambda r: (-r.accuracy, r.model))
    return AccuracyRankSets(
        run,
        mode,
        float(alpha),
        int(Q),
        repeats,
        int(n_draws),
        int(seed),
        tuple(float(c) for c in rs["critical_values"]),
        tuple(rows),
        bool(facts.get("harness")),
        str(rs["calibration"]),
    )


def two_models(db: str | os.PathLike, run: str) -> tuple[str, str]:
    """The two scored models of a run in the user's order (the first path imported, the first
    ``--models`` entry: :func:`engine.store.run_models.model_order`), as A and B of A − B (UserError
    naming them when there are not exactly two)."""
    from engine.store.run_models import model_order

    scored = set(per_question_scores(db, run)["model"].unique())
    order = [m for m in model_order(db, run) if m in scored]
    models = order + sorted(scored - set(order))
    if len(models) != 2:
        raise UserError(
            f"run {run!r} has {len(models)} scored models ({', '.join(models)}); name two with "
            "--model-a/--model-b"
        )
    return str(models[0]), str(models[1])


@dataclass(frozen=True)
class PairedAccuracy:
    """Two models on one run without the coupled-vs-independent analysis (imported, or one repeat):
    each model's accuracy with its interval, the paired t over questions (docs/METHODS.md 7.1) and
    the questions a target difference needs."""

    run: str
    mode: str
    models: tuple[str, str]
    accuracy: tuple[float, float]
    # per model (low, high): engine.stats.multigen.proportion_interval, the rule of summary
    accuracy_ci: tuple[tuple[float, float], tuple[float, float]]
    harness_accuracy: tuple[float | None, float | None]
    n_questions: int
    n_repeats: int
    # engine.stats.paired_difference.paired_diff_ci (diff, se, ci, p, corr, mde, bootstrap)
    paired: PairedDiff
    target_mde: float
    plan: tuple[
        dict, ...
    ]  # engine.stats.planning.plan_sample_size rows at se = mde / (z_{1-a/2} + z_power)
    imported: bool

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "mode": self.mode,
            "models": list(self.models),
            "accuracy": list(self.accuracy),
            "accuracy_ci": [list(c) for c in self.accuracy_ci],
            "harness_accuracy": list(self.harness_accuracy),
            "n_questions": self.n_questions,
            "n_repeats": self.n_repeats,
            "paired": self.paired.to_dict(),
            "target_mde": self.target_mde,
            "plan": list(self.plan),
            "imported": self.imported,
        }


def paired_accuracy(
    db: str | os.PathLike,
    run: str,
    model_a: str,
    model_b: str,
    rule: str | None = None,
    target_mde: float = 0.05,
    alpha: float = 0.05,
    power: float = 0.8,
    seed: int = 0,
    n_resamples: int = 2000,
) -> PairedAccuracy:
    """Paired comparison A − B on the questions both models have (questions as the unit)."""
    from engine.stats import paired_difference as pdiff
    from engine.stats import planning

    df = per_question_scores(db, run, rule)
    mode = "coupled" if "coupled" in set(df["mode"]) else "independent"
    df = df[(df["mode"] == mode) & df["model"].isin([model_a, model_b])]
    missing = [m for m in (model_a, model_b) if m not in set(df["model"])]
    if missing or model_a == model_b:
        raise UserError(
            f"run {run!r} has no scores of {missing or [model_a]} to pair; models: "
            f"{', '.join(sorted(per_question_scores(db, run, rule)['model'].unique()))}"
        )
    wide = df.pivot_table(
        index="prompt_id", columns=["model", "repeat"], values="score", aggfunc="first"
    ).dropna()
    A, B = wide[model_a].to_numpy(float), wide[model_b].to_numpy(float)  # (Q, R) each
    paired = PairedDiff.of(
        pdiff.paired_diff_ci(
            A, B, rng=np.random.default_rng(seed), alpha=alpha, power=power, n_resamples=n_resamples
        )
    )
    comp = pdiff.variance_components_diff(A, B)
    se = target_mde / float(_st.norm.ppf(1 - alpha / 2) + _st.norm.ppf(power))
    plan = planning.plan_sample_size(
        comp["sigma2_between"], comp["sigma2_within"], target_se=se, repeats=sorted({1, A.shape[1]})
    )
    head = (imported_facts(db, run) or {}).get("headline") or {}
    return PairedAccuracy(
        run,
        mode,
        (model_a, model_b),
        (float(A.mean()), float(B.mean())),
        (
            proportion_interval(A.mean(axis=1), A.shape[1], 1 - alpha),
            proportion_interval(B.mean(axis=1), B.shape[1], 1 - alpha),
        ),
        (head.get(model_a), head.get(model_b)),
        int(A.shape[0]),
        int(A.shape[1]),
        paired,
        float(target_mde),
        tuple(plan),
        bool(head),
    )


def imported_pair(args) -> PairedAccuracy | None:
    """benchmark-compare's arguments: fill in --model-a/--model-b from a two-model --run, and return
    the paired comparison when the run is an import (no coupled scores), else None."""
    if args.model_a is None or args.model_b is None:
        if args.run is None:
            raise UserError("give --model-a and --model-b, or --run RUN of a run with two models")
        args.model_a, args.model_b = two_models(args.db, args.run)
    if args.run is None or not (imported_facts(args.db, args.run) or {}).get("harness"):
        return None
    return paired_accuracy(
        args.db,
        args.run,
        args.model_a,
        args.model_b,
        target_mde=args.target_mde,
        power=args.power,
        seed=args.seed,
        n_resamples=max(args.resamples, 200),
    )
