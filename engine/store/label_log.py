"""Human labels that survive anything: a recorded sample file and an append-only label log per
sample, next to the database (never inside it, so labelling works while a job holds the writer lock
and the dashboard stays read-only).

    <db>.labels/<file_id>.sample.json   the sample (run, mode, seed, n, units in drawn order with
                                        their presentation and overlap flag); written once, atomically
    <db>.labels/<file_id>.jsonl         one JSON event a line: claim / label / undo
    <db>.labels/sessions/<id>.json      a labelling session's heartbeat: its sample, labeller and time

* Every append takes an exclusive ``flock`` on the log, reads it, decides, appends one line, flushes
  and ``fsync``s before returning: a label is on disk when the call returns (a SIGKILL right after
  loses nothing), and two processes never interleave a read-decide-write.
* A torn last line (a kill mid-write) is ignored by readers and terminated by the next append.
* The comparison set in the store is a materialised copy of sample + log (written by a writer job,
  replace = idempotent); the log stays the source of truth.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from engine.errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover - POSIX only
    fcntl = None  # type: ignore[assignment]


def labels_dir(db: str | os.PathLike) -> Path:
    """The folder of samples and label logs of database ``db``."""
    return Path(str(db) + ".labels")


def file_id(sample_id: str) -> str:
    """A file-system-safe name for ``sample_id`` (readable prefix + hash, so distinct ids never
    collide)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", sample_id)[:80]
    return f"{safe}-{hashlib.sha256(sample_id.encode()).hexdigest()[:10]}"


def sample_path(db, sample_id: str) -> Path:
    return labels_dir(db) / f"{file_id(sample_id)}.sample.json"


