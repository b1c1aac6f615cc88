"""Store layer of the database file: its tables and SQL.

Connections to the DuckDB file and the one write path (:func:`transaction`, :func:`insert_df`).

Concurrency model (DuckDB lets one process write *or* several read, never both):

* Exactly one process writes at a time: the engine CLI (a generation, scoring, judging, import or
  upload job). A writer holds the file only for short transactions (:func:`transaction`), so that
  readers can get in between two chunks of a long job.
* Readers (the dashboard, ``export``, analyses) open the file read-only for the duration of one
  query batch (:func:`reader`) and retry while a writer holds it. Nobody keeps a connection open.
* Readers yield to a waiting writer: a writer that finds the file held leaves a *write-intent*
  file next to the database (``NAME.write-intent-PID``) until it gets in; a reader that sees a fresh one
  waits (bounded) before connecting. Readers' shared locks overlap, so without this a few dashboard
  sessions polling in a loop could keep a generation waiting forever (tests/test_store_concurrency.py).
* Live job progress never goes through the database: it is a JSON file next to it
  (see ``dashboard.jobs``), so a dashboard can watch a job without touching the lock.

Damaged files (tests/test_store_integrity.py): before any connection, :func:`check_file` reads the file's
header (the DuckDB magic and the block count it records) and compares it with the file's size, so an
empty, foreign, text or truncated file is refused with one line and never opened read-write; a writer
also opens the file read-only and reads its catalog once per process before it ever writes.

Queries always use parameters (``?``); never format strings from users or widgets into SQL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import duckdb

from engine.config import DEFAULT_DB
from engine.errors import UserError
from engine.store.files import (
    _DATA_START,
    _FIX,
    check_file,
    file_problem,
    pending_wal,
    set_aside_foreign_wal,
    write_failure,
)
from engine.store.files import open_error as _open_error
from engine.store.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    TABLES,
    atomic,
    init_schema,
    schema_problem,
    schema_state,
)

WRITER_TIMEOUT_S = 600.0  # a writer gives up only when one holder keeps the file this long
READER_TIMEOUT_S = 30.0
INTENT_STALE_S = 10.0  # a write-intent file not refreshed for this long is from a dead writer
INTENT_MAX_WAIT_S = 5.0  # the longest a reader yields to waiting writers before it tries anyway
_LOCK_LOG = os.environ.get(
    "COUPLED_EVAL_LOCK_LOG"
)  # a file: one line per connection (pid, r/w, seconds waited)


def _is_lock_error(exc: Exception) -> bool:
    msg = str(exc).lower()
    return "lock" in msg or "conflicting" in msg or "being used" in msg


# ---------------------------------------------------------------------------- write intent


def _intent_prefix(path: Path) -> str:
    return path.name + ".write-intent-"


def _announce(path: Path, tag: int) -> Path:
    """Create this writer's write-intent file next to the database, whole or not at all.

    The same refusals as the database's own writes: a read-only or full folder is one UserError line
    (:func:`engine.store.files.write_failure`), and a file that could not be written completely is
    removed (a partial intent would hold readers back until it looks stale)."""
    intent = path.parent / f"{_intent_prefix(path)}{os.getpid()}-{tag & 0xFFFF:x}"
    fd = None
    try:
        fd = os.open(intent, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        data = f"{os.getpid()} {socket.gethostname()}\n".encode()
        if os.write(fd, data) != len(data):
            raise OSError(28, "No space left on device (short write)", str(intent))
        os.close(fd)
        return intent
    except OSError as exc:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            with contextlib.suppress(OSError):
                intent.unlink()
        refused = write_failure(path, exc)
        if refused is not None:
            raise refused from None
        raise UserError(
            f"database {path} is held by another process and this writer could not announce "
            f"itself next to it ({exc}); nothing was written: fix the folder and retry"
        ) from None


def _fresh_intents(path: Path) -> list[Path]:
    """Write-intent files of live writers (refreshed within INTENT_STALE_S)."""
    prefix, now = _intent_prefix(path), time.time()
    out = []
    try:
        names = [n for n in os.listdir(path.parent or ".") if n.startswith(prefix)]
    except OSError:
        return []
    for n in names:
        f = path.parent / n
        with contextlib.suppress(OSError):
            if now - f.stat().st_mtime < INTENT_STALE_S:
                out.append(f)
    return out


def _yield_to_writers(path: Path, max_wait_s: float) -> None:
    """Readers: wait (at most ``max_wait_s``) while a writer has said it is waiting for the file."""
    deadline = time.monotonic() + max_wait_s
    while time.monotonic() < deadline and _fresh_intents(path):
        time.sleep(0.01)


def _connect(path: Path, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    """Connect, retrying while another process holds the lock; a writer announces itself (write
    intent) once it finds the file held, so readers let it in. Any other failure is one line."""
    deadline = time.monotonic() + timeout_s
    delay, intent, told = 0.005, None, False
    started = time.monotonic()
    last_touch = 0.0
    try:
        while True:
            if read_only:
                _yield_to_writers(path, min(INTENT_MAX_WAIT_S, max(0.0, deadline - time.monotonic())))
            try:
                # no progress bar: DuckDB prints one to stdout when a query runs longer than 2 s
                # (a loaded machine), which would break `--json` output and our own messages
                con = duckdb.connect(str(path), read_only=read_only)
                con.execute("SET enable_progress_bar = false")  # a session option: not in config=
                if _LOCK_LOG:  # bench/bench_concurrency.py: how long each connection waited
                    with open(_LOCK_LOG, "a") as f:
                        f.write(
                            f"{os.getpid()} {'r' if read_only else 'w'} "
                            f"{time.monotonic() - started:.4f}\n"
                        )
                return con
            except duckdb.IOException as exc:  # another process holds the file, or it is damaged
                if not _is_lock_error(exc):
                    raise _open_error(path, exc, read_only) from None
                if time.monotonic() > deadline:
                    raise UserError(
                        f"database {path} is busy: {str(exc).splitlines()[0]} (waited {timeout_s:.0f} "
                        "s); try again when that process has finished"
                    ) from None
                if not read_only:
                    now = time.time()
                    if intent is None:
                        intent = _announce(path, id(exc))
                        last_touch = now
                    elif now - last_touch > 1.0:  # refresh: a live writer's intent never looks stale
                        with contextlib.suppress(OSError):
                            os.utime(intent)
                        last_touch = now
                    if not told and time.monotonic() - started > 10:
                        print(
                            f"waiting for the database lock on {path}: {str(exc).splitlines()[0]}",
                            file=sys.stderr,
                        )
                        told = True
            except (
                duckdb.Error
            ) as exc:  # e.g. an InternalException / SerializationException on a damaged file
                raise _open_error(path, exc, read_only) from None
            time.sleep(delay)
            # readers yield to a waiting writer, so a writer's wait is one reader's hold: poll often
            delay = min(delay * 2, 0.02 if not read_only else 0.1)
    finally:
        if intent is not None:
            with contextlib.suppress(OSError):
                intent.unlink()


# ---------------------------------------------------------------------------- verification


def _blocks_problem(con: duckdb.DuckDBPyConnection, path: Path, tables) -> str | None:
    """The file must hold every block a table's data uses (DuckDB opens a file cut at a block
    boundary and would write into it; its header's block count includes free blocks, so the
    segments' block ids are the exact bound). Reads metadata only, not the data."""
    block_size = con.execute(
        "SELECT block_size FROM pragma_database_size() WHERE database_name = current_database()"
    ).fetchone()
    top = -1
    for name in tables:  # names from our SCHEMA, checked by the caller
        row = con.execute(
            f"SELECT max(greatest(block_id, coalesce(list_max(additional_block_ids), -1))) "
            f"FROM pragma_storage_info('{name}') WHERE persistent"
        ).fetchone()
        if row is not None and row[0] is not None:
            top = max(top, int(row[0]))
    if block_size is None or top < 0:
        return None
    need = _DATA_START + (top + 1) * int(block_size[0])
    size = path.stat().st_size
    if size < need:
        return f"is truncated ({size:,} bytes; its tables use blocks up to byte {need:,})"
    return None


