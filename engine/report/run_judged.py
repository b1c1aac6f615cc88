"""The report of a judged run without scores (a chat run: its prompts have no gold answers, so it is
judged, not scored): the headline from the first judge's verdicts and the run's human labels, then the
design, the win-rates with Bradley-Terry and Elo, the judge audit with the PPR rank-sets and the label
planner, and the commands (:data:`JUDGED_SECTIONS`; a scored run has :data:`RUN_SECTIONS`).

Numbers come from :func:`engine.analysis.winrates.winrates_view` (the first judge, both presentation
orders as comparisons), :func:`engine.analysis.run_ranksets.run_ranksets` and
:func:`engine.analysis.judge_audit.judge_audit`, as ``python -m engine run-ranksets`` and ``judge-audit``
print them."""

from __future__ import annotations

from engine.report import references as ref
from engine.report.context import RunContext
from engine.report.model import Section, Table, cell, with_ci
from engine.report.run_audit import judge_audit_section
from engine.report.run_more import design_section, reproduce_section, winrates_section


def _winrate_table(ctx: RunContext) -> Table | None:
    v = ctx.winrates
    if v is None:
        return None
    g = v.groups[0]
    bt = v.ratings[g].set_index("model")
    rows = []
    for r in v.table.to_dict("records"):
        m = r["model"]
        b = bt.loc[m] if m in bt.index else None
        rows.append(
            [
                cell(m),
                cell(
                    with_ci(r[f"{g}_winrate"], r[f"{g}_ci_low"], r[f"{g}_ci_high"]),
                    r[f"{g}_winrate"],
                    f"winrate/{m}",
                ),
                cell(str(r[f"{g}_rank_set"]).replace("–", ", ").join("[]")),
                cell(
                    "-" if b is None else with_ci(b["bt_beta"], b["bt_low"], b["bt_high"], signed=True)
                ),
                cell(
                    "-"
                    if b is None or "elo" not in b
                    else with_ci(b["elo"], b["elo_low"], b["elo_high"], 0),
                    None if b is None or "elo" not in b else b["elo"],
                    f"elo/{m}",
                ),
            ]
        )
    return Table(
        f"Judge {ctx.judges[0]}: average win-rate, Bradley-Terry and Elo ({g} generations)",
        ["model", "average win-rate [95% CI]", "rank-set", "BT strength β [95% CI]", "Elo [95% CI]"],
        rows,
        f"{ref.WINRATE_DEFINITION}; every presentation order a comparison; intervals: prompt-cluster "
        "bootstrap",
    )


def judged_headline_section(ctx: RunContext) -> Section:
    """Who the judge prefers, with intervals; the PPR rank-sets that the human labels rectify; how many
    labels there are and what more would buy."""
    judge = ctx.judges[0]
    v, rr = ctx.winrates, ctx.run_ranksets
    paras = [
        f"Run {ctx.run}: {len(ctx.models)} models ({', '.join(ctx.models)}) judged pairwise by "
        f"{len(ctx.judges)} judge(s) ({', '.join(ctx.judges)}). It has no scores (a chat run has no "
        f"gold answers: it is judged, not scored), so its findings are the verdicts and "
        f"{ctx.label_count:,} human labels."
    ]
    if v is not None:
        g = v.groups[0]
        top = v.table.iloc[0]
        paras.append(
            f"Judge {judge} prefers {top['model']} most often: average win-rate "
            f"{with_ci(top[f'{g}_winrate'], top[f'{g}_ci_low'], top[f'{g}_ci_high'])} (95% CI), rank-set "
            f"[{str(top[f'{g}_rank_set']).replace('–', ', ')}]."
        )
    if rr is not None and not rr.table.empty:
        ppr = rr.table[rr.table["method"] == rr.table["method"].iloc[0]]
        paras.append(
            f"Rank-sets ({ppr['method'].iloc[0]}, simultaneous {1 - ctx.alpha:.0%}, {rr.n_labelled:,} of "
            f"{rr.n_units:,} judged units with a human label): "
            + ", ".join(f"{r.model} [{r.lower}, {r.upper}]" for r in ppr.itertuples())
            + ". Their θ counts one judge label per unit (the verdict both presentation orders share, "
            "a tie when they differ), so it is not the win-rate above, which counts each order."
        )
        if rr.plan is not None:
            paras.append(f"Label planner: {rr.plan.text}.")
    elif ctx.label_count == 0:
        paras.append(
            "No human labels yet: the rank-sets are judge-only and nothing checks the judge (label a "
            f"sample: python -m engine label sample --run {ctx.run} ...)."
        )
    table = _winrate_table(ctx)
    warns = [] if v is None else [str(w) for r in v.results.values() for w in r.warnings]
    return Section(
        "headline",
        "Headline",
        paras,
        tables=[table] if table is not None else [],
        warnings=list(dict.fromkeys(warns + (list(rr.notes) if rr is not None else []))),
        methods=(
            f"Win-rates: {ref.WINRATE_DEFINITION}; the average over opponents, Bradley-Terry (Davidson "
            "ties) and Elo-scale ratings, each with a prompt-cluster bootstrap interval. Rank-sets: "
            "prediction-powered ranking (judge verdicts on every unit, rectified by the human labels)."
        ),
        references=[ref.METHODS_WINRATES, ref.PPR],
    )


# A judged run's sections, in reading order (reproduce last, as for a scored run).
JUDGED_SECTIONS = (
    judged_headline_section,
    design_section,
    winrates_section,
    judge_audit_section,
    reproduce_section,
)
