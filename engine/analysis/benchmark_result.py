"""The typed results of the benchmark comparison (:mod:`engine.analysis.benchmark`): frozen
dataclasses that the CLI, the pages and the figures read by attribute; ``to_dict()`` gives the
``benchmark-compare --json`` keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.analysis.notices import AnalysisWarning, Notice
from engine.analysis.result_base import ToDict as _ToDict
from engine.analysis.stats_records import (
    KdeCurve,
    McNemar,
    PairedDiff,
    PredictedSaving,
    ScoreVariance,
    VarianceComponents,
    VarianceSaving,
)


@dataclass(frozen=True)
class SavingAt(_ToDict):
    """The paper's curve saving at one error level ε: 1 − n_coupled(ε) / n_independent(ε)."""

    error: float
    n_coupled: float | None
    n_independent: float | None
    saving: float | None
    at_smallest_size: bool | None
    error_source: str


@dataclass(frozen=True)
class Kdes(_ToDict):
    """KDE curves of the per-question covariance and of Var(A − B) per mode."""

    covariance_coupled: KdeCurve
    var_diff_coupled: KdeCurve
    var_diff_independent: KdeCurve | None = None

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if d["var_diff_independent"] is None:  # the JSON has no key for an absent mode
            del d["var_diff_independent"]
        return d


@dataclass(frozen=True)
class Planner(_ToDict):
    """Questions × repeats per design (docs/METHODS.md 7.1) from this run's variance components.
    ``can_plan`` False (with a CANNOT_PLAN warning) when the run gives no variance or error level."""

    target_mde: float
    alpha: float
    power: float
    target_se: float | None
    target_se_source: str
    target_error: float
    dataset_questions: int
    dataset_repeats: int
    formula: str
    components: dict[str, VarianceComponents]  # design (a mode, or independent predicted from coupled)
    mde_plans: list[dict[str, Any]]
    se_plans: list[dict[str, Any]]
    headline_fits: bool
    headline: str
    can_plan: bool = True


@dataclass(frozen=True)
class SavingDefinitions(_ToDict):
    """What each saving figure of :class:`BenchmarkComparison` means (one sentence each)."""

    variance_saving: str  # the headline
    saving: str  # the paper's resampling curves
    saving_ci: str  # predicted at error ε
    questions_factor: str


@dataclass(frozen=True)
class BenchmarkComparison(_ToDict):
    """Coupled vs independent comparison of two models
    (:func:`engine.analysis.benchmark.benchmark_compare`).

    ``paired``, ``mcnemar_majority`` and ``accuracy_by_mode`` (keyed by mode, then model) hold the
    engine.stats results as typed records (:mod:`engine.analysis.stats_records`), as do ``saving_ci``
    and ``variance_saving``; ``error_curve`` is a table of rows
    {n, coupled, independent, *_low, *_high}. ``warnings`` are typed (:class:`AnalysisWarning`).
    """

    run: str
    subject: str | None
    rule: str
    models: list[str]
    n_questions: int
    n_repeats: int
    n_resamples: int
    seed: int
    mean_covariance_coupled: float
    median_var_diff_coupled: float
    median_var_diff_independent: float | None
    mean_var_diff_coupled: float
    mean_var_diff_independent: float | None
    accuracy: dict[str, float]
    accuracy_by_mode: dict[str, dict[str, ScoreVariance]]  # mode -> model -> score
    paired: dict[str, PairedDiff]  # mode -> paired difference
    mcnemar_majority: dict[str, McNemar]  # mode -> test
    kde: Kdes
    truth: dict[str, float]
    error_curve: list[dict[str, Any]]
    error_curve_band: str
    saving: float | None
    saving_detail: SavingAt
    saving_at_n: SavingAt
    saving_ci: PredictedSaving | None
    variance_saving: VarianceSaving | None
    saving_definitions: SavingDefinitions
    planner: Planner
    warnings: list[AnalysisWarning] = field(default_factory=list)

    def has(self, kind: Notice) -> bool:
        return any(w.kind is kind for w in self.warnings)


@dataclass(frozen=True)
class BenchmarkChoices(_ToDict):
    """What the benchmark-style pages offer: scored runs, and per run its models, rules, modes,
    subjects and number of scored repeats (the coupled-vs-independent analysis needs 2 or more)."""

    runs: list[str] = field(default_factory=list)
    models: dict[str, list[str]] = field(default_factory=dict)
    rules: dict[str, list[str]] = field(default_factory=dict)
    modes: dict[str, list[str]] = field(default_factory=dict)
    subjects: dict[str, list[str]] = field(default_factory=dict)
    repeats: dict[str, int] = field(default_factory=dict)
