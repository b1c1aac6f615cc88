"""Keyed Gumbel noise: purity, independence from batching / vocabulary width, distribution, keys."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import stats

from engine.errors import UserError
from engine.sampling import noise
from engine.testing import tiny_tokenizer


def test_mix_tensor_agrees_with_python_int_reference():
    # two implementations: torch int64 wrap-around + masked shifts vs Python's unbounded ints
    rng = np.random.default_rng(0)
    vals = rng.integers(-(2**63), 2**63 - 1, size=200, dtype=np.int64).tolist() + [
        0,
        -1,
        -(2**63),
        2**63 - 1,
    ]
    got = noise._mix(torch.tensor(vals, dtype=torch.int64)).tolist()
    want = [noise.as_int64(noise._mix_int(v)) for v in vals]
    assert got == want


def test_noise_bit_identical_across_calls_batches_and_order():
    keys = noise.unit_keys([(f"q{i}", r) for i in range(5) for r in range(3)])  # (15,)
    tk = torch.arange(300)
    full = noise.gumbel(11, keys, 4, tk)  # (15, 300)
    assert torch.equal(full, noise.gumbel(11, keys, 4, tk))
    perm = torch.randperm(15, generator=torch.Generator().manual_seed(0))
    assert torch.equal(noise.gumbel(11, keys[perm], 4, tk), full[perm])
    for b in (0, 7, 14):  # alone (batch of one) == its row in the batch
        assert torch.equal(noise.gumbel(11, keys[b : b + 1], 4, tk)[0], full[b])
    # per-row step tensor == scalar step; per-row seed tensor == scalar seed (two code paths)
    assert torch.equal(noise.gumbel(11, keys, torch.full((15,), 4), tk), full)
    assert torch.equal(noise.gumbel(torch.full((15,), 11), keys, 4, tk), full)
    big = 2**63 + 12345  # seeds >= 2^63 travel as the int64 with the same bits
    assert torch.equal(
        noise.gumbel(torch.full((15,), noise.as_int64(big)), keys, 4, tk), noise.gumbel(big, keys, 4, tk)
    )


def test_noise_chunked_on_a_real_vocabulary_equals_a_scalar_reference():
    """A 49,152-token vocabulary (SmolLM2) is computed in column chunks whose width depends on the
    batch size: every value equals the definition evaluated on Python ints, one value at a time."""
    import math

    M = (1 << 64) - 1
    V, units = 49_152, [(f"q{i}", i % 3) for i in range(32)]
    keys = noise.unit_keys(units)
    tk = torch.arange(V)
    steps = torch.arange(32) % 5
    g = noise.gumbel(7, keys, steps, tk)  # (32, V): chunks of 2,048 columns
    for b in (0, 31):
        assert torch.equal(noise.gumbel(7, keys[b : b + 1], steps[b : b + 1], tk)[0], g[b])  # one chunk
    mix = noise._mix_int
    rng = np.random.default_rng(0)
    for b, v in zip(rng.integers(0, 32, 40).tolist(), rng.integers(0, V, 40).tolist()):
        row = mix((mix((mix(7) + int(keys[b])) & M) + int(steps[b])) & M)
        tok = mix((v + noise._TOKEN_SALT) & M)
        u = min(max((mix((row + tok) & M) >> 11) * 2.0**-53, np.finfo(np.float64).tiny), 1 - 2.0**-53)
        want = np.float32(-math.log(-math.log(u)))
        # libm vs torch's vectorised float64 log may differ in the last float64 bit: 1 float32 ulp
        assert abs(g[b, v].item() - want) <= np.spacing(abs(want))


def test_noise_independent_of_vocabulary_width_for_shared_ids():
    keys = noise.unit_keys([("a", 0), ("b", 1)])
    wide = noise.gumbel(3, keys, 2, torch.arange(1000))
    narrow = noise.gumbel(3, keys, 2, torch.arange(600))
    assert torch.equal(wide[:, :600], narrow)


def test_noise_changes_with_every_key_component():
    tk = torch.arange(500)
    base = noise.gumbel(1, noise.unit_keys([("p", 0)]), 0, tk)
    for other in (
        noise.gumbel(2, noise.unit_keys([("p", 0)]), 0, tk),
        noise.gumbel(1, noise.unit_keys([("p", 1)]), 0, tk),
        noise.gumbel(1, noise.unit_keys([("p2", 0)]), 0, tk),
        noise.gumbel(1, noise.unit_keys([("p", 0)]), 1, tk),
    ):
        assert (other != base).float().mean() > 0.99


def test_noise_is_standard_gumbel_and_uncorrelated():
    g = noise.gumbel(123, noise.unit_keys([(f"u{i}", 0) for i in range(40)]), 0, torch.arange(1000))
    assert g.dtype == torch.float32 and torch.isfinite(g).all()
    x = g.double().numpy()
    ks = stats.kstest(x.ravel(), stats.gumbel_r.cdf)
    assert ks.pvalue > 0.001
    # neighbouring tokens, rows and steps are uncorrelated (|r| within ~5 standard errors)
    g2 = (
        noise.gumbel(123, noise.unit_keys([(f"u{i}", 0) for i in range(40)]), 1, torch.arange(1000))
        .double()
        .numpy()
    )
    for a, b in ((x[:, :-1], x[:, 1:]), (x[:-1], x[1:]), (x, g2)):
        r = np.corrcoef(a.ravel(), b.ravel())[0, 1]
        assert abs(r) < 5 / np.sqrt(a.size)


def test_unit_key_is_stable_across_processes():
    # Python's hash() is salted per process; the blake2b key must not be
    code = "from engine.sampling import noise; print(noise.unit_key('demo/007', 3), noise.independent_seed(5, 'm'))"
    outs = set()
    for salt in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": salt}
        outs.add(
            subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                env=env,
                cwd=os.path.dirname(os.path.dirname(__file__)),
                check=True,
            ).stdout.strip()
        )
    assert outs == {f"{noise.unit_key('demo/007', 3)} {noise.independent_seed(5, 'm')}"}


def test_independent_seed_distinct_per_model_and_in_range():
    seeds = {noise.independent_seed(7, f"model-{i}") for i in range(50)}
    assert len(seeds) == 50 and all(0 <= s < 2**63 for s in seeds)
    assert noise.independent_seed(7, "a") != noise.independent_seed(8, "a")


def test_bad_keys_raise_user_error():
    with pytest.raises(UserError, match="seed"):
        noise.gumbel(-1, torch.zeros(1, dtype=torch.int64), 0, torch.arange(3))
    with pytest.raises(UserError, match="repeat"):
        noise.unit_key("p", -2)
    with pytest.raises(UserError, match="token_id, bytes"):
        noise.token_keys_for(tiny_tokenizer(), "ids")


def test_byte_keys_same_string_same_noise_across_tokenizers():
    ta, tb = tiny_tokenizer(), tiny_tokenizer(vocab_perm_seed=5)
    ka, kb = noise.token_keys_for(ta, "bytes"), noise.token_keys_for(tb, "bytes")
    assert len(set(ka.tolist())) == len(ta)  # distinct strings -> distinct keys
    va, vb = ta.get_vocab(), tb.get_vocab()
    assert any(va[s] != vb[s] for s in va)  # the orders really differ
    ia = torch.tensor([va[s] for s in va])
    ib = torch.tensor([vb[s] for s in va])
    assert torch.equal(ka[ia], kb[ib])
    keys = noise.unit_keys([("p", 0), ("p", 1)])
    ga, gb = noise.gumbel(9, keys, 3, ka), noise.gumbel(9, keys, 3, kb)
    assert torch.equal(ga[:, ia], gb[:, ib])


def test_byte_keys_padding_ids_and_token_id_mode():
    tok = tiny_tokenizer()
    k = noise.token_keys_for(tok, "bytes", vocab_size=len(tok) + 4)
    assert k.shape == (len(tok) + 4,) and len(set(k.tolist())) == len(tok) + 4
    assert torch.equal(noise.token_keys_for(tok, "token_id", vocab_size=120), torch.arange(120))


def test_byte_level_decoder_is_a_bijection_onto_bytes():
    dec = noise._byte_decoder()
    assert sorted(dec.values()) == list(range(256))
    assert dec["Ġ"] == ord(" ") and dec["Ċ"] == ord("\n") and dec["a"] == ord("a")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (no GPU on this machine)")
def test_noise_same_on_cuda_and_cpu():
    keys = noise.unit_keys([(f"q{i}", 0) for i in range(4)])
    cpu = noise.gumbel(5, keys, 2, torch.arange(5000))
    gpu = noise.gumbel(5, keys.cuda(), 2, torch.arange(5000, device="cuda"))
    assert torch.equal(cpu, gpu.cpu())
