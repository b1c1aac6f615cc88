"""vLLM backend checks that need no vLLM: refusals, version range, and the sampler as a logits
transform against engine.sampling. They run in the main environment and in the vLLM one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.errors import UserError
from engine.generation.vllm_checks import (
    check_engine_kwargs,
    check_vllm_version,
    installed_vllm_version,
    require_vllm,
    resolve_model,
)
from engine.generation.vllm_sampler import (
    EXTRA_KEY,
    RowArgs,
    SlotTable,
    apply_rows,
    check_sampling_params,
    forget_device_keys,
)
from engine.generation.vllm_traces import TOKEN_KEYS, TRACES, drain_writes, flush_pending
from engine.sampling import noise
from engine.sampling.gumbel import sample
from engine.sampling.keyed import keyed_scores


def _apply(logits, rows, args, steps, write_traces=True):
    """apply_rows with one slot per row argument (slot j = args[j]), records flushed into TRACES
    (this process's records) or written to the sink (another process's: the writer thread drained)."""
    import numpy as np

    table = SlotTable()
    for j, a in enumerate(args):
        table.set(j, a)
    apply_rows(
        logits,
        table,
        np.asarray(rows, dtype=np.int64),
        np.arange(len(args), dtype=np.int64),
        np.asarray(steps, dtype=np.int64),
        write_traces=write_traces,
    )
    flush_pending()
    assert drain_writes()
    for a in args:  # tests reuse key ids with other keys; a backend's ids are unique per call
        forget_device_keys(a.keys)
    return logits


def _params(**kw):
    base = dict(
        n=1,
        temperature=0.0,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        presence_penalty=0.0,
        frequency_penalty=0.0,
        repetition_penalty=1.0,
        logit_bias=None,
        bad_words=None,
        allowed_token_ids=None,
        min_tokens=0,
    )
    return SimpleNamespace(**{**base, **kw})


def test_neutral_params_pass():
    check_sampling_params(_params())
    check_sampling_params(_params(top_k=-1))


@pytest.mark.parametrize(
    "name, value",
    [
        ("presence_penalty", 0.5),
        ("frequency_penalty", 0.1),
        ("repetition_penalty", 1.1),
        ("n", 2),
        ("temperature", 0.7),
        ("top_k", 5),
        ("top_p", 0.9),
        ("min_p", 0.05),
        ("logit_bias", {3: 1.0}),
        ("bad_words", ["x"]),
        ("min_tokens", 2),
    ],
)
def test_coupling_breaking_params_refused(name, value):
    with pytest.raises(UserError) as e:
        check_sampling_params(_params(**{name: value}))
    msg = str(e.value)
    assert "\n" not in msg and name in msg and repr(value) in msg


@pytest.mark.parametrize(
    "kw",
    [
        {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}},
        {"pipeline_parallel_size": 2},
        {"logits_processors": ["x:Y"]},
        {"enable_batch_sharded_sampling": True},
        {"watermark_config": {"key": 1}},
    ],
)
def test_engine_kwargs_refused(kw):
    with pytest.raises(UserError) as e:
        check_engine_kwargs(kw)
    assert next(iter(kw)) in str(e.value) and "\n" not in str(e.value)


def test_engine_kwargs_allowed():
    assert check_engine_kwargs({"enforce_eager": True, "tensor_parallel_size": 1}) == {
        "enforce_eager": True,
        "tensor_parallel_size": 1,
    }


@pytest.mark.parametrize(
    "version, ok",
    [
        ("0.32.0", True),
        ("0.32.3+cpu", True),
        ("0.31.2", False),
        ("0.33.0", True),
        ("0.33.2+cu129", True),
        ("0.34.0", False),
        ("1.0.0", False),
    ],
)
def test_version_range(version, ok):
    if ok:
        assert check_vllm_version(version) == version
    else:
        with pytest.raises(UserError, match=r"not supported .*vllm>=0\.32\.0,<0\.34.*--cuda"):
            check_vllm_version(version)


def test_missing_vllm_says_what_to_install(monkeypatch):
    import engine.generation.vllm_checks as vb

    monkeypatch.setattr(vb, "installed_vllm_version", lambda: None)
    with pytest.raises(UserError, match="not installed; install it with scripts/install_vllm.sh"):
        require_vllm()


def test_real_install_state_is_reported_cleanly():
    """In the main venv (no vLLM) the backend refuses in one line; in the vLLM venv it imports."""
    if installed_vllm_version() is None:
        with pytest.raises(UserError, match="not installed"):
            require_vllm()
    else:
        assert require_vllm().__version__.startswith(("0.32", "0.33"))


def test_unknown_model_refused(tmp_path):
    with pytest.raises(UserError, match="neither a registry name"):
        resolve_model("no-such-model")
    with pytest.raises(UserError, match="no config.json"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize(
    "temperature, top_k, top_p",
    [(1.0, 0, 1.0), (0.7, 5, 1.0), (0.7, 0, 0.8), (1.3, 7, 0.9), (0.0, 0, 1.0), (0.0, 3, 0.5)],
)
def test_keyed_scores_argmax_is_the_gumbel_max_sample(temperature, top_k, top_p):
    """Two implementations that must agree: argmax of the processor's scores = engine.sampling.sample."""
    gen = torch.Generator().manual_seed(3)
    B, V = 16, 50
    logits = torch.randn(B, V, generator=gen) * 3
    seeds = torch.tensor([noise.as_int64(s) for s in [5, 2**63 + 11] * (B // 2)])
    units = noise.unit_keys([(f"p{i}", i % 3) for i in range(B)])
    steps = torch.arange(B) % 4
    keys = torch.arange(V)
    scores, logp, g = keyed_scores(logits, seeds, units, steps, keys, temperature, top_k, top_p)
    ref_g = noise.gumbel(seeds, units, steps, keys) if temperature > 0 else None
    ref = sample(logits, ref_g, temperature, top_k, top_p)
    assert torch.equal(scores.argmax(-1), ref.tokens)
    assert torch.equal(logp, ref.logprobs)
    assert (g is None) == (temperature == 0)


def test_apply_rows_replaces_only_its_rows_and_records_traces():
    V = 30
    TOKEN_KEYS["t"] = torch.arange(V)
    try:
        logits = torch.randn(4, V, generator=torch.Generator().manual_seed(0))
        before = logits.clone()
        args = [
            RowArgs("a", 7, noise.unit_key("q", 0), 1.0, 0, 1.0, 3, "t"),
            RowArgs("b", 7, noise.unit_key("q", 1), 1.0, 0, 1.0, 3, "t"),
        ]
        _apply(logits, [1, 3], args, [0, 5])
        assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
        g = noise.gumbel(7, noise.unit_keys([("q", 0), ("q", 1)]), torch.tensor([0, 5]), torch.arange(V))
        ref = sample(before[[1, 3]], g, 1.0)
        assert torch.equal(logits[[1, 3]].argmax(-1), ref.tokens)
        tr = TRACES.pop("a")[0]
        assert tr.token == int(ref.tokens[0]) and len(tr.top_ids) == 3 and len(tr.top_gumbels) == 3
        assert tr.prob == pytest.approx(float(ref.logprobs[0, ref.tokens[0]].exp()))
        assert 5 in TRACES.pop("b")
    finally:
        TOKEN_KEYS.pop("t", None)


def test_row_args_ignore_foreign_requests():
    assert RowArgs.from_params(SimpleNamespace(extra_args=None)) is None
    assert RowArgs.from_params(SimpleNamespace(extra_args={"other": 1})) is None
    a = RowArgs.from_params(
        SimpleNamespace(
            extra_args={
                EXTRA_KEY: dict(
                    tag="x", seed=-3, unit=9, temperature=0.5, top_k=2, top_p=0.9, trace_k=0, keys="k"
                )
            }
        )
    )
    assert a == RowArgs("x", -3, 9, 0.5, 2, 0.9, 0, "k")


# --------------------------------------------------------------------------- traces from vLLM's worker processes


def _sink_rows(sink, V, n_rows=3, seed=5):
    logits = torch.randn(n_rows, V, generator=torch.Generator().manual_seed(seed))
    args = [
        RowArgs(f"r{i}", 7, noise.unit_key("q", i), 0.8, 0, 1.0, 4, "k", str(sink.path), -1)
        for i in range(n_rows)
    ]
    return logits, args


def _worker_apply(sink_path: str, seed: int, steps: list[int], V: int) -> None:
    """What a tensor-parallel rank-0 worker does: keys from the sink, records into it."""
    logits = torch.randn(len(steps), V, generator=torch.Generator().manual_seed(seed))
    args = [
        RowArgs(f"r{i}", 7, noise.unit_key("q", i), 0.8, 0, 1.0, 4, "k", sink_path, -1)
        for i in range(len(steps))
    ]
    _apply(logits, list(range(len(steps))), args, steps)


def test_trace_sink_carries_records_from_another_process():
    """A processor in another process (origin pid differs) reads the keys from the sink and writes
    its records there; the backend's poll gives exactly what an in-process processor records."""
    import multiprocessing

    from engine.generation.vllm_traces import TraceSink

    V = 50
    sink = TraceSink()
    try:
        sink.put_keys("k", torch.arange(V) * 3)
        ctx = multiprocessing.get_context("spawn")  # as vLLM starts its workers: nothing inherited
        p = ctx.Process(target=_worker_apply, args=(str(sink.path), 5, [0, 4, 9], V))
        p.start()
        p.join(120)
        assert p.exitcode == 0
        assert sink.poll() == 1 and set(TRACES) == {"r0", "r1", "r2"}
        got = {t: TRACES.pop(t) for t in ("r0", "r1", "r2")}
        # the same rows in this process, straight into TRACES (origin = this pid)
        TOKEN_KEYS["k"] = torch.arange(V) * 3
        logits = torch.randn(3, V, generator=torch.Generator().manual_seed(5))
        import os

        args = [
            RowArgs(f"r{i}", 7, noise.unit_key("q", i), 0.8, 0, 1.0, 4, "k", str(sink.path), os.getpid())
            for i in range(3)
        ]
        _apply(logits, [0, 1, 2], args, [0, 4, 9])
        assert {t: TRACES.pop(t) for t in ("r0", "r1", "r2")} == got
        assert got["r1"][4].top_gumbels and len(got["r1"][4].top_ids) == 4
    finally:
        TOKEN_KEYS.pop("k", None)
        TRACES.clear()
        sink.close()
    assert not sink.path.exists()


def test_trace_sink_frames_segments_and_non_writers(monkeypatch):
    """Half-written frames wait for the next poll; full segments are deleted once the worker moved
    on; the last record of a step wins; a non-writer rank (write_traces=False) records nothing."""
    from engine.generation import vllm_traces as vb

    V = 20
    monkeypatch.setattr(vb, "SEGMENT_BYTES", 600)  # a few frames per segment
    monkeypatch.setattr(vb, "_WRITERS", {})
    sink = vb.TraceSink()
    try:
        sink.put_keys("k", torch.arange(V))
        monkeypatch.setattr(vb, "TOKEN_KEYS", {})  # as in a worker: keys only in the sink
        logits, args = _sink_rows(sink, V)
        _apply(logits.clone(), [0, 1, 2], args, [0, 0, 0], write_traces=False)
        assert sink.poll() == 0 and not TRACES
        for step in range(12):
            _apply(
                torch.randn(3, V, generator=torch.Generator().manual_seed(step)),
                [0, 1, 2],
                args,
                [step] * 3,
            )
        n_files = len(list(sink.path.glob("*.trace")))
        assert n_files > 2  # rotated
        assert sink.poll() == 12
        assert sorted(TRACES) == ["r0", "r1", "r2"] and sorted(TRACES["r0"]) == list(range(12))
        assert len(list(sink.path.glob("*.trace"))) == 1  # read segments the worker left are gone
        # a recomputed step (preemption): the later record wins
        first = TRACES["r2"][11]
        _apply(torch.full((3, V), 0.0), [0, 1, 2], args, [11] * 3)
        assert sink.poll() == 1 and TRACES["r2"][11] != first
        # a frame cut in the middle is not read until it is complete
        seg = sorted(sink.path.glob("*.trace"))[-1]
        import pickle
        import struct

        payload = pickle.dumps([("r9", 0, 3, 0.5, (), (), ())])
        frame = struct.pack("<Q", len(payload)) + payload
        with open(seg, "ab") as f:
            f.write(frame[:10])
        assert sink.poll() == 0 and "r9" not in TRACES
        with open(seg, "ab") as f:
            f.write(frame[10:])
        assert sink.poll() == 1 and TRACES["r9"][0].token == 3
    finally:
        TRACES.clear()
        sink.close()


def test_engine_kwargs_tensor_parallel_and_executor():
    assert check_engine_kwargs({"tensor_parallel_size": 2}) == {"tensor_parallel_size": 2}
    for bad in (
        {"tensor_parallel_size": 0},
        {"tensor_parallel_size": "2"},
        {"distributed_executor_backend": "ray"},
        {"pipeline_parallel_size": 2},
    ):
        with pytest.raises(UserError):
            check_engine_kwargs(bad)
    assert check_engine_kwargs({"distributed_executor_backend": "mp"})


def test_cpu_threads_bind_splits_the_allowed_cpus():
    from engine.generation.vllm_backend import cpu_threads_bind

    assert cpu_threads_bind(1, [0, 1], 1) is None
    assert cpu_threads_bind(2, [0, 1, 2, 3], 2) is None  # one NUMA node per rank: vLLM's auto binding
    assert cpu_threads_bind(2, [0, 1], 1) == "0|1"
    assert cpu_threads_bind(2, [3, 0, 1, 2, 4], 1) == "0,1,2|3,4"
    assert cpu_threads_bind(3, [4, 5, 6, 7], 1) == "4,5|6|7"
    with pytest.raises(UserError) as e:
        cpu_threads_bind(4, [0, 1], 1)
    assert "allowed: tensor_parallel <= 2" in str(e.value)


def test_vllm_engine_args_from_the_environment(monkeypatch):
    """$COUPLED_EVAL_VLLM_ARGS: a JSON object of vllm.LLM arguments, checked like the others."""
    from engine.generation.backends import VLLM_ARGS_ENV, vllm_engine_args

    monkeypatch.delenv(VLLM_ARGS_ENV, raising=False)
    assert vllm_engine_args() == {} and vllm_engine_args(2) == {"tensor_parallel_size": 2}
    monkeypatch.setenv(VLLM_ARGS_ENV, '{"enforce_eager": true, "gpu_memory_utilization": 0.8}')
    assert vllm_engine_args(4) == {
        "enforce_eager": True,
        "gpu_memory_utilization": 0.8,
        "tensor_parallel_size": 4,
    }
    for raw, words in (
        ("{nope", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"tensor_parallel_size": 2}', "--tensor-parallel"),
        ('{"speculative_config": {}}', "speculative_config"),
    ):
        monkeypatch.setenv(VLLM_ARGS_ENV, raw)
        with pytest.raises(UserError) as e:
            vllm_engine_args()
        assert words in str(e.value) and "\n" not in str(e.value)


def test_tensor_parallel_needs_vllm_before_anything_is_written(tmp_path):
    from engine import models
    from engine.generation import GenConfig, run_generation
    from engine.tasks.datasets import load_dataset
    from engine.testing import tiny_lm

    db = tmp_path / "x.duckdb"
    lm = models.from_objects("tiny", *tiny_lm(0))
    demo = load_dataset("demo")  # run_generation takes a loaded dataset (generation never imports tasks)
    for tp, words in ((2, "needs a backend with tensor parallelism"), (0, "integer >= 1")):
        with pytest.raises(UserError) as e:
            run_generation(
                db, [lm], demo, 1, cfg=GenConfig(max_new_tokens=2), tensor_parallel=tp, show_bar=False
            )
        assert words in str(e.value)
    assert not db.exists()


def test_orphan_trace_directories_are_removed(tmp_path):
    """A killed backend's directory (its pid gone) is removed by the next backend's sink; a live
    one's is not."""
    import subprocess
    import sys

    from engine.generation.vllm_traces import SINK_PREFIX, TraceSink

    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    orphan = tmp_path / f"{SINK_PREFIX}{int(dead.stdout)}-abc"
    orphan.mkdir()
    (orphan / "keys-x.pt").write_bytes(b"0" * 100)
    live = TraceSink(root=tmp_path)
    try:
        assert not orphan.exists() and live.path.exists() and live.path.parent == tmp_path
        other = TraceSink(root=tmp_path)  # this process is alive: its first sink stays
        assert live.path.exists()
        other.close()
    finally:
        live.close()


def test_scoped_env_restores_what_was_there(monkeypatch):
    import os

    from engine.generation.vllm_backend import _scoped_env

    monkeypatch.setenv("CE_TEST_A", "user")
    monkeypatch.delenv("CE_TEST_B", raising=False)
    with pytest.raises(RuntimeError):
        with _scoped_env({"CE_TEST_A": "0|1", "CE_TEST_B": "4"}):
            assert (os.environ["CE_TEST_A"], os.environ["CE_TEST_B"]) == ("0|1", "4")
            raise RuntimeError("engine build failed")
    assert os.environ["CE_TEST_A"] == "user" and "CE_TEST_B" not in os.environ
