"""engine.sampling.keyed.draw, the sampler both backends call: against engine.sampling.sample (two
implementations that must agree), independent of the chunking (bounded temporaries), and the
per-token noise gumbel_at against the (B, V) reference."""

from __future__ import annotations

import os

import pytest
import torch

from engine.errors import UserError
from engine.sampling import keyed, noise
from engine.sampling.gumbel import masked_logits, sample


def _numba_draw(temperature: float) -> bool:
    """Whether keyed.draw takes the numba CPU path here (T > 0 with numba importable)."""
    from engine.sampling.cpu_argmax import numba_available

    return temperature > 0 and numba_available()


def _assert_probs(probs, z, tokens, numba: bool) -> None:
    """D[token] = exp(z[token] - logsumexp z): on the torch path the bits of that float32 formula; on
    the numba path its float64 value rounded once (within 3e-7 of the exact value: closer than torch's
    own float32 formula, and not its bits, since the sum runs in another order)."""
    if not numba:
        assert torch.equal(
            probs, (z.gather(1, tokens[:, None]).squeeze(1) - torch.logsumexp(z, -1)).exp()
        )
        return
    exact = (z.double().gather(1, tokens[:, None]).squeeze(1) - torch.logsumexp(z.double(), -1)).exp()
    torch.testing.assert_close(probs.double(), exact, rtol=3e-7, atol=0)


