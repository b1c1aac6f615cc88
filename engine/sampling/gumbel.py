"""The Gumbel-Max sampler with temperature, top-k and top-p (docs/METHODS.md 1.2).

    T_i = argmax_v ( z_i[v] + g_{i,v} ),   z_i = float32(logits_i) / T with top-k / top-p masked to -inf

which is the Gumbel-max sample of D_i = softmax(z_i) (log D_i = z_i - logsumexp(z_i) is z_i shifted
by one constant per row, so the argmax is the same). Why z + g and not log D + g: the product's
float formula must be one thing on every device and backend, and z + g needs no (B, V) log-softmax,
so the CUDA kernel (engine.sampling.triton_noise.gumbel_argmax_logits) reads the logits once. Ties
(within float32 rounding) go to the lowest id, torch.argmax's rule. The division is IEEE
round-to-nearest (:func:`scale`), the same bits on CPU, on CUDA and in the kernel.

Why not ``torch.multinomial``: it is the same exponential race internally, but it draws its noise
from a global generator over the whole batch tensor, so the noise a row sees depends on batch
size, batch position, vocabulary width and GPU type. It cannot couple models. Here the noise is an
argument (keyed by token, engine.sampling.noise), and masking sets scores to -inf without touching
which noise value belongs to which token, so coupling survives top-k / top-p.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from engine.errors import UserError


class Sampled(NamedTuple):
    tokens: torch.Tensor  # (B,) int64 chosen token ids
    logprobs: torch.Tensor  # (B, V) float32 log D_i (masked entries are -inf)


def check_params(temperature: float, top_k: int, top_p: float) -> None:
    """Raise UserError naming the bad sampling parameter and its allowed range."""
    # math.isfinite: inf would make every logit 0 (uniform, silently) and nan every comparison false
    if not (
        isinstance(temperature, (int, float))
        and not isinstance(temperature, bool)
        and math.isfinite(temperature)
        and temperature >= 0
    ):
        raise UserError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise UserError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
    if not (isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and 0 < top_p <= 1):
        raise UserError(f"top_p must be in (0, 1] (1 = off), got {top_p!r}")


def scale(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """z = float32(logits) / T, IEEE round-to-nearest on every device; T = 0 or 1: no division.

    The divisor is a float32 tensor on the logits' device, not a Python number: torch on CUDA turns
    ``x / number`` into ``x * (1 / number)`` (one bit off now and then), while a tensor divisor is a
    true division there as on CPU, and as the kernel's ``div_rn``.

    Returns:
        (B, V) float32 (the input itself when it is float32 and no division is needed).
    """
    x = logits.float()  # (B, V) the one float32 conversion of the hot path
    if temperature > 0 and temperature != 1.0:  # x / 1 == x exactly: skip a (B, V) read and write
        x = torch.div(x, x.new_full((), temperature))  # (B, V) float32(T) as the divisor, IEEE division
    return x


def masked_logits(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """z = float32(logits) / T with the tokens outside the top-k / top-p set at -inf: the sampler's
    scores.

    Args:
        logits: (B, V) any float dtype; converted to float32 once here.
        temperature: T > 0 scales the logits; T = 0 uses T = 1 (greedy decoding takes argmax z).
        top_k: keep the k most likely tokens (0 = off); ties at the k-th value are all kept.
        top_p: keep the smallest most-likely set with mass >= top_p (1 = off); the most likely
            token is always kept.

    Returns:
        (B, V) float32; masked tokens are -inf. softmax of it is D.
    """
    z = scale(logits, temperature)  # (B, V)
    if top_k and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]  # (B, 1)
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p < 1.0:
        logp = torch.log_softmax(z, dim=-1)  # (B, V) the mass decides the set
        sorted_lp, order = torch.sort(logp, dim=-1, descending=True)  # (B, V)
        cum = sorted_lp.exp().cumsum(dim=-1)  # (B, V)
        # drop a token when the mass strictly before it already reaches top_p
        drop_sorted = (cum - sorted_lp.exp()) >= top_p  # (B, V)
        drop_sorted[:, 0] = False
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)  # (B, V) back to id order
        z = z.masked_fill(drop, float("-inf"))
    return z


def masked_logprobs(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """log D = log_softmax(:func:`masked_logits`): the top-k / top-p restricted, renormalised
    log-probabilities.

    Returns:
        (B, V) float32 log-probabilities; masked tokens are -inf.
    """
    return torch.log_softmax(masked_logits(logits, temperature, top_k, top_p), dim=-1)


def sample(
    logits: torch.Tensor,
    gumbels: torch.Tensor | None,
    temperature: float,
    top_k: int = 0,
    top_p: float = 1.0,
) -> Sampled:
    """Gumbel-Max sampling: argmax(z + g) (= argmax(log D + g)); greedy argmax(z) when T = 0.

    Args:
        logits: (B, V) next-token logits.
        gumbels: (B, V) float32 keyed noise from engine.sampling.noise.gumbel (ignored and may be None
            when temperature == 0).
        temperature, top_k, top_p: see :func:`masked_logits`.

    Returns:
        Sampled(tokens (B,) int64, logprobs (B, V) float32).
    """
    check_params(temperature, top_k, top_p)
    z = masked_logits(logits, temperature, top_k, top_p)  # (B, V)
    logp = torch.log_softmax(z, dim=-1)  # (B, V)
    if temperature == 0:
        return Sampled(torch.argmax(z, dim=-1), logp)
    if gumbels is None or gumbels.shape != z.shape:
        raise UserError(
            f"gumbels must have the logits' shape {tuple(z.shape)}, "
            f"got {None if gumbels is None else tuple(gumbels.shape)}"
        )
    # -inf + g stays -inf, so masked tokens can never win; ties (probability 0) -> lowest id
    return Sampled(torch.argmax(z + gumbels.to(z.device, torch.float32), dim=-1), logp)
