"""Racing many models: stop generating for the ones already beaten (pure statistics, no I/O).

docs/METHODS.md section 8.4. k models answer one seeded question order; every pair of models has
the betting confidence sequence of section 8.2 at level α/P, P = k(k − 1)/2 (8.3), updated while
both of its models are *active*; when one of them leaves, the pair's sequence stays as it was (a
stopped CS is still valid). Goals: ``best`` (a model leaves as soon as another is shown better),
``top:M`` (a model leaves rejected once M models are shown better, accepted once k − M are shown
worse) and ``ranked`` (a model leaves once every pair it belongs to is decided).

Every interval and every decision comes from :class:`engine.stats.sequential.SequentialCS` (one per
pair, fed the pair's paired differences in the order): a pair counts as decided only when its CS
excludes 0, has not missed (its running intersection is not empty) and first excluded 0 before
question N (a stop at N is "all N questions used", never a decision: METHODS 8.3 "two targets").
What makes a round of 30 models (435 pairs) cheap is a *screen* (:class:`PointScreen`): the same
log-capital, kept for every active pair at only the two grid points next to a target (0 for the
decisions), vectorised over pairs. Because K⁺_t(m) is non-increasing and K⁻_t(m) non-decreasing in
m, the CS's lower end is above the target exactly when K⁺ rejects the grid point just above it
(or the logical bound does), so the screen flags every pair the CS can decide. A flagged pair a
decision needs is confirmed exactly: the flag is the CS's decision whenever some grid point stayed
in every C_s (then A_s was never empty and the running intersection is not: no miss), an O(t) check
of a few points; where none did, the pair's :class:`SequentialCS` decides. Reported intervals are
SequentialCS's. They agree in tests/test_racing.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.errors import UserError
from engine.stats.sequential import (
    TRUNCATION,
    SequentialCS,
    check_alpha,
    pair_alpha,
    pairs_of,
    sequential_ranksets,
)

GOAL_KINDS = ("best", "top", "ranked")
FIRST_ROUND = 16  # default schedule: rounds of 16, 32, 64, 128, then 256 questions
MAX_ROUND = 256
_TOL = 1e-12  # logical bounds vs a target: rounding, not evidence
GRID = 2001  # grid points of every pair's CS (SequentialCS's default: B = 2000 steps)


# ----------------------------------------------------------------------------- goal and rounds


@dataclass(frozen=True)
class Goal:
    """What the race decides: ``best`` | ``top:M`` | ``ranked`` (METHODS 8.4)."""

    kind: str
    m: int | None = None

    @classmethod
    def parse(cls, text: str) -> Goal:
        allowed = "allowed: best, top:M (1 <= M < number of models), ranked"
        name, sep, val = str(text).strip().lower().partition(":")
        if name in ("best", "ranked") and not sep:
            return cls(name)
        if name == "top" and sep:
            try:
                m = int(val)
            except ValueError:
                raise UserError(f"bad goal {text!r}: M must be an integer; {allowed}") from None
            if m < 1:
                raise UserError(f"bad goal {text!r}: M must be >= 1; {allowed}")
            return cls("top", m)
        raise UserError(f"unknown goal {text!r}; {allowed}")

    def check(self, k: int) -> Goal:
        if self.kind == "top" and self.m is not None and self.m >= k:
            raise UserError(
                f"goal top:{self.m} with {k} models decides nothing (every model is in the top "
                f"{self.m}); allowed: top:1 .. top:{k - 1}"
            )
        return self

    def __str__(self) -> str:
        return f"top:{self.m}" if self.kind == "top" else self.kind


def round_ends(N: int, round_size: int | None = None, budget: int | None = None) -> list[int]:
    """The question counts at which rounds end: ``round_size`` each, or by default 16, 32, 64, 128,
    then 256 questions a round (small rounds first, so clearly worse models leave early); never past
    ``budget`` questions (the last round is cut at it) nor N.

    Raises: UserError for a round size < 1 or a budget below the first round (it would decide nothing).
    """
    if round_size is not None and (
        isinstance(round_size, bool) or not isinstance(round_size, int) or round_size < 1
    ):
        raise UserError(f"--round-size must be an integer >= 1, got {round_size!r}")
    first = min(round_size or FIRST_ROUND, N)
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < first:
            raise UserError(
                f"--budget {budget!r} is below one round ({first} questions): nothing could be "
                f"decided; allowed: {first} .. {N} questions"
            )
        if budget > N:
            raise UserError(
                f"--budget {budget} exceeds the {N} questions of the dataset (allowed: {first} .. {N})"
            )
    cap = min(N, budget or N)
    ends, end, size = [], 0, first
    while end < cap:
        end = min(end + size, cap)
        ends.append(end)
        if round_size is None:
            size = min(2 * size, MAX_ROUND)
    return ends


# ----------------------------------------------------------------------------- the screen


class PointScreen:
    """Each pair's betting CS (METHODS 8.2) tracked at two grid points only, vectorised over pairs.

    For a target μ* (x scale, x = (d + 1)/2) with grid step 1/B, the CS's lower end exceeds μ* at
    time t  ⟺  [the grid point a = (⌊μ* B⌋ + 1)/B is rejected on the low side: μ_t(a) < 0 or
    log K⁺_t(a) > log(2/α)] or the logical bound S_t/N > μ* (given a non-empty A_t; K⁺ is
    non-increasing in m, so every m ≤ a is rejected with a). Symmetrically the upper end is below μ*
    ⟺ b = (⌈μ* B⌉ − 1)/B is rejected by K⁻ (or μ_t(b) > 1), or (S_t + N − t)/N < μ*. The flags
    are cumulative (the running intersection). Same bets as :class:`SequentialCS` (λ_t, truncation
    c = 1/2), so it agrees with it except on paths where A_t is empty (a miss, probability ≤ α),
    where the screen flags and the exact CS decides.

    Args:
        N: population size; alpha: the per-pair level (α/P); targets: (P, T) targets on the Δ scale
        (0 for decisions; Δ_N per pair for a coverage check; NaN: no logical-bound flags); grid:
        B + 1 points; points: (P, T) grid points (x scale) tracked on both sides instead of the two
        next to each target (then low | high says the point has left A_t).
    Attributes:
        low, high: (P, T) bool: the CS's lower end has been above / upper end below the target;
        first_low, first_high: (P, T) the question count at which that first happened (0: never);
        t: (P,) questions each pair has seen.
    """

    def __init__(self, N: int, alpha: float, targets, grid: int = GRID, points=None):
        tg = np.atleast_2d(np.asarray(targets, dtype=np.float64))
        self.N, self.B = int(N), int(grid) - 1
        P, T = tg.shape
        mu = (tg + 1.0) / 2.0
        self._mu = mu
        if points is None:
            self._a = (np.floor(mu * self.B + 1e-9) + 1.0) / self.B  # grid point just above μ*
            self._b = (np.ceil(mu * self.B - 1e-9) - 1.0) / self.B  # grid point just below μ*
        else:  # explicit grid points (x scale), both sides: low | high = "the point left A_t"
            self._a = self._b = np.atleast_2d(np.asarray(points, dtype=np.float64))
        self._thr = math.log(2.0 / alpha)
        self._lam_num = 2.0 * math.log(2.0 / alpha)
        self.t = np.zeros(P, dtype=np.int64)
        self._S, self._ss, self._sig2 = np.zeros(P), np.zeros(P), np.full(P, 0.25)
        self._logKp, self._logKm = np.zeros((P, T)), np.zeros((P, T))
        self.low, self.high = np.zeros((P, T), bool), np.zeros((P, T), bool)
        self.first_low = np.zeros((P, T), dtype=np.int64)
        self.first_high = np.zeros((P, T), dtype=np.int64)

    def update(self, sel, d) -> None:
        """Add the next questions' paired differences d (b, len(sel)) ∈ [−1, 1] of pairs ``sel``
        (which must all have seen the same number of questions)."""
        sel = np.asarray(sel, dtype=np.int64)
        d = np.asarray(d, dtype=np.float64)
        if sel.size == 0 or d.shape[0] == 0:
            return
        t0 = int(self.t[sel[0]])
        if np.any(self.t[sel] != t0) or t0 + d.shape[0] > self.N:
            raise ValueError("the pairs of one update must share their question count, within N")
        x = (d + 1.0) / 2.0
        j = t0 + np.arange(1, x.shape[0] + 1, dtype=np.float64)[:, None]  # (b, 1)
        S = self._S[sel] + np.cumsum(x, axis=0)
        S_prev = np.concatenate((self._S[sel][None], S[:-1]))
        mu_hat = np.minimum((0.5 + S) / (j + 1.0), 1.0)
        ss = self._ss[sel] + np.cumsum((x - mu_hat) ** 2, axis=0)
        sig2 = (0.25 + ss) / (j + 1.0)
        sig2_prev = np.concatenate((self._sig2[sel][None], sig2[:-1]))
        lam = np.sqrt(self._lam_num / (j * np.log1p(j) * sig2_prev))[:, :, None]  # (b, p, 1)
        rem = (self.N - j + 1.0)[:, :, None]
        with np.errstate(divide="ignore", invalid="ignore"):  # out-of-range points are masked
            mu_a = (self.N * self._a[sel][None] - S_prev[:, :, None]) / rem  # μ_j(a), (b, p, T)
            fp = np.log1p(np.minimum(lam, TRUNCATION / mu_a) * (x[:, :, None] - mu_a))
            logKp = self._logKp[sel] + np.cumsum(fp, axis=0)
            mu_b = (self.N * self._b[sel][None] - S_prev[:, :, None]) / rem
            fm = np.log1p(-np.minimum(lam, TRUNCATION / (1.0 - mu_b)) * (x[:, :, None] - mu_b))
            logKm = self._logKm[sel] + np.cumsum(fm, axis=0)
        target = self._mu[sel][None]
        low = (
            (mu_a < 0.0)
            | ((mu_a <= 1.0) & (logKp > self._thr))
            | ((S / self.N)[:, :, None] > target + _TOL)
        )
        high = (mu_b > 1.0) | ((mu_b >= 0.0) & (logKm > self._thr))
        high |= ((S + self.N - j) / self.N)[:, :, None] < target - _TOL
        self._flag(sel, low, self.low, self.first_low, t0)
        self._flag(sel, high, self.high, self.first_high, t0)
        self._S[sel], self._ss[sel], self._sig2[sel] = S[-1], ss[-1], sig2[-1]
        self._logKp[sel], self._logKm[sel] = logKp[-1], logKm[-1]
        self.t[sel] += x.shape[0]

    @staticmethod
    def _flag(sel, now, flags, first, t0: int) -> None:
        hit = now.any(axis=0)  # (p, T)
        new = hit & ~flags[sel]
        at = t0 + 1 + np.argmax(now, axis=0)
        first[sel] = np.where(new, at, first[sel])
        flags[sel] |= hit


# ----------------------------------------------------------------------------- the race


@dataclass(frozen=True)
class Leave:
    """A model leaving the race: who, after how many questions, why, on what evidence."""

    model: int
    t: int  # questions the model answered (it generates no more)
    status: str  # eliminated | rejected | accepted | ranked
    pairs: tuple[int, ...]  # the pairs (pairs_of order) whose CS decided it
    decided_at: tuple[int, ...]  # per evidence pair, the question at which its CS first excluded 0
    winners: tuple[int, ...]  # per evidence pair, the model shown better

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "t": self.t,
            "status": self.status,
            "pairs": list(self.pairs),
            "decided_at": list(self.decided_at),
            "winners": list(self.winners),
        }


@dataclass(frozen=True)
class RaceAnswer:
    """A race at its end (or now): the answer, every pair's CS, the rank-sets of METHODS 8.3.

    answer: goal best: the models still active (not shown worse than any other); top:M: the models
    accepted (all M when decided); ranked: the models in order of their rank-sets' lower ends.
    """

    goal: str
    k: int
    N: int
    alpha: float
    pair_alpha: float
    t: int  # questions taken (by the models active to the end)
    reason: str  # decided | budget | all N questions used | running
    answer: tuple[int, ...]
    status: tuple[str, ...]  # per model: active | eliminated | rejected | accepted | ranked
    answered: tuple[int, ...]  # per model, questions answered
    leaves: tuple[Leave, ...]
    pair_t: tuple[int, ...]  # per pair, questions its CS has seen (frozen when a model left)
    lower: tuple[float, ...]  # per pair, the CS of model i − model j (Δ scale); on a miss: C_t
    upper: tuple[float, ...]
    missed: tuple[bool, ...]
    decided: tuple[int, ...]  # per pair: +1 i better, −1 j better, 0 undecided
    ranksets: tuple[tuple[int, int], ...]

    @property
    def generations(self) -> int:
        """Questions answered, summed over models (multiply by repeats for generations)."""
        return int(sum(self.answered))

    def to_dict(self) -> dict:
        out = {k: v for k, v in vars(self).items() if k != "leaves"}
        out = {
            k: [list(x) for x in v] if k == "ranksets" else list(v) if isinstance(v, tuple) else v
            for k, v in out.items()
        }
        return {**out, "leaves": [lv.to_dict() for lv in self.leaves], "generations": self.generations}


@dataclass
class _Exact:
    """A pair's exact CS (SequentialCS), fed incrementally, with the first question it excluded 0."""

    cs: SequentialCS
    first_pos: int = 0
    first_neg: int = 0