def _batch(B=13, V=301, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, V, generator=gen) * 3
    seeds = noise.seed_tensor([5, 2**63 + 11, 7] * (B // 3) + [5] * (B % 3))
    units = noise.unit_keys([(f"p{i}", i % 3) for i in range(B)])
    steps = torch.arange(B) % 5
    return logits, seeds, units, steps, torch.arange(V) * 7 + 3


@pytest.mark.parametrize(
    "temperature, top_k, top_p, k",
    [
        (1.0, 0, 1.0, 0),
        (0.7, 5, 1.0, 3),
        (0.7, 0, 0.8, 4),
        (1.3, 7, 0.9, 2),
        (0.0, 0, 1.0, 3),
        (0.0, 3, 0.5, 0),
    ],
)
def test_draw_is_the_gumbel_max_sample_with_its_records(temperature, top_k, top_p, k):
    logits, seeds, units, steps, keys = _batch()
    d = keyed.draw(logits, seeds, units, steps, keys, temperature, top_k, top_p, trace_k=k)
    g = noise.gumbel(seeds, units, steps, keys) if temperature > 0 else None
    ref = sample(logits, g, temperature, top_k, top_p)
    assert torch.equal(d.tokens, ref.tokens)
    # D[token] = exp(z[token] - logsumexp z) (_assert_probs), and log D's to float32 rounding
    z = masked_logits(logits, temperature, top_k, top_p)
    _assert_probs(d.probs, z, ref.tokens, _numba_draw(temperature))
    torch.testing.assert_close(
        d.probs, ref.logprobs.gather(1, ref.tokens[:, None]).squeeze(1).exp(), rtol=2e-6, atol=1e-9
    )
    if not k:
        assert d.top_ids is None and d.top_gumbels is None
        return
    tv, ti = torch.topk(ref.logprobs, k, dim=-1)
    assert torch.equal(d.top_ids, ti)
    torch.testing.assert_close(d.top_probs, tv.exp(), rtol=2e-6, atol=1e-9)
    assert torch.equal(
        d.top_probs[:, 0] == d.probs, d.tokens == ti[:, 0]
    )  # one formula for both records
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


_PEAK_SCRIPT = r"""
import torch
from engine.sampling import keyed, noise
R, V = 96, 100_000
x = torch.randn(R, V, generator=torch.Generator().manual_seed(0))
seeds, units, steps = noise.seed_tensor([3] * R), torch.arange(R), torch.zeros(R, dtype=torch.int64)
keys = torch.arange(V)
numba_draw = keyed._cpu_argmax_available
def kib(field):
    return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1])
def peak(tag, top_p, budget, trace_k):
    open("/proc/self/clear_refs", "w").write("5")  # reset the peak resident size (VmHWM) to the current
    base = kib("VmRSS")
    keyed.draw(x, seeds, units, steps, keys, 0.7, 0, top_p, trace_k=trace_k, budget=budget)
    print(tag, top_p, budget, (kib("VmHWM") - base) * 1024)
for path in ("reference", "auto"):
    keyed._cpu_argmax_available = numba_draw if path == "auto" else (lambda device: False)
    for top_p in (1.0, 0.9):
        keyed.draw(x[:8], seeds[:8], units[:8], steps[:8], keys, 0.7, 0, top_p, trace_k=2)  # compile / warm up
        for budget in (16 << 20, 10**12):
            peak(path, top_p, budget, 2)
keyed._cpu_argmax_available = numba_draw
for budget in (16 << 20, 10**12):  # the numba draw with nothing masked and no trace: no (R, V) temporary
    peak("plain", 1.0, budget, 0)
"""


@pytest.mark.slow  # ten measured draws of 38 MB in a fresh interpreter
@pytest.mark.skipif(
    not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc/self/clear_refs"
)
def test_draw_peak_memory_stays_within_its_budget():
    """The process's measured peak resident memory during a draw of 96 x 100,000 logits (38 MB), on the
    reference and the numba path, with and without top-p: within a 16 MiB temporary budget (plus
    allocator slack), and far beyond it when one chunk takes every row (so the measurement sees a
    budget that is not kept); the numba draw without masks or a trace holds no (R, V) temporary at all
    (only the slack, whatever the budget)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
        # every allocation of 64 KiB or more mmapped and returned when freed: the
        # resident size then follows the live temporaries, not the heap's high-water mark
        env={
            **os.environ,
            "PYTHONPATH": str(root),
            keyed.WORKERS_ENV: "2",
            "MALLOC_MMAP_THRESHOLD_": "65536",
        },
    )
    assert out.returncode == 0, out.stderr[-2000:]
    peaks = {
        (p, float(t), int(b)): int(n)
        for p, t, b, n in (line.split() for line in out.stdout.splitlines())
    }
    assert len(peaks) == 10
    slack = 6 << 20  # page rounding, the per-row outputs, the numba draw's (R, 32) candidate buffers
    for (path, top_p, budget), peak in peaks.items():
        if path == "plain":
            assert peak <= slack, (path, budget, peak)
        elif budget == 16 << 20:
            assert peak <= budget + slack, (path, top_p, peak)
        else:  # one chunk: the (R, V) z alone is 38 MB, the reference's temporaries ~100 MB or more
            assert peak > 2 * (16 << 20), (path, top_p, peak)


def test_single_read_is_taken_only_without_masks_trace_or_greedy(monkeypatch):
    x = torch.zeros(4, 50)
    assert not keyed.single_read(x, 0.7, 0, 1.0, 0)  # CPU: never (the kernel would run interpreted)
    monkeypatch.setattr(keyed, "_fused_available", lambda device: True)
    assert keyed.single_read(x, 0.7, 0, 1.0, 0) and keyed.single_read(
        x.half(), 1.0, 50, 1.0, 0
    )  # top-k >= V: no mask
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
    assert torch.equal(
        keyed.keyed_noise(seeds, units, steps, keys), noise.gumbel(seeds, units, steps, keys)
    )


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


@pytest.mark.parametrize("workers", ["1", "2", "3"])
@pytest.mark.parametrize("budget", [keyed.TEMP_BUDGET_BYTES, 3 * 4000 * 12])
def test_draw_does_not_depend_on_the_row_workers(monkeypatch, workers, budget):
    """The numba CPU draw split over 1, 2 or 3 row workers (and in several chunks each): the same
    tokens and probability bits as the reference formula, rows in order; strided and gathered rows too."""
    from engine.sampling.cpu_argmax import numba_available

    if not numba_available():
        pytest.skip("numba is not installed: the row workers serve only the numba draw")
    wide, seeds, units, steps, keys = _batch(B=17, V=4000, seed=5)
    logits = wide[:, :3000]  # a strided row view of a wider buffer
    keys = keys[:3000]
    monkeypatch.setenv(keyed.WORKERS_ENV, workers)
    assert keyed.cpu_draw_workers(17) == min(int(workers), 17 // keyed.MIN_ROWS_PER_WORKER)
    g = noise.gumbel(seeds, units, steps, keys)
    ref = sample(logits, g, 0.8).tokens
    z = masked_logits(logits, 0.8)
    d = keyed.draw(logits, seeds, units, steps, keys, 0.8, budget=budget)
    assert torch.equal(d.tokens, ref)
    _assert_probs(d.probs, z, ref, numba=True)
    one = [
        keyed._draw_chunk(
            logits[i : i + 1],
            seeds[i : i + 1],
            units[i : i + 1],
            steps[i : i + 1],
            keys,
            0.8,
            0,
            1.0,
            0,
            False,
            True,
        ).probs
        for i in range(17)
    ]
    assert torch.equal(d.probs, torch.cat(one))  # per-row bits: no worker or chunk changes them
    rows = torch.tensor([16, 3, 3, 0, 9, 12, 1, 2, 5])
    d = keyed.draw(logits, seeds[rows], units[rows], steps[rows], keys, 0.8, rows=rows, budget=budget)
    assert torch.equal(d.tokens, ref[rows])


def test_row_workers_refuse_a_bad_setting_and_default_to_torchs_threads(monkeypatch):
    monkeypatch.setenv(keyed.WORKERS_ENV, "two")
    with pytest.raises(UserError, match="COUPLED_EVAL_DRAW_WORKERS must be an integer >= 1, got 'two'"):
        keyed.cpu_draw_workers(64)
    monkeypatch.delenv(keyed.WORKERS_ENV)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert keyed.cpu_draw_workers(64) == 1
        torch.set_num_threads(2)
        assert keyed.cpu_draw_workers(64) == min(2, len(os.sched_getaffinity(0)))
        assert keyed.cpu_draw_workers(keyed.MIN_ROWS_PER_WORKER) == 1  # too few rows to split
    finally:
        torch.set_num_threads(before)


def test_cpu_threads_refuses_a_bad_setting(monkeypatch):
    monkeypatch.setenv(keyed.THREADS_ENV, "0")
    with pytest.raises(UserError, match="COUPLED_EVAL_NOISE_THREADS must be an integer >= 1"):
        keyed.cpu_draw_threads()
    monkeypatch.delenv(keyed.THREADS_ENV)
    assert keyed.cpu_draw_threads() == 1


def test_row_workers_work_in_a_forked_child():
    """A process that drew on workers and then forked (vLLM can fork its workers) gives its child a
    pool object without threads: the child makes its own instead of waiting forever."""
    from engine.sampling.cpu_argmax import numba_available

    if not numba_available() or not hasattr(os, "fork"):
        pytest.skip("needs numba and fork")
    import subprocess
    import sys
    from pathlib import Path

    script = r"""
import os, sys, torch
from engine.sampling import keyed, noise
os.environ[keyed.WORKERS_ENV] = "2"
x = torch.randn(16, 500, generator=torch.Generator().manual_seed(0))
args = (noise.seed_tensor([1] * 16), torch.arange(16), torch.zeros(16, dtype=torch.int64), torch.arange(500), 0.9)
want = keyed.draw(x, *args).tokens
pid = os.fork()
if pid == 0:
    ok = torch.equal(keyed.draw(x, *args).tokens, want)
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""
    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [sys.executable, "-c", script],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("child 0"), r.stdout + r.stderr[-2000:]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_trace_changes_neither_the_token_nor_its_probability_bits(temperature):
    """With a trace the draw reads z = x / T as a tensor, without one the raw logits (dividing as it
    reads): both are IEEE float32 divisions by float32(T) and the same summation, so a traced run and
    an untraced run record the same probability for the same token, bit for bit."""
    logits, seeds, units, steps, keys = _batch(B=9, V=2000, seed=3)
    plain = keyed.draw(logits, seeds, units, steps, keys, temperature)
    traced = keyed.draw(logits, seeds, units, steps, keys, temperature, trace_k=4)
    assert torch.equal(plain.tokens, traced.tokens) and torch.equal(plain.probs, traced.probs)
    top_is_token = traced.top_ids[:, 0] == traced.tokens
    assert bool(top_is_token.any())  # some rows sampled their most likely token
    assert torch.equal(traced.top_probs[top_is_token, 0], traced.probs[top_is_token])
