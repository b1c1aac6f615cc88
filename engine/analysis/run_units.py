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


def human_labels(db: str | os.PathLike, run: str, set_name: str | None = None) -> pd.DataFrame:
    """Every human label of ``run``: THE one read of a run's labels (the judge audit, the run's PPR
    rank-sets and the planner all come through here). Sets: ``set_name``, or every stored set whose
    meta names the run, and every label sample of the run read from its label log (synced into a set or
    not; a synced copy is not read twice).

    Returns:
        DataFrame: prompt_id, repeat, mode, model_a, model_b (canonical order), human_winner,
        labeller, labelled_at, presented, set_name; a missing repeat reads 0, a missing mode the
        set's meta mode.
    """
    sets = RL.run_label_sets(db, run)
    log = LL.run_label_rows(db, run)  # the label logs are the truth for their samples, synced or not
    in_log = set(log["sample_id"]) if len(log) else set()
    if set_name is not None:
        meta = dict(sets)
        if set_name not in meta and set_name not in in_log:
            from engine.store.comparisons import set_exists

            if not set_exists(db, set_name):
                raise UserError(
                    f"unknown comparison set {set_name!r}; sets of run {run!r}: "
                    f"{', '.join(sorted({*meta, *in_log})) or 'none'}"
                )
        sets = [(set_name, meta.get(set_name))]
    frames = []
    for name, mode in sets:
        if name in in_log:
            continue  # a synced copy of a label sample: read from its log below
        df = RL.set_label_rows(db, name)
        df["mode"] = df["mode"].astype(object).where(df["mode"].notna(), mode)
        df["repeat"] = df["repeat"].fillna(0).astype(np.int64)
        frames.append(df.assign(set_name=name))
    for sample_id, df in log.groupby("sample_id", sort=True) if len(log) else ():
        if set_name is None or sample_id == set_name:
            df = df[df["human_winner"].notna()].drop(columns=["judge_winner", "sample_id"])
            frames.append(df.assign(repeat=df["repeat"].fillna(0).astype(np.int64), set_name=sample_id))
    cols = [*RL.LABEL_COLUMNS, "set_name"]
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
    for s in LL.samples(db):
        if s.get("run") != run or (mode is not None and s.get("mode") != mode):
            continue
        for rs in LL.fold(LL.read_events(db, s["sample_id"])).responses.values():
            skipped += sum(ev.get("winner") is None for ev in rs)
            answered += sum(ev.get("winner") is not None for ev in rs)
    return answered, skipped


def label_count(db: str | os.PathLike, run: str) -> int:
    """How many human labels ``run`` has (cheap; the key on which pages refresh as labels arrive)."""
    synced = {s for s, _ in RL.run_label_sets(db, run)} & {s["sample_id"] for s in LL.samples(db)}
    stored = RL.run_label_count(db, run, exclude=tuple(sorted(synced)))
    log = LL.run_label_rows(db, run)
    return stored + int(log["human_winner"].notna().sum()) if len(log) else stored


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
