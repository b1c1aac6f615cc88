"""Presentation layer: the Streamlit dashboard's shared parts (the pages are in ``app_pages/``).

* :mod:`.navigation` -- the one page table (``app.py``, the Home page's links and the tests use it)
* :mod:`.loaders`    -- one typed, cached loader per view, each importing its engine function directly
* :mod:`.widgets`    -- header, empty states, charts and tables with downloads, formatting, row
  flatteners
* :mod:`.downloads`  -- figure -> PNG / SVG / HTML bytes, table -> CSV bytes (no Streamlit)
* :mod:`.jobs`       -- background jobs: every write runs as a detached ``python -m engine`` process (no
  Streamlit)
* :mod:`.jobs_panel` -- starting jobs from forms and the live job panel
* :mod:`.refresh`    -- how often the live views re-run (one period while a job runs, one otherwise)
* :mod:`.uploads`    -- validating, saving and importing uploaded comparison files

The dashboard only reads the database; importing this package does not import Streamlit.
"""
