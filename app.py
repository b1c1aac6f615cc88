"""Coupled Eval dashboard: ``streamlit run app.py``.

The app only reads the database (cached loaders in ``dashboard.loaders``) and starts every write
as a background job (``dashboard.jobs``). The pages are scripts in ``app_pages/`` (a folder
Streamlit does not auto-discover); ``dashboard.navigation`` lists them once. This file builds the
navigation and draws the shared sidebar.
"""

from __future__ import annotations

import streamlit as st

from dashboard import navigation
from dashboard.loaders import db_path
from dashboard.widgets import md_code

st.set_page_config(page_title="Coupled Eval", page_icon=":material/compare_arrows:", layout="wide")

page = st.navigation(navigation.st_pages())

with st.sidebar:
    st.caption(f"Database: {md_code(db_path())}")
    st.caption("Read-only view; writes run as background jobs.")
    if st.button("Refresh data", icon=":material/refresh:", key="sidebar_refresh"):
        st.cache_data.clear()
        st.rerun()

page.run()
