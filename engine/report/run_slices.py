"""The run report's per-slice section: the headline pair's difference A − B per subject (MMLU) or per
task (an imported harness group's subtasks), each interval holding for all slices at once (max-t), with
Benjamini-Hochberg adjusted p-values: a forest plot and its table (docs/METHODS.md 7.1, 7.3).

Numbers come from :func:`engine.analysis.slices.slice_comparison` (the same call as ``engine
benchmark-compare --run RUN --by subject|task``)."""

from __future__ import annotations

import shlex

from engine.errors import UserError
from engine.figures.slices import forest_figure
from engine.report.context import RunContext, frame_table
from engine.report.model import Figure, Section

METHODS_SLICES = "docs/METHODS.md sections 7.1 (paired difference) and 7.3 (max-t), applied to slices"
AGRESTI_MIN = (
    'Agresti and Min, "Simple improved confidence intervals for comparing matched proportions", '
    "Statistics in Medicine 2005"
)
BH = 'Benjamini and Hochberg, "Controlling the false discovery rate", JRSS-B 1995'


def slices_section(ctx: RunContext) -> Section | None:
    """A − B of the headline pair per subject / task; None when the run has fewer than two."""
    from engine.analysis.slices import slice_comparison

    if ctx.pair is None:
        return None
    by = "task" if ctx.imported else "subject"
    a, b = ctx.pair
    try:
        res = slice_comparison(ctx.db, ctx.run, a, b, by, ctx.mode, ctx.summary.rule, ctx.alpha)
    except UserError:
        return None  # no subjects / tasks, or one: the whole-run sections say it all
    excl = [s.slice for s in res.slices if s.lower > 0 or s.upper < 0]
    paras = [
        f"{res.label} per {by} ({res.mode}, {len(res.slices)} {by}s, {res.n_questions:,} questions): "
        + (
            f"the interval excludes 0 for {len(excl)} ({', '.join(excl[:8])}"
            + (", ...)." if len(excl) > 8 else ").")
            if excl
            else "no interval excludes 0: no single slice is shown to differ, at this many questions."
        ),
        f"Whole run: {res.overall['difference']:+.3f} [{res.overall['lower']:+.3f}, "
        f"{res.overall['upper']:+.3f}].",
    ]
    fig = forest_figure(res.frame(), res.overall["difference"], res.label, by, 1 - res.alpha)
    tab = frame_table(
        res.frame(),
        f"{res.label} per {by} (the figure's numbers)",
        digits=4,
        footnote=f"lower / upper: {1 - res.alpha:.0%} simultaneous over the {by}s; p_adjusted: "
        "Benjamini-Hochberg; p_maxt: family-wise",
    )
    return Section(
        "slices",
        f"Per {by}: {res.label} with simultaneous intervals",
        paras,
        figures=[Figure(f"forest_{by}", fig, tab)],
        warnings=[str(w) for w in res.warnings],
        methods=(
            f"Per {by}, the paired difference over its questions (mean over repeats of A − B per question). "
            f"Its interval is the Agresti-Min adjusted mean ± c SE, with c the {1 - res.alpha:.0%} quantile "
            f"of the largest |t| over the {by}s (c = {res.critical_value:.3f}; {by}s hold different "
            "questions, so the maximum factorises): every interval holds at once. The adjustment (two "
            "pseudo-questions) keeps a slice whose questions all agree from a point interval. p-values: "
            "two-sided t per slice, Benjamini-Hochberg adjusted. Reproduce: python -m engine "
            f"benchmark-compare --run {shlex.quote(ctx.run)} --model-a {shlex.quote(a)} --model-b "
            f"{shlex.quote(b)} --by {by}."
        ),
        references=[METHODS_SLICES, AGRESTI_MIN, BH],
    )
