"""``python -m engine ranksets ...`` and ``python -m engine winrates ...``: rank-sets (PPR) and win-rates as JSON."""

from __future__ import annotations

import json

from engine import store

# why literals: importing engine.ranking_io (pandas, scipy.stats) at parser-build time would slow
# every `python -m engine` command; tests check these equal ranking_io.METHODS / LABELS and
# engine.stats.ranking.COVARIANCES.
METHODS = ("human", "judge", "ppr")
LABELS = ("human", "judge")
COVARIANCES = ("delta", "paper")


def _add_source(p) -> None:
    src = p.add_argument_group("comparisons (one source)")
    src.add_argument("--comparisons", metavar="FILE",
                     help="CSV with model_a, model_b, human_winner, judge_winner (+ optional prompt_id); "
                          "winners a, b, tie, or empty for no label")
    src.add_argument("--human", metavar="FILE", help="Chatbot Arena JSON lines with the human labels")
    src.add_argument("--judge", metavar="FILE", help="Chatbot Arena JSON lines with the judge labels (line-aligned)")
    src.add_argument("--set", dest="set_name", metavar="NAME", help="a comparison set stored in the database")
    src.add_argument("--db", default=str(store.DEFAULT_DB), help="database for --set")
    p.add_argument("--models", help="comma-separated models to keep (only comparisons between them)")


def _models(args) -> list[str] | None:
    if not args.models:
        return None
    return [m.strip() for m in args.models.split(",") if m.strip()]


def _load(args):
    from engine import ranking_io
    return ranking_io.load_comparisons(args.comparisons, human=args.human, judge=args.judge, db=args.db,
                                       set_name=args.set_name, models=_models(args))


def register(sub) -> None:
    p = sub.add_parser("ranksets", help="rank-sets with coverage guarantees (human-only, judge-only or PPR)")
    _add_source(p)
    p.add_argument("--method", required=True, choices=METHODS)
    p.add_argument("--alpha", default="0.05", help="1 - confidence level, in (0, 1) (default 0.05)")
    p.add_argument("--covariance", default="delta", choices=COVARIANCES,
                   help="delta: valid count-normalised covariance (default); paper: the published, too-small formula")
    p.add_argument("--lambda", dest="lam", default="auto", help="PPR weight of the judge: auto (Algorithm 4) or a value in [0, 1]")
    p.set_defaults(func=run_ranksets)

    q = sub.add_parser("winrates", help="win-rate matrix, average win-rates, Bradley-Terry (Davidson) and Elo")
    _add_source(q)
    q.add_argument("--label", default="human", choices=LABELS, help="whose labels to use")
    q.add_argument("--compare", metavar="FILE",
                   help="a second CSV (e.g. independent generation): per-pair two-proportion z-tests against it")
    q.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples for the BT / Elo CIs")
    q.add_argument("--seed", type=int, default=0)
    q.set_defaults(func=run_winrates)


def run_ranksets(args) -> int:
    from engine import ranking_io
    alpha = ranking_io.parse_alpha(args.alpha)
    lam = ranking_io.parse_lambda(args.lam)
    df = _load(args)
    res = ranking_io.ranksets_for(df, args.method, alpha, args.covariance, lam, models=_models(args))
    print(json.dumps(res, indent=2))
    return 0


def run_winrates(args) -> int:
    from engine import ranking_io
    df = _load(args)
    other = ranking_io.read_comparisons_file(args.compare) if args.compare else None
    if args.bootstrap < 1:
        from engine.errors import UserError
        raise UserError(f"--bootstrap must be >= 1; got {args.bootstrap}")
    res = ranking_io.winrates_for(df, args.label, seed=args.seed, reps=args.bootstrap, models=_models(args),
                                  compare=other)
    print(json.dumps(res, indent=2))
    return 0
