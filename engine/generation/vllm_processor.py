"""The keyed-Gumbel logits processor for vLLM, for both of its logits-processor interfaces.

vLLM 0.32 has two model runners with different custom-processor interfaces:

* V1 model runner (``vllm.v1.sample.logits_processor.LogitsProcessor``): ``__init__(vllm_config,
  device, is_pin_memory)``; ``update_state(BatchUpdate)`` reports requests added / removed / moved
  in the persistent batch, whose index is the logits row; ``apply(logits)``. Each added request
  comes with a live reference to its output-token list, so step = its length.
* Model Runner V2 (``vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor``, selected by
  ``VLLM_USE_V2_MODEL_RUNNER=1``, or by default where Triton runs): ``__init__(vllm_config,
  req_states)``; ``add_request(slot, params)``; ``apply(logits, ctx)`` with the host arrays
  ``ctx.idx_mapping_np`` (row -> slot) and ``ctx.seq_lens_upper_bound_np`` (the tokens each row's
  sequence holds), so step = seq_len - ``req_states.prompt_len.np[slot]`` (negative: a prompt chunk
  still being prefilled, left alone).

vLLM chooses the runner while building the engine, after it was handed the processor classes, and each
runner's loader checks that the class derives from *its* base. So one class derives from both and
implements both entry points; they share :func:`engine.generation.vllm_sampler.apply_rows`, which does
the sampling math. Both run before vLLM's temperature/top-k/top-p, which our requests leave off (T = 0).

With tensor parallelism every rank gathers the full logits and runs this processor on the same rows
(vLLM samples on every rank); only rank 0 writes the step records (:func:`writes_traces`).

Hot path: no device-to-host transfer and no per-row Python loop in V2's ``apply`` (the row -> slot
mapping and sequence lengths come as host numpy arrays; ``tests/vllm/test_vllm_processor.py`` checks
it at batch 256 with a TorchFunctionMode). V1 (the CPU build) reads each row's step from vLLM's live
output list, a host loop over its rows.

This module imports vLLM and, of this project, only :mod:`.vllm_sampler` (no circle: the backend
imports this module, never the other way).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor

try:  # Model Runner V2's interface (vLLM >= 0.32); absent in older releases
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor
except ImportError:  # pragma: no cover - the supported range has it
    # ignore: a fallback class for a module that may be absent (unused where vllm is not installed)
    V2LogitsProcessor = object  # type: ignore[misc,assignment,unused-ignore]

from engine.errors import UserError
from engine.generation.vllm_sampler import RowArgs, SlotTable, apply_rows, check_sampling_params

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


def coupling_breakers(vllm_config) -> list[str]:
    """The engine settings that break coupled sampling, each with why (empty: none)."""
    if vllm_config is None:
        return []
    out = []
    if getattr(vllm_config, "speculative_config", None) is not None:
        out.append(
            "speculative decoding (draft rows are sampled with a step that is not the committed "
            "token count)"
        )
    if getattr(getattr(vllm_config, "parallel_config", None), "enable_batch_sharded_sampling", False):
        out.append(
            "batch-sharded sampling (each tensor-parallel rank samples only its share of the rows, "
            "so rank 0 would record only its share)"
        )
    if getattr(vllm_config, "watermark_config", None) is not None:
        out.append("watermarking (it replaces the sampler that our greedy argmax relies on)")
    return out


class KeyedGumbelProcessor(V1LogitsProcessor, V2LogitsProcessor):
    """Makes vLLM's greedy argmax of our requests' rows their keyed Gumbel-max samples
    (engine.sampling.keyed.draw). Requests without ``extra_args["coupled_eval"]`` are left untouched.
    """

    def __init__(self, vllm_config, *args) -> None:
        # V1: (vllm_config, device, is_pin_memory); V2: (vllm_config, req_states)
        self.interface = "v2" if len(args) == 1 else "v1"
        self.req_states = args[0] if self.interface == "v2" else None
        self.table = SlotTable(int(getattr(self.req_states, "max_num_reqs", 0) or 64))
        self.outputs: dict[int, list[int]] = {}  # V1: batch index -> vLLM's live list of output ids
        self.writer: bool | None = (
            None  # writes_traces(), asked at the first apply (process groups exist then)
        )
        bad = coupling_breakers(vllm_config)
        if bad:
            raise ValueError(f"{bad[0]} breaks coupled sampling; turn it off")

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        """Refuse, at admission, a coupled request with settings that break coupling (vLLM -> HTTP
        400)."""
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
            self.table.set(i, None)
            self.outputs.pop(i, None)
        for i, params, _prompt_ids, output_ids in batch_update.added:
            a = RowArgs.from_params(params)
            self.table.set(i, a)
            if a is None:
                self.outputs.pop(i, None)
            else:
                self.outputs[i] = (
                    output_ids  # vLLM's live list of this request's tokens: step = its length
                )
        for a, b, direction in batch_update.moved:
            swap = direction == MoveDirectionality.SWAP
            self.table.move(a, b, swap)
            oa, ob = self.outputs.pop(a, None), self.outputs.pop(b, None)
            if oa is not None:
                self.outputs[b] = oa
            if swap and ob is not None:
                self.outputs[a] = ob

    # ---- V2 interface
    def add_request(self, req_idx: int, sampling_params) -> bool:
        a = RowArgs.from_params(sampling_params)
        self.table.set(req_idx, a)
        return a is not None

    # ---- both
    def apply(self, logits: torch.Tensor, ctx=None) -> torch.Tensor:
        """logits (rows, V) float32 -> our rows' sampled tokens made the argmax (in place)."""
        if not len(self.table):
            return logits
        if ctx is None:  # V1: row = persistent-batch index; step = tokens generated so far
            APPLY_CALLS["v1"] += 1
            rows = np.flatnonzero(self.table.ours(np.arange(logits.shape[0])))
            slots = rows
            steps = np.array([len(self.outputs[int(i)]) for i in rows], dtype=np.int64)
        else:  # V2: row -> slot on the host (one row per request: speculative decoding is refused)
            APPLY_CALLS["v2"] += 1
            slot_of = np.asarray(ctx.idx_mapping_np, dtype=np.int64)  # (N,)
            rows = np.flatnonzero(self.table.ours(slot_of))
            slots = slot_of[rows]
            # the row's sequence holds pos + 1 tokens (exact without speculative decoding): it samples
            # token pos + 1, i.e. generated-token index seq_len - prompt_len
            seq = np.asarray(ctx.seq_lens_upper_bound_np, dtype=np.int64)[rows]
            assert self.req_states is not None  # set by the V2 constructor
            steps = seq - np.asarray(self.req_states.prompt_len.np, dtype=np.int64)[slots]
            keep = steps >= 0  # < 0: a chunk of a prompt still being prefilled (its sample is dropped)
            rows, slots, steps = rows[keep], slots[keep], steps[keep]
        if len(rows):
            if self.writer is None:
                self.writer = writes_traces()
            apply_rows(
                logits,
                self.table,
                rows.astype(np.int64),
                slots.astype(np.int64),
                steps,
                write_traces=self.writer,
            )
        return logits
