"""The coupled sampler inside vLLM, without vLLM: row arguments, the per-slot table, and the step
that turns a batch of logits rows into keyed Gumbel-max samples (docs/METHODS.md 1.2-1.3).

The logits processor (:mod:`.vllm_processor`, the only module here that imports vLLM) maps vLLM's
batch layout to (row, slot, step) arrays on the host and calls :func:`apply_rows`; everything else
lives here and in :mod:`engine.sampling.keyed` (the sampler the transformers loop uses too).

Hot path (tests/vllm/test_vllm_processor.py `test_v2_apply_makes_no_host_transfer_at_batch_256`):
:func:`apply_rows` does no device-to-host transfer and no per-row Python
loop. Per group of sampler settings (normally one): one host-to-device copy of an int64 (4, R) array
(rows, seeds, units, steps; pinned and asynchronous on CUDA), the token keys cached on the device
once per ``generate`` call, one :func:`engine.sampling.keyed.draw` in bounded memory (on CUDA
without top-k / top-p / trace: one Triton kernel that reads the rows once, selected rows included,
and writes two values per row), and an O(R) write into the logits: the sampled token's logit becomes
the float32 maximum, so vLLM's greedy argmax (T = 0) picks it. The step records (token, probability,
top-k) are gathered on the device and their copy to the host is started asynchronously
(:class:`engine.generation.vllm_traces.PendingRecords`): in the backend's process they wait in a
list until a request finishes; in another process (tensor parallelism, a separate engine core) the
process's writer thread waits for the copy and writes them to the trace directory
(:func:`engine.generation.vllm_traces.write_later`). Either way the step itself neither waits for
the copy nor converts or pickles anything.

Imports neither vLLM nor transformers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch

from engine.errors import UserError
from engine.generation.vllm_traces import PENDING, PendingRecords, load_token_keys, write_later
from engine.sampling.keyed import draw

EXTRA_KEY = "coupled_eval"  # SamplingParams.extra_args[EXTRA_KEY]: this request's noise key and sampler
WINNER = torch.finfo(torch.float32).max  # the sampled token's logit: vLLM's argmax picks it
_DEVICE_KEYS: dict[tuple[str, str], torch.Tensor] = {}  # (keys id, device) -> token keys on that device
_DEVICE_KEYS_MAX = 4


@dataclass(frozen=True)
class RowArgs:
    """A request's noise key and sampler settings, parsed once from ``extra_args[EXTRA_KEY]``."""

    tag: str
    seed: int  # int64 bits
    unit: int  # int64 unit key
    temperature: float
    top_k: int
    top_p: float
    trace_k: int
    keys: str  # id in TOKEN_KEYS
    sink: str = ""  # the backend's trace directory ("" : record in this process only)
    origin: int = 0  # pid of the backend's process: a processor there records into TRACES directly

    @classmethod
    def from_params(cls, params) -> RowArgs | None:
        extra = getattr(params, "extra_args", None) or {}
        a = extra.get(EXTRA_KEY)
        if a is None:
            return None
        return cls(
            str(a["tag"]),
            int(a["seed"]),
            int(a["unit"]),
            float(a["temperature"]),
            int(a["top_k"]),
            float(a["top_p"]),
            int(a["trace_k"]),
            str(a["keys"]),
            str(a.get("sink", "")),
            int(a.get("origin", 0)),
        )

    def group(self) -> tuple:
        """The settings shared by the rows of one vectorised draw."""
        return (
            self.temperature,
            self.top_k,
            self.top_p,
            self.keys,
            self.trace_k,
            self.sink,
            self.origin,
        )

    def in_origin(self) -> bool:
        """True where the records go straight into TRACES (the backend's own process)."""
        return not self.sink or self.origin == os.getpid()


