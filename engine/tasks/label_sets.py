"""Human-label samples as files and comparison sets: progress counts, the rows a sample's labels
form (a comparison set every analysis reads), the sample as a CSV to label elsewhere, a filled CSV
brought back into the log, and the log copied into the store (``engine label sync``).

The comparison set of a sample is named after it (``labels-<run>-<mode>-s<seed>-n<n>``): one row per
unit with a winner, in drawn order (its first labeller's answer), then a second labeller's answers on
units marked for overlap as extra rows. Skipped and not yet answered units have no row (the standard
CSV has no row without a winner); the set's meta records the whole sample in drawn order and the
positions skipped, so the skip rate and the missing units stay known.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from engine.csvsafe import csv_frame, csv_read_cell
from engine.errors import UserError
from engine.store import label_log as LL
from engine.store.label_log import LABEL_COLUMNS, label_rows
from engine.tasks.comparisons import store_comparison_set
from engine.tasks.labels import _now_iso, check_labeller, fold, get_sample, run_samples

__all__ = ["LABEL_COLUMNS", "label_rows"]  # re-exported from engine.store.label_log

SAMPLE_CSV_COLUMNS = ("prompt_id", "model_a", "model_b", "repeat", "mode", "winner")


@dataclass(frozen=True)
class SampleStatus:
    """Progress of one sample: units labelled (a winner), skipped (answered, no winner), remaining."""

    sample_id: str
    run: str
    mode: str
    seed: int
    n: int
    labelled: int
    skipped: int
    remaining: int
    double_labelled: int
    labellers: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @property
    def line(self) -> str:
        return (
            f"{self.labelled} labelled, {self.skipped} skipped, of a sample of {self.n} "
            f"({self.remaining} remaining)"
        )


def sample_status(db, sample: dict[str, Any]) -> SampleStatus:
    """Counts of ``sample`` from its log (the source of truth)."""
    st = fold(LL.read_events(db, sample["sample_id"]), sample)
    labelled = sum(1 for rs in st.responses.values() if any(r["winner"] is not None for r in rs))
    answered = len(st.responses)
    return SampleStatus(
        sample["sample_id"],
        sample["run"],
        sample["mode"],
        sample["seed"],
        sample["n"],
        labelled,
        answered - labelled,
        sample["n"] - answered,
        sum(1 for rs in st.responses.values() if len(rs) > 1),
        tuple(sorted({r["labeller"] for rs in st.responses.values() for r in rs})),
    )


def label_status(db, run: str) -> list[SampleStatus]:
    """Progress of every recorded sample of ``run`` (UserError when the run has none)."""
    samples = run_samples(db, run)
    if not samples:
        raise UserError(
            f"run {run!r} has no label sample; draw one with `python -m engine label sample --run {run} "
            "--mode coupled --n 200 --seed 0`"
        )
    return [sample_status(db, s) for s in samples]


def skipped_positions(db, sample_id: str) -> list[int]:
    """Positions (drawn order) of the units whose every answer is a skip."""
    st = fold(LL.read_events(db, sample_id), get_sample(db, sample_id))
    return sorted(i for i, rs in st.responses.items() if all(ev["winner"] is None for ev in rs))


def sample_meta(sample: dict[str, Any]) -> dict[str, Any]:
    """What the comparison set's meta records: run, mode, seed, size, share and the drawn order."""
    return {
        "format": "labels",
        "sample_id": sample["sample_id"],
        "run": sample["run"],
        "mode": sample["mode"],
        "seed": sample["seed"],
        "n": sample["n"],
        "share": sample["share"],
        "n_units": sample["n_units"],
        "models": sample["models"],
        "order": sample["units"],
    }


def sync_labels(db, run: str) -> list[dict[str, Any]]:
    """Copy every sample of ``run`` (sample + log) into its comparison set, replacing the previous
    copy in one transaction each: idempotent, no duplicates. Needs the database's writer lock."""
    out = []
    for status in label_status(db, run):
        sample = get_sample(db, status.sample_id)
        rows = label_rows(db, status.sample_id)
        meta = {
            **sample_meta(sample),
            **status.to_dict(),
            "skipped_positions": skipped_positions(db, status.sample_id),
        }
        store_comparison_set(db, rows, status.sample_id, f"labels:{run}", meta, replace=True)
        out.append({"set": status.sample_id, "n_rows": int(len(rows)), **status.to_dict()})
    return out


def sample_csv(sample: dict[str, Any]) -> str:
    """The sample as the standard comparison CSV to label elsewhere: SAMPLE_CSV_COLUMNS, drawn order,
    model_a = the model shown first, ``winner`` empty (fill with a, b, tie or skip)."""
    rows = [
        {
            "prompt_id": p,
            "model_a": ma if pres == "ab" else mb,
            "model_b": mb if pres == "ab" else ma,
            "repeat": int(r),
            "mode": sample["mode"],
            "winner": "",
        }
        for p, r, ma, mb, pres, _ in sample["units"]
    ]
    return csv_frame(pd.DataFrame(rows, columns=list(SAMPLE_CSV_COLUMNS))).to_csv(index=False)


