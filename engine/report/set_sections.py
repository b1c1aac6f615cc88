"""The sections of a comparison-set report (uploads, Arena imports): headline, win-rates with
Bradley-Terry, one pair per category (when the set has categories), rank-sets (human, judge, and
prediction-powered when the set has both labels), the commands. Same contract as
:mod:`engine.report.run_sections`: one builder per section, in :data:`SET_SECTIONS` order."""

from __future__ import annotations

import os
import shlex
from functools import cached_property
from pathlib import PurePath

from engine.analysis.ranksets import parse_alpha
from engine.errors import UserError
from engine.figures.common import interval_figure
from engine.figures.ranks import rankset_intervals_figure
from engine.figures.winrates import heatmap_figure, pair_bars_figure
from engine.report import references as ref
from engine.report.context import frame_table
from engine.report.model import Figure, Section, Table, cell, text_row, with_ci
from engine.report.set_audit import set_audit_section
from engine.report.set_slices import set_slices_section


class SetContext:
    """A stored comparison set's report inputs; ``label`` None: human labels when the set has any, else
    judge."""

    def __init__(
        self,
        db: str | os.PathLike,
        name: str,
        label: str | None,
        alpha: float,
        seed: int,
        models: list[str] | None,
        db_label: str | None,
    ):
        from engine.analysis.comparisons import comparison_sets

        alpha = parse_alpha(alpha)  # a UserError naming a bad one
        sets = comparison_sets(db)
        row = sets[sets["name"] == name]
        if row.empty:
            known = ", ".join(sets["name"].tolist()) or "(none)"
            raise UserError(f"unknown comparison set {name!r}; stored sets: {known}")
        rec = row.iloc[0]
        self.db, self.name, self.alpha, self.seed, self._models = (
            db,
            name,
            float(alpha),
            int(seed),
            models,
        )
        self.db_label = PurePath(db_label or str(db)).name  # a shared report names no folder
        self.n_rows, self.n_human, self.n_judge = (
            int(rec["n_rows"]),
            int(rec["n_human"]),
            int(rec["n_judge"]),
        )
        if label is None:
            label = "human" if self.n_human else "judge"
        if (label == "human" and not self.n_human) or (label == "judge" and not self.n_judge):
            raise UserError(
                f"comparison set {name!r} has no {label} labels ({self.n_human} human, "
                f"{self.n_judge} judge)"
            )
        self.label = label

    @cached_property
    def winrates(self):
        from engine.analysis.winrates import winrates_view

        return winrates_view(
            self.db, "set", self.name, label=self.label, seed=self.seed, alpha=self.alpha, elo=False
        )

    @cached_property
    def models(self) -> list[str]:
        return self._models or self.winrates.results[self.winrates.groups[0]].models

    @cached_property
    def ranksets(self):
        from engine.analysis.ranksets import ranksets_view

        method = "ppr" if self.n_human and self.n_judge and self.label == "human" else self.label
        models = tuple(self._models) if self._models else None
        try:
            return ranksets_view(
                self.db, "set", self.name, method, self.alpha, models=models, seed=self.seed
            )
        except UserError:
            if method != "ppr":
                raise
        # PPR needs comparisons with a judge label only; a set with both labels on every row has none
        self.ranksets_note = (
            "PPR needs comparisons labelled by the judge only, and every comparison of this set "
            "carries both labels: the rank-sets use the human labels; PPR on part of them: python -m "
            f"engine ranksets --set {shlex.quote(self.name)} --method ppr --human-labels N"
        )
        return ranksets_view(
            self.db, "set", self.name, "human", self.alpha, models=models, seed=self.seed
        )

    ranksets_note: str | None = None


def set_headline(ctx: SetContext) -> Section:
    v = ctx.winrates
    res = v.results[v.groups[0]]
    top = v.table.iloc[0]
    g = v.groups[0]
    rs = ctx.ranksets.result
    paras = [
        f"Comparison set {ctx.name}: {ctx.n_rows:,} pairwise comparisons of {len(res.models)} models "
        f"({ctx.n_human:,} with a human label, {ctx.n_judge:,} with a judge label); this report uses "
        f"the {ctx.label} labels.",
        f"Highest average win-rate: {top['model']}, "
        f"{with_ci(top[f'{g}_winrate'], top[f'{g}_ci_low'], top[f'{g}_ci_high'])} (95% CI), rank-set "
        f"{top[f'{g}_rank_set']}.",
        f"Rank-sets ({rs.method}, simultaneous {1 - rs.alpha:.0%}): "
        + ", ".join(
            f"{m} [{lo}, {hi}]" for m, (lo, hi) in sorted(rs.ranksets.items(), key=lambda x: x[1])
        )
        + ".",
    ]
    rows = [
        [
            cell(m),
            cell(
                with_ci(res.average[m].winrate, *res.average[m].ci),
                res.average[m].winrate,
                f"winrate/{m}",
            ),
            cell(f"[{res.average[m].rank_set[0]}, {res.average[m].rank_set[1]}]"),
        ]
        for m in v.table["model"]
    ]
    warns = [str(w) for r in v.results.values() for w in r.warnings] + [str(w) for w in rs.warnings]
    return Section(
        "headline",
        "Headline",
        paras,
        tables=[
            Table(
                "Average win-rate per model",
                ["model", "average win-rate [95% CI]", "rank-set"],
                rows,
                f"{ref.WINRATE_DEFINITION}. {res.ci_method}",
            )
        ],
        warnings=list(dict.fromkeys(warns)),
        methods="Average win-rate: the mean over opponents of the model's win-rate "
        f"({ref.WINRATE_DEFINITION}), with a prompt-cluster bootstrap interval.",
        references=[ref.METHODS_WINRATES],
    )


