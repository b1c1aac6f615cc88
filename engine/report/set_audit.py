"""Report layer of a comparison set's judge audit: a result -> a report section.

The comparison-set report's judge-audit section (docs/JUDGE_AUDIT.md, "A comparison set"): when the
set's rows carry both a judge and a human label, how far the judge agrees with the humans (agreement,
Cohen's kappa, Gwet's AC1, Krippendorff's alpha, sensitivity / specificity for binary labels, per-model
bias, self-preference), each with its prompt-clustered bootstrap CI.

Numbers come from :func:`engine.analysis.set_audit.set_judge_audit` (the same call as ``engine
judge-audit --set NAME`` with its defaults and the report's seed)."""

from __future__ import annotations

import os
import shlex
from typing import Protocol

from engine.errors import UserError
from engine.report import references as ref
from engine.report.context import frame_table
from engine.report.model import Section
from engine.report.run_audit import _audit_table, _bias_figure, _warnings

GWET = (
    'Gwet, "Computing inter-rater reliability and its variance in the presence of high agreement", '
    "British Journal of Mathematical and Statistical Psychology 2008"
)
KRIPPENDORFF = 'Krippendorff, "Computing Krippendorff\'s Alpha-Reliability", 2011'


class SetInputs(Protocol):
    """What the section reads of :class:`engine.report.set_sections.SetContext` (which registers it)."""

    db: str | os.PathLike
    name: str
    seed: int
    n_human: int
    n_judge: int


def set_audit_section(ctx: SetInputs) -> Section | None:
    """The set has judge and human labels: the judge audit on the rows with both (None otherwise)."""
    from engine.analysis.set_audit import set_judge_audit

    if not (ctx.n_human and ctx.n_judge):
        return None
    try:
        res = set_judge_audit(ctx.db, ctx.name, seed=ctx.seed)
    except UserError:
        return None
    if res.n_audited == 0:
        return None
    a = res.agreement
    paras = [
        f"The set's judge ({res.judge}) agrees with its human labels on {a.estimate:.1%} of "
        f"{a.n:,} comparisons ({res.conf:.0%} CI [{a.lower:.1%}, {a.upper:.1%}]). Kappa, AC1 and alpha "
        "side by side say whether a low kappa is disagreement or labels skewed towards one answer."
        if a.estimate is not None and a.lower is not None and a.upper is not None
        else f"The set's judge ({res.judge}): no comparison with both labels."
    ]
    figs = [f for f in [_bias_figure(res)] if f is not None]
    tables = [_audit_table(res)]
    if res.biases is not None and res.biases.self_preference:
        tables.append(
            frame_table(
                res.biases.self_preference_table(),
                f"Self-preference of judge {res.judge}: a model of its family against the others",
                digits=3,
                footnote="difference > 0: the judge favours its own family beyond how it treats the "
                "others (judge-minus-human bias of the model minus the others' mean)",
            )
        )
    return Section(
        "set_judge_audit",
        "Judge audit against the human labels",
        paras,
        figures=figs,
        tables=tables,
        warnings=list(dict.fromkeys(_warnings(res))),
        methods=(
            "On the comparisons with both a judge and a human label (rows of one unit grouped when the "
            "set records repeat, presentation order or labeller; otherwise each row its own comparison): "
            "agreement, Cohen's kappa, Gwet's AC1 and Krippendorff's alpha over a / b / tie, "
            "sensitivity and specificity when neither rater used tie, per-model bias b_m = judge minus "
            "human strict win-rate. Every interval is an expanded percentile bootstrap over prompts "
            "(clusters), one set of seeded resamples for all figures. Reproduce: python -m engine "
            f"judge-audit --set {shlex.quote(ctx.name)} --seed {ctx.seed}."
        ),
        references=[ref.METHODS_AUDIT, ref.COHEN, GWET, KRIPPENDORFF],
    )
