"""Statistics layer of the sequential evaluation: pure functions of numbers, no I/O.

Anytime-valid evaluation: the betting confidence sequence for sampling without replacement.

docs/METHODS.md section 8. A benchmark is a finite population of N questions; taken in a uniformly
random order, the paired differences d_i ∈ [-1, 1] (section 7.1) give, after every question, an
interval for the full-benchmark difference Δ_N = (1/N) Σ d_i that holds simultaneously over all
times: a run may be watched continuously and stopped at a data-dependent time.

Everything works on x = (d + 1)/2 ∈ [0, 1] and the grid m = 0, 1/B, …, 1 (grid = B + 1 points);
bounds are returned on the Δ scale (Δ = 2m − 1). The log-capital of the two hedged processes is
kept per grid point, so :class:`SequentialCS` updates in O(batch × active grid points). Grid points
that can no longer move the running intersection are dropped from the active window (exact, see
:meth:`SequentialCS._narrow`); on the rare path where the sequence misses, the class recomputes on
the full grid from its history so that the current interval is exact too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from engine.errors import UserError
from engine.stats.maxt import check_alpha as _maxt_check_alpha

TRUNCATION = 0.5  # c of METHODS 8.2: λ⁺ ≤ c/μ_t(m), λ⁻ ≤ c/(1 − μ_t(m))
_CHUNK = 256  # questions per vectorised block (memory: chunk × active grid points)
_FIRST_CHUNK = 8  # block size at the start; blocks grow with t up to _CHUNK


def check_alpha(alpha: float) -> float:
    """α as a float in (0, 1), else a one-line :class:`UserError` naming it (the rank-sets' check)."""
    return float(_maxt_check_alpha(alpha))


def _check_d(d) -> np.ndarray:
    d = np.asarray(d, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(d)) or np.any(np.abs(d) > 1.0 + 1e-12):
        bad = d[~(np.isfinite(d) & (np.abs(d) <= 1.0 + 1e-12))][0]
        raise UserError(f"paired differences must lie in [-1, 1], got {bad!r}")
    return np.clip(d, -1.0, 1.0)


class SequentialCS:
    """Incremental betting confidence sequence for the mean of a finite population (METHODS 8.2).

    Estimator: x = (d+1)/2; K_t(m) = max(K⁺_t(m), K⁻_t(m))/2 with predictable-mixture bets;
    C_t = [min A_t − 1/B, max A_t + 1/B] ∩ logical bounds, A_t = {m : K_t(m) ≤ 1/α}; running
    intersection. Guarantee: P(∀ t ≤ N : Δ_N ∈ [lower_t, upper_t]) ≥ 1 − α for a uniformly random
    order (Ville's inequality on the without-replacement martingale). Paper: Waudby-Smith & Ramdas,
    NeurIPS 2020 / JRSS-B 2023 (reference code: ``confseq.betting.hedged_cs``).

    Args:
        N: population size (questions in the benchmark); alpha in (0, 1); grid: B + 1 points (≥ 3).
    Attributes:
        t: questions seen; lower, upper: the running intersection on the Δ scale (lower > upper
        means the sequence missed); current: the interval to show (the running intersection, or
        on a miss the current C_t without the intersection, or the logical bounds where C_t is empty
        too; never empty); missed: lower > upper;
        current_path: (lower, upper) of that current interval (no intersection) after each question of the
        last :meth:`update`, Δ scale: exact from where the sequence missed (what is shown there; the
        class then works on the full grid), before that possibly clipped to the active grid window.
    """

    def __init__(self, N: int, alpha: float = 0.05, grid: int = 2001):
        if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 1:
            raise UserError(f"N (population size) must be a positive integer, got {N!r}")
        if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)) or grid < 3:
            raise UserError(f"grid must be an integer >= 3, got {grid!r}")
        self.N, self.alpha, self.B = int(N), check_alpha(alpha), int(grid) - 1
        self._m = np.arange(self.B + 1, dtype=np.float64) / self.B
        self._log_thr = math.log(2.0 / self.alpha)  # K ≤ 1/α  ⟺  max(log K⁺, log K⁻) ≤ log(2/α)
        self._lam_num = 2.0 * math.log(2.0 / self.alpha)  # λ_t numerator (bets at α/2 each side)
        self._reset(full=False)

    def _reset(self, full: bool) -> None:
        self.t, self._S, self._ss, self._sig2_prev = 0, 0.0, 0.0, 0.25
        self._logKp = np.zeros(self.B + 1)
        self._logKm = np.zeros(self.B + 1)
        self._lo, self._hi, self._full = 0, self.B + 1, full
        self._hist: list[np.ndarray] = []
        self._run = (0.0, 1.0)  # running intersection, μ scale
        self._cur = (0.0, 1.0)  # current C_t, μ scale
        self._block_cur = (np.empty(0), np.empty(0))  # current C_t after each question of the last block
        self.current_path = (np.empty(0), np.empty(0))

    # ------------------------------------------------------------------ public
    @property
    def lower(self) -> float:
        return 2.0 * self._run[0] - 1.0

    @property
    def upper(self) -> float:
        return 2.0 * self._run[1] - 1.0

    @property
    def missed(self) -> bool:
        return self._run[0] > self._run[1]

    @property
    def current(self) -> tuple[float, float]:
        lo, up = self._cur if self.missed else self._run
        return 2.0 * lo - 1.0, 2.0 * up - 1.0

    def update(self, d_batch) -> tuple[np.ndarray, np.ndarray]:
        """Add the next questions' paired differences; return (lower, upper), each (len(d_batch),),
        the running-intersection bounds on the Δ scale after each of them."""
        d = _check_d(d_batch)
        if self.t + d.size > self.N:
            raise UserError(f"{self.t + d.size} questions seen but the population has N = {self.N}")
        x = (d + 1.0) / 2.0
        outs, curs, i = [], [], 0
        while i < x.size:  # small blocks while the window is wide, so it narrows early
            size = min(_CHUNK, max(_FIRST_CHUNK, self.t))
            outs.append(self._advance(x[i : i + size]))
            curs.append(self._block_cur)
            i += size
        if not outs:
            self.current_path = (np.empty(0), np.empty(0))
            return np.empty(0), np.empty(0)
        lo = np.concatenate([o[0] for o in outs])
        up = np.concatenate([o[1] for o in outs])
        self.current_path = (
            2.0 * np.concatenate([c[0] for c in curs]) - 1.0,
            2.0 * np.concatenate([c[1] for c in curs]) - 1.0,
        )
        return 2.0 * lo - 1.0, 2.0 * up - 1.0

    # ------------------------------------------------------------------ internals
    def _bets(self, x: np.ndarray):
        """Per-question scalars of the block: j, S_{j−1}, S_j, λ_j and the new running sums."""
        j = self.t + np.arange(1, x.size + 1, dtype=np.float64)
        S = self._S + np.cumsum(x)
        S_prev = np.concatenate(([self._S], S[:-1]))
        mu_hat = np.minimum((0.5 + S) / (j + 1.0), 1.0)
        ss = self._ss + np.cumsum((x - mu_hat) ** 2)
        sig2 = (0.25 + ss) / (j + 1.0)
        sig2_prev = np.concatenate(([self._sig2_prev], sig2[:-1]))
        lam = np.sqrt(self._lam_num / (j * np.log1p(j) * sig2_prev))
        return j, S_prev, S, lam, ss[-1], sig2[-1]

    def _advance(self, x: np.ndarray):
        j, S_prev, S, lam, ss_last, sig2_last = self._bets(x)
        lo, hi = self._lo, self._hi
        m = self._m[lo:hi]
        rem = self.N - j + 1.0
        mu = np.multiply.outer(self.N / rem, m)
        mu -= (S_prev / rem)[:, None]  # μ_j(m) = (N m − S_{j−1}) / (N − j + 1)
        in_range = mu >= 0.0  # once out of [0, 1], μ_j(m) stays out
        in_range &= mu <= 1.0
        with np.errstate(divide="ignore", invalid="ignore"):  # out-of-range points: K = ∞ anyway
            diff = np.subtract(x[:, None], mu)
            f = np.divide(TRUNCATION, mu)
            np.minimum(f, lam[:, None], out=f)  # λ⁺_j(m)
            f *= diff
            logKp = np.cumsum(np.log1p(f, out=f), axis=0, out=f)
            g = np.subtract(1.0, mu, out=mu)  # mu is not needed after this
            np.divide(TRUNCATION, g, out=g)
            np.minimum(g, lam[:, None], out=g)  # λ⁻_j(m)
            g *= diff
            np.negative(g, out=g)
            logKm = np.cumsum(np.log1p(g, out=g), axis=0, out=g)
        logKp += self._logKp[lo:hi]
        logKm += self._logKm[lo:hi]
        np.maximum(logKp, logKm, out=diff)
        inA = np.less_equal(diff, self._log_thr, out=np.empty(diff.shape, bool))
        inA &= in_range
        has = inA.any(axis=1)
        if not self._full and not np.all(has | self._no_point_outside(S_prev, j, lo, hi)):
            return self._recompute_full(x)
        first = np.argmax(inA, axis=1)
        last = inA.shape[1] - 1 - np.argmax(inA[:, ::-1], axis=1)
        step = 1.0 / self.B
        c_lo = np.where(has, np.maximum(0.0, m[first] - step), 0.0)  # empty A_t: [0, 1] (confseq)
        c_up = np.where(has, np.minimum(1.0, m[last] + step), 1.0)
        c_lo = np.maximum(c_lo, S / self.N)  # logical bounds
        c_up = np.minimum(c_up, (S + self.N - j) / self.N)
        r_lo = np.maximum.accumulate(np.concatenate(([self._run[0]], c_lo)))[1:]
        r_up = np.minimum.accumulate(np.concatenate(([self._run[1]], c_up)))[1:]
        if not self._full and np.any(r_lo > r_up):
            return self._recompute_full(x)
        self._logKp[lo:hi], self._logKm[lo:hi] = logKp[-1], logKm[-1]
        self.t += x.size
        self._S, self._ss, self._sig2_prev = float(S[-1]), float(ss_last), float(sig2_last)
        self._hist.append(x)
        # shown where the running intersection is empty: C_t, or where C_t itself is empty (its betting
        # set lies outside this question's logical bounds) the logical bounds: never an empty interval
        empty = c_lo > c_up
        s_lo = np.where(empty, S / self.N, c_lo)
        s_up = np.where(empty, (S + self.N - j) / self.N, c_up)
        self._run, self._cur = (float(r_lo[-1]), float(r_up[-1])), (float(s_lo[-1]), float(s_up[-1]))
        self._block_cur = (s_lo, s_up)
        self._narrow()
        return r_lo, r_up

    def _no_point_outside(self, S_prev, j, lo: int, hi: int) -> np.ndarray:
        """(b,) bool: no grid point outside the window [lo, hi) has μ_j(m) ∈ [0, 1], i.e. an empty
        A_j in the window is the true (empty) A_j: the in-range m interval is [S_{j−1}/N,
        (S_{j−1} + N − j + 1)/N]; it is either inside the window (half a step of slack) or holds no
        grid point at all (near t = N it is narrower than a step)."""
        a, b = S_prev / self.N, (S_prev + self.N - j + 1.0) / self.N
        half = 0.5 / self.B
        inside = (a >= self._m[lo] - half) & (b <= self._m[hi - 1] + half)
        no_point = np.ceil(a * self.B - 1e-9) > np.floor(b * self.B + 1e-9)
        return inside | no_point

    def _narrow(self) -> None:
        """Drop grid points that cannot move the running intersection again.

        A_t is a grid interval (K⁺ is non-increasing and K⁻ non-decreasing in m, and μ_t(m) ∈ [0, 1]
        is an interval). Keeping the points m ≥ lower − 2/B: if min A_t is below the window, the
        window's first point is in A_t and gives a candidate ≤ lower − 1/B, which the running max
        ignores; if A_t lies wholly outside the window, the block sees an empty set and the class
        recomputes on the full grid (that path is a miss). Same on the upper side.
        """
        if self._full:
            return
        lo = int(math.floor(self._run[0] * self.B)) - 2
        hi = int(math.ceil(self._run[1] * self.B)) + 3
        self._lo, self._hi = max(self._lo, lo, 0), min(self._hi, hi, self.B + 1)

    def _recompute_full(self, x: np.ndarray):
        """Replay the history and this block on the full grid (paths where the CS misses)."""
        hist = self._hist + [x]
        self._reset(full=True)
        outs = [self._advance(h) for h in hist]
        return outs[-1]