_BLOCKS_OK: dict[str, tuple[int, int, int]] = {}


def _checked_version(path: Path) -> bool:
    """Whether this version of the file (inode, size, mtime) already passed the checks here."""
    st = path.stat()
    return _BLOCKS_OK.get(str(path.resolve())) == (st.st_ino, st.st_size, st.st_mtime_ns)


def _check_blocks_cached(con: duckdb.DuckDBPyConnection, path: Path, tables) -> None:
    """:func:`_blocks_problem` once per version of the file (inode, size, mtime) in this process."""
    st = path.stat()
    sig = (st.st_ino, st.st_size, st.st_mtime_ns)
    key = str(path.resolve())
    if _BLOCKS_OK.get(key) == sig:
        return
    problem = _blocks_problem(con, path, tables)
    if problem:
        raise UserError(f"database {path} {problem}; nothing was written: {_FIX}")
    _BLOCKS_OK[key] = sig


_VERIFIED: set[tuple[str, int]] = set()


def verify(path: str | os.PathLike, timeout_s: float = READER_TIMEOUT_S) -> None:
    """UserError (one line) unless ``path`` is absent or a healthy database this code may use: the
    header check, then (once per process and file) a read-only open that reads the catalog, the
    schema version and every table's row count. The CLI calls it before any command runs."""
    _verify_before_write(Path(path), timeout_s)