class SlotTable:
    """Per slot (V2: vLLM's request slot; V1: the persistent-batch index) on the host, as numpy
    arrays so that a step's rows are gathered by fancy indexing, not a Python loop."""

    def __init__(self, size: int = 64) -> None:
        self.active = np.zeros(size, dtype=bool)
        self.seed = np.zeros(size, dtype=np.int64)
        self.unit = np.zeros(size, dtype=np.int64)
        self.group = np.zeros(size, dtype=np.int64)  # index into self.groups
        self.tag = np.empty(size, dtype=object)
        self.groups: list[RowArgs] = []  # one representative per distinct settings tuple
        self._gid: dict[tuple, int] = {}

    def __len__(self) -> int:
        return int(self.active.sum())

    def _grow(self, slot: int) -> None:
        n = len(self.active)
        if slot < n:
            return
        m = max(slot + 1, 2 * n)
        for name in ("active", "seed", "unit", "group", "tag"):
            old = getattr(self, name)
            new = np.zeros(m, dtype=old.dtype) if old.dtype != object else np.empty(m, dtype=object)
            new[:n] = old
            setattr(self, name, new)

    def set(self, slot: int, a: RowArgs | None) -> None:
        """Slot ``slot`` now holds request ``a`` (None: a foreign request, or none)."""
        self._grow(slot)
        if a is None:
            self.active[slot] = False
            return
        gid = self._gid.get(a.group())
        if gid is None:
            gid = self._gid[a.group()] = len(self.groups)
            self.groups.append(a)
        self.active[slot], self.seed[slot], self.unit[slot] = True, a.seed, a.unit
        self.group[slot], self.tag[slot] = gid, a.tag

    def move(self, src: int, dst: int, swap: bool) -> None:
        """V1's persistent batch moved (or swapped) the request at ``src`` to ``dst``."""
        self._grow(max(src, dst))
        cols = ("active", "seed", "unit", "group", "tag")
        if swap:
            for name in cols:
                arr = getattr(self, name)
                arr[src], arr[dst] = arr[dst], arr[src]
        else:
            for name in cols:
                arr = getattr(self, name)
                arr[dst] = arr[src]
            self.active[src] = False

    def ours(self, slots: np.ndarray) -> np.ndarray:
        """(n,) bool: which of these slots hold our requests."""
        inside = slots < len(self.active)
        out = np.zeros(len(slots), dtype=bool)
        out[inside] = self.active[slots[inside]]
        return out


def _device_keys(kid: str, sink: str, device: torch.device, width: int) -> torch.Tensor:
    """The token keys ``kid`` on ``device``: uploaded once per generate call, not every step."""
    key = (kid, str(device))
    keys = _DEVICE_KEYS.get(key)
    if keys is None:
        host = load_token_keys(kid, sink)
        if host is None:
            raise RuntimeError(
                f"token keys {kid!r} are neither registered in this process nor in the trace "
                f"directory {sink!r}: was the backend closed while its requests ran?"
            )
        while len(_DEVICE_KEYS) >= _DEVICE_KEYS_MAX:
            _DEVICE_KEYS.pop(next(iter(_DEVICE_KEYS)))
        keys = _DEVICE_KEYS[key] = host.to(device=device, dtype=torch.int64)
    if keys.shape[0] != width:
        raise RuntimeError(f"token keys have {keys.shape[0]} entries but vLLM's logits are {width} wide")
    return keys


def forget_device_keys(kid: str) -> None:
    """Drop the device copies of token keys ``kid`` (the backend's generate call ended)."""
    for key in [k for k in _DEVICE_KEYS if k[0] == kid]:
        _DEVICE_KEYS.pop(key, None)


def _to_device(host: np.ndarray, device: torch.device) -> torch.Tensor:
    """A small host array on ``device``: pinned and asynchronous on CUDA (the host never waits)."""
    t = torch.from_numpy(np.ascontiguousarray(host))
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _records(d, R: int) -> torch.Tensor:
    """(R, 2 + 3k) float64 step records on the device: token, probability, top ids, probabilities,
    Gumbel values (int ids < 2^53 and float32 values are exact in float64)."""
    cols = [d.tokens[:, None].double(), d.probs[:, None].double()]
    cols += [c.double() for c in (d.top_ids, d.top_probs, d.top_gumbels) if c is not None]
    return torch.cat(cols, dim=1) if R else torch.zeros(0, 2)


