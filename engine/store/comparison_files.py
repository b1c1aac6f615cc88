"""Comparison files (CSV and Chatbot Arena JSON lines): ONE streaming validator for the CLI's
``--comparisons`` and for uploads (``import comparisons``, the Upload page), which lists EVERY
problem with its row and column and never loads a big file whole.

Normalised form (one row per comparison): prompt_id, model_a, model_b, human_winner, judge_winner,
with winners in {"a", "b", "tie"} or None (no label).

CSV columns: ``model_a``, ``model_b`` and at least one label column: the human label as ``winner`` (the
upload spelling) or ``human_winner`` (the analysis spelling; not both), and/or ``judge_winner``; optional
``prompt_id`` (the cluster of docs/METHODS.md section 7.2: without the column every row is its own
cluster and results say so; with it every row needs one) and ``id`` (a row key: repeated (prompt_id,
model_a, model_b) are then allowed). Each row needs at least one label.

Optional provenance columns (:data:`OPTIONAL_COLUMNS`; blank = unknown): ``repeat`` (an integer >= 0:
the generation's repeat within its prompt; the prompt, not the repeat, is the cluster), ``mode``
('coupled' | 'independent'), ``labeller`` (free text), ``labelled_at`` (an ISO 8601 date-time; one
with a time zone is converted to UTC), ``presented`` ('ab': model_a was shown first | 'ba') and
``category`` (free text: the prompt's category, e.g. coding or maths; the slices of ``winrates --by
category``, so one category per prompt). Without an ``id`` column, rows differing only in repeat, mode,
labeller or presented are not duplicates.

Encoding (both formats): UTF-8 with or without a byte-order mark, or UTF-16 with a byte-order mark;
anything else is refused with the byte and line that are not UTF-8.
"""

from __future__ import annotations

import array
import codecs
import csv
import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from engine import config
from engine.csvsafe import csv_read_cell
from engine.errors import UserError

MAX_UPLOAD_BYTES = config.MAX_UPLOAD_BYTES
NORMALISED_COLUMNS = ("prompt_id", "model_a", "model_b", "human_winner", "judge_winner")
# optional provenance of a label (schema v4) and the prompt's category (v6): None where unknown; every
# normalised frame carries them
OPTIONAL_COLUMNS = ("repeat", "mode", "labeller", "labelled_at", "presented", "category")
ALL_COLUMNS = NORMALISED_COLUMNS + OPTIONAL_COLUMNS
PRESENTED = ("ab", "ba")
MAX_PROBLEMS_IN_MESSAGE = 50
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SPREADSHEET = "this is a spreadsheet (Excel) or zip file, not text; export it as CSV (UTF-8) first"

_WINNER_MAP = {
    "a": "a",
    "model_a": "a",
    "b": "b",
    "model_b": "b",
    "tie": "tie",
    "tie (bothbad)": "tie",
}
ALLOWED_WINNERS = tuple(_WINNER_MAP)


def normalise_winner(value) -> str | None:
    """Map a winner label to 'a' | 'b' | 'tie' (None for an empty label). Raises UserError."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    v = str(value).strip().lower()
    if v == "":
        return None
    if v not in _WINNER_MAP:
        raise UserError(
            f"unknown winner value {value!r}; allowed: {', '.join(ALLOWED_WINNERS)} or empty"
        )
    return _WINNER_MAP[v]


@dataclass(frozen=True)
class Problem:
    """One validation problem. ``row``: the row number a spreadsheet or editor shows (CSV: the
    header is row 1, the first data row is row 2; JSON lines: the line number); None for a
    problem with the whole file. ``column``: the column/field, if any."""

    row: int | None
    column: str | None
    message: str
    file: str = ""
    unit: str = "row"  # "line" for JSON-lines files

    def __str__(self) -> str:
        where = []
        if self.file:
            where.append(self.file)
        if self.row is not None:
            where.append(f"{self.unit} {self.row}")
        if self.column:
            where.append(f"column {self.column!r}")
        return (", ".join(where) + ": " if where else "") + self.message


class InvalidUpload(UserError):
    """An upload with problems; ``problems`` holds every one of them (the message the first few)."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        shown = "\n  ".join(str(p) for p in self.problems[:MAX_PROBLEMS_IN_MESSAGE])
        more = len(self.problems) - MAX_PROBLEMS_IN_MESSAGE
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            f"upload rejected, nothing was written ({len(self.problems)} problem"
            f"{'s' if len(self.problems) != 1 else ''}):\n  {shown}{tail}"
        )


