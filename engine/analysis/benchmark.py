"""Analysis layer of the benchmark comparison: stored data -> engine.stats -> a frozen result.

Benchmark comparison of two models, coupled vs independent: database -> score matrices ->
engine.stats.

Benz et al., "Evaluation of Large Language Models via Coupled Token Generation", Section 4 and
Fig. 2: per-question covariance, variance of the score difference, estimation error vs number of
samples, sample saving; plus (docs/METHODS.md 7.1) the paired comparison with questions as the unit,
the saving's interval, and a planner from the variance components.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from engine.analysis.benchmark_result import (
    BenchmarkChoices,
    BenchmarkComparison,
    Kdes,
    Planner,
    SavingAt,
    SavingDefinitions,
)
from engine.analysis.notices import AnalysisWarning, Notice, plural, small_sample_warning
from engine.analysis.overview import db_exists
from engine.analysis.stats_records import (
    KdeCurve,
    McNemar,
    PairedDiff,
    PredictedSaving,
    ScoreVariance,
    VarianceComponents,
    VarianceSaving,
)
from engine.config import DEFAULT_PLAN_MDE, DEFAULT_SAVING_N, MODES, PLAN_REPEATS
from engine.errors import UserError
from engine.stats import benchmark as bm
from engine.stats import multigen as mg
from engine.stats import paired_difference as pdiff
from engine.stats import planning, saving
from engine.store import scores as benchmark_scores

# one headline saving everywhere (Home, Benchmark page, CLI); the others are always shown with their
# label
SAVING_DEFINITIONS = SavingDefinitions(
    variance_saving="headline: 1 − SE²_coupled / SE²_independent of the paired difference over "
    "questions (the share of questions coupling saves for the same precision, at this "
    "many repeats)",
    saving="paper's method: 1 − n_coupled(ε) / n_independent(ε), interpolated on the resampling error "
    "curves of (question, repeat) samples",
    saving_ci="predicted at error ε from the per-sample variances: 1 − n_c(ε)/n_i(ε), n(ε) = S²N/(s²N + "
    "S²)",
    questions_factor="1 / (1 − headline saving) = SE²_independent / SE²_coupled",
)


def list_runs_with_scores(db: str | os.PathLike) -> pd.DataFrame:
    """Which (run, model, mode, rule) have scores, with counts and the run's dataset."""
    return benchmark_scores.runs_with_scores(db)


def _matrices(df: pd.DataFrame, models: list[str]) -> dict[str, tuple[list[str], list[np.ndarray]]]:
    """Per mode: the prompts scored for every model on every common repeat, and one (Q, R)
    matrix per model, rows in dataset order."""
    out = {}
    for mode in MODES:
        d = df[df["mode"] == mode]
        if d.empty:
            continue
        wide = d.pivot_table(
            index=["idx", "prompt_id"], columns=["model", "repeat"], values="score", aggfunc="first"
        )
        repeats = sorted(set.intersection(*[set(d.loc[d["model"] == m, "repeat"]) for m in models]))
        if not repeats:
            continue
        cols = [(m, r) for m in models for r in repeats]
        wide = wide.reindex(columns=pd.MultiIndex.from_tuples(cols)).dropna(axis=0, how="any")
        wide = wide.sort_index()
        if wide.empty:
            continue
        mats = [wide[m].to_numpy(dtype=np.float64) for m in models]
        out[mode] = (wide.index.get_level_values("prompt_id").tolist(), mats)
    return out


def _load_scores(db, models: list[str], subject, run, rule) -> tuple[str, pd.DataFrame]:
    return benchmark_scores.pair_scores(db, models, subject, run, rule)


