"""Store layer: a served run's journal, the append-only file that lets ``engine serve`` answer a
request before its rows are committed to DuckDB (docs/GENERATION.md, "Serving").

A request's rows are one record, written with one ``os.write`` before the response is sent; a
thread commits the records to DuckDB in batches and then deletes them. A server killed at any moment
(``kill -9``) leaves every answered completion in DuckDB or in its journal, and the next server on
the run stores the journal's records before it counts occurrences (``open_served_run``), so its
counters continue as an uninterrupted server's would. What the journal does not cover: the machine
losing power or the OS crashing before the page cache reaches the disk (no ``fsync`` per request:
that would cost what the journal saves).

Files: ``<db>.runs/<run>.journal-<k>`` (next to the run lock), ``k`` = 0, 1, ...: the writer
starts a new segment when it takes a batch to commit (:meth:`Journal.rotate`), so every record of
the segments up to the one it closed is in that batch or an earlier one, and a committed batch
deletes them (:meth:`Journal.drop`). A record: 4-byte little-endian payload length, 4-byte CRC-32 of
the payload, the payload (JSON). A record cut short by a kill mid-write (never answered: its write
had not returned) ends its segment's readable records.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from pathlib import Path

from engine.store.runlock import lock_path

_HEAD = struct.Struct("<II")  # payload length, CRC-32


def _dir_and_stem(db: str | os.PathLike, run_id: str) -> tuple[Path, str]:
    lock = lock_path(db, run_id)
    return lock.parent, f"{run_id}.journal-"


def segments(db: str | os.PathLike, run_id: str) -> list[tuple[int, Path]]:
    """The run's journal segments on disk, (k, path) in k order."""
    folder, stem = _dir_and_stem(db, run_id)
    if not folder.is_dir():
        return []
    pat = re.compile(re.escape(stem) + r"(\d+)")
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := pat.fullmatch(p.name))]
    return sorted(found)


def frame(payload: bytes) -> bytes:
    """One record: length, CRC-32, payload."""
    return _HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def read_records(path: Path) -> list[bytes]:
    """A segment's whole records in order; a torn or damaged record ends them."""
    data = path.read_bytes()
    out, i = [], 0
    while i + _HEAD.size <= len(data):
        n, crc = _HEAD.unpack_from(data, i)
        payload = data[i + _HEAD.size : i + _HEAD.size + n]
        if len(payload) < n or zlib.crc32(payload) != crc:
            break
        out.append(payload)
        i += _HEAD.size + n
    return out


def drop(db: str | os.PathLike, run_id: str, through: int) -> None:
    """Delete the segments numbered up to ``through`` (their records are committed)."""
    for k, p in segments(db, run_id):
        if k <= through:
            p.unlink(missing_ok=True)


class Journal:
    """The appending side, for one server (the run's only writer, under its run lock). Not
    thread-safe: the caller serialises :meth:`append` and :meth:`rotate`."""

    def __init__(self, db: str | os.PathLike, run_id: str):
        self.db, self.run_id = db, run_id
        self.folder, self._stem = _dir_and_stem(db, run_id)
        have = segments(db, run_id)
        self._k = have[-1][0] + 1 if have else 0  # the segment the next record goes to
        self._fd: int | None = None
        self._size = 0
        self.last_closed: int | None = None  # the newest segment closed by :meth:`rotate`

    def append(self, payload: bytes) -> None:
        """Write one record (one ``os.write``); on a failure (a full disk) the segment is cut back to
        its last whole record and the OSError raised: nothing of this record stays."""
        if self._fd is None:
            self.folder.mkdir(exist_ok=True)
            path = self.folder / f"{self._stem}{self._k}"
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._size = os.fstat(self._fd).st_size
        rec = frame(payload)
        try:
            done = os.write(self._fd, rec)
            while done < len(rec):  # a short write (a signal, a nearly full disk)
                done += os.write(self._fd, rec[done:])
        except OSError:
            os.ftruncate(self._fd, self._size)
            raise
        self._size += len(rec)

    def rotate(self) -> int | None:
        """Close the segment being written and return its number (None when no record was written
        since the last rotation); the next record starts a new segment."""
        if self._fd is None:
            return None
        os.close(self._fd)
        self._fd = None
        k, self._k = self._k, self._k + 1
        self.last_closed = k
        return k

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
