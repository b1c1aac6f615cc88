"""Data map: P(correct) vs semantic consistency per prompt, flagged prompts, variance decomposition."""

import streamlit as st

from dashboard import loaders as L
from dashboard import widgets as ui
from engine.figures.multigen import datamap_figure, histogram_figure, variance_figure

ui.header(
    "Data map",
    "Prompts a model answers consistently but wrongly (low P(correct), high consistency) are "
    "candidates for wrong labels or ambiguous questions.",
)

ch = L.benchmark_choices()
if not ch.runs:
    ui.empty_state(
        "No scored runs yet: generate several repeats per prompt and score them.", "generate", "Generate"
    )
    st.stop()

c1, c2, c3, c4 = st.columns(4)
run = c1.selectbox("Run", ch.runs, key="dm_run")
model = c2.selectbox("Model", ch.models.get(run, []), key="dm_model")
mode = c3.selectbox("Mode", ch.modes.get(run, ["coupled"]), key="dm_mode")
rules = ch.rules.get(run, ["paper"])
run_rule = L.default_rule(run)  # the rule the run was scored with comes first
rule = c4.selectbox(
    "Scoring rule", rules, index=rules.index(run_rule) if run_rule in rules else 0, key="dm_rule"
)
c5, c6, c7, c8 = st.columns(4)
method = c5.selectbox(
    "Clustering",
    L.cluster_methods(run),
    key="dm_method",
    help="answer = identical extracted answers; llm = bidirectional entailment; "
    "embedding = sentence-embedding similarity (an approximation)",
)
subject = c6.selectbox("Subject", ["(all)"] + ch.subjects.get(run, []), key="dm_subject")
ctx = ui.export_context("datamap", run=run, models=(model,))
p_max = c7.slider("Flag: P(correct) ≤", 0.0, 1.0, 0.1, 0.05, key="dm_pmax")
s_min = c8.slider("Flag: consistency S ≥", -3.0, 0.0, -0.8, 0.05, key="dm_smin")

with st.spinner("Computing P(correct), consistency and the variance decomposition…"):
    res = ui.safe(
        L.multigen,
        run,
        model,
        mode=mode,
        rule=rule,
        method=method,
        subject=None if subject == "(all)" else subject,
        p_max=float(p_max),
        s_min=float(s_min),
    )
if res is None:
    st.stop()

sc = res.score
m1, m2, m3, m4 = st.columns(4)
m1.metric("Prompts × generations", f"{res.n} × {res.k}")
m2.metric("Score μ̂", f"{sc.mu:.3f}", help=f"standard error σ̂/√n = {sc.se:.4f}")
m3.metric(
    "95% t CI",
    f"[{sc.ci_low:.3f}, {sc.ci_high:.3f}]",
    help=f"μ̂ ± t(n−1 = {sc.df}) · σ̂/√n, σ̂² = variance of P(correct) over prompts; prompts are the unit",
)
m4.metric("Flagged prompts", res.n_flagged)
st.caption(f"Clusters: {res.clusters_source}")
if res.n_no_answer:
    st.caption(
        f"{res.n_no_answer} of {res.n * res.k} generations have no extractable answer under rule "
        f"`{res.rule}`: each is its own category (it agrees with no other generation), and a prompt is "
        "flagged only when an actual answer repeats, never through non-answers."
    )

prompts = ui.records(vars(p) for p in res.prompts)
ui.chart(
    datamap_figure(
        prompts, float(p_max), float(s_min), title=f"Data map: {model}, {mode} (flag region shaded)"
    ),
    "data_map",
    key="dm_map",
    ctx=ctx,
)

st.subheader("Flagged prompts")
flagged = ui.flagged_ids(prompts)
if not flagged:
    st.info("No prompt falls in the flag region; widen it with the sliders above.")
else:
    gens = L.prompts_generations(run, model, mode, tuple(flagged), rule=rule)
    ui.table(gens, "flagged_generations", key="dm_flagged", ctx=ctx)

c1, c2 = st.columns(2)
with c1:
    dist = res.p_correct_distribution
    ui.chart(
        histogram_figure(
            dist.values, dist.counts, title="Distribution of P(correct)", xaxis="P(correct)"
        ),
        "p_correct_hist",
        key="dm_hist",
        ctx=ctx,
    )
with c2:
    ui.chart(
        variance_figure(
            {"within-prompt": sc.var_within, "between-prompt": sc.var_between},
            title="Variance of μ̂: within + between prompts",
            total=sc.var,
        ),
        "variance",
        key="dm_var",
        ctx=ctx,
    )
    st.caption(
        f"Var̂(μ̂) = σ̂²/n = {sc.var:.3g} (the CI's variance) = within-prompt "
        f"{sc.var_within:.3g} (E[p(1−p)] ≈ {ui.fmt(sc.within, '.4f')}, divided by n·k) + between-prompt "
        f"{sc.var_between:.3g} (σ² ≈ {ui.fmt(sc.sigma2_between, '.4f')}, divided by n); each component "
        "unbiased (docs/METHODS.md 5), the between part clipped at 0."
    )
    b = res.bootstrap
    st.caption(f"Bootstrap over prompts: {ui.bootstrap_text(b)}")
sg = res.single_generation
st.caption(f"Single-generation scores (each repeat alone): {ui.single_text(sg)}")
ui.table(prompts, "data_map_prompts", key="dm_prompts", ctx=ctx)
