"""CLI layer of the judge audit: parse the command, call one engine function, print.

``python -m engine judge-audit --run RUN --judge J`` or ``--set NAME``: how far an LLM judge agrees
with human labels (docs/METHODS.md 9.2; docs/JUDGE_AUDIT.md): a run's judge against the run's human
labels, or a comparison set's own judge and human labels; every figure with a prompt-clustered bootstrap
CI. A short summary by default, the full result with --json / --out."""

from __future__ import annotations

from engine.commands._common import add_db, add_output_args, csv_list, emit, fmt
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "judge-audit",
        help="judge vs human agreement (kappa, AC1, alpha), per-model bias, position consistency, "
        "length bias, self-preference, drift, several judges' error correlation (prompt-clustered CIs); "
        "of a run or of a comparison set",
    )
    add_db(p)
    p.add_argument("--run", default=None, help="a judged run (with --judge)")
    p.add_argument("--judge", default=None, help="the judge audited (as stored with its verdicts)")
    p.add_argument(
        "--set",
        dest="set_name",
        metavar="NAME",
        default=None,
        help="audit a stored comparison set whose rows carry both a judge and a human label "
        "(an imported CSV or Arena file) instead of a run",
    )
    p.add_argument(
        "--human",
        metavar="SET",
        help="with --run: the comparison set with the human labels, read as stored (default: every set "
        "whose meta names the run, and its label samples)",
    )
    p.add_argument(
        "--mode", default=None, choices=("coupled", "independent"), help="default: both modes"
    )
    p.add_argument(
        "--judges",
        help="comma-separated panel for the several-judges figures (default: every judge "
        "with verdicts on the run)",
    )
    p.add_argument(
        "--drift",
        metavar="JUDGES",
        help="comma-separated judges whose verdicts on the same units are compared with --judge's (the "
        "same judge re-run at another date, stored under another name): share changed and a paired test",
    )
    p.add_argument(
        "--self-model",
        metavar="MODELS",
        help="comma-separated candidates of the judge's own family for the self-preference figure "
        "(default: the models whose family name is the judge's, e.g. gpt-4o-mini for judge gpt-4o)",
    )
    p.add_argument("--boot", type=int, default=1000, help="cluster-bootstrap resamples (default 1000)")
    p.add_argument(
        "--conf", type=float, default=0.95, help="confidence level of the intervals (default 0.95)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    if args.set_name is not None:
        if args.run is not None or args.human is not None:
            raise UserError("--set audits a comparison set on its own: drop --run / --human")
        from engine.analysis.set_audit import set_judge_audit

        res = set_judge_audit(
            args.db, args.set_name, mode=args.mode, n_boot=args.boot, seed=args.seed, conf=args.conf
        )
        return emit(args, res.to_dict(), lambda: summary(res))
    if args.run is None or args.judge is None:
        raise UserError("give what to audit: --run RUN --judge J, or --set NAME (a comparison set)")
    from engine.analysis.judge_audit import judge_audit

    res = judge_audit(
        args.db,
        args.run,
        args.judge,
        human=args.human,
        mode=args.mode,
        n_boot=args.boot,
        seed=args.seed,
        conf=args.conf,
        judges=csv_list(args.judges),
        drift=csv_list(args.drift),
        self_models=csv_list(args.self_model),
    )
    return emit(args, res.to_dict(), lambda: summary(res))


def _ci(e) -> str:
    if e.estimate is None:
        return f"- (n = {e.n})"
    return f"{fmt(e.estimate)} [{fmt(e.lower)}, {fmt(e.upper)}] (n = {e.n:,})"


def _bias_lines(b) -> list[str]:
    """The judge-bias figures: length, self-preference, drift, reported models."""
    lines = []
    if b.length is not None:
        L = b.length
        lines.append(
            f"length bias ({L.unit}): the longer response wins with the judge {_ci(L.judge)}, with "
            f"people {_ci(L.human)}; judge - human {_ci(L.difference)}; judge on every unit "
            f"{_ci(L.judge_all)}"
        )
        lines += [
            f"  length gap {lo:,.0f}-{hi:,.0f}: judge picks the longer {_ci(j)}; people {_ci(h)}"
            for lo, hi, j, h in ((x.low, x.high, x.judge, x.human) for x in L.bins)
        ]
    for s in b.self_preference:
        lines.append(
            f"self-preference ({s.model}, family {s.family}): its bias {_ci(s.bias)} vs the others' mean "
            f"{_ci(s.others)}; difference {_ci(s.difference)}"
        )
    for d in b.drift:
        p = "-" if d.p_value is None else f"{d.p_value:.3g}"
        lines.append(
            f"drift {d.first} -> {d.second} on {d.n:,} units: changed {_ci(d.changed)}; share of a "
            f"{_ci(d.shift_a)}, b {_ci(d.shift_b)}, tie {_ci(d.shift_tie)}; marginal homogeneity "
            f"chi2 = {fmt(d.statistic)} (df {d.df}), p = {p}"
        )
    if len(b.reported_models) > 1:
        lines.append(
            "reported models: "
            + ", ".join(f"{m or 'not recorded'} ({n:,})" for m, n in b.reported_models.items())
        )
    return lines


def summary(res) -> str:
    """One line per figure, estimate [lower, upper] (n units)."""
    what = f"set {res.set_name}" if res.set_name else f"run {res.run}"
    lines = [
        f"judge audit · {what} · judge {res.judge} · mode {res.mode or 'all'} · "
        f"{res.n_audited:,} units with both labels of {res.n_units:,} judged ({res.n_clusters:,} "
        f"prompts) · {res.conf:.0%} prompt-clustered bootstrap CIs ({res.n_boot} resamples, seed "
        f"{res.seed})",
        f"agreement            {_ci(res.agreement)}",
        f"Cohen's kappa        {_ci(res.kappa)}",
        f"Gwet's AC1           {_ci(res.gwet_ac1)}",
        f"Krippendorff's alpha {_ci(res.krippendorff_alpha)}",
    ]
    if res.binary:
        lines += [
            f"sensitivity          {_ci(res.sensitivity)}  (P(judge a | human a))",
            f"specificity          {_ci(res.specificity)}  (P(judge b | human b))",
        ]
    lines += [
        f"position consistency {_ci(res.position_consistency)}",
        f"first-position pref. {_ci(res.first_position_preference)}  (P(first shown picked) - 1/2)",
        f"human-human agree    {_ci(res.human_agreement)}",
        f"human-human kappa    {_ci(res.human_kappa)}",
        "per-model judge bias (judge minus human win-rate; > 0: the judge favours the model):",
    ]
    lines += [f"  {m:<20} {_ci(e)}" for m, e in res.bias.items()]
    if res.error_correlation:
        lines.append(
            f"several judges ({', '.join(res.judges)}): mean error correlation "
            f"{_ci(res.mean_error_correlation)}; effective judges {_ci(res.effective_judges)}; "
            f"majority agreement {_ci(res.majority_agreement)}"
        )
        lines += [f"  {p:<30} {_ci(e)}" for p, e in res.error_correlation.items()]
    if res.biases is not None:
        lines += _bias_lines(res.biases)
    if res.skip_rate is not None:
        lines.append(
            f"label samples: {res.n_skipped:,} sampled units skipped ({res.skip_rate:.1%} of the "
            "answers)"
        )
    lines += [f"WARNING: {w}" for w in res.warnings]
    return "\n".join(lines)
