"""More run-report section builders (see :mod:`engine.report.run_sections` for the order): the design,
the coupled vs independent comparison, the imported runs' paired test, win-rates, multiple generations
and the commands that reproduce the run and the report."""

from __future__ import annotations

import shlex

import pandas as pd

from engine.figures.benchmark import error_curve_figure, kde_figure
from engine.figures.multigen import datamap_figure
from engine.figures.winrates import heatmap_figure, pair_bars_figure
from engine.report import references as ref
from engine.report.context import RunContext, frame_table
from engine.report.model import Figure, Section, Table, cell, no_path, num, pct, text_row, with_ci

NR = "not recorded"


def _v(x) -> str:
    return NR if x is None or x == "" else str(x)


def design_section(ctx: RunContext) -> Section:
    d = ctx.design
    ds = d.dataset
    facts = [
        ("run", d.run),
        ("status", _v(d.status)),
        ("created", _v(d.created_at)),
        (
            "generated here or imported",
            (f"imported from {d.imported_from}" + (f" ({d.served})" if d.served else ""))
            if d.imported_from
            else "generated here",
        ),
        (
            "dataset",
            "-" if ds is None else f"{ds.dataset_id} ({_v(ds.kind)}; source {no_path(_v(ds.source))})",
        ),
        (
            "dataset size",
            "-" if ds is None else f"{ds.n_prompts_used:,} prompts asked (of {_v(ds.n_prompts)} stored)",
        ),
        ("dataset sha256 (the prompts asked)", "-" if ds is None else ds.sha256),
        (
            "seed",
            _v(d.seed)
            + (
                ""
                if not d.seeds
                else " (per model and mode: " + ", ".join(f"{k} {v}" for k, v in d.seeds.items()) + ")"
            ),
        ),
        ("temperature", _v(d.temperature)),
        ("top-k / top-p", f"{_v(d.top_k)} / {_v(d.top_p)}"),
        ("max new tokens", _v(d.max_new_tokens)),
        ("repeats", _v(d.repeats)),
        ("modes", ", ".join(d.modes) or NR),
        ("noise key", _v(d.key_mode)),
        ("system prompt", _v(d.system_prompt)),
        (
            "engine version / git commit",
            f"{_v(d.engine_version)} / {_v(d.git_commit)}"
            if not d.imported_from
            else f"{_v(d.code_version)} (an import)",
        ),
        (
            "machine",
            (f"host {_v(d.host)}, " if ctx.include_host else "host not included (--include-host), ")
            + f"device {_v(d.device)}",
        ),
        ("generations / tokens", f"{d.n_generations:,} / {d.n_tokens:,}"),
        (
            "wall time",
            NR if d.wall_s is None else f"{d.wall_s:,.0f} s (first record to last generation)",
        ),
    ]
    models = [
        [
            cell(m.name),
            cell(no_path(_v(m.source))),
            cell(_v(m.variant)),
            cell(_v(m.dtype)),
            cell(_v(m.device)),
            cell(_v(m.backend) + ("" if not m.backend_version else f" {m.backend_version}")),
            cell(_v(m.weights_sha256)),
            cell(num(m.num_parameters) if m.num_parameters else NR),
        ]
        for m in d.models
    ]
    tables = [
        Table("Run", ["setting", "value"], [text_row(k, v) for k, v in facts]),
        Table(
            "Models",
            ["model", "source", "variant", "dtype", "device", "backend", "weights sha256", "parameters"],
            models,
            "weights sha256: the digest of the weight files when the run recorded one",
        ),
    ]
    return Section(
        "design",
        "Design: how the run was made",
        [],
        tables=tables,
        warnings=list(d.warnings),
        methods=(
            "Coupled mode: every model decodes with the same Gumbel noise, keyed by (seed, prompt, "
            "repeat, step, token), so the models' samples are coupled through the Gumbel-max "
            "structural causal model; independent mode: each model has its own seed."
        )
        if "coupled" in d.modes
        else "",
        references=[ref.COUPLED] if "coupled" in d.modes else [],
    )


