"""Judge audit: how far a run's LLM judge agrees with its human labels (docs/METHODS.md 9.2)."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui

ui.header(
    "Judge audit",
    "Can the judge be trusted? Agreement and Cohen's κ with the human labels, per-model bias "
    "(PPR's rectifiers), position consistency, several judges' correlated errors and the "
    "human-human ceiling, each with a 95% interval clustered by prompt.",
)

sources = L.audit_sources()
if not sources:
    ui.empty_state(
        "No run has judge verdicts yet: judge a run, then label some of its units.",
        "generate",
        "Generate",
    )
    st.stop()
c1, c2, c3 = st.columns([4, 1, 1])
i = c1.selectbox(
    "Run and judge", range(len(sources)), format_func=lambda j: sources[j].label, key="ja_source"
)
src = sources[i]
mode = c2.selectbox("Mode", ["all", "coupled", "independent"], key="ja_mode")
boot = c3.number_input("Resamples", min_value=100, max_value=5000, value=1000, step=100, key="ja_boot")
res = ui.safe(
    L.judge_audit,
    src.run,
    src.judge,
    mode=None if mode == "all" else mode,
    n_boot=int(boot),
    label_count=L.run_label_count(src.run),
)
if res is None:
    st.stop()
ui.report_button(src.run, key="ja_report")  # the run's one-file report: win-rates, audit, PPR rank-sets
m1, m2, m3 = st.columns(3)
m1.metric("Units judged", f"{res.n_units:,}")
m2.metric("With a human label", f"{res.n_audited:,}")
m3.metric("Prompts (clusters)", f"{res.n_clusters:,}")
if res.skip_rate is not None:
    st.caption(
        f"Label samples of this run: {res.n_skipped:,} sampled units skipped ({res.skip_rate:.1%}); a "
        "skipped unit stays in its sample as missing."
    )
for w in res.warnings:
    st.warning(ui.md_escape(w))
ctx = ui.export_context("judge_audit", run=src.run)
ui.table(res.figures_table(), "judge_audit", key="ja_table", ctx=ctx)
st.markdown(
    "**Per-model judge bias**: the judge's strict win-rate of the model minus the humans' on the same "
    "units (> 0: the judge favours it). These are PPR's rectifiers."
)
ui.table(res.bias_table(), "judge_bias", key="ja_bias", ctx=ctx)
st.caption(
    f"Expanded percentile intervals (the win-rates' rule) of {res.n_boot} prompt-cluster bootstrap "
    f"resamples (seed {res.seed}). Position figures use every unit judged in both orders (no label "
    "needed); a unit judged in both orders has one judge label: the common winner, or tie when the "
    "orders disagree."
)
