"""The trace channel of the vLLM backend: how the keyed-Gumbel processor's step records reach the
backend, wherever vLLM runs the processor (docs/METHODS.md 1.3 traces; issue 11's tensor parallelism).

* In the backend's own process (one device, engine core in-process): the processor writes
  :data:`TRACES` directly and reads :data:`TOKEN_KEYS` directly.
* In vLLM's worker processes (tensor parallelism; or a separate engine-core process): the backend's
  :class:`TraceSink` is a private directory (0700, named with the backend's pid). The backend puts
  each ``generate`` call's token keys there (:func:`load_token_keys` reads them once per worker);
  tensor-parallel rank 0 appends frames of step records to its segment files
  (:func:`write_records`), and :meth:`TraceSink.poll` reads them into :data:`TRACES`.

Why files and not a queue: a worker writes a step's records before it returns that step's tokens,
so when vLLM reports a request finished, its records are already in the file: a plain read, no
thread, no wait. Frames are (8-byte little-endian length, pickled list of (tag, step, StepTrace
fields)); a half-written frame is read at the next poll; a segment is deleted once it is read and
its writer has moved to a newer one, so the directory stays a few MiB however long the run.

Imports neither vLLM nor transformers.
"""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.store.runlock import pid_alive

# In-process tables shared with the logits processor (engine.generation.vllm_processor), which vLLM builds
# itself inside the engine core: token keys by id (a (V,) tensor is too big for every request's
# extra_args), and per request tag {step: StepTrace}. In a vLLM worker process TOKEN_KEYS caches the
# keys read from the trace directory and TRACES stays empty (records go to the directory).
TOKEN_KEYS: dict[str, torch.Tensor] = {}
TRACES: dict[str, dict[int, StepTrace]] = {}
SEGMENT_BYTES = 8 << 20  # a worker starts a new trace segment file after this many bytes
_KEYS_CACHE_MAX = 8      # token keys a worker process keeps (one entry per generate call)


@dataclass(frozen=True)
class StepTrace:
    """What the processor saw at one step of one request."""

    token: int                          # argmax of the returned scores = the sampled token
    prob: float                         # D_i[token]
    top_ids: tuple[int, ...] = ()       # top-k of D_i (trace_top_k), most likely first
    top_probs: tuple[float, ...] = ()
    top_gumbels: tuple[float, ...] = ()  # empty when T = 0 (no noise)


@dataclass
class PendingRecords:
    """One step's records of one group of rows, on their way to the host.

    ``values`` (R, 2 + 3k) float64: token, probability, then k top ids, k probabilities and (when
    ``gumbels``) k Gumbel values per row. On CUDA :meth:`copy_to_host` starts an asynchronous copy
    into pinned memory and records an event; :func:`flush_pending` waits on it only when the backend
    reads (a finished request: that step's tokens are on the host already, so the wait is nil).
    """

    tags: Any            # (R,) object ndarray of request tags
    steps: Any           # (R,) int64 ndarray of step indices
    values: torch.Tensor
    k: int
    gumbels: bool
    event: Any = None

    def copy_to_host(self) -> PendingRecords:
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
            ids = tuple(int(x) for x in row[2:2 + k])
            probs = tuple(row[2 + k:2 + 2 * k])
            gs = tuple(row[2 + 2 * k:2 + 3 * k]) if self.gumbels else ()
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
        self.sink, self.seg, self.size = Path(sink), 0, 0
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
        while frame:  # unbuffered: the frame is in the file before the step's tokens leave the worker
            frame = frame[self.f.write(frame):]
        self.size += len(payload) + 8


_WRITERS: dict[str, _SegmentWriter] = {}


def write_records(sink: str, records: list[tuple]) -> None:
    w = _WRITERS.get(sink)
    if w is None:
        w = _WRITERS[sink] = _SegmentWriter(sink)
    w.write(records)


SINK_PREFIX = "coupled-eval-vllm-"


def remove_orphan_sinks(root: str | Path | None = None) -> list[Path]:
    """Delete the trace directories of backends whose process is gone (a SIGKILLed run leaves its
    directory behind: token keys and unread segments, a few MiB). Returns what was removed; a
    directory whose pid is alive (or reused) is left alone."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(SINK_PREFIX + "*"):
        pid = d.name[len(SINK_PREFIX):].split("-")[0]
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
                for tag, step, *fields in pickle.loads(data[pos + 8:pos + 8 + size]):
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



__all__ = ["PENDING", "PendingRecords", "flush_pending",
           "TOKEN_KEYS", "TRACES", "StepTrace", "TraceSink", "load_token_keys", "write_records", "keys_file",
           "remove_orphan_sinks", "SINK_PREFIX", "SEGMENT_BYTES"]
