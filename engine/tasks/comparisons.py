"""Pairwise comparisons: reading, validating and normalising human / judge preference files.

Normalised form (one row per comparison): prompt_id, model_a, model_b, human_winner,
judge_winner, with winners in {"a", "b", "tie"} or None (no label).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from engine.errors import UserError
from engine.tasks.jsonl import parse_object

_WINNER_MAP = {
    "a": "a", "model_a": "a",
    "b": "b", "model_b": "b",
    "tie": "tie", "tie (bothbad)": "tie",
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
        raise UserError(f"unknown winner value {value!r}; allowed: {', '.join(ALLOWED_WINNERS)} or empty")
    return _WINNER_MAP[v]


def arena_prompt_id(row: dict, i: int) -> str | None:
    """An Arena line's prompt id: its question_id, else its num, else the line's index; a JSON
    null stays None (stored as NULL, never as the string "None")."""
    for key in ("question_id", "num"):
        if key in row:
            return None if row[key] is None else str(row[key])
    return str(i)


def read_arena(human: str | Path | None, judge: str | Path | None = None,
               models: list[str] | None = None) -> pd.DataFrame:
    """Read Chatbot Arena JSON-lines files (line-aligned human and judge files) into normalised rows.

    The same validation as an upload (:func:`validate_arena`, no size limit): any problem (bad
    JSON, a field of the wrong type, a non-UTF-8 file, lines that disagree) is ONE UserError naming
    the file, the line and the field. ``models`` keeps only comparisons whose two models are both in
    the list.
    """
    if human is None and judge is None:
        raise UserError("give at least one of the human or the judge file")
    for f in (human, judge):
        if f is not None and not Path(f).is_file():
            raise UserError(f"file not found: {f}")
    df, problems = validate_arena(human, judge, max_bytes=2 ** 62)
    if problems:
        more = f" ({len(problems)} problems in all; `python -m engine import comparisons` lists them)" \
            if len(problems) > 1 else ""
        raise UserError(f"{problems[0]}{more}")
    if models:
        keep = set(models)
        df = df[df.model_a.isin(keep) & df.model_b.isin(keep)].reset_index(drop=True)
        if df.empty:
            raise UserError(f"no comparison involves only the models {sorted(keep)}")
    return df


# ---------------------------------------------------------------------------------------------
# Validation of uploads (CSV and Arena JSON lines) and named comparison sets in the store.
# Nothing is written unless the whole file validates; a set is written in ONE transaction.
# ---------------------------------------------------------------------------------------------

import array  # noqa: E402  (below the shared building blocks above, which keep their form)
import codecs  # noqa: E402  (below the shared building blocks above, which keep their form)
import csv  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402

from engine import config, store  # noqa: E402

MAX_UPLOAD_BYTES = config.MAX_UPLOAD_BYTES
REQUIRED_COLUMNS = ("prompt_id", "model_a", "model_b", "winner")
OPTIONAL_COLUMNS = ("judge_winner", "id")
FORMATS = config.COMPARISON_FORMATS
NORMALISED_COLUMNS = ("prompt_id", "model_a", "model_b", "human_winner", "judge_winner")
MAX_PROBLEMS_IN_MESSAGE = 50


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
        super().__init__(f"upload rejected, nothing was written ({len(self.problems)} problem"
                         f"{'s' if len(self.problems) != 1 else ''}):\n  {shown}{tail}")


def _label(source) -> str:
    """How problems name the file: its path, or for bytes their ``name`` attribute (an upload's
    file name, e.g. ``dashboard.uploads.NamedBytes``), else ``<upload>``."""
    if isinstance(source, (bytes, bytearray)):
        return getattr(source, "name", None) or "<upload>"
    return str(source)


def _size_within(source, max_bytes: int, problems: list[Problem], label: str) -> bool:
    """The file's size checked BEFORE reading: False (a problem recorded) when over ``max_bytes``;
    UserError when the path is not a file."""
    if isinstance(source, (bytes, bytearray)):
        size = len(source)
    else:
        p = Path(source)
        if not p.is_file():
            raise UserError(f"file not found: {p}")
        size = p.stat().st_size
    if size > max_bytes:
        problems.append(Problem(None, None, f"file is {size / 2**20:.1f} MiB, over the limit of "
                                            f"{max_bytes / 2**20:.0f} MiB; split it into smaller files", label))
        return False
    return True


def _read_text(source, max_bytes: int, problems: list[Problem]) -> str | None:
    """The file's text, or None after recording a problem (too big, empty, not UTF-8).

    The size is checked BEFORE reading, so a huge file is never loaded into memory.
    """
    label = _label(source)
    if not _size_within(source, max_bytes, problems, label):
        return None
    raw = bytes(source) if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
    if not raw.strip():
        problems.append(Problem(None, None, "file is empty", label))
        return None
    if raw[:4] == b"PK\x03\x04" or raw[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":
        problems.append(Problem(None, None, "this is a spreadsheet (Excel) or zip file, not text; export it as "
                                            "CSV (UTF-8) first", label))
        return None
    try:
        text = raw.decode("utf-8-sig")  # tolerate a UTF-8 byte-order mark
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        problems.append(Problem(None, None, f"file is not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); "
                                            "save it with UTF-8 encoding", label))
        return None
    if "\x00" in text:
        problems.append(Problem(None, None, "file contains NUL bytes (binary, or UTF-16?); save it as UTF-8 text", label))
        return None
    return text


def _check_pair(row: int, model_a: str, model_b: str, known: set[str] | None, label: str,
                problems: list[Problem]) -> None:
    if model_a and model_b and model_a == model_b:
        problems.append(Problem(row, "model_b", f"model_a and model_b are the same model {model_a!r}", label))
    if known is not None:
        for col, m in (("model_a", model_a), ("model_b", model_b)):
            if m and m not in known:
                shown = ", ".join(sorted(known)[:20]) + (" ..." if len(known) > 20 else "")
                problems.append(Problem(row, col, f"unknown model {m!r}; known models: {shown}", label))


def _winner(value: str, row: int, column: str, label: str, problems: list[Problem]) -> str | None:
    try:
        return normalise_winner(value)
    except UserError:
        problems.append(Problem(row, column, f"bad winner value {value!r}; allowed: "
                                             f"{', '.join(ALLOWED_WINNERS)}", label))
        return None


def _delimiter(text: str) -> str:
    """',' unless the header only parses with ';' or a tab (spreadsheets in some locales)."""
    first = text.split("\n", 1)[0]
    for d in (",", ";", "\t"):
        cols = {c.strip().strip('"') for c in first.split(d)}
        if set(REQUIRED_COLUMNS) <= cols:
            return d
    return ","


def _open_binary(source):
    """A binary stream over a path or bytes (a BytesIO shares the bytes' buffer: no copy)."""
    return io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else Path(source).open("rb")


def _precheck_stream(source, max_bytes: int, problems: list[Problem]) -> bool:
    """:func:`_read_text`'s checks (size before reading, empty, spreadsheet, UTF-8, NUL) in 1 MiB
    blocks, so a big file is never held in memory as a whole. False after recording a problem."""
    label = _label(source)
    if not _size_within(source, max_bytes, problems, label):
        return False
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, nonblank, first = 1, False, True
    with _open_binary(source) as fh:
        while True:
            block = fh.read(1 << 20)
            if first and (block[:4] == b"PK\x03\x04" or block[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
                problems.append(Problem(None, None, "this is a spreadsheet (Excel) or zip file, not text; export it as "
                                                    "CSV (UTF-8) first", label))
                return False
            first = False
            pending = len(decoder.getstate()[0])  # bytes of a character split across two blocks
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                pos = exc.start - pending
                bad = block[pos] if 0 <= pos < len(block) else 0
                line = lines + block[:max(pos, 0)].count(b"\n")
                problems.append(Problem(None, None, f"file is not UTF-8 text (byte 0x{bad:02x} at line {line}); "
                                                    "save it with UTF-8 encoding", label))
                return False
            if not block:
                break
            if b"\x00" in block:
                problems.append(Problem(None, None, "file contains NUL bytes (binary, or UTF-16?); save it as UTF-8 text",
                                        label))
                return False
            nonblank = nonblank or bool(block.strip().lstrip(b"\xef\xbb\xbf"))
            lines += block.count(b"\n")
    if not nonblank:
        problems.append(Problem(None, None, "file is empty", label))
        return False
    return True


def validate_comparisons_csv(path_or_bytes, known_models: list[str] | set[str] | None = None,
                             max_bytes: int = MAX_UPLOAD_BYTES) -> tuple[pd.DataFrame, list[Problem]]:
    """Validate a CSV of pairwise comparisons; return the normalised rows and EVERY problem.

    Columns: prompt_id, model_a, model_b, winner (model_a/model_b/tie/tie (bothbad)/a/b, case
    and surrounding spaces ignored); optional judge_winner (aligned judge labels; then a row may
    leave winner blank if it has a judge label) and optional id (a row key: with it, rows that
    repeat a (prompt_id, model_a, model_b) are allowed; without it they are duplicates).
    Separator: comma, or ';' / tab when the header only parses with those.
    Problems: size over ``max_bytes`` (checked before reading), empty file, not UTF-8, missing or
    repeated columns, ragged rows, blank cells, bad winner values, model_a == model_b, unknown
    models (when ``known_models`` is given), duplicate rows.

    The file is streamed row by row (issue 14.5: a 50 MB CSV took 1.6 GB when it was read whole):
    one pass checks bytes in blocks, one parses rows into column lists (repeated model names and
    winners share one string object); duplicates are found through 64-bit hashes of the row keys.

    Returns:
        (DataFrame with columns prompt_id, model_a, model_b, human_winner, judge_winner, one row
        per data row; list of Problem, empty when the file is valid).
    """
    problems: list[Problem] = []
    label = _label(path_or_bytes)
    empty = pd.DataFrame(columns=list(NORMALISED_COLUMNS))
    if not _precheck_stream(path_or_bytes, max_bytes, problems):
        return empty, problems
    with _open_binary(path_or_bytes) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        head_line = text.readline()
        text.seek(0)
        sep = _delimiter(head_line)
        reader = csv.reader(text, delimiter=sep)
        try:
            header = [h.strip() for h in next(reader, [])]
            if not any(header):
                return empty, [Problem(None, None, "the first line must be a header with columns "
                                                   f"{', '.join(REQUIRED_COLUMNS)}", label)]
            seen: set[str] = set()
            for h in header:
                if h and h in seen:  # blank names (trailing separators) are ignored columns
                    problems.append(Problem(None, h, f"column {h!r} appears more than once in the header", label))
                seen.add(h)
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            for c in missing:
                problems.append(Problem(None, c, f"missing column {c!r}; required: {', '.join(REQUIRED_COLUMNS)} "
                                                 f"(found: {', '.join(header)})", label))
            if missing or problems:
                return empty, problems
            col = {h: header.index(h) for h in header if h}
            has_judge, has_id = "judge_winner" in col, "id" in col
            known = set(known_models) if known_models is not None else None
            cols: dict[str, list] = {c: [] for c in NORMALISED_COLUMNS}
            shared: dict[str, str] = {}  # one string object per distinct model name
            first_seen: dict[int, int] = {}  # hash(row key) -> index of its first row in the column lists
            exact: dict[tuple | str, int] = {}  # only for keys whose hash another key already has
            rownum: array.array = array.array("q")  # index in the column lists -> row number
            ids: list[str] = []

            def key_at(k: int) -> tuple | str:
                return ids[k] if has_id else (cols["prompt_id"][k], cols["model_a"][k], cols["model_b"][k])
            n_data = 0
            for i, r in enumerate(reader, 2):  # header = row 1; blank lines count, as in an editor
                if not any(c.strip() for c in r):
                    continue
                n_data += 1
                if len(r) != len(header):
                    problems.append(Problem(i, None, f"has {len(r)} fields, the header has {len(header)} (an unquoted "
                                                     f"{'comma' if sep == ',' else repr(sep)} in a cell?)", label))
                    continue
                v = {h: r[col[h]].strip() for h in col}
                for c in ("prompt_id", "model_a", "model_b") + (("id",) if has_id else ()):
                    if v[c] == "":
                        problems.append(Problem(i, c, "blank cell", label))
                judge = _winner(v["judge_winner"], i, "judge_winner", label, problems) if has_judge else None
                if v["winner"] == "":
                    if not (has_judge and v["judge_winner"] != ""):
                        problems.append(Problem(i, "winner", "blank cell (a row needs a winner"
                                                + (" or a judge_winner)" if has_judge else ")"), label))
                    human = None
                else:
                    human = _winner(v["winner"], i, "winner", label, problems)
                _check_pair(i, v["model_a"], v["model_b"], known, label, problems)
                key = v["id"] if has_id else (v["prompt_id"], v["model_a"], v["model_b"])
                if all(key if isinstance(key, tuple) else (key,)):
                    hk, prev = hash(key), None
                    k = first_seen.get(hk)
                    if k is not None and key_at(k) == key:
                        prev = rownum[k]
                    elif k is not None:  # two different keys with one hash (rare): compare exactly
                        prev = exact.setdefault(key, i)
                        prev = None if prev == i else prev
                    else:
                        first_seen[hk] = len(rownum)
                    if prev is not None:
                        what = f"id {v['id']!r}" if has_id else "(prompt_id, model_a, model_b)"
                        hint = "" if has_id else "; add an 'id' column if repeated judgements are intended"
                        problems.append(Problem(i, "id" if has_id else None,
                                                f"duplicate of row {prev}: same {what}{hint}", label))
                rownum.append(i)
                if has_id:
                    ids.append(v["id"])
                cols["prompt_id"].append(v["prompt_id"])
                cols["model_a"].append(shared.setdefault(v["model_a"], v["model_a"]))
                cols["model_b"].append(shared.setdefault(v["model_b"], v["model_b"]))
                cols["human_winner"].append(human)
                cols["judge_winner"].append(judge)
        except csv.Error as exc:
            return empty, [Problem(None, None, f"not a readable CSV file ({exc})", label)]
    if n_data == 0:
        return empty, [Problem(None, None, "file has a header but no data rows", label)]
    return pd.DataFrame(cols, columns=list(NORMALISED_COLUMNS)), problems


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _arena_text(source, max_bytes: int, problems: list[Problem]) -> str | None:
    """The file's text: UTF-8 (optional BOM), or UTF-16 when it starts with a UTF-16 byte-order mark
    (what some Windows editors save); anything else that is not UTF-8 is a problem."""
    label = _label(source)
    if isinstance(source, (bytes, bytearray)):
        head = bytes(source[:2])
    else:
        p = Path(source)
        if not p.is_file():
            raise UserError(f"file not found: {p}")
        with p.open("rb") as fh:
            head = fh.read(2)
    if head not in _UTF16_BOMS:
        return _read_text(source, max_bytes, problems)
    if not _size_within(source, max_bytes, problems, label):
        return None
    raw = bytes(source) if isinstance(source, (bytes, bytearray)) else Path(source).read_bytes()
    try:
        return raw.decode("utf-16")
    except UnicodeDecodeError:
        problems.append(Problem(None, None, "file starts with a UTF-16 byte-order mark but is not valid UTF-16; "
                                            "save it as UTF-8 text", label))
        return None


def _parse_arena_line(line: str) -> tuple[dict | None, str | None, str | None]:
    """One JSON line -> (object, None, None) or (None, field, problem). Never raises: deep nesting
    (RecursionError), numbers over Python's digit limit (ValueError) and wrong types are problems."""
    obj, problem = parse_object(line)
    if obj is None:
        return None, None, problem
    for key in ("model_a", "model_b", "winner"):
        if key not in obj:
            return None, key, f"missing field {key!r}"
        if not isinstance(obj[key], str) or not obj[key].strip():
            return None, key, f"must be non-blank text, got {_describe(obj[key])}"
    for key in ("num", "question_id"):  # optional ids: a scalar (their value becomes a key / a prompt id)
        v = obj.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
            return None, key, f"must be an integer or a string, got {_describe(v)}"
    return obj, None, None


def _describe(v) -> str:
    kind = {dict: "an object", list: "an array", bool: "a boolean", type(None): "null",
            float: "a number", int: "a number", str: "text"}.get(type(v), type(v).__name__)
    return f"{kind} ({_short(v)})" if isinstance(v, (str, int, float)) and not isinstance(v, bool) else kind


def _short(v) -> str:
    t = repr(v) if not isinstance(v, int) or abs(v) < 10 ** 30 else f"{str(v)[:12]}... ({len(str(abs(v)))} digits)"
    return t if len(t) <= 40 else t[:37] + "..."


def _arena_lines(source, max_bytes: int, problems: list[Problem]) -> list[tuple[int, dict]] | None:
    label = _label(source)
    text = _arena_text(source, max_bytes, problems)
    if text is None:
        return None
    rows, n_before = [], len(problems)
    # split on "\n" only: JSON strings may hold U+2028 and other characters str.splitlines() breaks on
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        obj, field, msg = _parse_arena_line(line)
        if obj is None:
            problems.append(Problem(lineno, field, msg or "bad line", label))
            continue
        rows.append((lineno, obj))
    if not rows and len(problems) == n_before:
        problems.append(Problem(None, None, "no comparisons in file", label))
    return rows


def validate_arena(human=None, judge=None, known_models: list[str] | set[str] | None = None,
                   max_bytes: int = MAX_UPLOAD_BYTES) -> tuple[pd.DataFrame, list[Problem]]:
    """Validate Chatbot Arena JSON-lines files (human and/or a line-aligned judge file).

    Each line: {"num", "question_id", "model_a", "model_b", "winner"}. Problems: size, empty,
    encoding, invalid JSON, missing fields, bad winners, model_a == model_b, unknown models,
    duplicate ``num``, and (with both files) different line counts or models on a line.

    Returns:
        (DataFrame in :func:`read_arena`'s normalised form, identical to its output for a valid
        file; list of Problem with line numbers).
    """
    if human is None and judge is None:
        raise UserError("give at least one of the human or the judge file")
    problems: list[Problem] = []
    empty = pd.DataFrame(columns=list(NORMALISED_COLUMNS))
    h = _arena_lines(human, max_bytes, problems) if human is not None else None
    j = _arena_lines(judge, max_bytes, problems) if judge is not None else None
    if problems:
        return empty, _as_lines(problems)
    known = set(known_models) if known_models is not None else None
    if h is not None and j is not None and len(h) != len(j):
        return empty, [Problem(None, None, f"human and judge files are not line-aligned: {len(h)} vs {len(j)} "
                                           "comparisons")]
    base = h if h is not None else j
    base_label = _label(human if h is not None else judge)
    out, seen_num = [], {}
    for i, (lineno, row) in enumerate(base):
        human_w = _winner(row["winner"], lineno, "winner", _label(human), problems) if h is not None else None
        judge_w = None
        if j is not None:
            jl, jr = j[i]
            judge_w = _winner(jr["winner"], jl, "winner", _label(judge), problems)
            if h is not None and (jr["model_a"], jr["model_b"]) != (row["model_a"], row["model_b"]):
                problems.append(Problem(lineno, "model_a", f"human and judge files disagree on the models "
                                                           f"({row['model_a']} vs {row['model_b']} / "
                                                           f"{jr['model_a']} vs {jr['model_b']})", base_label))
        _check_pair(lineno, row["model_a"], row["model_b"], known, base_label, problems)
        if "num" in row:
            if row["num"] in seen_num:
                problems.append(Problem(lineno, "num", f"duplicate num {row['num']!r} (first on line "
                                                       f"{seen_num[row['num']]})", base_label))
            else:
                seen_num[row["num"]] = lineno
        out.append({"prompt_id": arena_prompt_id(row, i),  # a null question_id is NULL, never "None"
                    "model_a": row["model_a"], "model_b": row["model_b"],
                    "human_winner": human_w, "judge_winner": judge_w})
    return pd.DataFrame(out, columns=list(NORMALISED_COLUMNS)), _as_lines(problems)


def _as_lines(problems: list[Problem]) -> list[Problem]:
    """JSON-lines problems are numbered by line."""
    return [replace(p, unit="line") for p in problems]


def _sha256(source) -> str:
    if isinstance(source, (bytes, bytearray)):
        return hashlib.sha256(source).hexdigest()
    h = hashlib.sha256()
    with Path(source).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _guess_format(source) -> str:
    if isinstance(source, (bytes, bytearray)):
        return "arena" if bytes(source).lstrip()[:1] == b"{" else "csv"
    return "arena" if Path(source).suffix.lower() in (".json", ".jsonl", ".ndjson") else "csv"


def _check_name(name: str) -> str:
    """A set name: non-blank, at most 200 characters, no control characters (a leading '-' is fine:
    jobs pass it as ``--name=VALUE``, so it is never read as an option)."""
    if not isinstance(name, str) or not name.strip():
        raise UserError("a comparison set needs a non-blank --name")
    name = name.strip()
    if len(name) > 200:
        raise UserError(f"set name is {len(name)} characters; at most 200 allowed")
    bad = sorted({c for c in name if ord(c) < 32 or ord(c) == 127})
    if bad:
        raise UserError(f"set name {name!r} contains control characters ({', '.join(repr(c) for c in bad)}); "
                        "use letters, digits, spaces and punctuation")
    return name


def import_comparisons(db, source, name: str, *, judge_file=None, fmt: str | None = None,
                       known_models: list[str] | set[str] | None = None, replace: bool = False,
                       max_bytes: int = MAX_UPLOAD_BYTES) -> dict:
    """Validate ``source`` (and ``judge_file``), then store it as comparison set ``name``.

    Args:
        db: database path.
        source: CSV path/bytes (``fmt="csv"``) or Arena human JSON-lines path/bytes (``fmt="arena"``;
            may be None when only ``judge_file`` is given). ``fmt`` None: guessed from the suffix.
        name: the set's name; an existing name is a UserError unless ``replace``.
        judge_file: Arena format only: the line-aligned judge file.
        known_models: when given, models outside the list are problems.

    Returns:
        Summary dict (name, n_rows, models, label counts). Raises :class:`InvalidUpload` listing
        every problem, having written nothing; the database is then exactly as before.
    """
    name = _check_name(name)
    if not replace and Path(db).exists():  # fail fast, before validating a big file (rechecked on write)
        with store.reader(db) as con:
            have = con.execute("SELECT count(*) FROM information_schema.tables "
                               "WHERE table_name = 'comparison_sets'").fetchone()[0]
            if have and con.execute("SELECT count(*) FROM comparison_sets WHERE name = ?", [name]).fetchone()[0]:
                raise UserError(f"a comparison set named {name!r} already exists; choose another --name or pass --replace")
    fmt = fmt or _guess_format(source if source is not None else judge_file)
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "csv":
        if judge_file is not None:
            raise UserError("--judge-file is for the Arena format; a CSV carries judge labels in a judge_winner column")
        if source is None:
            raise UserError("give the CSV file to import")
        df, problems = validate_comparisons_csv(source, known_models, max_bytes)
    else:
        df, problems = validate_arena(source, judge_file, known_models, max_bytes)
    if problems:
        raise InvalidUpload(problems)
    files = [s for s in (source, judge_file) if s is not None]
    meta = {"format": fmt, "files": [_label(s) for s in files], "sha256": [_sha256(s) for s in files],
            "judge_file": _label(judge_file) if judge_file is not None else None}
    exists = store_comparison_set(db, df, name, ", ".join(meta["files"]), meta, replace=replace)
    return {"name": name, "format": fmt, "n_rows": int(len(df)), "replaced": bool(exists),
            "models": sorted(set(df.model_a) | set(df.model_b)),
            "n_human_labels": int(df.human_winner.notna().sum()),
            "n_judge_labels": int(df.judge_winner.notna().sum())}


def store_comparison_set(db, df: pd.DataFrame, name: str, source: str, meta: dict, replace: bool = False) -> bool:
    """Write normalised rows (NORMALISED_COLUMNS) as set ``name`` in ONE transaction; returns whether
    a set of that name was replaced. An existing name without ``replace`` is a UserError (nothing written)."""
    name = _check_name(name)
    rows = df[list(NORMALISED_COLUMNS)].assign(set_name=name, row_idx=range(len(df)))
    with store.transaction(db) as con:
        exists = bool(con.execute("SELECT count(*) FROM comparison_sets WHERE name = ?", [name]).fetchone()[0])
        if exists and not replace:
            raise UserError(f"a comparison set named {name!r} already exists; choose another --name or pass --replace")
        con.execute("DELETE FROM comparisons WHERE set_name = ?", [name])
        con.execute("DELETE FROM comparison_sets WHERE name = ?", [name])
        con.execute("INSERT INTO comparison_sets (name, source, n_rows, meta) VALUES (?, ?, ?, ?)",
                    [name, source, len(df), json.dumps(meta)])
        store.insert_df(con, "comparisons", rows, ["set_name", "row_idx", "prompt_id", "model_a", "model_b",
                                                   "human_winner", "judge_winner"])
    return exists


def list_comparison_sets(db) -> pd.DataFrame:
    """Every stored comparison set: name, source, created_at, n_rows, n_human, n_judge, n_models, meta."""
    return store.query_df(db, """
        SELECT s.name, s.source, s.created_at, s.n_rows,
               count(c.human_winner) AS n_human, count(c.judge_winner) AS n_judge,
               (SELECT count(*) FROM (SELECT model_a FROM comparisons WHERE set_name = s.name
                                      UNION SELECT model_b FROM comparisons WHERE set_name = s.name)) AS n_models,
               CAST(s.meta AS VARCHAR) AS meta
        FROM comparison_sets s LEFT JOIN comparisons c ON c.set_name = s.name
        GROUP BY s.name, s.source, s.created_at, s.n_rows, s.meta ORDER BY s.created_at, s.name""")


def _known_sets(con) -> str:
    names = [r[0] for r in con.execute("SELECT name FROM comparison_sets ORDER BY name").fetchall()]
    return ", ".join(names) or "none stored"


def read_comparison_set(db, name: str) -> pd.DataFrame:
    """The rows of set ``name`` in file order (prompt_id, model_a, model_b, human_winner, judge_winner)."""
    with store.reader(db) as con:
        if not con.execute("SELECT count(*) FROM comparison_sets WHERE name = ?", [name]).fetchone()[0]:
            raise UserError(f"unknown comparison set {name!r}; stored sets: {_known_sets(con)}")
        df = con.execute("""SELECT prompt_id, model_a, model_b, human_winner, judge_winner FROM comparisons
                            WHERE set_name = ? ORDER BY row_idx""", [name]).df()
    return df.astype(object).where(df.notna(), None)


def delete_comparison_set(db, name: str) -> int:
    """Delete set ``name`` and its rows in one transaction; returns the number of rows deleted."""
    with store.transaction(db) as con:
        if not con.execute("SELECT count(*) FROM comparison_sets WHERE name = ?", [name]).fetchone()[0]:
            raise UserError(f"unknown comparison set {name!r}; stored sets: {_known_sets(con)}")
        n = con.execute("SELECT count(*) FROM comparisons WHERE set_name = ?", [name]).fetchone()[0]
        con.execute("DELETE FROM comparisons WHERE set_name = ?", [name])
        con.execute("DELETE FROM comparison_sets WHERE name = ?", [name])
    return int(n)


def export_comparison_set(db, name: str, out=None) -> str:
    """Set ``name`` as CSV in the upload format (prompt_id, model_a, model_b, winner, judge_winner,
    id; winners a/b/tie, blank = no label): re-importable as is. Writes to ``out`` if given."""
    df = read_comparison_set(db, name)
    csv_df = pd.DataFrame({"id": range(1, len(df) + 1), "prompt_id": df.prompt_id, "model_a": df.model_a,
                           "model_b": df.model_b, "winner": df.human_winner.fillna(""),
                           "judge_winner": df.judge_winner.fillna("")})
    text = csv_df.to_csv(index=False)
    if out is not None:
        Path(out).write_text(text, encoding="utf-8")
    return text
