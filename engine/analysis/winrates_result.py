"""The typed results of the win-rate analysis (:mod:`engine.analysis.winrates`): frozen dataclasses that
the CLI, the pages and the tests read by attribute; ``to_dict()`` gives the ``winrates --json`` keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from engine.analysis.notices import AnalysisWarning, Notice
from engine.analysis.result_base import ToDict
from engine.analysis.stats_records import PositionBias

Matrix = dict[str, dict[str, Any]]  # {model: {opponent: value}}, the diagonal left out


@dataclass(frozen=True)
class AverageWinRate(ToDict):
    """One model's average win-rate (mean over opponents) with its CI, rank and rank-set."""

    winrate: float | None
    ci: list[float | None]
    rank: int
    rank_set: list[int]


@dataclass(frozen=True)
class BradleyTerry(ToDict):
    """Davidson (ties) Bradley-Terry strengths β with cluster-bootstrap CIs, ranks and rank-sets per
    model."""

    model: str
    beta: dict[str, float]
    nu: float
    ci: dict[str, list[float | None]]
    rank: dict[str, int]
    rank_set: dict[str, list[int]]
    ci_method: str


@dataclass(frozen=True)
class Elo(ToDict):
    """Elo-scale maximum likelihood ratings with CIs, and online Elo (K = 4) without an interval."""

    K: float
    rating: dict[str, float]
    online_rating: dict[str, float]
    ci: dict[str, list[float | None]]
    estimator: str
    ci_method: str


@dataclass(frozen=True)
class PairDiff(ToDict):
    """One ordered pair, group − other group win-rate: t test paired by prompt, max-T / Holm adjusted."""

    winrate: float | None
    winrate_other: float | None
    diff: float | None
    ci: list[float | None]
    t: float | None
    p: float | None
    p_holm: float | None
    p_maxt: float | None
    stars: str
    n_prompts: int


@dataclass(frozen=True)
class WinRates(ToDict):
    """Win-rates of one group of comparisons (:func:`engine.analysis.winrates.winrates_for`).

    ``compare`` / ``compare_test`` are set only when a second group was given (``compare`` None with a
    ``compare_test`` text when the pair could not be tested); the JSON leaves both keys out otherwise.
    """

    models: list[str]
    label: str
    group: str
    n: int
    n_clusters: int
    per_row_clusters: bool
    clustering: str
    matrix: Matrix
    ties: Matrix
    counts: Matrix
    ci: Matrix
    ci_method: str
    average: dict[str, AverageWinRate]
    average_ci_method: str
    rank_method: str
    procedure: str
    alpha: float
    tie_rate: float | None
    bradley_terry: BradleyTerry
    elo: Elo | None
    position_bias: PositionBias | None
    warnings: list[AnalysisWarning] = field(default_factory=list)
    compare: dict[str, dict[str, PairDiff]] | None = None
    compare_test: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if self.compare_test is None:  # no comparison group: no such keys
            del d["compare"], d["compare_test"]
        return d

    def has(self, kind: Notice) -> bool:
        return any(w.kind is kind for w in self.warnings)


@dataclass(frozen=True)
class VerdictCount:
    """How many judge verdicts a generation mode has, and how many could not be parsed."""

    total: int
    unparseable: int


@dataclass(frozen=True)
class WinRatesView:
    """The Win-rates page's analysis (:func:`engine.analysis.winrates.winrates_view`).

    ``table``: average win-rates with rank-sets per group; ``pairs``: per ordered pair the win-rate
    and CI per group (difference, p, Holm p, stars when compared); ``ratings``: {group: BT/Elo
    table}; ``verdicts``: {mode: VerdictCount} for judge verdicts (None for other sources).
    """

    results: dict[str, WinRates]
    table: pd.DataFrame
    pairs: pd.DataFrame
    ratings: dict[str, pd.DataFrame]
    label: str
    groups: list[str]
    source_note: str
    verdicts: dict[str, VerdictCount] | None = None
