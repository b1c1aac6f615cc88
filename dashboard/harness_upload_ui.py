"""The Upload page's harness section: files in, a preview of models and the harness's accuracy,
Import."""

from __future__ import annotations

import streamlit as st

from dashboard import harness_upload
from dashboard import widgets as ui
from engine.errors import UserError


def section() -> None:
    st.caption(
        ui.md_escape(
            "Per-sample results of other harnesses become one imported run (not coupled, not "
            "generated here): lm-eval --log_samples output (results_*.json with its samples_*.jsonl) "
            "or Inspect logs (.eval, .json). Several models are paired by sample id; Inspect epochs "
            "become repeats."
        )
    )
    files = st.file_uploader(
        "Harness files", type=["json", "jsonl", "eval"], accept_multiple_files=True, key="up_harness"
    )
    if not files:
        return
    sig = tuple((f.name, f.size) for f in files)
    if st.session_state.get("up_harness_sig") != sig:  # preview once per selection of files
        st.session_state["up_harness_sig"] = sig
        try:
            st.session_state["up_harness_table"] = harness_upload.preview_files(
                [(f.name, f.getvalue()) for f in files]
            )
            st.session_state.pop("up_harness_error", None)
        except UserError as exc:
            st.session_state["up_harness_error"] = str(exc)
    if st.session_state.get("up_harness_error"):
        st.error(f"Rejected: {st.session_state['up_harness_error']}; nothing was stored.")
        return
    table = st.session_state["up_harness_table"]
    st.success(
        f"Valid: {len(table)} log(s) of {table['model'].nunique()} model(s), paired by sample id."
    )
    ui.table(table, "harness_preview", key="up_harness_preview", ctx=ui.export_context("upload"))
    name = st.text_input("Run name (default: harness-<task>)", key="up_harness_name")
    if st.button(
        "Import harness results", type="primary", icon=":material/upload:", key="up_harness_import"
    ):
        job = harness_upload.start_import(
            harness_upload.save_files([(f.name, f.getvalue()) for f in files]), name
        )
        if job:
            st.success(
                f"Import started as job `{job}`; the run appears on the other pages when it is done."
            )
