"""``python -m engine judge --run RUN --judge MODEL``: pairwise LLM-as-judge on a run (resumable)."""

from __future__ import annotations

import sys

from engine import config
from engine.commands._common import add_db, add_output_args, emit, read_text_file, table


def register(sub) -> None:
    p = sub.add_parser("judge", help="LLM-as-judge pairwise comparisons of a run's generations (resumable)")
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument("--judge", required=True, help="judge model (any name engine.models can load)")
    p.add_argument("--judge-name", help="name stored for this judge (default: --judge)")
    p.add_argument("--orders", default="both", choices=config.JUDGE_ORDERS,
                   help="both presentation orders (default) or one seeded random order per pair")
    p.add_argument("--seed", type=int, default=0, help="seed of the random orders")
    p.add_argument("--prompt-file", help="system prompt for the judge (default: the paper's, Appendix C Table 2)")
    p.add_argument("--user-template-file",
                   help="user message template with {question}, {answer_a}, {answer_b} (default: Arena-Hard layout)")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--judge-command",
                   help="optional external judge: a command reading one JSON chat per stdin line, writing one "
                        "reply per stdout line (instead of loading --judge locally)")
    p.add_argument("--replace", action="store_true", help="delete this judge's earlier verdicts on the run first")
    p.add_argument("--progress-file", help="write live progress (JSON) to this file")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.tasks import judge as J
    kw = {}
    if args.prompt_file:
        kw["prompt_template"] = read_text_file(args.prompt_file, "judge prompt file")
    if args.user_template_file:
        kw["user_template"] = read_text_file(args.user_template_file, "judge user template file")
    cfg = J.JudgeConfig(judge_model=args.judge, orders=args.orders, seed=args.seed,
                        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, **kw)
    fn = J.command_complete_fn(args.judge_command) if args.judge_command else None
    summary = J.judge_run(args.db, args.run, args.judge_name or args.judge, cfg, complete_fn=fn,
                          progress_file=args.progress_file, replace=args.replace)
    if summary["n_unparseable"]:
        print(f"note: {summary['n_unparseable']} judge outputs could not be parsed; they are stored with "
              "parsed = NULL and count as no label", file=sys.stderr)
    return emit(args, summary, lambda: summary_text(summary))


def summary_text(res: dict) -> str:
    """Work done, then the stored verdicts per mode (A / B / tie / unparseable)."""
    head = (f"judge {res['judge']} on run {res['run']} ({len(res['models'])} models, orders: {res['orders']}): "
            f"{res['n_judged_now']:,} judged now, {res['n_skipped_existing']:,} already stored, "
            f"{res['n_pairs_missing_generation']:,} pairs missing a generation")
    rows = [{"mode": m, **v} for m, v in res["stored_verdicts_by_mode"].items()]
    rows.append({"mode": "all", **res["stored_verdicts"]})
    return head + "\nstored verdicts:\n" + table(rows, ["mode", "A", "B", "tie", "unparseable"])
