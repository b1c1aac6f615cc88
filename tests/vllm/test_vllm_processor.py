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

from engine.generation.vllm_sampler import EXTRA_KEY, forget_device_keys
from engine.generation.vllm_traces import PENDING, TOKEN_KEYS, TRACES, flush_pending
from engine.sampling import noise
from engine.sampling.gumbel import sample

pytestmark = [pytest.mark.vllm, needs_vllm]

V = 40


def _sp(tag, prompt, repeat, seed=11, temperature=1.0, top_k=0, top_p=1.0):
    from vllm import SamplingParams

    return SamplingParams(
        temperature=0.0,
        max_tokens=4,
        extra_args={
            EXTRA_KEY: dict(
                tag=tag,
                seed=noise.as_int64(seed),
                unit=noise.unit_key(prompt, repeat),
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                trace_k=2,
                keys="test-keys",
            )
        },
    )


def _expected(logits, units_steps, seed=11, temperature=1.0, top_k=0, top_p=1.0):
    g = noise.gumbel(
        seed,
        noise.unit_keys([u for u, _ in units_steps]),
        torch.tensor([s for _, s in units_steps]),
        torch.arange(V),
    )
    return sample(logits, g, temperature, top_k, top_p).tokens


@pytest.fixture(autouse=True)
def _keys():
    TOKEN_KEYS["test-keys"] = torch.arange(V)
    yield
    TOKEN_KEYS.pop("test-keys", None)
    forget_device_keys("test-keys")
    PENDING.clear()
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
    proc.update_state(
        BatchUpdate(
            batch_size=3,
            removed=[],
            moved=[],
            added=[
                (0, _sp("a", "p", 0), [1, 2], out_a),
                (1, _sp("b", "p", 1), [1, 2], out_b),
                (2, _sp("c", "q", 0, top_k=5), [3], out_c),
            ],
        )
    )
    # request c is foreign to the first group's settings: check rows 0-1 (top_k 0) and row 2 apart
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(1))
    got = proc.apply(logits.clone()).argmax(-1)
    exp01 = _expected(logits[:2], [(("p", 0), 0), (("p", 1), 2)])
    exp2 = _expected(logits[2:], [(("q", 0), 0)], top_k=5)
    assert got.tolist() == exp01.tolist() + exp2.tolist()
    # remove a, swap b and c, then b's list grows: rows follow the moves, steps follow the lists
    out_b.append(7)
    proc.update_state(
        BatchUpdate(
            batch_size=2,
            removed=[0],
            added=[],
            moved=[(1, 0, MoveDirectionality.UNIDIRECTIONAL), (2, 1, MoveDirectionality.UNIDIRECTIONAL)],
        )
    )
    proc.update_state(
        BatchUpdate(batch_size=2, removed=[], added=[], moved=[(0, 1, MoveDirectionality.SWAP)])
    )
    logits = torch.randn(2, V, generator=torch.Generator().manual_seed(2))
    got = proc.apply(logits.clone()).argmax(-1)
    assert got[0] == _expected(logits[:1], [(("q", 0), 0)], top_k=5)[0]  # c now at row 0
    assert got[1] == _expected(logits[1:], [(("p", 1), 3)])[0]  # b at row 1, step 3
    flush_pending()
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
    ctx = LogitsContext(
        expanded_idx_mapping=idx,
        idx_mapping=idx,
        idx_mapping_np=idx.numpy(),
        expanded_local_pos=torch.zeros(3, dtype=torch.long),
        input_ids=torch.zeros(3, dtype=torch.long),
        pos=torch.tensor([8, 1, 3]),
        seq_lens_upper_bound_np=np.array([9, 2, 4]),
    )
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(3))
    out = proc.apply(logits.clone(), ctx)
    assert torch.equal(out[1], logits[1])
    exp = _expected(logits[[0, 2]], [(("p", 1), 3), (("p", 0), 0)])
    assert out[[0, 2]].argmax(-1).tolist() == exp.tolist()
    flush_pending()
    assert set(TRACES["b"]) == {3} and set(TRACES["a"]) == {0}
    # a prompt chunk still being prefilled (pos + 1 < prompt_len) is not a sample
    ctx2 = LogitsContext(
        expanded_idx_mapping=idx[2:],
        idx_mapping=idx[2:],
        idx_mapping_np=idx[2:].numpy(),
        expanded_local_pos=torch.zeros(1, dtype=torch.long),
        input_ids=torch.zeros(1, dtype=torch.long),
        pos=torch.tensor([1]),
        seq_lens_upper_bound_np=np.array([2]),
    )
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
    KeyedGumbelProcessor.validate_params(
        SamplingParams(presence_penalty=0.5)
    )  # not ours: vLLM's business


