"""Home: what is in the database, links to every analysis, and a one-click first-run demo."""

import streamlit as st

from pages import _ui as ui

ui.header("Coupled Eval", "Evaluate and rank LLMs with coupled token generation and honest uncertainty.")

counts = ui.q("overview")
cols = st.columns(6)
for col, (label, key) in zip(cols, [("Runs", "runs"), ("Models", "models"), ("Generations", "generations"),
                                     ("Token traces", "token_traces"), ("Scores", "scores"),
                                     ("Comparison sets", "comparison_sets")]):
    col.metric(label, f"{counts.get(key, 0):,}")

if counts.get("generations", 0) == 0:
    with st.container(border=True):
        st.subheader("First run: the demo")
        st.markdown(
            "The database is empty. The demo generates answers to the built-in multiple-choice questions "
            "with the packaged **SmolLM2-135M-Instruct** and its **int8** variant, in **coupled** mode "
            "(both models share the same Gumbel noise) and **independent** mode, 5 repeats each, then "
            "scores them. It runs in the background (a few minutes on 2 CPU cores); follow it below.")
        st.code(" ".join(["python -m engine", *ui.DEMO_ARGS]), language="bash")
        if st.button("Run the demo", type="primary", icon=":material/rocket_launch:", key="run_demo"):
            ui.start_demo()
            st.rerun()

st.subheader("Jobs")
ui.job_panel(limit=3)

st.subheader("What is stored")
t_runs, t_models, t_data, t_sets = st.tabs(["Runs", "Models", "Datasets", "Comparison sets"])
with t_runs:
    runs = ui.q("runs")
    if runs.empty:
        ui.empty_state("No generation runs yet: start one on the Generate page (or run the demo above).",
                       "generate", "Generate")
    else:
        ui.table(runs, "runs")
with t_models:
    models = ui.q("models_table")
    if models.empty:
        st.info("No models stored yet; models are recorded when a run uses them.")
    else:
        ui.table(models, "models")
with t_data:
    ds = ui.q("datasets_table")
    if ds.empty:
        st.info("No datasets stored yet; a run stores the prompts of its dataset.")
    else:
        ui.table(ds, "datasets")
with t_sets:
    sets = ui.safe("comparison_sets")
    if sets is None or sets.empty:
        ui.empty_state("No comparison sets yet: upload human or judge preferences on the Upload page.",
                       "upload", "Upload")
    else:
        ui.table(sets, "comparison_sets")

st.subheader("Analyses")
c1, c2 = st.columns(2)
with c1:
    st.page_link(ui.PAGES["generate"], label="Generate: run models coupled and independent", icon=":material/play_arrow:")
    st.page_link(ui.PAGES["traces"], label="Token traces: where coupled models diverge", icon=":material/timeline:")
    st.page_link(ui.PAGES["benchmark"], label="Benchmark comparison: variance, sample saving", icon=":material/query_stats:")
    st.page_link(ui.PAGES["winrates"], label="Win-rates: pairwise preferences", icon=":material/sports_score:")
with c2:
    st.page_link(ui.PAGES["ranksets"], label="Rank-sets: prediction-powered ranking", icon=":material/format_list_numbered:")
    st.page_link(ui.PAGES["datamap"], label="Data map: P(correct) vs consistency", icon=":material/scatter_plot:")
    st.page_link(ui.PAGES["upload"], label="Upload: human / judge comparisons", icon=":material/upload_file:")
