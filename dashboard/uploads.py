"""Uploads of pairwise comparisons: validate (a pure, cached read), save under data/uploads/, import as a
job."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import jobs
from dashboard.loaders import db_path
from engine.errors import UserError


class NamedBytes(bytes):
    """An upload's bytes that carry its file name (validation problems name the file)."""

    name: str | None = None


def named(data: bytes | None, name: str | None) -> bytes | None:
    if data is None:
        return None
    out = NamedBytes(data)
    out.name = name
    return out


@st.cache_data(show_spinner="Validating…", max_entries=8)
def validate_upload(
    fmt: str,
    main: bytes,
    judge: bytes | None,
    main_name: str | None = None,
    judge_name: str | None = None,
):
    """(normalised rows, problems as dicts) from engine.tasks.comparisons' validators (a pure read);
    problems name the uploaded files (``main_name`` / ``judge_name``)."""
    from engine.tasks import comparisons

    if fmt == "csv":
        rows, problems = comparisons.validate_comparisons_csv(named(main, main_name))
    else:
        rows, problems = comparisons.validate_arena(named(main, main_name), named(judge, judge_name))
    return rows, [
        {"file": p.file, "row": p.row, "column": p.column, "problem": p.message} for p in problems
    ]


def line_column(fmt: str) -> str:
    """The heading of the line-number column: CSV line numbers count the header line."""
    return "line (line 1 is the header)" if fmt == "csv" else "line"


def problems_table(problems: list[dict], fmt: str = "csv") -> pd.DataFrame:
    """The problems as a table: file, line (CSV: counting the header as line 1, as an editor
    does), column, problem; whole-file problems have no line."""
    df = pd.DataFrame(problems, columns=["file", "row", "column", "problem"])
    lines = df["row"].map(lambda r: "" if r is None or pd.isna(r) else str(int(r)))
    return pd.DataFrame(
        {
            "file": df["file"],
            line_column(fmt): lines,
            "column": df["column"].fillna(""),
            "problem": df["problem"],
        }
    )


def n_models(rows) -> int:
    return len(set(rows["model_a"]) | set(rows["model_b"]))


_SAFE = re.compile(
    r"[^A-Za-z0-9_.-]+"
)  # everything else (controls, NUL, bidi overrides, '/', spaces) -> '-'


def default_set_name(filename: str, max_len: int = 60) -> str:
    """The upload's stem as a name: runs of anything outside ``[A-Za-z0-9_.-]`` become '-', leading
    and trailing '-' and '.' go (so '..' or '.hidden' are never a name), at most ``max_len``."""
    stem = Path(filename.replace("\x00", "").replace("\\", "/")).stem
    return _SAFE.sub("-", stem).strip("-.")[:max_len].strip("-.") or "upload"


def safe_suffix(filename: str) -> str:
    """The upload's extension for the saved file: ASCII letters and digits only, at most 10 of them (a
    300-character "suffix", an embedded NUL or a right-to-left override never reach the file system)."""
    suffix = Path(filename.replace("\x00", "")).suffix.lower()
    clean = re.sub(r"[^a-z0-9]", "", suffix)[:10]
    return "." + clean if clean else ""


def safe_file_name(filename: str, max_stem: int = 60) -> str:
    """The one upload-name sanitiser: a browser-given file name as a plain ASCII file name for this
    folder (no folder part, no '..', no controls, NUL or bidi overrides, stem at most ``max_stem``
    characters and suffix at most 10 letters or digits)."""
    return default_set_name(filename, max_stem) + safe_suffix(filename)


def write_new_file(path: Path, data: bytes) -> None:
    """Create ``path`` (exclusively) with ``data``, whole or not at all: a write the file system refuses
    (a full disk, a read-only folder) removes the partial file and is one UserError line.
    FileExistsError when ``path`` exists."""
    try:
        with open(path, "xb") as fh:
            fh.write(data)
    except FileExistsError:
        raise
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise UserError(
            f"the upload could not be saved as {path} ({exc.strerror or exc}); nothing was kept: "
            "free some space (or fix the folder's permissions) and upload again"
        ) from None


def saved_name(filename: str) -> str:
    """``YYYYmmdd-HHMMSS-RANDOM-STEM.ext``: at most 95 ASCII characters from ``[A-Za-z0-9_.-]``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}-{safe_file_name(filename)}"


def uploads_dir() -> Path:
    return db_path().resolve().parent / "uploads"


def save_upload(filename: str, data: bytes) -> Path:
    """Save a validated upload under data/uploads/ (timestamped, sanitised name, a random suffix and
    an exclusive create: two uploads of one name in the same second never overwrite each other).
    A full disk leaves no partial file (:func:`write_new_file`)."""
    d = uploads_dir()
    d.mkdir(parents=True, exist_ok=True)
    while True:
        p = d / saved_name(filename)
        try:
            write_new_file(p, data)
            return p
        except FileExistsError:  # astronomically unlikely; pick another suffix
            continue


def start_import(
    fmt: str,
    main_name: str,
    main: bytes,
    judge_name: str | None,
    judge: bytes | None,
    name: str,
    replace: bool,
) -> str | None:
    """Save the files and run ``python -m engine import comparisons`` as a job."""
    main_path = save_upload(main_name, main)
    # --name=VALUE: a name starting with '-' must not be read as an option by the job's parser
    args = [
        "import",
        "comparisons",
        str(main_path),
        "--db",
        str(db_path()),
        f"--name={name}",
        "--format",
        fmt,
    ]
    if judge is not None:
        args += ["--judge-file", str(save_upload(judge_name or "judge.json", judge))]
    if replace:
        args.append("--replace")
    try:
        job_id = jobs.start_job(
            args, kind="import", db=db_path(), progress=False, env={"COUPLED_EVAL_DB": str(db_path())}
        )
    except (UserError, OSError) as exc:
        st.error(f"Could not start the import: {exc}")
        return None
    return job_id
