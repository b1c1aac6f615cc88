"""The shareable report: analysis results -> one self-contained HTML file (:mod:`.render_html`) or paper
tables (:mod:`.paper`). Sections are built from the engine's analyses (:mod:`.run_sections`,
:mod:`.set_sections`); this package never queries the store or recomputes a statistic."""
