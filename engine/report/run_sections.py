"""The sections of a run report, one builder each (``RunContext -> Section | None``; None: the run does
not support that analysis), in the order of :data:`RUN_SECTIONS`.

Adding an analysis is one builder here (or in a module of its own) and one line in :data:`RUN_SECTIONS`:
read its result from the engine's analysis function, draw it with :mod:`engine.figures`, give the numbers
behind each figure as a table, a methods paragraph and its references. The headline and design come
first, the commands that reproduce the run and the report last.
"""

from __future__ import annotations

import pandas as pd

from engine.figures.common import interval_figure
from engine.figures.ranks import rankset_intervals_figure
from engine.report import references as ref
from engine.report.context import RunContext, frame_table
from engine.report.model import Figure, Section, Table, cell, num, pct, text_row, with_ci
from engine.report.run_audit import judge_audit_section
from engine.report.run_gate import gate_section
from engine.report.run_more import (
    benchmark_section,
    design_section,
    harness_paired_section,
    multigen_section,
    reproduce_section,
    winrates_section,
)
from engine.report.run_race import race_section
from engine.report.run_sequential import sequential_section
from engine.report.run_slices import slices_section


def _decided(lo: float, hi: float) -> bool:
    return lo > 0 or hi < 0


def _pair_sentence(ctx: RunContext, a: str, b: str) -> str | None:
    p = next((p for p in ctx.summary.pairs if {p.model_a, p.model_b} == {a, b}), None)
    d = None if p is None else p.diff.get(ctx.mode)
    if p is None or d is None:
        return None
    sign = 1 if d.diff >= 0 else -1
    better, worse = (p.model_a, p.model_b) if sign > 0 else (p.model_b, p.model_a)
    lo, hi = sorted((sign * d.ci_low, sign * d.ci_high))
    verdict = (
        "decided: the 95% interval excludes 0"
        if _decided(d.ci_low, d.ci_high)
        else "not decided: the 95% interval includes 0, so the data cannot tell these two apart"
    )
    return (
        f"{better} scores higher than {worse} by {abs(d.diff):.3f} accuracy (95% CI [{lo:+.3f}, "
        f"{hi:+.3f}] about questions like these; paired over {d.n_questions:,} questions, {ctx.mode} "
        f"generations): {verdict}."
    )


def _accuracy_table(ctx: RunContext, caption: str) -> Table:
    s = ctx.summary
    rows = [
        [
            cell(a.model),
            cell(a.mode),
            cell(with_ci(a.accuracy, a.ci_low, a.ci_high), a.accuracy, f"accuracy/{a.model}/{a.mode}"),
            cell(num(a.se, 4), a.se),
            cell(num(a.n_questions), a.n_questions),
            cell(num(a.n_repeats), a.n_repeats),
        ]
        for a in s.accuracy
        if a.model in ctx.models
    ]
    return Table(
        caption,
        ["model", "mode", "accuracy [95% CI]", "SE", "questions", "repeats"],
        rows,
        "95% t interval over questions (a question's repeats are dependent: questions are the clusters)",
    )


def _pairs_table(ctx: RunContext, caption: str) -> Table:
    rows, starred = [], False
    for p in ctx.summary.pairs:
        if p.model_a not in ctx.models or p.model_b not in ctx.models:
            continue
        for mode, d in p.diff.items():
            mark = "*" if _decided(d.ci_low, d.ci_high) else ""
            starred = starred or bool(mark)
            ag = p.agreement.get(mode)
            rows.append(
                [
                    cell(f"{p.model_a} − {p.model_b}"),
                    cell(mode),
                    cell(
                        with_ci(d.diff, d.ci_low, d.ci_high, signed=True) + mark,
                        d.diff,
                        f"diff/{p.model_a}/{p.model_b}/{mode}",
                    ),
                    cell(num(d.se, 4), d.se),
                    cell(pct(ag.mean) if ag else "-", ag.mean if ag else None),
                    cell(
                        pct(p.variance_saving) if mode == "coupled" else "",
                        p.variance_saving if mode == "coupled" else None,
                    ),
                ]
            )
    return Table(
        caption,
        ["pair", "mode", "difference [95% CI]", "SE", "same answer", "variance saving"],
        rows,
        # the star's note only where a row carries one
        ("* the 95% interval of the paired difference excludes 0. " if starred else "")
        + "Same answer: share of units (question, repeat) where both models give the same answer. "
        "Variance saving: 1 − SE²_coupled / SE²_independent.",
    )


