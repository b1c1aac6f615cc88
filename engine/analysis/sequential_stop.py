"""Analysis layer: one stop of a sequential evaluation, its numbers and its words (METHODS 8.2-8.3).

The one home of "where did the sequence stop, and what does that say": a live ``generate --until``
run (its CLI summary, ``--json``, report section and the Generate page), a replay of a stored run
(``engine sequential``, the Benchmark page's Sequential tab, the report's replay) all build a
:class:`StopState` with :func:`stop_state` and word it with :func:`stop_text` / :func:`pair_text`.

Two targets, never mixed up (METHODS 8.3). The confidence sequence is about **this benchmark**: the
full-run difference Δ_N over its N questions. The fixed-n t interval (section 7.1) is about
**questions like these**: it generalises beyond the N questions, and it is a run's headline. So:

- a stop at t = N is "all N questions used: full-run difference Δ_N", never "decided" (the CS is then
  the point Δ_N through its logical bounds: no sampling left, not evidence);
- a stop before N where the logical bounds alone exclude 0 (whatever the unseen questions, the sign
  of Δ_N is fixed) says so;
- a missed sequence (running intersection empty, probability ≤ α) is never decided: the current
  C_t is shown with a note (METHODS 8.2), and the pair establishes no rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.stats.sequential import (
    PairwiseCS,
    StopRule,
    decided,
    first_stop,
    logical_bounds,
    pair_alpha,
    pairs_of,
    sequential_ranksets,
    t_interval,
)

GRID = 2001  # grid points of the CS (B = 2000)
BLOCK = 256  # questions per CS update while looking for the stop (the rule is checked on every question)
THIS_BENCHMARK = "this benchmark's full-run difference Δ_N"
LIKE_THESE = "questions like these"
TARGET_NOTE = (
    f"The confidence sequence is about {THIS_BENCHMARK} (what the full run of all N questions would "
    f"report); the fixed-n t interval and a run's headline interval are about {LIKE_THESE} (they "
    "generalise beyond the N questions). At t = N the sequence is the point Δ_N: no sampling left, "
    "so 'decided' does not apply there."
)
OUTCOME_WORDS = {  # StopState.outcome -> a table cell
    "decided": "decided",
    "stopped": "stopped, not decided",
    "full": "all N used: Δ_N",
    "open": "rule not met",
}


@dataclass(frozen=True)
class StopState:
    """One mode's pairwise confidence sequences at a stop (or at the last question seen).

    Per-pair tuples follow :func:`engine.stats.sequential.pairs_of` (model i − model j).
    """

    N: int  # the population: questions of the benchmark
    n_seen: int  # questions looked at
    n_stop: int | None  # first question count at which the rule held (None: not in the questions seen)
    fired: tuple[str, ...]  # the rule's components that held there ("decided", "width:0.6", "budget:12")
    lower: tuple[float, ...]  # the interval shown: the running intersection, or the current C_t where
    upper: tuple[float, ...]  # that pair's sequence missed (never an empty interval); Δ scale, α/P
    missed: tuple[bool, ...]  # the running intersection is empty (probability <= α)
    decided: tuple[bool, ...]  # engine.stats.sequential.decided before N (never at t = N, never missed)
    logical: tuple[bool, ...]  # the logical bounds alone exclude 0 (the unseen questions cannot flip it)
    diff: tuple[float, ...]  # mean d over the questions used (at t = N: Δ_N)
    t_low: tuple[float, ...]  # fixed-n t interval at α/P on the same questions: NOT valid for the stop
    t_high: tuple[float, ...]
    ranksets: tuple[tuple[int, int], ...]  # sequential rank-set per model (rank 1 = best)

    @property
    def at(self) -> int:
        """The question count the numbers are read at: the stop, else the last question seen."""
        return self.n_stop or self.n_seen

    @property
    def outcome(self) -> str:
        """full: all N questions used (the target is known, nothing is 'decided'); decided: every pair
        decided before N; stopped: the rule held before N without every pair decided; open: the rule
        has not held in the questions seen."""
        if self.at >= self.N:
            return "full"
        if all(self.decided):
            return "decided"
        return "stopped" if self.n_stop is not None else "open"

    @property
    def all_decided(self) -> bool:
        return self.outcome == "decided"

    def to_dict(self, single: bool = False) -> dict:
        def one(v):
            return v[0] if single else list(v)

        return {
            "outcome": self.outcome,
            "target": THIS_BENCHMARK,
            "n": self.n_stop,
            "questions_used": self.at,
            "n_seen": self.n_seen,
            "N": self.N,
            "fired": list(self.fired),
            "decided": self.all_decided,
            "pair_decided": one(self.decided),
            "missed": any(self.missed),
            "pair_missed": one(self.missed),
            "lower": one(self.lower),
            "upper": one(self.upper),
            "logical_bounds_exclude_0": one(self.logical),
            "diff_questions_used": one(self.diff),
            "t_interval_not_valid_for_stopping": {
                "target": LIKE_THESE,
                "low": one(self.t_low),
                "high": one(self.t_high),
            },
            "ranksets": [list(r) for r in self.ranksets],
        }


@dataclass(frozen=True)
class CSPath:
    """Every pair's CS after each question: the running intersection and the current C_t, (T', P)."""

    lower: np.ndarray  # running intersection, Δ scale (lower > upper from where a sequence missed)
    upper: np.ndarray
    cur_lower: np.ndarray  # current C_t (no intersection): what is shown where the sequence missed
    cur_upper: np.ndarray
    n: int | None  # the rule's first firing (None: not in the questions, or no rule)

    def shown(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper): the running intersection, or the current C_t where it is empty (METHODS 8.2:
        never an empty interval)."""
        miss = self.lower > self.upper
        return np.where(miss, self.cur_lower, self.lower), np.where(miss, self.cur_upper, self.upper)


