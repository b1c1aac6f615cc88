"""Serving layer: the served run's one writer (a journal, then group commits on a thread).

A finished request's rows go to the run's journal (:meth:`StoreWriter.submit`: one file write, on
the event loop, before the response is sent); the writer thread commits what the journal gathered
every ``commit_every_s`` seconds in one short transaction (``engine.store.served.HeldWriter``) and
then deletes those journal records. Its connection stays open while batches follow each other (at
most a second at a time, then a gap of 0.12 s: readers retry every 0.1 s at most) and closes once
nothing arrived for ``LINGER_S``: between two holds the file is free for readers (the dashboard
browses the run while it grows, at most one commit behind the answers).

Why a journal and not the commit before the answer: a DuckDB transaction costs ~10 ms of CPU
whatever its size (docs/BENCHMARKS.md, "engine serve"), which a client asking one request at a time
paid on every request; an append costs microseconds. A server killed at any moment has every
completion it answered in DuckDB or in its journal (and none it had not finished; one journaled but
killed before its answer was sent keeps its repeat, as a committed one did before); the next server
on the run stores the journal first (``open_served_run``), so its counters continue where the killed
server's stopped. When a commit fails (a full disk), its rows stay in the journal and in
memory, new requests are refused with the failure (nothing of theirs is journaled), and the thread
tries again every ``RETRY_S``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine import config
from engine.errors import UserError
from engine.store import journal
from engine.store.files import write_failure
from engine.store.generations import GenerationRow, TraceRow
from engine.store.journal import Journal
from engine.store.runs import PromptRow
from engine.store.served import HeldWriter, ServedRow, encode_rows

LINGER_S = 1.0  # an idle writer keeps its connection this long (a client asking one request at a time)
RETRY_S = 1.0  # a failed commit is tried again after this long


@dataclass
class Rows:
    """What one request stores."""

    prompts: list[PromptRow] = field(default_factory=list)
    generations: list[GenerationRow] = field(default_factory=list)
    served: list[ServedRow] = field(default_factory=list)
    traces: list[TraceRow] = field(default_factory=list)


class StoreWriter:
    """The journal and the group-commit thread of one served run."""

    def __init__(
        self,
        db: str | os.PathLike,
        run_id: str,
        after_write: Callable[[], None] | None = None,
        commit_every_s: float = config.SERVE_COMMIT_EVERY_S,
    ):
        self.db, self.run_id, self.after_write = db, run_id, after_write
        self.commit_every_s = commit_every_s
        self._held = HeldWriter(db, run_id)
        self._journal = Journal(db, run_id)
        self._lock = threading.Lock()  # the journal's file and the pending rows
        self._pending: list[Rows] = []  # journaled, not committed yet, in arrival order
        self._wake = threading.Event()
        self._closing = threading.Event()  # set by close: no more gathering or waiting to retry
        self.failure: BaseException | None = None  # the last commit's error, until one succeeds
        self.journaled = 0  # generations journaled by this process
        self.stored = 0  # generations committed by this process
        self.transactions = 0
        self._thread = threading.Thread(target=self._run, name="serve-store", daemon=True)
        self._thread.start()

    def submit(self, rows: Rows) -> None:
        """Journal one request's rows (they survive a kill of the server from here on) for the next
        commit. Raises the store's failure while commits fail, or the journal's OSError (a full disk,
        as a UserError); then nothing of the request is kept."""
        if self.failure is not None:  # a new exception each time: re-raising one grows its traceback
            raise UserError(f"the served run's last commit failed: {self.failure}")
        payload = encode_rows(rows.prompts, rows.generations, rows.served, rows.traces)
        with self._lock:
            try:
                self._journal.append(payload)
            except OSError as exc:
                raise (write_failure(self.db, exc) or exc) from exc
            self._pending.append(rows)
            self.journaled += len(rows.generations)
        self._wake.set()

    def close(self, timeout: float | None = None) -> None:
        """Commit what is waiting, then end the thread."""
        self._closing.set()
        self._wake.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            self._held.release()
            with self._lock:
                self._journal.close()

    def _loop(self) -> None:
        last = 0.0  # when the last commit began
        while True:
            if not self._closing.is_set() and not self._wake.wait(LINGER_S):
                self._held.release()  # idle: the file is free for readers until the next batch
                self._wake.wait()
            self._wake.clear()
            # gather: what arrives meanwhile joins this commit (close ends the wait)
            self._closing.wait(max(0.0, last + self.commit_every_s - time.monotonic()))
            last = time.monotonic()
            with self._lock:  # every record of the segments up to the one closed here is in batch
                batch, self._pending = self._pending, []
                self._journal.rotate()
                through = self._journal.last_closed
            if batch and not self._commit(batch, through):
                with self._lock:
                    self._pending[:0] = batch  # again, before what came since
                if self._closing.wait(RETRY_S):
                    return  # closing: what failed stays in the journal, for the next server on the run
                self._wake.set()
                continue
            if self._closing.is_set():
                with self._lock:  # what arrived during the last commit is committed before the end
                    if not self._pending:
                        return

    def _commit(self, batch: list[Rows], through: int | None) -> bool:
        all_rows = Rows()
        for rows in batch:
            all_rows.prompts += rows.prompts
            all_rows.generations += rows.generations
            all_rows.served += rows.served
            all_rows.traces += rows.traces
        try:
            self._held.write(all_rows.prompts, all_rows.generations, all_rows.served, all_rows.traces)
        except Exception as exc:  # a full disk, a lock held too long: new requests answer it
            self.failure = exc
            return False
        self.failure = None
        if through is not None:
            journal.drop(self.db, self.run_id, through)
        self.stored += len(all_rows.generations)
        self.transactions += 1
        if self.after_write is not None:
            self.after_write()
        return True
