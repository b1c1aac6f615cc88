"""Analysis layer of a run's rank-sets: stored data -> engine.stats -> a frozen result.

PPR rank-sets on a user's own run (docs/METHODS.md 4, 7.3, 9.3): the run's judged units (one judge
label per unit, both orders combined) with the run's human labels, ranked three ways (PPR, judge
only, human only) with the run's prompts as clusters, and the label planner ("about N more labels
for rank-sets no wider than W" / "for theta CIs no wider than x").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from engine.analysis import run_units as U
from engine.analysis.comparisons import cluster_ids, model_indices, win_indicators
from engine.analysis.notices import plural
from engine.analysis.ranksets import RankSets, ranksets_for
from engine.analysis.result_base import ToDict, plain
from engine.errors import UserError
from engine.stats import label_plan as LP

METHOD_NAMES = {"ppr": "PPR (judge + human)", "judge": "judge only", "human": "human only"}
# what the three methods are, for a reader of the page (docs/METHODS.md 4)
METHODS_TEXT = (
    "θ (theta) is a model's strict win-rate: the probability that its answer is preferred over a "
    "uniformly random other model's (ties count as a non-win). **PPR** (prediction-powered ranking, "
    "docs/METHODS.md 4) estimates θ from the judge's verdicts on the units without a human label and "
    "corrects it by the judge's error measured on the units with one: θ̂ = λ·θ̂_judge(unlabelled) + "
    "(θ̂_human − λ·θ̂_judge)(labelled), with the judge's weight λ ∈ [0, 1] chosen from the data. The "
    "correction removes the judge's bias; the many judge verdicts make the interval narrower than the "
    "human labels alone give. **Judge only** ranks the judge's preferences (its biases included); "
    "**human only** uses the labelled units alone. Rank 1 = best; a rank-set holds every rank the "
    "model may have, at level 1 − α for all models at once."
)


@dataclass(frozen=True)
class LabelPlan(ToDict):
    """The planner's answer (docs/METHODS.md 9.3): predicted widest rank-set and widest theta CI now
    (normal calibration) and the labels needed for each target; None = not reachable by labels alone.
    A run has only so many units to label: ``n_unlabelled`` judged units are left, and the widths with
    every one of them labelled are ``rankset_width_all`` / ``ci_width_all``; a target that needs more
    labels than that needs more generated (and judged) questions, and the text says so."""

    n_labelled: int
    rankset_width_now: int
    ci_width_now: float
    target_rankset_width: int | None
    more_for_rankset_width: int | None
    target_ci_width: float | None
    more_for_ci_width: int | None
    ci_width_floor: float  # the widest CI with unlimited labels (the judge-only term)
    text: str
    n_units: int = 0  # judged units of the ranked models (labelled or not)
    n_unlabelled: int = 0  # judged units without a human label: the most labels this run can take
    rankset_width_all: int | None = None  # predicted with every unlabelled unit labelled
    ci_width_all: float | None = None


@dataclass(frozen=True)
class RunRankSets:
    """PPR / judge-only / human-only rank-sets of a run (None where a method cannot run: ``notes`` says
    why), their table (model, method, rank, lower, upper, theta, theta_low, theta_high) and the plan."""

    run: str
    judge: str
    mode: str | None
    n_units: int
    n_labelled: int
    label_count: int  # labels read (the page's refresh key)
    results: dict[str, RankSets | None]
    table: pd.DataFrame
    plan: LabelPlan | None
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "judge": self.judge,
            "mode": self.mode,
            "n_units": self.n_units,
            "n_labelled": self.n_labelled,
            "label_count": self.label_count,
            "results": {m: plain(r) for m, r in self.results.items()},
            "plan": plain(self.plan),
            "notes": list(self.notes),
        }


def unit_frame(units: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """One row per judged unit: prompt_id, model_a, model_b, human_winner (first label or None),
    judge_winner."""
    first, _ = U.first_labels(U.fill_modes(labels, units))
    df = U.merge_labels(units, first)
    jw = np.array(["a", "b", "tie"], dtype=object)
    judge = df["judge"].to_numpy(np.int64) if len(df) else np.zeros(0, np.int64)
    return pd.DataFrame(
        {
            "prompt_id": df["prompt_id"],
            "model_a": df["model_a"],
            "model_b": df["model_b"],
            "human_winner": df["human_winner"],
            "judge_winner": np.where(judge >= 0, jw[np.maximum(judge, 0)], None),
        }
    )


def _labels_needed(
    what: str, more: int | None, unreachable: str, n_unlabelled: int, n_units: int
) -> str:
    """One target's sentence: "about N more labels", capped at the units the run has."""
    if more is None:
        return f"{what}: {unreachable}"
    if more == 0:
        return f"{what}: met with the labels there are"
    if more <= n_unlabelled:
        return f"{what}: about {plural(more, 'more label')}"
    return (
        f"{what}: about {plural(more, 'more label')}, more than the run has: only "
        f"{plural(n_unlabelled, 'judged unit')} of {n_units:,} are unlabelled, so label them all and "
        "generate (and judge) more questions for the rest"
    )


