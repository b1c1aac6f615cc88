"""The trace channel of the vLLM backend: how the keyed-Gumbel processor's step records reach the
backend, wherever vLLM runs the processor (docs/METHODS.md 1.3 traces; tensor parallelism:
tests/vllm/test_vllm_tensor_parallel.py).

* In the backend's own process (one device, engine core in-process): the processor appends each
  step's :class:`PendingRecords` to :data:`PENDING` (an asynchronous device -> pinned-host copy on
  CUDA) and reads :data:`TOKEN_KEYS` directly; :func:`flush_pending` moves them into :data:`TRACES`.
* In vLLM's worker processes (tensor parallelism; or a separate engine-core process): the backend's
  :class:`TraceSink` is a private directory (0700, named with the backend's pid). The backend puts
  each ``generate`` call's token keys there (:func:`load_token_keys` reads them once per worker).
  Tensor-parallel rank 0 starts the same asynchronous copy and hands the records to its process's
  writer thread (:func:`write_later`), which waits for the copy (a CUDA event: the GIL is released),
  converts, pickles and appends a frame to its segment files (:func:`write_records`); the step itself
  neither waits nor pickles. :meth:`TraceSink.poll` reads the frames into :data:`TRACES`.

Because the writer runs behind the steps, a request vLLM reports finished may not have all its
records in the directory yet: the backend knows what to expect (a request with n tokens needs steps
0..n-1, each naming vLLM's token) and waits for the rest (:class:`FinishedRequests`, polling), at
most :data:`RECORDS_TIMEOUT_S` from the finish, then raises :class:`MissingRecords` naming the
request and its missing steps (a dead or hung worker never hangs the backend; a trace with holes is
never stored). One writer thread per process writes the frames in step order, so a step recomputed
later still overwrites the earlier record (last wins). The writer drains at the process's exit
(atexit, and multiprocessing's exit for vLLM's forked workers).

Why files and not a queue: the backend reads with plain file reads, and a killed worker leaves
nothing half-shared. Frames are (8-byte little-endian length, pickled list of (tag, step, StepTrace
fields)); a half-written frame is read at the next poll; a segment is deleted once it is read and
its writer has moved to a newer one, so the directory stays a few MiB however long the run.

Imports neither vLLM nor transformers.
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os
import pickle
import queue
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.store.runlock import pid_alive

# In-process tables shared with the logits processor (engine.generation.vllm_processor), which vLLM
# builds itself inside the engine core: token keys by id (a (V,) tensor is too big for every request's
# extra_args), and per request tag {step: StepTrace}. In a vLLM worker process TOKEN_KEYS caches the keys
# read from the trace directory and TRACES stays empty (records go to the directory).
TOKEN_KEYS: dict[str, torch.Tensor] = {}
TRACES: dict[str, dict[int, StepTrace]] = {}
SEGMENT_BYTES = 8 << 20  # a worker starts a new trace segment file after this many bytes
_KEYS_CACHE_MAX = 8  # token keys a worker process keeps (one entry per generate call)
WRITE_QUEUE_STEPS = (
    256  # steps a worker's writer may fall behind before the step waits for it (backpressure)
)
DRAIN_S = 10.0  # at a worker's exit, at most this long for its writer to write what it holds
RECORDS_TIMEOUT_S = 60.0  # how long after a request finished the backend waits for its remote records
POLL_S = 0.005  # the backend's re-read interval while it waits for records


@dataclass(frozen=True)
class StepTrace:
    """What the processor saw at one step of one request."""

    token: int  # argmax of the returned scores = the sampled token
    prob: float  # D_i[token]
    top_ids: tuple[int, ...] = ()  # top-k of D_i (trace_top_k), most likely first
    top_probs: tuple[float, ...] = ()
    top_gumbels: tuple[float, ...] = ()  # empty when T = 0 (no noise)


@dataclass
class PendingRecords:
    """One step's records of one group of rows, on their way to the host.

    ``values`` (R, 2 + 3k) float64: token, probability, then k top ids, k probabilities and (when
    ``gumbels``) k Gumbel values per row. On CUDA :meth:`copy_to_host` starts an asynchronous copy
    into pinned memory and records an event; :func:`flush_pending` waits on it only when the backend
    reads (a finished request: that step's tokens are on the host already, so the wait is nil). In a
    vLLM worker the writer thread waits on it (:func:`write_later`), never the step.
    """

    tags: Any  # (R,) object ndarray of request tags
    steps: Any  # (R,) int64 ndarray of step indices
    values: torch.Tensor
    k: int
    gumbels: bool
    event: Any = None

    def copy_to_host(self) -> PendingRecords:
        """These records with an asynchronous copy to pinned host memory started (CUDA; elsewhere
        ``self``): the caller does not wait. ``values`` is a fresh tensor (no one writes it later)."""
        if self.values.device.type != "cuda":
            return self
        host = torch.empty(self.values.shape, dtype=self.values.dtype, pin_memory=True)
        host.copy_(self.values, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        return PendingRecords(self.tags, self.steps, host, self.k, self.gumbels, ev)

    def as_tuples(self) -> list[tuple]:
        """[(tag, step, StepTrace fields...)] (waits for the copy: off the hot path)."""
        if self.event is not None:
            self.event.synchronize()
        k, out = self.k, []
        for tag, step, row in zip(self.tags.tolist(), self.steps.tolist(), self.values.tolist()):
            ids = tuple(int(x) for x in row[2 : 2 + k])
            probs = tuple(row[2 + k : 2 + 2 * k])
            gs = tuple(row[2 + 2 * k : 2 + 3 * k]) if self.gumbels else ()
            out.append((tag, int(step), int(row[0]), row[1], ids, probs, gs))
        return out


# step records not yet in TRACES, oldest first (a step recomputed later overwrites: last wins)
PENDING: list[PendingRecords] = []


def flush_pending() -> None:
    """Move every pending step record into TRACES (the backend calls it before reading TRACES)."""
    while PENDING:
        for tag, step, *fields in PENDING.pop(0).as_tuples():
            TRACES.setdefault(tag, {})[step] = StepTrace(*fields)


def keys_file(sink: str | Path, kid: str) -> Path:
    return Path(sink) / ("keys-" + kid.replace(":", "_") + ".pt")


def load_token_keys(kid: str, sink: str) -> torch.Tensor | None:
    """The token keys ``kid``: this process's table, else (a vLLM worker) read once from the sink."""
    keys = TOKEN_KEYS.get(kid)
    if keys is None and sink:
        path = keys_file(sink, kid)
        if not path.exists():
            return None
        keys = torch.load(path, weights_only=True)
        while len(TOKEN_KEYS) >= _KEYS_CACHE_MAX:  # one entry per generate call: keep the latest few
            TOKEN_KEYS.pop(next(iter(TOKEN_KEYS)))
        TOKEN_KEYS[kid] = keys
    return keys


class _SegmentWriter:
    """A worker's append-only trace segments: ``<pid>-<segment>.trace``, frames of
    (8-byte little-endian length, pickled list of (tag, step, StepTrace fields))."""

    def __init__(self, sink: str):
        self.sink, self.seg, self.size, self.pid = Path(sink), 0, 0, os.getpid()
        self.f: Any = None

    def write(self, records: list[tuple]) -> None:
        payload = pickle.dumps(records, protocol=pickle.HIGHEST_PROTOCOL)
        frame = memoryview(struct.pack("<Q", len(payload)) + payload)
        if self.f is None or self.size >= SEGMENT_BYTES:
            if self.f is not None:
                self.f.close()  # the reader deletes a segment once a newer one exists and it is read
            self.seg += 1
            self.f = open(self.sink / f"{os.getpid():010d}-{self.seg:08d}.trace", "ab", buffering=0)
            self.size = 0
        while frame:  # unbuffered: once written, the frame is in the file for the backend's next poll
            frame = frame[self.f.write(frame) :]
        self.size += len(payload) + 8


_WRITERS: dict[str, _SegmentWriter] = {}


def write_records(sink: str, records: list[tuple]) -> None:
    """Append one frame of records to this process's current segment in ``sink`` (the writer
    thread's work; synchronous)."""
    w = _WRITERS.get(sink)
    if w is None or w.pid != os.getpid():  # a forked child writes its own segments
        w = _WRITERS[sink] = _SegmentWriter(sink)
    w.write(records)


class _RecordWriter:
    """A worker process's trace writer: a daemon thread taking (sink, PendingRecords) from a bounded
    FIFO queue; for each it waits for the copy (:meth:`PendingRecords.as_tuples`; a CUDA event wait
    releases the GIL), converts, pickles and appends the frame (:func:`write_records`). One thread
    per process keeps the frames in step order (a recomputed step overwrites: last wins)."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue(maxsize=WRITE_QUEUE_STEPS)
        self.errors: dict[str, Exception] = {}  # sink -> its first failed write
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name="coupled-eval-trace-writer", daemon=True)
        self.thread.start()

    def put(self, sink: str, rec: PendingRecords) -> None:
        """Queue one step's records; raises the sink's earlier write failure (the engine then fails
        loudly instead of the backend waiting for records that will never come)."""
        err = self.errors.get(sink)
        if err is not None:
            raise RuntimeError(
                f"writing step records to the trace directory {sink!r} failed: {err!r}"
            ) from err
        self.queue.put((sink, rec))  # waits only when the writer is WRITE_QUEUE_STEPS steps behind

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if isinstance(item, threading.Event):  # a drain marker: everything before it is written
                item.set()
                continue
            sink, rec = item
            if sink in self.errors:
                continue
            try:
                write_records(sink, rec.as_tuples())
            except Exception as exc:  # kept for put() to raise at the next step: a thread cannot
                self.errors[sink] = exc

    def drain(self, timeout_s: float = DRAIN_S) -> bool:
        """Wait until everything queued so far is written (or failed); False after ``timeout_s``."""
        if not self.thread.is_alive():
            return self.queue.empty()
        done = threading.Event()
        try:
            self.queue.put(done, timeout=timeout_s)
        except queue.Full:
            return False
        return done.wait(timeout_s)


_WRITER: _RecordWriter | None = None


def write_later(sink: str, rec: PendingRecords) -> None:
    """Hand one step's records (their copy to the host started: :meth:`PendingRecords.copy_to_host`)
    to this process's writer thread and return at once: no wait, no conversion, no pickling here."""
    global _WRITER
    w = _WRITER
    if w is None or w.pid != os.getpid():  # the first records of this process (or a forked child)
        w = _WRITER = _RecordWriter()
        atexit.register(w.drain)  # a normal exit writes what the thread still holds
        multiprocessing.util.Finalize(
            None, w.drain, exitpriority=10
        )  # vLLM's forked workers skip atexit
    w.put(sink, rec)


def drain_writes(timeout_s: float = DRAIN_S) -> bool:
    """Wait until this process's writer wrote everything handed to it so far (True if none)."""
    return _WRITER is None or _WRITER.drain(timeout_s)


SINK_PREFIX = "coupled-eval-vllm-"


def remove_orphan_sinks(root: str | Path | None = None) -> list[Path]:
    """Delete the trace directories of backends whose process is gone (a SIGKILLed run leaves its
    directory behind: token keys and unread segments, a few MiB). Returns what was removed; a
    directory whose pid is alive (or reused) is left alone."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(SINK_PREFIX + "*"):
        pid = d.name[len(SINK_PREFIX) :].split("-")[0]
        if d.is_dir() and pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class TraceSink:
    """The backend's side of the trace directory: token-key files out, step records in."""

    def __init__(self, root: str | Path | None = None) -> None:
        remove_orphan_sinks(root)
        # 0700: only this user; the pid in the name lets a later backend remove it if we are killed
        self.path = Path(tempfile.mkdtemp(prefix=f"{SINK_PREFIX}{os.getpid()}-", dir=root))
        self.offsets: dict[str, int] = {}

    def put_keys(self, kid: str, keys: torch.Tensor) -> None:
        tmp = keys_file(self.path, kid).with_suffix(".tmp")
        torch.save(keys, tmp)
        tmp.replace(keys_file(self.path, kid))  # atomic: a worker never reads half a file

    def drop_keys(self, kid: str) -> None:
        keys_file(self.path, kid).unlink(missing_ok=True)

    def poll(self) -> int:
        """Read every complete frame written since the last poll into TRACES; returns frames read."""
        files = sorted(self.path.glob("*.trace"))  # by (pid, segment): a worker's segments in order
        n = 0
        for i, path in enumerate(files):
            off = self.offsets.get(path.name, 0)
            with open(path, "rb") as f:
                f.seek(off)
                data = f.read()
            pos = 0
            while pos + 8 <= len(data):
                size = struct.unpack_from("<Q", data, pos)[0]
                if pos + 8 + size > len(data):
                    break  # a frame still being written: read it next time
                for tag, step, *fields in pickle.loads(data[pos + 8 : pos + 8 + size]):
                    TRACES.setdefault(tag, {})[step] = StepTrace(*fields)
                pos += 8 + size
                n += 1
            self.offsets[path.name] = off + pos
            newer = i + 1 < len(files) and files[i + 1].name.split("-")[0] == path.name.split("-")[0]
            if newer and pos == len(data):  # the worker moved on and everything is read
                path.unlink(missing_ok=True)
                self.offsets.pop(path.name, None)
        return n

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class MissingRecords(RuntimeError):
    """A finished request's step records are incomplete, or name other tokens than vLLM's."""


@dataclass
class _Finished:
    unit: Any  # what the error messages name (the backend's (prompt, repeat, seed))
    tokens: list[int]  # vLLM's generated tokens: steps 0..n-1 are expected
    since: float  # time.monotonic() when vLLM reported it finished
    steps: dict[int, StepTrace] = field(default_factory=dict)


def _ranges(steps: list[int]) -> str:
    """[3, 5, 6, 7] -> '3, 5-7'."""
    out: list[str] = []
    for s in steps:
        if out and s == int(out[-1].split("-")[-1]) + 1:
            out[-1] = out[-1].split("-")[0] + f"-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


class FinishedRequests:
    """Requests vLLM reported finished, each waiting for its step records.

    A request with n generated tokens needs the records of steps 0..n-1, each naming vLLM's token.
    In the backend's process (``sink`` None) they are all there once :func:`flush_pending` ran, so a
    missing or different one is a bug, raised at once. From a worker (``sink``) they arrive a little
    after the tokens (the writer thread runs behind the steps): each read polls the sink, and a
    request waits until its records are complete, at most ``timeout_s`` after it finished; a record
    naming another token waits too (a later frame may overwrite it: last wins). Then
    :class:`MissingRecords`, naming the request and its missing steps.
    """

    def __init__(self, sink: TraceSink | None, timeout_s: float = RECORDS_TIMEOUT_S) -> None:
        self.sink = sink
        self.timeout_s = timeout_s if sink is not None else 0.0
        self.waiting: dict[str, _Finished] = {}

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, tag: str, unit: Any, tokens: list[int]) -> None:
        self.waiting[tag] = _Finished(unit, tokens, time.monotonic())

    def ready(
        self, block: bool = False, check: Callable[[], None] | None = None
    ) -> list[tuple[str, Any, list[int], list[StepTrace]]]:
        """(tag, unit, tokens, the records of steps 0..n-1) of each finished request whose records
        are all here, in finish order; removed from the waiting ones.

        Args:
            block: wait (re-reading every POLL_S) until at least one is ready, if any waits.
            check: called between re-reads (the backend's: raises when its engine died).
        Raises:
            MissingRecords: a request still incomplete ``timeout_s`` after it finished.
        """
        while True:
            out = self._collect()
            if out or not block or not self.waiting:
                return out
            if check is not None:
                check()
            time.sleep(POLL_S)

    def _collect(self) -> list[tuple[str, Any, list[int], list[StepTrace]]]:
        if not self.waiting:
            return []
        if self.sink is not None:
            self.sink.poll()
        flush_pending()
        now, out = time.monotonic(), []
        for tag, f in list(self.waiting.items()):
            f.steps.update(TRACES.pop(tag, {}))  # later frames overwrite earlier ones: last wins
            got = [f.steps.get(s) for s in range(len(f.tokens))]
            if all(rec is not None and rec.token == t for t, rec in zip(f.tokens, got)):
                out.append(
                    (tag, f.unit, f.tokens, [rec for rec in got if rec is not None])
                )  # all of them
                del self.waiting[tag]
            elif now - f.since >= self.timeout_s:
                raise MissingRecords(self._why(tag, f, got))
        return out

    def _why(self, tag: str, f: _Finished, got: list[StepTrace | None]) -> str:
        missing = [s for s, rec in enumerate(got) if rec is None]
        if missing and self.sink is not None:
            return (
                f"the step records of request {tag} (unit {f.unit}) lack steps {_ranges(missing)} of "
                f"its {len(f.tokens)} tokens {self.timeout_s:g} s after vLLM finished it: the "
                f"tensor-parallel rank-0 worker that writes them to {str(self.sink.path)!r} is slow, "
                "hung or gone"
            )
        s = next(s for s, (t, rec) in enumerate(zip(f.tokens, got)) if rec is None or rec.token != t)
        return (
            f"vLLM chose token {f.tokens[s]} at step {s} of {f.unit} but the coupled logits processor "
            f"recorded {got[s]}: the step count or row mapping is wrong"
        )


__all__ = [
    "PENDING",
    "PendingRecords",
    "flush_pending",
    "TOKEN_KEYS",
    "TRACES",
    "StepTrace",
    "TraceSink",
    "load_token_keys",
    "write_records",
    "keys_file",
    "write_later",
    "drain_writes",
    "FinishedRequests",
    "MissingRecords",
    "RECORDS_TIMEOUT_S",
    "remove_orphan_sinks",
    "SINK_PREFIX",
    "SEGMENT_BYTES",
]
