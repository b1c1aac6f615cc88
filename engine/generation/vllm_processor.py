"""The keyed-Gumbel logits processor for vLLM, for both of its logits-processor interfaces.

vLLM 0.32 has two model runners with different custom-processor interfaces:

* V1 model runner (``vllm.v1.sample.logits_processor.LogitsProcessor``): ``__init__(vllm_config,
  device, is_pin_memory)``; ``update_state(BatchUpdate)`` reports requests added / removed / moved
  in the persistent batch, whose index is the logits row; ``apply(logits)``. Each added request
  comes with a live reference to its output-token list, so step = its length.
* Model Runner V2 (``vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor``, selected by
  ``VLLM_USE_V2_MODEL_RUNNER=1``, or by default where Triton runs): ``__init__(vllm_config,
  req_states)``; ``add_request(slot, params)``; ``apply(logits, ctx)`` with ``ctx.expanded_idx_mapping``
  (row -> slot) and ``ctx.pos`` (the position of the token each row reads), so
  step = pos + 1 - prompt_len[slot].

vLLM chooses the runner while building the engine, after it was handed the processor classes, and
each runner's loader checks that the class derives from *its* base. So one class derives from both
and implements both entry points; they share :func:`engine.generation.vllm_backend.apply_rows`, which does the
sampling math. Both run before vLLM's temperature/top-k/top-p, which our requests leave off (T = 0).

With tensor parallelism every rank gathers the full logits and runs this processor on the same rows
(vLLM samples on every rank); only rank 0 writes the step records (:func:`writes_traces`).

This module imports vLLM: it is only imported by :class:`engine.generation.vllm_backend.VllmBackend`.
"""

from __future__ import annotations

from collections import Counter

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor

try:  # Model Runner V2's interface (vLLM >= 0.3x); absent in older releases
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor
except ImportError:  # pragma: no cover - the supported range has it
    V2LogitsProcessor = object  # type: ignore[misc,assignment]

from engine.errors import UserError
from engine.generation.vllm_backend import RowArgs, apply_rows, check_sampling_params

# How many apply() calls each interface served in this process (tests read it to tell which
# interface really ran).
APPLY_CALLS: Counter[str] = Counter()


def writes_traces() -> bool:
    """True in the process whose step records reach the backend: tensor-parallel rank 0 (of the last
    pipeline stage); also True where vLLM's process groups do not exist (one device, a test)."""
    try:
        from vllm.distributed import parallel_state as ps
        return ps.get_tensor_model_parallel_rank() == 0 and ps.get_pp_group().is_last_rank
    except (AssertionError, AttributeError, ImportError):  # groups not initialised
        return True


class KeyedGumbelProcessor(V1LogitsProcessor, V2LogitsProcessor):
    """Replaces our requests' logits by log D + keyed Gumbel noise (engine.generation.vllm_backend.keyed_scores).

    Requests without ``extra_args["coupled_eval"]`` are left untouched.
    """

    def __init__(self, vllm_config, *args) -> None:
        # V1: (vllm_config, device, is_pin_memory); V2: (vllm_config, req_states)
        self.interface = "v2" if len(args) == 1 else "v1"
        self.req_states = args[0] if self.interface == "v2" else None
        self.slots: dict[int, tuple[RowArgs, list[int] | None]] = {}  # batch index / slot -> (args, output ids)
        self.writer: bool | None = None  # writes_traces(), asked at the first apply (process groups exist then)
        if vllm_config is not None and getattr(vllm_config, "speculative_config", None) is not None:
            raise ValueError("speculative decoding breaks coupled sampling (draft rows are sampled with a step "
                             "that is not the committed token count); turn it off")

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        """Refuse, at admission, a coupled request with settings that break coupling (vLLM -> HTTP 400)."""
        if RowArgs.from_params(sampling_params) is None:
            return
        try:
            check_sampling_params(sampling_params)
        except UserError as exc:
            raise ValueError(str(exc)) from exc

    # ---- V1 interface
    def is_argmax_invariant(self) -> bool:
        return False  # it decides the argmax: this is the sampler

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for i in batch_update.removed:
            self.slots.pop(i, None)
        for i, params, _prompt_ids, output_ids in batch_update.added:
            a = RowArgs.from_params(params)
            if a is None:
                self.slots.pop(i, None)
            else:
                self.slots[i] = (a, output_ids)  # output_ids: vLLM's live list of this request's tokens
        for a, b, direction in batch_update.moved:
            sa, sb = self.slots.pop(a, None), self.slots.pop(b, None)
            if sa is not None:
                self.slots[b] = sa
            if direction == MoveDirectionality.SWAP and sb is not None:
                self.slots[a] = sb

    # ---- V2 interface
    def add_request(self, req_idx: int, sampling_params) -> bool:
        a = RowArgs.from_params(sampling_params)
        if a is None:
            self.slots.pop(req_idx, None)
            return False
        self.slots[req_idx] = (a, None)
        return True

    # ---- both
    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        """logits (rows, V) float32 -> our rows replaced by their keyed scores (in place)."""
        if not self.slots:
            return logits
        rows, args, steps = [], [], []
        if ctx is None:  # V1: row = persistent-batch index; step = tokens generated so far
            APPLY_CALLS["v1"] += 1
            for i, (a, out) in self.slots.items():
                if i < logits.shape[0]:
                    rows.append(i); args.append(a); steps.append(len(out))
        else:  # V2: row -> slot; the row reads position pos, so it samples token pos + 1
            APPLY_CALLS["v2"] += 1
            # one host copy per step (the slots' settings live on the host)
            slot_of = ctx.expanded_idx_mapping.tolist()
            pos = ctx.pos.tolist()
            prompt_len = self.req_states.prompt_len.np
            for r, slot in enumerate(slot_of):
                hit = self.slots.get(slot)
                if hit is None:
                    continue
                step = pos[r] + 1 - int(prompt_len[slot])
                if step >= 0:  # < 0: a chunk of a prompt still being prefilled (its sample is dropped)
                    rows.append(r); args.append(hit[0]); steps.append(step)
        if rows:
            if self.writer is None:
                self.writer = writes_traces()
            apply_rows(logits, rows, args, steps, write_traces=self.writer)
        return logits
