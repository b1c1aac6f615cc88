"""The served run's journal (engine/store/journal.py) and its writer thread (engine/serving/writer.py):
records framed and read back exactly, a torn or damaged tail ignored, a failed append leaving nothing,
rows encoded and decoded unchanged, a killed server's journal stored by the next open (once, also
when part of it was committed), and the writer answering before its commit, refusing requests while
commits fail and storing everything once when they succeed again."""

from __future__ import annotations

import errno
import math
import os
import threading
import time

import numpy as np
import pytest

from engine import store
from engine.errors import UserError
from engine.serving import writer as wr
from engine.store import journal
from engine.store import served as srv
from engine.store.generations import TraceRow
from tests.test_serve_keys import _config, _rows


def test_records_are_read_back_and_a_torn_or_damaged_tail_ends_them(tmp_path):
    db = tmp_path / "x.duckdb"
    j = journal.Journal(db, "r")
    for payload in (b"one", b"", b"three" * 100):
        j.append(payload)
    assert j.rotate() == 0 and j.rotate() is None  # nothing written since
    j.append(b"next segment")
    j.close()
    (k0, p0), (k1, p1) = journal.segments(db, "r")
    assert (k0, k1) == (0, 1) and p0.name == "r.journal-0"
    assert journal.read_records(p0) == [b"one", b"", b"three" * 100]
    assert journal.read_records(p1) == [b"next segment"]
    whole = p0.read_bytes()
    p0.write_bytes(whole[:-7])  # a kill mid-write: the last record cut short
    assert journal.read_records(p0) == [b"one", b""]
    damaged = bytearray(whole)
    damaged[8 + 3 + 8 + 8 + 2] ^= 0xFF  # a byte of the third record's payload
    p0.write_bytes(bytes(damaged))
    assert journal.read_records(p0) == [b"one", b""]
    assert journal.frame(b"ab")[8:] == b"ab" and len(journal.frame(b"ab")) == 10
    journal.drop(db, "r", through=0)
    assert [k for k, _ in journal.segments(db, "r")] == [1]
    assert journal.Journal(db, "r")._k == 2  # a new journal never appends to an old segment


def test_a_failed_append_leaves_nothing_of_its_record(tmp_path, monkeypatch):
    """A full disk mid-record: the segment is cut back to its last whole record, so the records
    appended after it are still read (a half record in the middle would end the segment there)."""
    db = tmp_path / "x.duckdb"
    j = journal.Journal(db, "r")
    j.append(b"first")
    real = os.write
    calls = []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal.os, "write", half_then_full)
    with pytest.raises(OSError, match="No space"):
        j.append(b"second, too long for the disk")
    monkeypatch.setattr(journal.os, "write", real)
    j.append(b"third")
    j.close()
    [(_, path)] = journal.segments(db, "r")
    assert journal.read_records(path) == [b"first", b"third"]


def test_rows_round_trip_through_a_record():
    p, g, s = _rows("r", "req-1", [0, 1], text='é\n"quoted"')
    s = [s[0]._replace(probs=[np.float32(0.25), 0.5], logprobs=[-math.inf, -0.5]), s[1]]
    t = [TraceRow("r", "a", "req-1", 0, "coupled", 0, 7, "tok", 0.25, [7, 8], [0.25, 0.5], None)]
    got = srv.decode_rows(srv.encode_rows(p, g, s, t))
    assert got == (p, g, [s[0]._replace(probs=[0.25, 0.5]), s[1]], t)
    assert got[2][0].logprobs[0] == -math.inf and type(got[1][0]) is type(g[0])


def _journal(db, run, *requests) -> None:
    """What a killed server leaves: each request's rows as one record, nothing committed."""
    j = journal.Journal(db, run)
    for rows in requests:
        j.append(srv.encode_rows(*rows))
    j.close()


def test_the_next_open_stores_a_killed_servers_journal_once(tmp_db):
    srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    first, second = _rows("s", "req-1", [0, 1]), _rows("s", "req-2", [0], text="y")
    srv.write_served(tmp_db, "s", *first)  # committed, then killed before its records were deleted
    _journal(tmp_db, "s", first, second)
    units = srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    assert sorted((u.prompt_id, u.repeat) for u in units) == [("req-1", 0), ("req-1", 1), ("req-2", 0)]
    assert journal.segments(tmp_db, "s") == []
    with store.reader(tmp_db) as con:
        assert con.execute("SELECT n_units FROM runs WHERE run_id = 's'").fetchone() == (3,)
        assert con.execute("SELECT count(*) FROM served").fetchone() == (3,)
        assert con.execute(
            "SELECT prompt_id, idx FROM prompts WHERE dataset_id = 'served:s' ORDER BY idx"
        ).fetchall() == [("req-1", 0), ("req-2", 1)]
    assert srv.replay_journal(tmp_db, "s") == 0  # nothing left to store