def confidence_sequence(
    d, N: int, alpha: float = 0.05, grid: int = 2001
) -> tuple[np.ndarray, np.ndarray]:
    """Betting confidence sequence for Δ_N = (1/N) Σ_{i≤N} d_i from the first len(d) questions.

    Estimator and guarantee: :class:`SequentialCS` (METHODS 8.2): P(∀t: Δ_N ∈ [lower_t, upper_t])
    ≥ 1 − α when d is in a uniformly random order.

    Args:
        d: (T,) paired differences in [-1, 1] in the random order, T ≤ N; N; alpha in (0, 1);
        grid: B + 1 grid points.
    Returns:
        (lower, upper): each (T,), the running-intersection bounds on the Δ scale after each
        question (lower > upper on a path where the sequence missed).
    """
    return SequentialCS(N, alpha=alpha, grid=grid).update(d)


def t_interval(d, alpha: float = 0.05) -> tuple[float, float, float]:
    """Fixed-n paired t interval of METHODS 7.1 on the given questions: (Δ̂, low, high).

    Δ̂ = mean d, SE = sd(d; ddof 1)/sqrt(n), Δ̂ ± t_{n−1, 1−α/2} SE. Not valid for a data-dependent
    stopping time (shown beside the CS for reference only). NaN bounds for n < 2.
    """
    d = np.asarray(d, dtype=np.float64)
    if d.size == 0:
        return math.nan, math.nan, math.nan
    est = float(d.mean())
    if d.size < 2:
        return est, math.nan, math.nan
    half = float(sps.t.ppf(1 - alpha / 2, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size))
    return est, est - half, est + half


