"""CLI layer of accuracy rank-sets: parse the command, call one engine function, print.

``python -m engine accuracy-ranks --run RUN``: accuracy per model with question-clustered intervals
and max-t rank-sets over the models (generated or imported runs)."""

from __future__ import annotations

from engine.commands._common import add_db, add_output_args, emit, table


def register(sub) -> None:
    p = sub.add_parser(
        "accuracy-ranks",
        help="accuracy rank-sets over k models from per-question scores (max-t, "
        "questions as clusters); works on imported harness runs",
    )
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument(
        "--alpha", type=float, default=0.05, help="rank-sets hold simultaneously with prob. >= 1 - alpha"
    )
    p.add_argument(
        "--mode", default=None, choices=("coupled", "independent"), help="default: coupled when present"
    )
    p.add_argument(
        "--rule", default=None, help="scoring rule (default: the run's only rule; harness for imports)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the max-t critical value's draws (wild bootstrap-t)"
    )
    add_output_args(p)
    p.set_defaults(func=run)


def summary_text(res) -> str:
    rows = [
        {
            "model": m.model,
            "accuracy": m.accuracy,
            "95% CI": f"[{m.ci_low:.3f}, {m.ci_high:.3f}]",
            "rank-set": f"[{m.rank_low}, {m.rank_high}]",
            **({"harness reported": m.harness_accuracy} if res.imported else {}),
        }
        for m in res.models
    ]
    head = (
        f"run {res.run}  mode {res.mode}  {res.n_questions} questions x {res.n_repeats} repeats"
        f"{'  (imported from a harness)' if res.imported else ''}"
    )
    return "\n".join(
        [
            head,
            "",
            table(rows, digits=4),
            "",
            f"rank-sets: simultaneous max-t step-down at {1 - res.alpha:.0%} ({res.calibration} "
            "calibration; rank 1 = best); accuracy CI: t interval over questions (questions are "
            "clusters)",
        ]
    )


def run(args) -> int:
    from engine.analysis.accuracy_ranks import accuracy_ranksets

    res = accuracy_ranksets(
        args.db, args.run, alpha=args.alpha, mode=args.mode, rule=args.rule, seed=args.seed
    )
    return emit(args, res.to_dict(), lambda: summary_text(res))


def paired_text(res) -> str:
    """benchmark-compare's summary for a run without coupled scores (imported harness runs)."""
    a, b = res.models
    p = res.paired
    lines = [
        f"benchmark-compare  {a} − {b}  run {res.run}  mode {res.mode}  {res.n_questions} questions × "
        f"{res.n_repeats} repeats"
        + ("  (imported from a harness: no coupled scores)" if res.imported else ""),
        "",
        table(
            [
                {"model": m, "accuracy": acc, "harness reported": h}
                for m, acc, h in zip(res.models, res.accuracy, res.harness_accuracy)
            ],
            digits=4,
        ),
        "",
        f"Paired difference of accuracy A − B = {a} − {b} (questions as the unit; t CI over questions):",
        table(
            [
                {
                    "diff": p.diff,
                    "ci_low": p.ci_low,
                    "ci_high": p.ci_high,
                    "p_value": p.p_value,
                    "corr": p.corr,
                    "mde": p.mde,
                }
            ],
            digits=4,
        ),
        "",
        f"Planner: questions to detect a difference of {res.target_mde:g} (80% power, alpha 0.05): "
        + ", ".join(f"{r['questions']:,} at {r['repeats']} repeat(s)" for r in res.plan),
    ]
    return "\n".join(lines)
