"""The database file before any connection: what a file is (:func:`file_problem`: header, block size,
a torn tail, :func:`pending_wal`), a WAL that is not DuckDB's (:func:`set_aside_foreign_wal`), and the
file system's refusals as one line (:func:`write_failure`: a full disk, a read-only folder)."""

from __future__ import annotations

import errno
import os
import struct
import sys
import time
from pathlib import Path

from engine.errors import UserError

# DuckDB's single-file layout: a 4 KiB main header (checksum, b"DUCK", ...), two 4 KiB database
# headers (checksum, iteration, meta block, free list, block count, block alloc size, ...) that are
# written alternately, then ``block count`` blocks of ``block alloc size`` bytes.
_HEADER_SIZE = 4096
_DATA_START = 3 * _HEADER_SIZE
_MAGIC = b"DUCK"
_FIX = "restore it from a backup or pass another --db"


def _describe_not_duckdb(head: bytes) -> str:
    try:
        text = head[:64].decode("utf-8")
        if text.isprintable() or all(c.isprintable() or c in "\r\n\t" for c in text):
            return f"is a text file (starts {text[:24]!r}), not a DuckDB database"
    except UnicodeDecodeError:
        pass
    return "is not a DuckDB database (no DuckDB header)"


SETTLE_S = 0.3  # how long a file that looks damaged is watched for a writer still at work on it


def file_problem(path: str | os.PathLike, settle_s: float | None = None) -> str | None:
    """Why ``path`` (which exists) is not a healthy DuckDB file, in a few words; None when its header
    and size agree. Reads 12 KiB: cheap enough for every connection.

    This runs before any connection, so without DuckDB's lock: another process may be writing the
    file right then (a checkpoint extends it block by block and cuts trailing free blocks; a new
    database is created empty), and for a moment it looks torn. A problem counts only when the file
    stays the same for ``settle_s`` (re-read every 50 ms): a file that turns healthy, or keeps
    changing, is a live one (DuckDB's own open then waits for its lock or reports what it finds).
    ``settle_s``: None = :data:`SETTLE_S`, read at the call."""
    p = Path(path)
    problem = _file_problem_once(p)
    deadline = time.monotonic() + (SETTLE_S if settle_s is None else settle_s)
    while problem is not None and time.monotonic() < deadline:
        time.sleep(0.05)
        again = _file_problem_once(p)
        if again != problem:  # healthy now, or still changing: a writer is at work
            return None
    return problem


def _file_problem_once(p: Path) -> str | None:
    """:func:`file_problem` for one read of the file (its header and size as they are now)."""
    if p.is_dir():
        return "is a directory, not a database file"
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(_DATA_START)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if size == 0:
        return "is empty (0 bytes), not a DuckDB database"
    if len(head) < 12 or head[8:12] != _MAGIC:
        return _describe_not_duckdb(head)
    if size < _DATA_START:
        return f"is truncated ({size:,} bytes; a DuckDB file has at least {_DATA_START:,})"
    best = None  # the database header with the highest iteration is the live one
    for off in (_HEADER_SIZE, 2 * _HEADER_SIZE):
        iteration, _meta, _free, count, alloc = struct.unpack_from("<5Q", head, off + 8)
        if best is None or iteration > best[0]:
            best = (iteration, alloc, count)
    assert best is not None
    _, alloc, count = best
    if not (4096 <= alloc <= 1 << 30):
        return "has a damaged header (implausible block size)"
    # DuckDB's file is the headers plus whole blocks (trailing free blocks may be cut off, so the
    # header's block count is no lower bound: the blocks tables use are checked after opening). A
    # checkpoint that failed part-way (the disk full; tests/test_disk_full.py) leaves a torn tail BEYOND
    # every block the live header counts, with the committed data still in the WAL: that file is healthy
    # (the next writer replays the WAL and checkpoints), not truncated.
    if (size - _DATA_START) % alloc and size < _DATA_START + count * alloc:
        return f"is truncated ({size:,} bytes is not the headers plus whole {alloc // 1024} KiB blocks)"
    return None


