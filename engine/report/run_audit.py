"""The run report's judge-audit section (docs/METHODS.md 9.2, docs/JUDGE_AUDIT.md): when the run has
LLM-judge verdicts and human labels, how far each judge agrees with the humans (agreement, Cohen's kappa,
per-model bias, position consistency, several judges' error correlation; prompt-clustered bootstrap CIs),
with the "needs N more labels" notices, and the run's PPR rank-sets (judge + human, judge only, human
only).

Numbers come from :func:`engine.analysis.judge_audit.judge_audit` (the same call as ``engine
judge-audit`` with its defaults) and :func:`engine.analysis.run_ranksets.run_ranksets` only."""

from __future__ import annotations

import shlex

from engine.figures.common import interval_figure
from engine.figures.ranks import rankset_intervals_figure
from engine.report import references as ref
from engine.report.context import RunContext, frame_table
from engine.report.model import Figure, Section, Table, cell, num

MAX_JUDGES = 3  # judges audited in the report (each judge's audit is one table)
FIGURE_KEYS = {
    "agreement (judge vs human)": "agreement",
    "Cohen's kappa (a / b / tie)": "kappa",
    "position consistency": "position_consistency",
    "first-position preference, P(first) - 1/2": "first_position_preference",
    "human-human agreement": "human_agreement",
    "human-human kappa": "human_kappa",
}


def _ci(e, lo, hi, digits: int = 3) -> str:
    if e is None:
        return "-"
    e, lo, hi = (None if x is None else round(x, digits) + 0.0 for x in (e, lo, hi))  # no "-0.000"
    return f"{e:.{digits}f}" + (
        "" if lo is None or hi is None else f" [{lo:.{digits}f}, {hi:.{digits}f}]"
    )


def _audit_table(res) -> Table:
    rows = []
    for r in res.figures_table().to_dict("records"):
        key = FIGURE_KEYS.get(r["figure"])
        est = None if r["estimate"] != r["estimate"] else r["estimate"]
        rows.append(
            [
                cell(r["figure"]),
                cell(_ci(est, r["lower"], r["upper"]), est, f"audit/{res.judge}/{key}" if key else None),
                cell(num(int(r["n"])), r["n"]),
            ]
        )
    return Table(
        f"Judge {res.judge}: agreement with the human labels ({res.n_audited:,} of {res.n_units:,} "
        f"judged units labelled, {res.n_clusters:,} prompts)",
        ["figure", f"estimate [{res.conf:.0%} CI]", "units"],
        rows,
        f"{res.conf:.0%} prompt-clustered expanded percentile bootstrap ({res.n_boot:,} resamples, seed "
        f"{res.seed}); '-': not defined on these units",
    )


def _bias_figure(res) -> Figure | None:
    b = res.bias_table().dropna(subset=["bias"])
    if b.empty:
        return None
    lo = [x if x == x else v for x, v in zip(b["lower"], b["bias"])]
    hi = [x if x == x else v for x, v in zip(b["upper"], b["bias"])]
    fig = interval_figure(
        list(b["model"]),
        list(b["bias"]),
        lo,
        hi,
        title=f"Judge {res.judge}: bias per model (judge − human win-rate)",
        yaxis="judge minus human strict win-rate",
        horizontal_line=0.0,
    )
    return Figure(
        f"audit_bias_{res.judge}",
        fig,
        frame_table(
            res.bias_table(),
            f"Judge {res.judge}: bias per model (the figure's numbers)",
            digits=3,
            footnote="> 0: the judge credits the model with more wins than the humans do (PPR's "
            "rectifier)",
        ),
    )


def _warnings(res) -> list[str]:
    """The audit's warnings, its "needs N more labels" notices one per figure (the human-human and
    several-judges figures do not depend on the judge audited: said once, without the judge's name)."""
    from engine.analysis.notices import Notice

    out = [
        f"judge {res.judge}: {w}"
        for w in res.warnings
        if getattr(w, "kind", None) != Notice.NEEDS_LABELS
    ]
    for x in res.needs:
        shared = x.figure.startswith(("human-human", "several judges"))
        out.append(
            ("" if shared else f"judge {res.judge}: ")
            + f"{x.figure}: {x.have} labelled units, needs about "
            f"{x.more} more labels (for {x.need})"
        )
    return out


