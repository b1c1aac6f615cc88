"""Upload: human / judge pairwise comparisons, validated before anything is stored; list and delete
sets."""

import streamlit as st

from dashboard import harness_upload_ui as harness_ui
from dashboard import jobs_panel, uploads
from dashboard import loaders as L
from dashboard import widgets as ui

ui.header(
    "Upload comparisons",
    "CSV with columns prompt_id, model_a, model_b, winner (model_a / model_b / tie / "
    "tie (bothbad) / a / b) and optional judge_winner and category (one per prompt: win-rates per "
    "category), or Chatbot Arena JSON lines. "
    "Files are checked first; nothing is stored unless every row is valid.",
)

fmt = st.radio(
    "Format",
    ["csv", "arena"],
    horizontal=True,
    key="up_format",
    format_func={"csv": "CSV", "arena": "Arena JSON lines (human + optional judge file)"}.get,
)
if fmt == "csv":
    main = st.file_uploader("Comparisons CSV", type=["csv"], key="up_csv")
    judge = None
else:
    main = st.file_uploader("Human file (JSON lines)", type=["json", "jsonl"], key="up_human")
    judge = st.file_uploader(
        "Judge file, line-aligned (optional)", type=["json", "jsonl"], key="up_judge"
    )

if main is not None:
    main_bytes = main.getvalue()
    judge_bytes = judge.getvalue() if judge is not None else None
    rows, problems = uploads.validate_upload(
        fmt, main_bytes, judge_bytes, main.name, judge.name if judge else None
    )
    ctx = ui.export_context("upload", set_name=uploads.default_set_name(main.name))
    if problems:
        st.error(
            f"Rejected: {len(problems)} problem(s) in "
            f"{ui.md_escape(main.name + (' / ' + judge.name if judge else ''))}; "
            "nothing was stored. Fix the file and upload it again."
        )
        if fmt == "csv":
            st.caption(
                "Line numbers count the header: line 1 is the header, the first comparison is line 2 "
                "(as an editor or spreadsheet shows them)."
            )
        ui.table(uploads.problems_table(problems, fmt), "problems", key="up_problems", ctx=ctx, wrap=200)
    else:
        st.success(f"Valid: {len(rows):,} comparisons between {uploads.n_models(rows)} models.")
        st.dataframe(rows.head(20), hide_index=True, key="up_preview")
        name = st.text_input(
            "Name of the comparison set", value=uploads.default_set_name(main.name), key="up_name"
        )
        replace = st.checkbox("Replace a set of the same name", key="up_replace")
        if st.button("Import", type="primary", icon=":material/upload:", key="up_import"):
            job = uploads.start_import(
                fmt, main.name, main_bytes, judge.name if judge else None, judge_bytes, name, replace
            )
            if job:
                st.success(f"Import started as job `{job}`; the set appears below when it is done.")

st.subheader("Harness results (lm-evaluation-harness, Inspect AI)")
harness_ui.section()

st.subheader("Import and delete jobs")
jobs_panel.job_panel(kind=None, limit=4)

st.subheader("Stored comparison sets")
sets = ui.safe(L.comparison_sets)
if sets is None or sets.empty:
    st.info("No comparison sets stored yet.")
else:
    ui.table(sets, "comparison_sets", key="up_sets", ctx=ui.export_context("upload"))
    c1, c2, c3 = st.columns([2, 2, 1])
    victim = c1.selectbox("Delete a set", sets["name"].tolist(), key="up_delete_name")
    sure = c2.checkbox(f"Yes, delete {ui.md_escape(victim)}", key="up_delete_sure")
    if c3.button("Delete", disabled=not sure, icon=":material/delete:", key="up_delete"):
        job = jobs_panel.start_job(
            ["comparisons", "delete", victim, "--db", str(L.db_path())], kind="delete"
        )
        if job:
            st.success(f"Deleting {ui.md_escape(victim)} (job `{job}`).")