def harness_paired_section(ctx: RunContext) -> Section | None:
    """Runs without coupled generations (imported logs): the paired test and the planner's MDE."""
    if "coupled" in ctx.summary.modes or ctx.paired_accuracy is None:
        return None
    pa = ctx.paired_accuracy
    p = pa.paired
    (a, b) = pa.models
    decided = p.ci_low > 0 or p.ci_high < 0
    rows = [
        text_row(
            "difference A − B",
            with_ci(p.diff, p.ci_low, p.ci_high, signed=True) + ("*" if decided else ""),
        ),
        text_row("p-value (paired t over questions)", f"{p.p_value:.3g}"),
        text_row("questions × repeats", f"{p.n_questions:,} × {p.n_repeats}"),
        text_row("correlation of the per-question scores", num(p.corr)),
        text_row(f"minimum detectable effect ({p.power:.0%} power, α {1 - p.level:.2f})", num(p.mde, 4)),
    ]
    plan = [[cell(num(r.get("repeats"))), cell(num(r.get("questions")))] for r in pa.plan]
    return Section(
        "harness_paired",
        f"Paired comparison: {a} vs {b}",
        [
            f"{a} − {b} = {p.diff:+.3f}, 95% CI [{p.ci_low:+.3f}, {p.ci_high:+.3f}]: "
            + ("decided." if decided else "not decided (the interval includes 0).")
            + " With these questions the smallest difference this comparison detects at "
            f"{p.power:.0%} power is {p.mde:.3f}."
        ],
        tables=[
            Table(
                "Paired test",
                ["quantity", "value"],
                rows,
                "* the 95% interval excludes 0" if decided else None,
            ),
            Table(
                f"Questions needed to detect a difference of {pa.target_mde:g}",
                ["repeats", "questions"],
                plan,
            ),
        ],
        methods=(
            "Both models answered the same questions, so the comparison pairs them by question: the "
            "mean of the per-question differences with a t interval over questions (METHODS 7.1), and "
            "the planner's minimum detectable effect from its standard error and power."
        ),
        references=[ref.METHODS_CLUSTERED],
    )


def _benchmark_tables(b) -> list[Table]:
    vs, sd = b.variance_saving, b.saving_detail
    rows = [
        text_row("mean per-question covariance (coupled)", num(b.mean_covariance_coupled, 4)),
        text_row(
            "median Var(A − B) coupled / independent",
            f"{num(b.median_var_diff_coupled, 4)} / {num(b.median_var_diff_independent, 4)}",
        ),
    ]
    if vs is not None:
        rows.append(
            text_row(
                "variance saving (headline)", f"{pct(vs.saving)} [{pct(vs.ci_low)}, {pct(vs.ci_high)}]"
            )
        )
    rows.append(text_row(f"paper's curve saving at error {sd.error:.4f}", pct(sd.saving)))
    for mode, pdiff in b.paired.items():
        rows.append(
            text_row(
                f"paired difference ({mode})",
                with_ci(pdiff.diff, pdiff.ci_low, pdiff.ci_high, signed=True)
                + f", p = {pdiff.p_value:.3g}",
            )
        )
    pl = b.planner
    plan = pd.DataFrame([r for r in pl.mde_plans if r.get("mode") in ("coupled", "independent")])
    out = [Table("Coupled vs independent", ["quantity", "value"], rows)]
    if not plan.empty:
        out.append(
            frame_table(
                plan[[c for c in ("mode", "repeats", "questions", "fits") if c in plan]],
                f"Planner: questions to detect a difference of {pl.target_mde:g} at {pl.power:.0%} power",
                footnote=pl.headline,
            )
        )
    return out


