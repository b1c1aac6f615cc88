"""CLI layer of rank-sets: parse the command, call one engine function, print.

``python -m engine ranksets ...``: rank-sets (human-only, judge-only or PPR); a short summary by
default, the full JSON (theta, covariance, rank-sets) with --json / --out."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_output_args, emit, table
from engine.commands._comparison_source import add_source, load, models_arg


def register(sub) -> None:
    p = sub.add_parser(
        "ranksets", help="rank-sets with coverage guarantees (human-only, judge-only or PPR)"
    )
    add_source(p)
    p.add_argument("--method", required=True, choices=config.RANK_METHODS)
    p.add_argument("--alpha", default="0.05", help="1 - confidence level, in (0, 1) (default 0.05)")
    p.add_argument(
        "--procedure",
        default="maxt",
        choices=config.RANK_PROCEDURES,
        help="maxt: simultaneous max-t step-down (default); marginal: per-model sets; "
        "chi2: the paper's Algorithm 2 (valid but loose; for reproduction)",
    )
    p.add_argument(
        "--covariance",
        default="delta",
        choices=config.COVARIANCES,
        help="delta: valid count-normalised covariance, cluster-robust by prompt when rows carry prompt "
        "ids (default); paper: the published, too-small formula",
    )
    p.add_argument(
        "--lambda",
        dest="lam",
        default="auto",
        help="PPR weight of the judge: auto (Algorithm 4) or a value in [0, 1]",
    )
    p.add_argument(
        "--human-labels",
        type=int,
        metavar="N",
        help="keep the human labels of N random comparisons (seeded by --seed), the rest judge-only; "
        f"PPR default when every row has both labels: {config.PPR_DEFAULT_HUMAN_LABELS} (the paper's)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of --human-labels and of the max-t normal draws"
    )
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis import ranksets

    alpha = ranksets.parse_alpha(args.alpha)
    lam = ranksets.parse_lambda(args.lam)
    df = load(args)
    res = ranksets.ranksets_for(
        df,
        args.method,
        alpha,
        args.covariance,
        lam,
        models=models_arg(args),
        procedure=args.procedure,
        seed=args.seed,
        human_labels=args.human_labels,
    )
    return emit(args, res.to_dict(), lambda: summary(res))


def summary(res) -> str:
    """The ``ranksets`` CLI's human summary (no covariance matrix): one line per model, best first."""
    from engine.analysis.ranksets import THETA_TEXT

    head = (
        f"rank-sets · {res.method} · procedure {res.procedure} at alpha {res.alpha} · "
        f"n = {res.n:,} human-labelled, N = {res.N:,} judge-only"
        + (f" · lambda = {res.lam:.3f}" if res.lam is not None else "")
    )
    lines = [head, f"covariance: {res.covariance_detail}", res.clustering, THETA_TEXT, ""]
    rows = [
        {
            "rank": res.rank[m],
            "model": m,
            "rank_set": f"{res.ranksets[m][0]}-{res.ranksets[m][1]}",
            "theta": res.theta[m],
            "theta_low": res.theta_ci[m][0],
            "theta_high": res.theta_ci[m][1],
        }
        for m in res.models
    ]
    rows.sort(key=lambda r: (r["rank"], -r["theta"]))
    lines.append(table(rows))
    lines += [f"note: {x}" for x in res.notes] + [f"WARNING: {x}" for x in res.warnings]
    return "\n".join(lines)
