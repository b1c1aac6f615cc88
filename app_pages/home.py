"""Home: what is in the database, links to every analysis, and a one-click first-run demo."""

import streamlit as st

from dashboard import jobs_panel, navigation
from dashboard import loaders as L
from dashboard import widgets as ui

ui.header("Coupled Eval", "Evaluate and rank LLMs with coupled token generation and honest uncertainty.")

counts = L.overview()
ctx = ui.export_context("home")
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
        st.code(" ".join(["python -m engine", *jobs_panel.DEMO_ARGS]), language="bash")
        if st.button("Run the demo", type="primary", icon=":material/rocket_launch:", key="run_demo"):
            jobs_panel.start_demo()
            st.rerun()

st.subheader("Jobs")
jobs_panel.job_panel(limit=3)

st.subheader("What is stored")
t_runs, t_models, t_data, t_sets = st.tabs(["Runs", "Models", "Datasets", "Comparison sets"])
with t_runs:
    runs = L.runs()
    if runs.empty:
        ui.empty_state("No generation runs yet: start one on the Generate page (or run the demo above).",
                       "generate", "Generate")
    else:
        ui.table(runs, "runs", ctx=ctx)
with t_models:
    models = L.models_table()
    if models.empty:
        st.info("No models stored yet; models are recorded when a run uses them.")
    else:
        ui.table(models, "models", ctx=ctx)
with t_data:
    ds = L.datasets_table()
    if ds.empty:
        st.info("No datasets stored yet; a run stores the prompts of its dataset.")
    else:
        ui.table(ds, "datasets", ctx=ctx)
with t_sets:
    sets = ui.safe(L.comparison_sets)
    if sets is None or sets.empty:
        ui.empty_state("No comparison sets yet: upload human or judge preferences on the Upload page.",
                       "upload", "Upload")
    else:
        ui.table(sets, "comparison_sets", ctx=ctx)

st.subheader("Analyses")
links = [p for p in navigation.PAGES if p.key != "home"]
cols = st.columns(2)
for i, p in enumerate(links):
    cols[0 if i < (len(links) + 1) // 2 else 1].page_link(p.path, label=p.link_label, icon=p.icon)
