"""One driver per run: an exclusive lock file next to the database, with the driver's pid, host and
a heartbeat, so that a second resume refuses to start and a reader can tell a dead run.

    <db>.runs/<run_id>.lock      JSON {"run_id", "pid", "host", "started_at", "command"} while held;
                                 its modification time is the heartbeat (touched every
                                 ``HEARTBEAT_S`` seconds by a thread while the driver lives)

* The lock is ``fcntl.flock`` (released by the kernel when the process dies, SIGKILL included),
  so a dead driver never blocks a resume. A driver that created the lock file removes it when it
  ends (a refused or finished run leaves no ``.lock`` behind), while still holding the lock; a
  driver that got the lock checks that its descriptor is still the file at the path (else it
  retries), so two drivers never hold two different files.
* A run whose row says 'running' is stale (its driver died: SIGKILL, OOM, power) when its lock
  file is missing or empty, or when the driver's host is this machine and nobody holds the lock
  (a non-blocking shared-lock probe; not the pid, which the system may have given to another
  process since), or (another host) when the heartbeat is older than ``STALE_AFTER_S``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from engine.errors import UserError
from engine.store.files import write_failure

try:  # POSIX; without it (Windows) runs are not locked and staleness uses the heartbeat alone
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

HEARTBEAT_S = 15.0  # how often a live driver touches its lock file
STALE_AFTER_S = 120.0  # a heartbeat older than this (driver on another host) marks a dead run
ACQUIRE_TRIES = (
    10  # a driver retries the lock this often, 0.1 s apart (a reader's probe holds it briefly)
)


def lock_path(db: str | os.PathLike, run_id: str) -> Path:
    db = Path(db)
    return db.with_name(db.name + ".runs") / f"{run_id}.lock"


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists on this machine (possibly another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # exists, another user's / not a pid we can ask about
        return True
    return True


def _lock_held(path: Path) -> bool | None:
    """Whether some process holds the run lock (a non-blocking shared-lock probe, released at
    once); None where flock cannot tell (no fcntl, an unreadable file)."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def read_lock(db: str | os.PathLike, run_id: str) -> dict | None:
    """The lock file's content plus ``heartbeat_at`` (its mtime), or None when absent / empty."""
    return _read_info(lock_path(db, run_id))


def _read_info(p: Path) -> dict | None:
    try:
        text = p.read_text()
        mtime = p.stat().st_mtime
    except OSError:
        return None
    try:
        info = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return None
    return {**info, "heartbeat_at": mtime} if isinstance(info, dict) else None


def is_stale(db: str | os.PathLike, run_id: str, now: float | None = None) -> bool:
    """True when no live driver holds ``run_id`` (only meaningful for runs stored as 'running')."""
    info = read_lock(db, run_id)
    if info is None:
        return True
    if info.get("host") == socket.gethostname():
        held = _lock_held(lock_path(db, run_id))
        return not held if held is not None else not pid_alive(int(info.get("pid", -1)))
    return (now or time.time()) - float(info["heartbeat_at"]) > STALE_AFTER_S


class RunLock:
    """Hold the run lock for the ``with`` block (the driver's lifetime); UserError if another driver has
    it."""

    def __init__(
        self,
        db: str | os.PathLike,
        run_id: str,
        command: list[str] | None = None,
        *,
        name: str | None = None,
        busy: str | None = None,
    ):
        """``name``: the lock file's stem (default ``run_id``), e.g. one lock per (run, judge);
        ``busy``: the refusal's start (default "run RUN is already being generated")."""
        self.db, self.path, self.run_id, self.command = (
            db,
            lock_path(db, name or run_id),
            run_id,
            command,
        )
        self.busy = busy or f"run {run_id} is already being generated"
        self.fd: int | None = None
        self._created = self._made_dir = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RunLock:
        try:  # next to the database, whose folder exists
            self._made_dir = not self.path.parent.exists()
            self.path.parent.mkdir(exist_ok=True)
        except (
            OSError
        ) as exc:  # a read-only or unwritable folder, a full disk: one line, nothing written
            raise (
                write_failure(self.db, exc)
                or UserError(
                    f"cannot create the run lock {self.path} ({exc.strerror or exc}); nothing was "
                    "written"
                )
            ) from None
        for attempt in range(ACQUIRE_TRIES):
            fd, self._created = self._open()
            if fcntl is None:
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if attempt + 1 < ACQUIRE_TRIES:  # maybe a reader's staleness probe: try again
                    time.sleep(0.1)
                    continue
                info = _read_info(self.path) or {}
                raise UserError(
                    f"{self.busy} by pid {info.get('pid', '?')} "
                    f"on {info.get('host', '?')}; wait for it or cancel it"
                ) from None
            if self._same_file(fd):
                break
            os.close(fd)  # the previous holder removed the file after we opened it: take the new one
        os.ftruncate(fd, 0)
        os.write(
            fd,
            json.dumps(
                {
                    "run_id": self.run_id,
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "started_at": time.time(),
                    "command": self.command,
                }
            ).encode(),
        )
        os.fsync(fd)
        self.fd = fd
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{self.run_id}", daemon=True)
        self._thread.start()
        return self

    def _open(self) -> tuple[int, bool]:
        """(fd, whether this call created the file)."""
        try:
            try:
                return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                return os.open(self.path, os.O_RDWR), False
        except FileNotFoundError:  # removed between the two opens: create it
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), True
        except OSError as exc:
            raise (
                write_failure(self.db, exc)
                or UserError(
                    f"cannot create the run lock {self.path} ({exc.strerror or exc}); nothing was "
                    "written"
                )
            ) from None

    def _same_file(self, fd: int) -> bool:
        """Whether the locked descriptor is still the file at ``self.path`` (a driver that removes
        its lock file does so while holding the lock, so a waiter must check it got the live one)."""
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.beat()

    def beat(self) -> None:
        """Touch the heartbeat now (the driver also calls this after each stored chunk)."""
        try:
            os.utime(self.path)
        except OSError:
            pass

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.fd is not None:
            os.ftruncate(self.fd, 0)  # empty: nobody is generating this run
            if self._created:  # a lock this driver created goes (e.g. a refused Ray run leaves nothing)
                with contextlib.suppress(OSError):
                    os.unlink(self.path)  # while still holding the lock: see _same_file
                if self._made_dir:
                    with contextlib.suppress(OSError):
                        self.path.parent.rmdir()  # only when empty
            if fcntl is not None:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


_HELD: set[tuple[str, str, str]] = set()  # the judge locks this process holds (re-entered freely)


@contextlib.contextmanager
def judge_lock(db, run: str, judge: str) -> Iterator[None]:
    """Hold the lock of (database, run, judge) for the block: ``<db>.runs/judge-<hash>.lock``
    (engine.store.runlock; no command line is written in it, so no argument can leak there).
    Another process holding it is a UserError naming its pid; this process may re-enter it (the
    CLI takes it before its preflight, then ``engine.tasks.judge.judge_run`` inside)."""
    key = (str(Path(db).resolve()), run, judge)
    if key in _HELD:
        yield
        return
    digest = hashlib.sha256(f"{run}\x00{judge}".encode()).hexdigest()[:16]
    with RunLock(
        db, run, None, name=f"judge-{digest}", busy=f"judge {judge!r} on run {run!r} is already running"
    ):
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)


__all__ = [
    "RunLock",
    "judge_lock",
    "lock_path",
    "read_lock",
    "is_stale",
    "pid_alive",
    "HEARTBEAT_S",
    "STALE_AFTER_S",
]