def _read_filled(source) -> pd.DataFrame:
    try:
        text = (
            Path(source).read_text(encoding="utf-8")
            if not isinstance(source, bytes)
            else source.decode("utf-8")
        )
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).map(csv_read_cell)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise UserError(f"cannot read label file {source!s}: {exc}") from None
    missing = [c for c in SAMPLE_CSV_COLUMNS if c not in df.columns]
    if missing:
        raise UserError(
            f"label file {source!s} lacks column(s) {', '.join(missing)}; "
            f"expected {', '.join(SAMPLE_CSV_COLUMNS)} (as `engine label sample --out` writes)"
        )
    return df


def _match_sample(
    df: pd.DataFrame, samples: list[dict[str, Any]], run: str, source
) -> tuple[dict, list[int]]:
    """The one sample of ``run`` containing every row of ``df``, and each row's unit position."""
    models = {m for s in samples for m in s["models"]}
    for _j, m in enumerate(list(df.model_a) + list(df.model_b)):
        if m not in models:
            raise UserError(
                f"label file {source!s} names model {m!r}, which is not in run {run!r} "
                f"(models: {', '.join(sorted(models))}); nothing was written"
            )
    for s in samples:
        where = {
            (p, int(r), frozenset((ma, mb))): i for i, (p, r, ma, mb, _, _) in enumerate(s["units"])
        }
        try:
            pos = [
                where[(p, int(r), frozenset((a, b)))]
                for p, r, a, b, mo in zip(df.prompt_id, df.repeat, df.model_a, df.model_b, df["mode"])
                if mo == s["mode"]
            ]
        except (KeyError, ValueError):
            continue
        if len(pos) == len(df):
            return s, pos
    raise UserError(
        f"label file {source!s} is not a sample of run {run!r}: its units are in none of the run's "
        f"samples ({', '.join(s['sample_id'] for s in samples)}); nothing was written"
    )


_FILE_WINNERS = {"a": "a", "b": "b", "tie": "tie", "skip": None}


def import_labels(db, source, run: str, labeller: str | None = None) -> dict[str, Any]:
    """Bring a filled sample CSV (``engine label sample --out``) back into the sample's label log.

    Every row must be a unit of one recorded sample of ``run`` and name only the run's models; the
    ``winner`` is a, b, tie, skip or empty (not labelled, ignored), in the file's model_a / model_b
    terms (model_a: shown first). The labeller is the file's ``labeller`` column, else ``labeller``.
    All checks pass before anything is written; answers already in the log (same unit and labeller)
    are not written again, so importing a file twice changes nothing.
    """
    samples = run_samples(db, run)
    if not samples:
        raise UserError(
            f"run {run!r} has no label sample; draw one with `python -m engine label sample --run {run} "
            "...`"
        )
    df = _read_filled(source)
    bad = [
        (j, w) for j, w in enumerate(df.winner.str.strip().str.lower()) if w and w not in _FILE_WINNERS
    ]
    if bad:
        raise UserError(
            f"label file {source!s} row {bad[0][0] + 1}: winner {bad[0][1]!r} is not one of "
            "a, b, tie, skip or empty; nothing was written"
        )
    sample, pos = _match_sample(df, samples, run, source)
    names = df["labeller"] if "labeller" in df.columns else pd.Series([""] * len(df))
    events: list[dict[str, Any]] = []
    for i, w, a, who in zip(pos, df.winner.str.strip().str.lower(), df.model_a, names):
        if not w:
            continue
        name = check_labeller(who or labeller or "")
        unit = sample["units"][i]
        winner = _FILE_WINNERS[w]
        flipped = a != unit[2]
        if flipped and winner in ("a", "b"):
            winner = "b" if winner == "a" else "a"
        events.append(
            {
                "event": "label",
                "id": uuid.uuid4().hex,
                "idx": i,
                "winner": winner,
                "presented": "ba" if flipped else "ab",
                "labeller": name,
                "session": f"import:{Path(str(source)).name}",
                "at": _now_iso(),
            }
        )

    taken: list[int] = [0]

    def decide(log):
        st = fold(log, sample)
        seen: set[tuple[int, str]] = set()
        new = []
        for ev in events:
            key = (ev["idx"], ev["labeller"])
            if ev["labeller"] in st.responders(ev["idx"]) or key in seen:
                continue
            if len(st.responders(ev["idx"])) + sum(i == ev["idx"] for i, _ in seen) >= LL.cap(
                sample, ev["idx"]
            ):
                taken[0] += 1  # the unit has every labeller it was drawn for: not a second count
                continue
            seen.add(key)
            new.append(ev)
        return new

    new = LL.append_decided(db, sample["sample_id"], decide)
    return {
        "sample_id": sample["sample_id"],
        "rows": int(len(df)),
        "answers": len(events),
        "written": len(new),
        "already_there": len(events) - len(new) - taken[0],
        "answered_by_others": taken[0],
    }