def _ranksets(ctx: RunContext, judge: str) -> tuple[list[Figure], list[str], list[str]]:
    rr = ctx.run_ranksets  # the first judge's, shared with a judged run's headline
    if rr is None or rr.table.empty:
        return [], [], [] if rr is None else list(rr.notes)
    fig = rankset_intervals_figure(
        rr.table, title=f"Rank-sets of the run's models ({1 - ctx.alpha:.0%}, judge {judge})"
    )
    tab = frame_table(
        rr.table,
        f"Rank-sets by method ({rr.n_labelled:,} units with a human and a judge label of "
        f"{rr.n_units:,} judged)",
        footnote="PPR: judge verdicts on every unit, rectified "
        "by the human labels; judge only: not rectified; human only: the labelled units",
    )
    paras = [f"Label planner: {rr.plan.text}."] if rr.plan is not None else []
    return [Figure("audit_ranksets", fig, tab)], paras, list(rr.notes)


def judge_audit_section(ctx: RunContext) -> Section | None:
    """The run has judge verdicts and human labels: the audit of each judge (up to 3) and PPR
    rank-sets."""
    from engine.analysis.judge_audit import judge_audit

    judges = ctx.judges
    if not judges or ctx.label_count == 0:
        return None
    tables, figs, warns, paras = [], [], [], []
    for j in judges[:MAX_JUDGES]:
        res = ctx.attempt(f"judge audit ({j})", judge_audit, ctx.db, ctx.run, j, seed=ctx.seed)
        if res is None:
            continue
        tables.append(_audit_table(res))
        bf = _bias_figure(res)
        if bf is not None:
            figs.append(bf)
        warns += _warnings(res)
        a = res.agreement
        paras.append(
            f"Judge {j} agrees with the human labels on "
            + (
                f"{a.estimate:.1%} of {a.n:,} units ({res.conf:.0%} CI [{a.lower:.1%}, {a.upper:.1%}]), "
                f"Cohen's kappa {_ci(res.kappa.estimate, res.kappa.lower, res.kappa.upper)}."
                if a.estimate is not None and a.lower is not None and a.upper is not None
                else "no unit yet (no human label matches its verdicts)."
            )
        )
    if not tables:
        return None
    if len(judges) > MAX_JUDGES:
        paras.append(
            f"{len(judges) - MAX_JUDGES} more judge(s) not shown: "
            + shlex.join(
                ["python", "-m", "engine", "judge-audit", "--run", ctx.run, "--db", ctx.db_label]
            )
            + " --judge JUDGE"
        )
    rf, rparas, notes = _ranksets(ctx, judges[0])
    return Section(
        "judge_audit",
        "Judge audit against the human labels",
        paras + rparas,
        figures=figs + rf,
        tables=tables,
        warnings=list(dict.fromkeys(warns + notes)),
        methods=(
            "On the units with both a judge verdict and a human label: agreement (share of equal "
            "verdicts, a / b / tie) and Cohen's kappa; per model, the bias b_m = judge minus human "
            "strict win-rate (PPR's rectifier); position consistency (the same verdict in both "
            "presentation orders) and first-position preference; with several judges, the correlation "
            "of their errors and the effective number of judges; on doubly labelled units, human-human "
            "agreement. Every interval is an expanded percentile bootstrap over prompts (clusters; the "
            "win-rates' rule), one set of seeded resamples for all figures. A figure on fewer units "
            "than it needs says how many more labels it needs. Rank-sets: prediction-powered ranking "
            "(judge verdicts on every unit, rectified by the human labels), beside judge-only and "
            "human-only rank-sets."
        ),
        references=[ref.METHODS_AUDIT, ref.COHEN, ref.PPR],
    )
