"""Task layer: turn data into stored labels (datasets in, generations scored or judged, files
imported), always writing through :mod:`engine.store`.

* :mod:`.datasets`, :mod:`.hf_datasets` -- built-in sets, user CSV/JSONL/TXT files, MMLU folders and
  ``hf:REPO[:CONFIG][:SPLIT]`` (a registry of known layouts); :mod:`.dataset_types` (Prompt,
  Dataset, kinds, system prompts) and :mod:`.numbers` (number extraction) are their leaves
* :mod:`.scoring`       -- answer extraction rules (paper, lenient, numeric, exact) and ``score_run``
* :mod:`.judge`         -- pairwise LLM-as-judge on a run (resumable; the completion function comes
  from the command), with :mod:`.judge_prompts` (the default prompts), :mod:`.judge_parse` (a
  reply's final verdict), :mod:`.judge_api` (an OpenAI-compatible judge: concurrency, retries,
  Retry-After, circuit breaker, key-name checks), :mod:`.judge_cost` (the dry run) and
  :mod:`.judge_summary` (its frozen result)
* :mod:`.clustering`    -- semantic clusters of a prompt's generations (answer, entailment, embedding)
* :mod:`.comparisons`   -- import, list, export and delete pairwise comparison sets
* :mod:`.importers`     -- the coupled-generation paper's published MMLU outputs
* :mod:`.harness`, :mod:`.harness_import` -- lm-evaluation-harness and Inspect AI per-sample logs as
  an imported run
* :mod:`.harness_requests`, :mod:`.harness_served` -- a log's samples rebuilt into the requests the
  server saw, and linked to an ``engine serve`` run's generations by the key rule
* :mod:`.labels`        -- human labels: a run's comparison units, drawing and recording a sample,
  claims, votes, undo, what the Label page shows; :mod:`.label_sets` (progress, labels as comparison
  rows, the sample CSV out and back, ``sync`` into a comparison set)
"""
