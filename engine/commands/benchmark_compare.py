"""``python -m engine benchmark-compare``: coupled vs independent comparison of two models.

A short summary by default (paired difference per noise mode, sample saving with its interval,
planner headline); the full result as JSON with ``--json`` (stdout) or ``--out FILE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine import config
from engine.commands._common import add_db, add_output_args, emit, fmt, table
from engine.errors import UserError

if TYPE_CHECKING:
    from engine.analysis.benchmark_result import BenchmarkComparison


def register(sub) -> None:
    p = sub.add_parser(
        "benchmark-compare",
        help="coupled vs independent comparison of two models on stored benchmark scores",
    )
    add_db(p, None)
    p.add_argument(
        "--model-a",
        default=None,
        help="A of every difference A − B (default: with --run of two models, the first in the user's "
        "order: the first path imported, the first --models entry)",
    )
    p.add_argument("--model-b", default=None)
    p.add_argument("--subject", default=None, help="restrict to one subject (prompts.subject)")
    p.add_argument(
        "--by",
        default=None,
        choices=("subject", "task"),
        help="with --run: A − B per subject (MMLU) or task (an lm-eval group's subtasks), intervals "
        "that hold for all slices at once (max-t) and Benjamini-Hochberg adjusted p-values",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="with --by: family-wise error of the slices' simultaneous intervals (default 0.05)",
    )
    p.add_argument(
        "--mode",
        default=None,
        choices=config.MODES,
        help="with --by: the noise mode (default: coupled where the run has it)",
    )
    p.add_argument("--run", default=None, help="run id (default: the latest run scoring both models)")
    p.add_argument(
        "--rule",
        default=None,
        choices=config.RULES,
        help="scoring rule (default: the one the run was scored with, its dataset's rule)",
    )
    p.add_argument(
        "--target-error",
        type=float,
        default=None,
        help="error level for the sample saving (default: the coupled error at n=120)",
    )
    p.add_argument(
        "--target-mde",
        type=float,
        default=config.DEFAULT_PLAN_MDE,
        help="planner: accuracy difference to detect at --power (default %(default)s)",
    )
    p.add_argument(
        "--target-se",
        type=float,
        default=None,
        help="planner: standard error of the difference to reach (default: target error / sqrt(2/pi))",
    )
    p.add_argument(
        "--power", type=float, default=0.8, help="planner and MDE: power 1 - beta (default 0.8)"
    )
    p.add_argument("--resamples", type=int, default=config.DEFAULT_RESAMPLES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--saving-n",
        type=int,
        default=config.DEFAULT_SAVING_N,
        help="also report the saving at the error the coupled curve reaches at this n (default 120)",
    )
    p.add_argument("--max-n", type=int, default=10_000, help="largest sample size of the error curve")
    p.add_argument("--no-kde", action="store_true", help="leave the KDE curves out of the JSON")
    p.add_argument(
        "--figures",
        default=None,
        metavar="DIR",
        help="also write the Fig-2-style plots (covariance KDE, var-of-diff KDEs, error curve) "
        "as PNG files into DIR (plotly + kaleido; needs Chromium, BROWSER_PATH)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def summary(res: BenchmarkComparison) -> str:
    """The human summary of a :func:`engine.analysis.benchmark.benchmark_compare` result."""
    a, b = res.models
    lines = [
        f"benchmark-compare  {a} − {b}  run {res.run}  subject {res.subject or '(all)'}  "
        f"rule {res.rule}  {res.n_questions} questions × {res.n_repeats} repeats",
        "",
        f"Paired difference of accuracy A − B = {a} − {b} (questions as the unit; t CI over questions):",
    ]
    rows = []
    for mode, p in res.paired.items():
        bt = p.bootstrap
        rows.append(
            {
                "mode": mode,
                "diff": p.diff,
                "ci_low": p.ci_low,
                "ci_high": p.ci_high,
                "p_value": p.p_value,
                "corr": p.corr,
                "boot_low": None if bt is None else bt.ci_low,
                "boot_high": None if bt is None else bt.ci_high,
                "mde": p.mde,
            }
        )
    lines += [table(rows, digits=4), ""]
    lines.append(
        f"Mean per-question covariance (coupled) {fmt(res.mean_covariance_coupled, 4)}; median "
        f"per-question Var(A − B): coupled {fmt(res.median_var_diff_coupled)}, independent "
        f"{fmt(res.median_var_diff_independent)}"
    )
    sd, ci, vs = res.saving_detail, res.saving_ci, res.variance_saving
    if vs and vs.saving is not None:
        lines.append(
            f"Sample saving (headline) {vs.saving:.1%}, {vs.level:.0%} CI [{_pct(vs.ci_low)}, "
            f"{_pct(vs.ci_high)}]: {res.saving_definitions.variance_saving}"
        )
    lines.append(f"Other saving figures at error {sd.error:.4f} ({sd.error_source}), rule {res.rule}:")
    if res.saving is not None:
        lines.append(
            f"  resampling curves (paper's method, 1 - n_c(e)/n_i(e)): {res.saving:.1%}  (n coupled "
            f"{fmt(sd.n_coupled, 0)} vs independent {fmt(sd.n_independent, 0)} samples)"
        )
    else:
        lines.append("  resampling curves: - (a curve never reaches this error, or no independent run)")
    if ci and ci.saving is not None:
        lines.append(
            f"  predicted at error e from the per-sample variances: {ci.saving:.1%}, {ci.level:.0%} CI "
            f"[{_pct(ci.ci_low)}, {_pct(ci.ci_high)}] (studentised over questions; assumes "
            "independent questions and E|error| proportional to the SD)"
        )
    lines.append(f"Planner: {res.planner.headline}")
    if res.mcnemar_majority:
        lines.append(
            "McNemar on one majority-vote outcome per question: "
            + ", ".join(f"{mode} p = {fmt(v.p_value, 4)}" for mode, v in res.mcnemar_majority.items())
        )
    lines += [f"warning: {w}" for w in res.warnings]
    return "\n".join(lines)


def slices_summary(res) -> str:
    """The human summary of :func:`engine.analysis.slices.slice_comparison`."""
    a, b = res.models
    lines = [
        f"benchmark-compare --by {res.by}  A − B = {a} − {b}  run {res.run}  mode {res.mode}  "
        f"{res.n_questions:,} questions × {res.n_repeats} repeats in {len(res.slices)} {res.by}s",
        f"whole run: {fmt(res.overall['difference'], 4)} [{fmt(res.overall['lower'], 4)}, "
        f"{fmt(res.overall['upper'], 4)}] ({1 - res.alpha:.0%} t interval over questions)",
        f"per {res.by}: {1 - res.alpha:.0%} intervals that hold for all {len(res.slices)} at once "
        f"(max-t, c = {res.critical_value:.3f}); p_BH: Benjamini-Hochberg; * the interval excludes 0",
        "",
    ]
    rows = [
        {
            res.by: s.slice + (" *" if s.lower > 0 or s.upper < 0 else ""),
            "n": s.n,
            "A − B": s.difference,
            "lower": s.lower,
            "upper": s.upper,
            "p": s.p_value,
            "p_BH": s.p_adjusted,
        }
        for s in res.slices
    ]
    lines.append(table(rows, digits=4))
    lines += [f"warning: {w}" for w in res.warnings]
    return "\n".join(lines)


def run(args) -> int:
    from engine.analysis.accuracy_ranks import imported_pair

    if args.by is not None:
        from engine.analysis.slices import slice_comparison

        if args.run is None:
            raise UserError("--by needs --run RUN (the run whose subjects or tasks are compared)")
        res = slice_comparison(
            args.db, args.run, args.model_a, args.model_b, args.by, args.mode, args.rule, args.alpha
        )
        return emit(args, res.to_dict(), lambda: slices_summary(res))

    paired = imported_pair(
        args
    )  # --run with two models picks them; an imported run has no coupled scores
    if paired is not None:
        from engine.commands.accuracy_ranks import paired_text

        return emit(args, paired.to_dict(), lambda: paired_text(paired))
    from engine.analysis.benchmark import benchmark_compare
    from engine.store.scores import run_rule

    rule = run_rule(args.db, args.run, [args.model_a, args.model_b], args.rule)
    out = benchmark_compare(
        args.db,
        args.model_a,
        args.model_b,
        subject=args.subject,
        target_error=args.target_error,
        n_resamples=args.resamples,
        seed=args.seed,
        run=args.run,
        rule=rule,
        max_n=args.max_n,
        saving_n=args.saving_n,
        target_mde=args.target_mde,
        target_se=args.target_se,
        power=args.power,
    )
    d = out.to_dict()
    if args.figures:
        from engine.figures.benchmark import write_benchmark_figures

        d["figures"] = write_benchmark_figures(out, args.figures)
    if args.no_kde:
        d.pop("kde", None)
    return emit(args, d, lambda: summary(out))
