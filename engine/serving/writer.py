"""Serving layer: the served run's one writer thread (group commit).

Finished requests hand their rows over (:meth:`StoreWriter.submit` returns a future); the thread
writes everything waiting in one short transaction (``engine.store.served.HeldWriter``), then
resolves the futures. Its connection stays open while batches follow each other (at most a second
at a time, then a gap of 0.12 s: readers retry every 0.1 s at most) and closes once nothing arrived
for ``LINGER_S``: between two holds the file is free for readers (the dashboard browses the run
while it grows).

A response is sent only after its rows are committed, so a server killed at any moment has stored
every completion it answered and none it did not: a restart's counters then give a retried request
the repeat it would have had.
"""

from __future__ import annotations

import concurrent.futures
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.store.generations import GenerationRow, TraceRow
from engine.store.runs import PromptRow
from engine.store.served import HeldWriter, ServedRow

LINGER_S = 1.0  # an idle writer keeps its connection this long (a client asking one request at a time)


@dataclass
class Rows:
    """What one request stores."""

    prompts: list[PromptRow] = field(default_factory=list)
    generations: list[GenerationRow] = field(default_factory=list)
    served: list[ServedRow] = field(default_factory=list)
    traces: list[TraceRow] = field(default_factory=list)


class StoreWriter:
    """The group-commit thread of one served run."""

    def __init__(
        self, db: str | os.PathLike, run_id: str, after_write: Callable[[], None] | None = None
    ):
        self.db, self.run_id, self.after_write = db, run_id, after_write
        self._held = HeldWriter(db, run_id)
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self.stored = 0  # generations committed by this process
        self.transactions = 0
        self._thread = threading.Thread(target=self._run, name="serve-store", daemon=True)
        self._thread.start()

    def submit(self, rows: Rows) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._q.put((rows, fut))
        return fut

    def close(self, timeout: float | None = None) -> None:
        """Write what is waiting, then end the thread."""
        self._q.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._held.release()

    def _loop(self) -> None:
        while True:
            try:
                item = self._q.get(timeout=LINGER_S)
            except queue.Empty:
                self._held.release()  # idle: the file is free for readers until the next batch
                item = self._q.get()
            if item is None:
                return
            batch = [item]
            stop = False
            while True:  # everything that arrived while the last transaction ran: one transaction
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._write(batch)
            if stop:
                return

    def _write(self, batch: list) -> None:
        all_rows = Rows()
        for rows, _ in batch:
            all_rows.prompts += rows.prompts
            all_rows.generations += rows.generations
            all_rows.served += rows.served
            all_rows.traces += rows.traces
        try:
            self._held.write(all_rows.prompts, all_rows.generations, all_rows.served, all_rows.traces)
        except BaseException as exc:  # a full disk, a lock held too long: each request answers it
            for _, fut in batch:
                fut.set_exception(exc)
            return
        self.stored += len(all_rows.generations)
        self.transactions += 1
        if self.after_write is not None:
            self.after_write()
        for _, fut in batch:
            fut.set_result(None)
