"""Presentation: Plotly figure builders for the dashboard, the report and the CLI: plain data in,
``go.Figure`` out, one module per analysis family (``common`` holds the colours, the layout and the
charts every family uses). No database access, no statistics: every builder draws values an engine
function already computed, so the same figures are exported (``dashboard.downloads``), written by the
CLI (:func:`engine.figures.benchmark.write_benchmark_figures`) or rebuilt outside Streamlit."""
