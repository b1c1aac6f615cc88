"""``python -m engine multigen``: the multiple-generation analysis of one model (P(correct), CI, data map)."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_db, print_analysis


def register(sub) -> None:
    p = sub.add_parser("multigen", help="multiple-generation analysis of one model (P(correct), CI, data map)")
    add_db(p, None)
    p.add_argument("--run", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--mode", default="coupled", choices=list(config.MODES))
    p.add_argument("--rule", default=config.DEFAULT_RULE)
    p.add_argument("--method", default="answer", help="clustering method: answer | llm | embedding")
    p.add_argument("--subject", default=None)
    p.add_argument("--p-max", type=float, default=config.DEFAULT_P_MAX, help="data-map flag: P(correct) <= this")
    p.add_argument("--s-min", type=float, default=config.DEFAULT_S_MIN, help="data-map flag: consistency >= this")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap over prompts")
    p.add_argument("--no-prompts", action="store_true", help="leave the per-prompt list out of the JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis.multigen import multigen_summary
    out = multigen_summary(args.db, args.run, args.model, mode=args.mode, rule=args.rule, method=args.method,
                           subject=args.subject, p_max=args.p_max, s_min=args.s_min, seed=args.seed)
    if args.no_prompts:
        out.pop("prompts", None)
    return print_analysis(out)
