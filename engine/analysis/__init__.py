"""Analysis layer: database -> arrays -> :mod:`engine.stats` -> frozen result dataclasses (``to_dict()``
for ``--json``; nested stats results as :mod:`.stats_records`) and DataFrames for tables.

One module per analysis, each read-only (``store.reader``), each the single home of its view:

* :mod:`.overview`    -- what is stored (counts, runs, models, datasets, a run's prompts and units)
* :mod:`.traces`      -- token traces of a unit, alignment, divergence, recomputed Gumbel values
* :mod:`.benchmark`   -- coupled vs independent comparison of two models (covariance, error curve,
  saving)
* :mod:`.multigen`    -- multiple generations: P(correct), variance decomposition, data map
* :mod:`.comparisons` -- pairwise comparisons from files, stored sets, Arena files or judge verdicts
* :mod:`.winrates`    -- win-rate matrix, average win-rates, Bradley-Terry, Elo
* :mod:`.ranksets`    -- rank-sets (human, judge, PPR) and repeated draws
"""
