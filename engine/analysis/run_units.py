"""A run's comparison units with their judge and human labels: the one frame the judge audit and the
run's PPR rank-sets read.

A unit is (prompt_id, repeat, mode, model pair). Pairs are put in a canonical order (``model_a`` <
``model_b``; a label given for the swapped pair is swapped with it). A unit judged in both
presentation orders has one judge label (docs/METHODS.md 9.2): the common winner when both orders
agree, ``tie`` when they disagree, the parsed one when the other is unparseable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from engine.errors import UserError
from engine.store import label_log as LL
from engine.store import run_labels as RL
from engine.store import verdicts as VS

KEY = ["prompt_id", "repeat", "mode", "model_a", "model_b"]
CODES = {"a": 0, "b": 1, "tie": 2}


def codes(s: pd.Series) -> np.ndarray:
    """Winners 'a' | 'b' | 'tie' | None -> 0 | 1 | 2 | -1."""
    return s.map(CODES).fillna(-1).to_numpy(np.int64)


def canonical(df: pd.DataFrame, winner_cols: list[str]) -> pd.DataFrame:
    """model_a < model_b on every row; the winners (and ``presented``) of swapped rows swapped too."""
    df = df.copy()
    swap = (df.model_a.astype(str) > df.model_b.astype(str)).to_numpy()
    if swap.any():
        df.loc[swap, ["model_a", "model_b"]] = df.loc[swap, ["model_b", "model_a"]].to_numpy()
        for c in winner_cols:
            df.loc[swap, c] = df.loc[swap, c].map({"a": "b", "b": "a", "tie": "tie"})
        if "presented" in df:
            df.loc[swap, "presented"] = df.loc[swap, "presented"].map({"ab": "ba", "ba": "ab"})
    return df


@dataclass(frozen=True)
class LabelSources:
    """Which human labels of a run count: the one answer that the judge audit, the run's rank-sets,
    the planner, the report and every count read. A label sample recorded next to the database is read
    from its label log, the truth (synced or not: an answer undone after a sync is gone, although the
    synced copy in the store still holds it until the next sync); every other stored set whose meta
    names the run (an upload, an import) is read from the store."""

    samples: tuple[str, ...]  # label samples of the run (sample ids), read from their logs
    sets: tuple[tuple[str, str | None], ...]  # (name, meta mode) of the other stored sets naming the run


def label_sources(db: str | os.PathLike, run: str) -> LabelSources:
    """The run's :class:`LabelSources`: its recorded label samples, and the stored sets naming the run
    that are not a (synced copy of a) label sample."""
    samples = tuple(s["sample_id"] for s in LL.samples(db) if s.get("run") == run)
    sets = tuple((n, m) for n, m in RL.run_label_sets(db, run) if n not in samples)
    return LabelSources(samples, sets)


def _sample_labels(db: str | os.PathLike, sample_id: str) -> pd.DataFrame:
    df = LL.label_rows(db, sample_id).drop(columns=["judge_winner"])  # answers with a winner only
    return df.assign(repeat=df["repeat"].fillna(0).astype(np.int64), set_name=sample_id)


def human_labels(db: str | os.PathLike, run: str, set_name: str | None = None) -> pd.DataFrame:
    """Every human label of ``run``: THE one read of a run's labels (the judge audit, the run's PPR
    rank-sets and the planner all come through here), from the sources :func:`label_sources` names:
    each label sample of the run from its label log (a synced copy is never read, so nothing is read
    twice and an undone answer stays undone), and every other stored set whose meta names the run.
    ``set_name``: that one source only (a label sample's id reads its log).

    Returns:
        DataFrame: prompt_id, repeat, mode, model_a, model_b (canonical order), human_winner,
        labeller, labelled_at, presented, set_name; a missing repeat reads 0, a missing mode the
        set's meta mode.
    """
    src = label_sources(db, run)
    samples, sets = list(src.samples), list(src.sets)
    if set_name is not None:
        meta = dict(sets)
        if set_name not in meta and set_name not in samples:
            from engine.store.comparisons import set_exists

            if not set_exists(db, set_name):
                raise UserError(
                    f"unknown comparison set {set_name!r}; sets of run {run!r}: "
                    f"{', '.join(sorted({*meta, *samples})) or 'none'}"
                )
        in_log = set_name in samples
        samples = [set_name] if in_log else []
        sets = [] if in_log else [(set_name, meta.get(set_name))]
    frames = []
    for name, mode in sets:
        df = RL.set_label_rows(db, name)
        df["mode"] = df["mode"].astype(object).where(df["mode"].notna(), mode)
        df["repeat"] = df["repeat"].fillna(0).astype(np.int64)
        frames.append(df.assign(set_name=name))
    frames += [_sample_labels(db, sid) for sid in sorted(samples)]
    cols = [*RL.LABEL_COLUMNS, "set_name"]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=cols)
    out = pd.concat(frames, ignore_index=True)[cols]
    return canonical(out.astype({"human_winner": object}), ["human_winner"])


def judge_units(db: str | os.PathLike, run: str, judge: str, mode: str | None = None) -> pd.DataFrame:
    """The run's units judged by ``judge``: KEY, w_ab, w_ba (model-terms codes by order; -1 none) and
    judge (the combined code), one row per unit, sorted by KEY."""
    v = canonical(VS.verdict_winners(db, run, judge, mode).astype({"winner": object}), ["winner"])
    if v.empty:
        return pd.DataFrame(columns=[*KEY, "w_ab", "w_ba", "judge"])
    v["code"] = codes(v["winner"])
    wide = v.pivot_table(index=KEY, columns="presented", values="code", aggfunc="first").reset_index()
    for o in ("ab", "ba"):
        wide[o] = wide[o].fillna(-1).astype(np.int64) if o in wide else -1
    ab, ba = wide["ab"].to_numpy(), wide["ba"].to_numpy()
    both = (ab >= 0) & (ba >= 0)
    combined = np.where(both, np.where(ab == ba, ab, 2), np.maximum(ab, ba))
    wide.columns.name = None
    return wide[KEY].assign(w_ab=ab, w_ba=ba, judge=combined).sort_values(KEY, ignore_index=True)


def run_judges(db: str | os.PathLike, run: str) -> list[str]:
    """The judges with verdicts stored for ``run``."""
    g = VS.judgment_groups(db)
    return sorted(g.loc[g.run_id == run, "judge"].unique().tolist())


def first_labels(labels: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per unit: the first human label (by labelled_at, then stored order) and, where a second
    label from another labeller (any, when labellers are unknown) exists, the second.

    Returns:
        (first, second): DataFrames of KEY + human_winner.
    """
    if labels.empty:
        empty = pd.DataFrame(columns=[*KEY, "human_winner"])
        return empty, empty
    lab = labels.reset_index(drop=True).assign(_o=lambda d: np.arange(len(d)))
    lab = lab.sort_values(["labelled_at", "_o"], na_position="last", kind="stable")
    first = lab.drop_duplicates(KEY, keep="first")
    rest = lab.drop(first.index)
    who = first.set_index(KEY)["labeller"]
    if len(rest):
        prev = who.reindex(pd.MultiIndex.from_frame(rest[KEY])).to_numpy()
        other = (
            pd.isna(prev) | pd.isna(rest["labeller"].to_numpy()) | (prev != rest["labeller"].to_numpy())
        )
        rest = rest[other]
    second = rest.drop_duplicates(KEY, keep="first")
    return first[[*KEY, "human_winner"]], second[[*KEY, "human_winner"]]


def check_models(labels: pd.DataFrame, units: pd.DataFrame, run: str) -> None:
    """UserError when human labels name models the run's judged units do not have."""
    if labels.empty or units.empty:
        return
    known = set(units.model_a) | set(units.model_b)
    bad = sorted((set(labels.model_a) | set(labels.model_b)) - known)
    if bad:
        raise UserError(
            f"human labels name models not in run {run!r}: {', '.join(map(str, bad[:5]))}; "
            f"the run's models: {', '.join(sorted(map(str, known)))}"
        )


def fill_modes(labels: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """Labels without a mode (a set stored before the mode column, its meta naming none) take the
    judged units' mode when there is only one; otherwise they stay unmatched."""
    if labels.empty or units.empty or labels["mode"].notna().all():
        return labels
    modes = units["mode"].unique()
    if len(modes) != 1:
        return labels
    return labels.assign(mode=labels["mode"].astype(object).where(labels["mode"].notna(), modes[0]))


def merge_labels(units: pd.DataFrame, first: pd.DataFrame) -> pd.DataFrame:
    """``units`` with the human label of each (None where unlabelled); repeat and mode matched as
    given."""
    f = first.astype({"repeat": np.int64}) if len(first) else first
    out = units.merge(f, on=KEY, how="left")
    h = out["human_winner"].astype(object)
    return out.assign(human_winner=h.where(h.notna(), None))


@dataclass(frozen=True)
class AuditSource:
    """A (run, judge) with stored verdicts, and how many human labels the run has: a page's choice."""

    run: str
    judge: str
    n_verdicts: int
    n_labels: int

    @property
    def label(self) -> str:
        return (
            f"run {self.run} · judge {self.judge} · {self.n_verdicts:,} verdicts · "
            f"{self.n_labels:,} human labels"
        )


def label_skips(db: str | os.PathLike, run: str, mode: str | None = None) -> tuple[int, int]:
    """(answers with a winner, skips) over the run's label samples (their logs; ``mode``: those samples
    only). A skipped unit stays in its sample as missing (METHODS 9.1): the skip rate is reported."""
    answered = skipped = 0
    for sid in label_sources(db, run).samples:
        if mode is not None and LL.get_sample(db, sid).get("mode") != mode:
            continue
        rows = LL.label_rows(db, sid, with_skips=True)
        skipped += int(rows["human_winner"].isna().sum())
        answered += int(rows["human_winner"].notna().sum())
    return answered, skipped


def label_count(db: str | os.PathLike, run: str) -> int:
    """How many human labels ``run`` has: the rows :func:`human_labels` reads, counted from the same
    :func:`label_sources` (cheap; the key on which pages refresh as labels arrive)."""
    src = label_sources(db, run)
    stored = RL.set_label_count(db, [name for name, _ in src.sets])  # its sets read once, above
    return stored + sum(len(LL.label_rows(db, sid)) for sid in src.samples)


def audit_sources(db: str | os.PathLike) -> list[AuditSource]:
    """Every (run, judge) with verdicts, runs with human labels first."""
    from engine.analysis.comparisons import judgment_sources

    g = judgment_sources(db)
    if g.empty:
        return []
    per = g.groupby(["run_id", "judge"], sort=True)["n"].sum().reset_index()
    counts = {r: label_count(db, r) for r in per.run_id.unique()}
    out = [
        AuditSource(str(r.run_id), str(r.judge), int(r.n), counts[r.run_id]) for r in per.itertuples()
    ]
    return sorted(out, key=lambda s: (s.n_labels == 0, s.run, s.judge))
