"""The keyed-Gumbel processor through both vLLM logits-processor interfaces, driven as vLLM drives
them (V1: BatchUpdate add/remove/move on the persistent batch; V2: slots + LogitsContext), against
engine.sampling.sample row by row. The CPU build of vLLM runs only the V1 runner (Model Runner V2
needs Triton), so this is where the V2 entry points are exercised."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from vllm_testlib import needs_vllm

from engine.generation.vllm_backend import EXTRA_KEY, TOKEN_KEYS, TRACES
from engine.sampling import noise
from engine.sampling.gumbel import sample

pytestmark = [pytest.mark.vllm, needs_vllm]

V = 40


def _sp(tag, prompt, repeat, seed=11, temperature=1.0, top_k=0, top_p=1.0):
    from vllm import SamplingParams
    return SamplingParams(temperature=0.0, max_tokens=4, extra_args={EXTRA_KEY: dict(
        tag=tag, seed=noise.as_int64(seed), unit=noise.unit_key(prompt, repeat), temperature=temperature,
        top_k=top_k, top_p=top_p, trace_k=2, keys="test-keys")})


def _expected(logits, units_steps, seed=11, temperature=1.0, top_k=0, top_p=1.0):
    g = noise.gumbel(seed, noise.unit_keys([u for u, _ in units_steps]),
                     torch.tensor([s for _, s in units_steps]), torch.arange(V))
    return sample(logits, g, temperature, top_k, top_p).tokens


@pytest.fixture(autouse=True)
def _keys():
    TOKEN_KEYS["test-keys"] = torch.arange(V)
    yield
    TOKEN_KEYS.pop("test-keys", None)
    TRACES.clear()


def test_both_bases():
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2

    from engine.generation.vllm_processor import KeyedGumbelProcessor
    assert issubclass(KeyedGumbelProcessor, V1) and issubclass(KeyedGumbelProcessor, V2)


def test_v1_interface_batch_updates():
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from engine.generation.vllm_processor import KeyedGumbelProcessor
    proc = KeyedGumbelProcessor(None, torch.device("cpu"), False)
    out_a, out_b, out_c = [], [5, 6], []
    proc.update_state(BatchUpdate(batch_size=3, removed=[], moved=[], added=[
        (0, _sp("a", "p", 0), [1, 2], out_a), (1, _sp("b", "p", 1), [1, 2], out_b),
        (2, _sp("c", "q", 0, top_k=5), [3], out_c)]))
    # request c is foreign to the first group's settings: check rows 0-1 (top_k 0) and row 2 apart
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(1))
    got = proc.apply(logits.clone()).argmax(-1)
    exp01 = _expected(logits[:2], [(("p", 0), 0), (("p", 1), 2)])
    exp2 = _expected(logits[2:], [(("q", 0), 0)], top_k=5)
    assert got.tolist() == exp01.tolist() + exp2.tolist()
    # remove a, swap b and c, then b's list grows: rows follow the moves, steps follow the lists
    out_b.append(7)
    proc.update_state(BatchUpdate(batch_size=2, removed=[0], added=[],
                                  moved=[(1, 0, MoveDirectionality.UNIDIRECTIONAL),
                                         (2, 1, MoveDirectionality.UNIDIRECTIONAL)]))
    proc.update_state(BatchUpdate(batch_size=2, removed=[], added=[], moved=[(0, 1, MoveDirectionality.SWAP)]))
    logits = torch.randn(2, V, generator=torch.Generator().manual_seed(2))
    got = proc.apply(logits.clone()).argmax(-1)
    assert got[0] == _expected(logits[:1], [(("q", 0), 0)], top_k=5)[0]  # c now at row 0
    assert got[1] == _expected(logits[1:], [(("p", 1), 3)])[0]           # b at row 1, step 3
    assert TRACES["b"][3].token == int(got[1])


def test_v2_interface_slots_and_context():
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

    from engine.generation.vllm_processor import KeyedGumbelProcessor
    prompt_len = np.zeros(8, dtype=np.int32)
    req_states = SimpleNamespace(prompt_len=SimpleNamespace(np=prompt_len))
    proc = KeyedGumbelProcessor(None, req_states)
    assert proc.interface == "v2"
    from vllm import SamplingParams
    assert proc.add_request(5, _sp("a", "p", 0)) and proc.add_request(2, _sp("b", "p", 1))
    assert not proc.add_request(3, SamplingParams(temperature=0.0))  # not ours: untouched
    prompt_len[[5, 2, 3]] = [4, 6, 2]
    # rows in scheduler order: slot 2 at position 8 (its step 3), slot 3 (foreign), slot 5 at
    # position 3 (its first sample, step 0)
    idx = torch.tensor([2, 3, 5])
    ctx = LogitsContext(expanded_idx_mapping=idx, idx_mapping=idx, idx_mapping_np=idx.numpy(),
                        expanded_local_pos=torch.zeros(3, dtype=torch.long), input_ids=torch.zeros(3, dtype=torch.long),
                        pos=torch.tensor([8, 1, 3]), seq_lens_upper_bound_np=np.array([9, 2, 4]))
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(3))
    out = proc.apply(logits.clone(), ctx)
    assert torch.equal(out[1], logits[1])
    exp = _expected(logits[[0, 2]], [(("p", 1), 3), (("p", 0), 0)])
    assert out[[0, 2]].argmax(-1).tolist() == exp.tolist()
    assert set(TRACES["b"]) == {3} and set(TRACES["a"]) == {0}
    # a prompt chunk still being prefilled (pos + 1 < prompt_len) is not a sample
    ctx2 = LogitsContext(expanded_idx_mapping=idx[2:], idx_mapping=idx[2:], idx_mapping_np=idx[2:].numpy(),
                         expanded_local_pos=torch.zeros(1, dtype=torch.long), input_ids=torch.zeros(1, dtype=torch.long),
                         pos=torch.tensor([1]), seq_lens_upper_bound_np=np.array([2]))
    lg = torch.randn(1, V)
    assert torch.equal(proc.apply(lg.clone(), ctx2), lg)


def test_validate_params_refuses_penalties():
    from vllm import SamplingParams

    from engine.generation.vllm_processor import KeyedGumbelProcessor
    sp = _sp("a", "p", 0)
    KeyedGumbelProcessor.validate_params(sp)
    bad = SamplingParams(temperature=0.0, presence_penalty=0.5, extra_args=sp.extra_args)
    with pytest.raises(ValueError, match="presence_penalty"):
        KeyedGumbelProcessor.validate_params(bad)
    KeyedGumbelProcessor.validate_params(SamplingParams(presence_penalty=0.5))  # not ours: vLLM's business
