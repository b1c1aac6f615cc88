"""Analysis layer of per-slice results: stored data -> engine.stats -> a frozen result.

Per-slice results with simultaneous intervals (analysis layer): a run's paired difference A − B per
subject (MMLU's 57 subjects) or per task (an lm-eval group's subtasks, an Inspect eval's tasks), each
slice's interval holding for all slices at once (engine/stats/slices.py; docs/METHODS.md 7.1 and 7.3),
with Benjamini-Hochberg adjusted p-values; ``engine benchmark-compare --by subject|task``, the Benchmark
page's "By subject" section and the report's per-slice table.

Reads: :func:`engine.store.scores.pair_scores` (scores with each prompt's subject; an imported harness
run stores the task there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from engine.analysis.notices import AnalysisWarning, Notice
from engine.analysis.result_base import ToDict
from engine.errors import UserError
from engine.stats import paired_difference as pdiff
from engine.stats import slices as SL

BY = ("subject", "task")


@dataclass(frozen=True)
class Slice(ToDict):
    """One slice: its questions, the plain mean difference A − B, the simultaneous interval, p-values."""

    slice: str
    n: int
    difference: float
    lower: float
    upper: float
    p_value: float
    p_adjusted: float  # Benjamini-Hochberg over the slices
    p_maxt: float  # family-wise (the intervals' rule)


@dataclass(frozen=True)
class SliceComparison(ToDict):
    """``engine benchmark-compare --by ... --json``: ``slices`` (one record per slice: slice, n, difference,
    lower, upper, p_adjusted, ...), and the whole run's paired difference (METHODS 7.1) beside them."""

    run: str
    mode: str
    models: tuple[str, str]  # (A, B): every difference is A − B
    by: str
    alpha: float
    n_questions: int
    n_repeats: int
    critical_value: float  # c of the simultaneous intervals (the max-|t| quantile over slices)
    overall: dict  # difference, lower, upper, p_value: the t interval over every question (7.1)
    slices: list[Slice]
    warnings: list[AnalysisWarning]

    def frame(self) -> pd.DataFrame:
        """One row per slice (the order of ``slices``)."""
        cols = ["slice", "n", "difference", "lower", "upper", "p_value", "p_adjusted", "p_maxt"]
        return pd.DataFrame([s.to_dict() for s in self.slices], columns=cols)

    @property
    def label(self) -> str:
        a, b = self.models
        return f"{a} − {b}"


def _per_question(df: pd.DataFrame, a: str, b: str) -> pd.DataFrame:
    """prompt_id, subject, d (mean over the repeats both models have of A − B) and the repeats used."""
    wide = df.pivot_table(index=["prompt_id", "subject"], columns=["model", "repeat"], values="score")
    common = sorted(set(wide[a].columns) & set(wide[b].columns))
    if not common:
        return pd.DataFrame(columns=["prompt_id", "subject", "d"])
    A = wide[a][common]
    B = wide[b][common]
    keep = A.notna().all(axis=1) & B.notna().all(axis=1)
    d = (A[keep].to_numpy(float) - B[keep].to_numpy(float)).mean(axis=1)
    out = A[keep].index.to_frame(index=False).assign(d=d)
    out.attrs["repeats"] = len(common)
    return out


def slice_comparison(
    db: str | os.PathLike,
    run: str,
    model_a: str | None = None,
    model_b: str | None = None,
    by: str = "subject",
    mode: str | None = None,
    rule: str | None = None,
    alpha: float = 0.05,
) -> SliceComparison:
    """A − B per slice of ``run`` (``by`` "subject", or "task": the same column, which an imported
    harness run fills with the task), with simultaneous max-t intervals at family-wise level ``alpha``.

    Models default to the run's two in the user's order (:func:`engine.analysis.accuracy_ranks.two_models`);
    ``mode`` to coupled where the run has it.

    Raises:
        UserError: an unknown ``by``, run, model or mode; prompts without a subject / task; fewer than
        2 slices.
    """
    from engine.analysis.accuracy_ranks import two_models
    from engine.store.scores import pair_scores, run_rule

    if by not in BY:
        raise UserError(f"--by must be one of {', '.join(BY)}; got {by!r}")
    if model_a is None or model_b is None:
        model_a, model_b = two_models(db, run)
    if model_a == model_b:
        raise UserError(f"model A and model B must differ, both are {model_a!r}")
    rule = run_rule(db, run, [model_a, model_b], rule)
    _, df = pair_scores(db, [model_a, model_b], None, run, rule)
    df = df[df["score"].notna()]
    modes = sorted(df["mode"].unique())
    mode = mode or ("coupled" if "coupled" in modes else modes[0] if modes else None)
    if mode not in modes:
        raise UserError(f"run {run!r} has no {mode!r} scores of both models; modes: {', '.join(modes)}")
    assert mode is not None  # checked against the run's modes above
    df = df[df["mode"] == mode]
    if df["subject"].isna().all():
        raise UserError(
            f"run {run!r}: its prompts carry no {by} (prompts.subject), so there are no slices; "
            "compare the whole run without --by"
        )
    q = _per_question(df.assign(subject=df["subject"].fillna("(none)")), model_a, model_b)
    names = sorted(q["subject"].unique())
    if len(names) < 2:
        raise UserError(
            f"run {run!r} has {len(names)} {by} with questions of both models ({', '.join(names)}); "
            "slices need at least 2: compare the whole run without --by"
        )
    codes = pd.Index(names).get_indexer(q["subject"])
    d = q["d"].to_numpy(float)
    out = SL.slice_differences(d, codes, len(names), alpha)
    slices = [
        Slice(
            str(s),
            int(out["n"][i]),
            float(out["difference"][i]),
            float(out["lower"][i]),
            float(out["upper"][i]),
            float(out["p_value"][i]),
            float(out["p_adjusted"][i]),
            float(out["p_maxt"][i]),
        )
        for i, s in enumerate(names)
    ]
    whole = pdiff.paired_diff_ci(d[:, None], np.zeros((d.size, 1)), alpha=alpha)
    warn = []
    few = [s.slice for s in slices if s.n < 10]
    if few:
        warn.append(
            AnalysisWarning(
                Notice.SMALL_SAMPLE,
                f"{len(few)} {by}(s) with fewer than 10 questions ({', '.join(few[:5])}"
                f"{', ...' if len(few) > 5 else ''}): their intervals are wide and approximate",
            )
        )
    return SliceComparison(
        run,
        mode,
        (model_a, model_b),
        by,
        float(alpha),
        int(d.size),
        int(q.attrs.get("repeats", 1)),
        float(out["c"]),
        {
            "difference": float(whole["diff"]),
            "lower": float(whole["ci_low"]),
            "upper": float(whole["ci_high"]),
            "p_value": float(whole["p_value"]),
        },
        slices,
        warn,
    )