def _label(source) -> str:
    """How problems name the file: its path, or for bytes their ``name`` attribute (an upload's
    file name, e.g. ``dashboard.uploads.NamedBytes``), else ``<upload>``."""
    if isinstance(source, (bytes, bytearray)):
        return getattr(source, "name", None) or "<upload>"
    return str(source)


def require_file(path) -> Path:
    """``path`` as a Path when it is a regular file; else a UserError that says what it is (issue
    21.5: a folder or /dev/zero is not "not found")."""
    import stat as st

    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"file not found: {p}") from None
    except OSError as exc:
        raise UserError(f"{p} cannot be read ({exc.strerror or exc})") from None
    if st.S_ISREG(mode):
        return p
    kind = (
        "a folder"
        if st.S_ISDIR(mode)
        else "a character device"
        if st.S_ISCHR(mode)
        else "a block device"
        if st.S_ISBLK(mode)
        else "a named pipe (FIFO)"
        if st.S_ISFIFO(mode)
        else "a socket"
        if st.S_ISSOCK(mode)
        else "not a regular file"
    )
    raise UserError(f"{p} is {kind}, not a file of comparisons; give a .csv or .json file")


def _size_within(source, max_bytes: int, problems: list[Problem], label: str) -> bool:
    """The file's size checked BEFORE reading: False (a problem recorded) when over ``max_bytes``;
    UserError when the path is not a file."""
    if isinstance(source, (bytes, bytearray)):
        size = len(source)
    else:
        p = require_file(source)
        size = p.stat().st_size
    if size > max_bytes:
        problems.append(
            Problem(
                None,
                None,
                f"file is {size / 2**20:.1f} MiB, over the limit of "
                f"{max_bytes / 2**20:.0f} MiB; split it into smaller files",
                label,
            )
        )
        return False
    return True


def _check_pair(
    row: int, model_a: str, model_b: str, known: set[str] | None, label: str, problems: list[Problem]
) -> None:
    if model_a and model_b and model_a == model_b:
        problems.append(
            Problem(row, "model_b", f"model_a and model_b are the same model {model_a!r}", label)
        )
    if known is not None:
        for col, m in (("model_a", model_a), ("model_b", model_b)):
            if m and m not in known:
                shown = ", ".join(sorted(known)[:20]) + (" ..." if len(known) > 20 else "")
                problems.append(Problem(row, col, f"unknown model {m!r}; known models: {shown}", label))


def _winner(value: str, row: int, column: str, label: str, problems: list[Problem]) -> str | None:
    try:
        return normalise_winner(value)
    except UserError:
        problems.append(
            Problem(
                row, column, f"bad winner value {value!r}; allowed: {', '.join(ALLOWED_WINNERS)}", label
            )
        )
        return None


def _open_binary(source):
    """A binary stream over a path or bytes (a BytesIO shares the bytes' buffer: no copy)."""
    return io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else Path(source).open("rb")


def encoding_of(source) -> str:
    """The one encoding policy: "utf-16" after a UTF-16 byte-order mark, else "utf-8-sig" (UTF-8,
    an optional BOM skipped)."""
    with _open_binary(source) as fh:
        return "utf-16" if fh.read(2) in _UTF16_BOMS else "utf-8-sig"


def _bad_bytes(exc: UnicodeDecodeError, block: bytes, pending: int, lines: int, enc: str) -> str:
    pos = exc.start - pending
    bad = block[pos] if 0 <= pos < len(block) else 0
    line = lines + block[: max(pos, 0)].count(b"\n")
    if enc == "utf-16":
        return (
            "file starts with a UTF-16 byte-order mark but is not valid UTF-16 "
            f"(near line {line}); save it as UTF-8 text"
        )
    return f"file is not UTF-8 text (byte 0x{bad:02x} at line {line}); save it with UTF-8 encoding"


