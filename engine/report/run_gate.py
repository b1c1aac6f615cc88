"""The run report's release-gate section (``report --gate-margin M``): is the headline pair's second
model B non-inferior to its first, A, by the margin M? The decision with its interval against −M, its
table, and the ``engine gate`` command that makes the same decision in a CI job (docs/GATE.md).

Numbers come from :func:`engine.analysis.gate.gate` (the same call as ``engine gate``)."""

from __future__ import annotations

from engine.errors import UserError
from engine.figures.gate import gate_figure
from engine.report.context import RunContext, frame_table
from engine.report.model import Figure, Section

METHODS_GATE = (
    "docs/GATE.md; docs/METHODS.md 7.1 (paired t interval over questions) and 8.2 (the confidence "
    "sequence of a --until run)"
)
COLUMNS = {
    "baseline": "baseline A",
    "candidate": "candidate B",
    "margin": "margin M",
    "difference": "B − A",
    "lower": "lower",
    "upper": "upper",
    "n_questions": "questions",
    "decision": "decision",
    "exit_code": "exit code",
    "more_questions": "more questions (planner)",
}


def gate_section(ctx: RunContext) -> Section | None:
    """The gate of the headline pair at ``ctx.gate_margin``; None without a margin or a pair."""
    from engine.analysis.gate import gate

    if ctx.gate_margin is None or ctx.pair is None:
        return None
    a, b = ctx.pair
    try:
        res = gate(ctx.db, ctx.run, a, b, ctx.gate_margin, ctx.alpha, ctx.mode, ctx.summary.rule)
    except UserError as exc:
        ctx.notes.append(f"Release gate: not available ({exc})")
        return None
    table = frame_table(
        res.frame(),
        f"Release gate: {res.label} against −M = {-res.margin:g}",
        COLUMNS,
        digits=4,
        footnote=f"{1 - res.alpha:.0%} {res.method}",
    )
    return Section(
        "gate",
        f"Release gate: is {b} non-inferior to {a} by {res.margin:g}?",
        [res.text],
        figures=[Figure("release_gate", gate_figure(res), table)],
        methods=(
            "Non-inferiority of the candidate B to the baseline A (the headline pair's second and first "
            f"model) by the margin M = {res.margin:g}: PASS (exit 0) when the whole {1 - res.alpha:.0%} "
            "interval of Δ = acc(B) − acc(A) lies above −M, FAIL (exit 1) when it lies below, UNDECIDED "
            "(exit 3) otherwise; each wrong decision has probability at most α/2. A finished run uses the "
            "paired t interval over questions (repeats averaged per question), about questions like "
            "these; a generate --until run uses its anytime-valid confidence sequence over the questions "
            "scored so far in its stored order, about this benchmark's N questions. The planner's estimate "
            "inverts the fixed-n interval's width: n = z² Var(d) / (Δ̂ + M)²."
        ),
        references=[METHODS_GATE],
        code=[res.command(ctx.db_label)],
    )
