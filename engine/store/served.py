"""Served runs (``engine serve``, docs/METHODS.md 1.6): the run a server writes, its requests' rows,
and the stored units its occurrence counters start from.

A served run is an ordinary run (``runs``, ``datasets`` 'served:RUN', ``prompts``, ``generations``,
``token_traces``) plus one ``served`` row per generation: what the request asked (the question and
its fields, never the key), its response id and choice index, the per-token probabilities and
log-probabilities. The server is the run's only writer; it journals each answered request's rows
(``engine.store.journal``: one file write, before the answer) and commits them in batches, each one
transaction (:class:`HeldWriter`), so DuckDB holds whole completions only, a killed server's
answered completions not yet committed are stored by the next server on the run
(:func:`replay_journal`), and readers get in between two batches.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import duckdb
import pandas as pd

from engine.errors import UserError
from engine.store import journal
from engine.store.db import WRITER_TIMEOUT_S, _connect, insert_df, query_df, transaction, writer
from engine.store.files import write_failure
from engine.store.generations import GenerationRow, TraceRow
from engine.store.runs import (
    DatasetRecord,
    PromptRow,
    create_run,
    record_host,
    stored_config,
    update_status,
)
from engine.store.schema import atomic

SERVED_KIND = "served"  # runs.config["served"] holds the serving settings of a served run


class ServedRow(NamedTuple):
    """One row of ``served`` (``request``: JSON text; ``probs`` / ``logprobs``: one per token)."""

    run_id: str
    model: str
    prompt_id: str
    repeat: int
    mode: str
    request_id: str
    choice_index: int
    endpoint: str
    pinned: bool
    request: str
    prompt_tokens: int
    probs: list[float]
    logprobs: list[float]
    latency_s: float


class StoredUnit(NamedTuple):
    """A stored generation of a served run, as its occurrence counter needs it."""

    model: str
    mode: str
    prompt_id: str
    repeat: int
    seed: int


def dataset_id(run_id: str) -> str:
    """The dataset that holds a served run's prompts."""
    return f"served:{run_id}"


def _merge(prev: dict[str, Any], new: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The stored config of a served run continued by a new server; UserError where they disagree."""
    if SERVED_KIND not in prev:
        raise UserError(
            f"run {run_id!r} exists and is not a served run (made by generate or import); pass "
            "another --run"
        )
    if prev.get("seed") != new.get("seed"):
        raise UserError(
            f"served run {run_id!r} was served with --seed {prev.get('seed')}; this server has "
            f"--seed {new.get('seed')}: use the run's seed or another --run"
        )
    out = dict(prev)
    for key in ("models", "modes"):
        out[key] = list(dict.fromkeys([*(prev.get(key) or []), *(new.get(key) or [])]))
    out[SERVED_KIND] = {**prev[SERVED_KIND], **new[SERVED_KIND]}
    return out


def open_served_run(
    db: str | os.PathLike,
    run_id: str,
    config: dict[str, Any],
    key_mode: str,
    code_version: str,
    host: str,
    warnings: Sequence[str] = (),
) -> list[StoredUnit]:
    """Create the served run, or continue a stored one (same seed and key mode; models and modes
    merged); status 'running'. Stores what a killed server left in the run's journal
    (:func:`replay_journal`), then returns its stored units (the occurrence counters' start)."""
    ds = dataset_id(run_id)
    with transaction(db) as con:
        prev = stored_config(con, run_id)
        if prev is None:
            create_run(con, run_id, ds, config, code_version, key_mode, warnings, 0, host=host)
            con.execute(
                "INSERT OR IGNORE INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, ?, ?, ?)",
                list(DatasetRecord(ds, f"engine serve --run {run_id}", "prompts", 0)),
            )
        else:
            merged = _merge(prev, config, run_id)
            stored_mode = con.execute("SELECT key_mode FROM runs WHERE run_id = ?", [run_id]).fetchall()[
                0
            ][0]
            if stored_mode != key_mode:
                raise UserError(
                    f"served run {run_id!r} keys its noise by {stored_mode}; these models need "
                    f"{key_mode} (their vocabularies differ from the run's): pass another --run"
                )
            con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(merged), run_id])
            update_status(con, run_id, "running")
            record_host(con, run_id, host)
    replay_journal(db, run_id)  # a killed server's answered completions, before the counters
    with writer(db) as con:
        rows = con.execute(
            "SELECT model, mode, prompt_id, repeat, seed FROM generations WHERE run_id = ?", [run_id]
        ).fetchall()
    return [StoredUnit(m, md, p, int(r), int(s)) for m, md, p, r, s in rows]


