"""Analysis layer of the run summary: stored data -> engine.stats -> a frozen result.

The headline findings of one scored run: what the Home page shows after the demo and what
``python -m engine summary --run RUN`` prints.

Per model and mode: accuracy with a 95% t interval over questions (questions are clusters: the
repeats of one question are dependent; docs/METHODS.md 7). Per model pair: how often the two models
give the same answer on the same unit in coupled vs independent mode, and the paired comparison of
their accuracies in each mode (per-question differences, docs/METHODS.md 7.1: ``paired_diff_ci``)
with the variance saving of coupling, 1 - SE_coupled^2 / SE_independent^2 (the share of questions
the coupled design saves for the same precision of the difference).

Numbers that cannot carry their usual meaning say so in typed warnings
(:class:`engine.analysis.notices.AnalysisWarning`, kinds SMALL_SAMPLE, DEGENERATE_INTERVAL,
DEGENERATE_SAVING): a small sample, an interval that collapsed to a point (no variation across
questions), a saving computed from a zero standard error.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from engine.analysis.notices import ACCURACY_FEW_QUESTIONS, AnalysisWarning, Notice
from engine.errors import UserError
from engine.stats.multigen import score_variance
from engine.stats.paired_difference import paired_diff_ci
from engine.stats.saving import variance_saving
from engine.store import scores as score_store

LEVEL = 0.95
SMALL_SAMPLE = 30  # fewer questions than this: t intervals and the saving are rough (docs/METHODS.md 7)
MODES = ("coupled", "independent")


@dataclass(frozen=True)
class Accuracy:
    model: str
    mode: str
    accuracy: float
    ci_low: float
    ci_high: float
    se: float
    n_questions: int
    n_repeats: int


@dataclass(frozen=True)
class Diff:
    """Paired per-question accuracy difference A - B of one mode (``paired_diff_ci``)."""

    diff: float
    se: float
    ci_low: float
    ci_high: float
    n_questions: int


@dataclass(frozen=True)
class Agreement:
    """Share of units where both models give the same answer, with its t interval."""

    mean: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class PairSummary:
    model_a: str
    model_b: str
    agreement: dict[str, Agreement] = field(default_factory=dict)  # mode -> agreement
    diff: dict[str, Diff] = field(default_factory=dict)  # mode -> paired difference
    variance_saving: float | None = None
    questions_factor: float | None = None
    variance_saving_ci: tuple[float, float] | None = None  # when the saving's analysis gives one
    saving_definition: str | None = None

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"model_a": self.model_a, "model_b": self.model_b}
        for mode in MODES:
            if mode in self.agreement:
                ag = self.agreement[mode]
                out.update(
                    {
                        f"agreement_{mode}": ag.mean,
                        f"agreement_{mode}_ci_low": ag.ci_low,
                        f"agreement_{mode}_ci_high": ag.ci_high,
                    }
                )
            if mode in self.diff:
                out[f"diff_{mode}"] = asdict(self.diff[mode])
        if self.variance_saving is not None:
            out["variance_saving"] = self.variance_saving
            out["questions_factor"] = self.questions_factor
        if self.variance_saving_ci is not None:
            out["variance_saving_ci"] = list(self.variance_saving_ci)
        if self.saving_definition is not None:
            out["saving_definition"] = self.saving_definition
        return out


@dataclass(frozen=True)
class RunSummary:
    run: str
    dataset_id: str | None
    kind: str | None
    status: str | None
    created_at: str | None
    rule: str
    rules: list[str]
    models: list[str]
    modes: list[str]
    n_questions: int
    n_repeats: int
    n_generations: int
    n_tokens: int
    generation_s: float | None
    chance: float | None
    level: float
    accuracy: list[Accuracy]
    pairs: list[PairSummary]
    warnings: list[AnalysisWarning] = field(default_factory=list)
    imported: dict | None = None  # an imported harness run's facts (engine.store.scores.imported_facts)

    @property
    def small_sample(self) -> bool:
        return any(w.kind is Notice.SMALL_SAMPLE for w in self.warnings)

    def to_dict(self) -> dict:
        d = {
            k: getattr(self, k)
            for k in (
                "run",
                "dataset_id",
                "kind",
                "status",
                "created_at",
                "rule",
                "rules",
                "models",
                "modes",
                "n_questions",
                "n_repeats",
                "n_generations",
                "n_tokens",
                "generation_s",
                "chance",
                "level",
            )
        }
        return {
            **d,
            "accuracy": [asdict(a) for a in self.accuracy],
            "pairs": [p.to_dict() for p in self.pairs],
            "warnings": [{"kind": w.kind.value, "message": w.message} for w in self.warnings],
            **({"imported": self.imported} if self.imported else {}),
        }


def _matrix(df: pd.DataFrame, col: str, prompts: list[str], repeats: list[int]) -> np.ndarray:
    """(Q, R) matrix of ``col`` indexed by prompt x repeat (NaN where a unit is missing)."""
    wide = df.pivot_table(index="prompt_id", columns="repeat", values=col, aggfunc="first")
    return wide.reindex(index=prompts, columns=repeats).to_numpy(dtype=float)


def _complete_rows(*mats: np.ndarray) -> np.ndarray:
    keep = np.ones(mats[0].shape[0], dtype=bool)
    for m in mats:
        keep &= ~np.isnan(m).any(axis=1)
    return keep


def _chance(kind: str | None, choices: list, golds: list) -> float | None:
    """The accuracy of answering without reading the question.

    Multiple choice: a uniform guess, mean of 1 / number of options. Numeric / exact answers: the
    best constant answer, the share of the most common gold answer (always replying "4" scores
    that). None when there are no gold answers.
    """
    if kind == "multiple_choice":
        sizes = [len(json.loads(c)) for c in choices if isinstance(c, str) and c]
        return float(np.mean([1.0 / s for s in sizes if s])) if sizes else None
    golds = [str(g).strip() for g in golds if g is not None]
    if not golds:
        return None
    return float(pd.Series(golds).value_counts().iloc[0] / len(golds))


def _accuracy(model: str, mode: str, Y: np.ndarray) -> Accuracy | None:
    Yc = Y[_complete_rows(Y)]
    if Yc.shape[0] < 2:
        return None
    sv = score_variance(Yc, conf=LEVEL)
    # the t interval clipped to [0, 1] (an accuracy cannot leave it; coverage is unchanged)
    return Accuracy(
        model,
        mode,
        sv["mu"],
        max(sv["ci_low"], 0.0),
        min(sv["ci_high"], 1.0),
        sv["se"],
        sv["n"],
        sv["k"],
    )


def _agreement(
    pa: pd.DataFrame, pb: pd.DataFrame, prompts: list[str], repeats: list[int]
) -> Agreement | None:
    """Same answer on the same unit (prompt, repeat): the extracted answers agree."""
    ea = pa.assign(x=pa["extracted"].astype("string")).set_index(["prompt_id", "repeat"])["x"]
    eb = pb.assign(x=pb["extracted"].astype("string")).set_index(["prompt_id", "repeat"])["x"]
    both = pd.concat([ea.rename("a"), eb.rename("b")], axis=1, join="inner").reset_index()
    both["agree"] = (both["a"].fillna("<none>") == both["b"].fillna("<none>")).astype(float)
    G = _matrix(both, "agree", prompts, repeats)
    G = G[_complete_rows(G)]
    if G.shape[0] < 2:
        return None
    ag = score_variance(G, conf=LEVEL)
    return Agreement(ag["mu"], ag["ci_low"], ag["ci_high"])


def _pair(
    a: str, b: str, modes: list[str], mats: dict, prompts: list[str], repeats: list[int]
) -> PairSummary:
    agreement, diffs = {}, {}
    for mode in modes:
        (A, pa), (B, pb) = mats[(a, mode)], mats[(b, mode)]
        keep = _complete_rows(A, B)
        if keep.sum() < 2:
            continue
        ag = _agreement(pa, pb, prompts, repeats)
        if ag is not None:
            agreement[mode] = ag
        r = paired_diff_ci(A[keep], B[keep], alpha=1 - LEVEL)
        diffs[mode] = Diff(r["diff"], r["se"], r["ci_low"], r["ci_high"], r["n_questions"])
    if not ("coupled" in diffs and "independent" in diffs and diffs["independent"].se > 0):
        return PairSummary(a, b, agreement, diffs)
    # the one headline saving (engine.stats.saving.variance_saving), on the questions of both modes
    (Ac, _), (Bc, _), (Ai, _), (Bi, _) = (
        mats[(m, mo)] for mo in ("coupled", "independent") for m in (a, b)
    )
    both_q = _complete_rows(Ac, Bc, Ai, Bi)
    if both_q.sum() < 2:
        return PairSummary(a, b, agreement, diffs)
    vs = variance_saving(Ac[both_q] - Bc[both_q], Ai[both_q] - Bi[both_q], level=LEVEL)
    ci = None if vs["ci_low"] is None else (vs["ci_low"], vs["ci_high"])
    return PairSummary(
        a, b, agreement, diffs, vs["saving"], vs["questions_factor"], ci, vs["definition"]
    )


def _warnings(n_questions: int, pairs: list[PairSummary]) -> list[AnalysisWarning]:
    out = []
    if n_questions < SMALL_SAMPLE:
        out.append(
            AnalysisWarning(
                Notice.SMALL_SAMPLE,
                (
                    f"small sample: {n_questions} questions (fewer than {SMALL_SAMPLE}); the intervals "
                    "and the variance saving are rough, and a difference the questions happen not to "
                    f"show reads as exactly 0; {ACCURACY_FEW_QUESTIONS}"
                ),
            )
        )
    for p in pairs:
        for mode, d in p.diff.items():
            if d.se == 0:
                out.append(
                    AnalysisWarning(
                        Notice.DEGENERATE_INTERVAL,
                        (
                            f"{p.model_a} vs {p.model_b}, {mode}: the per-question difference never "
                            f"varies, so its interval [{d.ci_low:+.3f}, {d.ci_high:+.3f}] (SE 0) is a "
                            "single point, not a measure of uncertainty"
                        ),
                    )
                )
        if p.variance_saving is not None and p.questions_factor is None:
            out.append(
                AnalysisWarning(
                    Notice.DEGENERATE_SAVING,
                    (
                        f"{p.model_a} vs {p.model_b}: the coupled SE is 0, so the variance saving reads "
                        "100%; that says the sample showed no variation, not that coupling removes all "
                        "of it"
                    ),
                )
            )
    return out


def run_summary(db: str | os.PathLike, run: str, rule: str | None = None) -> RunSummary:
    """Headline findings of a scored run (:class:`RunSummary`).

    Args:
        db: the database.  run: a stored run id.
        rule: the scoring rule to summarise (default: the rule the run was scored with,
            :func:`engine.store.scores.run_rule`).
    Raises:
        UserError: unknown run, or a run without scores (names the rules it has).
    """
    facts = score_store.run_facts(db, run)
    if not facts.rules:
        raise UserError(
            f"run {run!r} has no scores yet: score it first (python -m engine score --run {run})"
        )
    rule = score_store.run_rule(db, run, rule=rule)
    if rule not in facts.rules:
        raise UserError(
            f"run {run!r} has no scores for rule {rule!r}; scored rules: {', '.join(facts.rules)}"
        )
    df = score_store.run_scores(db, run, rule)
    if df.empty:
        raise UserError(f"run {run!r} has no gold answers to score under rule {rule!r}")
    models = sorted(df["model"].unique().tolist())
    modes = [m for m in MODES if m in set(df["mode"])]
    prompts = sorted(df["prompt_id"].unique().tolist())
    repeats = sorted(int(r) for r in df["repeat"].unique())
    mats, accuracy = {}, []
    for model in models:
        for mode in modes:
            part = df[(df["model"] == model) & (df["mode"] == mode)]
            mats[(model, mode)] = (_matrix(part, "score", prompts, repeats), part)
            acc = _accuracy(model, mode, mats[(model, mode)][0])
            if acc is not None:
                accuracy.append(acc)
    pairs = [
        _pair(a, b, modes, mats, prompts, repeats) for i, a in enumerate(models) for b in models[i + 1 :]
    ]
    return RunSummary(
        run=run,
        dataset_id=facts.dataset_id,
        kind=facts.kind,
        status=facts.status,
        created_at=facts.created_at,
        rule=rule,
        rules=facts.rules,
        models=models,
        modes=modes,
        n_questions=len(prompts),
        n_repeats=len(repeats),
        n_generations=facts.n_generations,
        n_tokens=facts.n_tokens,
        generation_s=None if _imported(db, run) else facts.generation_s,
        chance=_chance(facts.kind, facts.choices, facts.golds),
        level=LEVEL,
        accuracy=accuracy,
        pairs=pairs,
        warnings=_warnings(len(prompts), pairs),
    )


def _imported(db: str | os.PathLike, run: str) -> bool:
    """True for a run imported from a harness log: it has no generation time (its store time is the
    import's) and no token counts, so a summary leaves both out."""
    facts = score_store.imported_facts(db, run)
    return bool(facts and facts.get("harness"))


def latest_scored_run(db: str | os.PathLike) -> str | None:
    """The newest run that has scores (the Home page's default), or None."""
    return score_store.newest_scored_run(db)


def scored_runs(db: str | os.PathLike) -> list[str]:
    """Every scored run, newest first (the Home page's run choice)."""
    return score_store.scored_runs(db)
