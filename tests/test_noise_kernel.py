"""The fused Triton noise kernel against the torch reference (engine.sampling.noise.gumbel), bit for bit.

On CPU the kernel runs in Triton's numpy interpreter (TRITON_INTERPRET=1, set here before triton is
imported when there is no GPU: Triton decorates its own reductions (tl.max, tl.argmax) at import,
and the fused Gumbel-argmax needs them interpreted); on CUDA, compiled, and the Gumbel-argmax tests
then run on the GPU. Skipped with a reason when triton is not importable.

Exactness: the integer hash is exact on every backend. The float64 ``log`` is the backend's (numpy
in the interpreter, libdevice on CUDA) and may differ from torch CPU's in the last float64 bit
(measured: numpy vs torch CPU differ on ~0.3% of float64 logs of 53-bit uniforms). That survives
the float32 rounding only where the float64 value lies within a float64 ulp or two of a float32
rounding midpoint; the comparison allows a difference there and nowhere else, and counts them
(measured: 0 of 51,302,400 values over a 128,256 vocabulary, docs/BENCHMARKS.md, "Keyed noise on GPU").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

# Something earlier in this process may have imported triton already (transformers' Llama import
# does), with its reductions decorated compiled: then the CPU Gumbel-argmax tests run in a child.
_TRITON_PRELOADED = "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1"
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported (see the docstring)

from engine.sampling import noise  # noqa: E402
from engine.sampling import triton_noise as nt  # noqa: E402

DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # where the Gumbel-argmax tests run

needs_triton = pytest.mark.skipif(
    not nt.triton_importable(),
    reason="triton is not importable here (pip install triton to run the kernel tests)",
)
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)"
)


def _in_fresh_interpreter(request) -> bool:
    """Re-run this test in a child process with TRITON_INTERPRET=1 set before triton's import, when
    this process imported triton compiled on a machine without CUDA. True when it did (and passed)."""
    if torch.cuda.is_available() or not _TRITON_PRELOADED:
        return False
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            f"{Path(__file__).resolve()}::{request.node.name}",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        timeout=600,
    )
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    return True


def _reference_float64(seed, unit_keys, step, token_keys) -> torch.Tensor:
    """-log(-log u) in float64 before the float32 rounding, from the reference's own integer ops."""
    B = unit_keys.shape[0]
    s = (
        noise._mix(seed.to(torch.int64))
        if isinstance(seed, torch.Tensor)
        else torch.full((B,), noise.as_int64(noise._mix_int(seed)), dtype=torch.int64)
    )
    st = (
        step.to(torch.int64)
        if isinstance(step, torch.Tensor)
        else torch.full((B,), int(step), dtype=torch.int64)
    )
    row = noise._mix_(noise._mix_(s + unit_keys) + st)  # (B,)
    tok = noise._mix_(token_keys.to(torch.int64) + noise._TOKEN_SALT)  # (V,)
    h = noise._mix_(row[:, None] + tok[None, :])  # (B, V)
    u = noise._srl(h, 11).to(torch.float64).mul_(2.0**-53).clamp_(min=torch.finfo(torch.float64).tiny)
    return -torch.log(-torch.log(u))  # (B, V)


def _near_f32_midpoint(x64: torch.Tensor) -> torch.Tensor:
    """True where x64 is within 2 float64 ulps of a float32 rounding midpoint (a last-bit log
    difference could round either way there)."""
    f = x64.to(torch.float32)
    lo = torch.nextafter(f, torch.tensor(-np.inf)).double()
    hi = torch.nextafter(f, torch.tensor(np.inf)).double()
    mid_lo, mid_hi = (f.double() + lo) / 2, (f.double() + hi) / 2
    ulp = torch.abs(torch.nextafter(x64, torch.tensor(np.inf, dtype=torch.float64)) - x64)
    return ((x64 - mid_lo).abs() <= 2 * ulp) | ((x64 - mid_hi).abs() <= 2 * ulp)


def test_midpoint_helper_flags_only_values_at_a_float32_rounding_midpoint():
    one_f32_ulp = 2.0**-23  # at 1.0; at 3.0 it is 2^-22, so 3 + 2^-23 is a midpoint
    x = torch.tensor(
        [1.0, 1.0 + one_f32_ulp / 2, 1.0 + one_f32_ulp / 4, 3.0 + one_f32_ulp], dtype=torch.float64
    )
    assert _near_f32_midpoint(x).tolist() == [False, True, False, True]