def _verify_before_write(path: Path, timeout_s: float) -> None:
    """Once per process and file: open read-only and read the catalog and every table's row count,
    so a damaged or foreign file is refused before it is ever opened read-write."""
    check_file(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    key = (str(path.resolve()), st.st_ino)
    if key in _VERIFIED:
        return
    check_file(path)
    con = _connect(path, read_only=True, timeout_s=timeout_s)
    try:
        try:
            state = schema_state(con)
            problem = schema_problem(state, path)
            if problem:
                raise UserError(problem)
            ours = [t for t in state.tables if t in TABLES]
            for name in ours:
                con.execute(f'SELECT count(*) FROM "{name}"').fetchone()  # name from SCHEMA
            _check_blocks_cached(con, path, ours)
        except duckdb.Error as exc:
            raise _open_error(path, exc, True) from None
    finally:
        con.close()
    _VERIFIED.add(key)


def ensure_db_folder(path: str | os.PathLike) -> Path:
    """The folder of a database about to be written: created only for the default location
    (``config.DEFAULT_DB``'s folder); elsewhere a missing folder is a UserError, so a mistyped
    ``--db`` never creates directories."""
    path = Path(path)
    for up in (
        path.parent,
        *path.parent.parents,
    ):  # `--db some-file.txt/x.duckdb`: say so, not NotADirectoryError
        if up.exists():
            if not up.is_dir():
                raise UserError(
                    f"database {str(path)!r} is under {str(up)!r}, which is a file, not a folder; "
                    "pass a --db inside a folder"
                )
            break
    if not path.parent.exists():
        if path.parent.resolve() != Path(DEFAULT_DB).parent.resolve():
            raise UserError(
                f"the folder of database {str(path)!r} does not exist; create it first or use "
                f"an existing folder (only the default {str(Path(DEFAULT_DB).parent)!r} is created)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def writer(
    path: str | os.PathLike = DEFAULT_DB, timeout_s: float = WRITER_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-write connection with the schema ensured; released on exit.

    The file is checked first (:func:`check_file`, and once per process a read-only pass), so a
    damaged, foreign, older or newer database is refused with one line and never written.
    Writes go through :func:`transaction` (all or nothing); this bare connection is for
    statements that need no transaction.
    """
    path = ensure_db_folder(path)  # only the default folder is ever created
    check_file(path)
    set_aside_foreign_wal(path)
    _verify_before_write(path, timeout_s)
    con = _connect(path, read_only=False, timeout_s=timeout_s)
    try:
        try:
            init_schema(con, path)
        except (duckdb.IOException, duckdb.TransactionException) as exc:
            refused = write_failure(path, exc)
            if refused is not None:
                raise refused from exc
            raise
        yield con
    finally:
        con.close()


@contextlib.contextmanager
def reader(
    path: str | os.PathLike = DEFAULT_DB, timeout_s: float = READER_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-only connection. UserError if the file does not exist, is damaged, or
    holds another schema version (an empty database reads as no data)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"database not found: {path} (run a generation or an import first)")
    check_file(path)
    con = _connect(path, read_only=True, timeout_s=timeout_s)
    try:
        try:
            if not _checked_version(path):  # once per version of the file: readers stay cheap
                state = schema_state(con)
                problem = schema_problem(state, path)
                if problem:
                    raise UserError(problem.replace("nothing was written: ", ""))
                _check_blocks_cached(con, path, [t for t in state.tables if t in TABLES])
        except duckdb.Error as exc:
            raise _open_error(path, exc, True) from None
        try:
            yield con
        except duckdb.IOException as exc:  # a block the checks could not see is missing: one line
            if "could not read" in str(exc).lower() or "checksum" in str(exc).lower():
                raise _open_error(path, exc, True) from None
            raise
    finally:
        con.close()


@contextlib.contextmanager
def transaction(
    path: str | os.PathLike = DEFAULT_DB, timeout_s: float = WRITER_TIMEOUT_S
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A :func:`writer` inside BEGIN ... COMMIT: every write of the block is stored, or none.

    Any exception, including KeyboardInterrupt (Ctrl-C, a cancelled job's SIGTERM), rolls back,
    so a killed process never leaves half a chunk, half a score table or half an upload. The
    original error is what propagates: when DuckDB has already aborted the transaction (a failed
    COMMIT), the rollback's own "no transaction is active" is ignored rather than raised over it.
    """
    with writer(path, timeout_s) as con:
        try:
            with atomic(con):
                yield con
        except (duckdb.IOException, duckdb.TransactionException) as exc:
            # the WAL cannot be created or written (read-only, disk full): one line; the failed
            # transaction was rolled back and the file holds what it held before
            refused = write_failure(path, exc)
            if refused is not None:
                raise refused from exc
            raise


def migrate(path: str | os.PathLike) -> dict:
    """Take a database of an older schema version to :data:`SCHEMA_VERSION`: check the file, copy it
    to ``NAME.vOLD-YYYYmmdd-HHMMSS.bak`` next to it, then run every step of
    :data:`~engine.store.schema.MIGRATIONS` in one transaction (all or nothing).

    Returns {"db", "from_version", "to_version", "backup"} (backup None when nothing was to do).
    """
    path = Path(path)
    if not path.exists():
        raise UserError(f"database not found: {path}")
    check_file(path)
    set_aside_foreign_wal(path)
    con = _connect(path, read_only=False, timeout_s=WRITER_TIMEOUT_S)
    try:
        try:
            state = schema_state(con)
        except duckdb.Error as exc:
            raise _open_error(path, exc, False) from None
        if state.kind in ("current", "empty"):
            return {
                "db": str(path),
                "from_version": state.version,
                "to_version": SCHEMA_VERSION,
                "backup": None,
            }
        if state.kind != "older":
            raise UserError(schema_problem(state, path) or f"cannot migrate {path}")
        assert state.version is not None
        con.execute(
            "CHECKPOINT"
        )  # the file alone is now the whole database: safe to copy while we hold it
        backup = path.with_name(f"{path.name}.v{state.version}-{time.strftime('%Y%m%d-%H%M%S')}.bak")
        n = 1
        while backup.exists():
            backup = path.with_name(
                f"{path.name}.v{state.version}-{time.strftime('%Y%m%d-%H%M%S')}-{n}.bak"
            )
            n += 1
        shutil.copy2(path, backup)
        with atomic(con):
            for from_version, steps in MIGRATIONS:
                if from_version >= state.version:
                    for sql in steps:
                        con.execute(sql)
            con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
            )
    finally:
        con.close()
    return {
        "db": str(path),
        "from_version": state.version,
        "to_version": SCHEMA_VERSION,
        "backup": str(backup),
    }


def describe(path: str | os.PathLike) -> dict:
    """What ``path`` is (for ``db check``): {"db", "status", "version", "current_version", "message",
    "tables"}; status is one of missing / damaged / empty / current / older / newer / foreign."""
    path = Path(path)
    out: dict = {"db": str(path), "version": None, "current_version": SCHEMA_VERSION, "tables": {}}
    if not path.exists():
        return {
            **out,
            "status": "missing",
            "message": f"database {path} does not exist (a writer will create it)",
        }
    problem = file_problem(path)
    if problem:
        return {**out, "status": "damaged", "message": f"database {path} {problem}: {_FIX}"}
    try:
        con = _connect(path, read_only=True, timeout_s=READER_TIMEOUT_S)
    except UserError as exc:
        return {**out, "status": "damaged", "message": str(exc)}
    try:
        state = schema_state(con)
        counts = {
            t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]  # type: ignore[index]
            for t in state.tables
            if t in TABLES
        }
    except duckdb.Error as exc:
        return {**out, "status": "damaged", "message": str(_open_error(path, exc, True))}
    finally:
        con.close()
    msg = schema_problem(state, path) or (
        f"database {path}: healthy, schema version {state.version}"
        if state.kind == "current"
        else f"database {path}: a DuckDB file with no tables (a writer will create the schema)"
    )
    wal = pending_wal(path)
    if wal:
        msg += f"; it {wal}"
    return {
        **out,
        "status": state.kind,
        "version": state.version,
        "message": msg.replace("nothing was written: ", ""),
        "tables": counts,
        "pending_wal": wal,
    }


