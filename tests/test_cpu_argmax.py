"""engine.sampling.cpu_argmax (the numba Gumbel-argmax with exact pruning) against the torch reference
``torch.argmax(z + noise.gumbel(...))``: the same tokens on many seeded cases, an exact tiny case
worked by hand, and the property that makes it fast (the logs are computed for few tokens)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.sampling import noise
from engine.sampling.cpu_argmax import (
    MAX_CANDIDATES,
    gumbel_argmax_cpu,
    gumbel_argmax_detail,
    gumbel_argmax_lse,
    numba_available,
)
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(
    not numba_available(), reason="numba is not importable in this environment"
)


def _reference(logits, seeds, units, steps, keys, T):
    z = logits.float()
    if T != 1.0:
        z = z / T
    return torch.argmax(z + noise.gumbel(seeds, units, steps, keys), dim=-1)


def _rows(R, seed):
    seeds = noise.seed_tensor([(seed * 7919 + i * 13) % (1 << 64) for i in range(R)])
    units = noise.unit_keys([(f"p{seed}-{i}", i % 3) for i in range(R)])
    steps = torch.arange(R, dtype=torch.int64) % 5 + seed
    return seeds, units, steps


def _case(R, V, scale, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(R, V, generator=gen) * scale).to(dtype)
    return (logits, *_rows(R, seed), torch.arange(V, dtype=torch.int64) * 3 + 11)


@pytest.mark.parametrize("T", [1.0, 0.7])
@pytest.mark.parametrize("scale", [0.05, 0.5, 2.0, 8.0])
def test_same_tokens_as_the_reference_on_seeded_cases(T, scale):
    for seed in range(4):
        R, V = [(1, 2), (7, 301), (64, 1000), (33, 4097)][seed]
        args = _case(R, V, scale, seed)
        d = gumbel_argmax_detail(*args, T)
        assert torch.equal(d.tokens, _reference(*args, T)), (T, scale, seed)
        assert not bool(d.fallback.any())


@pytest.mark.parametrize("T", [1.0, 0.5])
def test_float32_near_ties_are_decided_as_the_reference_decides_them(T, monkeypatch):
    """The case ``_choose`` exists for: two tokens whose float32 scores z + g differ by 0-3 ulps (or
    tie exactly), everything else far below. The kernel's float64 scores cannot order them; the
    candidates within its margin are decided in float32 as torch.argmax does (the higher sum, the
    lower id on a tie). The recorded candidate counts show that the float32 decision was needed."""
    from engine.sampling import cpu_argmax

    R, V = 96, 2000
    seeds, units, steps = _rows(R, 21)
    keys = torch.arange(V, dtype=torch.int64) * 5 + 1
    g = noise.gumbel(seeds, units, steps, keys)  # (R, V) float32, the reference's noise
    gen = torch.Generator().manual_seed(21)
    z = torch.randn(R, V, generator=gen) * 0.5 - 30.0  # (R, V) far below the two contenders
    pair = torch.stack(
        [torch.randperm(V, generator=gen)[:2] for _ in range(R)]
    )  # (R, 2) either order of ids
    rows = torch.arange(R)
    c = 5.0 + torch.rand(R, generator=gen) * 4
    za = c - g[rows, pair[:, 0]]
    zb = c - g[rows, pair[:, 1]]
    for _ in range(
        3
    ):  # move the second contender 0-3 float32 steps up or down (rows cycle through the offsets)
        step = (rows % 7 - 3).sign() * (rows % 7 - 3).abs().gt(_).float()
        zb = torch.where(
            step > 0,
            torch.nextafter(zb, torch.tensor(math.inf)),
            torch.where(step < 0, torch.nextafter(zb, torch.tensor(-math.inf)), zb),
        )
    z[rows, pair[:, 0]], z[rows, pair[:, 1]] = za, zb
    logits = z * T  # exact (T a power of two): z = logits / T again
    s = z + g  # the reference's float32 scores
    gap = (
        (s[rows, pair[:, 1]] - s[rows, pair[:, 0]]).abs()
        / torch.finfo(torch.float32).eps
        / s[rows, pair[:, 0]]
    )
    assert (
        int((gap == 0).sum()) >= 5 and int((gap > 0).sum()) >= 20 and float(gap.max()) < 16
    )  # ties and ulps

    counts = []
    real = cpu_argmax._choose

    def spy(x, temperature, cand, n, *a):
        counts.append(n.clone())
        return real(x, temperature, cand, n, *a)

    monkeypatch.setattr(cpu_argmax, "_choose", spy)
    want = _reference(logits, seeds, units, steps, keys, T)
    got = gumbel_argmax_detail(logits, seeds, units, steps, keys, T)
    assert torch.equal(got.tokens, want) and not bool(got.fallback.any())
    assert set(want.tolist()) <= set(pair.flatten().tolist())
    n = torch.cat(counts)
    assert int((n >= 2).sum()) >= R // 2  # most rows went to the float32 decision with both contenders
    # the lower id wins exact ties, whichever position it has in the pair
    tied = (s[rows, pair[:, 0]] == s[rows, pair[:, 1]]).nonzero().squeeze(1)
    assert torch.equal(got.tokens[tied], pair[tied].min(1).values)


@pytest.mark.parametrize("T", [1.0, 0.7])
def test_nan_and_infinite_logits_give_the_references_token(T):
    """NaN and +-inf logits: the numba path's tokens are torch.argmax's of z + g (the first NaN, else
    the first +inf; a row of -inf gives 0), and keyed.draw's probabilities are the formula's (NaN
    where log-softmax is NaN)."""
    from engine.sampling import keyed
    from engine.sampling.gumbel import masked_logits

    nan, inf = math.nan, math.inf
    logits, seeds, units, steps, keys = _case(9, 3001, 3.0, 12)
    logits[0, 2500] = nan
    logits[1, 5], logits[1, 2000] = nan, nan
    logits[2, 40], logits[2, 2999] = inf, nan
    logits[3, 1200], logits[3, 2100] = inf, inf
    logits[4, 700] = inf
    logits[5] = -inf
    logits[6, :1500] = -inf
    logits[7] = nan
    logits[8, 1024] = -inf
    want = _reference(logits, seeds, units, steps, keys, T)
    assert want[:5].tolist() == [2500, 5, 2999, 1200, 700] and int(want[5]) == 0 and int(want[7]) == 0
    got = gumbel_argmax_detail(logits, seeds, units, steps, keys, T)
    assert torch.equal(got.tokens, want)
    assert got.fallback.tolist() == [True] * 6 + [False, True, False]  # rows without a finite maximum
    d = keyed.draw(logits, seeds, units, steps, keys, T)
    z = masked_logits(logits, T)
    assert torch.equal(d.tokens, want)
    torch.testing.assert_close(
        d.probs,
        torch.log_softmax(z, -1).gather(1, want[:, None]).squeeze(1).exp(),
        rtol=2e-6,
        atol=1e-9,
        equal_nan=True,
    )


def test_the_kernels_float32_exp_is_within_1e7_of_exp():
    """exp_sums on one-token rows is the kernel's exp itself, compiled as the sum uses it (``reassoc``):
    relative error < 1e-7 on (-87, 0] (float32's own rounding is 6e-8), 0 from -87 down and at -inf."""
    import numpy as np

    from engine.sampling.cpu_argmax import _kernels

    d = np.concatenate(
        [np.linspace(-87.0, 0.0, 400_001), [-1e-30, -87.0, -87.01, -100.0, -math.inf]]
    ).astype(np.float32)
    out = np.empty(d.size)
    _kernels().exp_sums(d, 1, 1, np.float32(1.0), np.zeros(d.size, np.float32), out)
    ok = d > -87.0
    rel = np.abs(out[ok] / np.exp(d[ok].astype(np.float64)) - 1)
    assert rel.max() < 1e-7, rel.max()
    assert out[0] == 0.0 and out[-4:].tolist() == [0.0, 0.0, 0.0, 0.0]
    # a row with zmax that is not finite: nan (the caller gives such rows torch's own logsumexp)
    _kernels().exp_sums(
        d[:2], 1, 1, np.float32(1.0), np.array([math.inf, math.nan], np.float32), out[:2]
    )
    assert np.isnan(out[:2]).all()


@pytest.mark.parametrize("T", [1.0, 0.7])
def test_lse_is_logsumexp_within_2e7_and_the_tokens_are_the_references(T):
    """gumbel_argmax_lse: the reference's tokens and logsumexp(z) within 2e-7 nats of its float64 value
    (torch's float32 logsumexp is only within ~1e-6 at |lse| ~ 10), on flat and peaked logits, strided
    and bfloat16 rows, masked (-inf) entries; rows without a finite maximum get torch's own value."""
    from engine.sampling.gumbel import scale

    cases = [_case(64, 4097, sc, seed) for seed, sc in enumerate((0.05, 0.5, 3.0, 8.0))]
    wide = _case(9, 6000, 2.0, 7)
    cases.append((wide[0][:, 500:4500], *wide[1:4], wide[4][500:4500]))  # strided rows
    cases.append(_case(9, 3001, 3.0, 8, dtype=torch.bfloat16))
    masked = _case(9, 3001, 3.0, 9)
    masked[0][:, ::3] = -math.inf
    masked[0][4, 7] = math.inf
    masked[0][5] = -math.inf
    cases.append(masked)
    for args in cases:
        tokens, lse = gumbel_argmax_lse(*args, T)
        assert torch.equal(tokens, _reference(*args, T))
        z = scale(args[0], T)
        exact = torch.logsumexp(z.double(), -1)
        fin = torch.isfinite(z.amax(1))
        assert float((lse[fin] - exact[fin]).abs().max()) <= 2e-7
        assert torch.equal(lse[~fin], torch.logsumexp(z[~fin], -1).double())  # inf, -inf as torch says


def test_a_full_vocabulary_batch_and_the_fraction_of_tokens_evaluated():
    """The property that makes it fast: on near-uniform logits (a random-init model: every token is
    close to the maximum, the worst case for pruning) and on peaked ones, the float64 logs run for a
    small fraction of the 49,152 tokens."""
    for scale, T in [(0.5, 0.7), (5.0, 1.0)]:
        args = _case(64, 49152, scale, 5)
        d = gumbel_argmax_detail(*args, T)
        assert torch.equal(d.tokens, _reference(*args, T))
        assert int(d.evaluated.min()) >= 1
        assert float(d.evaluated.float().mean()) < 100, d.evaluated  # of 49,152 (measured: ~5-20)


def test_bfloat16_logits_strided_rows_and_ties_in_z():
    gen = torch.Generator().manual_seed(3)
    wide = torch.randn(20, 700, generator=gen)  # (20, 700): row stride 700, the view keeps 611 columns
    view = wide[::2, 5:616]  # (10, 611) strided rows, unit column stride
    args = (view, *_rows(10, 3), torch.arange(611, dtype=torch.int64))
    for T in (1.0, 0.7):
        assert torch.equal(gumbel_argmax_cpu(*args, T), _reference(*args, T))
        bf = (view.to(torch.bfloat16), *args[1:])
        assert torch.equal(gumbel_argmax_cpu(*bf, T), _reference(*bf, T))
    cols = wide[:4, ::2]  # (4, 350) non-unit column stride: copied
    c_args = (cols, *_rows(4, 4), torch.arange(350, dtype=torch.int64))
    assert torch.equal(gumbel_argmax_cpu(*c_args, 0.7), _reference(*c_args, 0.7))
    ties = torch.randint(0, 3, (16, 999), generator=gen).float()  # (16, 999) many exact ties in z
    t_args = (ties, *_rows(16, 5), torch.arange(999, dtype=torch.int64))
    assert torch.equal(gumbel_argmax_cpu(*t_args, 1.0), _reference(*t_args, 1.0))


def test_masked_entries_never_win_and_a_row_of_minus_inf_is_zero():
    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(6, 257, generator=gen) * 2  # (6, 257)
    logits[0, :] = float("-inf")  # all masked -> 0, as torch.argmax
    logits[1, 1:] = float("-inf")  # only token 0 left
    logits[2, :256] = float("-inf")  # only the last token left
    logits[3, ::2] = float("-inf")  # every other token masked
    logits[4, :] = 0.0
    logits[4, 100] = 30.0  # one token far above: its noise cannot be beaten
    args = (logits, *_rows(6, 9), torch.arange(257, dtype=torch.int64))
    d = gumbel_argmax_detail(*args, 0.7)
    assert torch.equal(d.tokens, _reference(*args, 0.7))
    assert d.tokens[:3].tolist() == [0, 0, 256] and int(d.tokens[3]) % 2 == 1 and int(d.tokens[4]) == 100
    assert d.fallback.tolist() == [
        True,
        False,
        False,
        False,
        False,
        False,
    ]  # no finite max: the reference


def test_an_exact_tiny_case_by_hand():
    """Two tokens, T = 1, noise computed from the definition with Python integers and math.log."""
    M = (1 << 64) - 1

    def mix(x):
        x = (x + 0x9E3779B97F4A7C15) & M
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M
        return x ^ (x >> 31)

    seed, unit, step, keys = 42, 7, 3, [0, 1]
    row = mix((mix((mix(seed) + unit) & M) + step) & M)
    g = [
        -math.log(-math.log((mix((row + mix((k + 0xD6E8FEB86659FD93) & M)) & M) >> 11) * 2.0**-53))
        for k in keys
    ]
    z0 = 0.0
    for z1, expect in ((g[0] - g[1] - 0.01, 0), (g[0] - g[1] + 0.01, 1)):  # token 1 just below / above
        logits = torch.tensor([[z0, z1]], dtype=torch.float64).float()
        tok = gumbel_argmax_cpu(
            logits,
            torch.tensor([seed]),
            torch.tensor([unit]),
            torch.tensor([step]),
            torch.tensor(keys),
            1.0,
        )
        assert tok.tolist() == [expect]


def test_duplicate_keys_with_equal_logits_fall_back_to_the_reference():
    """Pathological exact ties (every token has the same key and logit): more than MAX_CANDIDATES
    candidates, so the row is drawn by the reference (lowest id), and the other rows are not."""
    V = MAX_CANDIDATES * 3
    logits = torch.zeros(2, V)
    logits[1] = torch.arange(V, dtype=torch.float32) * 0.1
    keys = torch.full((V,), 5, dtype=torch.int64)
    args = (logits, *_rows(2, 1), keys)
    d = gumbel_argmax_detail(*args, 1.0)
    assert d.fallback.tolist() == [True, False]
    assert torch.equal(d.tokens, _reference(*args, 1.0)) and d.tokens.tolist() == [0, V - 1]


def test_bad_arguments_are_named():
    args = _case(2, 10, 1.0, 0)
    with pytest.raises(ValueError, match="temperature"):
        gumbel_argmax_cpu(*args, 0.0)
    with pytest.raises(ValueError, match="token_keys"):
        gumbel_argmax_cpu(*args[:4], torch.arange(9), 1.0)
    with pytest.raises(ValueError, match="seeds"):
        gumbel_argmax_cpu(args[0], args[1].int(), *args[2:], 1.0)
    assert gumbel_argmax_cpu(args[0][:0], *(a[:0] for a in args[1:4]), args[4], 1.0).shape == (0,)


@pytest.mark.slow  # compiles the kernels in a fresh interpreter
def test_a_read_only_install_compiles_into_a_temporary_cache(tmp_path):
    """No writable cache folder anywhere (the package, $NUMBA_CACHE_DIR, the user's): numba refuses
    ``cache=True`` at import; the module then caches in a fresh temporary folder and still draws the
    reference's tokens. (Root ignores file modes, so the read-only folders are simulated.)"""
    code = """
import numba.core.caching as c, tempfile, torch
real = c._CacheLocator.ensure_cache_path
def ensure(self):
    if not self.get_cache_path().startswith(tempfile.gettempdir()):
        raise OSError("read-only")
    real(self)
c._CacheLocator.ensure_cache_path = ensure
import numba
from engine.sampling import cpu_argmax
from tests.test_cpu_argmax import _case, _reference
args = _case(3, 50, 1.0, 2)
assert torch.equal(cpu_argmax.gumbel_argmax_cpu(*args, 0.7), _reference(*args, 0.7))
print(numba.config.CACHE_DIR)
"""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(tmp_path / "home")  # the per-user cache folder: refused by the simulation
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    cache = out.stdout.strip().splitlines()[-1]
    assert cache.startswith(str(tmp_path / "tmp")) and any(
        p.suffix == ".nbi" for p in Path(cache).rglob("*")
    )


def test_numba_modules_survive_the_module_scan_of_a_vllm_engine_start():
    """vLLM 0.32 starts a worker by scanning every loaded module's globals: ``vars(value).get("kernel")``
    for each value with a ``__dict__`` (vllm/triton_utils/dispatcher.py). llvmlite's ``ffi.lib`` broke
    that scan (a second engine in the process failed to start once numba was imported); the same scan
    over numba's and llvmlite's modules runs clean."""
    assert numba_available()
    from engine.sampling.cpu_argmax import _kernels

    _kernels()
    scanned = 0
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in ("numba", "llvmlite", "engine"):
            continue
        for value in list(getattr(module, "__dict__", {}).values()):
            if hasattr(value, "__dict__"):
                vars(value).get("kernel")
                scanned += 1
    assert scanned > 100
