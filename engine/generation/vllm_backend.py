"""vLLM backend: coupled generation with our keyed Gumbel noise inside vLLM (docs/METHODS.md 1.2-1.3).

vLLM samples greedily (temperature 0) and our logits processor (:mod:`engine.generation.vllm_processor`)
draws each of our rows' token as

    T_i = argmax_v ( z_i[v] + g(seed, unit, step, token key v) ),   z_i = masked(float32(logits) / T)

(the Gumbel-max sample of D_i = softmax(z_i): z_i is log D_i plus one constant per row;
:func:`engine.sampling.keyed.draw`, the transformers loop's sampler; on CUDA without top-k / top-p /
trace, one Triton kernel that reads the logits once) and makes that token's logit the
largest, so vLLM's argmax *is* our Gumbel-max sample, with the very noise the transformers loop draws:

* ``step``  = tokens the request has generated so far (not the position), so prompts of different
  lengths share noise step by step;
* ``unit``  = :func:`engine.sampling.noise.unit_key` (prompt id, repeat) and ``seed`` travel with each
  request in ``SamplingParams.extra_args[EXTRA_KEY]``;
* top-k / top-p are applied inside the processor by token id
  (:func:`engine.sampling.gumbel.masked_logits`),
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
  :func:`require_vllm`): copied asynchronously and moved into the table ``TRACES`` when a request
  finishes (:func:`engine.generation.vllm_traces.flush_pending`);
* in vLLM's worker processes (tensor parallelism, or a separate engine-core process): tensor-parallel
  rank 0's writer thread appends them, a little behind the steps, to the backend's private trace
  directory (``TraceSink``), which the backend reads; the token keys travel the other way through
  the same directory. A finished request whose records are not all there yet waits for them
  (``FinishedRequests``: vLLM keeps stepping the other requests meanwhile), for at most
  ``RECORDS_TIMEOUT_S``, then the run fails naming the request and its missing steps.

The chosen tokens recorded by the processor are checked against vLLM's output: a mismatch would mean the
step count or the row mapping went wrong, and raises.

Modules: :mod:`.vllm_checks` (version, engine arguments, model checks; no vLLM import),
:mod:`.vllm_sampler` (the processor's sampler, no vLLM import), :mod:`.vllm_processor` (the class vLLM
loads; imports vLLM), :mod:`.vllm_traces` (how records travel). This one holds the engine and its loop;
it imports neither vLLM nor transformers at import time, so the main environment (which has no vLLM)
can import it, run its checks, and get a one-line UserError from :func:`require_vllm`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.errors import UserError
from engine.generation.vllm_checks import (
    SUPPORTED_VLLM_TEXT,
    _numa_nodes,
    check_engine_kwargs,
    check_model,
    check_vllm_version,
    cpu_threads_bind,
    installed_vllm_version,
    require_vllm,
    resolve_model,
)
from engine.generation.vllm_sampler import (
    EXTRA_KEY,
    RowArgs,
    apply_rows,
    check_sampling_params,
    forget_device_keys,
)
from engine.generation.vllm_traces import TOKEN_KEYS, TRACES, FinishedRequests, TraceSink, flush_pending
from engine.sampling import noise
from engine.sampling.keyed import keyed_scores

if TYPE_CHECKING:  # pragma: no cover
    from engine.generation.types import GenResult

BACKEND_NAME = "vllm"


# --------------------------------------------------------------------------- the backend


class VllmBackend:
    """A model served by vLLM, generating coupled units like the transformers loop.

    Drop-in for what the run driver uses of a LoadedModel: ``name``, ``tokenizer``, ``vocab_size``,
    ``device``, ``record()``; :meth:`generate` mirrors ``engine.generation.iter_generate``.
    """

    name_of_backend = BACKEND_NAME

    def __init__(
        self,
        model: str | Path,
        *,
        dtype: str | None = None,
        max_model_len: int | None = None,
        kv_cache_gib: float | None = None,
        engine_kwargs: dict | None = None,
    ):
        """Load ``model`` (registry name, HF folder or .gguf) into a ``vllm.LLM``.

        Args:
            dtype: "float32" / "bfloat16" / "float16"; default as the transformers backend
                (engine.models.refs.ModelRef.default_dtype: float32 on CPU; the checkpoint's own on
                CUDA).
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
            extra.setdefault(
                "distributed_executor_backend", "mp"
            )  # workers on this machine (the sink is local)
        vllm = require_vllm()
        from vllm.platforms import current_platform

        ref = resolve_model(model)
        self.name, self.variant = ref.name, ref.variant
        self.path = ref.folder()
        self.device = torch.device(
            current_platform.device_type if current_platform.device_type != "cpu" else "cpu"
        )
        # the transformers backend's rule (engine.models.refs.ModelRef.default_dtype); dtype overrides
        self.dtype = (
            str(dtype)
            if dtype is not None
            else str(ref.default_dtype(self.device)).removeprefix("torch.")
        )
        self._load_tokenizer()
        self.sink = TraceSink()
        # where the processor runs: vLLM's rank processes (TP > 1) or a separate engine core write
        # through the sink; else it records into TRACES directly and the step loop need not poll
        self.remote_records = (
            self.tensor_parallel > 1 or os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0") != "0"
        )
        try:
            with _scoped_env(self._engine_env(kv_cache_gib)):
                from engine.generation.vllm_processor import KeyedGumbelProcessor

                self.llm = vllm.LLM(
                    model=str(self.path),
                    tokenizer=str(self.path),
                    dtype=self.dtype,
                    enable_prefix_caching=True,
                    logits_processors=[KeyedGumbelProcessor],
                    max_model_len=max_model_len,
                    seed=0,
                    **extra,
                )
        except UserError:
            self.sink.close()
            raise
        except Exception as exc:
            self.sink.close()
            hint = (
                "use the transformers backend for this model"
                if self.tensor_parallel == 1
                else f"tensor_parallel={self.tensor_parallel} must divide the model's attention heads "
                "and fit the devices; try another --tensor-parallel"
            )
            raise UserError(
                f"vLLM could not load model {self.name!r} from {str(self.path)!r}: "
                f"{_one_line(exc)}; {hint}"
            ) from exc
        mc = self.llm.llm_engine.model_config
        self.vocab_size = int(mc.get_vocab_size())
        self.max_model_len = int(mc.max_model_len)
        self.source = str(self.path)
        self._tag = uuid.uuid4().hex[:12]
        self._n = 0

    def _engine_env(self, kv_cache_gib: float | None) -> dict[str, str]:
        """This engine's environment, set while it is built (its workers are spawned then) and
        restored after, so that the next engine in this process starts from the user's settings."""
        env: dict[str, str] = {}
        if kv_cache_gib is not None and self.device.type == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, math.ceil(kv_cache_gib)))  # vLLM reads whole GiB
        if self.device.type == "cpu" and os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto") == "auto":
            bind = cpu_threads_bind(self.tensor_parallel, sorted(os.sched_getaffinity(0)), _numa_nodes())
            if bind is not None:  # else vLLM's auto binding (one NUMA node per rank) is the better one
                env["VLLM_CPU_OMP_THREADS_BIND"] = bind
        return env

    def _load_tokenizer(self) -> None:
        """The tokenizer (left padding, a pad token), its vocabulary id and the stop ids of the
        transformers loop (engine.generation.prompts.eos_ids)."""
        from transformers import AutoTokenizer, GenerationConfig

        from engine import models
        from engine.generation.prompts import eos_ids

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.path))
        except (OSError, ValueError, KeyError) as exc:
            raise UserError(
                f"could not load the tokenizer of model {self.name!r} from {str(self.path)!r}: "
                f"{_one_line(exc)}"
            ) from exc
        models.prepare_tokenizer(self.tokenizer)
        try:
            gen_cfg = GenerationConfig.from_pretrained(str(self.path))
        except OSError:
            gen_cfg = None
        self.stop_ids = eos_ids(self.tokenizer, gen_cfg)
        self.vocab_id = models.vocab_id(self.tokenizer)

    # ---- what the run stores
    def describe(self) -> dict[str, Any]:
        """Backend, vLLM version, dtype, device, model runner: stored with every run."""
        import vllm

        cfg = self.llm.llm_engine.vllm_config
        v2 = bool(getattr(cfg, "use_v2_model_runner", False))
        return {
            "backend": BACKEND_NAME,
            "backend_version": str(vllm.__version__),
            "dtype": self.dtype,
            "device": str(self.device),
            "tensor_parallel": self.tensor_parallel,
            "model_runner": "v2" if v2 else "v1",
            "logits_processor": "v2" if v2 else "v1",
            "prefix_caching": True,
            "model_path": str(self.path),
        }

    def record(self) -> dict[str, Any]:
        """A row for the store's ``models`` table (as LoadedModel.record)."""
        cfg = {
            "dtype": self.dtype,
            "device": str(self.device),
            "tokenizer_len": len(self.tokenizer),
            "cache": str(self.path),
            **self.describe(),
        }
        return {
            "name": self.name,
            "source": self.source,
            "variant": self.variant,
            "vocab_id": self.vocab_id,
            "vocab_size": self.vocab_size,
            "config": json.dumps(cfg),
        }

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
    def generate(
        self,
        prompts: Mapping[str, str] | Sequence,
        units: Sequence,
        cfg,
        token_keys: torch.Tensor | None = None,
        system_prompt: str | None = None,
    ) -> Iterator[list[GenResult]]:
        """Generate ``units`` (engine.generation.types.Unit: prompt_id, repeat, seed), yielding
        GenResult chunks of about ``cfg.batch_size`` in completion order.

        Same arguments and results as ``engine.generation.hf.stream_units`` (token ids with the stop
        token, text without it, finish_reason 'eos' | 'length', per-step probabilities and, when
        ``cfg.trace_top_k``, the top-k alternatives with their probabilities and Gumbel values).
        """
        from engine.generation.prompts import group_units
        from engine.generation.types import GenResult

        # grouped by prompt, as the transformers loop: a prompt's requests arrive together and share
        # its cached prefix
        prompts, todo = group_units(prompts, units)
        ids = self._prompt_ids(prompts, todo, cfg, system_prompt)
        call, kid, route = self._register_keys(token_keys)
        inflight: dict[str, tuple[str, int, int]] = {}  # tag -> unit, until its result is built
        alias: dict[str, str] = {}  # vLLM's request id (it appends a random suffix) -> tag
        # finished in vLLM, waiting for their step records: in-process ones are complete at once;
        # a worker's writer thread runs a little behind, so those may wait a step or two (polling)
        done = FinishedRequests(self.sink if self.remote_records else None)
        # bounded number of requests handed to vLLM at once: enough to keep its batch full, few
        # enough that a 1M-unit run does not queue 1M prompts
        window = max(4 * cfg.batch_size, 256)
        buf: list = []
        pos = 0
        try:
            while pos < len(todo) or inflight:
                while pos < len(todo) and len(inflight) < window:
                    tag = f"{self._tag}:{call}:{pos}"
                    alias[self._submit(tag, todo[pos], ids, cfg, route)] = tag
                    inflight[tag] = todo[pos]
                    pos += 1
                running = len(inflight) > len(done)  # vLLM still has requests: step it, do not wait
                for out in self._step() if running else []:
                    tag = alias.pop(out.request_id, out.request_id)
                    done.add(tag, inflight[tag], list(out.outputs[0].token_ids))
                for tag, unit, tokens, recs in done.ready(block=not running, check=self._check_alive):
                    del inflight[tag]
                    buf.append(self._result(unit, tokens, recs, cfg, GenResult))
                    if len(buf) >= cfg.batch_size:
                        yield buf
                        buf = []
            if buf:
                yield buf
        finally:
            self._end_call(call, kid, inflight)

    def _prompt_ids(
        self, prompts: dict[str, str], todo: list, cfg, system_prompt: str | None
    ) -> dict[str, list]:
        """Chat-templated token ids per prompt; UserError when one does not fit the model's length."""
        from engine.generation.prompts import chat_text, prompt_messages

        ids = {
            p: self.tokenizer(
                chat_text(self.tokenizer, prompt_messages(prompts[p], system_prompt)),
                add_special_tokens=False,
            )["input_ids"]
            for p in dict.fromkeys(u[0] for u in todo)
        }
        too_long = [p for p, x in ids.items() if len(x) + cfg.max_new_tokens > self.max_model_len]
        if too_long:
            raise UserError(
                f"prompt {too_long[0]!r} has {len(ids[too_long[0]])} tokens; with max_new_tokens="
                f"{cfg.max_new_tokens} it exceeds the model length {self.max_model_len}"
            )
        return ids

    def _register_keys(self, token_keys: torch.Tensor | None) -> tuple[int, str, dict]:
        """(call number, keys id, the route every request carries): the token keys go into this process's
        table and the trace directory once per call (the processor caches them on its device)."""
        V = self.vocab_size
        if token_keys is None:
            token_keys = torch.arange(V, dtype=torch.int64)
        if token_keys.shape[0] != V:
            raise UserError(
                f"token_keys has {token_keys.shape[0]} entries but the model's logits are {V} wide"
            )
        call = self._n
        self._n += 1
        kid = f"{self._tag}:keys:{call}"
        TOKEN_KEYS[kid] = token_keys.to(torch.int64).cpu()
        self.sink.put_keys(kid, TOKEN_KEYS[kid])  # for processors in vLLM's worker processes
        return call, kid, {"keys": kid, "sink": str(self.sink.path), "origin": os.getpid()}

    def _submit(self, tag: str, unit: tuple, ids: dict[str, list], cfg, route: dict) -> str:
        """Hand one unit (prompt_id, repeat, seed) to vLLM as a greedy request carrying its noise key;
        returns vLLM's request id."""
        from vllm import SamplingParams

        p, r, sd = unit
        sp = SamplingParams(
            n=1,
            temperature=0.0,
            max_tokens=cfg.max_new_tokens,
            stop_token_ids=sorted(self.stop_ids),
            detokenize=False,
            skip_special_tokens=True,
            extra_args={
                EXTRA_KEY: {
                    "tag": tag,
                    "seed": noise.as_int64(sd),
                    "unit": noise.unit_key(p, r),
                    "temperature": float(cfg.temperature),
                    "top_k": int(cfg.top_k),
                    "top_p": float(cfg.top_p),
                    "trace_k": int(cfg.trace_top_k),
                    **route,
                }
            },
        )
        check_sampling_params(sp)
        return str(self.llm.llm_engine.add_request(tag, {"prompt_token_ids": ids[p]}, sp))

    def _step(self) -> list:
        """One engine step; the outputs of the requests that finished. EngineDead when the engine is
        gone."""
        return [out for out in self.step() if out.finished]

    # ---- one request at a time (engine serve --backend vllm: engine.serving.vllm_worker)
    @property
    def tag(self) -> str:
        """This backend's prefix of request tags (unique per process)."""
        return self._tag

    def register_keys(self, token_keys: torch.Tensor | None) -> tuple[int, str, dict]:
        """Open a call with ``token_keys``: (call number, keys id, the route each request carries)."""
        return self._register_keys(token_keys)

    def end_call(self, call: int, kid: str, inflight: dict) -> None:
        """Close a call opened by :meth:`register_keys` (its keys, unfinished requests and records)."""
        self._end_call(call, kid, inflight)

    def add_request(self, tag: str, prompt_ids: list[int], params) -> str:
        """Hand vLLM one request (prompt token ids, SamplingParams); returns vLLM's request id."""
        return str(self.llm.llm_engine.add_request(tag, {"prompt_token_ids": list(prompt_ids)}, params))

    def abort(self, tag: str) -> None:
        """Abort a request (a client went away, a stop string ended it); unknown tags are ignored."""
        try:
            self.llm.llm_engine.abort_request([tag])
        except Exception:
            pass

    def check_alive(self) -> None:
        """EngineDead when the engine died (see :meth:`_check_alive`)."""
        self._check_alive()

    def step(self) -> list:
        """One engine step; the outputs of every request that ran in it (vLLM's cumulative outputs).
        EngineDead when the engine is gone."""
        try:
            return list(self.llm.llm_engine.step())
        except Exception as exc:
            if self._engine_dead(exc):
                from engine.generation.types import EngineDead

                raise EngineDead(
                    f"the vLLM engine of model {self.name!r} died: {_one_line(exc)}"
                ) from exc
            raise

    def _end_call(self, call: int, kid: str, inflight: dict) -> None:
        """Forget a generate call's keys, abort its unfinished requests, drop its records."""
        TOKEN_KEYS.pop(kid, None)
        forget_device_keys(kid)
        self.sink.drop_keys(kid)
        for tag in inflight:  # an interrupted generation: drop its requests
            try:
                self.llm.llm_engine.abort_request([tag])
            except Exception:
                pass
        flush_pending()
        prefix = f"{self._tag}:{call}:"
        for tag in [t for t in TRACES if t.startswith(prefix)]:  # and every record left of this call
            TRACES.pop(tag, None)

    def _engine_dead(self, exc: BaseException) -> bool:
        """Whether ``exc`` from ``engine.step()`` means the engine is gone, not a bad request: vLLM's
        EngineDeadError (a separate engine-core process), or its in-process executor marked failed
        (a rank worker died: vLLM 0.32 then raises a bare RuntimeError("cancelled"))."""
        return type(exc).__name__ == "EngineDeadError" or self._executor_failed()

    def _executor_failed(self) -> bool:
        """vLLM marked its engine dead: the in-process executor failed (a rank worker died), or the
        separate engine-core process is gone."""
        client = getattr(self.llm.llm_engine, "engine_core", None)
        core = getattr(client, "engine_core", None)
        return bool(
            getattr(getattr(core, "model_executor", None), "is_failed", False)
            or getattr(getattr(client, "resources", None), "engine_dead", False)
        )

    def _check_alive(self) -> None:
        """EngineDead while the backend waits for a worker's records and the engine died (a killed
        worker's records never come: no need to wait for the timeout)."""
        if self._executor_failed():
            from engine.generation.types import EngineDead

            raise EngineDead(
                f"the vLLM engine of model {self.name!r} died while its step records were awaited"
            )

    def _result(self, unit: tuple[str, int, int], tokens: list[int], recs: list, cfg, GenResult):
        """One finished request -> GenResult; ``recs``: the processor's records of steps 0..n-1, each
        already checked to name vLLM's token (:class:`FinishedRequests`)."""
        p, r, sd = unit
        eos = bool(tokens) and tokens[-1] in self.stop_ids
        text = self.tokenizer.decode(
            [t for t in tokens if t not in self.stop_ids], skip_special_tokens=True
        )
        k = cfg.trace_top_k
        return GenResult(
            prompt_id=p,
            repeat=r,
            token_ids=tuple(tokens),
            text=text,
            finish_reason="eos" if eos else "length",
            seed=sd,
            probs=tuple(rec.prob for rec in recs),
            top_ids=tuple(rec.top_ids for rec in recs) if k else None,
            top_probs=tuple(rec.top_probs for rec in recs) if k else None,
            top_gumbels=tuple(rec.top_gumbels for rec in recs) if k and cfg.temperature > 0 else None,
        )


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


def iter_generate(
    backend: VllmBackend,
    prompts,
    units: Sequence[tuple[str, int]],
    seed: int | Sequence[int],
    cfg,
    token_keys: torch.Tensor | None = None,
    system_prompt: str | None = None,
) -> Iterator[list]:
    """``engine.generation.iter_generate`` with a :class:`VllmBackend` in place of a LoadedModel."""
    from engine.generation.types import as_units

    return backend.generate(prompts, as_units(units, seed), cfg, token_keys, system_prompt)


__all__ = [
    "VllmBackend",
    "iter_generate",
    "keyed_scores",
    "apply_rows",
    "check_sampling_params",
    "RowArgs",
    "TOKEN_KEYS",
    "TRACES",
    "installed_vllm_version",
    "cpu_threads_bind",
    "check_engine_kwargs",
    "check_vllm_version",
    "check_model",
    "require_vllm",
    "resolve_model",
    "SUPPORTED_VLLM_TEXT",
    "EXTRA_KEY",
]