def score_matrices(
    db: str | os.PathLike,
    model_a: str,
    model_b: str,
    subject: str | None = None,
    run: str | None = None,
    rule: str = "paper",
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Aligned score matrices of two models, per noise mode, from the ``scores`` table.

    Args:
        db: database path.
        model_a, model_b: model names (as stored).
        subject: restrict to prompts of this subject (``prompts.subject``); None = all.
        run: run id; None = the most recent run with ``rule`` scores for both models.
        rule: scoring rule ('paper', 'lenient', ...).
    Returns:
        {mode: (A, B)} with A, B of shape (Q, R): the questions (in dataset order) and repeats
        that both models have scored in that mode. Modes without such data are absent.
    """
    if model_a == model_b:
        raise UserError(f"model_a and model_b must differ, both are {model_a!r}")
    _, df = _load_scores(db, [model_a, model_b], subject, run, rule)
    return {mode: (mats[0], mats[1]) for mode, (_, mats) in _matrices(df, [model_a, model_b]).items()}


def _aligned_matrices(
    db, models: list[str], subject, run, rule
) -> tuple[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per mode the two (Q, R) score matrices on the questions both modes have (dataset order)."""
    if models[0] == models[1]:
        raise UserError(f"model_a and model_b must differ, both are {models[0]!r}")
    run_id, df = _load_scores(db, models, subject, run, rule)
    per_mode = _matrices(df, models)
    if "coupled" not in per_mode:
        raise UserError(
            f"run {run_id!r} has no coupled scores of both {models[0]!r} and {models[1]!r}"
            + (f" on subject {subject!r}" if subject else "")
        )
    if "independent" in per_mode:  # keep the questions both modes have
        common = set(per_mode["coupled"][0]) & set(per_mode["independent"][0])
        for mode, (pids, mats) in list(per_mode.items()):
            mask = np.array([p in common for p in pids])
            per_mode[mode] = ([p for p, k in zip(pids, mask) if k], [m[mask] for m in mats])
        if per_mode["coupled"][1][0].shape[1] != per_mode["independent"][1][0].shape[1]:
            raise UserError("coupled and independent runs have different numbers of repeats")
    return run_id, {mode: (m[0], m[1]) for mode, (_, m) in per_mode.items()}


def _curve_rows(sizes: np.ndarray, curves: dict) -> list[dict]:
    """The error curves as rows {n, coupled, independent, *_low, *_high} (None for a missing mode)."""
    rows = []
    for j, n in enumerate(sizes.tolist()):
        row = {"n": n}
        for mode in MODES:
            c = curves.get(mode)
            row[mode] = c["mean"][j] if c else None
            row[f"{mode}_low"] = c["low"][j] if c else None
            row[f"{mode}_high"] = c["high"][j] if c else None
        rows.append(row)
    return rows


def benchmark_compare(
    db: str | os.PathLike,
    model_a: str,
    model_b: str,
    subject: str | None = None,
    target_error: float | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
    run: str | None = None,
    rule: str = "paper",
    step: int = 20,
    saving_n: int = DEFAULT_SAVING_N,
    kde_points: int = 200,
    max_n: int = 10_000,
    target_mde: float = DEFAULT_PLAN_MDE,
    target_se: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
) -> BenchmarkComparison:
    """Coupled vs independent comparison of two models (docs/METHODS.md sections 2 and 7.1).

    Fields (:class:`BenchmarkComparison`; ``to_dict()`` is the CLI's JSON): run, subject, rule, models,
    n_questions, n_repeats, mean_covariance_coupled, median_ and mean_var_diff_{coupled,independent},
    accuracy (pooled over modes), accuracy_by_mode (t CI, docs/METHODS.md 5), paired ({mode:
    :func:`pdiff.paired_diff_ci`, questions the unit}), mcnemar_majority (ONE majority-vote outcome per
    question), kde (variances reflected at 0), error_curve (rows of mean error and 2.5/97.5 percentiles),
    truth, the savings (:func:`_savings`: variance_saving = the HEADLINE, 1 − SE²_c/SE²_i with a
    studentised CI; saving / saving_detail / saving_at_n = the paper's curve saving at ε, which is
    ``target_error`` or the coupled error at n = ``saving_n``; saving_ci = predicted at ε;
    saving_definitions), planner (variance components, plans for ``target_mde`` at ``power`` and for a
    target SE, each row with ``fits`` and a note when this dataset has too few questions), warnings
    (typed: few questions, no error level, nothing to plan from).

    Both modes use the questions scored in both and the same random permutations (common random
    numbers); the curve runs over n = 20, 40, ... up to min(N, ``max_n``) (N = questions x repeats).
    """
    for name, v in (("resamples", n_resamples), ("max_n", max_n), ("saving_n", saving_n)):
        if v < 1:
            raise UserError(f"{name} must be >= 1, got {v}")
    for name, x in (
        ("target MDE", target_mde),
        ("target SE", target_se),
        ("target error", target_error),
    ):
        if x is not None and not x > 0:
            raise UserError(f"{name} must be > 0, got {x}")
    models = [model_a, model_b]
    run_id, mats = _aligned_matrices(db, models, subject, run, rule)
    Ac, Bc = mats["coupled"]
    Q, R = Ac.shape
    if Q < 2 or R < 2:
        raise UserError(f"need at least 2 questions and 2 repeats to compare, got {Q} x {R}")
    rng_perm, rng_boot = np.random.default_rng(seed).spawn(2)
    warnings: list[AnalysisWarning] = []
    small = small_sample_warning(int(Q), "questions")
    if small:
        warnings.append(small)

    cov = bm.per_question_covariance(Ac, Bc)
    vdiff = {mode: bm.per_question_var_diff(*ab) for mode, ab in mats.items()}
    # Accuracy: pooled over modes (both are unbiased samples of the same accuracy), plus per mode
    # with the within/between-question CI of docs/METHODS.md 5.
    accuracy, accuracy_by_mode = _accuracy(mats, models)
    # The paired comparison (docs/METHODS.md 7.1): one mean difference per question, t over questions.
    paired = {
        mode: PairedDiff.of(
            pdiff.paired_diff_ci(
                *ab, rng=rng_boot, alpha=alpha, power=power, n_resamples=max(n_resamples, 200)
            )
        )
        for mode, ab in mats.items()
    }

    # Error curves: one set of permutations shared by both modes.
    N = Q * R
    sizes = bm.default_sizes(min(N, max_n), step=step)
    perms = bm.resample_permutations(N, n_resamples, rng_perm, length=int(sizes.max()))
    curves = {mode: bm.error_curve((ab[0] - ab[1]).ravel(), sizes, perms) for mode, ab in mats.items()}
    sav = _savings(
        curves, sizes, mats, N, saving_n, target_error, rng_boot, n_resamples, alpha, warnings
    )
    eps = sav["saving_detail"].error
    return BenchmarkComparison(
        run=run_id,
        subject=subject,
        rule=rule,
        models=models,
        n_questions=int(Q),
        n_repeats=int(R),
        n_resamples=int(n_resamples),
        seed=int(seed),
        mean_covariance_coupled=float(cov.mean()),
        median_var_diff_coupled=float(np.median(vdiff["coupled"])),
        median_var_diff_independent=float(np.median(vdiff["independent"]))
        if "independent" in vdiff
        else None,
        mean_var_diff_coupled=float(vdiff["coupled"].mean()),
        mean_var_diff_independent=float(vdiff["independent"].mean()) if "independent" in vdiff else None,
        accuracy=accuracy,
        accuracy_by_mode=accuracy_by_mode,
        paired=paired,
        # McNemar only on one outcome per question (never on (question, repeat) pairs: size ~40% at 5%).
        mcnemar_majority={mode: McNemar.of(pdiff.mcnemar_majority(*ab)) for mode, ab in mats.items()},
        kde=_kdes(cov, vdiff, kde_points),
        truth={mode: c["truth"] for mode, c in curves.items()},
        error_curve=_curve_rows(sizes, curves),
        error_curve_band="2.5% and 97.5% percentiles of the absolute error over the resamples",
        **sav,
        planner=_planner(mats, eps, target_mde, target_se, alpha, power, int(Q), int(R), warnings),
        warnings=warnings,
    )


def _kdes(cov: np.ndarray, vdiff: dict, kde_points: int) -> Kdes:
    """KDE of the per-question covariance, and of the per-question Var(A − B) per mode on one grid
    (reflected at 0)."""
    hi = max(float(v.max()) for v in vdiff.values())
    grid = np.linspace(0.0, hi + 0.15, kde_points)  # one grid so the curves overlay; a variance is >= 0
    per_mode = {mode: KdeCurve.of(bm.kde_curve(v, grid=grid, lower=0.0)) for mode, v in vdiff.items()}
    return Kdes(
        covariance_coupled=KdeCurve.of(bm.kde_curve(cov, n_grid=kde_points)),
        var_diff_coupled=per_mode["coupled"],
        var_diff_independent=per_mode.get("independent"),
    )


def _accuracy(
    mats: dict, models: list[str]
) -> tuple[dict[str, float], dict[str, dict[str, ScoreVariance]]]:
    pooled = {m: float(np.mean([mats[mode][i].mean() for mode in mats])) for i, m in enumerate(models)}
    by_mode = {
        mode: {m: ScoreVariance.of(mg.score_variance(ab[i])) for i, m in enumerate(models)}
        for mode, ab in mats.items()
    }
    return pooled, by_mode


def _savings(
    curves: dict,
    sizes: np.ndarray,
    mats: dict,
    N: int,
    saving_n: int,
    target_error: float | None,
    rng_boot: np.random.Generator,
    n_resamples: int,
    alpha: float,
    warnings: list[AnalysisWarning],
) -> dict:
    """saving, saving_detail, saving_at_n (the paper's curve saving), saving_ci (predicted at ε),
    variance_saving (the headline) and saving_definitions of :func:`benchmark_compare`. When the
    error is 0 at every size (scores that never differ), the savings at an error level are None and
    a NO_ERROR_LEVEL warning says why."""

    def saving_at(eps: float, source: str) -> SavingAt:
        if not eps > 0:
            return SavingAt(
                error=eps,
                n_coupled=None,
                n_independent=None,
                saving=None,
                at_smallest_size=None,
                error_source=source,
            )
        if "independent" in curves:
            d = saving.sample_saving(
                sizes, curves["coupled"]["mean"], curves["independent"]["mean"], eps
            )
        else:
            d = {
                "error": eps,
                "n_coupled": saving.samples_for_error(sizes, curves["coupled"]["mean"], eps),
                "n_independent": None,
                "saving": None,
                "at_smallest_size": None,
            }
        return SavingAt(**d, error_source=source)

    # Always: the saving at the error the coupled curve reaches at n = saving_n; with a target
    # error, the headline saving is taken there instead.
    # Sampling is without replacement from the pool, so the error falls to 0 as n approaches N:
    # for a small pool (N < 4 * saving_n) take the error at n = N / 8 instead, and say so.
    n_eff = saving_n if N >= 4 * saving_n else max(int(sizes[0]), N // 8)
    src = f"coupled error at n={n_eff}"
    if n_eff != saving_n:
        src += f" (the pool has only {N} samples, too few for n={saving_n})"
    at_n = saving_at(saving.error_at(sizes, curves["coupled"]["mean"], n_eff), src)
    detail = saving_at(float(target_error), "target_error") if target_error is not None else at_n
    eps = detail.error
    if not eps > 0:
        warnings.append(
            AnalysisWarning(
                Notice.NO_ERROR_LEVEL,
                (
                    "the estimation error is 0 at every sample size (the pool is too small, or the two "
                    "models' scores never differ): no saving at an error level; give --target-error > 0 "
                    "for one"
                ),
            )
        )
    out: dict = {"saving": detail.saving, "saving_detail": detail, "saving_at_n": at_n}

    # The saving's interval: predicted from the per-sample variances at the same error, bootstrap
    # over questions (the interpolated resampling saving above has no interval of its own).
    if "independent" in mats:
        Dc, Di = (mats[m][0] - mats[m][1] for m in ("coupled", "independent"))
        out["saving_ci"] = (
            PredictedSaving.of(
                saving.saving_predicted(Dc, Di, eps, rng=rng_boot, n_resamples=max(n_resamples, 200))
            )
            if eps > 0
            else None
        )
        out["variance_saving"] = VarianceSaving.of(
            saving.variance_saving(Dc, Di, level=1 - alpha)
        )  # the headline
    else:
        out["saving_ci"] = None
        out["variance_saving"] = None
    out["saving_definitions"] = SAVING_DEFINITIONS
    return out


def _cannot_plan(
    why: str,
    Q: int,
    R: int,
    eps: float,
    target_mde: float,
    target_se: float | None,
    alpha: float,
    power: float,
    components: dict[str, VarianceComponents],
    warnings: list[AnalysisWarning],
) -> Planner:
    warnings.append(AnalysisWarning(Notice.CANNOT_PLAN, f"planner: cannot plan, {why}"))
    return Planner(
        target_mde=target_mde,
        alpha=alpha,
        power=power,
        target_se=target_se,
        target_se_source="given" if target_se is not None else "none (no error level)",
        target_error=eps,
        dataset_questions=Q,
        dataset_repeats=R,
        formula=PLAN_FORMULA,
        components=components,
        mde_plans=[],
        se_plans=[],
        headline_fits=False,
        headline=f"cannot plan: {why}",
        can_plan=False,
    )


PLAN_FORMULA = (
    "Var(mean diff) = sigma2_between/n + sigma2_within/(n k); MDE plans: smallest n with "
    "power of the paired t test >= power; SE plans: n = ceil((sb + sw/k)/se^2)"
)


def _planner(
    mats: dict,
    eps: float,
    target_mde: float,
    target_se: float | None,
    alpha: float,
    power: float,
    Q: int,
    R: int,
    warnings: list[AnalysisWarning],
) -> Planner:
    """Questions × repeats per design (docs/METHODS.md 7.1): Var(d̄) = σ²_b/n + σ²_w/(n k), from this
    run's variance components; independent generation is also predicted from the coupled run. A run whose
    coupled differences never vary, or with no error level and no target SE, cannot be planned from (a
    typed CANNOT_PLAN warning; ``can_plan`` False)."""
    components = {
        mode: VarianceComponents.of(pdiff.variance_components_diff(*ab)) for mode, ab in mats.items()
    }
    components["independent (predicted from coupled)"] = VarianceComponents.of(
        bm.independent_components(*mats["coupled"])
    )
    c = components["coupled"]
    if not c.sigma2_between + c.sigma2_within > 0:
        return _cannot_plan(
            "the coupled score differences of this run never vary (no variance to plan from)",
            Q,
            R,
            eps,
            target_mde,
            target_se,
            alpha,
            power,
            components,
            warnings,
        )
    if target_se is None and not eps > 0:
        return _cannot_plan(
            "no error level (the estimation error is 0 at every size) and no --target-se",
            Q,
            R,
            eps,
            target_mde,
            target_se,
            alpha,
            power,
            components,
            warnings,
        )
    repeats = sorted({*PLAN_REPEATS, R})
    se = target_se if target_se is not None else eps / saving.MAE_PER_SE

    def fits(row: dict) -> dict:
        q = row["questions"]
        row["fits"] = q is not None and q <= Q
        row["note"] = (
            ""
            if row["fits"]
            else f"needs {q:,} questions; this dataset has {Q}"
            if q is not None
            else "not reachable (over 10 million questions)"
        )
        return row

    mde_rows = [
        fits(r)
        for r in planning.plan_mde(
            {m: v.to_dict() for m, v in components.items()},
            target_mde,
            alpha=alpha,
            power=power,
            repeats=repeats,
        )
    ]
    se_rows = [
        fits({"mode": mode, **r})
        for mode, c in components.items()
        for r in planning.plan_sample_size(
            c.sigma2_between, c.sigma2_within, target_se=se, repeats=repeats
        )
    ]
    current = next(r for r in mde_rows if r["mode"] == "coupled" and r["repeats"] == R)
    return Planner(
        target_mde=target_mde,
        alpha=alpha,
        power=power,
        target_se=se,
        target_se_source="given" if target_se is not None else f"error {eps:.4g} / sqrt(2/pi)",
        target_error=eps,
        dataset_questions=Q,
        dataset_repeats=R,
        formula=PLAN_FORMULA,
        components=components,
        mde_plans=mde_rows,
        se_plans=se_rows,
        headline_fits=bool(current["fits"]),
        headline=(
            f"coupled, {plural(R, 'repeat')}: MDE {target_mde:g} at {power:.0%} power needs "
            f"{current['questions']:,} questions; this dataset has {Q}"
            if current["questions"] is not None
            else f"coupled, {plural(R, 'repeat')}: MDE {target_mde:g} is not reachable"
        ),
    )


def benchmark_choices(db: str | os.PathLike) -> BenchmarkChoices:
    """Options for the benchmark page: runs with scores, their models, rules and subjects."""
    if not db_exists(db):
        return BenchmarkChoices()
    df, subj = benchmark_scores.scored_run_choices(db)
    return BenchmarkChoices(
        runs=df["run_id"].tolist(),
        models={r: list(m) for r, m in zip(df["run_id"], df["models"])},
        rules={r: list(m) for r, m in zip(df["run_id"], df["rules"])},
        modes={r: list(m) for r, m in zip(df["run_id"], df["modes"])},
        subjects={r: g["subject"].tolist() for r, g in subj.groupby("run_id")},
        repeats={r: int(n) for r, n in zip(df["run_id"], df["repeats"])},
    )


def benchmark(
    db: str | os.PathLike,
    model_a: str,
    model_b: str,
    subject: str | None = None,
    target_error: float | None = None,
    run: str | None = None,
    rule: str = "paper",
    n_resamples: int = 1000,
    seed: int = 0,
    target_mde: float = DEFAULT_PLAN_MDE,
    target_se: float | None = None,
) -> BenchmarkComparison:
    """The benchmark comparison of two models (:func:`benchmark_compare`) with the page's defaults."""
    return benchmark_compare(
        db,
        model_a,
        model_b,
        subject=subject,
        target_error=target_error,
        n_resamples=n_resamples,
        seed=seed,
        run=run,
        rule=rule,
        target_mde=target_mde,
        target_se=target_se,
    )
