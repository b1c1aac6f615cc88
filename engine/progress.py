"""Live progress of a long job, written as a small JSON file (atomically) and shown as a bar.

Progress never goes through DuckDB (a writer holds its lock), so any number of readers (the
dashboard in several tabs, ``python -m engine jobs``) can watch a job without blocking it.

File format (one JSON object)::

    {"job": str, "kind": str, "status": "running"|"done"|"failed"|"cancelled",
     "done": int, "total": int, "tokens": int, "tokens_per_s": float, "eta_s": float|null,
     "message": str, "pid": int, "started_at": float, "updated_at": float,
     "workers": {name: {"done": int, "tokens": int, "tokens_per_s": float}}}  # distributed runs only
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tqdm import tqdm


def write_json_atomic(path: str | os.PathLike, obj: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def read_progress(path: str | os.PathLike) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class Progress:
    """Units done, tokens/s and ETA, to a tqdm bar on stderr and (optionally) a JSON file."""

    def __init__(
        self,
        total: int,
        *,
        kind: str = "job",
        job: str = "",
        path: str | os.PathLike | None = None,
        done: int = 0,
        show_bar: bool = True,
        min_interval_s: float = 0.5,
    ):
        self.total, self.done, self.tokens = int(total), int(done), 0
        self.kind, self.job, self.path = kind, job, path
        self.started = time.time()
        self._done_at_start = int(done)
        self.workers: dict[str, dict] = {}  # per replica of a distributed run: units and tokens it made
        self.stats: dict = {}  # job-specific live counters (an API judge: requests/s, retries, tokens)
        self._last_write = 0.0
        self.min_interval_s = min_interval_s
        self.bar = tqdm(
            total=total,
            initial=done,
            desc=kind,
            unit="unit",
            file=sys.stderr,
            disable=not show_bar,
            dynamic_ncols=True,
        )
        self._write("running", "", force=True)

    def tokens_per_s(self) -> float:
        dt = time.time() - self.started
        return self.tokens / dt if dt > 0 else 0.0

    def eta_s(self) -> float | None:
        new = self.done - self._done_at_start
        if new <= 0:
            return None
        rate = new / max(time.time() - self.started, 1e-9)
        return (self.total - self.done) / rate

    def update(self, units: int, tokens: int = 0, message: str = "", worker: str | None = None) -> None:
        self.done += units
        self.tokens += tokens
        if worker is not None:
            w = self.workers.setdefault(worker, {"done": 0, "tokens": 0})
            w["done"] += units
            w["tokens"] += tokens
        self.bar.update(units)
        self.bar.set_postfix(tok_s=f"{self.tokens_per_s():.1f}")
        self._write("running", message)

    def finish(self, status: str = "done", message: str = "") -> None:
        self.bar.close()
        self._write(status, message, force=True)

    @contextmanager
    def track(self, cancelled_message: str = "interrupted") -> Iterator[Progress]:
        """Finish as 'done' when the block ends, 'cancelled' on Ctrl-C / SIGTERM, 'failed' (with
        the error) on any other exception; exceptions propagate."""
        try:
            yield self
        except KeyboardInterrupt:
            self.finish("cancelled", cancelled_message)
            raise
        except BaseException as exc:
            self.finish("failed", str(exc)[:500])
            raise
        self.finish("done")

    def _write(self, status: str, message: str, force: bool = False) -> None:
        if self.path is None:
            return
        now = time.time()
        if not force and now - self._last_write < self.min_interval_s:
            return
        self._last_write = now
        dt = max(now - self.started, 1e-9)
        extra = (
            {"workers": {k: {**w, "tokens_per_s": w["tokens"] / dt} for k, w in self.workers.items()}}
            if self.workers
            else {}
        )
        if self.stats:
            extra["stats"] = dict(self.stats)
        write_json_atomic(
            self.path,
            {
                "job": self.job,
                "kind": self.kind,
                "status": status,
                "done": self.done,
                "total": self.total,
                "tokens": self.tokens,
                "tokens_per_s": self.tokens_per_s(),
                "eta_s": self.eta_s(),
                "message": message,
                "pid": os.getpid(),
                "started_at": self.started,
                "updated_at": now,
                **extra,
            },
        )
