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
from engine.tasks.harness_import import check_logs


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
                raise UserError(
                    f"two uploaded files are both saved as {safe!r} (their names differ only in "
                    "characters a file name here cannot hold): rename one and upload again"
                ) from None
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    return d


def preview(folder: Path) -> pd.DataFrame:
    """One row per (model, task): harness, version, samples, repeats, the harness's accuracy, after the
    import's own checks (:func:`engine.tasks.harness_import.check_logs`: logs of different tasks with no
    common sample id are refused here, not by the import job). UserError (the folder is removed) when a
    file is not a readable harness log or the logs cannot be imported together."""
    try:
        logs = read_harness(folder)
        check_logs(logs)
    except UserError as exc:
        message = _user_names(str(exc), folder)
        shutil.rmtree(folder, ignore_errors=True)
        raise UserError(message) from None
    return pd.DataFrame(
        [
            {
                "model": lg.model,
                "task": lg.task,
                "harness": lg.harness,
                "version": lg.version,
                "samples": len({s.sample_id for s in lg.samples}),
                "repeats": len({s.repeat for s in lg.samples}),
                "accuracy (harness)": lg.headline,
            }
            for lg in logs
        ]
    )


def preview_files(files: list[tuple[str, bytes]]) -> pd.DataFrame:
    """:func:`preview` of an upload's files, in a folder removed when the preview is done (the Import
    button saves the files again for its job): previews leave nothing in data/uploads/."""
    folder = save_files(files)
    try:
        return preview(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _user_names(message: str, folder: Path) -> str:
    """A check's message about the upload's internal folder, told with the user's file names instead
    (and, for lm-eval samples without their results file, what to add)."""
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    listed = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    for d in dict.fromkeys((str(folder.resolve()), str(folder))):
        message = message.replace(f"in {d!r}", f"among the uploaded files ({listed})").replace(
            d + "/", ""
        )
    if names and all(n.startswith("samples_") for n in names):
        message += "; lm-eval writes a results_*.json beside each samples_*.jsonl: upload both"
    return message


def start_import(folder: Path, name: str) -> str | None:
    args = ["import", "harness", str(folder), "--db", str(db_path())]
    if name.strip():
        args.append(f"--name={name.strip()}")
    return jobs_panel.start_job(args, kind="import")
