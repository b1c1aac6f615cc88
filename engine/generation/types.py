"""Generation settings and results: plain frozen dataclasses (no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine import config
from engine.errors import UserError
from engine.sampling.gumbel import check_params


@dataclass(frozen=True)
class GenConfig:
    """Sampling and batching settings of a generation (everything but the seed and the models)."""

    temperature: float = config.DEFAULT_TEMPERATURE
    top_k: int = config.DEFAULT_TOP_K
    top_p: float = config.DEFAULT_TOP_P
    max_new_tokens: int = config.DEFAULT_MAX_NEW_TOKENS
    batch_size: int = config.DEFAULT_BATCH_SIZE
    trace_top_k: int = config.DEFAULT_TRACE_TOP_K
    record_traces: bool | None = True  # None = auto: on for runs of <= config.TRACES_AUTO_MAX_UNITS generations

    def __post_init__(self) -> None:
        check_params(self.temperature, self.top_k, self.top_p)
        for name in ("max_new_tokens", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"{name} must be an integer >= 1, got {v!r}")
        if isinstance(self.trace_top_k, bool) or not isinstance(self.trace_top_k, int) or self.trace_top_k < 0:
            raise UserError(f"trace_top_k must be an integer >= 0, got {self.trace_top_k!r}")


@dataclass(frozen=True)
class GenResult:
    """One generated unit. Per-step lists have one entry per generated token (EOS included)."""

    prompt_id: str
    repeat: int
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str                                   # 'eos' | 'length'
    seed: int                                            # the noise seed this unit used
    probs: tuple[float, ...]                             # prob of the chosen token, per step
    top_ids: tuple[tuple[int, ...], ...] | None = None   # top-k alternatives per step
    top_probs: tuple[tuple[float, ...], ...] | None = None
    top_gumbels: tuple[tuple[float, ...], ...] | None = None  # None when T = 0 (no noise)


# ---- the executor seam (engine.generation.run): where a run's units are generated, in this
# process (run.local_executor) or on Ray replicas (engine.generation.distributed). Either way the
# driver, run.run_generation, stays the only database writer.

@dataclass(frozen=True)
class ModelTask:
    """One model's share of a run: the units not stored yet, each with its noise seed."""

    model: Any                                 # registry name / path, or a models.LoadedModel
    name: str                                  # the run's name for it (generations.model)
    units: tuple[tuple[str, int, int], ...]    # (prompt_id, repeat, seed); one seed per mode


@dataclass(frozen=True)
class RunSpec:
    """What every executor needs besides the tasks (the same for all models of a run)."""

    prompts: dict[str, str]                    # prompt_id -> user prompt
    system_prompt: str | None
    cfg: GenConfig                             # trace_top_k already 0 when traces are off
    key_mode: str                              # 'token_id' | 'bytes' (engine.sampling.noise)
    device: str | None
    backend: str = "hf"                        # run.open_backend's name for the generation backend


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
    worker: str | None = None                  # which replica made it (None: this process)
