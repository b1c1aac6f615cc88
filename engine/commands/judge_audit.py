"""CLI layer of the judge audit: parse the command, call one engine function, print.

``python -m engine judge-audit --run RUN --judge J``: how far the run's LLM judge agrees with the
run's human labels (docs/METHODS.md 9.2; docs/JUDGE_AUDIT.md); every figure with a prompt-clustered
bootstrap CI. A short summary by default, the full result with --json / --out."""

from __future__ import annotations

from engine.commands._common import add_db, add_output_args, add_run_label_args, csv_list, emit, fmt


def register(sub) -> None:
    p = sub.add_parser(
        "judge-audit",
        help="judge vs human agreement, kappa, per-model bias, position consistency, "
        "several judges' error correlation (prompt-clustered CIs)",
    )
    add_db(p)
    add_run_label_args(p, "the judge audited (as stored with its verdicts)")
    p.add_argument(
        "--judges",
        help="comma-separated panel for the several-judges figures (default: every judge "
        "with verdicts on the run)",
    )
    p.add_argument("--boot", type=int, default=1000, help="cluster-bootstrap resamples (default 1000)")
    p.add_argument(
        "--conf", type=float, default=0.95, help="confidence level of the intervals (default 0.95)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resamples")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
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
    )
    return emit(args, res.to_dict(), lambda: summary(res))


def _ci(e) -> str:
    if e.estimate is None:
        return f"- (n = {e.n})"
    return f"{fmt(e.estimate)} [{fmt(e.lower)}, {fmt(e.upper)}] (n = {e.n:,})"


def summary(res) -> str:
    """One line per figure, estimate [lower, upper] (n units)."""
    lines = [
        f"judge audit · run {res.run} · judge {res.judge} · mode {res.mode or 'all'} · "
        f"{res.n_audited:,} units with both labels of {res.n_units:,} judged ({res.n_clusters:,} "
        f"prompts) · {res.conf:.0%} prompt-clustered bootstrap CIs ({res.n_boot} resamples, seed "
        f"{res.seed})",
        f"agreement            {_ci(res.agreement)}",
        f"Cohen's kappa        {_ci(res.kappa)}",
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
    if res.skip_rate is not None:
        lines.append(
            f"label samples: {res.n_skipped:,} sampled units skipped ({res.skip_rate:.1%} of the "
            "answers)"
        )
    lines += [f"WARNING: {w}" for w in res.warnings]
    return "\n".join(lines)
