"""The conversion cache: registry variants and GGUF files converted once into float32 Hugging Face
folders under ``data/cache/models/<name>/`` (``$COUPLED_EVAL_CACHE`` replaces ``data/cache``).

A cache is written into a temporary folder and renamed into place, so a killed conversion never
leaves a half-written cache; a manifest (``coupled_eval.json``) records what was converted from what
(source size and mtime: a changed source is reconverted). Processes that need the same cache at once
(the dashboard's demo beside a CLI run, the replicas of a Ray run on one machine) convert it once: the
others wait on a lock file beside it (``.<name>.lock``, an ``flock`` the system drops when its
holder dies) and then read what the first wrote.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import torch

from engine.config import PROJECT_ROOT
from engine.errors import UserError
from engine.models.quantize import quantize_linear_weights
from engine.models.registry import ModelSpec, base_spec
from engine.models.tokens import vocab_id

CACHE_FORMAT = 1  # bump when the conversion code changes: older caches are rebuilt
MANIFEST = "coupled_eval.json"
# Number of conversions (GGUF dequantization or variant quantization) done by this process, by
# model name: tests use it to check that a second load comes from the cache.
CONVERSIONS: collections.Counter[str] = collections.Counter()


def cache_root() -> Path:
    """``$COUPLED_EVAL_CACHE/models`` or ``<project>/data/cache/models``."""
    root = os.environ.get("COUPLED_EVAL_CACHE")
    return (Path(root) if root else PROJECT_ROOT / "data" / "cache") / "models"


def cache_dir(name: str) -> Path:
    return cache_root() / name


def read_manifest(path: Path) -> dict | None:
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
    m = read_manifest(path)
    if not m:
        return False
    return (
        m.get("format") == CACHE_FORMAT
        and m.get("variant") == spec.variant
        and m.get("source_size") == _source_size(spec)
        and m.get("source_mtime") == _source_mtime(spec)
        and (path / "config.json").exists()
        and any(path.glob("*.safetensors"))
    )


def is_cached(spec: ModelSpec) -> bool:
    """Whether ``spec``'s converted weights are on disk (bf16/bnb reuse the base's)."""
    if spec.variant in ("bf16", "bnb-8bit", "bnb-4bit"):
        spec = base_spec(spec)
    return _cache_valid(cache_dir(_cache_name(spec)), spec)


def _write_cache(path: Path, spec: ModelSpec, model, tokenizer, seconds: float) -> None:
    """Save model + tokenizer + manifest into a temp folder, then rename it into place (atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale_tmp(path)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tokenizer.save_pretrained(str(tmp))
        manifest = {
            "format": CACHE_FORMAT,
            "name": spec.name,
            "variant": spec.variant,
            "family": spec.family,
            "source": spec.source,
            "source_size": _source_size(spec),
            "source_mtime": _source_mtime(spec),
            "vocab_id": vocab_id(tokenizer),
            "conversion_seconds": round(seconds, 2),
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
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
    except Exception as exc:
        if not _disk_error(exc):
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"could not write the model cache in {path.parent}: {first}; free space there or set "
            "$COUPLED_EVAL_CACHE to a folder with room (nothing partial is kept)"
        ) from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


DISK_WORDS = ("No space left on device", "Read-only file system", "Disk quota exceeded", "I/O error")


def _disk_error(exc: BaseException) -> bool:
    """A write that failed for the disk's sake: an OSError, or a writer's own error saying so
    (safetensors raises SafetensorError 'Error while serializing: I/O error: No space left on
    device')."""
    return isinstance(exc, OSError) or any(w in str(exc) for w in DISK_WORDS)


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
def quiet_hub():
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


@contextlib.contextmanager
def _conversion_lock(path: Path) -> Iterator[None]:
    """Hold ``path``'s conversion lock (``.<name>.lock`` beside it) while converting: one process
    converts, the others wait here (saying so on stderr). Best effort: where the lock cannot be
    taken (no ``fcntl``, a folder that refuses the file) the conversion goes on unlocked and any
    write error is reported by :func:`_write_cache` as before."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path.parent / f".{path.name}.lock", "a")  # noqa: SIM115 (held across the yield)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process converts it: say why this one waits, then wait
            print(
                f"waiting for another process that converts {path.name} (lock {f.name})",
                file=sys.stderr,
                flush=True,
            )
            fcntl.flock(f, fcntl.LOCK_EX)
        yield
    finally:
        f.close()  # closing the file releases the lock


def ensure_cached(spec: ModelSpec) -> Path:
    """The local Hugging Face folder holding ``spec``'s float32 weights, converting first if needed
    (also for other backends, e.g. vLLM, that load the same weights from a folder).

    bf16 and bnb variants reuse the base cache (cast at load); :func:`is_cached` says beforehand
    whether a conversion will happen.
    """
    if spec.variant in ("bf16", "bnb-8bit", "bnb-4bit"):
        return ensure_cached(base_spec(spec))
    path = cache_dir(_cache_name(spec))
    if _cache_valid(path, spec):
        return path
    with _conversion_lock(path):
        if _cache_valid(path, spec):  # another process converted it while this one waited
            return path
        _convert(spec, path)
    return path


def _convert(spec: ModelSpec, path: Path) -> None:
    """Convert ``spec`` into ``path`` (GGUF dequantized to float32, or a variant quantized from its
    base's cache) and count it in :data:`CONVERSIONS`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    with quiet_hub():
        if spec.variant in ("base", "gguf"):  # GGUF -> dequantized float32 (transformers' reader)
            src = Path(spec.source)
            try:
                with gguf_parsed_once():
                    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
                    model = AutoModelForCausalLM.from_pretrained(
                        str(src.parent), gguf_file=src.name, dtype=torch.float32
                    )
            except (OSError, ValueError, KeyError, RuntimeError) as exc:
                raise UserError(f"could not load GGUF file {str(src)!r}: {exc}") from exc
            _forget_gguf_quantizer(model)
        else:
            base_path = ensure_cached(base_spec(spec))
            tok = AutoTokenizer.from_pretrained(str(base_path))
            model = AutoModelForCausalLM.from_pretrained(str(base_path), dtype=torch.float32)
            quantize_linear_weights(model, spec.variant)
        CONVERSIONS[spec.name] += 1
        _write_cache(path, spec, model, tok, time.perf_counter() - t0)


@contextlib.contextmanager
def gguf_parsed_once() -> Iterator[dict]:
    """Within the block, a GGUF file is parsed once and gguf's tensor-name map built once per
    (architecture, layers); yields the parsed readers by (path, mode).

    Why: transformers (5.23) parses the file three times for one model (its config, its tokenizer,
    its weights; each parse reads SmolLM2's 49,152-entry vocabulary one numpy view at a time, about
    4 s) and builds gguf's name map anew for each of the 397 tensors (5.5 s in all): 17 of the 29 s
    of SmolLM2's conversion (docs/BENCHMARKS.md, "Model loading"). Both are read-only (a reader is a
    memory map of the file), so handing out the same one is what a fresh one would give. transformers
    imports both names from ``gguf`` inside its functions, so they are replaced there, for the block
    only.
    """
    import gguf

    real_reader, real_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(real_name_map)
    try:
        yield readers
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_name_map


def _forget_gguf_quantizer(model) -> None:
    """A GGUF load dequantizes every tensor to plain torch weights but keeps a GGUF 'quantizer'
    that refuses ``save_pretrained``; drop it (the weights are ordinary float tensors)."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    for attr in ("is_quantized", "quantization_method"):
        if attr in model.__dict__:
            delattr(model, attr)


def converted_folder(spec: ModelSpec) -> Path | None:
    """The family's converted float32 folder when its cache is valid, else None (nothing converted)."""
    base = cache_dir(spec.family)
    return base if _cache_valid(base, base_spec(spec)) else None


def discard_cache(folder: Path) -> None:
    """Move a damaged cache aside (readers holding its files keep them) and delete it."""
    if folder.exists():
        aside = folder.parent / f".{folder.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(folder, aside)
        shutil.rmtree(aside, ignore_errors=True)
