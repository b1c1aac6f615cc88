"""Serving layer: what a model's worker is on every backend (the transformers loop's
:class:`~engine.serving.worker.ModelWorker`, vLLM's :class:`~engine.serving.vllm_worker.VllmWorker`):
one thread, an inbox that other threads submit choices to, and the counters the server reads.
"""

from __future__ import annotations

import collections
import threading

from engine.serving.seq import Seq


class WorkerThread:
    """The thread plumbing of a model's worker. A backend's worker sets its own fields, then calls
    :meth:`_start` last in its ``__init__``, and implements ``_run`` (its thread: wait on ``_cv``
    for choices, :meth:`_take` them, generate, end each with :meth:`_done`)."""

    name: str

    def _start(self, thread_name: str) -> None:
        self._inbox: collections.deque[Seq] = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        self.tokens = 0  # generated so far (progress line)
        self.running = 0  # choices in the batch (or inside the engine)
        self.outstanding = 0  # choices submitted and not finished
        self._count = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        raise NotImplementedError

    # ---- other threads
    def submit(self, seqs: list[Seq]) -> None:
        with self._cv:
            if self._closing:
                raise RuntimeError(f"the worker of {self.name} is closed")
            self._inbox.extend(seqs)
            self._cv.notify()
        with self._count:
            self.outstanding += len(seqs)

    @property
    def queued(self) -> int:
        return len(self._inbox)

    def close(self, timeout: float | None = None) -> None:
        """Finish what was submitted, then end the thread."""
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join(timeout)

    # ---- the worker thread
    def _take(self) -> list[Seq]:
        with self._cv:
            out = list(self._inbox)
            self._inbox.clear()
            return out

    def _done(self, s: Seq) -> None:
        """A choice's end (its ``finish`` set): counted, then its ``on_done``."""
        with self._count:
            self.tokens += len(s.ids)
            self.outstanding -= 1
        s.on_done(s)
