"""``python -m engine winrates ...``: win-rates, average win-rates, Bradley-Terry and Elo with
prompt-cluster bootstrap intervals; a short summary by default, the full JSON with --json / --out."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_output_args, emit
from engine.commands._comparison_source import add_source, load, models_arg


def register(sub) -> None:
    q = sub.add_parser("winrates", help="win-rates, average win-rates, Bradley-Terry (Davidson) and Elo, "
                                        "prompt-clustered intervals")
    add_source(q)
    q.add_argument("--label", default="human", choices=config.RANK_LABELS, help="whose labels to use")
    q.add_argument("--compare", metavar="FILE",
                   help="a second CSV on the same prompts (e.g. verdicts on the independent generations): per pair, "
                        "the win-rate difference by a t test paired by prompt, Holm-adjusted")
    q.add_argument("--bootstrap", type=int, default=1000,
                   help="prompt-cluster bootstrap resamples for every interval (default 1000)")
    q.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the rank-set draws")
    q.add_argument("--alpha", type=float, default=0.05, help="1 - level of the rank-sets behind the rank column")
    q.add_argument("--procedure", default="maxt", choices=config.RANK_PROCEDURES,
                   help="rank-set procedure for the rank column: maxt (simultaneous, default), marginal, chi2")
    add_output_args(q)
    q.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis.comparisons import read_comparisons_file
    from engine.analysis.winrates import summary, winrates_for
    df = load(args)
    other = read_comparisons_file(args.compare) if args.compare else None
    res = winrates_for(df, args.label, seed=args.seed, reps=args.bootstrap, models=models_arg(args), compare=other,
                       alpha=args.alpha, procedure=args.procedure, group="this file",
                       compare_group=args.compare or "other")
    return emit(args, res, lambda: summary(res))