def cs_path(scores, N: int, alpha: float, rule: StopRule | None = None, grid: int = GRID) -> CSPath:
    """Every pair's CS (α/P each) after each question, in blocks; with a rule, up to its first firing.

    Args: scores (T, k) per-question scores in [0, 1] in the order taken (T ≤ N); N; family α; rule.
    Returns: a :class:`CSPath` of T' rows (T' = T, or up to the end of the block holding the stop).
    """
    s = np.asarray(scores, dtype=np.float64)
    pc = PairwiseCS(s.shape[1], N, alpha=alpha, grid=grid)
    parts: list[tuple[np.ndarray, ...]] = []
    n, start = None, 0
    while start < s.shape[0] and n is None:
        lo, up = pc.update(s[start : start + BLOCK])
        parts.append((lo, up, *pc.current_path()))
        if rule is not None:
            n = first_stop(rule, lo, up, t0=start)
        start += lo.shape[0]
    P = len(pc.pairs)
    cols = [np.concatenate([p[c] for p in parts]) if parts else np.empty((0, P)) for c in range(4)]
    return CSPath(cols[0], cols[1], cols[2], cols[3], n)


def stop_state(scores, N: int, rule: StopRule, alpha: float, grid: int = GRID) -> StopState:
    """Where ``rule`` first holds on these scores (or the last question), and everything shown there.

    Args: scores (T, k) per-question scores in [0, 1] in the order taken, T ≥ 1 (T ≤ N); N: the
    population; rule; family α (each pair at α/P, METHODS 8.3).
    """
    s = np.asarray(scores, dtype=np.float64)
    k = s.shape[1]
    path = cs_path(s, N, alpha, rule, grid)
    at = path.n or s.shape[0]
    run_lo, run_up = path.lower[at - 1], path.upper[at - 1]
    shown_lo, shown_up = (v[at - 1] for v in path.shown())
    used = s[:at]
    pairs = pairs_of(k)
    d_sum = np.array([float(np.sum(used[:, i] - used[:, j])) for i, j in pairs])
    l_lo, l_up = logical_bounds(d_sum, at, N)
    ts = [t_interval(used[:, i] - used[:, j], pair_alpha(alpha, k)) for i, j in pairs]
    return StopState(
        N=int(N),
        n_seen=int(s.shape[0]),
        n_stop=path.n,
        fired=rule.fired(run_lo, run_up, at) if path.n is not None else (),
        lower=tuple(float(v) for v in shown_lo),
        upper=tuple(float(v) for v in shown_up),
        missed=tuple(bool(v) for v in run_lo > run_up),
        decided=tuple(bool(v) and at < N for v in decided(run_lo, run_up)),
        logical=tuple(bool(v) for v in (l_lo > 0) | (l_up < 0)),
        diff=tuple(float(v) for v in d_sum / at),
        t_low=tuple(float(t[1]) for t in ts),
        t_high=tuple(float(t[2]) for t in ts),
        ranksets=tuple((int(a), int(b)) for a, b in sequential_ranksets(run_lo, run_up, k)),
    )


