"""CLI layer of the run summary: parse the command, call one engine function, print.

``python -m engine summary --run RUN``: the headline findings of a scored run (what Home shows)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine import config
from engine.commands._common import add_db, add_output_args, emit, fmt, table

if TYPE_CHECKING:
    from engine.analysis.summary import RunSummary


def register(sub) -> None:
    p = sub.add_parser(
        "summary",
        help="headline findings of a scored run: accuracy with 95% CI, coupled vs "
        "independent agreement, variance saving",
    )
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument(
        "--rule",
        default=None,
        choices=config.RULES,
        help="scoring rule to summarise (default: the one the run was scored with, its dataset's rule)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def summary_text(s: RunSummary) -> str:
    """The short human summary: one accuracy table, one coupling table, then the warnings."""
    head = (
        f"run {s.run}  dataset {s.dataset_id} ({s.kind})  rule {s.rule}  "
        f"{s.n_questions} questions x {s.n_repeats} repeats  chance {fmt(s.chance)}"
    )
    if s.generation_s and not s.imported:  # an import has neither tokens nor a generation time
        head += f"\n{s.n_generations:,} generations, {s.n_tokens:,} tokens in {s.generation_s:.0f} s"
    harness = (s.imported or {}).get("headline") or {}  # imported runs: the harness's own number
    if s.imported:
        head += f"\nimported from {s.imported['harness']} (not coupled, not generated here)"
    acc = [
        {
            "model": r.model,
            "mode": r.mode,
            "accuracy": r.accuracy,
            "95% CI": f"[{r.ci_low:.3f}, {r.ci_high:.3f}]",
            **({"harness reported": harness.get(r.model)} if harness else {}),
        }
        for r in s.accuracy
    ]
    pairs = [
        {
            "pair": f"{p.model_a} vs {p.model_b}",
            "agree coupled": p.agreement["coupled"].mean if "coupled" in p.agreement else None,
            "agree indep.": p.agreement["independent"].mean if "independent" in p.agreement else None,
            "SE diff coupled": p.diff["coupled"].se if "coupled" in p.diff else None,
            "SE diff indep.": p.diff["independent"].se if "independent" in p.diff else None,
            "variance saving": p.variance_saving,
        }
        for p in s.pairs
    ]
    out = [head, "", table(acc, digits=3)]
    if pairs:
        out += [
            "",
            "accuracy CI: t interval over questions (questions are clusters; about questions like "
            "these); SE diff: paired "
            "per-question difference (docs/METHODS.md 7.1); variance saving = 1 - SE_coupled^2 / "
            "SE_indep^2",
            table(pairs, digits=3),
        ]
    out += [f"warning: {w.message}" for w in s.warnings]
    return "\n".join(out)


def run(args) -> int:
    from dataclasses import replace

    from engine.analysis.summary import run_summary
    from engine.store.scores import imported_facts

    s = run_summary(args.db, args.run, args.rule)
    facts = imported_facts(args.db, args.run)
    if facts and facts.get("harness"):
        s = replace(s, imported=facts)
    return emit(args, s.to_dict(), lambda: summary_text(s))
