"""``python -m engine ranksets ...``: rank-sets (human-only, judge-only or PPR) as JSON."""

from __future__ import annotations

import json

from engine import config
from engine.commands._comparison_source import add_source, load, models_arg


def register(sub) -> None:
    p = sub.add_parser("ranksets", help="rank-sets with coverage guarantees (human-only, judge-only or PPR)")
    add_source(p)
    p.add_argument("--method", required=True, choices=config.RANK_METHODS)
    p.add_argument("--alpha", default="0.05", help="1 - confidence level, in (0, 1) (default 0.05)")
    p.add_argument("--covariance", default="delta", choices=config.COVARIANCES,
                   help="delta: valid count-normalised covariance (default); paper: the published, too-small formula")
    p.add_argument("--lambda", dest="lam", default="auto",
                   help="PPR weight of the judge: auto (Algorithm 4) or a value in [0, 1]")
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis import ranksets
    alpha = ranksets.parse_alpha(args.alpha)
    lam = ranksets.parse_lambda(args.lam)
    df = load(args)
    res = ranksets.ranksets_for(df, args.method, alpha, args.covariance, lam, models=models_arg(args))
    print(json.dumps(res, indent=2))
    return 0