class _HostTransfers(torch.overrides.TorchFunctionMode):
    """Records every call that copies device data to the host or makes the host wait for it."""

    NAMES = {
        "item",
        "tolist",
        "cpu",
        "numpy",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
        "nonzero",
        "synchronize",
    }

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        # .to("cpu") written as such (a copy to the host by intent), or any move of a non-CPU tensor
        # to the CPU; .to(logits.device) on a CPU run is not a transfer
        targets = [
            a for a in list(args[1:]) + [kwargs.get("device")] if isinstance(a, (str, torch.device))
        ]
        src = args[0] if args and isinstance(args[0], torch.Tensor) else None
        to_cpu = name in ("to", "copy_") and any(
            a == "cpu"
            or (torch.device(a).type == "cpu" and src is not None and src.device.type != "cpu")
            for a in targets
        )
        if name in self.NAMES or to_cpu:
            self.calls.append(name)
        return func(*args, **kwargs)


class _OffThread:
    """Records which thread waits for, converts, pickles or writes step records (the calls the hot
    path must leave to the writer thread in a worker)."""

    def __init__(self, monkeypatch):
        from engine.generation import vllm_traces as vt

        self.calls: list[tuple[str, str]] = []
        for owner, name in (
            (vt.PendingRecords, "as_tuples"),
            (vt._SegmentWriter, "write"),
            (vt, "write_records"),
            (vt.pickle, "dumps"),
        ):
            monkeypatch.setattr(owner, name, self._wrap(name, getattr(owner, name)))

    def _wrap(self, name, fn):
        import threading

        def wrapped(*args, **kwargs):
            self.calls.append((name, threading.current_thread().name))
            return fn(*args, **kwargs)

        return wrapped

    def on(self, thread: str) -> set[str]:
        return {name for name, t in self.calls if t == thread}


def _batch_256(trace_k: int, sink_path: str, origin: int):
    """Model Runner V2's processor with 256 requests in scattered slots (every request ours), and a
    LogitsContext whose row 3 is a prompt chunk still being prefilled; (processor, context, seq)."""
    from vllm import SamplingParams
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

    from engine.generation.vllm_processor import KeyedGumbelProcessor

    B = 256
    prompt_len = np.full(B + 8, 5, dtype=np.int32)
    proc = KeyedGumbelProcessor(
        None, SimpleNamespace(prompt_len=SimpleNamespace(np=prompt_len), max_num_reqs=B + 8)
    )
    slots = np.random.default_rng(0).permutation(B + 8)[:B]  # rows in scheduler order, slots scattered
    for j, slot in enumerate(slots):
        proc.add_request(
            int(slot),
            SamplingParams(
                temperature=0.0,
                max_tokens=4,
                extra_args={
                    EXTRA_KEY: dict(
                        tag=f"u{j}",
                        seed=noise.as_int64(11),
                        unit=noise.unit_key(f"p{j}", 0),
                        temperature=0.8,
                        top_k=0,
                        top_p=1.0,
                        trace_k=trace_k,
                        keys="big-keys",
                        sink=sink_path,
                        origin=origin,
                    )
                },
            ),
        )
    seq = (5 + np.arange(B) % 7).astype(np.int64)
    seq[3] = 2  # a prompt chunk still being prefilled: not a sample
    idx = torch.from_numpy(slots.astype(np.int64))
    ctx = LogitsContext(
        expanded_idx_mapping=idx,
        idx_mapping=idx,
        idx_mapping_np=slots.astype(np.int64),
        expanded_local_pos=torch.zeros(B, dtype=torch.long),
        input_ids=torch.zeros(B, dtype=torch.long),
        pos=torch.from_numpy(seq - 1),
        seq_lens_upper_bound_np=seq,
    )
    return proc, ctx, seq