# ----------------------------------------------------------------------------- several models


def pairs_of(k: int) -> list[tuple[int, int]]:
    """The P = k(k−1)/2 unordered pairs (i, j), i < j, in a fixed order."""
    return [(i, j) for i in range(k) for j in range(i + 1, k)]


def pair_alpha(alpha: float, k: int) -> float:
    """Per-pair level α/P, P = k(k−1)/2 (union bound: the family stays anytime-valid, METHODS 8.3)."""
    P = k * (k - 1) // 2
    if P < 1:
        raise UserError(f"a sequential comparison needs at least 2 models, got {k}")
    return check_alpha(alpha) / P


class PairwiseCS:
    """One :class:`SequentialCS` per pair of k models at level α/P (METHODS 8.3).

    ``update(scores)`` takes (b, k) per-question mean scores in [0, 1] (model i − model j is
    pair (i, j)'s d) and returns (lower, upper), each (b, P), Δ scale, pairs in :func:`pairs_of` order;
    ``current_path()`` gives the current C_t of the same questions.
    """

    def __init__(self, k: int, N: int, alpha: float = 0.05, grid: int = 2001):
        self.k, self.pairs = int(k), pairs_of(int(k))
        a = pair_alpha(alpha, self.k)
        self.cs = [SequentialCS(N, alpha=a, grid=grid) for _ in self.pairs]

    @property
    def t(self) -> int:
        return self.cs[0].t

    def update(self, scores) -> tuple[np.ndarray, np.ndarray]:
        s = np.asarray(scores, dtype=np.float64)
        if s.ndim != 2 or s.shape[1] != self.k:
            raise UserError(f"scores must be (questions, {self.k}), got shape {s.shape}")
        res = [c.update(s[:, i] - s[:, j]) for c, (i, j) in zip(self.cs, self.pairs)]
        return np.stack([r[0] for r in res], axis=1), np.stack([r[1] for r in res], axis=1)

    def current_path(self) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper), each (b, P): every pair's current C_t (no running intersection) after each
        question of the last :meth:`update` (SequentialCS.current_path)."""
        return (
            np.stack([c.current_path[0] for c in self.cs], axis=1),
            np.stack([c.current_path[1] for c in self.cs], axis=1),
        )


def decided(lower, upper) -> np.ndarray:
    """Per pair: is the sign of Δ_N established? The one "decided" predicate of the product.

    decided = (lower > 0 or upper < 0) and lower ≤ upper, elementwise on running-intersection bounds.
    A missed sequence (lower > upper: the running intersection is empty, METHODS 8.2) is never decided,
    whatever the signs of its bounds. Args: lower, upper: broadcastable arrays (Δ scale). Returns: bool
    array of their broadcast shape (a 0-d array for scalars).
    """
    lo, up = np.asarray(lower, float), np.asarray(upper, float)
    return ((lo > 0) | (up < 0)) & (lo <= up)


def decided_sign(lower, upper) -> np.ndarray:
    """Per pair: +1 where :func:`decided` with A − B > 0, −1 where decided with A − B < 0, else 0."""
    lo = np.asarray(lower, float)
    return np.where(decided(lower, upper), np.where(lo > 0, 1, -1), 0)


def sequential_ranksets(lower, upper, k: int) -> np.ndarray:
    """Sequential rank-sets from pairwise CSs (METHODS 8.3), rank 1 = best.

    rank-set of i = [1 + #{j : CS(j − i) > 0}, k − #{j : CS(i − j) > 0}], a pair counting only where it
    is :func:`decided` (a missed pair establishes nothing, so a rank-set is never inverted).
    Args: lower, upper: (P,) bounds of pair (i, j) = model i − model j, :func:`pairs_of` order; k.
    Returns: (k, 2) int array of [best, worst] ranks. Guarantee: every model's rank lies in its
    set at every time, simultaneously, with probability ≥ 1 − α (the pairs are at α/P).
    """
    sign = decided_sign(lower, upper)
    above = np.zeros((k, k), bool)  # above[i, j]: i established better than j
    for p, (i, j) in enumerate(pairs_of(k)):
        above[i, j] = sign[p] > 0
        above[j, i] = sign[p] < 0
    return np.stack([1 + above.sum(axis=0), k - above.sum(axis=1)], axis=1)


def logical_bounds(d_sum, t, N: int) -> tuple[np.ndarray, np.ndarray]:
    """What any data of this size prove about Δ_N, whatever the unseen questions (METHODS 8.2).

    With t questions seen, D_t = Σ_{i≤t} d_i and N − t unseen d ∈ [−1, 1]:
    Δ_N ∈ [(D_t − (N − t))/N, (D_t + (N − t))/N]; at t = N the point Δ_N. Args: d_sum, t:
    broadcastable arrays; N. Returns: (lower, upper) on the Δ scale.
    """
    D, t = np.asarray(d_sum, float), np.asarray(t, float)
    return (D - (N - t)) / N, (D + (N - t)) / N


# ----------------------------------------------------------------------------- stop rules


@dataclass(frozen=True)
class StopRule:
    """When to stop (METHODS 8.3): the first of the chosen conditions that holds; always at t = N.

    decided: every pair's CS excludes 0; width: every CS narrower than W (Δ scale); budget: n questions.
    Text form: comma-separated ``decided``, ``width:W``, ``budget:N`` (e.g. ``decided,budget:2000``).
    """

    decided: bool = False
    width: float | None = None
    budget: int | None = None

    @classmethod
    def parse(cls, text: str) -> StopRule:
        decided, width, budget = False, None, None
        allowed = "allowed: decided, width:W (0 < W <= 2), budget:N (N >= 1), comma-separated"
        parts = [p.strip() for p in str(text).split(",") if p.strip()]
        if not parts:
            raise UserError(f"empty stop rule {text!r}; {allowed}")
        for p in parts:
            name, _, val = p.partition(":")
            name = name.strip().lower()
            if name == "decided" and not val:
                decided = True
            elif name == "width" and val:
                width = _parse_width(val, allowed)
            elif name == "budget" and val:
                budget = _parse_budget(val, allowed)
            else:
                raise UserError(f"unknown stop rule {p!r}; {allowed}")
        return cls(decided=decided, width=width, budget=budget)

    def check(self, N: int) -> StopRule:
        if self.budget is not None and self.budget > N:
            raise UserError(
                f"budget:{self.budget} exceeds the {N} questions of the population (allowed: 1..{N})"
            )
        return self

    def __str__(self) -> str:
        parts = (
            (["decided"] if self.decided else [])
            + ([f"width:{self.width:g}"] if self.width is not None else [])
            + ([f"budget:{self.budget}"] if self.budget is not None else [])
        )
        return ",".join(parts)

    def holds(self, lower, upper, t) -> np.ndarray:
        """(T,) bool: does the rule hold after question t? lower/upper (T,) or (T, P); t (T,)."""
        lo, up = np.atleast_1d(np.asarray(lower, float)), np.atleast_1d(np.asarray(upper, float))
        if lo.ndim == 1:
            lo, up = lo[:, None], up[:, None]
        t = np.asarray(t)
        out = np.zeros(lo.shape[0], bool)
        for part in self.fired_parts(lo, up, t).values():
            out |= part
        return out

    def fired_parts(self, lower, upper, t) -> dict[str, np.ndarray]:
        """Per rule component (its text, e.g. ``width:0.6``), (T,) bool: does it hold after question t?

        lower/upper (T, P) running-intersection bounds; t (T,). A missed pair (lower > upper) satisfies
        neither ``decided`` (:func:`decided`) nor ``width`` (an empty intersection has no width): a
        missed run goes on to its budget or N, where the full-run value is known.
        """
        lo, up = np.asarray(lower, float), np.asarray(upper, float)
        out: dict[str, np.ndarray] = {}
        if self.decided:
            out["decided"] = np.all(decided(lo, up), axis=1)
        if self.width is not None:
            out[f"width:{self.width:g}"] = np.all((lo <= up) & (up - lo < self.width), axis=1)
        if self.budget is not None:
            out[f"budget:{self.budget}"] = np.asarray(t) >= self.budget
        return out

    def fired(self, lower, upper, t: int) -> tuple[str, ...]:
        """The components that hold after question t (lower/upper: (P,) bounds there), in rule order."""
        lo = np.asarray(lower, float).reshape(1, -1)
        up = np.asarray(upper, float).reshape(1, -1)
        return tuple(k for k, v in self.fired_parts(lo, up, np.array([t])).items() if v[0])


def _parse_width(val: str, allowed: str) -> float:
    try:
        w = float(val)
    except ValueError:
        raise UserError(f"bad width {val!r}; {allowed}") from None
    if not 0.0 < w <= 2.0 or not math.isfinite(w):
        raise UserError(f"width:{val} cannot fire or is out of range; {allowed}")
    return w


def _parse_budget(val: str, allowed: str) -> int:
    try:
        n = int(val)
    except ValueError:
        raise UserError(f"bad budget {val!r}; {allowed}") from None
    if n < 1:
        raise UserError(f"budget:{val} cannot fire; {allowed}")
    return n


def first_stop(rule: StopRule, lower, upper, t0: int = 0) -> int | None:
    """The first question count n (1-based, t0 + index + 1) at which ``rule`` holds, else None.

    Args: rule; lower, upper: (T,) or (T, P) bounds after questions t0+1 .. t0+T; t0: questions before.
    """
    lo = np.asarray(lower, float)
    t = t0 + np.arange(1, lo.shape[0] + 1)
    hit = rule.holds(lower, upper, t)
    idx = np.flatnonzero(hit)
    return int(t[idx[0]]) if idx.size else None


def question_order(n: int, seed: int) -> np.ndarray:
    """The uniformly random order of n questions for ``seed`` (METHODS 8.1): a permutation of range(n)
    from np.random.default_rng(seed). Live ``--until`` runs and replays use this one function."""
    return np.random.default_rng(int(seed)).permutation(int(n))
