"""The Win-rates page's "By category" tab: one pair's W_AB − W_BA per category of a stored set, with
intervals that hold for all categories at once (max-t, clustered by prompt) and Benjamini-Hochberg
adjusted p-values, as a forest plot and a table."""

from __future__ import annotations

import shlex

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.figures.slices import forest_figure


def render(name: str, models: list[str], label: str) -> None:
    """Draw the tab for stored set ``name`` (``models`` best first: the default pair is the top two);
    a set without categories gets one line saying how to add them."""
    cats = ui.safe(L.set_categories, name)
    if cats is None:
        return
    if not cats:
        q = shlex.quote(name)
        export = ui.md_code(f"python -m engine comparisons export {q} --out set.csv")
        reimport = ui.md_code(f"python -m engine import comparisons set.csv --name {q} --replace")
        st.info(
            f"Set {ui.md_escape(name)} has no categories. Add a `category` column to its file (one "
            "category per prompt_id; an Arena line's `category` field) and import it again: "
            f"{export}, add the column, then {reimport}."
        )
        return
    c1, c2 = st.columns(2)
    a = c1.selectbox("Model A", models, index=0, key="wr_cat_a")
    others = [m for m in models if m != a]
    b = c2.selectbox("Model B", others, index=0, key="wr_cat_b")
    res = ui.safe(L.winrate_slices, name, a, b, label=label)
    if res is None:
        return
    for w in res.warnings:
        st.warning(ui.md_escape(w))
    ctx = ui.export_context("winrates", set_name=name)
    fig = forest_figure(
        res.frame(),
        res.overall["difference"],
        res.pair_label,
        "category",
        1 - res.alpha,
        what="win-rate difference",
        overall_name="all categories",
    )
    ui.chart(fig, "forest_category", key="wr_forest", ctx=ctx)
    ui.table(res.frame(), "per_category", key="wr_slices", ctx=ctx, na_rep="–")
    st.caption(
        f"{ui.md_escape(res.pair_label)} per category ({res.label} labels; {res.n:,} comparisons of the "
        f"pair; {ui.md_escape(res.clustering)}): {a}'s strict win-rate against {b} minus {b}'s against "
        f"{a}, a tie a non-win for both. Each interval holds for all {len(res.slices)} categories at once "
        f"with probability {1 - res.alpha:.0%} (max-t over categories, c = {res.critical_value:.2f}; "
        "Agresti-Min adjusted). p_adjusted: Benjamini-Hochberg (false discovery rate); p_maxt: "
        "family-wise. Dashed: all categories pooled."
    )
