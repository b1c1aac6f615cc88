"""Harness logs from the Upload page: save the files of one upload into their own folder (names kept:
lm-eval pairs ``results_<t>.json`` with ``samples_<task>_<t>.jsonl`` by name), preview what they
hold, and import them with ``python -m engine import harness`` as a job."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pandas as pd

from dashboard import jobs_panel
from dashboard.loaders import db_path
from dashboard.uploads import safe_file_name, uploads_dir, write_new_file
from engine.errors import UserError
from engine.tasks.harness import read_harness


def save_files(files: list[tuple[str, bytes]]) -> Path:
    """One new folder under data/uploads/ with the files under their own names, sanitised by the
    uploads' one sanitiser (dashboard.uploads.safe_file_name; long stems kept: lm-eval pairs files by
    name). Two names that sanitise alike, or a write the file system refuses (a full disk), are one
    UserError line and leave no folder behind."""
    d = uploads_dir() / f"harness-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    d.mkdir(parents=True)
    try:
        for name, data in files:
            safe = safe_file_name(name, max_stem=200)
            try:
                write_new_file(d / safe, data)
            except FileExistsError:
                raise UserError(f"two uploaded files are both saved as {safe!r} (their names differ only in "
                                "characters a file name here cannot hold): rename one and upload again") from None
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    return d


def preview(folder: Path) -> pd.DataFrame:
    """One row per (model, task): harness, version, samples, repeats, the harness's accuracy.
    UserError (the folder is removed) when a file is not a readable harness log."""
    try:
        logs = read_harness(folder)
    except UserError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return pd.DataFrame([{"model": lg.model, "task": lg.task, "harness": lg.harness, "version": lg.version,
                          "samples": len({s.sample_id for s in lg.samples}),
                          "repeats": len({s.repeat for s in lg.samples}), "accuracy (harness)": lg.headline}
                         for lg in logs])


def start_import(folder: Path, name: str) -> str | None:
    args = ["import", "harness", str(folder), "--db", str(db_path())]
    if name.strip():
        args.append(f"--name={name.strip()}")
    return jobs_panel.start_job(args, kind="import")
