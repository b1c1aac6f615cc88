"""``python -m engine benchmark-compare``: coupled vs independent comparison of two models, JSON on stdout."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_db, print_analysis


def register(sub) -> None:
    p = sub.add_parser("benchmark-compare",
                       help="coupled vs independent comparison of two models on stored benchmark scores")
    add_db(p, None)
    p.add_argument("--model-a", required=True)
    p.add_argument("--model-b", required=True)
    p.add_argument("--subject", default=None, help="restrict to one subject (prompts.subject)")
    p.add_argument("--run", default=None, help="run id (default: the latest run scoring both models)")
    p.add_argument("--rule", default=config.DEFAULT_RULE, help="scoring rule (default: paper)")
    p.add_argument("--target-error", type=float, default=None,
                   help="error level for the sample saving (default: the coupled error at n=120)")
    p.add_argument("--resamples", type=int, default=config.DEFAULT_RESAMPLES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--saving-n", type=int, default=config.DEFAULT_SAVING_N,
                   help="also report the saving at the error the coupled curve reaches at this n (default 120)")
    p.add_argument("--max-n", type=int, default=10_000, help="largest sample size of the error curve")
    p.add_argument("--no-kde", action="store_true", help="leave the KDE curves out of the JSON")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="also write the Fig-2-style plots (covariance KDE, var-of-diff KDEs, error curve) "
                        "as PNG files into DIR (plotly + kaleido; needs Chromium, BROWSER_PATH)")
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis.benchmark import benchmark_compare
    out = benchmark_compare(args.db, args.model_a, args.model_b, subject=args.subject,
                            target_error=args.target_error, n_resamples=args.resamples, seed=args.seed,
                            run=args.run, rule=args.rule, max_n=args.max_n, saving_n=args.saving_n)
    if args.figures:
        from engine.figures import write_benchmark_figures
        out["figures"] = write_benchmark_figures(out, args.figures)
    if args.no_kde:
        out.pop("kde", None)
    return print_analysis(out)