def _rows_of(run, prompt_id, repeats) -> wr.Rows:
    p, g, s = _rows(run, prompt_id, repeats)
    return wr.Rows(p, g, s)


def _stored(db) -> list[tuple]:
    got = srv.served_rows(db, "s")
    return sorted(zip(got.prompt_id, got.repeat, strict=True))


def _wait(cond, timeout=30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_the_writer_answers_before_its_commit_and_close_commits_the_rest(tmp_db):
    srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    w = wr.StoreWriter(tmp_db, "s", commit_every_s=60)
    w.submit(_rows_of("s", "req-1", [0]))  # the first commit starts at once
    _wait(lambda: w.stored == 1)
    w.submit(_rows_of("s", "req-1", [1]))  # returns at once: the next commit is 60 s away
    w.submit(_rows_of("s", "req-2", [0]))
    assert (w.journaled, w.stored) == (3, 1)
    [(_, path)] = journal.segments(tmp_db, "s")  # the committed first record's segment is gone
    assert len(journal.read_records(path)) == 2
    w.close(timeout=60)
    assert (w.stored, w.transactions) == (3, 2)
    assert _stored(tmp_db) == [("req-1", 0), ("req-1", 1), ("req-2", 0)]
    assert journal.segments(tmp_db, "s") == []


def test_the_writer_refuses_requests_while_commits_fail_then_stores_each_once(tmp_db, monkeypatch):
    srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    monkeypatch.setattr(wr, "RETRY_S", 0.05)
    real, failing = srv.HeldWriter.write, threading.Event()

    def flaky(self, *rows):
        if failing.is_set():
            raise UserError("the disk is full: test")
        return real(self, *rows)

    monkeypatch.setattr(srv.HeldWriter, "write", flaky)
    failing.set()
    w = wr.StoreWriter(tmp_db, "s", commit_every_s=0)
    w.submit(_rows_of("s", "req-1", [0]))
    _wait(lambda: w.failure is not None)
    with pytest.raises(UserError, match="disk is full"):
        w.submit(_rows_of("s", "req-9", [0]))  # refused: nothing of it journaled
    time.sleep(0.2)  # retries fail meanwhile
    failing.clear()
    _wait(lambda: w.failure is None and w.stored == 1)  # a retry stored the journaled request
    w.submit(_rows_of("s", "req-2", [0]))
    w.close(timeout=60)
    assert _stored(tmp_db) == [("req-1", 0), ("req-2", 0)]
    assert (w.journaled, w.stored) == (2, 2) and journal.segments(tmp_db, "s") == []


def test_a_failed_last_commit_leaves_the_journal_for_the_next_server(tmp_db, monkeypatch):
    srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    real = srv.HeldWriter.write
    w = wr.StoreWriter(tmp_db, "s", commit_every_s=60)
    w.submit(_rows_of("s", "req-1", [0]))
    _wait(lambda: w.stored == 1)
    w.submit(_rows_of("s", "req-2", [0, 1]))

    def full(self, *rows):
        raise UserError("the disk is full: test")

    monkeypatch.setattr(srv.HeldWriter, "write", full)
    w.close(timeout=60)  # the final commit fails: its rows stay in the journal
    assert _stored(tmp_db) == [("req-1", 0)] and journal.segments(tmp_db, "s")
    monkeypatch.setattr(srv.HeldWriter, "write", real)
    units = srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    assert len(units) == 3 and _stored(tmp_db) == [("req-1", 0), ("req-2", 0), ("req-2", 1)]


def test_close_commits_what_arrived_during_the_last_commit(tmp_db, monkeypatch):
    """A request journaled while a commit runs, then close: the writer commits it before it ends
    (it once returned after the commit that was running, leaving the request in the journal)."""
    srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    real, entered, release = srv.HeldWriter.write, threading.Event(), threading.Event()

    def slow(self, *rows):
        entered.set()
        release.wait(30)
        return real(self, *rows)

    monkeypatch.setattr(srv.HeldWriter, "write", slow)
    w = wr.StoreWriter(tmp_db, "s", commit_every_s=0)
    w.submit(_rows_of("s", "req-1", [0]))
    assert entered.wait(30)  # the first commit is running
    w.submit(_rows_of("s", "req-2", [0]))
    closing = threading.Thread(target=w.close, kwargs={"timeout": 60})
    closing.start()
    time.sleep(0.1)
    release.set()
    closing.join(60)
    assert (w.stored, w.transactions) == (2, 2)
    assert _stored(tmp_db) == [("req-1", 0), ("req-2", 0)] and journal.segments(tmp_db, "s") == []
