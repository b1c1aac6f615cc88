"""CLI layer of win-rates: parse the command, call one engine function, print.

``python -m engine winrates ...``: win-rates, average win-rates, Bradley-Terry and Elo with
prompt-cluster bootstrap intervals; with ``--by category`` one pair's win-rate difference per category
(simultaneous intervals); a short summary by default, the full JSON with --json / --out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine import config
from engine.commands._common import add_output_args, emit, fmt, table
from engine.commands._comparison_source import add_source, load, models_arg

if TYPE_CHECKING:
    from engine.analysis.winrate_slices import WinRateSlices
    from engine.analysis.winrates_result import WinRates


def register(sub) -> None:
    q = sub.add_parser(
        "winrates",
        help="win-rates, average win-rates, Bradley-Terry (Davidson) and Elo, "
        "prompt-clustered intervals",
    )
    add_source(q)
    q.add_argument(
        "--label",
        default=None,
        choices=config.RANK_LABELS,
        help="whose labels to use (default: human when the comparisons have human labels, else judge)",
    )
    q.add_argument(
        "--compare",
        metavar="FILE",
        help="a second CSV on the same prompts (e.g. verdicts on the independent generations): per "
        "pair, the win-rate difference by a t test paired by prompt, Westfall-Young max-T adjusted",
    )
    q.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        help="prompt-cluster bootstrap resamples for every interval (default 1000)",
    )
    q.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the rank-set draws")
    q.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="1 - level of the rank-sets behind the rank column; with --by: the family-wise error of "
        "the categories' simultaneous intervals",
    )
    q.add_argument(
        "--procedure",
        default="maxt",
        choices=config.RANK_PROCEDURES,
        help="rank-set procedure for the rank column: maxt (simultaneous, default), marginal, chi2",
    )
    q.add_argument(
        "--by",
        default=None,
        choices=("category",),
        help="one pair's W_AB − W_BA (A's strict win-rate against B minus B's; a tie is a non-win) per "
        "category of the comparisons (their 'category' column), intervals that hold for all categories "
        "at once (max-t, clustered by prompt) and Benjamini-Hochberg adjusted p-values",
    )
    q.add_argument(
        "--model-a",
        default=None,
        help="with --by: A of the pair (default: the two --models in order, or the comparisons' two "
        "models in the order they first appear)",
    )
    q.add_argument("--model-b", default=None, help="with --by: B of the pair")
    add_output_args(q)
    q.set_defaults(func=run)


def run(args) -> int:
    from engine.analysis.comparisons import read_comparisons_file
    from engine.analysis.winrates import default_label, winrates_for

    df = load(args)
    if args.by is not None:
        return _by_category(args, df)
    other = read_comparisons_file(args.compare) if args.compare else None
    label = args.label or default_label(df)
    res = winrates_for(
        df,
        label,
        seed=args.seed,
        reps=args.bootstrap,
        models=models_arg(args),
        compare=other,
        alpha=args.alpha,
        procedure=args.procedure,
        group="this file",
        compare_group=args.compare or "other",
    )
    return emit(args, res.to_dict(), lambda: summary(res))


def _by_category(args, df) -> int:
    from engine.analysis.winrate_slices import winrate_slices_for
    from engine.errors import UserError

    if args.compare:
        raise UserError("--by category reads one source; leave out --compare")
    source = (
        f"comparison set {args.set_name!r}"
        if args.set_name
        else args.comparisons or " and ".join(f for f in (args.human, args.judge) if f)
    )
    res = winrate_slices_for(
        df,
        source,
        args.model_a,
        args.model_b,
        args.label,
        args.by,
        args.alpha,
        models_arg(args),
        set_name=args.set_name,
    )
    return emit(args, res.to_dict(), lambda: slices_summary(res))


def slices_summary(res: WinRateSlices) -> str:
    """The human summary of ``winrates --by category``: the pair, the pooled difference, the table."""
    a, b = res.models
    lines = [
        f"winrates --by {res.by}  W({a} > {b}) − W({b} > {a})  {res.source}  {res.label} labels  "
        f"{res.n:,} comparisons of the pair in {len(res.slices)} categories · {res.clustering}",
        f"all categories: {fmt(res.overall['difference'], 4)} [{fmt(res.overall['lower'], 4)}, "
        f"{fmt(res.overall['upper'], 4)}] ({1 - res.alpha:.0%}, clustered by prompt)",
        f"per category: {1 - res.alpha:.0%} intervals that hold for all {len(res.slices)} at once "
        f"(max-t, c = {res.critical_value:.3f}); a tie is a non-win for both; p_BH: Benjamini-Hochberg; "
        "* the interval excludes 0",
        "",
    ]
    rows = [
        {
            "category": s.slice + (" *" if excludes_zero(s.lower, s.upper) else ""),
            "n": s.n,
            "prompts": s.n_prompts,
            f"W({a})": s.winrate_a,
            f"W({b})": s.winrate_b,
            "difference": s.difference,
            "lower": s.lower,
            "upper": s.upper,
            "p_BH": s.p_adjusted,
        }
        for s in res.slices
    ]
    lines.append(table(rows, digits=4))
    lines += [f"warning: {w}" for w in res.warnings]
    return "\n".join(lines)


def excludes_zero(lower: float | None, upper: float | None) -> bool:
    return (lower is not None and lower > 0) or (upper is not None and upper < 0)


def summary(res: WinRates) -> str:
    """The ``winrates`` CLI's human summary: clustering note, average win-rates with CIs and rank-sets,
    BT and Elo, the paired comparison's significant pairs, position bias, warnings."""
    lines = [
        f"win-rates · {res.label} labels · {res.n:,} comparisons, {len(res.models)} models · "
        f"{res.clustering}",
        f"CIs: {res.ci_method}",
        f"rank: {res.rank_method}",
        "",
    ]
    rows: list[dict[str, Any]] = []
    bt, elo = res.bradley_terry, res.elo
    for m in res.models:
        a = res.average[m]
        rows.append(
            {
                "rank": a.rank,
                "model": m,
                "rank_set": f"{a.rank_set[0]}-{a.rank_set[1]}",
                "avg_winrate": a.winrate,
                "ci_low": a.ci[0],
                "ci_high": a.ci[1],
                "bt_beta": bt.beta[m],
                "bt_low": bt.ci[m][0],
                "bt_high": bt.ci[m][1],
            }
        )
        if elo is not None:
            rows[-1].update({"elo": elo.rating[m], "elo_low": elo.ci[m][0], "elo_high": elo.ci[m][1]})
    rows.sort(key=lambda r: (r["rank"], -(r["avg_winrate"] if r["avg_winrate"] is not None else -1)))
    lines.append(table(rows))
    lines.append(f"tie rate {res.tie_rate:.3f}")
    pb = res.position_bias
    if pb:
        lines.append(
            f"position bias ({pb.n_judgements:,} judgements in both orders): verdict flips with the "
            f"order {pb.flip_rate:.3f}; first-shown output wins {pb.first_win_share:.3f} of decisive "
            f"verdicts [{pb.first_win_low:.3f}, {pb.first_win_high:.3f}]"
        )
    if res.compare:
        sig = [
            {"pair": f"{m} > {m2}", "diff": v.diff, "p": v.p, "p_maxt": v.p_maxt, "stars": v.stars}
            for m, opp in res.compare.items()
            for m2, v in opp.items()
            if v.stars
        ]
        lines += ["", res.compare_test or ""]
        lines.append(table(sig) if sig else "no pair differs at max-T adjusted p < 0.05")
    for w in res.warnings:
        lines.append(f"WARNING: {w}")
    return "\n".join(lines)
