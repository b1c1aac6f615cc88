"""Text pieces of the Home page's headline findings (:class:`engine.analysis.summary.RunSummary`)."""

from __future__ import annotations

from dashboard.widgets import md_escape
from engine.analysis.summary import PairSummary, RunSummary


def pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def chance_text(s: RunSummary) -> str:
    if s.chance is None:
        return "no chance baseline (no gold answers)"
    how = "a uniform guess" if s.kind == "multiple_choice" else "always giving the most common answer"
    return f"chance {s.chance:.3f} ({how})"


def accuracy_rows(s: RunSummary) -> list[dict]:
    """The summary's accuracy table rows: model, mode, accuracy, 95% CI."""
    return [
        {
            "model": r.model,
            "mode": r.mode,
            "accuracy": round(r.accuracy, 3),
            "95% CI": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]",
        }
        for r in s.accuracy
    ]


def agreement(p: PairSummary, mode: str) -> float | None:
    return p.agreement[mode].mean if mode in p.agreement else None


def pair_caption(p: PairSummary) -> str:
    """One line on the paired accuracy difference of a model pair in both modes."""
    parts = [
        f"{mode}: {d.diff:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}] (SE {d.se:.3f})"
        for mode in ("coupled", "independent")
        for d in [p.diff.get(mode)]
        if d
    ]
    more = (
        f" Independent sampling needs {p.questions_factor:.1f}× the questions for the same precision."
        if p.questions_factor
        else ""
    )
    return (
        f"Accuracy difference {md_escape(p.model_a)} − {md_escape(p.model_b)}, paired over questions, "
        "95% CI (about questions like these): " + "; ".join(parts) + "." + more
    )


def saving_help(p: PairSummary) -> str:
    """The saving's definition (and its interval when the analysis gives one)."""
    text = p.saving_definition or (
        "1 - SE²(coupled) / SE²(independent) of the paired per-question accuracy "
        "difference (docs/METHODS.md 7.1)"
    )
    if p.variance_saving_ci is not None:
        text += f"; 95% CI [{pct(p.variance_saving_ci[0])}, {pct(p.variance_saving_ci[1])}]"
    return text


def sequential_lines(ls) -> list[str]:
    """A ``generate --until`` run's stop per mode (engine.analysis.sequential.LiveStop), each sentence
    saying its target (this benchmark's Δ_N), for beside the headline (about questions like these)."""
    return [f"Sequential stop, {lm.mode}: {ls.text(lm.mode)}." for lm in ls.modes]
