"""engine.sampling.keyed.draw, the sampler both backends call: against engine.sampling.sample (two
implementations that must agree), independent of the chunking (bounded temporaries), and the
per-token noise gumbel_at against the (B, V) reference."""

from __future__ import annotations

import pytest
import torch

from engine.errors import UserError
from engine.sampling import keyed, noise
from engine.sampling.gumbel import masked_logits, sample


def _batch(B=13, V=301, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, V, generator=gen) * 3
    seeds = noise.seed_tensor([5, 2**63 + 11, 7] * (B // 3) + [5] * (B % 3))
    units = noise.unit_keys([(f"p{i}", i % 3) for i in range(B)])
    steps = torch.arange(B) % 5
    return logits, seeds, units, steps, torch.arange(V) * 7 + 3


@pytest.mark.parametrize("temperature, top_k, top_p, k", [(1.0, 0, 1.0, 0), (0.7, 5, 1.0, 3), (0.7, 0, 0.8, 4),
                                                          (1.3, 7, 0.9, 2), (0.0, 0, 1.0, 3), (0.0, 3, 0.5, 0)])
def test_draw_is_the_gumbel_max_sample_with_its_records(temperature, top_k, top_p, k):
    logits, seeds, units, steps, keys = _batch()
    d = keyed.draw(logits, seeds, units, steps, keys, temperature, top_k, top_p, trace_k=k)
    g = noise.gumbel(seeds, units, steps, keys) if temperature > 0 else None
    ref = sample(logits, g, temperature, top_k, top_p)
    assert torch.equal(d.tokens, ref.tokens)
    # D[token] = exp(z[token] - logsumexp z): the same bits as that formula, and log D's to float32 rounding
    z = masked_logits(logits, temperature, top_k, top_p)
    lse = torch.logsumexp(z, -1)
    assert torch.equal(d.probs, (z.gather(1, ref.tokens[:, None]).squeeze(1) - lse).exp())
    torch.testing.assert_close(d.probs, ref.logprobs.gather(1, ref.tokens[:, None]).squeeze(1).exp(),
                               rtol=2e-6, atol=1e-9)
    if not k:
        assert d.top_ids is None and d.top_gumbels is None
        return
    tv, ti = torch.topk(ref.logprobs, k, dim=-1)
    assert torch.equal(d.top_ids, ti)
    torch.testing.assert_close(d.top_probs, tv.exp(), rtol=2e-6, atol=1e-9)
    assert torch.equal(d.top_probs[:, 0] == d.probs, d.tokens == ti[:, 0])  # one formula for both records
    if temperature == 0:
        assert d.top_gumbels is None
    else:
        assert torch.equal(d.top_gumbels, g.gather(1, ti))


@pytest.mark.parametrize("budget", [1, 2 * 301 * 8, 10**9])
def test_draw_does_not_depend_on_the_chunking(budget):
    """Rows drawn one at a time, a few at a time and all at once: identical bits."""
    logits, seeds, units, steps, keys = _batch(B=11)
    want = keyed.draw(logits, seeds, units, steps, keys, 0.9, 0, 0.95, trace_k=3)
    got = keyed.draw(logits, seeds, units, steps, keys, 0.9, 0, 0.95, trace_k=3, budget=budget)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_rows_per_chunk_keeps_the_budget():
    V = 128_256
    for top_p, fused in [(1.0, True), (1.0, False), (0.9, False)]:
        n = keyed.rows_per_chunk(V, top_p, fused)
        assert n * keyed.bytes_per_row(V, top_p, fused) <= keyed.TEMP_BUDGET_BYTES
        assert (n + 1) * keyed.bytes_per_row(V, top_p, fused) > keyed.TEMP_BUDGET_BYTES
    assert keyed.rows_per_chunk(V, budget=1) == 1
    # the single-read kernel holds no (R, V) temporary: one chunk takes any batch
    assert keyed.bytes_per_row(V, 1.0, True, single_read=True) == 0
    assert keyed.rows_per_chunk(V, fused=True, single_read=True) == keyed.TEMP_BUDGET_BYTES


def test_single_read_is_taken_only_without_masks_trace_or_greedy(monkeypatch):
    x = torch.zeros(4, 50)
    assert not keyed.single_read(x, 0.7, 0, 1.0, 0)  # CPU: never (the kernel would run interpreted)
    monkeypatch.setattr(keyed, "_fused_available", lambda device: True)
    assert keyed.single_read(x, 0.7, 0, 1.0, 0) and keyed.single_read(x.half(), 1.0, 50, 1.0, 0)  # top-k >= V: no mask
    for t, top_k, top_p, k in ((0.0, 0, 1.0, 0), (0.7, 49, 1.0, 0), (0.7, 0, 0.9, 0), (0.7, 0, 1.0, 1)):
        assert not keyed.single_read(x, t, top_k, top_p, k)
    assert not keyed.single_read(x.double(), 0.7, 0, 1.0, 0)  # float64 logits: the torch path


def test_gumbel_at_is_the_reference_noise_at_those_tokens():
    _, seeds, units, steps, keys = _batch(B=9, V=1000)
    g = noise.gumbel(seeds, units, steps, keys)  # (B, V)
    ids = torch.randint(0, 1000, (9, 6), generator=torch.Generator().manual_seed(1))
    assert torch.equal(noise.gumbel_at(seeds, units, steps, keys[ids]), g.gather(1, ids))


def test_keyed_noise_on_cpu_is_the_reference():
    _, seeds, units, steps, keys = _batch(B=4, V=100)
    assert torch.equal(keyed.keyed_noise(seeds, units, steps, keys), noise.gumbel(seeds, units, steps, keys))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_draw_does_not_depend_on_the_cpu_threads(monkeypatch, threads):
    """One intra-op thread (the CPU default) or two: identical bits; torch's own count restored.
    Rows of 20,000 tokens so that torch's elementwise passes really run in parallel (> its grain)."""
    logits, seeds, units, steps, keys = _batch(B=6, V=20_000, seed=3)
    g = noise.gumbel(seeds, units, steps, keys)
    ref = sample(logits, g, 0.8, 0, 0.9)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setenv(keyed.THREADS_ENV, threads)
        d = keyed.draw(logits, seeds, units, steps, keys, 0.8, 0, 0.9, trace_k=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert torch.equal(d.tokens, ref.tokens)
    assert torch.equal(d.top_gumbels, g.gather(1, d.top_ids))


def test_cpu_threads_refuses_a_bad_setting(monkeypatch):
    monkeypatch.setenv(keyed.THREADS_ENV, "0")
    with pytest.raises(UserError, match="COUPLED_EVAL_NOISE_THREADS must be an integer >= 1"):
        keyed.cpu_draw_threads()
    monkeypatch.delenv(keyed.THREADS_ENV)
    assert keyed.cpu_draw_threads() == 1
