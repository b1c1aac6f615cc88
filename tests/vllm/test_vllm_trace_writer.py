"""Step records from another process: the worker's writer thread and the backend's
wait for late records (engine.generation.vllm_traces: write_later, FinishedRequests). Needs no vLLM:
runs in the main environment and in the vLLM one.

* a worker-mode apply_rows returns before its records are written (the writer made slow), and the
  backend's FinishedRequests waits for them and gets exactly the records an in-process apply makes;
* a request whose records stay incomplete raises MissingRecords naming it and its missing steps
  after the timeout (never a trace with holes); a record naming another token waits for a later
  frame (last wins) and, if none comes, raises the mismatch; the engine check ends the wait early;
* a worker process that exits normally (spawned, or forked as vLLM's CPU workers are) has written
  everything it handed to its writer thread (atexit / multiprocessing's exit drain).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest
import torch

from engine.generation import vllm_traces as vt
from engine.generation.vllm_sampler import RowArgs, SlotTable, apply_rows, forget_device_keys
from engine.generation.vllm_traces import (
    TOKEN_KEYS,
    TRACES,
    FinishedRequests,
    MissingRecords,
    StepTrace,
    TraceSink,
    drain_writes,
    flush_pending,
    write_records,
)
from engine.sampling import noise

V = 30


@pytest.fixture
def sink():
    s = TraceSink()
    s.put_keys("wk", torch.arange(V) * 7)
    yield s
    assert drain_writes()
    TRACES.clear()
    s.close()


def _table(n: int, sink_path: str, origin: int, kid: str = "wk") -> SlotTable:
    table = SlotTable()
    for j in range(n):
        table.set(
            j, RowArgs(f"q{j}", 13, noise.unit_key("w", j), 0.9, 0, 1.0, 3, kid, sink_path, origin)
        )
    return table


def _apply_steps(table: SlotTable, n: int, steps: range, seed: int = 0) -> list[torch.Tensor]:
    """apply_rows over ``steps`` for rows 0..n-1 (slot j = row j); the modified logits of each step."""
    outs = []
    for s in steps:
        logits = torch.randn(n, V, generator=torch.Generator().manual_seed(seed + s))
        apply_rows(logits, table, np.arange(n), np.arange(n), np.full(n, s, dtype=np.int64))
        outs.append(logits)
    return outs


def _records(n_steps: int, tag: str, tokens: list[int]) -> list[tuple]:
    return [(tag, s, tokens[s], 0.5, (), (), ()) for s in range(n_steps)]


def test_worker_apply_does_not_wait_for_a_slow_writer_and_the_backend_waits_for_it(sink, monkeypatch):
    """The writer thread is held back (its conversion waits for an event): apply_rows in worker
    mode still returns, nothing is in the files yet, the backend's non-blocking read keeps the
    requests waiting without error, and its blocking read returns them once the writer is released:
    the same records an in-process processor makes for the same rows (origin = this pid)."""
    release = threading.Event()
    real = vt.PendingRecords.as_tuples

    def held_as_tuples(self):
        release.wait(30)
        return real(self)

    monkeypatch.setattr(vt.PendingRecords, "as_tuples", held_as_tuples)
    monkeypatch.setattr(vt, "TOKEN_KEYS", {})  # as in a worker: the keys only in the sink
    n, steps = 4, range(3)
    t0 = time.monotonic()
    outs = _apply_steps(_table(n, str(sink.path), -1), n, steps)
    assert time.monotonic() - t0 < 25 and not release.is_set()  # no step waited for the writer
    assert sink.poll() == 0  # nothing written yet
    forget_device_keys("wk")
    tokens = {f"q{j}": [int(o[j].argmax()) for o in outs] for j in range(n)}
    done = FinishedRequests(sink, timeout_s=30)
    for j in range(n):
        done.add(f"q{j}", ("w", j), tokens[f"q{j}"])
    assert done.ready() == [] and len(done) == n  # the writer is behind: not ready, no error
    threading.Timer(0.3, release.set).start()
    t1 = time.monotonic()
    got = []
    while len(done):
        got += done.ready(block=True)
    assert time.monotonic() - t1 >= 0.25  # it waited for the writer
    assert [g[0] for g in got] == [f"q{j}" for j in range(n)]  # in finish order
    monkeypatch.undo()
    TOKEN_KEYS["wk"] = torch.arange(V) * 7
    try:  # the same rows in the backend's process
        _apply_steps(_table(n, str(sink.path), os.getpid()), n, steps)
        flush_pending()
    finally:
        TOKEN_KEYS.pop("wk", None)
        forget_device_keys("wk")
    for tag, unit, toks, recs in got:
        assert unit == ("w", int(tag[1:]))
        assert toks == tokens[tag] and [r.token for r in recs] == toks
        assert recs == [TRACES[tag][s] for s in steps]
        assert len(recs[0].top_ids) == 3 and len(recs[0].top_gumbels) == 3


def test_incomplete_records_raise_after_the_timeout_naming_the_missing_steps(sink):
    tokens = [5, 6, 7, 8, 9, 10, 11, 12]
    write_records(str(sink.path), [r for r in _records(8, "late", tokens) if r[1] in (0, 1, 2, 4)])
    done = FinishedRequests(sink, timeout_s=0.3)
    done.add("late", ("p", 1, 42), tokens)
    checks = []
    t0 = time.monotonic()
    with pytest.raises(MissingRecords) as e:
        done.ready(block=True, check=lambda: checks.append(1))
    assert time.monotonic() - t0 >= 0.3
    msg = str(e.value)
    assert "late" in msg and "('p', 1, 42)" in msg and "lack steps 3, 5-7 of its 8 tokens" in msg
    assert str(sink.path) in msg and checks  # the engine check ran while it waited


def test_the_engine_check_ends_the_wait(sink):
    done = FinishedRequests(sink, timeout_s=60)
    done.add("gone", ("p", 0, 1), [3, 4])

    def dead():
        raise RuntimeError("engine died")

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="engine died"):
        done.ready(block=True, check=dead)
    assert time.monotonic() - t0 < 5


def test_a_stale_record_waits_for_the_later_frame_then_raises_the_mismatch(sink):
    """Step 1 first recorded with another token (a step recomputed later): the request waits; the
    later frame overwrites it (last wins) and the request is ready. Without one: the mismatch."""
    tokens = [5, 6, 7]
    write_records(
        str(sink.path),
        [("r", 0, 5, 0.5, (), (), ()), ("r", 1, 99, 0.1, (), (), ()), ("r", 2, 7, 0.5, (), (), ())],
    )
    done = FinishedRequests(sink, timeout_s=30)
    done.add("r", ("p", 0, 1), tokens)
    assert done.ready() == []
    threading.Timer(0.2, write_records, (str(sink.path), [("r", 1, 6, 0.25, (), (), ())])).start()
    [(tag, _, _, recs)] = done.ready(block=True)
    assert tag == "r" and [r.token for r in recs] == tokens and recs[1].prob == 0.25
    write_records(str(sink.path), [("s", 0, 5, 0.5, (), (), ()), ("s", 1, 99, 0.1, (), (), ())])
    done = FinishedRequests(sink, timeout_s=0.2)
    done.add("s", ("p", 0, 2), [5, 6])
    with pytest.raises(
        MissingRecords, match="vLLM chose token 6 at step 1 of .* recorded StepTrace.*token=99"
    ):
        done.ready(block=True)


def test_in_process_records_are_complete_at_once():
    """In the backend's process (no sink) a missing record is a bug: raised without waiting."""
    TRACES["i"] = {0: StepTrace(4, 0.5)}
    done = FinishedRequests(None, timeout_s=60)
    done.add("i", ("p", 0, 1), [4, 2])
    t0 = time.monotonic()
    with pytest.raises(MissingRecords, match="vLLM chose token 2 at step 1 .* recorded None"):
        done.ready(block=True)
    assert time.monotonic() - t0 < 1
    TRACES["j"] = {0: StepTrace(4, 0.5), 1: StepTrace(2, 0.25)}
    done = FinishedRequests(None)
    done.add("j", ("p", 0, 2), [4, 2])
    [(tag, unit, toks, recs)] = done.ready()
    assert (tag, unit, toks, [r.prob for r in recs]) == ("j", ("p", 0, 2), [4, 2], [0.5, 0.25])
    TRACES.clear()


def _worker_exits(sink_path: str, n: int, steps: int) -> None:
    """A worker process: keys from the sink, records to its writer thread, which is held until every
    step has been applied, so that it is far behind when the process ends normally (no explicit
    drain), however loaded the machine (a sleep per record was not enough under load)."""
    import threading

    real = vt.PendingRecords.as_tuples
    applied = threading.Event()

    def held(self):
        applied.wait(60)
        return real(self)

    vt.PendingRecords.as_tuples = held  # type: ignore[method-assign]
    _apply_steps(_table(n, sink_path, -1), n, range(steps))
    assert vt._WRITER is not None and vt._WRITER.queue.qsize() > steps // 2  # a backlog at the exit
    applied.set()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_a_worker_that_exits_has_written_everything(sink, method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method on this platform")
    p = multiprocessing.get_context(method).Process(target=_worker_exits, args=(str(sink.path), 3, 40))
    p.start()
    p.join(120)
    assert p.exitcode == 0
    assert sink.poll() == 40 and sorted(TRACES) == ["q0", "q1", "q2"]
    assert all(sorted(TRACES[t]) == list(range(40)) for t in TRACES)
