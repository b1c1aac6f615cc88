"""Serving layer: an OpenAI-compatible server whose noise is keyed by the request (METHODS 1.6).

* :mod:`.keys`      -- the key rule (prompt id, seed, repeat) and the occurrence counters; standard
  library only (the vLLM logits processor imports it in its workers)
* :mod:`.protocol`  -- request bodies read into frozen ``Request``s; what would break coupling refused
* :mod:`.seq`       -- one choice (``Seq``) and its text while it grows (stop strings, stream deltas)
* :mod:`.inbox`     -- a model's worker on any backend: its thread, inbox and counters
* :mod:`.worker`    -- one thread per model: continuous batching on the transformers loop, keyed draws
* :mod:`.prefix`    -- the worker's prefill cache across requests: a shared prefix, recent prompts' KV
* :mod:`.vllm_worker` -- the same interface on vLLM (``engine serve --backend vllm``)
* :mod:`.core`      -- ``Core`` (the served run, its models and counters) and ``Call`` (one request)
* :mod:`.writer`    -- the journal and the group-commit thread: an answer is sent once its rows are
  journaled, committed every 0.1 s
* :mod:`.responses` -- completions and chat bodies, whole and streamed
* :mod:`.app`       -- Starlette routes, auth, JSON errors, server-sent events
* :mod:`.server`    -- ``serve`` (uvicorn, graceful SIGTERM) and ``ServerThread`` (tests, bench)

Nothing heavy is imported here: ``import engine.serving.keys`` stays torch-free.
"""
