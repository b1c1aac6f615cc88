"""Token traces: coupled generations of several models side by side, aligned by step."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.config import MODES
from engine.figures.traces import divergence_figure, prob_figure, trace_figure

ui.header(
    "Token traces",
    "Coupled models share the Gumbel noise of every step: they agree until their "
    "distributions differ enough for the noise to pick different tokens.",
)

runs = L.runs()
if runs.empty:
    ui.empty_state(
        "No runs yet: generate first (token traces are stored by default).", "generate", "Generate"
    )
    st.stop()

c1, c2, c3 = st.columns([2, 3, 1])
run = c1.selectbox("Run", runs["run_id"].tolist(), key="tr_run")
opts = L.run_options(run)
search = c2.text_input("Search prompts (id or question text)", key="tr_search")
prompts = L.run_prompts(run, search=search or None, limit=500)
if prompts.empty:
    st.info(
        "No prompt matches." if search else "This run has no generations yet (is it still starting?)."
    )
    st.stop()
labels = ui.prompt_labels(prompts)
prompt = c2.selectbox(
    "Prompt", prompts["prompt_id"].tolist(), format_func=lambda p: labels.get(p, p), key="tr_prompt"
)
repeat = c3.selectbox("Repeat", opts.repeats, key="tr_repeat")
chosen = st.multiselect("Models", opts.models, default=opts.models[:4], key=f"tr_models_{run}")
if not chosen:
    st.info("Choose at least one model.")
    st.stop()
ctx = ui.export_context("traces", run=run, models=chosen)

if len(chosen) >= 2 and "coupled" in opts.modes:
    with st.expander("Where do these models diverge? (every unit of the run, coupled mode)"):
        div = L.divergence_summary(run, tuple(chosen))
        ui.chart(divergence_figure(div), "divergence", key="tr_div", ctx=ctx)
        st.caption("Click a row to open that unit below.")
        ui.table(
            div,
            "divergence",
            key="tr_div_table",
            ctx=ctx,
            on_select=ui.open_unit_on_select(
                "tr_div_table",
                div,
                prompt_key="tr_prompt",
                repeat_key="tr_repeat",
                clear_keys=("tr_search",),
            ),
            selection_mode="single-row",
        )

info = L.prompt_info(run, prompt)
if info:
    with st.expander("Prompt", expanded=False):
        # the dataset's own text: shown as written (an image or link in a question loads nothing)
        st.markdown(f"**{ui.md_escape(info.subject or '')}** {ui.md_escape(info.question or '')}")
        if info.choices:
            st.markdown(
                "\n".join(f"- **{ui.md_escape(k)}**: {ui.md_escape(v)}" for k, v in info.choices.items())
            )
        st.markdown(f"Gold answer: **{ui.md_escape(info.gold)}**")

page = st.number_input("Steps page (120 steps each)", min_value=1, value=1, step=1, key="tr_page")
offset = ui.page_offset(page, 120)

for mode in [m for m in MODES if m in opts.modes]:
    view = L.trace_view(run, prompt, int(repeat), mode, tuple(chosen), offset, 120)
    al = view.alignment
    st.subheader(f"{mode.capitalize()} generation")
    if view.steps.empty:
        st.info(
            f"No token traces for this unit in {mode} mode (the run may have been generated with "
            "--no-traces, or this page of steps is past the end)."
        )
        continue
    m1, m2, m3 = st.columns(3)
    m1.metric("Steps shown", f"{al.n_steps} of {view.length}")
    m2.metric("Steps where all models agree", f"{al.n_agree}")
    m3.metric(
        "First divergence", "none" if al.first_divergence is None else f"step {al.first_divergence}"
    )
    fig = trace_figure(
        view.steps,
        chosen,
        al.agree,
        al.first_divergence,
        title=f"{mode}: tokens by step (green = all agree, red = differ)",
        token_names=view.token_names,
    )
    ui.chart(fig, f"trace_{mode}_{prompt}_rep{repeat}", key=f"trace_{mode}", ctx=ctx)
    if view.decisions is not None:
        first = al.first_divergence
        st.markdown(
            f"**What decided step {first}.** Each model picks the token with the largest log p + g (log "
            "p under its temperature-scaled, masked distribution; g the Gumbel noise of that token, "
            + ("shared by the models)." if mode == "coupled" else "drawn independently per model).")
            + (
                f" {ui.md_escape(view.explanation.text)}"
                if view.explanation and view.explanation.text
                else ""
            )
        )
        ui.table(
            ui.decision_rows(view.decisions),
            f"decision_{mode}_{prompt}_rep{repeat}_step{first}",
            key=f"tr_decision_{mode}",
            ctx=ctx,
        )
    if view.gumbel_recomputed:
        chk = view.gumbel_check
        st.caption(
            "Hover a token: its probability in each model, the top alternatives, and the Gumbel values "
            "recomputed from the noise key (seed, prompt, repeat, step, token id)."
            + (
                " They equal the values stored with the trace."
                if chk is not None and chk <= 1e-5
                else ""
            )
        )
        if chk is not None and chk > 1e-5:
            st.warning(
                "The Gumbel values stored with this trace differ from the recomputation by up to "
                f"{chk:.3g}: the trace was not produced with this noise key (imported or synthetic "
                "data?)."
            )
    else:
        st.caption(
            "Gumbel values of the chosen tokens are not recomputed for this run (byte-string noise keys "
            "need the tokenizers); the stored Gumbel values of the top alternatives are shown on hover."
        )
    with st.expander(f"Probability of the chosen token ({mode})"):
        ui.chart(
            prob_figure(view.steps, chosen, al.first_divergence),
            f"prob_{mode}_{prompt}_rep{repeat}",
            key=f"prob_{mode}",
            ctx=ctx,
        )

st.subheader("Generations of this unit")
gens = L.unit_generations(run, prompt, int(repeat))
ui.table(gens, f"generations_{prompt}_rep{repeat}", key="tr_gens", ctx=ctx)