def encode_rows(
    prompts: Sequence[PromptRow],
    generations: Sequence[GenerationRow],
    served: Sequence[ServedRow],
    traces: Sequence[TraceRow] = (),
) -> bytes:
    """One request's rows as a journal record (JSON: each row a list in its fields' order)."""
    return json.dumps([prompts, generations, served, traces], default=_plain).encode()


def _plain(x: Any) -> Any:
    """numpy scalars and arrays (a backend's probabilities) as JSON values."""
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"cannot journal {type(x).__name__}")


def decode_rows(
    payload: bytes,
) -> tuple[list[PromptRow], list[GenerationRow], list[ServedRow], list[TraceRow]]:
    """The inverse of :func:`encode_rows`."""
    p, g, s, t = json.loads(payload)
    return (
        [PromptRow(*r) for r in p],
        [GenerationRow(*r) for r in g],
        [ServedRow(*r) for r in s],
        [TraceRow(*r) for r in t],
    )


def replay_journal(db: str | os.PathLike, run_id: str) -> int:
    """Store the records a killed server left in the run's journal (one transaction; a record already
    committed stays as it is), then delete them. Returns the generations the journal held."""
    segs = journal.segments(db, run_id)
    if not segs:
        return 0
    prompts: list[PromptRow] = []
    gens: list[GenerationRow] = []
    served: list[ServedRow] = []
    traces: list[TraceRow] = []
    for _, path in segs:
        for payload in journal.read_records(path):
            p, g, s, t = decode_rows(payload)
            prompts.extend(p)
            gens.extend(g)
            served.extend(s)
            traces.extend(t)
    if gens:
        write_served(db, run_id, prompts, gens, served, traces)
    journal.drop(db, run_id, through=segs[-1][0])
    return len(gens)


def write_served(
    db: str | os.PathLike,
    run_id: str,
    prompts: Sequence[PromptRow],
    generations: Sequence[GenerationRow],
    served: Sequence[ServedRow],
    traces: Sequence[TraceRow] = (),
) -> None:
    """One transaction on a connection of its own: new prompts (numbered after the stored ones in
    arrival order), generations, their ``served`` rows and token traces (rows already stored stay: a
    pinned key asked twice is stored once), and the run's unit count. A server writes through a
    :class:`HeldWriter` instead (the same statements on a connection it keeps while busy)."""
    w = HeldWriter(db, run_id)
    try:
        w.write(prompts, generations, served, traces)
    finally:
        w.release()


INSERT_CHUNK = 256  # rows per INSERT statement (its parameters: 10-14 per row)


def _first_per_unit(rows: Sequence) -> list:
    """The first row of each unit (run, model, prompt, repeat, mode): a pinned key asked twice in one
    batch is stored once, as when the two came in two batches (INSERT OR IGNORE)."""
    seen: set[tuple] = set()
    out = []
    for r in rows:
        if tuple(r[:5]) not in seen:
            seen.add(tuple(r[:5]))
            out.append(r)
    return out


def _insert_rows(con, sql: str, rows: list[list], ignore: bool) -> int:
    """``sql`` (``INSERT OR IGNORE`` with one ``VALUES (...)`` row of parameters) for every row: one
    statement per ``INSERT_CHUNK`` rows, not one per row (DuckDB's cost is per executed statement);
    a plain INSERT when not ``ignore``. Returns the rows stored (OR IGNORE's skipped rows not
    counted: DuckDB reports what it inserted)."""
    head, values = (sql if ignore else sql.replace("INSERT OR IGNORE ", "INSERT ", 1)).split(" VALUES ")
    stored = 0
    for i in range(0, len(rows), INSERT_CHUNK):
        chunk = rows[i : i + INSERT_CHUNK]
        got = con.execute(
            f"{head} VALUES {', '.join([values] * len(chunk))}", [x for r in chunk for x in r]
        )
        ((n,),) = got.fetchall()  # DuckDB answers an INSERT with the rows it stored
        stored += int(n)
    return stored


