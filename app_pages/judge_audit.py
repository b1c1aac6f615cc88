"""Judge audit: how far an LLM judge agrees with human labels (docs/METHODS.md 9.2), of a run's judge or
of a comparison set that carries both labels."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.analysis.judge_audit_result import n_of
from engine.figures.judge_bias import length_bias_figure

ui.header(
    "Judge audit",
    "Can the judge be trusted? Agreement, Cohen's κ, Gwet's AC1 and Krippendorff's α with the human "
    "labels, per-model bias (PPR's rectifiers), position consistency, length bias, self-preference, "
    "drift, several judges' correlated errors and the human-human ceiling, each with a 95% interval "
    "clustered by prompt.",
)

sources = [("run", s) for s in L.audit_sources()] + [("set", s) for s in L.set_audit_sources()]
if not sources:
    ui.empty_state(
        "No run has judge verdicts yet and no comparison set has both judge and human labels: judge a "
        "run, then label some of its units, or import a set with both labels.",
        "generate",
        "Generate",
    )
    st.stop()
c1, c2, c3 = st.columns([4, 1, 1])
i = c1.selectbox(
    "Run and judge, or comparison set",
    range(len(sources)),
    format_func=lambda j: sources[j][1].label,
    key="ja_source",
)
kind, src = sources[i]
mode = c2.selectbox("Mode", ["all", "coupled", "independent"], key="ja_mode")
boot = c3.number_input("Resamples", min_value=100, max_value=5000, value=1000, step=100, key="ja_boot")
chosen_mode = None if mode == "all" else mode
if kind == "run":
    res = ui.safe(
        L.judge_audit,
        src.run,
        src.judge,
        mode=chosen_mode,
        n_boot=int(boot),
        label_count=L.run_label_count(src.run),
    )
    ctx = ui.export_context("judge_audit", run=src.run)
else:
    res = ui.safe(L.set_judge_audit, src.name, mode=chosen_mode, n_boot=int(boot))
    ctx = ui.export_context("judge_audit", set_name=src.name)
if res is None:
    st.stop()
if kind == "run":
    ui.report_button(
        src.run, key="ja_report"
    )  # the run's one-file report: win-rates, audit, PPR rank-sets
m1, m2, m3 = st.columns(3)
m1.metric("Units judged", f"{res.n_units:,}")
m2.metric("With a human label", f"{res.n_audited:,}")
m3.metric("Prompts (clusters)", f"{res.n_clusters:,}")
if res.skip_rate is not None:
    st.caption(
        f"Label samples of this run: {n_of(res.n_skipped, 'sampled unit')} skipped "
        f"({res.skip_rate:.1%}); a skipped unit stays in its sample as missing."
    )
for w in res.warnings:
    st.warning(ui.md_escape(w))
ui.table(res.figures_table(), "judge_audit", key="ja_table", ctx=ctx, na_rep="–")
st.caption(
    "κ's chance term is large when both raters favour one label, so high agreement can give a low κ "
    "(the kappa paradox); AC1 and α say whether a low κ is disagreement or skew."
    + (
        " The labels are binary (no tie): sensitivity and specificity take a as positive."
        if res.binary
        else ""
    )
)
st.markdown(
    "**Per-model judge bias**: the judge's strict win-rate of the model minus the humans' on the same "
    "units (> 0: the judge favours it). These are PPR's rectifiers."
)
ui.table(res.bias_table(), "judge_bias", key="ja_bias", ctx=ctx, na_rep="–")
b = res.biases
if b is not None:
    st.subheader("Judge biases")
    if b.length is not None:
        L_ = b.length
        st.markdown(
            f"**Length bias** ({L_.unit}): on the {n_of(L_.judge.n, 'unit')} with both labels and "
            "responses of different length, the share whose label picks the longer response (a tie is "
            "no win), judge minus people > 0: the judge prefers length more than people do."
        )
        ui.table(
            b.length_summary_table(),
            "length_bias",
            key="ja_length",
            ctx=ctx,
            na_rep="–",
        )
        ui.chart(
            length_bias_figure(b.length_table(), res.conf),
            "length_bias_by_gap",
            key="ja_length_fig",
            ctx=ctx,
        )
    else:
        st.caption(
            "Length bias: needs the responses' lengths (a run's audit; a comparison set has no texts)."
        )
    if b.self_preference:
        st.markdown(
            "**Self-preference**: a model of the judge's own family, its bias against the other models' "
            "mean bias (> 0: the judge favours its family)."
        )
        ui.table(b.self_preference_table(), "self_preference", key="ja_self", ctx=ctx, na_rep="–")
    else:
        st.caption("Self-preference: no model of the judge's family among the models compared.")
    if b.drift:
        st.markdown(
            "**Drift**: the same units judged again; the share of verdicts that changed and a "
            "prompt-clustered test of a systematic change (marginal homogeneity)."
        )
        ui.table(b.drift_table(), "judge_drift", key="ja_drift", ctx=ctx, na_rep="–")
    elif kind == "run":
        st.caption(
            "Drift: compare with another judging of the same units (e.g. the same judge re-run later "
            f"under another name): `python -m engine judge-audit --run {src.run} --judge {src.judge} "
            "--drift OTHER`."
        )
st.caption(
    "Expanded percentile intervals (the win-rates' rule) of "
    f"{n_of(res.n_boot, 'prompt-cluster bootstrap resample')} (seed {res.seed}). "
    "Position figures use every unit judged in both orders (no label needed); "
    "a unit judged in both orders has one judge label: "
    "the common winner, or tie when the orders disagree."
)
