"""The set report's per-category section: the headline pair's W_AB − W_BA per category (A's strict
win-rate against B minus B's against A; a tie a non-win for both), each interval holding for all
categories at once (max-t, clustered by prompt), with Benjamini-Hochberg adjusted p-values: a forest
plot and its table (docs/METHODS.md 7.2, 7.3).

Numbers come from :func:`engine.analysis.winrate_slices.winrate_slices` (the same call as ``engine
winrates --set NAME --by category``)."""

from __future__ import annotations

import shlex

from engine.errors import UserError
from engine.figures.slices import forest_figure
from engine.report import references as ref
from engine.report.context import frame_table
from engine.report.model import Figure, Section
from engine.report.run_slices import AGRESTI_MIN, BH


def set_slices_section(ctx) -> Section | None:
    """Per category, the set's two best models by average win-rate (or the two ``--models``); None when
    the set has no categories, or fewer than two with a comparison of the pair."""
    from engine.analysis.winrate_slices import set_categories, winrate_slices

    if not set_categories(ctx.db, ctx.name):
        return None
    top = ctx._models if ctx._models and len(ctx._models) == 2 else ctx.winrates.table["model"].tolist()
    if len(top) < 2:
        return None
    a, b = top[0], top[1]
    try:
        res = winrate_slices(ctx.db, ctx.name, a, b, ctx.label, ctx.alpha)
    except UserError:
        return None  # one category with the pair, or none: the win-rate sections say it all
    excl = [s.slice for s in res.slices if (s.lower or 0) > 0 or (s.upper or 0) < 0]
    paras = [
        f"{res.pair_label} per category ({res.label} labels, {len(res.slices)} categories, "
        f"{res.n:,} comparisons of the pair; {res.clustering}): "
        + (
            f"the interval excludes 0 for {len(excl)} ({', '.join(excl[:8])}"
            + (", ...)." if len(excl) > 8 else ").")
            if excl
            else "no interval excludes 0: no single category is shown to prefer one of the two."
        ),
        f"All categories: {res.overall['difference']:+.3f} [{res.overall['lower']:+.3f}, "
        f"{res.overall['upper']:+.3f}].",
    ]
    frame = res.frame()
    fig = forest_figure(
        frame,
        res.overall["difference"],
        res.pair_label,
        "category",
        1 - res.alpha,
        what="win-rate difference",
        overall_name="all categories",
    )
    tab = frame_table(
        frame,
        f"{res.pair_label} per category (the figure's numbers)",
        digits=4,
        footnote=f"lower / upper: {1 - res.alpha:.0%} simultaneous over the categories; p_adjusted: "
        "Benjamini-Hochberg; p_maxt: family-wise",
    )
    return Section(
        "slices",
        f"Per category: {a} vs {b} with simultaneous intervals",
        paras,
        figures=[Figure("forest_category", fig, tab)],
        warnings=[str(w) for w in res.warnings],
        methods=(
            f"Per category, W_AB − W_BA = (#{{A preferred}} − #{{B preferred}}) / #{{A vs B comparisons}} "
            f"({ref.WINRATE_DEFINITION}). Its interval treats prompts as clusters (the cluster-robust SE "
            "of that ratio, with two Agresti-Min pseudo-clusters) and is the adjusted centre ± c SE, with "
            f"c the {1 - res.alpha:.0%} quantile of the largest |t| over the categories (c = "
            f"{res.critical_value:.3f}; categories hold different prompts, so the maximum factorises): "
            "every interval holds at once. p-values: two-sided t per category, Benjamini-Hochberg "
            f"adjusted. Reproduce: python -m engine winrates --set {shlex.quote(ctx.name)} --label "
            f"{res.label} --by category --model-a {shlex.quote(a)} --model-b {shlex.quote(b)}."
        ),
        references=[ref.METHODS_WINRATES, ref.METHODS_RANKSETS, AGRESTI_MIN, BH],
    )
