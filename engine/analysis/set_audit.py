"""Analysis layer of a comparison set's judge audit: stored data -> engine.stats -> a frozen result.

Judge audit of a stored comparison set (analysis layer; docs/JUDGE_AUDIT.md, "A comparison set"): an
imported CSV or Arena file whose rows carry both a judge and a human label is audited with the figures
of a run's audit (METHODS 9.2), clustered by the set's prompt ids.

Units. A unit is (prompt_id, repeat, mode, model pair), pairs in canonical order as in
:mod:`engine.analysis.run_units`. When the set records provenance (a ``repeat``, ``presented`` or
``labeller`` value on some row), rows with the same unit key are views of one unit: its judge verdicts in
both presentation orders (one judge label as in a run: the common winner, else tie) and its human labels
(a second labeller's label gives the human-human figures). Without provenance every row is a comparison
of its own (Arena battles of one question are different conversations): row i of a key gets repeat i.
A row without a prompt id is its own cluster (METHODS 7.2).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from engine.analysis import run_units as U
from engine.analysis.judge_audit import DEFAULT_BOOT, JudgeAudit, audit_units
from engine.analysis.notices import AnalysisWarning, Notice
from engine.errors import UserError

PROVENANCE = ("repeat", "presented", "labeller")


def set_frames(rows: pd.DataFrame, name: str) -> tuple[pd.DataFrame, pd.DataFrame, bool]:
    """A set's rows as the audit's two frames.

    Args:
        rows: the set's rows (:func:`engine.store.comparisons.read_set`); name: the set's name.
    Returns:
        (units: KEY, w_ab, w_ba, judge, one row per judged unit; labels: the human labels as
        :func:`engine.analysis.run_units.human_labels` returns them; whether rows were grouped into units
        by their provenance).
    """
    df = rows.copy()
    for c in ("repeat", "mode", "labeller", "labelled_at", "presented"):
        if c not in df:
            df[c] = None
    grouped = any(df[c].notna().any() for c in PROVENANCE)
    missing = df["prompt_id"].isna().to_numpy()
    pid = df["prompt_id"].astype(object).to_numpy().copy()
    pid[missing] = [f"\x00row{i}" for i in np.flatnonzero(missing)]  # each its own cluster
    df["prompt_id"] = pid
    df["mode"] = df["mode"].astype(object).where(df["mode"].notna(), "")
    df = U.canonical(
        df.astype({"human_winner": object, "judge_winner": object}), ["human_winner", "judge_winner"]
    )
    if grouped:
        df["repeat"] = df["repeat"].astype(object).where(df["repeat"].notna(), 0).astype(np.int64)
    else:
        df["repeat"] = df.groupby(["prompt_id", "mode", "model_a", "model_b"], sort=False).cumcount()
    j = df[df["judge_winner"].notna()].assign(
        code=lambda d: U.codes(d["judge_winner"]),
        order=lambda d: d["presented"].where(d["presented"].isin(["ab", "ba"]), "ab"),
    )
    if j.empty:
        units = pd.DataFrame(columns=[*U.KEY, "w_ab", "w_ba", "judge"])
    else:
        wide = j.pivot_table(index=U.KEY, columns="order", values="code", aggfunc="first").reset_index()
        ab = (
            wide["ab"].fillna(-1).astype(np.int64).to_numpy() if "ab" in wide else np.full(len(wide), -1)
        )
        ba = (
            wide["ba"].fillna(-1).astype(np.int64).to_numpy() if "ba" in wide else np.full(len(wide), -1)
        )
        both = (ab >= 0) & (ba >= 0)
        wide.columns.name = None
        units = wide[U.KEY].assign(
            w_ab=ab, w_ba=ba, judge=np.where(both, np.where(ab == ba, ab, 2), np.maximum(ab, ba))
        )
    h = df[df["human_winner"].notna()]
    if df["presented"].notna().any():  # a unit's human label repeated on its two order rows is one label
        h = h.drop_duplicates([*U.KEY, "human_winner", "labeller", "labelled_at"])
    cols = [
        "prompt_id",
        "model_a",
        "model_b",
        "human_winner",
        "repeat",
        "mode",
        "labeller",
        "labelled_at",
        "presented",
    ]
    labels = h[cols].assign(set_name=name).reset_index(drop=True)
    return units.sort_values(U.KEY, ignore_index=True), labels, grouped


def _set_meta(db: str | os.PathLike, name: str) -> dict:
    from engine.analysis.comparisons import comparison_sets

    sets = comparison_sets(db)
    row = sets[sets["name"] == name]
    if row.empty:
        known = ", ".join(sets["name"].tolist()) or "(none)"
        raise UserError(f"unknown comparison set {name!r}; stored sets: {known}")
    try:
        meta = json.loads(row.iloc[0]["meta"] or "{}")
    except (TypeError, json.JSONDecodeError):
        meta = {}
    return meta if isinstance(meta, dict) else {}


def set_judge_audit(
    db: str | os.PathLike,
    name: str,
    mode: str | None = None,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    conf: float = 0.95,
) -> JudgeAudit:
    """The judge audit of comparison set ``name``: its judge labels against its human labels, every figure
    with the prompt-clustered bootstrap interval (``n_boot`` resamples, ``seed``, level ``conf``).

    Raises:
        UserError: an unknown set, or a set without judge labels or without human labels (naming what it
            has and what to run instead).
    """
    from engine.store.comparisons import read_set

    meta = _set_meta(db, name)
    rows = read_set(db, name)
    n_h, n_j = int(rows["human_winner"].notna().sum()), int(rows["judge_winner"].notna().sum())
    if not n_h or not n_j:
        run = meta.get("run_id") or meta.get("run")
        hint = (
            f"; its run's audit: python -m engine judge-audit --run {run} --judge JUDGE --human {name}"
            if run and n_h
            else ""
        )
        raise UserError(
            f"comparison set {name!r} has {n_h:,} human and {n_j:,} judge labels: a judge audit needs both "
            f"on the same comparisons{hint}"
        )
    if mode is not None:
        rows = rows[rows["mode"].isna() | (rows["mode"] == mode)]
    units, labels, _ = set_frames(rows, name)
    known = set(units.model_a) | set(units.model_b)
    labels = labels[labels.model_a.isin(known) & labels.model_b.isin(known)]
    judge = str(meta.get("judge") or "judge")
    res = audit_units(
        None, judge, units, labels, mode=mode, n_boot=n_boot, seed=seed, conf=conf, human_sets=[name]
    )
    warn = list(res.warnings)
    if res.n_audited == 0:
        warn.append(
            AnalysisWarning(
                Notice.NO_JUDGE_LABELS,
                f"no comparison of set {name!r} carries both a judge and a human label: nothing to audit",
            )
        )
    return replace(res, set_name=name, warnings=warn)


@dataclass(frozen=True)
class SetAuditSource:
    """A stored comparison set with both judge and human labels: a choice of the Judge audit page."""

    name: str
    n_rows: int
    n_human: int
    n_judge: int

    @property
    def label(self) -> str:
        return (
            f"set {self.name} · {self.n_rows:,} comparisons · {self.n_human:,} human and "
            f"{self.n_judge:,} judge labels"
        )


def set_audit_sources(db: str | os.PathLike) -> list[SetAuditSource]:
    """Every stored comparison set with at least one judge and one human label, by name."""
    from engine.analysis.comparisons import comparison_sets

    sets = comparison_sets(db)
    if sets.empty:
        return []
    both = sets[(sets["n_human"] > 0) & (sets["n_judge"] > 0)].sort_values("name")
    return [
        SetAuditSource(str(r.name), int(r.n_rows), int(r.n_human), int(r.n_judge))
        for r in both.itertuples()
    ]
