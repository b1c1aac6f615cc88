"""KV buffers of the transformers loop: a preallocated cache layer and the re-pack that builds one.

Rows are right-aligned at column ``n`` of every buffer, so a row's next token is always written at
column ``n`` whatever its prompt length; the columns left of a row are masked padding.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class PreallocLayer(DynamicLayer):
    """A KV-cache layer whose buffer is allocated once for the longest row + new tokens.

    Why: ``DynamicLayer.update`` re-concatenates the whole cache every decode step (O(L) copies per
    step, ~12% of CPU time at MMLU prompt lengths); here a step writes one column of a buffer and
    the attention reads a view of the filled part.
    """

    def __init__(self, kbuf: torch.Tensor, vbuf: torch.Tensor, n: int):
        super().__init__()
        self.kbuf, self.vbuf, self.n = kbuf, vbuf, n  # (B, H, cap, D); columns [0, n) are filled
        self.start = 0  # attention reads columns [start, n): the left ones no live row needs are skipped
        self.dtype, self.device, self.is_initialized = kbuf.dtype, kbuf.device, True
        self._views()

    def _views(self) -> None:
        self.keys, self.values = (
            self.kbuf[:, :, self.start : self.n],
            self.vbuf[:, :, self.start : self.n],
        )

    def update(self, key_states, value_states, *args, **kwargs):
        t = key_states.shape[-2]
        if self.n + t > self.kbuf.shape[-2]:  # beyond the planned length: grow (amortised doubling)
            grow = max(self.kbuf.shape[-2], t)
            self.kbuf = torch.cat(
                [self.kbuf, self.kbuf.new_zeros(*self.kbuf.shape[:2], grow, self.kbuf.shape[-1])], 2
            )
            self.vbuf = torch.cat(
                [self.vbuf, self.vbuf.new_zeros(*self.vbuf.shape[:2], grow, self.vbuf.shape[-1])], 2
            )
        self.kbuf[:, :, self.n : self.n + t] = key_states
        self.vbuf[:, :, self.n : self.n + t] = value_states
        self.n += t
        self._views()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.kbuf, self.vbuf = self.kbuf[indices], self.vbuf[indices]
        self._views()

    def place(self, rows: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write one prompt's KV (1, H, lp, D) into ``rows``, right-aligned at column n."""
        lp = k.shape[-2]
        self.kbuf[rows, :, self.n - lp : self.n] = k
        self.vbuf[rows, :, self.n - lp : self.n] = v

    def read_from(self, start: int) -> None:
        """Attention reads columns [start, n) from now on (left of every live row: never read)."""
        self.start = start
        self._views()


def repackable(cache) -> bool:
    """True when every layer is a plain DynamicLayer (rows can be copied between buffers);
    sliding-window and other layer types keep transformers' own cache (static batches)."""
    return all(type(layer) is DynamicLayer for layer in cache.layers)


def pack(
    old: list[PreallocLayer] | None,
    keep: torch.Tensor,
    width: int,
    cap: int,
    prompts: list[tuple[list[tuple[torch.Tensor, torch.Tensor]], int, int]],
) -> list[PreallocLayer]:
    """Fresh buffers of ``cap`` columns holding the kept rows and then new prompts' rows, all
    right-aligned at column ``width`` (the longest row).

    Args:
        old: the running layers (None when no row is kept); kept rows are right-aligned at their n.
        keep: (nk,) indices of the old rows to keep, in order (they become rows 0..nk-1).
        width: filled columns of the new buffers (>= every row's length).
        cap: columns of the new buffers (width + room for the tokens to come).
        prompts: (per-layer (K, V) (1, H, Lp, D), first row, end row) of each new prompt: its KV
            is copied into rows [first, end) (a prompt's units are contiguous rows).
    Returns:
        one PreallocLayer per model layer, (nk + new rows, H, cap, D) each, n = width.
    """
    nk = int(keep.numel())
    b = nk + sum(r1 - r0 for _, r0, r1 in prompts)
    n_old = old[0].n if nk and old else 0
    w = min(width, n_old)  # kept rows are right-aligned at n_old; their lengths are <= width
    # per layer, a (K, V) pair to take head counts, head dims, dtype and device from
    shapes = [(layer.kbuf, layer.vbuf) for layer in old] if nk and old else prompts[0][0]
    layers = []
    for li, (k0, v0) in enumerate(shapes):
        # Columns >= width are written before they are read; the left padding is read (and masked),
        # so it must be finite: zeroed, since fresh memory may hold NaN bit patterns.
        kb = k0.new_empty(b, k0.shape[1], cap, k0.shape[-1])  # (b, H, cap, D)
        vb = v0.new_empty(b, v0.shape[1], cap, v0.shape[-1])
        if nk and old:
            src = old[li]
            kb[:nk, :, : width - w].zero_()
            vb[:nk, :, : width - w].zero_()
            kb[:nk, :, width - w : width] = src.kbuf[keep, :, n_old - w : n_old]
            vb[:nk, :, width - w : width] = src.vbuf[keep, :, n_old - w : n_old]
        for kv, r0, r1 in prompts:
            pk, pv = kv[li]
            lp = pk.shape[-2]
            kb[r0:r1, :, : width - lp].zero_()
            vb[r0:r1, :, : width - lp].zero_()
            kb[r0:r1, :, width - lp : width] = pk
            vb[r0:r1, :, width - lp : width] = pv
        layers.append(PreallocLayer(kb, vb, width))
    return layers