def apply_rows(
    logits: torch.Tensor,
    table: SlotTable,
    rows: np.ndarray,
    slots: np.ndarray,
    steps: np.ndarray,
    write_traces: bool = True,
) -> torch.Tensor:
    """Make vLLM's greedy argmax of ``logits[rows]`` the keyed Gumbel-max samples; record the steps.

    Args:
        logits: (N, V) float32, modified in place.
        table: the processor's slots; rows, slots, steps: (R,) int64 host arrays (row of the
            logits, its slot in ``table``, its generated-token index).
        write_traces: tensor-parallel rank 0 (the other ranks sample the same rows, silently). In a
            process other than the backend's, the records go to this process's writer thread.
    """
    dev, V = logits.device, logits.shape[1]
    gids = table.group[slots]
    for gid in np.unique(gids):  # one group per settings tuple: normally exactly one
        sel = gids == gid
        a = table.groups[int(gid)]
        keys = _device_keys(a.keys, a.sink, dev, V)
        r = rows[sel]
        packed = _to_device(
            np.stack([r, table.seed[slots[sel]], table.unit[slots[sel]], steps[sel]]), dev
        )
        idx, seeds, units, st = packed  # (R,) each, int64 on the device
        if r[-1] - r[0] + 1 == len(r) and np.all(
            np.diff(r) == 1
        ):  # consecutive rows (known on the host):
            x, pick = logits[int(r[0]) : int(r[-1]) + 1], None  # a view, no gathered copy
        else:
            x, pick = logits, idx
        d = draw(x, seeds, units, st, keys, a.temperature, a.top_k, a.top_p, a.trace_k, rows=pick)
        logits[idx, d.tokens] = WINNER  # O(R) write: vLLM's argmax (T = 0) now picks the sampled token
        rec = PendingRecords(
            table.tag[slots[sel]],
            steps[sel],
            _records(d, int(sel.sum())),
            a.trace_k,
            d.top_gumbels is not None,
        )
        if a.in_origin():
            PENDING.append(rec.copy_to_host())  # asynchronous on CUDA; read when a request finishes
        elif write_traces:  # another process: the writer thread waits for the copy and writes the frame
            write_later(a.sink, rec.copy_to_host())
    return logits


_NEUTRAL = {
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "temperature": 0.0,
    "top_k": (0, -1, None),
    "top_p": 1.0,
    "min_p": 0.0,
    "n": 1,
    "logit_bias": None,
    "bad_words": None,
    "allowed_token_ids": None,
    "min_tokens": 0,
}


def check_sampling_params(params) -> None:
    """UserError naming the first vLLM sampling setting that would break coupling.

    Coupling needs vLLM's own sampler to be a plain argmax over our scores: penalties depend on the
    request's history, n > 1 draws several samples per key, and vLLM's temperature/top-k/top-p/min-p,
    logit bias or bad words would act on our scores after the noise was added.
    """
    for name, ok in _NEUTRAL.items():
        v = getattr(params, name, None)
        allowed = ok if isinstance(ok, tuple) else (ok,)
        if name in ("logit_bias", "bad_words", "allowed_token_ids", "min_tokens"):
            bad = bool(v)
        else:
            bad = v not in allowed
        if bad:
            raise UserError(
                f"vLLM setting {name}={v!r} breaks coupled sampling; allowed: "
                f"{' or '.join(map(repr, allowed))} (the noise, temperature, top-k and top-p are "
                "applied by the coupled-eval logits processor)"
            )


__all__ = [
    "EXTRA_KEY",
    "RowArgs",
    "SlotTable",
    "apply_rows",
    "check_sampling_params",
    "forget_device_keys",
]
