"""Typed warnings of the analyses (the one warning type of engine.analysis): each carries a kind
that pages and tests check (never its text).

An :class:`AnalysisWarning` is a ``str`` (its text, so JSON output and ``st.warning`` are unchanged)
with a :class:`Notice` kind attached.
"""

from __future__ import annotations

from enum import Enum

# below this many prompts (clusters) the asymptotic intervals are labelled approximate
SMALL_SAMPLE_CLUSTERS = 30


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` in the number it needs: "1 repeat", "3 repeats", "1 sampled unit", "2,000
    units" (``many``: an irregular plural). Every count shown in a sentence goes through it."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


class Notice(str, Enum):
    CONNECTIVITY = "connectivity"  # the comparison graph falls apart: some models are never linked
    ABSENT_MODEL = "absent_model"  # a model has no labelled comparison in this group
    JUDGE_ONLY = "judge_only"  # judge-only rank-sets rank the judge's preferences
    SMALL_SAMPLE = "small_sample"  # few prompts / questions: intervals approximate
    DEGENERATE = "degenerate_bootstrap"  # zero-variance bootstrap: prompt-level Wilson interval used
    NOT_TESTED = "not_tested"  # a comparison that could not be tested validly
    UNPARSEABLE = "unparseable"  # judge verdicts that could not be parsed (left out)
    DEGENERATE_INTERVAL = "degenerate_interval"  # SE 0: an interval collapsed to a point
    DEGENERATE_SAVING = "degenerate_saving"  # a saving that divides by (or is) a zero SE
    NO_ERROR_LEVEL = (
        "no_error_level"  # the estimation error is 0 at every size: no saving at an error level
    )
    CANNOT_PLAN = "cannot_plan"  # the planner has no variance or error level to plan from
    NEEDS_LABELS = (
        "needs_labels"  # a judge-audit figure needs more human labels than exist (how many: in the text)
    )
    HIGH_SKIP_RATE = (
        "high_skip_rate"  # many sampled units were skipped: the labelled ones may not be a random sample
    )
    JUDGE_DRIFT = (
        "judge_drift"  # the provider reported more than one judge model for one judge's verdicts
    )
    NO_JUDGE_LABELS = (
        "no_judge_labels"  # a comparison set has no row with both a judge and a human label
    )


class AnalysisWarning(str):
    """A warning's text (a ``str``) with its :class:`Notice` kind."""

    kind: Notice

    def __new__(cls, kind: Notice, text: str) -> AnalysisWarning:
        obj = super().__new__(cls, text)
        obj.kind = Notice(kind)
        return obj

    @property
    def message(self) -> str:
        """The warning's text (the ``str`` itself)."""
        return str(self)

    def __getnewargs__(self) -> tuple[Notice, str]:  # type: ignore[override]  # pickling (Streamlit's cache)
        return (self.kind, str(self))


# what a few questions do to a per-model accuracy interval (engine.stats.multigen.proportion_interval;
# the figures: bench/accuracy_interval_coverage.py and docs/INTERVALS.md, exact binomial coverage)
ACCURACY_FEW_QUESTIONS = (
    "with one 0/1 score per question an accuracy's interval is the exact Clopper-Pearson one "
    "(covers at least 95%); with repeats or partial credit it is the t interval over questions, "
    "approximate with few questions"
)


def small_sample_warning(n_clusters: int, unit: str = "prompts") -> AnalysisWarning | None:
    """The SMALL_SAMPLE warning when fewer than SMALL_SAMPLE_CLUSTERS independent units, else None
    (with ``unit`` "questions" it also says what that does to an accuracy's interval)."""
    if n_clusters >= SMALL_SAMPLE_CLUSTERS:
        return None
    extra = f"; {ACCURACY_FEW_QUESTIONS}" if unit == "questions" else ""
    return AnalysisWarning(
        Notice.SMALL_SAMPLE,
        f"small sample: only {n_clusters} {unit} (independent units); "
        "intervals and tests are approximate below "
        f"{SMALL_SAMPLE_CLUSTERS}{extra}",
    )
