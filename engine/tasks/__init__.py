"""Tasks that turn stored generations into labels, and data into the store.

* :mod:`.datasets`    -- built-in and user datasets (MMLU layout, numeric, prompt lists)
* :mod:`.scoring`     -- answer extraction rules (paper, lenient, numeric, exact) and ``score_run``
* :mod:`.judge`       -- pairwise LLM-as-judge (the paper's prompt), resumable
* :mod:`.clustering`  -- semantic clusters of a prompt's generations (answer, entailment, embedding)
* :mod:`.comparisons` -- validate, import, list, export and delete pairwise comparison sets
* :mod:`.importers`   -- the coupled-generation paper's published MMLU outputs
"""
