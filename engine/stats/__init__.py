"""Statistics layer: pure, vectorised numpy/scipy functions, no I/O, no database, no model (the
specification is docs/METHODS.md; each function's docstring gives its estimator, guarantee, shapes
and paper).

* :mod:`.comparisons`       -- the one pairwise-comparison data type (indicator and count forms)
* :mod:`.winrates`          -- pairwise and average win-rates, Bradley-Terry (Davidson ties), Elo
* :mod:`.clusters`, :mod:`.clustered` -- prompt clusters and the prompt-cluster bootstrap of the
  win-rates, BT/Davidson and the Elo-scale MLE (expanded percentile intervals, METHODS 7.2)
* :mod:`.paired_tests`      -- coupled vs independent paired by prompt, position bias,
  Westfall-Young max-T
* :mod:`.ranking`           -- PPR estimates and covariances (Chatzi et al., Algorithms 1-4)
* :mod:`.maxt`              -- rank-set procedures: chi2, max-t step-down with the wild cluster
  bootstrap-t calibration, marginal (METHODS 7.3)
* :mod:`.benchmark`         -- coupled vs independent: per-question covariance and variance of the
  difference, KDEs, error curves (Benz et al., Fig. 2)
* :mod:`.paired_difference` -- the paired difference over questions (METHODS 7.1), McNemar
* :mod:`.planning`          -- standard error, power and minimum detectable effect of an n x k design
* :mod:`.saving`            -- the headline sample saving and its studentised interval
* :mod:`.multigen`          -- multiple generations per prompt (METHODS 5): score, variance
  decomposition, consistency, and ``proportion_interval`` (the one per-model accuracy interval)
* :mod:`.judge_audit`       -- judge vs human agreement, kappa, per-model bias, position consistency,
  error correlation (METHODS 9.2)
* :mod:`.agreement`         -- agreement beyond kappa: Gwet's AC1, Krippendorff's alpha, sensitivity
  and specificity of binary labels
* :mod:`.judge_bias`        -- judge biases: length bias, self-preference, drift between two judgings
* :mod:`.slices`            -- per-slice paired differences with simultaneous (max-t) intervals and
  Benjamini-Hochberg p-values
* :mod:`.gate`              -- a release gate's decision: non-inferior, worse or undecided at a margin
* :mod:`.label_plan`        -- how many more human labels (METHODS 9.3)
* :mod:`.label_sample`      -- the seeded uniform sample of comparison units to label (METHODS 9.1)
* :mod:`.racing`            -- racing many models (METHODS 8.4): goals, rounds, the pairs' screen, who leaves
* :mod:`.sequential`        -- the betting confidence sequence for sampling without replacement,
  pairwise CSs at alpha/P, sequential rank-sets, stop rules, the seeded question order (METHODS 8)
* :mod:`.simulate`          -- simulators with known truth for the coverage tests and ``bench/``
"""