def labelled_term(df: pd.DataFrame, res: RankSets) -> tuple[np.ndarray, int]:
    """PPR's labelled-set covariance term ``Sigma_lab`` (:func:`engine.stats.label_plan.labelled_sigma`,
    prompts as clusters) and the number n of units it comes from: the units of ``df`` (a
    :func:`unit_frame`) between ``res``'s models with both a human and a judge label, with ``res``'s
    lambda. The planner scales this term by n / (n + n').

    Returns:
        (Sigma_lab (k, k), n).
    """
    models = res.models
    sub = df[df.model_a.isin(models) & df.model_b.isin(models)]
    lab = sub[sub.human_winner.notna() & sub.judge_winner.notna()]
    first, second = model_indices(lab, models)
    w, w2 = win_indicators(lab.human_winner)
    wh, wh2 = win_indicators(lab.judge_winner)
    lam = float(res.lam or 0.0)
    return LP.labelled_sigma(first, second, w, w2, wh, wh2, len(models), lam, cluster_ids(lab)), len(lab)


def plan_labels(
    df: pd.DataFrame, res: RankSets, width: int | None, ci_width: float | None, seed: int = 0
) -> LabelPlan:
    """The planner on PPR's result ``res`` over the frame ``df`` it was computed from."""
    sig = np.asarray(res.sigma)
    sig_lab, n = labelled_term(df, res)
    theta = np.array([res.theta[m] for m in res.models])
    models = res.models
    judged = df[df.model_a.isin(models) & df.model_b.isin(models) & df.judge_winner.notna()]
    left = len(judged) - n  # the judged units without a human label
    rs_now = LP.rankset_width(theta, sig, res.alpha, res.procedure, seed, 4000)
    ci_now = float(LP.ci_widths(sig, sig_lab, n, 0, res.alpha).max())
    floor = float(LP.ci_widths(sig, sig_lab, n, np.inf, res.alpha).max())
    # every unlabelled unit labelled: the most this run's units can give
    rs_all = LP.rankset_width(
        theta, LP.predicted_sigma(sig, sig_lab, n, left), res.alpha, res.procedure, seed, 4000
    )
    ci_all = float(LP.ci_widths(sig, sig_lab, n, left, res.alpha).max())
    more_rs = (
        None
        if width is None
        else LP.more_for_rankset_width(
            theta, sig, sig_lab, n, res.alpha, int(width), res.procedure, seed
        )
    )
    more_ci = (
        None if ci_width is None else LP.more_for_ci_width(sig, sig_lab, n, res.alpha, float(ci_width))
    )
    parts = [
        f"with {plural(n, 'label')}: widest rank-set {rs_now}, widest theta CI {ci_now:.3f} "
        f"(floor with unlimited labels {floor:.3f}); with all {plural(left, 'unlabelled unit')} of this "
        f"run labelled: widest rank-set {rs_all}, widest theta CI {ci_all:.3f}"
    ]
    if width is not None:
        parts.append(
            _labels_needed(
                f"rank-sets no wider than {width}",
                more_rs,
                "not reachable by more labels alone (the judge-only term or tied estimates)",
                left,
                len(judged),
            )
        )
    if ci_width is not None:
        parts.append(
            _labels_needed(
                f"theta CIs no wider than {ci_width:g}",
                more_ci,
                "not reachable (below the judge-only floor)",
                left,
                len(judged),
            )
        )
    return LabelPlan(
        n,
        rs_now,
        ci_now,
        width,
        more_rs,
        ci_width,
        more_ci,
        floor,
        "; ".join(parts),
        len(judged),
        left,
        rs_all,
        ci_all,
    )