def insert_df(
    con: duckdb.DuckDBPyConnection,
    table: str,
    df,
    columns: Sequence[str],
    casts: Mapping[str, str] | None = None,
    conflict: str = "",
) -> None:
    """``INSERT [OR IGNORE | OR REPLACE] INTO table (columns) SELECT columns FROM df``: one set-based
    statement (``executemany`` is slow for a 14k-prompt MMLU run).

    ``casts`` maps a column to a SQL type (DuckDB infers list and JSON columns of a DataFrame as
    generic types). Table and column names come from code, never from users (checked against
    the schema).
    """
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; allowed: {', '.join(TABLES)}")
    if conflict not in ("", "OR IGNORE", "OR REPLACE"):
        raise ValueError(f"conflict must be '', 'OR IGNORE' or 'OR REPLACE', got {conflict!r}")
    view = f"_insert_{table}"
    sel = ", ".join(f"CAST({c} AS {casts[c]})" if casts and c in casts else c for c in columns)
    con.register(view, df)
    try:
        con.execute(f"INSERT {conflict} INTO {table} ({', '.join(columns)}) SELECT {sel} FROM {view}")
    finally:
        con.unregister(view)


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | tuple = ()):
    """The first column of the first row of an aggregate query (``SELECT count(*) ...``)."""
    row = con.execute(sql, list(params)).fetchone()
    if row is None:  # an aggregate always returns a row: this is a bug in the query, not bad input
        raise RuntimeError(f"query returned no row: {sql}")
    return row[0]


def query_df(path: str | os.PathLike, sql: str, params: list | tuple = ()):
    """Run one parameterised read query and return a pandas DataFrame."""
    with reader(path) as con:
        return con.execute(sql, list(params)).df()


def table_counts(path: str | os.PathLike) -> dict[str, int]:
    """Row count of every table (a cheap overview of what is stored)."""
    out: dict[str, int] = {}
    with reader(path) as con:
        existing = {
            r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
        for name in TABLES:
            if name in existing:
                out[name] = scalar(
                    con, f'SELECT count(*) FROM "{name}"'
                )  # name from SCHEMA, not user input
            else:
                out[name] = 0
    return out