def set_winrates(ctx: SetContext) -> Section:
    v = ctx.winrates
    res = v.results[v.groups[0]]
    from engine.analysis.winrates import matrix_of

    models, M = matrix_of(res)
    bt = v.ratings[v.groups[0]]
    bt_fig = interval_figure(
        bt["model"].tolist(),
        bt["bt_beta"].tolist(),
        bt["bt_low"].tolist(),
        bt["bt_high"].tolist(),
        title="Bradley-Terry strength (95% CI)",
        yaxis="β (Davidson ties)",
    )
    figs = [
        Figure("winrate_matrix", heatmap_figure(M, models)),
        Figure(
            "winrate_pairs",
            pair_bars_figure(v.pairs, groups=v.groups),
            frame_table(
                v.pairs[
                    [
                        c
                        for c in ["pair", *v.groups, f"{v.groups[0]}_low", f"{v.groups[0]}_high"]
                        if c in v.pairs
                    ]
                ],
                "Per-pair win-rates (the figure's numbers)",
            ),
        ),
        Figure("bradley_terry", bt_fig, frame_table(bt, "Bradley-Terry strengths, ranks and rank-sets")),
    ]
    return Section(
        "winrates",
        "Win-rates and Bradley-Terry",
        [v.source_note, res.clustering],
        figures=figs,
        methods=(
            f"{ref.WINRATE_DEFINITION[0].upper()}{ref.WINRATE_DEFINITION[1:]}. "
            f"{res.ci_method}. Bradley-Terry with Davidson's tie parameter, fitted by maximum "
            f"likelihood; its interval a prompt-cluster bootstrap ({res.bradley_terry.ci_method}); "
            f"ranks from {res.rank_method}."
        ),
        references=[ref.METHODS_WINRATES, ref.DAVIDSON, ref.COUPLED],
    )


def set_ranksets(ctx: SetContext) -> Section:
    view = ctx.ranksets
    r = view.result
    table = view.compare if view.compare is not None else view.table
    fig = rankset_intervals_figure(table, title=f"Rank-sets ({1 - r.alpha:.0%} simultaneous)")
    cols = {
        c: c
        for c in ("method", "model", "rank", "lower", "upper", "theta", "theta_low", "theta_high")
        if c in table
    }
    counts = "; ".join(f"{m}: n = {c.n:,} human, N = {c.N:,} judge-only" for m, c in view.counts.items())
    return Section(
        "ranksets",
        "Rank-sets",
        [f"Method {r.method}; {counts}.", r.clustering, r.covariance_detail],
        figures=[
            Figure("ranksets", fig, frame_table(table[list(cols)], "Rank-sets (the figure's numbers)"))
        ],
        warnings=[str(w) for w in r.warnings]
        + list(r.notes)
        + ([ctx.ranksets_note] if ctx.ranksets_note else []),
        methods=(
            "theta = each model's win-rate against a uniformly random other model (ties: a non-win); "
            "rank-sets from the estimate and its covariance by simultaneous max-t with step-down, so "
            "every model's set holds its true rank at once with probability at least "
            f"{1 - r.alpha:.0%}. PPR combines few human labels with many judge labels (the judge's "
            "bias corrected by the human-labelled rows; lambda chosen by Algorithm 4)."
        ),
        references=[ref.PPR, ref.METHODS_RANKSETS],
    )


def set_reproduce(ctx: SetContext) -> Section:
    """The commands that print the same analyses and rebuild the report, each argument quoted
    (``shlex.join``): a set or model name from data is one argument when pasted into a shell."""
    base = ["python", "-m", "engine"]
    where = ["--set", ctx.name, "--db", ctx.db_label]
    models = ["--models", ",".join(ctx._models)] if ctx._models else []
    cmds = [
        [*base, "winrates", *where, "--label", ctx.label, *models],
        [*base, "ranksets", *where, "--method", ctx.ranksets.result.method, *models],
        [*base, "report", *where, *models, "--out", "report.html"],
    ]
    return Section(
        "reproduce",
        "Reproduce this report",
        [
            "The set is stored in the database; these commands "
            "print the same analyses and rebuild this report."
        ],
        code=[shlex.join(c) for c in cmds],
    )


SET_SECTIONS = (
    set_headline,
    set_winrates,
    set_slices_section,
    set_ranksets,
    set_audit_section,
    set_reproduce,
)


def set_sections(ctx: SetContext) -> list[Section]:
    return [s for build in SET_SECTIONS for s in [build(ctx)] if s is not None]


__all__ = ["SET_SECTIONS", "SetContext", "set_sections", "text_row"]
