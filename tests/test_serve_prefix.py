"""The prefill cache across requests (engine/serving/prefix.py): a prompt prefilled after the shared
prefix agrees with its whole prefill; the prefix is found from consecutive prompts; a repeated prompt
reuses its KV; the byte budget evicts least recently used first; a pinned id with new tokens is
prefilled again; and a server with the cache gives the same tokens as ``engine generate``."""

from __future__ import annotations

from collections import Counter

import torch

from engine.generation.hf_prefill import PrefillCache
from engine.serving.prefix import MIN_PREFIX, RequestPrefill, _nbytes
from engine.testing import sliding_window_twin, tiny_lm

HEAD = list(range(5, 5 + 24))  # a 24-token "system prompt" shared by the prompts below


def _model():
    model, _ = tiny_lm(0)
    model.eval()
    return lambda **kw: model(use_cache=True, **kw)


def _ask(pre: RequestPrefill, pid: str, ids: list[int]):
    """What the worker does for one request: register, prefill, join."""
    pre.tok_ids[pid] = ids
    pre.pending[pid] += 1
    pre.ensure([pid])
    entry = pre.kv[pid]
    pre.joined([(pid, 0, 0)])
    return entry


@torch.inference_mode()
def test_suffix_after_the_cached_prefix_agrees_with_the_whole_prefill():
    fwd = _model()
    a, b, c = HEAD + [40, 41, 42], HEAD + [43, 44], [50, 51, 52, 53]
    pre = RequestPrefill(fwd, 0, "cpu")
    _ask(pre, "a", a)
    assert pre.prefix_ids == [] and pre.prefilled_tokens == len(a)  # nothing to share with yet
    kv_b, lg_b, n_b = _ask(pre, "b", b)
    assert pre.prefix_ids == HEAD  # found against the previous prompt
    assert pre.prefilled_tokens == len(a) + len(HEAD) + 2  # the prefix once, then b's own 2 tokens
    kv_c, _, _ = _ask(pre, "c", c)  # shares nothing: prefilled whole, the prefix kept
    assert pre.prefix_ids == HEAD and pre.prefilled_tokens == len(a) + len(HEAD) + 2 + 4
    # the reference: the run's own cache, each prompt prefilled whole
    ref = PrefillCache(fwd, {"b": b, "c": c}, 0, "cpu", Counter())
    ref.P = 0
    ref._prefill(["b"])
    rkv, rlg, rn = ref.kv["b"]
    assert n_b == rn == len(b)
    for (k, v), (rk, rv) in zip(kv_b, rkv):
        assert (
            k.shape == rk.shape and torch.allclose(k, rk, atol=1e-5) and torch.allclose(v, rv, atol=1e-5)
        )
    assert torch.allclose(lg_b, rlg, atol=1e-4)
    assert kv_c[0][0].shape[2] == len(c)


@torch.inference_mode()
def test_a_repeated_prompt_reuses_its_kv_and_the_budget_evicts_the_oldest():
    fwd = _model()
    pre = RequestPrefill(fwd, 0, "cpu")
    first = _ask(pre, "a", HEAD + [40])
    spent = pre.prefilled_tokens
    again = _ask(pre, "a", HEAD + [40])
    assert pre.reused == 1 and pre.prefilled_tokens == spent
    assert torch.equal(first[1], again[1]) and torch.equal(first[0][0][0], again[0][0][0])
    # a client-pinned id asked with other tokens: the stale entry is not used
    _ask(pre, "a", HEAD + [41])
    assert pre.reused == 1 and pre.prefilled_tokens > spent
    # budget: room for two prompts' KV; a third pushes out the least recently used
    one = _nbytes(pre.recent["a"][1][0])
    pre.budget = 2 * one + one // 2
    _ask(pre, "b", HEAD + [42])
    _ask(pre, "c", HEAD + [43])
    assert list(pre.recent) == ["b", "c"] and pre.recent_bytes == sum(
        _nbytes(e[1][0]) for e in pre.recent.values()
    )
    assert len(HEAD) >= MIN_PREFIX


def test_short_shared_prefixes_are_not_cached():
    fwd = _model()
    pre = RequestPrefill(fwd, 0, "cpu")
    short = list(range(5, 5 + MIN_PREFIX - 1))
    with torch.inference_mode():
        _ask(pre, "a", short + [40, 41])
        _ask(pre, "b", short + [42, 43])
    assert pre.prefix_ids == [] and pre.prefilled_tokens == 2 * (len(short) + 2)


def test_a_model_whose_cache_cannot_be_repacked_is_probed_once():
    """Sliding-window layers: the first session's probe says so; later sessions of the worker take
    static batches at once (no prefill here, no error)."""
    calls = []

    def fwd(**kw):
        calls.append(kw)
        raise AssertionError("no prefill expected")

    pre = RequestPrefill(fwd, 0, "cpu")
    pre.can_repack = False  # what the first session's probe found
    pre.tok_ids["a"] = HEAD + [40]
    assert pre.probe(["a"]) is False and calls == []


def test_a_sliding_window_model_serves_session_after_session():
    """Two sessions of one worker on a model that takes static batches: the second session does not
    trip over the kept cache, and both give the tokens of the same weights' continuous path."""
    import threading

    from engine.generation.types import Unit
    from engine.serving.seq import Seq
    from engine.serving.worker import ModelWorker, wait_idle
    from tests.serve_helpers import tiny

    base = tiny("tiny-a", 0)
    out: dict[str, dict] = {"twin": {}, "base": {}}
    for name, lm in (("twin", sliding_window_twin(base)), ("base", base)):
        w = ModelWorker(name, lm, "token_id", batch_size=4)
        try:
            for session in range(2):
                done, ev = [], threading.Event()

                def on_done(s, done=done, ev=ev):
                    done.append(s)
                    if len(done) == 2:
                        ev.set()

                for r in range(2):
                    ids = HEAD + [40 + session]
                    w.submit([Seq(Unit(f"p{session}", r, 3), ids, 1.0, 0, 1.0, 6, on_done)])
                assert ev.wait(60) and wait_idle([w], 30)
                assert all(s.error is None for s in done), [s.error for s in done]
                out[name].update({(session, s.unit.repeat): s.ids for s in done})
        finally:
            w.close(10)
        if name == "twin":
            assert w.prefill is not None and w.prefill.can_repack is False
    assert out["twin"] == out["base"] and len(out["twin"]) == 4
