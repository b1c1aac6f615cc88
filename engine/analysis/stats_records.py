"""Typed records of the ``engine.stats`` results that analyses pass on whole (the paired difference,
McNemar, the score with its variance decomposition, the two sample savings): frozen dataclasses that
the CLI, the pages and the figures read by attribute.

``engine.stats`` stays pure and returns dicts; each record's ``of(d)`` takes that dict (its keys must
be exactly the fields: a new key in the statistic fails loudly here instead of vanishing), and
``to_dict()`` gives the same dict back, so the ``--json`` output does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

from engine.analysis.result_base import ToDict


def _check_keys(cls: type, d: dict[str, Any], optional: tuple[str, ...] = ()) -> None:
    """ValueError naming the unexpected or missing keys when a stats dict and its record disagree."""
    names = {f.name for f in fields(cls)}
    extra, missing = set(d) - names, names - set(d) - set(optional)
    if extra or missing:
        raise ValueError(
            f"{cls.__name__}: unexpected keys {sorted(extra)}, missing keys {sorted(missing)}; "
            f"allowed: {sorted(names)}"
        )


class StatsRecord(ToDict):
    """A record of one stats dict: :meth:`of` checks its keys against the fields (``OPTIONAL`` may be
    absent) and builds the record."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def of(cls, d: dict[str, Any]) -> Self:
        _check_keys(cls, d, cls.OPTIONAL)
        return cls(**d)


@dataclass(frozen=True)
class PairedBootstrap(ToDict):
    """The paired bootstrap over questions that checks the t interval of :class:`PairedDiff`."""

    se: float
    ci_low: float
    ci_high: float
    n_resamples: int


@dataclass(frozen=True)
class PairedDiff(StatsRecord):
    """Paired difference A − B over questions (:func:`engine.stats.paired_difference.paired_diff_ci`,
    docs/METHODS.md 7.1): t interval, p-value, MDE and the variance components of the difference."""

    diff: float
    se: float
    df: int
    t: float
    p_value: float
    ci_low: float
    ci_high: float
    level: float
    corr: float  # NaN when one model's per-question accuracy is constant
    mde: float
    power: float
    n_questions: int
    n_repeats: int
    sigma2_between: float
    sigma2_within: float
    bootstrap: PairedBootstrap | None

    @classmethod
    def of(cls, d: dict[str, Any]) -> Self:
        _check_keys(cls, d)
        boot = d["bootstrap"]
        return cls(**{**d, "bootstrap": None if boot is None else PairedBootstrap(**boot)})


@dataclass(frozen=True)
class McNemar(StatsRecord):
    """McNemar's test on one outcome per question
    (:func:`engine.stats.paired_difference.mcnemar_majority`)."""

    n: int
    n10: int
    n01: int
    statistic: float | None  # None for the exact test
    p_value: float
    method: str  # "exact" | "chi2"
    outcome: str


@dataclass(frozen=True)
class ScoreVariance(StatsRecord):
    """A benchmark score with its t interval and the within / between-prompt decomposition of its
    variance (:func:`engine.stats.multigen.score_variance`, docs/METHODS.md 5)."""

    mu: float
    sigma2_hat: float
    within: float
    sigma2_between: float
    var_within: float
    var_between: float
    var: float
    se: float
    df: int
    ci_low: float
    ci_high: float
    n: int
    k: int


@dataclass(frozen=True)
class VarianceSaving(StatsRecord):
    """The headline sample saving 1 − var(d^c)/var(d^i) with its studentised interval
    (:func:`engine.stats.saving.variance_saving`); ``saving`` None when a variance is 0."""

    saving: float | None
    ci_low: float | None
    ci_high: float | None
    level: float
    questions_factor: float | None
    var_coupled: float
    var_independent: float
    n_questions: int
    method: str
    definition: str


@dataclass(frozen=True)
class PredictedSaving(StatsRecord):
    """The saving at error ε predicted from the per-sample variances, with its interval
    (:func:`engine.stats.saving.saving_predicted`). ``ci_method`` only when an interval was made
    (the JSON has no key otherwise)."""

    error: float
    saving: float | None
    ci_low: float | None
    ci_high: float | None
    level: float
    n_coupled: float
    n_independent: float
    s2_coupled: float
    s2_independent: float
    N: int
    n_resamples: int
    n_valid: int
    ci_method: str | None = None

    OPTIONAL: ClassVar[tuple[str, ...]] = ("ci_method",)

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if d["ci_method"] is None:
            del d["ci_method"]
        return d


@dataclass(frozen=True)
class BootstrapCI(StatsRecord):
    """Percentile bootstrap interval of a score over prompts
    (:func:`engine.stats.multigen.bootstrap_score_ci`)."""

    se: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class SingleGeneration(StatsRecord):
    """The k scores one would report from a single generation per prompt, and their spread
    (:func:`engine.stats.multigen.single_generation_scores`)."""

    scores: list[float]
    best: float
    worst: float
    spread: float


@dataclass(frozen=True)
class PositionBias(StatsRecord):
    """The judge's position bias from judgements shown in both orders
    (:func:`engine.stats.paired_tests.position_bias`; NaN written as None for the JSON)."""

    n_judgements: int  # judgements shown in both orders
    n_unpaired: int
    flip_rate: float | None  # share whose verdict flips with the order
    consistency: float | None
    first_win_share: (
        float | None
    )  # share of decisive verdicts won by the first-shown output (0.5 = no bias)
    first_win_se: float | None
    first_win_low: float | None
    first_win_high: float | None
    tie_rate: float | None
    per_row_clusters: bool


@dataclass(frozen=True)
class KdeCurve(StatsRecord):
    """A kernel density estimate on a grid (:func:`engine.stats.benchmark.kde_curve`); ``lower`` the
    support's bound when reflected there (a variance), else None."""

    x: list[float]
    density: list[float]
    bandwidth: float
    degenerate: bool  # the data could not choose a bandwidth: the fallback one was used
    lower: float | None


@dataclass(frozen=True)
class VarianceComponents(StatsRecord):
    """Between- and within-question variance of the score difference A − B of a Q × R design
    (:func:`engine.stats.paired_difference.variance_components_diff`,
    :func:`engine.stats.benchmark.independent_components`)."""

    sigma2_between: float
    sigma2_within: float
    Q: int
    R: int