class Race:
    """The racing state machine of METHODS 8.4 (see the module docstring).

    ``update(scores)`` takes the next questions' scores, (b, k) in [0, 1] (mean over repeats), in the
    seeded order; columns of models no longer active are ignored (NaN is fine). After each update
    (a round) the goal's decisions are taken: models leave, their pairs freeze, and ``done`` says
    whether the race is over. ``eliminate=False`` keeps every model generating (8.3's joint stop for
    the same goal: ``done`` when the goal is decided with every pair updated).

    Guarantee: with probability ≥ 1 − α every pair's CS holds at every time (union bound over P
    pairs at α/P, Ville's inequality per pair), so no model truly best (in the top M) on the full
    benchmark is ever eliminated (rejected), whatever the order of leaving.
    """

    def __init__(
        self,
        k: int,
        N: int,
        goal: Goal | str = "best",
        alpha: float = 0.05,
        grid: int = GRID,
        *,
        eliminate: bool = True,
        truth=None,
    ):
        if k < 2:
            raise UserError(f"a race needs at least 2 models, got {k}")
        self.k, self.N, self.grid = int(k), int(N), int(grid)
        self.goal = (goal if isinstance(goal, Goal) else Goal.parse(goal)).check(self.k)
        self.alpha, self.pair_alpha = check_alpha(alpha), pair_alpha(alpha, self.k)
        self.pairs = pairs_of(self.k)
        self.P = len(self.pairs)
        self._pi = np.array([p[0] for p in self.pairs], dtype=np.int64)
        self._pj = np.array([p[1] for p in self.pairs], dtype=np.int64)
        self._pidx = np.full((self.k, self.k), -1, dtype=np.int64)  # pair index of models (a, b)
        self._pidx[self._pi, self._pj] = self._pidx[self._pj, self._pi] = np.arange(self.P)
        self.eliminate = eliminate
        targets = np.zeros((self.P, 1)) if truth is None else np.stack([np.zeros(self.P), truth], 1)
        self.screen = PointScreen(self.N, self.pair_alpha, targets, grid)
        self.t = 0
        self.status = ["active"] * self.k
        self.answered = np.zeros(self.k, dtype=np.int64)
        self.leaves: list[Leave] = []
        self.reason: str | None = None
        self._blocks: list[np.ndarray] = []
        self._scores = np.empty((0, self.k))
        self._exact: dict[int, _Exact] = {}
        self._signs: dict[tuple[int, int], int] = {}
        self._screen_only = False

    # ------------------------------------------------------------------ public
    @property
    def active(self) -> list[int]:
        return [i for i, s in enumerate(self.status) if s == "active"]

    @property
    def done(self) -> bool:
        return self.reason is not None

    @property
    def pair_t(self) -> np.ndarray:
        return self.screen.t.copy()

    def covered(self) -> np.ndarray | None:
        """(P,) bool with ``truth``: has each pair's CS held Δ_N at every time so far? (Conservative:
        an empty A_t counts as a miss.)"""
        if self.screen.low.shape[1] < 2:
            return None
        return ~(self.screen.low[:, 1] | self.screen.high[:, 1])

    def update(self, scores) -> list[Leave]:
        """Add a round of questions (rows, in order); then take the goal's decisions. Returns the
        models that left in this round."""
        if self.done:
            raise RuntimeError("the race is over")
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim != 2 or s.shape[1] != self.k:
            raise UserError(f"scores must be (questions, {self.k}), got shape {s.shape}")
        if self.t + s.shape[0] > self.N:
            raise UserError(f"{self.t + s.shape[0]} questions but the population has N = {self.N}")
        act = np.array([st == "active" for st in self.status])
        if np.isnan(s[:, act]).any() or np.any((s[:, act] < 0) | (s[:, act] > 1)):
            raise UserError("scores of active models must lie in [0, 1] (no missing values)")
        s = np.where(act[None], s, np.nan)
        sel = np.flatnonzero(act[self._pi] & act[self._pj])
        self.screen.update(sel, s[:, self._pi[sel]] - s[:, self._pj[sel]])
        self._blocks.append(s)
        self._scores = np.concatenate(self._blocks)
        self.t += s.shape[0]
        self.answered[act] += s.shape[0]
        left = self._decide()
        if not self.done and self.t >= self.N:
            self.reason = "all N questions used"
        return left

    def interval(self, a: int, b: int) -> tuple[float, float, bool]:
        """The CS of model a − model b now (Δ scale, at α/P; frozen once one of them left) and
        whether it missed (then the bounds are its current C_t, never an empty interval)."""
        p = int(self._pidx[a, b])
        e = self._verify(p)
        lo, up = e.cs.current
        return (lo, up, e.cs.missed) if a < b else (-up, -lo, e.cs.missed)

    def means(self) -> np.ndarray:
        """(k,) each model's mean score over the questions it answered (NaN before the first round)."""
        if not self.t:
            return np.full(self.k, math.nan)
        return np.nansum(self._scores, axis=0) / np.maximum(self.answered, 1)

    def leader(self) -> int:
        """The active model with the highest mean score so far (ties: the lowest index)."""
        means = np.nan_to_num(self.means())
        return max(self.active or range(self.k), key=lambda m: (means[m], -m))

    def finish(self, reason: str = "budget") -> None:
        """End the race from outside (a budget reached)."""
        if not self.done:
            self.reason = reason

    def answer(self, intervals: bool = True) -> RaceAnswer:
        """The answer now (see :class:`RaceAnswer`): every pair's decision; ``intervals``: every pair's
        exact CS too (else only those already computed, NaN bounds for the others)."""
        lower, upper, missed, dec = [], [], [], []
        for p in range(self.P):
            if intervals or p in self._exact:
                e = self._verify(p)
                lo, up = e.cs.current
                lower.append(lo)
                upper.append(up)
                missed.append(e.cs.missed)
            else:
                lower.append(math.nan)
                upper.append(math.nan)
                missed.append(False)
            dec.append(self._sign(p))
        dec_arr = np.array(dec)
        ranks = sequential_ranksets(
            np.where(dec_arr > 0, 1.0, -1.0), np.where(dec_arr < 0, -1.0, 1.0), self.k
        )
        return RaceAnswer(
            goal=str(self.goal),
            k=self.k,
            N=self.N,
            alpha=self.alpha,
            pair_alpha=self.pair_alpha,
            t=self.t,
            reason=self.reason or "running",
            answer=self._answer_models(ranks),
            status=tuple(self.status),
            answered=tuple(int(a) for a in self.answered),
            leaves=tuple(self.leaves),
            pair_t=tuple(int(v) for v in self.screen.t),
            lower=tuple(float(v) for v in lower),
            upper=tuple(float(v) for v in upper),
            missed=tuple(bool(v) for v in missed),
            decided=tuple(int(v) for v in dec),
            ranksets=tuple((int(a), int(b)) for a, b in ranks),
        )

    # ------------------------------------------------------------------ exact decisions
    def _history(self, p: int, upto: int) -> np.ndarray:
        i, j = self.pairs[p]
        return self._scores[:upto, i] - self._scores[:upto, j]

    def _verify(self, p: int) -> _Exact:
        """The pair's exact CS brought up to the questions it has seen (incremental)."""
        e = self._exact.get(p)
        if e is None:
            e = self._exact[p] = _Exact(SequentialCS(self.N, alpha=self.pair_alpha, grid=self.grid))
        upto = int(self.screen.t[p])
        if e.cs.t < upto:
            start = e.cs.t
            lo, up = e.cs.update(self._history(p, upto)[start:])
            if not e.first_pos and np.any(lo > 0):
                e.first_pos = start + 1 + int(np.argmax(lo > 0))
            if not e.first_neg and np.any(up < 0):
                e.first_neg = start + 1 + int(np.argmax(up < 0))
        return e

    def _sign(self, p: int) -> int:
        """+1: model i shown better than j; −1: j better than i; 0: undecided, or a miss, or first
        excluded 0 only at question N (no sampling left: METHODS 8.3). Cached per (pair, questions)."""
        lo, hi = bool(self.screen.low[p, 0]), bool(self.screen.high[p, 0])
        if not (lo or hi):
            return 0  # the screen flags every pair the CS can decide
        if self._screen_only:
            return 1 if lo else -1
        key = (p, int(self.screen.t[p]))
        if key not in self._signs:
            self._signs[key] = self._confirm(p, lo, hi)
        return self._signs[key]

    def _confirm(self, p: int, lo: bool, hi: bool) -> int:
        """The exact decision of a flagged pair. The screen's flag is the CS's decision whenever A_t
        was never empty, and it is no miss when the running intersection is not empty: both hold
        if some grid point m* stayed in every A_s and in the (nested) logical bounds, i.e. in every
        C_s. So: try m* near the mean
        (an O(t) check of a few points); if none stayed, ask the pair's SequentialCS."""
        first = int(self.screen.first_low[p, 0] if lo else self.screen.first_high[p, 0])
        if lo != hi and first >= self.N:
            return 0  # first excluded 0 at question N: no sampling left, not a decision
        if lo != hi and self._in_every_cs(p):
            return 1 if lo else -1
        e = self._verify(p)
        if e.cs.missed:
            return 0
        if e.cs.lower > 0 and 0 < e.first_pos < self.N:
            return 1
        if e.cs.upper < 0 and 0 < e.first_neg < self.N:
            return -1
        return 0

    def _in_every_cs(self, p: int) -> bool:
        """Did one of a few grid points near the pair's mean stay in A_s at every question so far, and
        is it inside today's logical bounds? (Then it lies in every C_s: no miss, no empty A_s.)"""
        d = self._history(p, int(self.screen.t[p]))
        x_bar = (float(d.mean()) + 1.0) / 2.0
        B = self.grid - 1
        cand = np.clip((np.round(x_bar * B) + np.arange(-3, 4)) / B, 0.0, 1.0)[None]
        check = PointScreen(self.N, self.pair_alpha, np.full(cand.shape, np.nan), self.grid, points=cand)
        check.update([0], d[:, None])
        S, t = float(np.sum((d + 1.0) / 2.0)), d.size  # and inside the logical bounds now (nested)
        inside = (cand[0] >= S / self.N) & (cand[0] <= (S + self.N - t) / self.N)
        return bool(np.any(~(check.low[0] | check.high[0]) & inside))

    def _better(self, a: int, b: int) -> tuple[bool, int, int]:
        """Is model a shown better than model b? (decided, pair index, question it was decided at)."""
        p = int(self._pidx[a, b])
        ok = self._sign(p) == (1 if a < b else -1)
        return ok, p, self._decided_at(p, 1 if a < b else -1) if ok else 0

    def _flagged_better(self, a: int, b: int) -> bool:
        """The screen's (cheap) verdict: may model a be shown better than b?"""
        p = int(self._pidx[a, b])
        return bool(self.screen.low[p, 0] if a < b else self.screen.high[p, 0])

    def _shown(self, j: int, others, need: int, worse: bool) -> list[tuple[int, int]]:
        """Up to ``need`` models of ``others`` shown better than j (worse=True: shown worse than j),
        as (pair, decided_at); confirming only the screen's flagged pairs."""
        found = []
        for o in others:
            a, b = (j, o) if worse else (o, j)
            if o == j or not self._flagged_better(a, b):
                continue
            ok, p, at = self._better(a, b)
            if ok:
                found.append((p, at))
                if len(found) >= need:
                    break
        return found

    # ------------------------------------------------------------------ goals
    def _leave(self, j: int, status: str, evidence) -> Leave:
        lv = Leave(
            j,
            int(self.answered[j]),
            status,
            tuple(p for p, _ in evidence),
            tuple(a for _, a in evidence),
            tuple(self.pairs[p][0] if self._sign(p) > 0 else self.pairs[p][1] for p, _ in evidence),
        )
        if self.eliminate:
            self.status[j] = status
            self.leaves.append(lv)
        return lv

    def _decide(self) -> list[Leave]:
        step = {"best": self._decide_best, "top": self._decide_top, "ranked": self._decide_ranked}
        if not self.eliminate:  # nobody leaves: confirm with the exact CSs only once the screen
            self._screen_only = True  # says the goal is decided (the end of the joint stop)
            try:
                step[self.goal.kind]()
            finally:
                self._screen_only = False
            if self.reason is None:
                return []
            self.reason = None
        left = step[self.goal.kind]()
        return left if self.eliminate else []

    def _order_weak_first(self, models) -> list[int]:
        means = np.nan_to_num(self.means())
        return sorted(models, key=lambda m: (means[m], m))

    def _decide_best(self) -> list[Leave]:
        """A model leaves once another model still active is shown better (weakest first, so at least
        one model always stays); done when one is left."""
        left, alive = [], set(self.active)
        for j in self._order_weak_first(self.active):
            ev = self._shown(j, sorted(alive), 1, worse=False)
            if ev:
                left.append(self._leave(j, "eliminated", ev))
                alive.discard(j)
        if len(alive) == 1:
            self.reason = "decided"
        return left

    def _decide_top(self) -> list[Leave]:
        """Rejected once M models are shown better; accepted once k − M are shown worse; done when M
        are accepted (the rest rejected) or k − M rejected (the rest accepted)."""
        m, left = int(self.goal.m or 1), []
        everyone = range(self.k)
        gone = {i: s for i, s in enumerate(self.status) if s != "active"}
        for j in self._order_weak_first(self.active):
            ev = self._shown(j, everyone, m, worse=False)
            if len(ev) >= m:
                left.append(self._leave(j, "rejected", ev))
                gone[j] = "rejected"
                continue
            ev = self._shown(j, everyone, self.k - m, worse=True)
            if len(ev) >= self.k - m:
                left.append(self._leave(j, "accepted", ev))
                gone[j] = "accepted"
        accepted = sum(s == "accepted" for s in gone.values())
        rejected = sum(s == "rejected" for s in gone.values())
        if accepted >= m or rejected >= self.k - m:
            self.reason = "decided"
        return left

    def _decide_ranked(self) -> list[Leave]:
        """A model leaves once every pair it belongs to is decided; done when all have left."""
        left, n_left = [], 0
        for j in range(self.k):
            if self.status[j] != "active":
                n_left += 1
                continue
            others = [o for o in range(self.k) if o != j]
            if not all(
                self.screen.low[self._pair(j, o), 0] or self.screen.high[self._pair(j, o), 0]
                for o in others
            ):
                continue
            signs = [(self._pair(j, o), self._sign(self._pair(j, o))) for o in others]
            if all(s != 0 for _, s in signs):
                ev = [(p, self._decided_at(p, s)) for p, s in signs]
                left.append(self._leave(j, "ranked", ev))
                n_left += 1
        if n_left == self.k:
            self.reason = "decided"
        return left

    def _pair(self, a: int, b: int) -> int:
        return int(self._pidx[a, b])

    def _decided_at(self, p: int, sign: int) -> int:
        """The question at which pair p's CS first excluded 0 in direction ``sign`` (the screen's
        count: the CS's own whenever the decision is confirmed)."""
        return int(self.screen.first_low[p, 0] if sign > 0 else self.screen.first_high[p, 0])

    def _answer_models(self, ranks: np.ndarray) -> tuple[int, ...]:
        if self.goal.kind == "best":
            return tuple(self.active)
        if self.goal.kind == "top":
            acc = [i for i, s in enumerate(self.status) if s == "accepted"]
            rej = [i for i, s in enumerate(self.status) if s == "rejected"]
            if len(rej) >= self.k - int(self.goal.m or 1):  # the others are the top M
                acc = [i for i in range(self.k) if i not in rej]
            return tuple(acc)
        return tuple(sorted(range(self.k), key=lambda i: (ranks[i][0], ranks[i][1], i)))


