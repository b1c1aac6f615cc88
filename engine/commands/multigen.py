"""CLI layer of multiple generations: parse the command, call one engine function, print.

``python -m engine multigen``: the multiple-generation analysis of one model (P(correct), CI, data
map).

A short summary by default; the full result as JSON with ``--json`` (stdout) or ``--out FILE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine import config
from engine.commands._common import add_db, add_output_args, emit, fmt

if TYPE_CHECKING:
    from engine.analysis.multigen import Multigen
    from engine.analysis.stats_records import ScoreVariance


def register(sub) -> None:
    p = sub.add_parser(
        "multigen", help="multiple-generation analysis of one model (P(correct), CI, data map)"
    )
    add_db(p, None)
    p.add_argument("--run", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--mode", default="coupled", choices=list(config.MODES))
    p.add_argument(
        "--rule",
        default=None,
        choices=config.RULES,
        help="scoring rule (default: the one the run was scored with, its dataset's rule)",
    )
    p.add_argument("--method", default="answer", help="clustering method: answer | llm | embedding")
    p.add_argument("--subject", default=None)
    p.add_argument(
        "--p-max", type=float, default=config.DEFAULT_P_MAX, help="data-map flag: P(correct) <= this"
    )
    p.add_argument(
        "--s-min", type=float, default=config.DEFAULT_S_MIN, help="data-map flag: consistency >= this"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap over prompts")
    p.add_argument("--no-prompts", action="store_true", help="leave the per-prompt list out of the JSON")
    add_output_args(p)
    p.set_defaults(func=run)


def _clipped(sc: ScoreVariance) -> str:
    parts = sc.var_within + sc.var_between
    return (
        ""
        if abs(parts - sc.var) <= 1e-12 * max(1.0, sc.var)
        else " [between clipped at 0, so the parts exceed Var(μ̂)]"
    )


def summary(res: Multigen) -> str:
    """The human summary of a :func:`engine.analysis.multigen.multigen_summary` result."""
    sc, b, sg, th = res.score, res.bootstrap, res.single_generation, res.thresholds
    flagged = res.flagged
    lines = [
        f"multigen  {res.model}  run {res.run}  mode {res.mode}  rule {res.rule}  "
        f"subject {res.subject or '(all)'}  {res.n} prompts × {res.k} generations",
        f"score μ̂ = {fmt(sc.mu, 4)}, 95% CI [{fmt(sc.ci_low, 4)}, {fmt(sc.ci_high, 4)}] "
        f"(t, {sc.df} df; SE = σ̂/√n = {fmt(sc.se, 4)}); bootstrap over prompts "
        f"[{fmt(b.ci_low, 4)}, {fmt(b.ci_high, 4)}]",
        f"Var(μ̂) = {fmt(sc.var, 6)} = within-prompt {fmt(sc.var_within, 6)} (E[p(1−p)] ≈ "
        f"{fmt(sc.within, 4)}, /nk) + between-prompt {fmt(sc.var_between, 6)} (σ² ≈ "
        f"{fmt(sc.sigma2_between, 4)}, /n)" + _clipped(sc),
        f"single-generation scores: best {fmt(sg.best)}, worst {fmt(sg.worst)}, spread {fmt(sg.spread)}",
        f"data map: {res.n_flagged} prompt(s) flagged (P(correct) <= {th.p_max} and S >= {th.s_min}, an "
        f"answer repeated); mean consistency {fmt(res.consistency_mean)}; clusters: "
        f"{res.clusters_source}; {res.n_no_answer} generation(s) without an answer (each its own "
        "category, never flagged)",
    ]
    if flagged:
        lines.append(
            "flagged: " + ", ".join(map(str, flagged[:15])) + (" …" if len(flagged) > 15 else "")
        )
    return "\n".join(lines)


def run(args) -> int:
    from engine.analysis.multigen import multigen_summary
    from engine.store.scores import run_rule

    rule = run_rule(args.db, args.run, rule=args.rule)
    out = multigen_summary(
        args.db,
        args.run,
        args.model,
        mode=args.mode,
        rule=rule,
        method=args.method,
        subject=args.subject,
        p_max=args.p_max,
        s_min=args.s_min,
        seed=args.seed,
    )
    return emit(args, out.to_dict(with_prompts=not args.no_prompts), lambda: summary(out))