def benchmark_section(ctx: RunContext) -> Section | None:
    b = ctx.benchmark
    if b is None:
        return None
    a, c = b.models
    med = {"coupled": b.median_var_diff_coupled, "independent": b.median_var_diff_independent}
    var_curves = {
        m: k
        for m, k in (("coupled", b.kde.var_diff_coupled), ("independent", b.kde.var_diff_independent))
        if k is not None
    }
    curve = pd.DataFrame(b.error_curve)
    step = max(1, len(curve) // 12)
    figs = [
        Figure(
            "covariance",
            kde_figure(
                {"coupled": b.kde.covariance_coupled},
                {"coupled": b.mean_covariance_coupled},
                title="Per-question covariance of the two models' scores (coupled)",
                xaxis="covariance",
                marker_label="mean",
            ),
        ),
        Figure(
            "var_diff",
            kde_figure(
                var_curves,
                med,
                title="Per-question variance of the difference",
                xaxis="Var(A − B)",
                marker_label="median",
            ),
        ),
        Figure(
            "error_curve",
            error_curve_figure(b.error_curve, b.saving_detail.error, b.saving_detail),
            frame_table(
                curve.iloc[::step][[c for c in ("n", "coupled", "independent") if c in curve]],
                f"Mean absolute error of the estimated difference vs samples (every {step}th size)",
                digits=4,
            ),
        ),
    ]
    return Section(
        "benchmark",
        f"Coupled vs independent: {a} vs {c}",
        [
            f"{b.n_questions:,} questions × {b.n_repeats} repeats; {b.n_resamples:,} resamples per "
            f"size, seed {b.seed}."
        ],
        figures=figs,
        tables=_benchmark_tables(b),
        warnings=[str(w) for w in b.warnings],
        methods=(
            "Per question, the covariance of the two models' scores over repeats and the variance of "
            "their difference in each mode (kernel density estimates; variances reflected at 0). The "
            "error curve resamples n (question, repeat) samples without replacement and measures the "
            "mean absolute error of the estimated difference, the same permutations for both modes; the "
            "paper's saving reads both curves at one error level. The headline saving is 1 − "
            "SE²_coupled / SE²_independent of the paired difference over questions with a studentised "
            "interval; the planner predicts the questions a target difference needs from the variance "
            "components (METHODS 7.1)."
        ),
        references=[ref.COUPLED, ref.METHODS_CLUSTERED],
    )


def winrates_section(ctx: RunContext) -> Section | None:
    v = ctx.winrates
    if v is None:
        return None
    g0 = v.groups[0]
    res = v.results[g0]
    from engine.analysis.winrates import matrix_of

    models, M = matrix_of(res)
    figs = [
        Figure(
            "winrate_matrix",
            heatmap_figure(M, models, title=f"Win-rate of row over column ({g0})"),
        ),
        Figure(
            "winrate_pairs",
            pair_bars_figure(v.pairs, groups=v.groups),
            frame_table(
                v.pairs[[c for c in ["pair", *v.groups, "stars"] if c in v.pairs]],
                "Per-pair win-rates (the figure's numbers)",
            ),
        ),
    ]
    tables = [
        frame_table(
            v.table,
            "Average win-rate with 95% CI and rank-set per group",
            footnote=ref.WINRATE_DEFINITION,
        )
    ]
    tables += [
        frame_table(df, f"Bradley-Terry (Davidson ties) and Elo, {g}") for g, df in v.ratings.items()
    ]
    warns = [str(w) for r in v.results.values() for w in r.warnings]
    return Section(
        "winrates",
        f"Win-rates, Bradley-Terry and Elo (the verdicts of judge {ctx.judges[0]})",
        [v.source_note],
        figures=figs,
        tables=tables,
        warnings=list(dict.fromkeys(warns)),
        methods=(
            f"{ref.WINRATE_DEFINITION[0].upper()}{ref.WINRATE_DEFINITION[1:]}. "
            f"{res.ci_method}. Average win-rate: mean over opponents ({res.average_ci_method}). "
            "Bradley-Terry strengths with Davidson ties and Elo-scale ratings, each with a "
            f"prompt-cluster bootstrap interval; ranks from {res.rank_method}. Coupled vs independent "
            "per pair: a t test paired by prompt with Westfall-Young max-T adjusted p-values."
        ),
        references=[ref.COUPLED, ref.METHODS_WINRATES, ref.DAVIDSON, ref.WESTFALL_YOUNG],
    )


def multigen_section(ctx: RunContext) -> Section | None:
    mgs = ctx.multigen
    if not mgs:
        return None
    figs, flagged = [], []
    rows = []
    for m, r in mgs.items():
        pts = pd.DataFrame([vars(p) for p in r.prompts])
        figs.append(
            Figure(
                f"datamap_{m}",
                datamap_figure(
                    pts,
                    r.thresholds.p_max,
                    r.thresholds.s_min,
                    title=f"Data map: {m} ({r.mode}, k = {r.k})",
                ),
            )
        )
        rows.append(
            [
                cell(m),
                cell(with_ci(r.score.mu, r.score.ci_low, r.score.ci_high), r.score.mu),
                cell(f"[{r.bootstrap.ci_low:.3f}, {r.bootstrap.ci_high:.3f}]"),
                cell(f"{r.score.var_within:.2e} / {r.score.var_between:.2e}"),
                cell(num(r.consistency_mean), r.consistency_mean),
                cell(num(r.n_flagged), r.n_flagged),
            ]
        )
        flagged += [
            [
                cell(m),
                cell(p.prompt_id),
                cell(p.subject or "-"),
                cell(num(p.p_correct, 2), p.p_correct),
                cell(num(p.consistency), p.consistency),
            ]
            for p in r.prompts
            if p.flagged
        ][:15]
    first = next(iter(mgs.values()))
    tables = [
        Table(
            "Score with k generations per prompt",
            [
                "model",
                "score [95% t CI]",
                "bootstrap 95% CI",
                "variance within / between",
                "mean consistency S",
                "flagged prompts",
            ],
            rows,
        ),
        Table(
            "Flagged prompts (first 15 per model): rarely correct yet consistent",
            ["model", "prompt", "subject", "P(correct)", "S"],
            flagged,
            f"flagged: P(correct) <= {first.thresholds.p_max} and S >= {first.thresholds.s_min} with an "
            "actual answer repeated: candidates for a wrong gold label or an ambiguous question",
        ),
    ]
    return Section(
        "multigen",
        "Multiple generations and the data map",
        [f"Clusters: {first.clusters_source}."],
        figures=figs,
        tables=tables,
        methods=(
            "P(correct) per prompt is the share of its k generations scored correct; the score's "
            "variance splits into within-prompt (sampling) and between-prompt parts, unbiased, and its "
            "interval is a t interval with Var(mu) = sigma²/n (a prompt bootstrap beside it). Semantic "
            "consistency S = Σ Prop log Prop over the prompt's answer clusters; the data map plots "
            "P(correct) against S."
        ),
        references=[ref.MULTIGEN],
    )


def _stored_command(command: list[str]) -> list[str]:
    """The run's stored generate command as arguments to paste: every path reduced to its file name,
    the database named as the report names it, ``python -m engine`` in front when it was stored
    without."""
    args = [no_path(c) for c in command]
    return args if args[0].startswith(("python", "coupled-eval")) else ["python", "-m", "engine", *args]


def reproduce_section(ctx: RunContext) -> Section:
    """The commands that regenerate (or re-import), rescore and re-report the run. Each is built as a
    list of arguments and joined with ``shlex.join``: a name from data is one quoted argument, so pasting
    the block into a shell runs nothing else; no path of the machine that made the report appears."""
    d = ctx.design
    db = ["--db", ctx.db_label]
    engine_cmd = ["python", "-m", "engine"]
    cmds: list[list[str]] = []
    paras = [
        "The run's settings are stored with it; these commands regenerate, rescore and re-report it "
        "(the same seed gives the same tokens on the same backend, dtype and device)."
    ]
    if d.command:  # as stored by generate: ["python", "-m", "engine", "generate", ...]
        cmds.append(_stored_command(d.command))
    elif not d.imported_from and d.repeats:
        cmds.append(
            [*engine_cmd, "generate", "--models", *(m.name for m in d.models)]
            + ["--dataset", d.dataset.dataset_id if d.dataset else "DATASET"]
            + ["--repeats", str(d.repeats), "--temperature", str(d.temperature)]
            + ["--max-new-tokens", str(d.max_new_tokens), "--modes", *d.modes]
            + ["--seed", str(d.seed), "--run-id", d.run, *db]
        )
    if not ctx.scored:  # a judged run: its verdicts and labels, as the report reads them
        for what in ("judge-audit", "run-ranksets"):
            cmds.append([*engine_cmd, what, "--run", d.run, "--judge", ctx.judges[0], *db])
    elif not d.imported_from:
        cmds.append([*engine_cmd, "score", "--run", d.run, "--rule", ctx.summary.rule, *db])
    else:
        files = [no_path(s) for s in d.imported_sources]
        paras = [
            f"Imported from {d.imported_from}"
            + (
                f": re-import the same logs ({', '.join(files)}; give each its folder on your machine) "
                "and report them in one command"
                if files
                else ": the logs it was imported from were not recorded"
            )
            + "."
        ]
        if files:
            cmds.append([*engine_cmd, "report", *files, "--name", d.run, *db, "--out", "report.html"])
    opts = (
        (["--models", ",".join(ctx._models)] if ctx._models else [])
        + (["--alpha", f"{ctx.alpha:g}"] if ctx.alpha != 0.05 else [])
        + (["--seed", str(ctx.seed)] if ctx.seed else [])
    )
    if ctx.scored:
        cmds.append([*engine_cmd, "summary", "--run", d.run, *db])
    cmds.append([*engine_cmd, "report", "--run", d.run, *db, *opts, "--out", "report.html"])
    return Section(
        "reproduce", "Reproduce the run and this report", paras, code=[shlex.join(c) for c in cmds]
    )