# ----------------------------------------------------------------------------- one order, replayed


def race_scores(
    scores,
    order,
    goal: Goal | str = "best",
    alpha: float = 0.05,
    *,
    round_size: int | None = None,
    budget: int | None = None,
    eliminate: bool = True,
    truth=None,
    intervals: bool = False,
    grid: int = GRID,
) -> tuple[Race, int]:
    """Run a race over stored scores: rounds of :func:`round_ends` over ``order``.

    Args:
        scores: (N, k) per-question scores in [0, 1] (mean over repeats); order: a permutation of
        range(N) (:func:`engine.stats.sequential.question_order`); goal, alpha; round_size, budget:
        as :func:`round_ends`; eliminate=False: every model answers every round (8.3's joint stop
        for the same goal); truth: (P,) Δ_N per pair, to track coverage (:meth:`Race.covered`).
    Returns:
        (the race at its end, the rounds taken). ``race.answer(intervals)`` gives the answer.
    """
    s = np.asarray(scores, dtype=np.float64)
    N, k = s.shape
    race = Race(k, N, goal, alpha, grid, eliminate=eliminate, truth=truth)
    start = rounds = 0
    for end in round_ends(N, round_size, budget):
        race.update(s[np.asarray(order[start:end])])
        start, rounds = end, rounds + 1
        if race.done:
            break
    race.finish("budget")
    return race, rounds
