"""The judge biases of the audit (analysis layer; docs/JUDGE_AUDIT.md, "Judge biases"): length bias,
self-preference and drift, each with the audit's prompt-clustered bootstrap interval (the same resamples
as every other figure of the audit), and the warning when the model a provider reported is not one
constant.

Reads: nothing itself; :func:`bias_inputs` gathers a run's lengths, its other judges' units and the
reported models through :mod:`engine.store.judge_facts` and :mod:`engine.analysis.run_units`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from engine.analysis import run_units as U
from engine.analysis.judge_audit_result import (
    Drift,
    Estimate,
    JudgeBiases,
    LengthBias,
    LengthBin,
    SelfPreference,
)
from engine.analysis.notices import AnalysisWarning, Notice
from engine.stats import judge_audit as JA
from engine.stats import judge_bias as JB

N_LENGTH_BINS = 4


@dataclass(frozen=True)
class BiasInputs:
    """What the bias figures need beyond the audited units: ``lengths`` (KEY + len_a, len_b; None: no
    length figures), their ``length_unit``, ``drift`` (second judge's name -> its unit frame, the same
    units judged again), ``reported_models`` (reported model -> verdicts; "" for not recorded) and
    ``self_models`` (candidates of the judge's family; None: found by :func:`family`)."""

    lengths: pd.DataFrame | None = None
    length_unit: str = "tokens"
    drift: dict[str, pd.DataFrame] = field(default_factory=dict)
    reported_models: dict[str, int] = field(default_factory=dict)
    self_models: list[str] | None = None


def family(name: str) -> str:
    """A model's family: the leading letters of its last path part, lowercased ("gpt-4o-mini" -> "gpt",
    "meta-llama/Llama-3.1-8B" -> "llama", "claude-3-opus" -> "claude", "Qwen2.5-7B" -> "qwen")."""
    m = re.match(r"[A-Za-z]+", str(name).rsplit("/", 1)[-1])
    return m.group(0).lower() if m else ""


def _est(iv: JA.Interval, i: int, n: int) -> Estimate:
    f = [None if not np.isfinite(x) else float(x) for x in (iv.estimate[i], iv.lower[i], iv.upper[i])]
    return Estimate(f[0], f[1], f[2], int(n))


Codes = Callable[[pd.Series], np.ndarray]


def _length(
    df: pd.DataFrame, codes: Codes, W, C: int, conf: float, inputs: BiasInputs
) -> LengthBias | None:
    """The length figures on ``df`` (audited units: KEY, judge, human_winner)."""
    if inputs.lengths is None or df.empty:
        return None
    m = df.merge(inputs.lengths, on=U.KEY, how="left")
    longer = JB.longer_side(m["len_a"].to_numpy(float), m["len_b"].to_numpy(float))
    if not (longer >= 0).any():
        return None
    j, h = m["judge"].to_numpy(np.int64), U.codes(m["human_winner"])
    cl = codes(m["prompt_id"])
    F = JB.length_features(j, h, longer)
    iv = JA.interval(JA.cluster_sums(F, cl, C), W, JB.length_bias_of_sums, conf)
    n_both, n_all = int(F[:, 0].sum()), int(F[:, 3].sum())
    gap = np.abs(m["len_a"].to_numpy(float) - m["len_b"].to_numpy(float))
    edges = JB.length_bins(gap[F[:, 3] > 0], N_LENGTH_BINS)
    bins = []
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        inside = (gap > lo) | ((gap >= lo) & (i == 0))
        inside &= gap <= hi
        Fi = F * inside[:, None]
        ivi = JA.interval(JA.cluster_sums(Fi, cl, C), W, JB.length_bias_of_sums, conf)
        bins.append(
            LengthBin(
                float(lo),
                float(hi),
                _est(ivi, 3, int(Fi[:, 3].sum())),
                _est(ivi, 1, int(Fi[:, 0].sum())),
            )
        )
    return LengthBias(
        inputs.length_unit,
        _est(iv, 0, n_both),
        _est(iv, 1, n_both),
        _est(iv, 2, n_both),
        _est(iv, 3, n_all),
        bins,
    )


def _self_preference(
    judge: str, df: pd.DataFrame, codes: Codes, W, C: int, conf: float, inputs: BiasInputs
) -> list[SelfPreference]:
    if df.empty:
        return []
    models = sorted(set(df.model_a) | set(df.model_b))
    fam = family(judge)
    own = (
        inputs.self_models if inputs.self_models is not None else [m for m in models if family(m) == fam]
    )
    own = [m for m in own if m in models]
    if not own or len(models) < 2:
        return []
    mi = {m: i for i, m in enumerate(models)}
    F = JA.bias_features(
        df.model_a.map(mi).to_numpy(np.int64),
        df.model_b.map(mi).to_numpy(np.int64),
        df["judge"].to_numpy(np.int64),
        U.codes(df["human_winner"]),
        len(models),
    )
    S = JA.cluster_sums(F, codes(df["prompt_id"]), C)
    out = []
    for m in own:
        s = mi[m]
        iv = JA.interval(S, W, functools.partial(JB.self_preference_of_sums, model=s), conf)
        n_s, n_all = int(F[:, s].sum()), int((F[:, : len(models)].sum(axis=1) > 0).sum())
        out.append(
            SelfPreference(m, family(m), _est(iv, 0, n_s), _est(iv, 1, n_all), _est(iv, 2, n_all))
        )
    return out


def _drift(
    judge: str, units: pd.DataFrame, codes: Codes, W, C: int, conf: float, inputs: BiasInputs
) -> list[Drift]:
    out = []
    for other, ou in inputs.drift.items():
        m = units[[*U.KEY, "judge"]].merge(
            ou[[*U.KEY, "judge"]].rename(columns={"judge": "second"}), on=U.KEY, how="inner"
        )
        first = m["judge"].to_numpy(np.int64)
        second = m["second"].to_numpy(np.int64)
        cl = codes(m["prompt_id"]) if len(m) else np.zeros(0, np.int64)
        F = JB.drift_features(first, second)
        n = int(F[:, 0].sum())
        iv = JA.interval(JA.cluster_sums(F, cl, C), W, JB.drift_of_sums, conf)
        stat, df, p = JB.marginal_homogeneity_test(first, second, cl, C)
        out.append(
            Drift(
                judge,
                other,
                n,
                _est(iv, 0, n),
                _est(iv, 1, n),
                _est(iv, 2, n),
                _est(iv, 3, n),
                stat,
                df,
                p,
            )
        )
    return out


def judge_biases(
    judge: str,
    units: pd.DataFrame,
    audited: pd.DataFrame,
    codes: Codes,
    W: np.ndarray,
    C: int,
    conf: float,
    inputs: BiasInputs,
) -> tuple[JudgeBiases, list[AnalysisWarning]]:
    """The bias figures of ``judge``: ``units`` its judged units (KEY, judge), ``audited`` the units with
    the human label merged (KEY, judge, human_winner); ``codes`` maps prompt ids to the bootstrap's
    clusters [0, C) and ``W`` holds the audit's resamples.

    Returns:
        (:class:`JudgeBiases`, warnings: a reported model that is not one constant).
    """
    # units no cluster code knows (prompts of other judges only) are left out of the drift figures
    res = JudgeBiases(
        _length(audited, codes, W, C, conf, inputs),
        _self_preference(judge, audited, codes, W, C, conf, inputs),
        _drift(judge, units, codes, W, C, conf, inputs),
        dict(inputs.reported_models),
    )
    warn = []
    named = {m: n for m, n in inputs.reported_models.items() if m}
    if len(named) > 1 or (named and len(inputs.reported_models) > 1):
        shown = ", ".join(f"{m or 'not recorded'} ({n:,})" for m, n in inputs.reported_models.items())
        warn.append(
            AnalysisWarning(
                Notice.JUDGE_DRIFT,
                f"the provider reported more than one model for judge {judge!r}: {shown}. The verdicts may "
                "come from different models (a silent update mid-run); audit each part, or re-judge the "
                "units with the model pinned",
            )
        )
    return res, warn


def bias_inputs(
    db: str | os.PathLike,
    run: str,
    judge: str,
    mode: str | None,
    drift: list[str],
    self_models: list[str] | None,
) -> BiasInputs:
    """A run's :class:`BiasInputs`: response lengths in tokens (characters where a generation has no
    token count), the ``drift`` judges' units, and the reported models of ``judge``."""
    from engine.store import judge_facts as JF

    g = JF.generation_lengths(db, run)
    unit = "tokens" if len(g) and g["n_tokens"].notna().all() else "characters"
    g = g.assign(length=g["n_tokens"] if unit == "tokens" else g["chars"])[
        ["model", "prompt_id", "repeat", "mode", "length"]
    ]
    lengths = None
    if len(g):
        units = U.judge_units(db, run, judge, mode)[U.KEY]
        la = g.rename(columns={"model": "model_a", "length": "len_a"})
        lb = g.rename(columns={"model": "model_b", "length": "len_b"})
        lengths = units.merge(la, on=["prompt_id", "repeat", "mode", "model_a"], how="left").merge(
            lb, on=["prompt_id", "repeat", "mode", "model_b"], how="left"
        )
    rm = JF.reported_models(db, run, judge, mode)
    reported = {("" if pd.isna(r) else str(r)): int(n) for r, n in zip(rm["reported_model"], rm["n"])}
    return BiasInputs(
        lengths,
        unit,
        {d: U.judge_units(db, run, d, mode) for d in drift},
        reported,
        self_models,
    )
