"""Generation settings and results (plain frozen dataclasses) and the backend interface (no torch)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from engine import config
from engine.errors import UserError


class Unit(NamedTuple):
    """One generation of a run: a prompt, a repeat index and the noise seed it is drawn with.

    A unit's noise depends on exactly these three (and the step and token): never on the batch,
    the backend, the worker or the time. A tuple, so ``p, r, sd = unit`` keeps working.
    """

    prompt_id: str
    repeat: int
    seed: int


def as_units(pairs: Sequence[tuple[str, int]], seed: int | Sequence[int]) -> tuple[Unit, ...]:
    """Units from (prompt_id, repeat) pairs and one noise seed for all of them, or one per pair."""
    seeds = [int(seed)] * len(pairs) if isinstance(seed, int) else [int(x) for x in seed]
    if len(seeds) != len(pairs):
        raise UserError(f"got {len(seeds)} seeds for {len(pairs)} units")
    return tuple(Unit(str(p), int(r), sd) for (p, r), sd in zip(pairs, seeds))


@dataclass(frozen=True)
class GenConfig:
    """Sampling and batching settings of a generation (everything but the seed and the models)."""

    temperature: float = config.DEFAULT_TEMPERATURE
    top_k: int = config.DEFAULT_TOP_K
    top_p: float = config.DEFAULT_TOP_P
    max_new_tokens: int = config.DEFAULT_MAX_NEW_TOKENS
    batch_size: int = config.DEFAULT_BATCH_SIZE
    trace_top_k: int = config.DEFAULT_TRACE_TOP_K
    record_traces: bool | None = (
        True  # None = auto: on for runs of <= config.TRACES_AUTO_MAX_UNITS generations
    )

    def __post_init__(self) -> None:
        # imported here: the sampler imports torch, and this module must not (the dashboard's Generate
        # page reads the backend names through engine.generation.backends without torch)
        from engine.sampling.gumbel import check_params

        check_params(self.temperature, self.top_k, self.top_p)
        for name in ("max_new_tokens", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"{name} must be an integer >= 1, got {v!r}")
        t = self.trace_top_k
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= config.TRACE_TOP_K_MAX:
            raise UserError(
                f"trace_top_k must be an integer in [0, {config.TRACE_TOP_K_MAX}] (0 = none), got {t!r}"
            )

    def check_model_limits(self, model: str, context_length: int | None, vocab_size: int | None) -> None:
        """UserError when this config does not fit ``model``: max_new_tokens beyond its context
        window (the prompt needs at least one position), trace_top_k beyond its vocabulary.
        None = unknown, not checked."""
        if context_length is not None and self.max_new_tokens >= context_length:
            raise UserError(
                f"max_new_tokens={self.max_new_tokens} does not fit model {model!r}: its context is "
                f"{context_length} tokens; allowed: 1 to {context_length - 1} (minus the prompt's "
                "length)"
            )
        if vocab_size is not None and self.trace_top_k > vocab_size:
            raise UserError(
                f"trace_top_k={self.trace_top_k} exceeds model {model!r}'s vocabulary of {vocab_size} "
                f"tokens; allowed: 0 to {min(vocab_size, config.TRACE_TOP_K_MAX)}"
            )


@dataclass(frozen=True)
class GenResult:
    """One generated unit. Per-step lists have one entry per generated token (EOS included)."""

    prompt_id: str
    repeat: int
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # 'eos' | 'length'
    seed: int  # the noise seed this unit used
    probs: tuple[float, ...]  # prob of the chosen token, per step
    top_ids: tuple[tuple[int, ...], ...] | None = None  # top-k alternatives per step
    top_probs: tuple[tuple[float, ...], ...] | None = None
    top_gumbels: tuple[tuple[float, ...], ...] | None = None  # None when T = 0 (no noise)

    @property
    def unit(self) -> Unit:
        return Unit(self.prompt_id, self.repeat, self.seed)


class EngineDead(RuntimeError):
    """The backend's engine is gone (e.g. one of vLLM's tensor-parallel worker processes died): this
    backend cannot generate again. A Ray replica ends its process on it, so that Ray restarts the
    replica and retries its shard, as for any other crash (engine.generation.distributed)."""


@runtime_checkable
class Backend(Protocol):
    """A loaded model that generates units: the transformers loop (:class:`.hf.HFBackend`) or vLLM
    (:class:`.vllm_backend.VllmBackend`). The run driver only uses these members."""

    name: str  # the model's name in the run
    tokenizer: Any  # a transformers tokenizer (token keys, traces' token pieces)
    vocab_size: int  # the logits' width
    device: Any

    def generate(
        self,
        prompts: Mapping[str, str],
        units: Sequence[Unit],
        cfg: GenConfig,
        token_keys: Any = None,
        system_prompt: str | None = None,
    ) -> Iterator[list[GenResult]]:
        """Generate these units (each with its own noise seed) with this config: lists of GenResult
        (token ids, finish reason, traces) in completion order."""
        ...

    def describe(self) -> dict[str, Any]:
        """{"backend", "backend_version", "dtype", "device", ...}: stored with every run."""
        ...

    def record(self) -> dict[str, Any]:
        """A row for the store's ``models`` table."""
        ...

    def close(self) -> None:
        """Free the model (and any engine processes or files it holds)."""
        ...


# ---- the executor seam (engine.generation.run): where a run's units are generated, in this
# process (run.local_executor) or on Ray replicas (engine.generation.distributed). Either way the
# driver, run.run_generation, stays the only database writer.


@dataclass(frozen=True)
class ModelTask:
    """One model's share of a run: the units not stored yet, each with its noise seed."""

    model: Any  # registry name / path, or a models.LoadedModel
    name: str  # the run's name for it (generations.model)
    units: tuple[Unit, ...]  # one seed per mode


@dataclass(frozen=True)
class RunSpec:
    """What every executor needs besides the tasks (the same for all models of a run)."""

    prompts: dict[str, str]  # prompt_id -> user prompt
    system_prompt: str | None
    cfg: GenConfig  # trace_top_k already 0 when traces are off
    key_mode: str  # 'token_id' | 'bytes' (engine.sampling.noise)
    device: str | None
    backend: str = "hf"  # run.open_backend's name for the generation backend
    tensor_parallel: int = 1  # devices one model copy is split over (vLLM's tensor parallelism)
    dtype: str | None = None  # --dtype ("float32", ...); None = auto (ModelRef.default_dtype)


@dataclass(frozen=True)
class ExecChunk:
    """Results an executor hands to the driver, written in one transaction.

    ``results`` may be empty (a model just loaded: ``record`` is its models-table row).
    ``tokenizer``: anything with ``convert_ids_to_tokens`` (the traces' token texts).
    """

    name: str
    results: list
    tokenizer: Any
    record: dict | None = None
    worker: str | None = None  # which replica made it (None: this process)
    describe: dict | None = None  # with ``record``: the backend's describe() (run config)