def assert_same_noise(got: torch.Tensor, seed, unit_keys, step, token_keys) -> int:
    """Exact equality with noise.gumbel, except (counted) at float32 rounding midpoints."""
    want = noise.gumbel(seed, unit_keys, step, token_keys)
    assert got.dtype == torch.float32 and got.shape == want.shape
    diff = got.view(torch.int32) != want.view(torch.int32)
    if diff.any():
        near = _near_f32_midpoint(_reference_float64(seed, unit_keys, step, token_keys))
        assert not (diff & ~near).any(), (
            f"{int((diff & ~near).sum())} values differ away from a rounding midpoint"
        )
        # such values are ~2^-29 of the whole: more than 1 in 10^6 means a real bug
        assert int(diff.sum()) <= max(1, got.numel() // 10**6)
    return int(diff.sum())


def _units(n: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(-(2**63), 2**63 - 1, size=n, dtype=np.int64, endpoint=True))


@needs_triton
@pytest.mark.parametrize("V", [1, 7, 1000, 1024, 1025, 49_152, 128_256])
def test_kernel_equals_reference_on_vocabulary_sizes(V):
    # odd sizes (not multiples of the block), one block exactly, SmolLM2's and Llama 3's vocabularies
    uk = noise.unit_keys([("q0", 0), ("q0", 1), ("a prompt", 3)])  # (3,)
    keys = torch.arange(V)
    got = nt.gumbel_triton(0, uk, 5, keys, block=1024 if V <= 1025 else None)
    assert assert_same_noise(got, 0, uk, 5, keys) == 0


@needs_triton
def test_kernel_equals_reference_with_extreme_keys_seeds_and_steps():
    # negative and extreme 64-bit unit keys, seed 2^64 - 1 (an int) or per-row seed bits, large steps
    uk = torch.tensor([0, -1, -(2**63), 2**63 - 1, 123456789], dtype=torch.int64)
    keys = torch.cat(
        [torch.arange(300), torch.tensor([-1, -(2**63), 2**63 - 1, 7, 7])]
    )  # repeated key too
    for seed in (0, 1, 2**63, 2**64 - 1):
        got = nt.gumbel_triton(seed, uk, 2**40, keys)
        assert assert_same_noise(got, seed, uk, 2**40, keys) == 0
    seeds = torch.tensor([0, -1, 5, -(2**63), noise.as_int64(2**64 - 3)], dtype=torch.int64)  # (B,) bits
    steps = torch.tensor([0, 1, 19, 2**31, 2**62])
    got = nt.gumbel_triton(seeds, uk, steps, keys)
    assert assert_same_noise(got, seeds, uk, steps, keys) == 0


@needs_triton
def test_kernel_equals_reference_in_both_token_key_modes():
    from engine.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    uk = _units(4, seed=1)
    for mode in noise.KEY_MODES:  # token ids, and blake2b hashes of the tokens' byte strings
        keys = noise.token_keys_for(tok, mode, vocab_size=len(tok) + 3)
        got = nt.gumbel_triton(42, uk, torch.tensor([0, 3, 7, 11]), keys)
        assert assert_same_noise(got, 42, uk, torch.tensor([0, 3, 7, 11]), keys) == 0
    # a 128,256-wide byte-string-style key vector (random 64-bit keys), a few rows
    keys = _units(128_256, seed=2)
    got = nt.gumbel_triton(7, uk[:2], 3, keys)
    assert assert_same_noise(got, 7, uk[:2], 3, keys) == 0


@needs_triton
def test_kernel_is_batch_independent_and_writes_every_element():
    # a row's noise is the same alone or in a batch; a poisoned out buffer is fully overwritten
    uk = _units(6, seed=3)
    keys = torch.arange(5000)
    out = torch.full((6, 5000), float("nan"))
    full = nt.gumbel_triton(9, uk, 2, keys, out=out, block=1024)
    assert full is out and not torch.isnan(out).any()
    for b in (0, 5):
        one = nt.gumbel_triton(9, uk[b : b + 1], 2, keys)
        assert torch.equal(one[0].view(torch.int32), full[b].view(torch.int32))
    with pytest.raises(ValueError, match="contiguous float32"):
        nt.gumbel_triton(9, uk, 2, keys, out=torch.empty(6, 4999))


@needs_triton
def test_empty_batch():
    assert nt.gumbel_triton(0, torch.zeros(0, dtype=torch.int64), 0, torch.arange(10)).shape == (0, 10)


@needs_triton
@pytest.mark.parametrize("block", [256, 4096])
def test_gumbel_argmax_equals_reference_sampler(block, request):
    if _in_fresh_interpreter(request):
        return
    # fused Gumbel-max = engine.sampling.sample's argmax(logp + g) with the reference noise, incl.
    # top-k masked rows (-inf), a row whose winner sits in a later block, and the chosen g values
    from engine.sampling.gumbel import masked_logprobs

    gen = torch.Generator().manual_seed(0)
    B, V = 6, 5003
    logits = torch.randn(B, V, generator=gen) * 3
    logits[2, 4000] = 40.0  # winner in the last blocks
    uk, steps = _units(B, seed=4), torch.arange(B) * 3
    for top_k in (0, 50):
        logp = masked_logprobs(logits, 0.7, top_k=top_k).to(DEV)
        tok, gval = nt.gumbel_argmax_fused(
            logp,
            11,
            uk.to(DEV),
            steps.to(DEV),
            torch.arange(V, device=DEV),
            backend="triton",
            block=block,
        )
        tok, gval, logp = tok.cpu(), gval.cpu(), logp.cpu()
        g = noise.gumbel(11, uk, steps, torch.arange(V))
        want = torch.argmax(logp + g, dim=-1)
        assert torch.equal(tok, want)
        assert torch.equal(gval, g.gather(1, want[:, None]).squeeze(1))
    assert int(tok[2]) == 4000


@needs_triton
def test_gumbel_argmax_ties_go_to_the_lowest_id(request):
    if _in_fresh_interpreter(request):
        return
    # an exact tie: a row of all -inf gives id 0 (torch.argmax's first index) in the fused kernel
    # and in the reference; a single finite entry in the last block wins
    logp = torch.full((2, 3000), float("-inf"))
    logp[1, 2999] = 0.0
    tok, _ = nt.gumbel_argmax_fused(
        logp.to(DEV),
        0,
        _units(2).to(DEV),
        0,
        torch.arange(3000, device=DEV),
        backend="triton",
        block=1024,
    )
    assert tok.tolist() == [0, 2999]
    assert torch.argmax(logp + noise.gumbel(0, _units(2), 0, torch.arange(3000)), -1).tolist() == [
        0,
        2999,
    ]


def test_dispatch_falls_back_to_the_torch_reference_on_cpu():
    # auto on CPU tensors = the reference itself (no Triton needed), and the errors name the allowed values
    uk = _units(3)
    keys = torch.arange(777)
    assert torch.equal(nt.gumbel_fused(3, uk, 1, keys), noise.gumbel(3, uk, 1, keys))
    assert torch.equal(nt.gumbel_fused(3, uk, 1, keys, backend="torch"), noise.gumbel(3, uk, 1, keys))
    logp = torch.log_softmax(torch.randn(3, 777), -1)
    tok, gval = nt.gumbel_argmax_fused(logp, 3, uk, 1, keys)
    g = noise.gumbel(3, uk, 1, keys)
    assert torch.equal(tok, torch.argmax(logp + g, -1))
    with pytest.raises(ValueError, match="allowed: auto, triton, torch"):
        nt.gumbel_fused(3, uk, 1, keys, backend="cuda")
    with pytest.raises(ValueError, match="logp must be float32"):
        nt.gumbel_argmax_fused(logp.double(), 3, uk, 1, keys)


@needs_triton
@needs_cuda
def test_cuda_kernel_equals_torch_reference_on_cuda_and_cpu():
    # compiled kernel vs the reference on the same GPU (same libdevice log: expected exact) and vs
    # the CPU reference (different log libraries: exact except counted rounding-midpoint values)
    dev = torch.device("cuda")
    uk = _units(64, seed=5)
    steps = torch.arange(64) % 20
    for V in (49_152, 128_256, 1_001):
        keys = torch.arange(V)
        got = nt.gumbel_fused(0, uk.to(dev), steps.to(dev), keys.to(dev))  # auto -> Triton on CUDA
        ref_cuda = noise.gumbel(0, uk.to(dev), steps.to(dev), keys.to(dev))
        assert torch.equal(got.view(torch.int32), ref_cuda.view(torch.int32))
        assert_same_noise(got.cpu(), 0, uk, steps, keys)
        logp = torch.log_softmax(torch.randn(64, V, device=dev), -1)
        tok, _ = nt.gumbel_argmax_fused(logp, 0, uk.to(dev), steps.to(dev), keys.to(dev))
        assert torch.equal(tok, torch.argmax(logp + ref_cuda, -1))


@needs_triton
@pytest.mark.parametrize("top_k, k", [(0, 0), (20, 3)])
def test_keyed_draw_fused_path_equals_the_reference_path(top_k, k, request):
    """engine.sampling.keyed's CUDA path (fused Gumbel-argmax, Gumbel values of the trace from
    noise.gumbel_at) against its reference path: the same tokens, probabilities and records."""
    if _in_fresh_interpreter(request):
        return
    from engine.sampling import keyed

    gen = torch.Generator().manual_seed(2)
    B, V = 5, 3001
    logits = torch.randn(B, V, generator=gen) * 3
    seeds, units, steps = (
        noise.seed_tensor([3, 2**64 - 1, 9, 4, 4]),
        _units(B, seed=2),
        torch.arange(B) * 2,
    )
    keys = torch.arange(V) * 5 + 1
    fused = keyed._draw_chunk(
        logits.to(DEV),
        seeds.to(DEV),
        units.to(DEV),
        steps.to(DEV),
        keys.to(DEV),
        0.8,
        top_k,
        1.0,
        k,
        fused=True,
    )
    ref = keyed._draw_chunk(logits, seeds, units, steps, keys, 0.8, top_k, 1.0, k, fused=False)
    _same_draw(fused, ref)


def _same_draw(got, want, probs_exact: bool | None = None) -> None:
    """Tokens, top ids and Gumbel values bit for bit; probabilities bit for bit where both come from
    the torch formula on CPU (``probs_exact``, default: on CPU), else to float32 rounding (torch's CUDA
    logsumexp sums in another order than its CPU one, and the numba CPU draw sums in float64)."""
    exact = DEV.type != "cuda" if probs_exact is None else probs_exact
    for name, a, b in zip(got._fields, got, want):
        assert (a is None) == (b is None), name
        if a is None:
            continue
        if not exact and name in ("probs", "top_probs"):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-8)
        else:
            assert torch.equal(a.cpu(), b), name


