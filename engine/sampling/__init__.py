"""Compute layer, pure: keyed Gumbel noise (:mod:`.noise`) and the Gumbel-max sampler (:mod:`.gumbel`).

Benz et al., "Evaluation of Large Language Models via Coupled Token Generation", Section 3 (the
Gumbel-Max SCM): every model draws token t at step s with the same noise g(seed, prompt, repeat, s, t).
Nothing here touches the database, a model or the file system.
"""
