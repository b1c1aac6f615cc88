"""Figures layer: Plotly figure builders for the dashboard, the report and the CLI: plain data in,
``go.Figure`` out. No database access, no statistics: every builder draws values an engine function
already computed, so the same figures are exported (``dashboard.downloads``), written by the CLI or
rebuilt outside Streamlit. One module per analysis family:

* :mod:`.common`     -- colours, layout, an empty figure with a message, estimates with intervals
* :mod:`.traces`     -- token traces side by side, the chosen tokens' probabilities, first divergence
* :mod:`.benchmark`  -- the coupled-generation paper's Fig. 2 panels (KDEs, error curves) and the CLI's
  PNGs (``write_benchmark_figures``)
* :mod:`.winrates`   -- the pairwise win-rate heat map and per-pair bars
* :mod:`.ranks`      -- rank-sets (PPR, max-t, accuracy), the repeated draws' dots and trade-off
* :mod:`.multigen`   -- the data map, histograms, the variance decomposition
* :mod:`.judge_bias` -- the judge audit's bias figures (wins of the longer response by length gap)
* :mod:`.slices`     -- the forest plot of per-slice differences
* :mod:`.race`       -- each model's CS against the leader, who left; a replay's generations
* :mod:`.gate`       -- the release gate's interval of B − A against the margin
* :mod:`.sequential` -- a pair's confidence sequence against questions seen; stopping times over orders
"""