def headline_section(ctx: RunContext) -> Section:
    s = ctx.summary
    paras = [
        f"Run {s.run}: {len(s.models)} models, dataset {s.dataset_id} ({s.kind}), {s.n_questions:,} "
        f"questions × {s.n_repeats} repeats, modes {', '.join(s.modes)}, scoring rule {s.rule}"
        + (f", chance {s.chance:.3f}" if s.chance is not None else "")
        + "."
    ]
    groups = "".join(
        f"; group {g.name} = subtasks {', '.join(g.subtasks)}" for g in ctx.design.imported_groups
    )
    if ctx.design.imported_from and "coupled" not in s.modes:
        paras.append(
            f"Imported from {ctx.design.imported_from}{groups}: the scores are the harness's own; the "
            "generations were not made here and are not coupled."
        )
    elif ctx.design.imported_from and ctx.design.served:
        paras.append(
            f"Imported from {ctx.design.imported_from}, sampled through this product's server "
            f"({ctx.design.served}): the scores are the harness's own, each sample linked to the "
            "served generation of its request."
        )
    elif ctx.design.imported_from:
        paras.append(
            f"Imported from {ctx.design.imported_from}: generations made elsewhere (coupled and "
            "independent), scored here."
        )
    if ctx.pair:
        sent = _pair_sentence(ctx, *ctx.pair)
        if sent:
            paras.append(sent)
    r = ctx.ranks
    if r is not None:
        paras.append(
            f"Rank-sets (simultaneous {1 - r.alpha:.0%}, {r.mode}): "
            + ", ".join(f"{m.model} [{m.rank_low}, {m.rank_high}]" for m in r.models)
            + "."
        )
    p = next((p for p in s.pairs if ctx.pair and {p.model_a, p.model_b} == set(ctx.pair)), None)
    if p is not None and p.variance_saving is not None:
        paras.append(
            f"Coupling saving for this pair: {pct(p.variance_saving)} of the variance of the difference"
            + (
                f" (independent generation needs {p.questions_factor:.1f}× the questions for the same "
                "precision)"
                if p.questions_factor
                else ""
            )
            + "."
        )
    tables = [_accuracy_table(ctx, "Accuracy per model and mode")]
    if s.pairs:
        tables.append(_pairs_table(ctx, "Paired differences"))
    warns = [str(w) for w in s.warnings] + [
        str(w) for w in (ctx.benchmark.warnings if ctx.benchmark else [])
    ]
    return Section(
        "headline",
        "Headline",
        paras,
        tables=tables,
        warnings=list(dict.fromkeys(warns)),
        methods="Accuracy: mean score over questions and repeats with a 95% t interval over questions; "
        "differences: the paired per-question difference with a t interval over questions.",
        references=[ref.METHODS_CLUSTERED],
    )


def accuracy_section(ctx: RunContext) -> Section:
    s = ctx.summary
    acc = [a for a in s.accuracy if a.model in ctx.models]
    fig = interval_figure(
        [a.model for a in acc],
        [a.accuracy for a in acc],
        [a.ci_low for a in acc],
        [a.ci_high for a in acc],
        groups=[a.mode for a in acc],
        title="Accuracy with 95% CI",
        yaxis="accuracy",
        horizontal_line=s.chance,
    )
    return Section(
        "accuracy",
        "Accuracy per model",
        [
            f"Dotted line: chance ({s.chance:.3f})."
            if s.chance is not None
            else "No chance baseline (no gold answers)."
        ],
        figures=[
            Figure(
                "accuracy",
                fig,
                _accuracy_table(ctx, "Accuracy per model and mode (the figure's numbers)"),
            )
        ],
        methods=(
            "Each model's accuracy is the mean score over the Q questions and R repeats. Its 95% "
            "interval is a t interval over questions on the per-question mean scores (df Q − 1), "
            "clipped to [0, 1]: the R repeats of one question are dependent, so the question is the "
            "unit of resampling."
        ),
        references=[ref.METHODS_CLUSTERED, ref.MULTIGEN],
    )


