"""Coupled Eval dashboard: ``streamlit run app.py``.

The app only reads the database (``engine.store.reader``, via cached ``engine.queries`` calls) and
starts every write as a background job (``engine.jobs``). Pages live in ``pages/``; this file
declares them (so ``pages/_ui.py`` stays a helper, not a page) and draws the shared sidebar.
"""

from __future__ import annotations

import streamlit as st

from pages import _ui as ui

st.set_page_config(page_title="Coupled Eval", page_icon=":material/compare_arrows:", layout="wide")

PAGES = [
    st.Page(ui.PAGES["home"], title="Home", icon=":material/home:", default=True),
    st.Page(ui.PAGES["generate"], title="Generate", icon=":material/play_arrow:"),
    st.Page(ui.PAGES["traces"], title="Token traces", icon=":material/timeline:"),
    st.Page(ui.PAGES["benchmark"], title="Benchmark comparison", icon=":material/query_stats:"),
    st.Page(ui.PAGES["winrates"], title="Win-rates", icon=":material/sports_score:"),
    st.Page(ui.PAGES["ranksets"], title="Rank-sets", icon=":material/format_list_numbered:"),
    st.Page(ui.PAGES["datamap"], title="Data map", icon=":material/scatter_plot:"),
    st.Page(ui.PAGES["upload"], title="Upload", icon=":material/upload_file:"),
]
page = st.navigation(PAGES)

with st.sidebar:
    st.caption(f"Database: `{ui.db_path()}`")
    st.caption("Read-only view; writes run as background jobs.")
    if st.button("Refresh data", icon=":material/refresh:", key="sidebar_refresh"):
        st.cache_data.clear()
        st.rerun()

page.run()