def run_ranksets(
    db: str | os.PathLike,
    run: str,
    judge: str,
    human: str | None = None,
    mode: str | None = None,
    alpha: float = 0.05,
    procedure: str = "maxt",
    seed: int = 0,
    plan_width: int | None = None,
    plan_ci_width: float | None = None,
    label_count: int | None = None,
) -> RunRankSets:
    """PPR, judge-only and human-only rank-sets of ``run`` (``judge``'s verdicts, the run's human
    labels; ``human``: one set) with the planner. ``label_count`` only keys a page's cache.

    Returns:
        :class:`RunRankSets`.
    """
    known = U.run_judges(db, run)
    if judge not in known:
        raise UserError(
            f"no verdicts of judge {judge!r} on run {run!r}; judges with verdicts: "
            f"{', '.join(known) or 'none (run engine judge first)'}"
        )
    units = U.judge_units(db, run, judge, mode)
    labels = U.human_labels(db, run, human)
    if mode is not None and len(labels):
        labels = labels[labels["mode"].isna() | (labels["mode"] == mode)]
    U.check_models(labels, units, run)
    return rank_units(
        run,
        judge,
        units,
        labels,
        mode=mode,
        alpha=alpha,
        procedure=procedure,
        seed=seed,
        plan_width=plan_width,
        plan_ci_width=plan_ci_width,
    )


def rank_units(
    run: str,
    judge: str,
    units: pd.DataFrame,
    labels: pd.DataFrame,
    *,
    mode: str | None = None,
    alpha: float = 0.05,
    procedure: str = "maxt",
    seed: int = 0,
    plan_width: int | None = None,
    plan_ci_width: float | None = None,
) -> RunRankSets:
    """:func:`run_ranksets` on frames (:func:`run_units.judge_units`, :func:`run_units.human_labels`)."""
    df = unit_frame(units, labels)
    n_lab = int((df.human_winner.notna() & df.judge_winner.notna()).sum())
    results: dict[str, RankSets | None] = {}
    notes: list[str] = []
    unmatched = len(U.first_labels(labels)[0]) - int(df.human_winner.notna().sum()) if len(labels) else 0
    if unmatched > 0:
        notes.append(f"{unmatched:,} labelled units have no verdict of judge {judge!r} here: left out")
    for m in ("ppr", "judge", "human"):
        try:
            rows = df if m != "human" else df[df.human_winner.notna()]
            results[m] = ranksets_for(rows, m, alpha, procedure=procedure, seed=seed, human_labels=None)
        except UserError as e:
            results[m] = None
            notes.append(f"{METHOD_NAMES[m]}: {e}")
    rows_t = [
        {
            "model": mm,
            "method": METHOD_NAMES[m],
            "rank": r.rank[mm],
            "lower": lo,
            "upper": up,
            "theta": r.theta[mm],
            "theta_low": r.theta_ci[mm][0],
            "theta_high": r.theta_ci[mm][1],
        }
        for m, r in results.items()
        if r is not None
        for mm, (lo, up) in r.ranksets.items()
    ]
    table = pd.DataFrame(
        rows_t, columns=["model", "method", "rank", "lower", "upper", "theta", "theta_low", "theta_high"]
    )
    plan = None
    ppr = results.get("ppr")
    if ppr is not None:
        plan = plan_labels(df, ppr, plan_width, plan_ci_width, seed)
    elif plan_width is not None or plan_ci_width is not None:
        notes.append("no plan: PPR needs human labels on some judged units and judge-only units")
    return RunRankSets(
        run=run,
        judge=judge,
        mode=mode,
        n_units=len(df),
        n_labelled=n_lab,
        label_count=len(labels),
        results=results,
        table=table,
        plan=plan,
        notes=notes,
    )
