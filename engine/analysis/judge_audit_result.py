"""The judge audit's result types that its parts share (analysis layer): a figure with its interval
(:class:`Estimate`) and the judge biases (:class:`JudgeBiases`: length bias, self-preference, drift, the
reported models), so that :mod:`engine.analysis.judge_audit` and :mod:`engine.analysis.judge_biases`
read one definition without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from engine.analysis.result_base import ToDict


@dataclass(frozen=True)
class Estimate(ToDict):
    """A figure with its prompt-clustered expanded percentile CI (None where undefined) and the units it
    used."""

    estimate: float | None
    lower: float | None
    upper: float | None
    n: int


NONE = Estimate(None, None, None, 0)


@dataclass(frozen=True)
class LengthBin(ToDict):
    """Units whose absolute length difference lies in (low, high] (the first bin closed below): the share
    of verdicts that pick the longer response, the judge's on every judged unit and the humans' on the
    labelled ones."""

    low: float
    high: float
    judge: Estimate
    human: Estimate


@dataclass(frozen=True)
class LengthBias(ToDict):
    """Does the judge prefer the longer response more than people do? Shares of units whose label picks
    the longer response (a tie is no win; units of equal length left out)."""

    unit: str  # "tokens" or "characters"
    judge: Estimate  # the judge's share, on units with both labels
    human: Estimate  # the humans' share on the same units
    difference: Estimate  # judge minus human (> 0: the judge favours length more than people)
    judge_all: Estimate  # the judge's share on every judged unit (no label needed)
    bins: list[LengthBin]  # by absolute length difference: the judge's win-rate of the longer response


@dataclass(frozen=True)
class SelfPreference(ToDict):
    """A candidate of the judge's own family: its judge-minus-human bias against the others' mean."""

    model: str
    family: str
    bias: Estimate  # b_model
    others: Estimate  # mean b_m over the other models
    difference: Estimate  # bias minus others (> 0: the judge favours its own family)


@dataclass(frozen=True)
class Drift(ToDict):
    """The same units judged twice (``first`` then ``second``: two judges' names, e.g. two dates of one
    model): how many verdicts changed, how the shares of a / b / tie moved, and the prompt-clustered
    test of marginal homogeneity (H0: no systematic change)."""

    first: str
    second: str
    n: int  # units judged by both
    changed: Estimate  # share of units whose verdict changed
    shift_a: Estimate  # share of a verdicts, second minus first
    shift_b: Estimate
    shift_tie: Estimate
    statistic: float | None
    df: int
    p_value: float | None


@dataclass(frozen=True)
class JudgeBiases(ToDict):
    """Length bias (runs: needs the responses' lengths), self-preference (candidates of the judge's
    family), drift (``--drift JUDGE``) and the model the provider reported per verdict (runs)."""

    length: LengthBias | None
    self_preference: list[SelfPreference]
    drift: list[Drift]
    reported_models: dict[str, int]  # reported model -> verdicts (a run's; {} for a set)

    def length_summary_table(self) -> pd.DataFrame:
        """The length figures: figure, estimate, lower, upper, n (empty without lengths)."""
        cols = ["figure", "estimate", "lower", "upper", "n"]
        if self.length is None:
            return pd.DataFrame(columns=cols)
        L = self.length
        named = (
            ("judge picks the longer", L.judge),
            ("people pick the longer", L.human),
            ("judge minus people", L.difference),
            ("judge, every judged unit", L.judge_all),
        )
        return pd.DataFrame([[f, e.estimate, e.lower, e.upper, e.n] for f, e in named], columns=cols)

    def length_table(self) -> pd.DataFrame:
        """Per bin of the length gap: who picks the longer response (judge on every judged unit, people
        on the labelled ones), estimate / lower / upper / n each; empty without lengths."""
        cols = ["length gap", "rater", "share picking the longer", "lower", "upper", "n"]
        if self.length is None:
            return pd.DataFrame(columns=cols)
        rows = []
        for b in self.length.bins:
            gap = f"{b.low:,.0f}-{b.high:,.0f} {self.length.unit}"
            for who, e in (("judge", b.judge), ("people", b.human)):
                rows.append(dict(zip(cols, [gap, who, e.estimate, e.lower, e.upper, e.n])))
        return pd.DataFrame(rows, columns=cols)

    def self_preference_table(self) -> pd.DataFrame:
        """One row per candidate of the judge's family: its bias, the others' mean, the difference."""
        return pd.DataFrame(
            [
                {
                    "model": s.model,
                    "bias": s.bias.estimate,
                    "others' mean bias": s.others.estimate,
                    "difference": s.difference.estimate,
                    "lower": s.difference.lower,
                    "upper": s.difference.upper,
                    "n": s.bias.n,
                }
                for s in self.self_preference
            ],
            columns=["model", "bias", "others' mean bias", "difference", "lower", "upper", "n"],
        )

    def drift_table(self) -> pd.DataFrame:
        """One row per second judging: share changed with its interval, the shifts, the test."""
        return pd.DataFrame(
            [
                {
                    "judged again by": d.second,
                    "units": d.n,
                    "changed": d.changed.estimate,
                    "lower": d.changed.lower,
                    "upper": d.changed.upper,
                    "shift a": d.shift_a.estimate,
                    "shift b": d.shift_b.estimate,
                    "shift tie": d.shift_tie.estimate,
                    "p (no systematic change)": d.p_value,
                }
                for d in self.drift
            ],
            columns=[
                "judged again by",
                "units",
                "changed",
                "lower",
                "upper",
                "shift a",
                "shift b",
                "shift tie",
                "p (no systematic change)",
            ],
        )


def n_of(n: int, noun: str, plural: str | None = None) -> str:
    """ "1 sampled unit", "2 sampled units": a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
