"""Analysis layer: database -> arrays -> :mod:`engine.stats` -> frozen result dataclasses
(``to_dict()`` for ``--json``). Read-only (``store.reader``); one module per analysis, each the single
home of its view; the CLI and the dashboard call the same functions.

* :mod:`.overview`       -- what is stored (counts, runs, models, datasets, a run's prompts and units)
* :mod:`.summary`        -- a scored run's headline findings (Home and ``engine summary``)
* :mod:`.traces`         -- token traces of a unit, alignment, divergence, recomputed Gumbel values
* :mod:`.benchmark`      -- coupled vs independent comparison of two models; its nested result types
  in :mod:`.benchmark_result`
* :mod:`.accuracy_ranks` -- accuracy rank-sets over k models
* :mod:`.multigen`       -- multiple generations: P(correct), variance decomposition, data map
* :mod:`.comparisons`    -- pairwise comparisons from files, stored sets, Arena files or judge verdicts
  as one normalised frame
* :mod:`.winrates`       -- win-rates, Bradley-Terry, Elo; nested result types in
  :mod:`.winrates_result`
* :mod:`.ranksets`, :mod:`.rankset_draws` -- rank-sets from human, judge or both (PPR), and their
  repeated draws
* :mod:`.run_units`      -- a run's judged units (both orders combined) and its human labels: the one
  read of a run's labels, from the sources ``label_sources`` names (a label sample's log, synced or
  not; other sets from the store)
* :mod:`.judge_audit`    -- the judge audit (METHODS 9.2); :mod:`.audit_sim` a simulated judged run
  with labels (tests, bench)
* :mod:`.judge_biases`   -- the audit's judge biases (length, self-preference, drift); the result types
  the audit's parts share in :mod:`.judge_audit_result`
* :mod:`.set_audit`      -- the judge audit of a stored comparison set with judge and human labels
* :mod:`.slices`         -- per-slice (subject, task) paired differences with simultaneous intervals
* :mod:`.winrate_slices` -- one pair's win-rate difference per category of a comparison set, with
  simultaneous intervals clustered by prompt
* :mod:`.gate`           -- the release gate of ``engine gate`` (fixed-n or anytime-valid)
* :mod:`.run_ranksets`   -- PPR / judge-only / human-only rank-sets of a run and the label planner
* :mod:`.race`           -- a stored run raced over seeded orders (replay); a live race rebuilt
* :mod:`.sequential`     -- replay of a stored run as an anytime-valid sequential evaluation;
  :mod:`.sequential_stop` the one stop of a live run or a replay (its numbers and its words)
* :mod:`.run_design`     -- how a run was made (the report's design section)
* :mod:`.notices`        -- typed warnings (a ``Notice`` kind pages filter on, never a substring)
* :mod:`.result_base`    -- the ``ToDict`` mixin of the frozen results; :mod:`.stats_records` typed
  records of the ``engine.stats`` results that analyses pass on whole
"""