_PROMPT_SQL = (
    "INSERT OR IGNORE INTO prompts (dataset_id, prompt_id, idx, subject, question, choices, gold, "
    "user_prompt) VALUES (?, ?, ?, ?, ?, NULL, NULL, ?)"
)
_GEN_SQL = (
    "INSERT OR IGNORE INTO generations (run_id, model, prompt_id, repeat, mode, seed, text, token_ids, "
    "finish_reason, n_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?::INTEGER[], ?, ?)"
)
_SERVED_SQL = (
    "INSERT OR IGNORE INTO served (run_id, model, prompt_id, repeat, mode, request_id, choice_index, "
    "endpoint, pinned, request, prompt_tokens, probs, logprobs, latency_s) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?::JSON, ?, ?::FLOAT[], ?::FLOAT[], ?)"
)


class HeldWriter:
    """The served run's write path for a server: one short transaction per batch of finished
    requests, on a connection kept open while batches follow each other, and closed when the server
    is idle (:meth:`release`) or has held it ``hold_s`` seconds (then it waits ``gap_s`` before the
    next batch), so that readers (the dashboard, which retries every 0.1 s at most) always get in.

    Why not a new connection per batch: one costs ~40 ms of CPU to open (DuckDB's catalog, the
    file checks, the schema check) and pandas inserts ~20 ms a table; a server answering requests one
    by one would spend that on every request. The file was checked when the run was opened
    (:func:`open_served_run`, through ``writer``); rows are inserted with parameters.

    Why one statement per table and the stored prompts remembered: DuckDB spends a few milliseconds
    of CPU on every executed INSERT (its plan, the primary-key index, OR IGNORE's check), so
    ``executemany`` costs that per row, and re-inserting a prompt that is already stored (the same
    question asked again: every repeat) costs two statements for nothing (bench/bench_serve.py;
    docs/BENCHMARKS.md, "engine serve"). The server is the run's only writer (its run lock), so the
    prompt ids this writer has committed, and those stored when it first wrote, are all there are;
    likewise the run's unit count is the count read once plus what each INSERT reports it stored
    (not a ``count(*)`` over the run's generations in every transaction, which grows with the run).

    Why a plain INSERT first: OR IGNORE costs 4-6 ms more per statement (one row, in a transaction;
    docs/BENCHMARKS.md), and a unit is almost never stored twice (the occurrence counters hand out
    repeats nobody has taken). When one is (a pinned key asked again, or asked while its twin was in
    flight), DuckDB refuses the transaction with a constraint error, nothing of it is stored, and the
    same rows go again with OR IGNORE, which keeps the row stored first.
    """

    def __init__(self, db: str | os.PathLike, run_id: str, hold_s: float = 1.0, gap_s: float = 0.12):
        self.db, self.run_id, self.hold_s, self.gap_s = Path(db), run_id, hold_s, gap_s
        self._con: duckdb.DuckDBPyConnection | None = None
        self._since = 0.0
        self._prompts: set[str] | None = None  # prompt ids stored in the run's dataset (read once)
        self._n_units: int | None = None  # the run's stored generations (read once)

    def write(
        self,
        prompts: Sequence[PromptRow],
        generations: Sequence[GenerationRow],
        served: Sequence[ServedRow],
        traces: Sequence[TraceRow] = (),
    ) -> None:
        """One transaction (all or nothing; rows already stored stay), as :func:`write_served`."""
        if self._con is not None and time.monotonic() - self._since > self.hold_s:
            self.release()
            time.sleep(self.gap_s)  # readers' turn
        if self._con is None:
            self._con = _connect(self.db, read_only=False, timeout_s=WRITER_TIMEOUT_S)
            self._since = time.monotonic()
        ds = dataset_id(self.run_id)
        try:
            known = self._prompts
            if known is None:
                got = self._con.execute("SELECT prompt_id FROM prompts WHERE dataset_id = ?", [ds])
                known = self._prompts = {pid for (pid,) in got.fetchall()}
            if self._n_units is None:
                ((n,),) = self._con.execute(
                    "SELECT count(*) FROM generations WHERE run_id = ?", [self.run_id]
                ).fetchall()
                self._n_units = int(n)
            new = [p for p in {p.prompt_id: p for p in prompts}.values() if p.prompt_id not in known]
            args = (len(known), new, generations, served, traces)
            try:
                with atomic(self._con) as con:
                    n_units = self._insert(con, *args, ignore=False)
            except duckdb.ConstraintException:  # a unit stored already: keep it (see above)
                with atomic(self._con) as con:
                    n_units = self._insert(con, *args, ignore=True)
        except (duckdb.IOException, duckdb.TransactionException) as exc:
            self.release()
            refused = write_failure(self.db, exc)
            if refused is not None:
                raise refused from exc
            raise
        known.update(p.prompt_id for p in new)  # committed
        self._n_units = n_units

    def _insert(self, con, n_known: int, prompts, generations, served, traces, ignore: bool) -> int:
        """``prompts``: the new ones only, numbered in this order after the ``n_known`` stored ones;
        ``ignore``: INSERT OR IGNORE (rows already stored stay), else plain INSERTs. Returns the run's
        unit count after this transaction."""
        ds = dataset_id(self.run_id)
        if prompts:
            rows = [
                [ds, p.prompt_id, n_known + i, p.subject, p.question, p.user_prompt]
                for i, p in enumerate(prompts)
            ]
            stored = _insert_rows(con, _PROMPT_SQL, rows, ignore)
            con.execute("UPDATE datasets SET n_prompts = ? WHERE dataset_id = ?", [n_known + stored, ds])
        assert self._n_units is not None
        n_units = self._n_units + _insert_rows(
            con, _GEN_SQL, [list(g) for g in _first_per_unit(generations)], ignore
        )
        _insert_rows(con, _SERVED_SQL, [list(r) for r in _first_per_unit(served)], ignore)
        if traces:
            tr = pd.DataFrame(list(traces), columns=list(TraceRow._fields))
            insert_df(
                con,
                "token_traces",
                tr,
                list(tr.columns),
                casts={"top_ids": "INTEGER[]", "top_probs": "FLOAT[]", "top_gumbels": "FLOAT[]"},
                conflict="OR IGNORE" if ignore else "",
            )
        if n_units != self._n_units:
            con.execute("UPDATE runs SET n_units = ? WHERE run_id = ?", [n_units, self.run_id])
        return n_units

    def release(self) -> None:
        """Close the connection (the file is free for readers)."""
        if self._con is not None:
            with contextlib.suppress(duckdb.Error):
                self._con.close()
            self._con = None


def close_served_run(db: str | os.PathLike, run_id: str, status: str) -> None:
    """The served run's status when its server stops ('done': a graceful stop; 'failed')."""
    with writer(db) as con:
        update_status(con, run_id, status)


def served_rows(db: str | os.PathLike, run_id: str) -> pd.DataFrame:
    """A served run's generations with what their requests asked, in arrival order: model, prompt_id,
    repeat, mode, seed, text, token_ids, finish_reason, request_id, choice_index, endpoint, pinned,
    request (JSON text), probs, logprobs."""
    return query_df(
        db,
        """SELECT g.model, g.prompt_id, g.repeat, g.mode, g.seed, g.text, g.token_ids, g.finish_reason,
                  s.request_id, s.choice_index, s.endpoint, s.pinned, CAST(s.request AS VARCHAR) AS request,
                  s.probs, s.logprobs
           FROM generations g JOIN served s USING (run_id, model, prompt_id, repeat, mode)
           WHERE g.run_id = ? ORDER BY s.created_at, s.request_id, s.choice_index, g.model""",
        [run_id],
    )
