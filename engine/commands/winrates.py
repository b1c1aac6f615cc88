"""``python -m engine winrates ...``: win-rate matrix, average win-rates, Bradley-Terry and Elo as JSON."""

from __future__ import annotations

import json

from engine import config
from engine.commands._comparison_source import add_source, load, models_arg
from engine.errors import UserError


def register(sub) -> None:
    q = sub.add_parser("winrates", help="win-rate matrix, average win-rates, Bradley-Terry (Davidson) and Elo")
    add_source(q)
    q.add_argument("--label", default="human", choices=config.RANK_LABELS, help="whose labels to use")
    q.add_argument("--compare", metavar="FILE",
                   help="a second CSV (e.g. independent generation): per-pair two-proportion z-tests against it")
    q.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples for the BT / Elo CIs")
    q.add_argument("--seed", type=int, default=0)
    q.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis.comparisons import read_comparisons_file
    from engine.analysis.winrates import winrates_for
    df = load(args)
    other = read_comparisons_file(args.compare) if args.compare else None
    if args.bootstrap < 1:
        raise UserError(f"--bootstrap must be >= 1; got {args.bootstrap}")
    res = winrates_for(df, args.label, seed=args.seed, reps=args.bootstrap, models=models_arg(args), compare=other)
    print(json.dumps(res, indent=2))
    return 0
