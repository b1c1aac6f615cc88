"""Report layer: the shareable report (docs/REPORT.md): analysis results -> one self-contained HTML
file or paper tables. It never queries the store or recomputes a statistic: each section reads the
frozen results of the engine's analyses.

* :mod:`.model`          -- ``Section``, ``Figure``, ``Table``, ``Cell``, ``Report``; number formats
* :mod:`.context`        -- ``RunContext``: a run's analyses, each computed once by its engine function
* :mod:`.run_sections`   -- ``RUN_SECTIONS``, the ordered section builders of a run (``RunContext ->
  Section or None``), with :mod:`.run_more` (more of them), :mod:`.run_sequential` (a ``--until``
  run's stop, or a replay), :mod:`.run_race` (a race:
  who left when, on what evidence) and :mod:`.run_audit` (the judge audit and PPR rank-sets)
* :mod:`.run_judged`     -- ``JUDGED_SECTIONS``: a judged run without scores (a chat run), from its verdicts
* :mod:`.set_sections`   -- ``SetContext``, ``SET_SECTIONS``: comparison sets
* :mod:`.run_slices`     -- a run's per-slice section (per subject or task, simultaneous intervals)
* :mod:`.run_gate`       -- a run's release-gate section (``report --gate-margin``: B non-inferior to A?)
* :mod:`.set_audit`      -- a comparison set's judge-audit section
* :mod:`.set_slices`     -- a comparison set's per-category section (one pair, simultaneous intervals)
* :mod:`.render_html`    -- one file: plotly.js once, figure data as JSON, a table under every figure
* :mod:`.paper`          -- Markdown, LaTeX and CSV tables
* :mod:`.build`          -- ``run_report``, ``set_report``, ``run_report_html``, ``report_file_name``
* :mod:`.references`     -- the papers and METHODS sections the methods paragraphs cite
"""