def log_path(db, sample_id: str) -> Path:
    return labels_dir(db) / f"{file_id(sample_id)}.jsonl"


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, text: str, durable: bool) -> None:
    """Write ``text`` to ``path`` through a uniquely named temp file in the same folder (``mkstemp``:
    two tabs or processes writing one path never share a temp file) and an atomic rename; ``durable``:
    fsync the file and the folder too."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(path.parent)


def write_sample(db, sample: dict[str, Any]) -> Path:
    """Write the sample file atomically (unique temp file, fsync, rename); an existing file is kept as
    is (a sample is written once: its id is a function of run, mode, seed, n and share, so two tabs
    drawing it at once write the same content)."""
    path = sample_path(db, sample["sample_id"])
    if path.exists():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, json.dumps(sample), durable=True)
    except OSError as exc:
        raise UserError(
            f"cannot write the label sample under {path.parent}: {exc.strerror or exc}"
        ) from None
    return path


def read_sample(path: Path) -> dict[str, Any]:
    """The sample file at ``path`` (cached: a sample file is written once and never changed;
    callers must not mutate the dict)."""
    st = path.stat()
    return _read_sample_cached(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _read_sample_cached(path: str, _mtime_ns: int, _size: int) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def samples(db) -> list[dict[str, Any]]:
    """Every recorded sample of database ``db`` (oldest file first)."""
    folder = labels_dir(db)
    if not folder.is_dir():
        return []
    paths = sorted(folder.glob("*.sample.json"), key=lambda p: (p.stat().st_mtime, p.name))
    return [read_sample(p) for p in paths]


def _parse(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:  # a torn last line (killed mid-write): not an event
            continue
        if isinstance(ev, dict):
            events.append(ev)
    return events


def read_events(db, sample_id: str) -> list[dict[str, Any]]:
    """Every complete event of the sample's log, in file order ([] without a log)."""
    path = log_path(db, sample_id)
    try:
        return _parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[Any]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = path.open("a+", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write the label log {path}: {exc.strerror or exc}") from None
    try:
        if fcntl is not None:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        yield fh
    finally:
        fh.close()  # releases the lock


def append_decided(
    db, sample_id: str, decide: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Under the log's exclusive lock: read every event, call ``decide(events)`` for the new events,
    append them (one line each), flush and fsync. Returns the new events (durable on return)."""
    path = log_path(db, sample_id)
    created = not path.exists()
    with _locked(path) as fh:
        fh.seek(0)
        text = fh.read()
        new = decide(_parse(text))
        if new:
            lines = "".join(json.dumps(ev, separators=(",", ":")) + "\n" for ev in new)
            if text and not text.endswith("\n"):
                lines = "\n" + lines  # terminate a torn line so the new event parses
            try:
                fh.write(lines)
                fh.flush()
                os.fsync(fh.fileno())
            except OSError as exc:
                raise UserError(f"cannot write the label log {path}: {exc.strerror or exc}") from None
            if created:
                _fsync_dir(path.parent)  # the new file's name is durable too
    return new


# ------------------------------------------------------------------ sessions: who is still there


def session_path(db, session: str) -> Path:
    return labels_dir(db) / "sessions" / f"{file_id(session)}.json"


def beat(db, session: str, sample_id: str, labeller: str, now: float | None = None) -> None:
    """Record that labelling session ``session`` (a browser tab) is alive and on ``sample_id`` now: one
    small file per session, replaced atomically (not fsynced: a lost beat only delays a release)."""
    path = session_path(db, session)
    info = {"session": session, "sample_id": sample_id, "labeller": labeller}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, json.dumps({**info, "t": time.time() if now is None else now}), False)
    except OSError as exc:
        raise UserError(f"cannot write the label session file {path}: {exc.strerror or exc}") from None


def beats(db, sessions: Iterator[str] | Sequence[str]) -> dict[str, dict[str, Any]]:
    """The latest heartbeat of each of ``sessions`` that has one ({session: {sample_id, labeller, t}});
    a session that never beat (the CLI, an import) is absent."""
    out = {}
    for s in sessions:
        try:
            info = json.loads(session_path(db, s).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(info, dict) and isinstance(info.get("t"), int | float):
            out[s] = info
    return out


# ------------------------------------------------------------- the log folded, for every reader

LABEL_COLUMNS = (
    "prompt_id",
    "model_a",
    "model_b",
    "human_winner",
    "judge_winner",
    "repeat",
    "mode",
    "labeller",
    "labelled_at",
    "presented",
)


def get_sample(db, sample_id: str) -> dict[str, Any]:
    path = sample_path(db, sample_id)
    if not path.exists():
        known = ", ".join(s["sample_id"] for s in samples(db)) or "none recorded"
        raise UserError(f"unknown label sample {sample_id!r}; samples: {known}")
    return read_sample(path)


@dataclass
class LogState:
    """The sample's log folded: live responses per unit (first per labeller, in log order, at most the
    unit's :func:`cap`) and each session's latest claim."""

    responses: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)

    def responders(self, idx: int) -> set[str]:
        return {ev["labeller"] for ev in self.responses.get(idx, ())}


def cap(sample: dict[str, Any], idx: int) -> int:
    """How many labellers unit ``idx`` takes: 2 when it is marked for a second labeller, else 1."""
    return 2 if sample["units"][int(idx)][5] else 1


def fold(events: Sequence[dict[str, Any]], sample: dict[str, Any] | None = None) -> LogState:
    """Fold events (claim / label / undo) in log order into a :class:`LogState`. With ``sample``, a
    unit keeps at most :func:`cap` answers (the first live ones in log order): an answer beyond it (a
    log written before votes were checked against claims) is never read, so never counted twice."""
    undone = {ev.get("target") for ev in events if ev.get("event") == "undo"}
    st = LogState()
    for ev in events:
        kind = ev.get("event")
        if kind == "claim":
            st.claims[str(ev.get("session"))] = ev
        elif kind == "label" and ev.get("id") not in undone:
            i = int(ev["idx"])
            rs = st.responses.setdefault(i, [])
            full = sample is not None and len(rs) >= cap(sample, i)
            if not full and all(r["labeller"] != ev["labeller"] for r in rs):
                rs.append(ev)
    return st


def label_rows(db, sample_id: str, with_skips: bool = False) -> pd.DataFrame:
    """The sample's labels as comparison rows (LABEL_COLUMNS): each unit's first answer with a winner
    in drawn order, then the second answers of units marked for a second labeller (no unit gives more
    rows than its :func:`cap`). ``with_skips``: skips too (winner None)."""
    sample = get_sample(db, sample_id)
    st = fold(read_events(db, sample_id), sample)
    first, extra = [], []
    for i, (p, r, ma, mb, _pres, _ovl) in enumerate(sample["units"]):
        rs = [ev for ev in st.responses.get(i, []) if with_skips or ev["winner"] is not None]
        base = {
            "prompt_id": p,
            "model_a": ma,
            "model_b": mb,
            "judge_winner": None,
            "repeat": int(r),
            "mode": sample["mode"],
        }
        rows = [
            {
                **base,
                "human_winner": ev["winner"],
                "labeller": ev["labeller"],
                "labelled_at": ev["at"],
                "presented": ev["presented"],
            }
            for ev in rs
        ]
        first.extend(rows[:1])
        extra.extend(rows[1:])
    return pd.DataFrame(first + extra, columns=list(LABEL_COLUMNS)).astype(object)


def run_label_rows(db, run: str, mode: str | None = None) -> pd.DataFrame:
    """Every label of ``run`` (all its samples, or those in ``mode``) straight from the label logs,
    synced or not: LABEL_COLUMNS plus ``sample_id``. Analyses read human labels here."""
    frames = [
        label_rows(db, s["sample_id"]).assign(sample_id=s["sample_id"])
        for s in samples(db)
        if s.get("run") == run and (mode is None or s.get("mode") == mode)
    ]
    if not frames:
        return pd.DataFrame(columns=[*LABEL_COLUMNS, "sample_id"]).astype(object)
    return pd.concat(frames, ignore_index=True).astype(object)