def paired_section(ctx: RunContext) -> Section | None:
    s = ctx.summary
    rows = [
        (p, mode, d)
        for p in s.pairs
        if p.model_a in ctx.models and p.model_b in ctx.models
        for mode, d in p.diff.items()
    ]
    if not rows:
        return None
    fig = interval_figure(
        [f"{p.model_a} − {p.model_b}" for p, _, _ in rows],
        [d.diff for *_, d in rows],
        [d.ci_low for *_, d in rows],
        [d.ci_high for *_, d in rows],
        groups=[m for _, m, _ in rows],
        title="Paired accuracy difference (95% CI)",
        yaxis="accuracy difference",
        horizontal_line=0.0,
    )
    sav = [
        [
            cell(f"{p.model_a} − {p.model_b}"),
            cell(pct(p.variance_saving), p.variance_saving),
            cell(
                "-"
                if p.variance_saving_ci is None
                else f"[{pct(p.variance_saving_ci[0])}, {pct(p.variance_saving_ci[1])}]"
            ),
            cell(num(p.questions_factor, 2), p.questions_factor),
        ]
        for p in s.pairs
        if p.variance_saving is not None and p.model_a in ctx.models and p.model_b in ctx.models
    ]
    tables = (
        [
            Table(
                "Coupling saving per pair",
                ["pair", "variance saving", "95% CI", "questions factor"],
                sav,
                "variance saving = 1 − SE²_coupled / SE²_independent of the paired difference over "
                "questions; questions factor = 1 / (1 − saving): how many times the questions "
                "independent generation needs for the same precision",
            )
        ]
        if sav
        else []
    )
    return Section(
        "paired",
        "Paired comparison and the coupling saving",
        [
            "Each pair's accuracy difference, per mode, with its 95% interval; coupled generations "
            "share the sampling noise, so their difference varies less than that of independent "
            "generations."
        ],
        figures=[Figure("paired", fig, _pairs_table(ctx, "Paired differences (the figure's numbers)"))],
        tables=tables,
        methods=(
            "The difference A − B is the mean over questions of the per-question difference of mean "
            "scores; its interval is a t interval over questions (METHODS 7.1), which is valid for "
            "coupled and independent generation alike because both models answer the same questions. "
            "The saving compares the two designs' squared standard errors on the questions both modes "
            "have, with a studentised interval; the agreement is the share of units where the two "
            "models' extracted answers coincide."
        ),
        references=[ref.COUPLED, ref.METHODS_CLUSTERED],
    )


def ranksets_section(ctx: RunContext) -> Section | None:
    r = ctx.ranks
    if r is None:
        return None
    df = pd.DataFrame([{"model": m.model, "lower": m.rank_low, "upper": m.rank_high} for m in r.models])
    fig = rankset_intervals_figure(df, title=f"Accuracy rank-sets ({1 - r.alpha:.0%} simultaneous)")
    rows = [
        [
            cell(m.model),
            cell(with_ci(m.accuracy, m.ci_low, m.ci_high), m.accuracy, f"rank_acc/{m.model}"),
            cell(f"[{m.rank_low}, {m.rank_high}]", None, f"rankset/{m.model}"),
        ]
        + ([cell(num(m.harness_accuracy), m.harness_accuracy)] if r.imported else [])
        for m in r.models
    ]
    cols = ["model", "accuracy [95% CI]", "rank-set"] + (["harness reported"] if r.imported else [])
    table = Table(
        f"Rank-sets over {len(r.models)} models ({r.mode}, {r.n_questions:,} questions)",
        cols,
        rows,
        f"rank-set: the ranks the model may hold, jointly for all models at level {1 - r.alpha:.0%}",
    )
    return Section(
        "ranksets",
        "Accuracy rank-sets",
        [
            "Which model is best, with the uncertainty a leaderboard leaves out: each model's rank-set "
            f"holds its true rank, all models at once, with probability at least {1 - r.alpha:.0%}."
        ],
        figures=[Figure("ranksets", fig, table)],
        methods=(
            "theta_m is model m's accuracy; Sigma = Cov(per-question means) / Q estimates the "
            "covariance of the estimates, questions as clusters. Rank-sets: simultaneous max-t with "
            f"step-down over all pairwise differences (calibration: {r.calibration}; {r.n_draws:,} "
            f"draws, seed {r.seed}; critical values "
            + ", ".join(f"{c:.3f}" for c in r.critical_values[:3])
            + ")."
        ),
        references=[ref.METHODS_RANKSETS, ref.PPR, ref.ROMANO_WOLF, ref.CAMERON],
    )


# The run report's sections, in reading order. A new analysis: one builder and one line here (before
# reproduce_section, which stays last).
RUN_SECTIONS = (
    headline_section,
    design_section,
    accuracy_section,
    paired_section,
    harness_paired_section,
    benchmark_section,
    slices_section,
    gate_section,
    ranksets_section,
    winrates_section,
    multigen_section,
    sequential_section,
    race_section,
    judge_audit_section,
    reproduce_section,
)


def run_sections(ctx: RunContext) -> list[Section]:
    """Every section the run supports, in order (a builder that returns None is left out); a judged run
    without scores gets :data:`engine.report.run_judged.JUDGED_SECTIONS`."""
    from engine.report.run_judged import JUDGED_SECTIONS

    builders = RUN_SECTIONS if ctx.scored else JUDGED_SECTIONS
    out = [s for build in builders for s in [build(ctx)] if s is not None]
    if ctx.notes:  # what the run could not give, one line each, in the headline's warnings
        out[0] = Section(**{**out[0].__dict__, "warnings": [*out[0].warnings, *ctx.notes]})
    return out


__all__ = ["RUN_SECTIONS", "run_sections", "frame_table", "text_row"]
