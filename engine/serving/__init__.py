"""Serving layer: an OpenAI-compatible server whose noise is keyed by the request (METHODS 1.6).

* :mod:`.keys`      -- the key rule (prompt id, seed, repeat) and the occurrence counters; standard
  library only (the vLLM logits processor imports it in its workers)

Nothing heavy is imported here: ``import engine.serving.keys`` stays torch-free.
"""
