"""The Gumbel-Max sampler with temperature, top-k and top-p (docs/METHODS.md 1.2).

    T_i = argmax_v ( log D_i[v] + g_{i,v} ),   D_i = softmax(logits / T) after top-k / top-p masking

Why not ``torch.multinomial``: it is the same exponential race internally, but it draws its noise
from a global generator over the whole batch tensor, so the noise a row sees depends on batch
size, batch position, vocabulary width and GPU type. It cannot couple models. Here the noise is an
argument (keyed by token, engine.sampling.noise), and masking sets log-probabilities to -inf without
touching which noise value belongs to which token, so coupling survives top-k / top-p.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from engine.errors import UserError


class Sampled(NamedTuple):
    tokens: torch.Tensor    # (B,) int64 chosen token ids
    logprobs: torch.Tensor  # (B, V) float32 log D_i (masked entries are -inf)


def check_params(temperature: float, top_k: int, top_p: float) -> None:
    """Raise UserError naming the bad sampling parameter and its allowed range."""
    # math.isfinite: inf would make every logit 0 (uniform, silently) and nan every comparison false
    if not (isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
            and math.isfinite(temperature) and temperature >= 0):
        raise UserError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise UserError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
    if not (isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and 0 < top_p <= 1):
        raise UserError(f"top_p must be in (0, 1] (1 = off), got {top_p!r}")


def masked_logprobs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """log D = log_softmax(logits / T) restricted to the top-k / top-p set, renormalised.

    Args:
        logits: (B, V) any float dtype; converted to float32 once here.
        temperature: T > 0 scales the logits; T = 0 uses T = 1 for the reported distribution
            (greedy decoding itself ignores it).
        top_k: keep the k most likely tokens (0 = off); ties at the k-th value are all kept.
        top_p: keep the smallest most-likely set with mass >= top_p (1 = off); the most likely
            token is always kept.

    Returns:
        (B, V) float32 log-probabilities; masked tokens are -inf.
    """
    x = logits.float()  # (B, V) the one float32 conversion of the hot path
    if temperature > 0 and temperature != 1.0:  # x / 1 == x exactly: skip a (B, V) read and write
        x = x / temperature
    if top_k and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[:, -1:]  # (B, 1)
        x = x.masked_fill(x < kth, float("-inf"))
    logp = torch.log_softmax(x, dim=-1)  # (B, V)
    if top_p < 1.0:
        sorted_lp, order = torch.sort(logp, dim=-1, descending=True)  # (B, V)
        cum = sorted_lp.exp().cumsum(dim=-1)  # (B, V)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (cum - sorted_lp.exp()) >= top_p  # (B, V)
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)  # (B, V) back to id order
        logp = torch.log_softmax(logp.masked_fill(drop, float("-inf")), dim=-1)
    return logp


def sample(logits: torch.Tensor, gumbels: torch.Tensor | None, temperature: float,
           top_k: int = 0, top_p: float = 1.0) -> Sampled:
    """Gumbel-Max sampling: argmax(log D + g); greedy argmax(log D) when T = 0.

    Args:
        logits: (B, V) next-token logits.
        gumbels: (B, V) float32 keyed noise from engine.sampling.noise.gumbel (ignored and may be None
            when temperature == 0).
        temperature, top_k, top_p: see :func:`masked_logprobs`.

    Returns:
        Sampled(tokens (B,) int64, logprobs (B, V) float32).
    """
    check_params(temperature, top_k, top_p)
    logp = masked_logprobs(logits, temperature, top_k, top_p)  # (B, V)
    if temperature == 0:
        return Sampled(torch.argmax(logp, dim=-1), logp)
    if gumbels is None or gumbels.shape != logp.shape:
        raise UserError(f"gumbels must have the logits' shape {tuple(logp.shape)}, "
                        f"got {None if gumbels is None else tuple(gumbels.shape)}")
    # -inf + g stays -inf, so masked tokens can never win; ties (probability 0) -> lowest id
    return Sampled(torch.argmax(logp + gumbels.to(logp.device, torch.float32), dim=-1), logp)
