"""Analysis layer of the judge audit: stored data -> engine.stats -> a frozen result.

Judge audit of a run (docs/METHODS.md 9.2): judge vs human agreement, Cohen's kappa, Gwet's AC1 and
Krippendorff's alpha (sensitivity / specificity when the labels are binary), per-model
judge bias (PPR's rectifiers), position consistency and first-position preference, several judges'
error correlation and effective number, human-human agreement; every figure with a
prompt-clustered expanded percentile bootstrap CI (one set of seeded resamples shared by all figures).
A comparison set's audit (its own judge and human labels) is :mod:`engine.analysis.set_audit`.

Reads: :func:`engine.analysis.run_units.judge_units` (verdicts) and
:func:`engine.analysis.run_units.human_labels` (the run's human labels).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from engine.analysis import run_units as U
from engine.analysis.judge_audit_result import NONE, Estimate, JudgeBiases
from engine.analysis.judge_biases import BiasInputs, bias_inputs, judge_biases
from engine.analysis.notices import AnalysisWarning, Notice, small_sample_warning
from engine.analysis.result_base import ToDict
from engine.errors import UserError
from engine.stats import agreement as AG
from engine.stats import judge_audit as JA

MIN_UNITS = 30  # audited units below which a figure says how many more labels it needs
MIN_PER_MODEL = 10  # audited units per model for its bias
DEFAULT_BOOT = 1000
SKIP_WARN = 0.1  # a skip rate above this is said as a warning (METHODS 9.1: a selection risk)


@dataclass(frozen=True)
class LabelNeed(ToDict):
    """A figure that needs more labels: ``have`` of ``need`` units, ``more`` to go."""

    figure: str
    have: int
    need: int
    more: int

    @classmethod
    def of(cls, figure: str, have: int, need: int) -> LabelNeed | None:
        """The need of a figure with ``have`` labelled units of the ``need`` it takes; None when
        ``have >= need``."""
        return cls(figure, int(have), int(need), int(need) - int(have)) if have < need else None


@dataclass(frozen=True)
class JudgeAudit(ToDict):
    """The judge audit of one (run, judge); ``to_dict()`` is ``engine judge-audit --json``."""

    run: str | None  # None for a comparison set's audit (``set_name``)
    judge: str
    mode: str | None
    human_sets: list[str]
    judges: list[str]  # judges in the several-judges figures
    n_units: int  # units judged by ``judge``
    n_labelled: int  # units with a human label
    n_audited: int  # units with both a judge and a human label
    n_clusters: int  # prompts of the audited units
    agreement: Estimate
    kappa: Estimate
    bias: dict[str, Estimate]  # per model: judge minus human strict win-rate (> 0: judge favours it)
    position_consistency: Estimate  # units judged in both orders (all judged units, labels not needed)
    first_position_preference: Estimate  # P(first shown picked | decisive) - 1/2
    error_correlation: dict[
        str, Estimate
    ]  # "judge1 | judge2" -> Pearson correlation of e_j = 1[judge_j != human]
    mean_error_correlation: Estimate
    effective_judges: Estimate  # J / (1 + (J - 1) rho_bar)
    majority_agreement: Estimate
    human_agreement: Estimate  # on doubly labelled units
    human_kappa: Estimate
    n_boot: int
    seed: int
    conf: float
    needs: list[LabelNeed]
    warnings: list[AnalysisWarning]
    n_skipped: int = 0  # sampled units a labeller skipped (label samples of the run; METHODS 9.1)
    skip_rate: float | None = None  # skips / (skips + answers); None without label samples
    gwet_ac1: Estimate = NONE  # Gwet's AC1 over a / b / tie (robust to skewed labels)
    krippendorff_alpha: Estimate = NONE  # nominal, two coders
    binary: bool = False  # no tie from either rater on the audited units
    sensitivity: Estimate = NONE  # binary labels only: P(judge a | human a)
    specificity: Estimate = NONE  # binary labels only: P(judge b | human b)
    human_ac1: Estimate = NONE
    human_alpha: Estimate = NONE
    set_name: str | None = None  # the comparison set audited (source "set"), else None (a run)
    biases: JudgeBiases | None = None  # length bias, self-preference, drift, reported models

    def figures_table(self) -> pd.DataFrame:
        """One row per figure: figure, estimate, lower, upper, n (the page's main table)."""
        rows = [
            ("agreement (judge vs human)", self.agreement),
            ("Cohen's kappa (a / b / tie)", self.kappa),
            ("Gwet's AC1 (a / b / tie)", self.gwet_ac1),
            ("Krippendorff's alpha (nominal)", self.krippendorff_alpha),
        ]
        if self.binary:
            rows += [
                ("sensitivity, P(judge a | human a)", self.sensitivity),
                ("specificity, P(judge b | human b)", self.specificity),
            ]
        rows += [
            ("position consistency", self.position_consistency),
            ("first-position preference, P(first) - 1/2", self.first_position_preference),
            ("human-human agreement", self.human_agreement),
            ("human-human kappa", self.human_kappa),
            ("human-human AC1", self.human_ac1),
            ("human-human alpha", self.human_alpha),
        ]
        if self.error_correlation:
            rows += [
                ("mean error correlation of the judges", self.mean_error_correlation),
                ("effective number of judges", self.effective_judges),
                ("majority-of-judges agreement", self.majority_agreement),
            ]
            rows += [(f"error correlation {p}", e) for p, e in self.error_correlation.items()]
        return pd.DataFrame(
            [
                {"figure": f, "estimate": e.estimate, "lower": e.lower, "upper": e.upper, "n": e.n}
                for f, e in rows
            ]
        )

    def bias_table(self) -> pd.DataFrame:
        """Per model: bias b_m (judge minus human strict win-rate), lower, upper, n (units with the
        model)."""
        return pd.DataFrame(
            [
                {"model": m, "bias": e.estimate, "lower": e.lower, "upper": e.upper, "n": e.n}
                for m, e in self.bias.items()
            ],
            columns=["model", "bias", "lower", "upper", "n"],
        )


def _f(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def _est(iv: JA.Interval, i: int, n: int) -> Estimate:
    return Estimate(_f(iv.estimate[i]), _f(iv.lower[i]), _f(iv.upper[i]), int(n))


def _need(needs: list[LabelNeed], figure: str, have: int, need: int) -> None:
    x = LabelNeed.of(figure, have, need)
    if x is not None:
        needs.append(x)


def _several_judges(
    panel: dict[str, pd.DataFrame],
    first: pd.DataFrame,
    codes,
    W,
    C: int,
    conf: float,
    needs: list[LabelNeed],
):
    """Error correlation, effective judges and majority agreement over the ``panel`` (judge -> its
    unit frame) on units every judge and a human labelled."""
    none = Estimate(None, None, None, 0)
    judges = list(panel)
    if len(judges) < 2:
        return {}, none, none, none
    frame = first.rename(columns={"human_winner": "h"})
    for j in judges:
        ju = panel[j][[*U.KEY, "judge"]].rename(columns={"judge": j})
        frame = frame.merge(ju, on=U.KEY, how="inner")
    labels = (
        np.stack([frame[j].to_numpy(np.int64) for j in judges], axis=1)
        if len(frame)
        else np.zeros((0, len(judges)), np.int64)
    )
    h = U.codes(frame["h"]) if len(frame) else np.zeros(0, np.int64)
    cl = codes(frame["prompt_id"]) if len(frame) else np.zeros(0, np.int64)
    Fe = JA.error_features(labels, h)
    n = int(Fe[:, -1].sum())
    _need(needs, "several judges' error correlation", n, MIN_UNITS)
    iv = JA.interval(JA.cluster_sums(Fe, cl, C), W, JA.error_correlation_of_sums, conf)
    J = len(judges)
    pairs = {
        f"{judges[a]} | {judges[b]}": _est(iv, 2 + a * J + b, n)
        for a in range(J)
        for b in range(a + 1, J)
    }
    Fm = JA.agreement_features(JA.majority(labels), h)
    ivm = JA.interval(JA.cluster_sums(Fm, cl, C), W, JA.agreement_kappa_of_sums, conf)
    return pairs, _est(iv, 0, n), _est(iv, 1, n), _est(ivm, 0, int(Fm[:, -1].sum()))


def _human_human(first, second, codes, W, C: int, conf: float, needs: list[LabelNeed]):
    """Agreement, kappa, AC1 and alpha of the first and second human label of doubly labelled units:
    (interval, units)."""
    hh = first.merge(second, on=U.KEY, suffixes=("_1", "_2"))
    Fh = (
        JA.agreement_features(U.codes(hh["human_winner_1"]), U.codes(hh["human_winner_2"]))
        if len(hh)
        else np.zeros((0, 8))
    )
    n_hh = int(Fh[:, -1].sum())
    _need(needs, "human-human agreement (doubly labelled units)", n_hh, MIN_UNITS)
    cl = codes(hh["prompt_id"]) if len(hh) else np.zeros(0, np.int64)
    return JA.interval(JA.cluster_sums(Fh, cl, C), W, AG.agreement_coefficients_of_sums, conf), n_hh


def _needs_warning(needs: list[LabelNeed]) -> list[AnalysisWarning]:
    """The NEEDS_LABELS warning naming every figure short of labels ([] when none is)."""
    if not needs:
        return []
    text = "; ".join(
        f"{x.figure}: {x.have} labelled units, needs about {x.more} more (for {x.need})" for x in needs
    )
    return [AnalysisWarning(Notice.NEEDS_LABELS, text)]


def audit_units(
    run: str | None,
    judge: str,
    units: pd.DataFrame,
    labels: pd.DataFrame,
    *,
    mode: str | None = None,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    conf: float = 0.95,
    panel: dict[str, pd.DataFrame] | None = None,
    human_sets: list[str] | None = None,
    bias: BiasInputs | None = None,
) -> JudgeAudit:
    """The audit from a judge-unit frame (:func:`run_units.judge_units`) and a label frame
    (:func:`run_units.human_labels`). ``panel`` (judge -> unit frame, 2+ judges) adds the
    several-judges figures; ``bias`` the inputs of the length, self-preference and drift figures
    (:mod:`engine.analysis.judge_biases`; self-preference needs none).

    Returns:
        :class:`JudgeAudit`.
    """
    if n_boot < 1:
        raise UserError(f"--boot must be >= 1; got {n_boot}")
    if not 0 < conf < 1:
        raise UserError(f"conf must be in (0, 1); got {conf}")
    U.check_models(labels, units, run or "")
    first, second = U.first_labels(U.fill_modes(labels, units))
    df = U.merge_labels(units, first)
    ids = pd.concat([df["prompt_id"], first["prompt_id"]], ignore_index=True).astype(str)
    cats = pd.Index(sorted(pd.unique(ids)))  # sorted: the same resamples whatever the row order
    C = max(len(cats), 1)

    def codes(s: pd.Series) -> np.ndarray:
        return cats.get_indexer(s.astype(str))

    W = JA.bootstrap_weights(C, n_boot, np.random.default_rng(seed))
    cl = codes(df["prompt_id"]) if len(df) else np.zeros(0, np.int64)
    j = df["judge"].to_numpy(np.int64) if len(df) else np.zeros(0, np.int64)
    h = U.codes(df["human_winner"]) if len(df) else np.zeros(0, np.int64)
    needs: list[LabelNeed] = []
    Fa = JA.agreement_features(j, h)
    n_aud = int(Fa[:, -1].sum())
    _need(needs, "agreement and kappa", n_aud, MIN_UNITS)
    iva = JA.interval(JA.cluster_sums(Fa, cl, C), W, AG.agreement_coefficients_of_sums, conf)
    binary = AG.labels_binary(j, h)
    Fs = AG.binary_features(j, h)
    ivs = JA.interval(JA.cluster_sums(Fs, cl, C), W, AG.sensitivity_specificity_of_sums, conf)
    models = sorted(set(df.model_a) | set(df.model_b)) if len(df) else []
    mi = {m: i for i, m in enumerate(models)}
    a_idx = df.model_a.map(mi).to_numpy(np.int64) if len(df) else np.zeros(0, np.int64)
    b_idx = df.model_b.map(mi).to_numpy(np.int64) if len(df) else np.zeros(0, np.int64)
    Fb = JA.bias_features(a_idx, b_idx, j, h, len(models))
    ivb = JA.interval(JA.cluster_sums(Fb, cl, C), W, JA.bias_of_sums, conf)
    per_model = Fb[:, : len(models)].sum(axis=0)
    for m, c in zip(models, per_model):
        _need(needs, f"bias of {m}", int(c), MIN_PER_MODEL)
    Fp = JA.position_features(
        df["w_ab"].to_numpy(np.int64) if len(df) else j, df["w_ba"].to_numpy(np.int64) if len(df) else j
    )
    ivp = JA.interval(JA.cluster_sums(Fp, cl, C), W, JA.position_of_sums, conf)
    n_both = int(Fp[:, 1].sum())
    pairs, rho, jeff, maj = _several_judges(panel or {}, first, codes, W, C, conf, needs)
    ivh, n_hh = _human_human(first, second, codes, W, C, conf, needs)
    n_cl = int(pd.Series(cl[Fa[:, -1] > 0]).nunique())
    warn = [w for w in [small_sample_warning(n_cl)] if w is not None and n_aud]
    biases, bias_warn = judge_biases(judge, units, df, codes, W, C, conf, bias or BiasInputs())
    warn += bias_warn + _needs_warning(needs)
    return JudgeAudit(
        run=run,
        judge=judge,
        mode=mode,
        human_sets=list(human_sets or sorted(set(labels.get("set_name", [])))),
        judges=list(panel or [judge]),
        n_units=len(df),
        n_labelled=len(first),
        n_audited=n_aud,
        n_clusters=n_cl,
        agreement=_est(iva, 0, n_aud),
        kappa=_est(iva, 1, n_aud),
        bias={m: _est(ivb, i, int(per_model[i])) for i, m in enumerate(models)},
        position_consistency=_est(ivp, 0, n_both),
        first_position_preference=_est(ivp, 1, int(Fp[:, 3].sum())),
        error_correlation=pairs,
        mean_error_correlation=rho,
        effective_judges=jeff,
        majority_agreement=maj,
        human_agreement=_est(ivh, 0, n_hh),
        human_kappa=_est(ivh, 1, n_hh),
        n_boot=int(n_boot),
        seed=int(seed),
        conf=float(conf),
        needs=needs,
        warnings=warn,
        gwet_ac1=_est(iva, 2, n_aud),
        krippendorff_alpha=_est(iva, 3, n_aud),
        binary=binary,
        sensitivity=_est(ivs, 0, int(Fs[:, 0].sum())) if binary else NONE,
        specificity=_est(ivs, 1, int(Fs[:, 2].sum())) if binary else NONE,
        human_ac1=_est(ivh, 2, n_hh),
        human_alpha=_est(ivh, 3, n_hh),
        biases=biases,
    )


def judge_audit(
    db: str | os.PathLike,
    run: str,
    judge: str,
    human: str | None = None,
    mode: str | None = None,
    n_boot: int = DEFAULT_BOOT,
    seed: int = 0,
    conf: float = 0.95,
    judges: list[str] | None = None,
    label_count: int | None = None,
    drift: list[str] | None = None,
    self_models: list[str] | None = None,
) -> JudgeAudit:
    """The judge audit of ``run`` by ``judge`` against the run's human labels (``human``: one set;
    default every set naming the run). ``judges``: the panel of the several-judges figures
    (default every judge with verdicts on the run). ``drift``: judges whose verdicts on the same units
    are compared with ``judge``'s (a re-run at another date under another name). ``self_models``: the
    candidates of the judge's own family (default: the models whose family name is the judge's).
    ``label_count`` only keys a page's cache.

    Returns:
        :class:`JudgeAudit`.
    """
    from engine.store.db import reader
    from engine.store.runs import require_run

    with reader(db) as con:
        require_run(con, run)
    known = U.run_judges(db, run)
    if judge not in known:
        raise UserError(
            f"no verdicts of judge {judge!r} on run {run!r}; judges with verdicts: "
            f"{', '.join(known) or 'none (run engine judge first)'}"
        )
    panel = list(judges) if judges else known
    bad = [j for j in [*panel, *(drift or [])] if j not in known]
    if bad:
        raise UserError(
            f"no verdicts of judge {bad[0]!r} on run {run!r}; judges with verdicts: {', '.join(known)}"
        )
    units = U.judge_units(db, run, judge, mode)
    labels = named_set_labels(db, run, human) if human else U.human_labels(db, run)
    if mode is not None and len(labels):
        labels = labels[labels["mode"].isna() | (labels["mode"] == mode)]
    others = (
        {j: (units if j == judge else U.judge_units(db, run, j, mode)) for j in panel}
        if len(panel) > 1
        else None
    )
    res = audit_units(
        run,
        judge,
        units,
        labels,
        mode=mode,
        n_boot=n_boot,
        seed=seed,
        conf=conf,
        panel=others,
        human_sets=[human] if human else None,
        bias=bias_inputs(db, run, judge, mode, [d for d in drift or [] if d != judge], self_models),
    )
    return with_skip_rate(res, *U.label_skips(db, run, mode))


def named_set_labels(db: str | os.PathLike, run: str, name: str) -> pd.DataFrame:
    """The human labels of the source the user named (``--human SET``): the stored comparison set's rows
    when a set of that name is stored (a synced label sample's copy included: the named source is the
    source used, never its label log), else the label sample of that name read from its log. The frame
    of :func:`engine.analysis.run_units.human_labels`."""
    from engine.store import run_labels as RL
    from engine.store.comparisons import set_exists

    if not set_exists(db, name):
        return U.human_labels(db, run, name)  # a label sample that lives only in its log (or unknown)
    mode = dict(RL.run_label_sets(db, run)).get(name)
    df = RL.set_label_rows(db, name)
    df["mode"] = df["mode"].astype(object).where(df["mode"].notna(), mode)
    df["repeat"] = df["repeat"].fillna(0).astype(np.int64)
    out = df.assign(set_name=name)[[*RL.LABEL_COLUMNS, "set_name"]].astype({"human_winner": object})
    return U.canonical(out, ["human_winner"])


def with_skip_rate(res: JudgeAudit, answered: int, skipped: int) -> JudgeAudit:
    """``res`` with the label samples' skip rate, and a warning above ``SKIP_WARN`` (METHODS 9.1: a
    skipped unit stays in the sample as missing; many skips make the labelled units a selected, not a
    random, set)."""
    if answered + skipped == 0:
        return res
    rate = skipped / (answered + skipped)
    warn = list(res.warnings)
    if rate > SKIP_WARN:
        warn.append(
            AnalysisWarning(
                Notice.HIGH_SKIP_RATE,
                f"{skipped} of {answered + skipped} sampled units were "
                f"skipped ({rate:.0%}): the labelled units may not be a random sample of the run "
                "(a selection risk for the audit and for PPR)",
            )
        )
    return replace(res, n_skipped=int(skipped), skip_rate=float(rate), warnings=warn)