@pytest.mark.parametrize("where", ["backend", "worker"])
@pytest.mark.parametrize("trace_k", [0, 3])
def test_v2_apply_makes_no_host_transfer_at_batch_256(trace_k, where, monkeypatch, tmp_path):
    """Model Runner V2's apply at batch 256 (a 2,000-token vocabulary, every
    request ours, one prefill chunk among them) calls no item/tolist/cpu/numpy/to("cpu") and no
    implicit bool/int of a tensor; and its tokens are still the Gumbel-max samples. In the backend's
    process the records wait in PENDING; in a worker (another process: a sink, origin not this pid)
    the step also neither converts, pickles nor writes them: the writer thread does, after apply
    returned, and they arrive in the trace directory."""
    import threading

    from engine.generation.vllm_traces import TraceSink, drain_writes
    from engine.sampling import keyed

    # the device path, as on CUDA: the CPU-only numba draw (engine.sampling.cpu_argmax) reads its
    # CPU tensors through zero-copy numpy views, which this mode would count although nothing moves
    monkeypatch.setattr(keyed, "_cpu_argmax_available", lambda device: False)
    B, Vb = 256, 2000
    sink = TraceSink(root=tmp_path)
    if where == "backend":
        TOKEN_KEYS["big-keys"] = torch.arange(Vb)
        route = ("", 0)
    else:  # a worker: the keys come from the sink (read at the call's first step, as in vLLM)
        sink.put_keys("big-keys", torch.arange(Vb))
        route = (str(sink.path), -1)
    try:
        proc, ctx, seq = _batch_256(trace_k, *route)
        logits = torch.randn(B, Vb, generator=torch.Generator().manual_seed(4))
        if (
            where == "worker"
        ):  # the call's first step reads the token keys from the sink; then steady state
            proc.apply(logits.clone(), ctx)
            assert drain_writes()
            assert sink.poll() == 1
            TRACES.clear()
        off = _OffThread(monkeypatch)
        out = logits.clone()
        with _HostTransfers() as mode:
            proc.apply(out, ctx)
        assert mode.calls == []
        assert (
            off.on(threading.current_thread().name) == set()
        )  # nothing converted/pickled/written in apply
        keep = np.arange(B) != 3
        g = noise.gumbel(
            11,
            noise.unit_keys([(f"p{j}", 0) for j in range(B) if keep[j]]),
            torch.from_numpy(seq[keep] - 5),
            torch.arange(Vb),
        )
        want = sample(logits[torch.from_numpy(keep)], g, 0.8).tokens
        assert torch.equal(out[torch.from_numpy(keep)].argmax(-1), want)
        assert torch.equal(out[3], logits[3])
        if where == "worker":
            assert not PENDING and drain_writes()
            assert off.on("coupled-eval-trace-writer") == {
                "as_tuples",
                "write_records",
                "write",
                "dumps",
            }
            assert sink.poll() == 1
        else:
            flush_pending()
        assert TRACES["u0"][0].token == int(want[0]) and len(TRACES["u0"][0].top_ids) == trace_k
        assert "u3" not in TRACES and len(TRACES) == B - 1
        assert [TRACES[f"u{j}"][int(seq[j] - 5)].token for j in range(B) if keep[j]] == want.tolist()
    finally:
        TOKEN_KEYS.pop("big-keys", None)
        forget_device_keys("big-keys")
        sink.close()


def test_the_mode_sees_host_transfers():
    """The recorder itself: each forbidden call is seen (else the test above would prove nothing)."""
    x = torch.arange(4)
    with _HostTransfers() as mode:
        x.tolist()
        x[0].item()
        x.cpu()
        x.numpy()
        x.to("cpu")
        bool(x[0])  # noqa: E702
    assert mode.calls == ["tolist", "item", "cpu", "numpy", "to", "__bool__"]