# ----------------------------------------------------------------------------- words


def fired_words(st: StopState) -> str:
    """The rule's components that held, for a table cell: "-" (none), "t = N" (a stop at N is all N
    questions used, whatever component held there), else e.g. "decided and width:0.6"."""
    if not st.fired:
        return "-"
    return "t = N" if st.outcome == "full" else " and ".join(st.fired)


def _fired_text(st: StopState) -> str:
    return " and ".join(st.fired) + f" held at question {st.at:,}" if st.fired else ""


def pair_verdict(st: StopState, p: int) -> str:
    """Pair ``p`` at the stop in a table cell ('decided' only before N and never on a miss)."""
    if st.missed[p]:
        return "missed: current C_t shown"
    if st.at >= st.N:
        return "all N used: Δ_N"
    return "decided" if st.decided[p] else "not decided"


def pair_text(st: StopState, p: int, model_a: str, model_b: str) -> str:
    """Pair ``p`` (model_a − model_b) at the stop, one line; about this benchmark's Δ_N."""
    lo, up, at, N = st.lower[p], st.upper[p], st.at, st.N
    if st.missed[p]:
        return (
            f"missed: the running intersection of {model_a} − {model_b} is empty at question {at:,} of "
            f"{N:,} (a miss, probability <= alpha); current interval [{lo:+.3f}, {up:+.3f}], not decided"
        )
    if at >= N:
        return f"all {N:,} questions used: full-run difference Δ_N = {st.diff[p]:+.3f} " + (
            "(no sampling left: the logical bounds are what exclude 0, not evidence)"
            if st.diff[p] != 0
            else "(no sampling left)"
        )
    if st.decided[p]:
        better, worse = (model_a, model_b) if lo > 0 else (model_b, model_a)
        return f"decided: {better} > {worse} at question {at:,} of {N:,}" + (
            f" (by the logical bounds: whatever the {N - at:,} unseen question(s), the sign of Δ_N is fixed)"
            if st.logical[p]
            else ""
        )
    return f"not decided: Δ_N in [{lo:+.3f}, {up:+.3f}] at question {at:,} of {N:,}"


def _verdict(st: StopState, P: int) -> str:
    if st.all_decided:
        return "decided: every pair's CS excludes 0" if P > 1 else "decided: the CS excludes 0"
    n_open = sum(not d and not m for d, m in zip(st.decided, st.missed))  # missed pairs: said after
    if not n_open:
        return "not decided"
    return (
        "not decided: the CS includes 0"
        if P == 1
        else f"not decided: {n_open} of {P} pairs' CS include 0"
    )


def stop_text(st: StopState, pairs: tuple[str, ...] | list[str], follows: bool = False) -> str:
    """One mode's stop in one sentence: where and which rule held, decided or not, about Δ_N.

    ``follows``: this mode was generated alongside another that stops the run (its own rule may not
    have stopped it).
    """
    at, N, P = st.at, st.N, len(pairs)
    if st.outcome == "full":
        value = f" = {st.diff[0]:+.4f}" if P == 1 else " (per pair below)"
        held = "; the rule first held there, where the CS is that point" if st.fired else ""
        head = (
            f"all {N:,} questions used: full-run difference Δ_N{value}{held}; no sampling left, so "
            "'decided' does not apply"
            + ("; the logical bounds are what exclude 0" if any(st.logical) else "")
        )
    elif st.n_stop is not None:
        where = (
            f"its own rule ({' and '.join(st.fired)}) held at question {at:,} of {N:,} (generated "
            "alongside: another mode stops the run)"
            if follows
            else f"stopped at question {at:,} of {N:,} ({_fired_text(st)})"
        )
        verdict = _verdict(st, P)
        logical = (
            "; the logical bounds alone exclude 0 (the unseen questions cannot change the sign)"
            if st.all_decided and all(st.logical)
            else ""
        )
        head = f"{where}; {verdict}{logical}"
    else:
        head = f"the rule has not held in the {st.n_seen:,} questions scored (of {N:,}); not decided"
    if any(st.missed):
        head += (
            f"; {sum(st.missed)} pair(s)' sequence missed (running intersection empty, probability "
            "<= alpha): the current interval is shown and the pair is not decided"
        )
    return f"{head} (about {THIS_BENCHMARK})"
