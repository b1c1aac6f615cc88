"""The generation backend of a run: its name (config.BACKENDS), the checks made before a run is
written, and the factories that load a model into a :class:`~engine.generation.types.Backend`.

* ``hf``   -- our transformers loop (:mod:`.hf`), always available.
* ``vllm`` -- vLLM with the keyed-Gumbel logits processor (:mod:`.vllm_backend`); needs the vLLM
  venv (scripts/install_vllm.sh). Imported only when chosen.

Every check here reads configs and package metadata only, never weights, so a bad choice costs one line
and nothing is written to the run (a refusal after the run row exists would leave a run that never ran).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from engine import config
from engine.errors import UserError
from engine.generation.types import Backend, GenConfig

# config keys that hold a model's context window, in the order transformers' configs use them
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")


def check_backend(backend: str) -> str:
    """The backend's version string when it can run here; UserError (one line) otherwise.

    vLLM: installed (package metadata, no import) and in the supported range.
    """
    if backend not in config.BACKENDS:
        raise UserError(f"unknown backend {backend!r}; allowed: {', '.join(config.BACKENDS)}")
    if backend == "vllm":
        from engine.generation.vllm_checks import check_vllm_version, installed_vllm_version

        return check_vllm_version(installed_vllm_version())
    import transformers

    return str(transformers.__version__)


def backend_available(backend: str) -> tuple[bool, str]:
    """(usable here, the reason when not): for the dashboard's selector (no UserError, no import)."""
    if backend == "hf":
        return True, ""
    try:
        check_backend(backend)
    except UserError as exc:
        return False, str(exc)
    return True, ""


def _config_dict(model: Any) -> dict | None:
    """A model's config as a dict without loading weights: a loaded model's own, a registry model's
    or GGUF file's converted cache (converted here if needed, as loading would), a folder's
    config.json. None when unknown (hub ids: checked when loaded)."""
    if not isinstance(model, str):  # a LoadedModel (tests, the dashboard's in-process runs)
        cfg = getattr(getattr(model, "model", None), "config", None)
        return cfg.to_dict() if cfg is not None else None
    from engine.models.refs import resolve

    try:
        ref = resolve(model)
    except UserError:
        return None  # unknown names: the loader says so, with the registry's names
    return ref.config()


def model_limits(model: Any) -> tuple[int | None, int | None]:
    """(context length, vocabulary size) of a model from its config; None where unknown."""
    cfg = _config_dict(model)
    if not cfg:
        return None, None
    cfg = {**cfg.get("text_config", {}), **cfg}  # multimodal configs nest the language model's
    ctx = next((int(cfg[k]) for k in _CONTEXT_KEYS if isinstance(cfg.get(k), int) and cfg[k] > 0), None)
    vocab = cfg.get("vocab_size")
    return ctx, int(vocab) if isinstance(vocab, int) and vocab > 0 else None


def check_run(backend: str, model_list: list, cfg: GenConfig, tensor_parallel: int = 1) -> str:
    """Everything about the backend and the models that can be checked before a run is written.

    Returns the backend's version. UserError (one line) for: an unknown or missing backend, an
    unsupported vLLM, a model vLLM cannot load (unknown architecture, bitsandbytes, not local),
    tensor parallelism without vLLM, a malformed ``$COUPLED_EVAL_VLLM_ARGS``, ``max_new_tokens``
    beyond a model's context window, ``trace_top_k`` beyond its vocabulary.
    """
    if isinstance(tensor_parallel, bool) or not isinstance(tensor_parallel, int) or tensor_parallel < 1:
        raise UserError(f"tensor_parallel must be an integer >= 1, got {tensor_parallel!r}")
    if tensor_parallel != 1 and backend != "vllm":
        raise UserError(
            f"tensor_parallel={tensor_parallel} needs a backend with tensor parallelism: --backend "
            f"vllm; the {backend} backend runs each model on one device (allowed: 1)"
        )
    version = check_backend(backend)
    if backend == "vllm":
        vllm_engine_args(tensor_parallel)  # $COUPLED_EVAL_VLLM_ARGS: parsed and checked before any write
    for m in model_list:
        name = m if isinstance(m, str) else m.name
        if backend == "vllm":
            from engine.generation.vllm_checks import check_model

            check_model(m if isinstance(m, str) else getattr(m, "source", name))
        ctx, vocab = model_limits(m)
        cfg.check_model_limits(name, ctx, vocab)
    return version


def _hf_factory(
    model: Any, *, device: str | None = None, tensor_parallel: int = 1, dtype: str | None = None
) -> Backend:
    from engine import models
    from engine.generation.hf import HFBackend

    if tensor_parallel != 1:
        raise UserError(
            f"the hf backend runs one device per model; tensor_parallel={tensor_parallel} "
            "needs --backend vllm on GPUs"
        )
    return HFBackend(
        models.load_model(model, device=device, dtype=dtype) if isinstance(model, str) else model
    )


VLLM_ARGS_ENV = (
    "COUPLED_EVAL_VLLM_ARGS"  # JSON object of further vllm.LLM arguments (forwarded to Ray replicas)
)


def vllm_engine_args(tensor_parallel: int = 1) -> dict:
    """The ``vllm.LLM`` arguments of a run: ``$COUPLED_EVAL_VLLM_ARGS`` (a JSON object, e.g.
    ``{"enforce_eager": true, "gpu_memory_utilization": 0.85}``) plus ``tensor_parallel_size``;
    UserError for malformed JSON or an argument that breaks coupling (check_engine_kwargs)."""
    from engine.generation.vllm_checks import check_engine_kwargs

    raw = os.environ.get(VLLM_ARGS_ENV, "").strip()
    try:
        kw = json.loads(raw) if raw else {}
    except ValueError as exc:
        raise UserError(f"${VLLM_ARGS_ENV} is not valid JSON ({exc}): {raw[:80]!r}") from exc
    if not isinstance(kw, dict):
        raise UserError(
            f"${VLLM_ARGS_ENV} must be a JSON object of vllm.LLM arguments, got {raw[:80]!r}"
        )
    if "tensor_parallel_size" in kw:
        raise UserError(f"set tensor parallelism with --tensor-parallel, not in ${VLLM_ARGS_ENV}")
    if tensor_parallel != 1:
        kw["tensor_parallel_size"] = tensor_parallel
    return check_engine_kwargs(kw)


def _vllm_factory(
    model: Any, *, device: str | None = None, tensor_parallel: int = 1, dtype: str | None = None
) -> Backend:
    from engine.generation.vllm_backend import VllmBackend

    if not isinstance(model, str):
        raise UserError("--backend vllm loads models by name or path, not an already loaded model")
    kw = vllm_engine_args(tensor_parallel)
    # --dtype, else a "dtype" in $COUPLED_EVAL_VLLM_ARGS, overrides the default (ModelRef.default_dtype)
    env_dtype = kw.pop("dtype", None)
    return VllmBackend(model, dtype=dtype or env_dtype, engine_kwargs=kw)


FACTORIES: dict[str, Callable[..., Backend]] = {"hf": _hf_factory, "vllm": _vllm_factory}


def load_backend(
    backend: str,
    model: Any,
    *,
    device: str | None = None,
    tensor_parallel: int = 1,
    dtype: str | None = None,
) -> Backend:
    """``model`` (a name/path, or a LoadedModel for "hf") loaded into the chosen backend."""
    if backend not in FACTORIES:
        raise UserError(f"unknown backend {backend!r}; allowed: {', '.join(config.BACKENDS)}")
    return FACTORIES[backend](model, device=device, tensor_parallel=tensor_parallel, dtype=dtype)