def precheck(source, max_bytes: int, problems: list[Problem]) -> str | None:
    """Size (before reading), spreadsheet, encoding, NUL and emptiness, in 1 MiB blocks: the
    encoding to read the file with, or None after recording a problem."""
    label = _label(source)
    if not _size_within(source, max_bytes, problems, label):
        return None
    enc = encoding_of(source)
    decoder = codecs.getincrementaldecoder(enc)()
    lines, nonblank, first = 1, False, True
    with _open_binary(source) as fh:
        while True:
            block = fh.read(1 << 20)
            if first and (
                block[:4] == b"PK\x03\x04" or block[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
            ):
                problems.append(Problem(None, None, _SPREADSHEET, label))
                return None
            first = False
            pending = len(decoder.getstate()[0])  # bytes of a character split across two blocks
            try:
                text = decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                problems.append(Problem(None, None, _bad_bytes(exc, block, pending, lines, enc), label))
                return None
            if not block:
                break
            if "\x00" in text:
                problems.append(
                    Problem(
                        None,
                        None,
                        "file contains NUL bytes (binary, or UTF-16 without a "
                        "byte-order mark?); save it as UTF-8 text",
                        label,
                    )
                )
                return None
            nonblank = nonblank or bool(text.strip().lstrip("\ufeff"))
            lines += text.count("\n")
    if not nonblank:
        problems.append(Problem(None, None, "file is empty", label))
        return None
    return enc


def read_text(source, max_bytes: int, problems: list[Problem]) -> str | None:
    """The whole text (for JSON lines) under :func:`precheck`'s policy, or None after a problem."""
    enc = precheck(source, max_bytes, problems)
    if enc is None:
        return None
    raw = bytes(source) if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
    return raw.decode(enc)


# ---------------------------------------------------------------------------------------- CSV

_LABELS = ("winner", "human_winner", "judge_winner")


@dataclass(frozen=True)
class _Header:
    col: dict[str, int]  # column name -> index
    width: int
    human: str | None  # "winner" or "human_winner" (None: no human labels)
    sep: str

    def has(self, c: str) -> bool:
        return c in self.col


def _delimiter(first: str) -> str:
    """',' unless the header only parses with ';' or a tab (spreadsheets in some locales)."""
    for d in (",", ";", "\t"):
        cols = {c.strip().strip('"') for c in first.split(d)}
        if {"model_a", "model_b"} <= cols and cols & set(_LABELS):
            return d
    return ","


def _header(header: list[str], sep: str, label: str, problems: list[Problem]) -> _Header | None:
    """The header's columns, or None after recording every problem with it."""
    n0 = len(problems)
    seen: set[str] = set()
    for h in header:
        if h and h in seen:  # blank names (trailing separators) are ignored columns
            problems.append(
                Problem(None, h, f"column {h!r} appears more than once in the header", label)
            )
        seen.add(h)
    need = [c for c in ("model_a", "model_b") if c not in seen] + (
        [] if seen & set(_LABELS) else ["winner"]
    )
    for c in need:
        problems.append(
            Problem(
                None,
                c,
                f"missing column {c!r}: columns must include model_a, model_b and a label "
                "column (winner or human_winner, and/or judge_winner); optional: prompt_id, "
                f"id, {', '.join(OPTIONAL_COLUMNS)} (found: {', '.join(header)})",
                label,
            )
        )
    if {"winner", "human_winner"} <= seen:
        problems.append(
            Problem(
                None,
                "human_winner",
                "both 'winner' and 'human_winner' are given; they are the same "
                "column (the human label): keep one",
                label,
            )
        )
    if len(problems) > n0:
        return None
    human = "winner" if "winner" in seen else "human_winner" if "human_winner" in seen else None
    return _Header({h: header.index(h) for h in header if h}, len(header), human, sep)


class _Duplicates:
    """First row of each row key, through 64-bit hashes (exact keys only on a hash collision)."""

    def __init__(self) -> None:
        self.first: dict[int, tuple[tuple, int]] = {}
        self.exact: dict[tuple, int] = {}

    def seen(self, key: tuple, row: int) -> int | None:
        hk = hash(key)
        got = self.first.get(hk)
        if got is None:
            self.first[hk] = (key, row)
            return None
        if got[0] == key:
            return got[1]
        prev = self.exact.setdefault(key, row)  # two keys with one hash (rare): compare exactly
        return None if prev == row else prev


def with_optional_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every column of :data:`ALL_COLUMNS` (missing optional ones added as None), in that
    order."""
    missing = {
        c: pd.Series([None] * len(df), index=df.index, dtype=object) for c in ALL_COLUMNS if c not in df
    }
    return df.assign(**missing)[list(ALL_COLUMNS)] if missing else df[list(ALL_COLUMNS)]


def _optional(v: dict[str, str], i: int, label: str, problems: list[Problem]) -> tuple:
    """The row's OPTIONAL_COLUMNS values (None when the column is absent or the cell blank)."""
    out: list = []
    for c in OPTIONAL_COLUMNS:
        x = v.get(c, "")
        if x == "":
            out.append(None)
        elif c == "repeat":
            ok = x.isdigit() and x.isascii()
            out.append(int(x) if ok else None)
            if not ok:
                problems.append(
                    Problem(i, c, f"bad repeat {x!r}; allowed: an integer >= 0 or blank", label)
                )
        elif c == "mode" or c == "presented":
            allowed = config.MODES if c == "mode" else PRESENTED
            out.append(x.lower() if x.lower() in allowed else None)
            if x.lower() not in allowed:
                problems.append(
                    Problem(i, c, f"bad {c} {x!r}; allowed: {', '.join(allowed)} or blank", label)
                )
        elif c == "labelled_at":
            out.append(parse_labelled_at(x, i, label, problems))
        else:
            out.append(x)
    return tuple(out)


def parse_labelled_at(x: str, i: int, label: str, problems: list[Problem]) -> pd.Timestamp | None:
    """An ISO 8601 date-time as a naive UTC Timestamp (a problem recorded, None, when it is not one)."""
    try:
        t = pd.Timestamp(x)
    except (ValueError, TypeError):
        t = None
    if t is None or pd.isna(t):
        problems.append(
            Problem(
                i,
                "labelled_at",
                f"bad labelled_at {x!r}; allowed: an ISO 8601 date-time "
                "(e.g. 2026-01-31 14:05:00) or blank",
                label,
            )
        )
        return None
    return t.tz_convert("UTC").tz_localize(None) if t.tzinfo is not None else t


def _row(
    i: int, r: list[str], h: _Header, known: set[str] | None, label: str, problems: list[Problem]
) -> tuple | None:
    """One data row -> (prompt_id, model_a, model_b, human, judge, key, optional values) after recording
    its problems."""
    if len(r) != h.width:
        more = "more fields than the header: " if len(r) > h.width else ""
        problems.append(
            Problem(
                i,
                None,
                f"has {len(r)} fields, the header has {h.width} ({more}an unquoted "
                f"{'comma' if h.sep == ',' else repr(h.sep)} in a cell?)",
                label,
            )
        )
        return None
    v = {c: csv_read_cell(r[j].strip()) for c, j in h.col.items()}  # undo an export's formula guard
    for c in ("prompt_id", "model_a", "model_b", "id"):
        if h.has(c) and v[c] == "":
            problems.append(Problem(i, c, "blank cell", label))
    human = _winner(v[h.human], i, h.human, label, problems) if h.human and v[h.human] else None
    judge = (
        _winner(v["judge_winner"], i, "judge_winner", label, problems) if v.get("judge_winner") else None
    )
    if not (h.human and v[h.human]) and not v.get("judge_winner"):
        cols = " or a ".join(c for c in (h.human, "judge_winner") if c and h.has(c))
        problems.append(
            Problem(i, h.human or "judge_winner", f"blank cell (a row needs a {cols})", label)
        )
    _check_pair(i, v["model_a"], v["model_b"], known, label, problems)
    extra = tuple(
        v.get(c, "") for c in OPTIONAL_COLUMNS if c not in ("labelled_at", "category")
    )  # rows differing here are no duplicates (a category belongs to the prompt)
    key = (
        (v["id"],)
        if h.has("id")
        else (v["prompt_id"], v["model_a"], v["model_b"], *extra)
        if h.has("prompt_id")
        else ()
    )
    return (
        v.get("prompt_id") or None,
        v["model_a"],
        v["model_b"],
        human,
        judge,
        key,
        _optional(v, i, label, problems),
    )


def validate_comparisons_csv(
    path_or_bytes,
    known_models: list[str] | set[str] | None = None,
    max_bytes: int = MAX_UPLOAD_BYTES,
    repeats: bool = False,
) -> tuple[pd.DataFrame, list[Problem]]:
    """Validate a CSV of pairwise comparisons (columns and encoding: the module docstring); return the
    normalised rows and EVERY problem: size over ``max_bytes`` (checked before reading), empty, not
    UTF-8/UTF-16, missing or repeated columns, ragged rows, blank cells, bad winners, model_a == model_b,
    unknown models (when ``known_models`` is given), duplicate rows (same id, or same prompt_id, model_a,
    model_b without an id column; ``repeats=True`` allows those: the CLI's analyses read repeated votes,
    e.g. Arena's several per question, as data). Winners: a, b, tie, model_a, model_b, tie (bothbad),
    case and spaces ignored. Separator: comma, or ';' / tab when only those parse.

    The file is streamed row by row (memory stays flat for a file of any length): repeated model
    names and winners share one string
    object, duplicates are found through 64-bit hashes of the row keys.

    Returns:
        (DataFrame with ALL_COLUMNS (the optional ones None where absent), one row per data row; list of
        Problem, empty when valid).
    """
    problems: list[Problem] = []
    label = _label(path_or_bytes)
    empty = pd.DataFrame(columns=list(ALL_COLUMNS))
    enc = precheck(path_or_bytes, max_bytes, problems)
    if enc is None:
        return empty, problems
    cols: dict[str, list] = {c: [] for c in NORMALISED_COLUMNS}
    shared: dict[str, str] = {}  # one string object per distinct model name
    dup, rownum = _Duplicates(), array.array("q")
    with _open_binary(path_or_bytes) as raw:
        text = io.TextIOWrapper(raw, encoding=enc, newline="")
        sep = _delimiter(text.readline().lstrip("\ufeff"))
        text.seek(0)
        try:
            rows = csv.reader(text, delimiter=sep)
            h = _header([c.strip().lstrip("\ufeff") for c in next(rows, [])], sep, label, problems)
            if h is None:
                return empty, problems
            known = set(known_models) if known_models is not None else None
            for i, r in enumerate(rows, 2):  # header = row 1; blank lines count, as in an editor
                if not any(c.strip() for c in r):
                    continue
                rownum.append(i)
                got = _row(i, r, h, known, label, problems)
                if got is None:
                    continue
                prev = dup.seen(got[5], i) if got[5] and all(got[5][:3]) and not repeats else None
                if prev is not None:
                    what = f"id {got[5][0]!r}" if h.has("id") else "(prompt_id, model_a, model_b)"
                    hint = (
                        "" if h.has("id") else "; add an 'id' column if repeated judgements are intended"
                    )
                    problems.append(
                        Problem(
                            i,
                            "id" if h.has("id") else None,
                            f"duplicate of row {prev}: same {what}{hint}",
                            label,
                        )
                    )
                for c, x in zip(NORMALISED_COLUMNS, got[:5]):
                    cols[c].append(shared.setdefault(x, x) if c in ("model_a", "model_b") else x)
                for c, x in zip(OPTIONAL_COLUMNS, got[6]):  # a column only once a row has a value in it
                    if x is not None or c in cols:
                        col = cols.setdefault(c, [None] * (len(cols["model_a"]) - 1))
                        col.append(shared.setdefault(x, x) if c in ("labeller", "category") else x)
        except csv.Error as exc:
            return empty, [Problem(None, None, f"not a readable CSV file ({exc})", label)]
    if not rownum:
        return empty, [
            Problem(None, None, "file has a header but no data rows: no comparisons in file", label)
        ]
    # object columns: a missing label stays None (not NaN, not a string dtype); an optional column no row
    # fills is one shared all-None column (no per-row list while streaming)
    n = len(cols["model_a"])
    none = pd.Series([None] * n, dtype=object) if len(cols) < len(ALL_COLUMNS) else None
    return pd.DataFrame(
        {c: pd.Series(cols[c], dtype=object) if c in cols else none for c in ALL_COLUMNS}
    ), problems


def read_comparisons_file(path: str | Path) -> pd.DataFrame:
    """A CSV of comparisons (the CLI's ``--comparisons``) -> the normalised rows, through the same
    validator as uploads (:func:`validate_comparisons_csv`, no size limit; repeated votes on one
    prompt and pair are data here, as in Arena, not duplicates); every problem is listed
    in one :class:`InvalidUpload`-style UserError."""
    require_file(path)
    df, problems = validate_comparisons_csv(path, max_bytes=2**62, repeats=True)
    if problems:
        shown = "\n  ".join(str(p) for p in problems[:50])
        more = f"\n  ... and {len(problems) - 50} more" if len(problems) > 50 else ""
        raise UserError(
            f"{path}: not a readable CSV of comparisons ({len(problems)} problem"
            f"{'s' if len(problems) != 1 else ''}):\n  {shown}{more}"
        )
    return df
