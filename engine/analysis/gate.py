"""Analysis layer of the release gate: stored data -> engine.stats -> a frozen result.

A release gate for CI (analysis layer; docs/GATE.md): is the candidate B non-inferior to the
baseline A by margin M on a scored run? ``engine gate`` exits 0 (non-inferior), 1 (worse by more than
the margin) or 3 (undecided, with the planner's estimate of how many more questions).

Two targets (docs/METHODS.md 8.3), never mixed up:
- a finished run (generated, imported, harness logs): the fixed-n t interval of METHODS 7.1 for
  Δ = acc(B) − acc(A) on questions like these (questions as the unit, repeats averaged);
- a ``generate --until`` run: the anytime-valid confidence sequence of METHODS 8.2 for Δ_N, the
  difference the full benchmark would give, over the questions scored so far in the stored random
  order: valid whenever the gate is asked, however often (a CI job polling a live run).

Reads: :func:`engine.store.scores.pair_scores` and the run's stored question order.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from engine.analysis.result_base import ToDict
from engine.errors import UserError
from engine.stats import gate as G
from engine.stats import sequential as SQ
from engine.stats.paired_difference import paired_diff_ci

FIXED = "fixed-n t interval over questions (METHODS 7.1): about questions like these"
ANYTIME = "anytime-valid confidence sequence (METHODS 8.2): about this benchmark's N questions (Δ_N)"


@dataclass(frozen=True)
class GateDecision(ToDict):
    """``engine gate --json``: the decision, its interval for B − A and what it is about."""

    run: str
    mode: str
    rule: str  # the scoring rule
    baseline: str  # A
    candidate: str  # B
    margin: float
    alpha: float
    method: str  # FIXED or ANYTIME
    difference: float  # B − A on the questions used
    lower: float
    upper: float
    n_questions: int  # questions used
    n_total: int | None  # the benchmark's questions (a --until run), else None
    decision: str  # non-inferior | worse | undecided
    exit_code: int  # 0 | 1 | 3
    questions_needed: int | None  # planner: total questions for a decision at this estimate
    more_questions: int | None  # questions_needed - n_questions (None: not reachable)
    text: str

    @property
    def label(self) -> str:
        return f"{self.candidate} − {self.baseline}"

    def frame(self) -> pd.DataFrame:
        """One row: the decision and its interval (the dashboard's and the report's table)."""
        row = {k: v for k, v in self.to_dict().items() if k != "text"}
        return pd.DataFrame([row])

    def command(self, db_label: str | None = None) -> str:
        """The ``engine gate`` command that gives this decision (for a CI job; a decision made with
        ``anytime=False`` on a ``--until`` run also needs ``--fixed-n``)."""
        parts = ["python", "-m", "engine", "gate", "--run", self.run]
        parts += [
            "--baseline",
            self.baseline,
            "--candidate",
            self.candidate,
            "--margin",
            f"{self.margin:g}",
        ]
        if self.alpha != 0.05:
            parts += ["--alpha", f"{self.alpha:g}"]
        parts += ["--mode", self.mode, "--rule", self.rule]
        if db_label:
            parts += ["--db", db_label]
        return " ".join(shlex.quote(p) for p in parts)


def _pair_matrix(df: pd.DataFrame, a: str, b: str, order: list[str] | None = None) -> pd.DataFrame:
    """Per question (stored order when given, else the order of the scores) d = mean over the repeats
    both have of B − A; rows of questions either model lacks are dropped (a live run: NaN from the first
    unscored question on)."""
    wide = df.pivot_table(index="prompt_id", columns=["model", "repeat"], values="score")
    reps = sorted(set(wide[a].columns) & set(wide[b].columns))
    if not reps:
        raise UserError(f"{a!r} and {b!r} share no scored repeat")
    d = (wide[b][reps] - wide[a][reps]).mean(axis=1, skipna=False)
    if order is not None:
        d = d.reindex(order)
    return d.to_frame("d")


def _text(res: dict) -> str:
    a, b, m = res["baseline"], res["candidate"], res["margin"]
    ci = f"{res['difference']:+.4f} [{res['lower']:+.4f}, {res['upper']:+.4f}]"
    head = {
        G.NON_INFERIOR: f"PASS: {b} is non-inferior to {a} by margin {m:g}: B − A = {ci}, "
        f"whole interval above −{m:g}",
        G.WORSE: f"FAIL: {b} is worse than {a} by more than {m:g}: B − A = {ci}, "
        f"whole interval below −{m:g}",
        G.UNDECIDED: f"UNDECIDED: B − A = {ci} contains −{m:g}",
    }[res["decision"]]
    tail = f" ({res['n_questions']:,} questions; {res['method']})"
    if res["decision"] == G.UNDECIDED:
        need, more, total = res["questions_needed"], res["more_questions"], res["n_total"]
        if need is None:
            tail += "; the estimate sits on the margin: no number of questions decides at this estimate"
        elif total is not None and need > total:
            tail += (
                f"; about {need:,} questions would be needed, more than the benchmark's {total:,}: "
                "it cannot decide at this margin"
            )
        elif res["method"] == ANYTIME:
            tail += (
                f"; the fixed-n planner estimates at least {more:,} more questions ({need:,} in all; "
                "a confidence sequence needs somewhat more)"
            )
        else:
            tail += f"; the planner estimates about {more:,} more questions ({need:,} in all)"
    if res["n_total"] is not None and res["n_questions"] == res["n_total"]:
        tail += f"; all {res['n_total']:,} questions used: the interval is the full-run difference Δ_N"
    return head + tail


def gate(
    db: str | os.PathLike,
    run: str,
    baseline: str,
    candidate: str,
    margin: float,
    alpha: float = 0.05,
    mode: str | None = None,
    rule: str | None = None,
    anytime: bool | None = None,
) -> GateDecision:
    """The gate's decision on ``run`` (module docstring). ``anytime`` None: the confidence sequence when
    the run was started with ``--until``, else the fixed-n interval; True / False force one (True needs
    an ``--until`` run).

    Raises:
        UserError: an unknown run, model or mode, a bad margin or alpha, fewer than 2 common questions.
    """
    from engine.store.runs import run_record
    from engine.store.scores import pair_scores, run_rule

    G.check_margin(margin)
    alpha = SQ.check_alpha(alpha)
    if baseline == candidate:
        raise UserError(f"--baseline and --candidate must differ, both are {baseline!r}")
    seq = run_record(db, run).config.get("sequential")
    live = bool(seq) if anytime is None else anytime
    if live and not seq:
        raise UserError(
            f"run {run!r} was not started with --until: no stored order, no confidence sequence"
        )
    rule = run_rule(db, run, [baseline, candidate], rule or (seq or {}).get("score_rule"))
    _, df = pair_scores(db, [baseline, candidate], None, run, rule)
    df = df[df["score"].notna()]
    modes = sorted(df["mode"].unique())
    mode = mode or ("coupled" if "coupled" in modes else modes[0] if modes else "coupled")
    if mode not in modes:
        raise UserError(
            f"run {run!r} has no {mode!r} scores of both models; modes: {', '.join(modes) or 'none'}"
        )
    df = df[df["mode"] == mode]
    order = [str(p) for p in (seq or {}).get("order", [])] if live else None
    d_all = _pair_matrix(df, baseline, candidate, order)["d"].to_numpy(float)
    if live:
        seen = int(np.argmax(np.isnan(d_all))) if np.isnan(d_all).any() else d_all.size
        d, n_total = d_all[:seen], len(order or [])
    else:
        d, n_total = d_all[np.isfinite(d_all)], None
    if d.size < 2:
        raise UserError(
            f"run {run!r}: {d.size} question(s) scored for both models; the gate needs at least 2"
        )
    if live:
        cs = SQ.SequentialCS(int(n_total or d.size), alpha)
        cs.update(d)
        lower, upper = cs.current
        method = ANYTIME
    else:
        p = paired_diff_ci(d[:, None], np.zeros((d.size, 1)), alpha=alpha)
        lower, upper = float(p["ci_low"]), float(p["ci_high"])
        method = FIXED
    decision = G.decide(lower, upper, margin)
    need = G.questions_needed(float(d.mean()), float(d.var(ddof=1)), margin, alpha)
    more = max(need - d.size, 0) if need is not None and decision == G.UNDECIDED else None
    out = GateDecision(
        run=run,
        mode=str(mode),
        rule=str(rule),
        baseline=baseline,
        candidate=candidate,
        margin=float(margin),
        alpha=float(alpha),
        method=method,
        difference=float(d.mean()),
        lower=float(lower),
        upper=float(upper),
        n_questions=int(d.size),
        n_total=n_total,
        decision=decision,
        exit_code=G.EXIT_CODES[decision],
        questions_needed=need if decision == G.UNDECIDED else None,
        more_questions=more,
        text="",
    )
    return replace(out, text=_text(out.to_dict()))
