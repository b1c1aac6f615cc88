"""Generation layer: coupled / independent generation of units on a backend.

* :mod:`.types`    -- GenConfig (sampling and batching settings), GenResult (one generated unit),
  the Backend protocol
* :mod:`.prompts`  -- chat messages and the chat-template string of a prompt
* :mod:`.hf`       -- our transformers loop (continuous batching, keyed noise, traces); its parts
  :mod:`.hf_kv`, :mod:`.hf_prefill`, :mod:`.hf_batch`
* :mod:`.vllm_backend` (engine and loop), :mod:`.vllm_processor` (the class vLLM loads; imports vLLM),
  :mod:`.vllm_sampler` (its sampler, no vLLM), :mod:`.vllm_checks`, :mod:`.vllm_traces` -- vLLM with
  the same keyed noise and the same sampler (engine.sampling.keyed)
* :mod:`.backends` -- backend names, pre-run checks, factories
* :mod:`.run`      -- the resumable run: ``plan_run`` (checks, run id, units; writes nothing) then
  ``drive`` (run lock, records, chunks, end status)
* :mod:`.rounds`   -- ``KeptBackends``: the single-process executor of a run made in rounds (a race,
  ``--until``), which keeps the models loaded between rounds while they fit
* :mod:`.lengths`  -- prompt length against the model's context
* :mod:`.distributed` -- ``RayExecutor``: shards of whole prompts on Ray replicas, which never write
  the database; :mod:`.ray_cluster` (a local Ray cluster never outlives its driver)

A new backend is a module next to :mod:`.hf` whose class satisfies :class:`.types.Backend`: the same
GenResult chunks for the same (prompt, repeat, seed) units, noise from :mod:`engine.sampling.noise`.

Lazy: importing the package (or a light submodule such as :mod:`.backends`) loads nothing heavy;
each name below is imported on first use, so the dashboard's Generate page draws without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_getattr

if TYPE_CHECKING:  # the names, for type checkers and readers; loaded on first use
    from engine.generation.hf import complete, generate_units, iter_generate, stream_units
    from engine.generation.prompts import chat_text, prompt_messages
    from engine.generation.run import code_version, run_generation, run_id_for
    from engine.generation.types import Backend, GenConfig, GenResult, Unit, as_units
    from engine.store.runs import run_settings

_EXPORTS: dict[str, str] = {
    "complete": "engine.generation.hf",
    "generate_units": "engine.generation.hf",
    "iter_generate": "engine.generation.hf",
    "stream_units": "engine.generation.hf",
    "chat_text": "engine.generation.prompts",
    "prompt_messages": "engine.generation.prompts",
    "code_version": "engine.generation.run",
    "run_generation": "engine.generation.run",
    "run_id_for": "engine.generation.run",
    "Backend": "engine.generation.types",
    "GenConfig": "engine.generation.types",
    "GenResult": "engine.generation.types",
    "Unit": "engine.generation.types",
    "as_units": "engine.generation.types",
    "run_settings": "engine.store.runs",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())  # PEP 562: imported on first use


__all__ = [
    "Backend",
    "GenConfig",
    "GenResult",
    "Unit",
    "as_units",
    "iter_generate",
    "stream_units",
    "generate_units",
    "complete",
    "run_generation",
    "run_id_for",
    "chat_text",
    "prompt_messages",
    "code_version",
    "run_settings",
]