def pending_wal(path: str | os.PathLike) -> str | None:
    """A note when ``path`` has a WAL of committed writes not yet checkpointed into the file (the
    last writer was stopped, or its checkpoint failed, e.g. on a full disk); None otherwise."""
    p = Path(path)
    wal = p.with_name(p.name + ".wal")
    try:
        n = wal.stat().st_size
        torn = (p.stat().st_size - _DATA_START) % _block_alloc(p)
    except (OSError, ZeroDivisionError):
        return None
    if n == 0:
        return None
    why = " after a checkpoint that did not finish (was the disk full?)" if torn else ""
    return f"has a pending WAL ({wal.name}, {n:,} bytes of committed writes{why}); the next write replays it"


def _block_alloc(p: Path) -> int:
    with open(p, "rb") as f:
        head = f.read(_DATA_START)
    best = max(
        (struct.unpack_from("<5Q", head, off + 8) for off in (_HEADER_SIZE, 2 * _HEADER_SIZE)),
        key=lambda h: h[0],
    )
    return int(best[4])


def check_file(path: str | os.PathLike) -> None:
    """UserError (one line: what the file is, what to do) unless ``path`` is absent or looks healthy."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return
    problem = file_problem(p)
    if problem:
        raise UserError(f"database {p} {problem}; nothing was written: {_FIX}")


_DISK_FULL = ("no space left on device", "file too large", "disk quota exceeded")
_READ_ONLY = ("permission denied", "operation not permitted", "read-only file system", "read only")


def write_failure(path: str | os.PathLike, exc: BaseException) -> UserError | None:
    """A write that the file system refused, as one line (None for any other error): a full disk
    (ENOSPC, EFBIG from a file-size limit, EDQUOT) or a read-only / unwritable file, folder or WAL.
    DuckDB reports these as IOException, or TransactionException ("Failed to commit: ...")."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    low, path = msg.lower(), Path(path)
    if (
        isinstance(exc, OSError)
        and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
        or any(k in low for k in _DISK_FULL)
    ):
        return UserError(
            f"the disk is full: database {path} could not be written ({msg}); what was stored "
            "before is kept: free some space and rerun the same command"
        )
    if (
        isinstance(exc, (PermissionError, OSError))
        and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
        or any(k in low for k in _READ_ONLY)
    ):
        return UserError(
            f"database {path} cannot be opened for writing (the file, its folder or its WAL "
            f"{path.name}.wal is read-only: {msg}); nothing was changed: fix the permissions or pass "
            "another --db"
        )
    return None


def open_error(path: Path, exc: Exception, read_only: bool) -> UserError:
    """A DuckDB open failure (not a lock) as one line naming the file and what to do."""
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    refused = write_failure(path, exc)
    if refused is not None:
        return refused
    what = "read" if read_only else "opened"
    return UserError(f"database {path} cannot be {what} ({msg}); nothing was written: {_FIX}")


_WAL_MAGIC = b"d\x00b"  # a DuckDB WAL opens with its WAL_VERSION entry (field 100, entry type 98 = 'b')


def set_aside_foreign_wal(path: str | os.PathLike) -> Path | None:
    """Before a write: a ``NAME.wal`` that is not a DuckDB write-ahead log (DuckDB would silently
    overwrite it on the first commit) is renamed to ``NAME.wal.unreadable-TIMESTAMP`` with one line
    on stderr, so its bytes are kept and the database, which never used it, is written as usual.
    Returns the new name, or None when there was nothing to set aside."""
    path = Path(path)
    wal = path.with_name(path.name + ".wal")
    try:
        with open(wal, "rb") as f:
            head = f.read(len(_WAL_MAGIC))
        size = wal.stat().st_size
    except OSError:
        return None
    if not head or head == _WAL_MAGIC:
        return None
    aside = wal.with_name(f"{wal.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        os.replace(wal, aside)
    except OSError as exc:
        raise write_failure(path, exc) or UserError(
            f"{wal} is not a DuckDB write-ahead log and cannot be moved "
            f"aside ({exc.strerror}); move it yourself"
        ) from None
    print(
        f"warning: {wal} is not a DuckDB write-ahead log ({size:,} bytes, starts {head!r}); moved it to "
        f"{aside} (nothing deleted); database {path} itself is unchanged",
        file=sys.stderr,
    )
    return aside