# ----------------------------------------------------------------------------- the single-read kernel
def _formula(
    x: torch.Tensor, seed, uk, steps, keys, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The product's formula in plain torch, on CPU: argmax(z + g) and exp(log_softmax(z)[token])."""
    from engine.sampling.gumbel import scale

    z = scale(x.cpu(), temperature)  # (B, V) float32 / T, IEEE division
    tok = torch.argmax(z + noise.gumbel(seed, uk, steps, keys), dim=-1)
    return tok, torch.log_softmax(z, -1).gather(1, tok[:, None]).squeeze(1).exp()


@needs_triton
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.filterwarnings(
    "ignore::RuntimeWarning"
)  # numpy in the interpreter: the -inf row's nan, on purpose
def test_single_read_kernel_equals_the_formula(temperature, dtype, request):
    if _in_fresh_interpreter(request):
        return
    # several row counts, V not a multiple of the block, strided rows (a view, no copy), -inf entries,
    # a row of -inf (token 0, as torch.argmax; its probability nan, as log_softmax's), a late winner
    gen = torch.Generator().manual_seed(5)
    V = 3001
    for B in (1, 6):
        big = (torch.randn(2 * B, 2 * V, generator=gen) * 3).to(dtype)
        x = big[::2, ::2]  # (B, V) strides (4 V, 2)
        x[0, 200:900] = float("-inf")
        x[-1, 2990] = 60.0
        if B > 1:
            x[1] = float("-inf")
        uk, steps, keys = _units(B, seed=B), torch.arange(B) * 7, torch.arange(V) * 3 + 1
        tok, prob = nt.gumbel_argmax_logits(
            x.to(DEV),
            9,
            uk.to(DEV),
            steps.to(DEV),
            keys.to(DEV),
            temperature,
            backend="triton",
            block=1024,
        )
        want_tok, want_prob = _formula(x, 9, uk, steps, keys, temperature)
        assert torch.equal(tok.cpu(), want_tok)
        torch.testing.assert_close(prob.cpu(), want_prob, rtol=1e-5, atol=1e-8, equal_nan=True)
        assert int(tok[-1]) == 2990 and (B == 1 or (int(tok[1]) == 0 and torch.isnan(prob[1])))
        # the torch path of the same function: the same tokens
        ref_tok, ref_prob = nt.gumbel_argmax_logits(x, 9, uk, steps, keys, temperature, backend="torch")
        assert torch.equal(ref_tok, want_tok)
        torch.testing.assert_close(ref_prob, want_prob, rtol=1e-5, atol=1e-8, equal_nan=True)


@needs_triton
def test_single_read_kernel_reads_the_selected_rows(request):
    if _in_fresh_interpreter(request):
        return
    # rows = a gathered selection of a larger batch, read in place: the draw of x[rows]
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(9, 2500, generator=gen) * 2
    rows = torch.tensor([7, 0, 3, 8])
    uk, keys = _units(4, seed=6), torch.arange(2500)
    tok, prob = nt.gumbel_argmax_logits(
        x.to(DEV), 1, uk.to(DEV), 4, keys.to(DEV), 0.9, rows=rows.to(DEV), backend="triton", block=512
    )
    want_tok, want_prob = _formula(x[rows], 1, uk, 4, keys, 0.9)
    assert torch.equal(tok.cpu(), want_tok)
    torch.testing.assert_close(prob.cpu(), want_prob, rtol=1e-5, atol=1e-8)


@needs_triton
@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_single_read_kernel_ties_and_a_case_by_hand(temperature, request):
    if _in_fresh_interpreter(request):
        return
    V = 3000
    uk, keys = _units(2, seed=8), torch.arange(V)
    g = noise.gumbel(4, uk, 0, keys)  # (2, V)
    # exact ties: z = -g at chosen ids (others -inf) makes every kept z + g exactly 0 -> the lowest
    # kept id wins, within a block (700 < 900) and across blocks (700 < 1500 < 2999)
    x = torch.full((2, V), float("-inf"))
    for b, ids in ((0, [900, 700, 1500, 2999]), (1, [2999, 1500])):
        x[b, ids] = -g[b, ids] * temperature  # exact: a power-of-two scaling, divided back by T
    tok, prob = nt.gumbel_argmax_logits(
        x.to(DEV), 4, uk.to(DEV), 0, keys.to(DEV), temperature, backend="triton", block=1024
    )
    assert tok.tolist() == [700, 1500]
    assert tok.tolist() == _formula(x, 4, uk, 0, keys, temperature)[0].tolist()
    # by hand: logits (0, ln 3, -inf, 0, ...) at T = 1 is D = (1/5, 3/5, 0, 1/5); at T = 0.5, z doubles:
    # D = (1/11, 9/11, 0, 1/11). The token is whichever of 0, 1, 3 has the largest z + g.
    x = torch.full((2, V), float("-inf"))
    x[:, [0, 3]] = 0.0
    x[:, 1] = float(np.log(3.0))
    z = x.double() / temperature
    want = torch.argmax((z + g.double()).nan_to_num(neginf=-1e300), dim=-1)
    p = {1.0: {0: 0.2, 1: 0.6, 3: 0.2}, 0.5: {0: 1 / 11, 1: 9 / 11, 3: 1 / 11}}[temperature]
    tok, prob = nt.gumbel_argmax_logits(
        x.to(DEV), 4, uk.to(DEV), 0, keys.to(DEV), temperature, backend="triton"
    )
    assert tok.tolist() == want.tolist()
    assert prob.cpu().tolist() == pytest.approx([p[int(t)] for t in want], rel=1e-6)


def _nonfinite_rows(V: int = 3001) -> torch.Tensor:
    """(9, V) logits whose rows hold NaN and +-inf where a kernel's block logic can get them wrong."""
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(9, V, generator=gen) * 3
    nan, inf = float("nan"), float("inf")
    x[0, 2500] = nan  # one NaN in a later block
    x[1, 5], x[1, 2000] = nan, nan  # two NaNs: the first wins (torch.argmax)
    x[2, 40], x[2, 2999] = inf, nan  # +inf first, NaN later: NaN still wins
    x[3, 1200], x[3, 2100] = inf, inf  # two +inf: the lowest id
    x[4, 700] = inf  # one +inf
    x[5] = -inf  # all -inf: id 0
    x[6, :1500] = -inf  # -inf on the first blocks, finite later
    x[7] = nan  # all NaN: id 0
    x[8, 1024] = -inf  # a plain row with one masked entry
    return x


@needs_triton
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy in the interpreter: nan and inf on purpose
def test_kernels_pick_the_formulas_token_on_nan_and_infinite_logits(temperature, request):
    """NaN and +-inf logits: both kernels give torch.argmax's token of z + g (a NaN wins, the first
    one; else the first +inf; a row of -inf gives 0), and the probability the formula gives (NaN
    where torch's log-softmax is NaN)."""
    if _in_fresh_interpreter(request):
        return
    x = _nonfinite_rows()
    B, V = x.shape
    uk, steps, keys = _units(B, seed=12), torch.arange(B), torch.arange(V) * 5 + 2
    want_tok, want_prob = _formula(x, 3, uk, steps, keys, temperature)
    assert (
        want_tok[:5].tolist() == [2500, 5, 2999, 1200, 700]
        and int(want_tok[5]) == 0
        and int(want_tok[7]) == 0
    )
    for block in (512, 1024):
        tok, prob = nt.gumbel_argmax_logits(
            x.to(DEV),
            3,
            uk.to(DEV),
            steps.to(DEV),
            keys.to(DEV),
            temperature,
            backend="triton",
            block=block,
        )
        assert tok.cpu().tolist() == want_tok.tolist(), block
        torch.testing.assert_close(prob.cpu(), want_prob, rtol=1e-5, atol=1e-8, equal_nan=True)
        from engine.sampling.gumbel import scale

        z = scale(x, temperature)
        ftok, gval = nt.gumbel_argmax_fused(
            z.to(DEV), 3, uk.to(DEV), steps.to(DEV), keys.to(DEV), backend="triton", block=block
        )
        assert ftok.cpu().tolist() == want_tok.tolist(), block
        g = noise.gumbel(3, uk, steps, keys)
        assert torch.equal(gval.cpu(), g.gather(1, want_tok[:, None]).squeeze(1))


def test_first_use_probe_has_nan_and_infinite_rows():
    """The first-use check samples rows with NaN, +inf and -inf entries (and a row of -inf), where a
    compiled kernel's max / argmax lowering may differ from the interpreter's."""
    from engine.sampling import kernel_check as kc

    for dtype in (torch.float32, torch.bfloat16):
        logits = kc._probe(torch.device("cpu"), dtype)[0].float()
        assert logits.isnan().any(1).sum() >= 2 and logits.isposinf().any(1).sum() >= 2
        assert bool(logits.isneginf().all(1).any()) and bool((logits.isfinite().all(1)).any())
        assert (logits.isnan() & logits.isposinf().any(1, keepdim=True)).any()  # NaN and +inf in one row


def test_single_read_refuses_bad_arguments():
    uk, keys = _units(2), torch.arange(10)
    for bad, word in (
        (torch.zeros(2, 9), "logits must be"),
        (torch.zeros(2, 10, dtype=torch.float64), "logits must be"),
    ):
        with pytest.raises(ValueError, match=word):
            nt.gumbel_argmax_logits(bad, 0, uk, 0, keys, 1.0)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        nt.gumbel_argmax_logits(torch.zeros(2, 10), 0, uk, 0, keys, 0.0)
    with pytest.raises(ValueError, match="rows must be"):
        nt.gumbel_argmax_logits(torch.zeros(2, 10), 0, uk, 0, keys, 1.0, rows=torch.tensor([0.0, 1.0]))


@needs_triton
def test_keyed_draw_takes_the_single_read_kernel_when_it_can(monkeypatch, request):
    """draw on 'CUDA' (here: the interpreter, by patching the device check): no top-k / top-p / trace
    -> the single-read kernel on the raw logits (gathered rows too); the same tokens as the CPU
    reference path, probabilities to float32 rounding; a trace or top-k -> the torch path."""
    if _in_fresh_interpreter(request):
        return
    from engine.sampling import keyed

    gen = torch.Generator().manual_seed(3)
    B, V = 6, 2049
    logits = (torch.randn(B, V, generator=gen) * 3).to(torch.bfloat16)
    seeds, units, steps = (
        noise.seed_tensor([3, 2**64 - 1, 9, 4, 4, 1]),
        _units(B, seed=3),
        torch.arange(B) * 2,
    )
    keys = torch.arange(V) * 5 + 1
    rows = torch.tensor([4, 1, 5])
    want = [
        keyed.draw(logits, seeds, units, steps, keys, 0.8),
        keyed.draw(logits, seeds[:3], units[:3], steps[:3], keys, 0.8, rows=rows),
    ]
    want_k = keyed.draw(logits, seeds, units, steps, keys, 0.8, top_k=30, trace_k=2)
    calls = []
    real = nt.gumbel_argmax_logits
    monkeypatch.setattr(nt, "gumbel_argmax_logits", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    monkeypatch.setattr(keyed, "_fused_available", lambda device: True)
    dev = [t.to(DEV) for t in (logits, seeds, units, steps, keys, rows)]
    got = [
        keyed.draw(*dev[:5], 0.8),
        keyed.draw(dev[0], dev[1][:3], dev[2][:3], dev[3][:3], dev[4], 0.8, rows=dev[5]),
    ]
    assert len(calls) == 2
    for d, w in zip(got, want):
        assert torch.equal(d.tokens.cpu(), w.tokens) and d.top_ids is None
        torch.testing.assert_close(d.probs.cpu(), w.probs, rtol=1e-5, atol=1e-8)
    got_k = keyed.draw(*dev[:5], 0.8, top_k=30, trace_k=2)  # masks and a trace: the torch path
    assert len(calls) == 2
    _same_draw(got_k, want_k, probs_exact=False)  # want_k: the numba CPU draw, its sum in float64


@needs_triton
def test_first_use_check_passes_the_kernels_and_refuses_a_wrong_one(monkeypatch, request):
    """engine.sampling.kernel_check: on the probe both kernels give the torch formula's tokens (here
    in the interpreter on DEV; on a GPU, compiled), so the check passes; a kernel that picks other
    tokens, or fails to compile, is refused with one warning naming it, and draw keeps the torch path."""
    if _in_fresh_interpreter(request):
        return
    from engine.sampling import kernel_check as kc

    assert kc._disagreement(DEV) is None
    real = nt.gumbel_argmax_logits

    def off_by_one(logits, *a, **kw):
        tok, p = real(logits, *a, **kw)
        return (tok + 1) % logits.shape[1], p

    monkeypatch.setattr(nt, "gumbel_argmax_logits", off_by_one)
    why = kc._disagreement(DEV)
    assert (
        why is not None
        and "gumbel_argmax_logits picked other tokens" in why
        and f"{kc.PROBE_ROWS} probe rows" in why
    )

    def broken(*a, **kw):
        raise RuntimeError("PTX lowering failed")

    monkeypatch.setattr(nt, "gumbel_argmax_fused", broken)
    why = kc._disagreement(DEV)
    assert why is not None and "failed" in why and "PTX lowering failed" in why
    kc.kernels_agree.cache_clear()
    with pytest.warns(RuntimeWarning, match="uses the torch path instead"):
        assert kc.kernels_agree(str(DEV)) is False
    kc.kernels_agree.cache_clear()


def test_kernel_hash_literals_are_the_references_constants():
    """The kernels write the splitmix64 constants and the token salt as literals (a Triton kernel reads
    no Python globals): they must be the reference's (noise._mix_int, noise._TOKEN_SALT's bits)."""
    import inspect
    import re

    src = inspect.getsource(nt)
    ref = inspect.getsource(noise._mix_int)
    literals = {int(h, 16) for h in re.findall(r"0x[0-9A-Fa-f]{16}", src)}
    assert {int(h, 16) for h in re.findall(r"0x[0-9A-Fa-f]{16}", ref)} <= literals
    assert int(noise._TOKEN_SALT) % 2**64 in literals


def test_every_entry_point_refuses_an_unknown_backend_the_same_way():
    uk, keys = _units(2), torch.arange(10)
    calls = [
        lambda: nt.gumbel_fused(0, uk, 0, keys, backend="cuda"),
        lambda: nt.gumbel_argmax_fused(torch.zeros(2, 10), 0, uk, 0, keys, backend="cuda"),
        lambda: nt.gumbel_argmax_logits(torch.zeros(2, 10), 0, uk, 0, keys, 0.7, backend="cuda"),
    ]
    for call in calls:
        with pytest.raises(
            ValueError, match="unknown noise backend 'cuda'; allowed: auto, triton, torch"
        ):
            call()
